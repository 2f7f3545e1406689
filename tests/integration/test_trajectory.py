import json

import numpy as np
import pytest
import torch

from nca_interp import trajectory
from nca_interp.checkpoint import save_checkpoint
from tests.conftest import tiny
from train import distill

TASK = {"name": "sokoban", "fmt": "compact", "dim_room": [6, 6], "num_boxes": 1}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from nca_interp.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    d = tmp_path_factory.mktemp("traj")
    base = save_checkpoint(d / "base", tiny(tok), tok, {"task": TASK})
    distill.main(["--student", str(base), "--out", str(d / "opd"), "--batch", "8", "--steps",
                  "4", "--save-every", "2", "--eval-every", "100", "--eval-levels", "8",
                  "--threads", "1", "--lr", "3e-3", "--context", "plan"])
    return d


def test_kl_rows_match_torch_distributions():
    """Direction and sum: KL(p || q) per row over masked tokens, against torch.distributions."""
    torch.manual_seed(0)
    p, q = torch.randn(3, 5, 11) * 3, torch.randn(3, 5, 11) * 3
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]).float()
    ref = torch.distributions.kl_divergence(torch.distributions.Categorical(logits=p),
                                            torch.distributions.Categorical(logits=q))
    expect = (ref * mask).sum(1).double().numpy()
    assert trajectory._kl_rows(p, q, mask) == pytest.approx(expect, rel=1e-5)
    swapped = torch.distributions.kl_divergence(torch.distributions.Categorical(logits=q),
                                                torch.distributions.Categorical(logits=p))
    assert trajectory._kl_rows(p, q, mask) != pytest.approx(
        (swapped * mask).sum(1).double().numpy(), rel=1e-3)


def test_step_zero_is_the_null_and_training_moves_it(run, tmp_path):
    out = tmp_path / "t"
    rep = trajectory.main([str(run / "opd"), "--n-levels", "16", "--drift-levels", "16",
                           "--threads", "1", "--out", str(out)])
    rows = rep["results"]["opd"]["steps"]
    assert [r["step"] for r in rows] == [0, 2, 4]
    first, last = rows[0], rows[-1]
    # step 0 is the teacher itself: its context view cannot have drifted, and the student's
    # no-context gap to the teacher is the gap between the teacher's own two views
    assert first["kl_ctx"] == 0.0 and first["kl_opd"] == pytest.approx(first["kl_nca"])
    assert last["kl_ctx"] > 0
    # drift is the no-context view's distance from step 0's own no-context view
    assert first["drift"] == 0.0 and last["drift"] > 0
    for r in rows:
        for k in trajectory.KL_TERMS:
            lo, hi = r["ci95"][k]
            assert lo <= r[k] + 1e-12 and r[k] <= hi + 1e-12
    saved = json.loads((tmp_path / "t.json").read_text())
    assert saved["results"]["opd"]["context"] == "plan"
    assert (tmp_path / "t.html").exists()


def test_control_gives_reads_c_per_row_and_drift_is_from_the_initial_checkpoint(run):
    """--control: each row carries reads_c with its interval (the paired correct_c - correct_c');
    drift is measured from the run's step-0 checkpoint, not from the teacher: with another
    teacher, step 0's drift is still 0 while its kl_ctx is not."""
    rep = trajectory.run([str(run / "opd")], n_levels=16, drift_levels=16, every=2,
                         control=True, teacher=str(run / "opd" / "checkpoints" / "step_000004"))
    rows = rep["results"]["opd"]["steps"]
    for r in rows:
        lo, hi = r["ci95"]["reads_c"]
        assert -1 <= r["reads_c"] <= 1 and lo <= r["reads_c"] + 1e-12 <= hi + 2e-12
    assert rows[0]["drift"] == 0.0 and rows[0]["kl_ctx"] > 0
    assert rows[-1]["drift"] > 0


def test_the_core_on_models_in_memory_equals_the_command(run, tmp_path):
    """#72: `over_steps` on the run's checkpoints loaded into memory gives the arrays the
    command's JSON reads back as (`report_arrays`), with the same step labels, regimes and
    intervals; with --control, reads_c too."""
    from nca_interp.checkpoint import load_checkpoint
    from nca_interp.tasks import make_task

    opd = run / "opd"
    models = {step: load_checkpoint(path)[0] for step, path in trajectory.checkpoints_of(opd)}
    teacher, tok = load_checkpoint(run / "base")
    task = make_task("sokoban", dim_room=(6, 6), num_boxes=1)
    core = trajectory.over_steps(models, teacher, tok, task, "plan", n_levels=12,
                                 drift_levels=10, control=True)
    trajectory.main([str(opd), "--n-levels", "12", "--drift-levels", "10", "--control",
                     "--threads", "1", "--out", str(tmp_path / "t")])
    saved = trajectory.report_arrays(json.loads((tmp_path / "t.json").read_text()))
    assert set(core) == set(saved) and {"harm", "kl_ctx_ci95", "reads_c"} <= set(core)
    for k, a in core.items():
        b = saved[k].sel(run="opd")
        assert a.dims == b.dims and a.coords == b.coords, k
        assert a.coords["step"] == (0, 2, 4)
        assert np.allclose(a.values, b.values, atol=1e-9, equal_nan=True), k
    assert core.attrs["regime"] == saved.attrs["opd"]["regime"]
    assert core["kl_ctx"].sel(step=0) == 0.0 and core["kl_ctx"].sel(step=4) > 0


def test_refuses_a_folder_that_is_not_a_distillation_run(run, tmp_path):
    with pytest.raises(ValueError, match="distillation run"):
        trajectory.main([str(run / "base"), "--threads", "1"])


def test_a_harm_panel_with_nothing_to_show_says_why():
    """With nothing right without c at any step (the facts task), harm is undefined: the panel
    says so on a 0..1 axis instead of standing empty on plotly's default range."""
    from nca_interp.plots import trajectory_figure

    def rows(harm):
        return [{"step": s, "correct_no_c": 0.0, "correct_c": 0.4, "harm": harm, "kl_opd": 0.3,
                 "kl_ctx": 0.1 * s,
                 "ci95": {"correct_no_c": [0, 0], "correct_c": [0.2, 0.6], "harm": [None, None],
                          "kl_opd": [0.2, 0.4], "kl_ctx": [0.0, 0.2]}} for s in (0, 16)]

    report = {"config": {}, "task": "facts", "context": "facts",
              "results": {"x_opd_s0": {"run": "runs/x_opd_s0", "teacher": "runs/x_base",
                                       "task": "facts", "context": "facts", "steps": rows(None)}},
              "runs": {"x_opd_s0": {"name": "x_opd_s0", "method": "opd", "seed": 0}}}
    fig = trajectory_figure(report)
    assert any("harm undefined" in a.text for a in fig.layout.annotations)
    assert tuple(fig.layout.yaxis2.range) == (0, 1)
    report["results"]["x_opd_s0"]["steps"][1]["harm"] = 0.2  # one defined point: no note
    assert not any("harm undefined" in a.text for a in trajectory_figure(report).layout.annotations)
