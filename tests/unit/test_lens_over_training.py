"""The two-view lens over training (nca_interp.lens --over-training) and while training
(train.distill --lens-every, ContextReturnCallback(lens_every=...)): one entry per chosen step,
step 0 read from the model the run started from, and the numbers logged during training equal
what the command reports for the saved checkpoint of that step."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from nca_interp import lens
from nca_interp.checkpoint import load_checkpoint, save_checkpoint
from nca_interp.errors import UsageError
from nca_interp.tasks import make_task
from tests.conftest import tiny
from train import distill

TASK = {"name": "sokoban", "fmt": "compact", "dim_room": [6, 6], "num_boxes": 1}
ITEMS = 4  # the monitor's held-out items
SMALL = dict(n_levels=ITEMS, threads=1, max_cases=1, max_forks=1)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 4-step OPD run saving steps 2 and 4, from `base` towards another `teacher`: step 0,
    the teacher, step 2 and the run's root (step 4) are four different models."""
    from nca_interp.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    d = tmp_path_factory.mktemp("lens_run")
    base = save_checkpoint(d / "base", tiny(tok, seed=0), tok, {"task": TASK})
    teacher = save_checkpoint(d / "teacher", tiny(tok, seed=1), tok, {"task": TASK})
    distill.main(["--student", str(base), "--teacher", str(teacher), "--out", str(d / "opd"),
                  "--batch", "8", "--steps", "4", "--save-every", "2", "--eval-every", "100",
                  "--eval-levels", "4", "--threads", "1", "--lr", "3e-2", "--context", "plan",
                  "--lens-every", "2", "--lens-items", str(ITEMS)])
    return d


def test_one_entry_per_chosen_step_and_step_0_is_the_model_the_run_started_from(run):
    rep = lens.run(ckpt=[str(run / "opd")], over_training=["0", "mid", "final"], **SMALL)
    ot = rep.over_training["opd"]
    assert ot["step"] == [0, 2, 4]
    assert ot["checkpoint"] == ["opd step 0", "opd step 2", "opd step 4"] == list(rep.results)
    assert np.array(ot["kl"]).shape == (3, len(lens.REGIONS)) and ot["region"][0] == "all"
    assert np.array(ot["ci95"]["kl_control"]).shape == (3, len(lens.REGIONS), 2)
    assert len({len(row) for row in ot["by_position"]["kl"]}) == 1  # step x position
    # step 0 is the lens of the run's start (its run config's student), not of its teacher,
    # its first saved step or its root
    base = lens.run(ckpt=[str(run / "base")], **SMALL).results["base"]
    assert rep.results["opd step 0"].overall == base.overall
    for other in ("teacher", "opd/checkpoints/step_000002", "opd"):
        e = lens.run(ckpt=[str(run / other)], **SMALL).results
        assert e[list(e)[-1]].overall["kl"] != base.overall["kl"], other
    assert rep.results["opd step 4"].overall["kl"] != base.overall["kl"]
    assert rep.checkpoints[0] == str(run / "base")


def test_all_and_numbers_pick_saved_steps_and_a_missing_one_is_named_before_work(run):
    assert [s for s, _ in lens.pick_steps(str(run / "opd"), ["all"])] == [0, 2, 4]
    assert [s for s, _ in lens.pick_steps(str(run / "opd"), ["final", "2", "final"])] == [2, 4]
    with pytest.raises(UsageError, match="'3' is not a step of .*its steps: 0, 2, 4"):
        lens.run(ckpt=[str(run / "opd")], over_training=["3"], **SMALL)


def test_an_empty_step_list_and_a_missing_start_are_named_before_work(run, tmp_path,
                                                                     monkeypatch):
    """`--over-training ""` is refused (it ran the plain lens without a word, the seventh
    probe), and a start the run's config records but that is gone is named as the run's
    step 0, not as a bare missing path."""
    with pytest.raises(UsageError, match="--over-training names steps"):
        lens.main([str(run / "opd"), "--over-training", "", "--out", str(tmp_path / "l")])
    steps = lens.checkpoints_of(str(run / "opd"))
    monkeypatch.setattr(lens, "checkpoints_of",
                        lambda r: [(0, str(tmp_path / "gone"))] + steps[1:])
    with pytest.raises(UsageError, match="records .*gone as the model it started from"):
        lens.run(ckpt=[str(run / "opd")], over_training=["0", "final"], **SMALL)


def test_the_figure_and_table_show_the_effect_against_step(run, tmp_path, capsys):
    lens.main([str(run / "opd"), "--over-training", "0,final", "--n-levels", "2", "--threads",
               "1", "--max-cases", "0", "--layers", "false", "--out", str(tmp_path / "l")])
    assert "over training, opd" in capsys.readouterr().out
    assert (tmp_path / "l_over_training.html").exists()
    saved = json.loads((tmp_path / "l.json").read_text())
    assert saved["over_training"]["opd"]["step"] == [0, 4]


def _command(run, step: int) -> dict:
    """The lens command's overall and thirds on the run's saved checkpoint of `step`, flat."""
    folder = run / "opd" / "checkpoints" / f"step_{step:06d}"
    e = lens.main([str(folder), "--n-levels", str(ITEMS), "--threads", "1", "--max-cases", "0",
                   "--layers", "false", "--out", str(run / f"cmd{step}" / "lens")])
    e = e.results[folder.name]
    return {f"lens_{name}{'' if r == 'all' else '_' + r}": v for name in lens.SERIES
            for r, v in zip(lens.REGIONS, [e.overall[name], *e.thirds[name]])}


def test_distill_logs_what_the_command_reports_on_that_steps_checkpoint(run):
    records = [json.loads(ln) for ln in (run / "opd" / "metrics.jsonl").read_text().splitlines()]
    logged = {r["step"]: r for r in records if "lens_kl" in r}
    assert sorted(logged) == [2, 4]
    for step in (2, 4):
        want = _command(run, step)
        got = {k: logged[step][k] for k in want}
        assert got == pytest.approx(want, rel=1e-5, abs=1e-9), step
    assert logged[4]["lens_kl"] != pytest.approx(logged[2]["lens_kl"])  # not one number


def test_the_trl_callback_logs_the_commands_numbers_every_n_steps(run):
    from nca_interp.trl_callbacks import ContextReturnCallback

    model, tok = load_checkpoint(run / "opd" / "checkpoints" / "step_000002")
    model.train()
    task = make_task("sokoban", fmt="compact", dim_room=(6, 6), num_boxes=1)
    cb = ContextReturnCallback(task, context="plan", every=1000, lens_every=2,
                               lens_items=ITEMS, tokenizer=tok)
    for step in (1, 2):
        state = SimpleNamespace(global_step=step, log_history=[])
        cb.on_step_end(None, state, None, model=model)
        assert bool(state.log_history) == (step == 2)
    got = {k.removeprefix("context_return/"): v for k, v in state.log_history[0].items()
           if k != "step"}
    want = _command(run, 2)
    assert got == pytest.approx({k: v for k, v in want.items() if v is not None}, rel=1e-5,
                                abs=1e-9)
    assert model.training  # the monitor put the model back in training mode


def test_the_setting_page_reads_the_lens_report_it_is_given(run, tmp_path):
    """The page's lens section (nca_interp.paper.report.lens): a row per checkpoint read, each
    number the report's own (KL with c and its interval, the control, the thirds, the forks),
    and the over-training table's steps in order."""
    from nca_interp.paper import report as page
    from nca_interp.paper.layout import LENS

    figs = tmp_path / "figs"
    lens.execute(lens.LensConfig(ckpt=[str(run / "opd")], over_training=["0", "mid", "final"],
                                 out=str(figs / LENS.removesuffix(".json")), **SMALL))
    rep = json.loads((figs / LENS).read_text())
    text = page.lens(figs)
    table = next(b for b in text.split("\n\n") if b.startswith("| checkpoint | KL with c"))
    rows = [r for r in table.splitlines() if r.startswith("| opd step")]
    assert [r.split(" | ")[0] for r in rows] == ["| opd step 0", "| opd step 2", "| opd step 4"]
    def nums(cell):  # the value and its interval's bounds, as printed
        return [float(x) for x in cell.replace("[", " ").replace("]", " ").replace(",", " ")
                .split()]

    close = lambda got, want: got == pytest.approx(want, rel=0.06, abs=1e-12)  # noqa: E731
    for row, (name, e) in zip(rows, rep["results"].items()):
        cells = row.strip("| ").split(" | ")
        assert close(nums(cells[1]), [e["overall"]["kl"], *e["ci95"]["kl"]]), name
        for k in range(3):
            assert close(nums(cells[2 + k]), [e["thirds"]["kl"][k], *e["ci95"]["kl_thirds"][k]])
        assert close(nums(cells[5]), [e["overall"]["kl_control"], *e["ci95"]["kl_control"]])
        assert close(nums(cells[7].replace("/", " ")),
                     [e["overall"]["flip"], e["overall"]["flip_control"]])
        n = e["forks"]["n_harm"]
        assert cells[8] == "none" if n == 0 else \
            cells[8].startswith(f"{n} case{'' if n == 1 else 's'}")
    reading = text.split("Read against the control: ")[1].split(".\n")[0].split("; ")
    said = dict(r.split(": c moves it ") for r in reading)
    assert set(said) == {"opd step 0", "opd step 2", "opd step 4"}
    for name, words in said.items():
        e = rep["results"][name]
        (lo, hi), (clo, chi) = e["ci95"]["kl"], e["ci95"]["kl_control"]
        want = "more than" if lo > chi else "less than" if hi < clo else "no more than"
        assert words.startswith(want), (name, words)
        third = ("first", "middle", "last")[int(np.argmax(e["thirds"]["kl"]))]
        assert words.endswith(f"most in the {third} third"), (name, words)
    steps = [r.split(" | ")[0] for r in text.split("Over training")[1].splitlines()
             if r.startswith("| ") and r[2].isdigit()]
    assert steps == ["| 0", "| 2", "| 4"]
    assert page.lens(tmp_path / "empty") == ""
    assert "Its students:" not in text  # no manifest: nothing said of them
    # a lens run by its own command outside the pipeline, its note in the manifest (the
    # students retrained for it): the section says whose students it reads, first
    (figs / "manifest.json").write_text(json.dumps({"files": {
        f"figures/{figs.name}/{LENS}": {"command": "python -m nca_interp.lens ...",
                                        "note": "retrained here, not the published ones."},
        f"figures/other/{LENS}": {"command": "x", "note": "another folder's"}}}))
    assert page.lens(figs).startswith("Its students: retrained here, not the published ones.\n")


def test_a_runs_start_retrained_in_place_is_refused_as_its_step_0_and_base(tmp_path, tok):
    """Probe 9 Q-D: the run recorded its --student's sha256, but lens --over-training 0,
    trajectory and layer_sim read whatever model now sits at that path as its step 0 and
    base, with exit 0."""
    from nca_interp.checkpoint import content_digest
    from nca_interp.runs import initial_of, with_initial_checkpoints

    base = save_checkpoint(tmp_path / "base", tiny(tok), tok)
    run = save_checkpoint(tmp_path / "run", tiny(tok), tok, run_config={
        "student": str(base), "inputs": {"--student": {"path": str(base.resolve()),
                                                       "sha256": content_digest(base)}}})
    assert initial_of(str(run)) == str(base)  # unchanged: read
    was = content_digest(base)
    save_checkpoint(base, tiny(tok, seed=7), tok)  # the same path, another model
    for read in (initial_of, lambda r: with_initial_checkpoints([r])):
        with pytest.raises(UsageError, match="has changed since") as err:
            read(str(run))
        assert was in str(err.value) and content_digest(base) in str(err.value)
        assert "\n" not in str(err.value)


def test_the_page_names_each_harm_case_fork_tokens_and_their_null():
    """#73: the page says which tokens carry the harm: a row per harm case with its first
    fork, the token each view writes there (a newline or a pipe escaped, not breaking the
    table), whether the swap gives the right answer, and the case's own swap null."""
    from types import SimpleNamespace

    from nca_interp.paper.report import _fork_table

    case = {"item": 7, "first_fork": 2, "writer_token": "a|b", "donor_token": "\n",
            "restored": True, "null_right": [True, False, False]}
    rep = SimpleNamespace(results={
        "opd": SimpleNamespace(forks={"harm": [case, {**case, "item": 9, "restored": False,
                                                      "null_right": []},
                                               {k: v for k, v in case.items()
                                                if k != "null_right"}]}),
        "nca": SimpleNamespace(forks={"harm": []})})
    rows = [r for r in _fork_table(rep).splitlines() if r.startswith("| opd")]
    assert rows == ["| opd | 7 | 2 | `a\\|b` | `\\n` | yes | 1 of 3 |",
                    "| opd | 9 | 2 | `a\\|b` | `\\n` | no | 0 of 0 |",
                    "| opd | 7 | 2 | `a\\|b` | `\\n` | yes | not drawn |"]  # an older report
    none = SimpleNamespace(results={"nca": SimpleNamespace(forks={"harm": []})})
    assert _fork_table(none) == ""
