"""The two-view lens (nca_interp.lens): a context planted at one response position is found
there and nowhere else, a model blind to c shows no effect and no control effect, the final
layer of the lens is the model's output, and the command runs end to end (Sokoban, own data)."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from nca_interp import analysis, lens
from nca_interp.assets import embedded
from nca_interp.checkpoint import save_checkpoint
from nca_interp.forward import response_logits
from tests.conftest import tiny

K = 3  # the planted response position


class Planted(torch.nn.Module):
    """A stand-in LM: each position's logits are a fixed function of its own token, plus, when
    the row holds a context (`marker` then one letter), a bump on that letter at response
    position K only (the column K after the prompt's closing `sep`). `reads=False`: blind to c."""

    def __init__(self, tok, reads: bool = True):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.table = torch.randn(len(tok), len(tok), generator=gen)
        self.marker, self.sep = tok.convert_tokens_to_ids("C"), tok.convert_tokens_to_ids(">")
        self.reads = reads

    def forward(self, input_ids, attention_mask, position_ids=None, **_):
        logits = self.table[input_ids].clone()
        for b, (row, real) in enumerate(zip(input_ids, attention_mask.bool())):
            at = torch.nonzero((row == self.marker) & real)
            if self.reads and len(at):
                sep = int(torch.nonzero((row == self.sep) & real)[-1])
                logits[b, sep + K, row[int(at[0]) + 1]] += 20.0
        return SimpleNamespace(logits=logits)


def batch(tok, contexts, responses=("UDLRUDL", "LLRRU", "DDDDUUUL")):
    """Three items of different prompt, context and response lengths (so left padding differs
    between rows and views)."""
    xs = ["ab\n>", "a longer board\n>", "x\n>"]
    cxs = [f"{c}\n{x}" for c, x in zip(contexts, xs)]
    ids = [tok(r, add_special_tokens=False)["input_ids"] for r in responses]
    N = max(map(len, ids))
    resp = torch.tensor([r + [0] * (N - len(r)) for r in ids])
    mask = torch.tensor([[1] * len(r) + [0] * (N - len(r)) for r in ids])
    return lens.views(tok, xs, cxs, resp, mask)


def test_a_context_planted_at_one_position_is_found_there_and_nowhere_else(tok):
    b = batch(tok, ["CZ", "CQQQQ and more", "CW"])
    out = lens.two_views(Planted(tok), b)
    assert out.dims("kl") == ("item", "position") and out.kl.shape == b.resp.shape
    assert (out.kl[:, K] > 1.0).all()  # the bump moves most of the mass: a large KL
    rest = np.delete(out.kl, K, axis=1)
    assert np.abs(rest).max() < 1e-5, rest
    assert out.flip[:, K].all() and not np.delete(out.flip, K, axis=1).any()
    assert [out.top_c[i, K] for i in range(3)] == tok.convert_tokens_to_ids(["Z", "Q", "W"])


def test_a_model_blind_to_c_shows_no_effect_and_no_control_effect(tok):
    model = Planted(tok, reads=False)
    b = batch(tok, ["CZ", "CQ", "CW"])
    c = lens.two_views(model, b)
    ctrl = lens.two_views(model, lens.with_prompts(b, tok, ["CW\nab\n>", "CZ\na longer board\n>",
                                                              "CQ\nx\n>"]))
    floor = lens.two_views(model, lens.floor_batch(b))
    units = ["0", "1", "2"]
    s = lens.summarise(c, ctrl, floor, units)
    assert max(s["overall"]["kl"], s["overall"]["kl_control"], s["overall"]["kl_floor"]) < 1e-6
    assert s["overall"]["flip"] == 0.0 and s["overall"]["flip_control"] == 0.0
    # the reading model: the control (another item's c, same form) acts at K too; the floor not
    reading = Planted(tok)
    ctrl = lens.two_views(reading, lens.with_prompts(b, tok, ["CW\nab\n>", "CZ\na longer "
                                                             "board\n>", "CQ\nx\n>"]))
    assert (ctrl.kl[:, K] > 1.0).all() and np.abs(np.delete(ctrl.kl, K, axis=1)).max() < 1e-5


def test_the_lens_ends_at_the_output_and_the_floor_is_arithmetic(tok):
    model = tiny(tok).eval()
    b = batch(tok, ["CZ", "CQ", "CW"])
    x = lens.view_pass(model, b.x_ids, b.x_mask, b.resp, b.resp_mask)
    ref = response_logits(model, b.x_ids, b.x_mask, b.resp, b.resp_mask).log_softmax(-1)
    assert torch.allclose(x.logp, ref, atol=1e-5)  # the package's alignment, token for token
    out = lens.two_views(model, b)
    L = model.config.num_hidden_layers
    assert out.lens_kl.shape == (L + 1, 3, b.resp.shape[1])
    assert np.allclose(out.lens_kl[-1], out.kl) and (out.lens_top_c[-1] == out.top_c).all()
    assert ((out.settle_x >= 0) & (out.settle_x <= L)).all()
    part = out.part
    assert np.isnan(part[~out.flip]).all() and not np.isnan(part[out.flip]).any()
    floor = lens.two_views(model, lens.floor_batch(b), layers=False)
    assert floor.kl.max() < 1e-5 < out.kl[b.resp_mask.bool().numpy()].mean()


def test_settling_and_parting_read_the_last_layers():
    top = np.array([[[1]], [[2]], [[2]]])  # layer item position
    assert lens.settling(top)[0, 0] == 1
    assert lens.parting(np.array([[[1]], [[1]], [[3]]]), top)[0, 0] == 1
    assert lens.parting(np.array([[[1]], [[2]], [[3]]]), top)[0, 0] == 2
    assert np.isnan(lens.parting(top, top)[0, 0])


def test_the_core_runs_on_a_model_in_memory(tok):
    """The API page's example: a loaded model, its tokenizer and a task, three lines."""
    from nca_interp.rollout import onpolicy_batch
    from nca_interp.tasks import make_task

    model, task = tiny(tok).eval(), make_task("sokoban", dim_room=(6, 6), num_boxes=1)
    levels = task.levels("test", 3)
    # --- the three lines -------------------------------------------------------------------
    b, texts, _ = onpolicy_batch(model, tok, task, levels, "plan", max_new=12)
    out = lens.two_views(model, b)
    kl = out.kl  # item x position, out.dims("kl")
    assert kl.shape == tuple(b.resp.shape) and out.lens_kl.ndim == 3 and len(texts) == 3


@pytest.fixture(scope="module")
def sokoban_student(tmp_path_factory):
    return str(embedded("sokoban_opd"))


def test_the_command_on_sokoban_writes_a_report_and_figures(sokoban_student, tmp_path, capsys):
    out = tmp_path / "lens"
    report = lens.main([sokoban_student, "--n-levels", "6", "--batch", "3", "--threads", "1",
                        "--max-cases", "2", "--max-forks", "2", "--out", str(out)])
    printed = capsys.readouterr().out
    assert "kl_control" in printed and "forks (greedy)" in printed
    assert {p.name for p in tmp_path.glob("lens*.html")} == {"lens.html", "lens_tokens.html"}
    back = analysis.load(tmp_path / "lens.json")
    assert type(back).__name__ == "LensReport" and back.analysis == "lens"
    assert back == json.loads(json.dumps(report.to_json()))
    e = back.results["sokoban_opd"]
    assert e.n_items == 6 and len(e.thirds["kl"]) == 3 and len(e.depth["lens_kl"]) == \
        len(back.layers)
    assert e.overall["kl_floor"] < 1e-4 and e.forks["n_harm"] >= len(e.forks["harm"])
    for case in e.forks["harm"] + e.forks["help"]:
        assert case["first_fork"] is None or case["first_fork"] >= 0


def test_the_command_on_own_data(tok, tmp_path, capsys):
    rows = [{"prompt": f"what is {i} plus one", "context": f"you always answer {i + 1}",
             "answer": str(i + 1), "id": f"q{i}"} for i in range(12)]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    student = save_checkpoint(tmp_path / "student", tiny(tok), tok)
    report = lens.execute(lens.LensConfig(
        ckpt=[str(student)], task="jsonl", task_options=[f"data={data}"], n_levels=4,
        batch=4, threads=1, max_cases=2, out=str(tmp_path / "own" / "lens")))
    assert report.task == "jsonl" and report.context == "context"
    assert (tmp_path / "own" / "lens.json").exists() and (tmp_path / "own" / "lens.html").exists()
    e = report.results["student"]
    assert e.n_tokens > 0 and e.example["tokens"] and "kl_control" in e.by_position


def test_two_views_names_wrong_arguments_in_one_line():
    """None or a dict for the batch was an AttributeError on x_ids (the fifth probe)."""
    import pytest

    from nca_interp import lens
    from nca_interp.errors import UsageError

    with pytest.raises(UsageError, match="takes a model and a rollout.Batch"):
        lens.two_views(lambda *a: None, {"x_ids": 1})
