"""Every command that uses the wrong context c' says what it was (#70 item 7): trajectory, the
lens and the TRL callback record in their report (the callback: its `c_prime` and log) where c'
came from (the task's draw by default, your own field or file), for a file its path and
sha256, and the first items' c'; and they keep the answers given with c' where they generate
any (the lens generates none). Each consumer is run once with your own control_file and once
with the default."""

import hashlib
import json
import logging
from pathlib import Path

import pytest

from nca_interp import lens, trajectory
from nca_interp.checkpoint import save_checkpoint
from nca_interp.tasks import make_task
from tests.conftest import tiny

WRONG = "You are Jeeves, a formal butler; never say ahoy."


def _data(folder: Path) -> tuple[Path, Path]:
    rows = [{"prompt": f"what is {i} plus one", "context": f"you always answer {i + 1}",
             "answer": str(i + 1), "id": f"q{i}", "split": "test" if i < 4 else "train"}
            for i in range(12)]
    data = folder / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    wrong = folder / "butler.txt"
    wrong.write_text(WRONG + "\n")
    return data, wrong


def _names_the_file(control: dict, wrong: Path) -> None:
    assert control["c_prime_source"] == "file"
    assert control["c_prime_file"] == {
        "path": str(wrong), "sha256": hashlib.sha256(wrong.read_bytes()).hexdigest()}
    assert [e["c_prime"] for e in control["c_prime_examples"]] == [WRONG] * 3
    assert str(wrong) in control["c_prime"]


def _names_the_default(control: dict) -> None:
    assert control["c_prime_source"] == "default" and "c_prime_file" not in control
    assert "another group's c" in control["c_prime"]
    assert [e["unit"] for e in control["c_prime_examples"]] == ["q0", "q1", "q2"]
    assert all(e["c_prime"].startswith("you always answer") for e in control["c_prime_examples"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two distillation runs of own data: one trained with your control_file, one without."""
    from nca_interp.tokenizer import build_char_tokenizer
    from train import distill

    d = tmp_path_factory.mktemp("control_named")
    data, wrong = _data(d)
    tok = build_char_tokenizer()
    base = save_checkpoint(d / "base", tiny(tok), tok, {"task": {"name": "jsonl",
                                                                "data": str(data)}})
    for name, options in (("own", f"data={data},control_file={wrong}"),
                          ("default", f"data={data}")):
        distill.main(["--student", str(base), "--task", "jsonl", "--task-options", options,
                      "--out", str(d / name), "--batch", "4", "--steps", "2", "--save-every",
                      "2", "--eval-every", "100", "--eval-levels", "4", "--threads", "1",
                      "--warmup", "1"])
    return d, data, wrong


def test_trajectory_names_your_control_file_and_keeps_the_answers_with_it(runs, capsys):
    d, _, wrong = runs
    rep = trajectory.execute(trajectory.TrajectoryConfig(
        runs=[str(d / "own"), str(d / "default")], n_levels=4, drift_levels=4, control=True,
        threads=1, out=str(d / "traj")))
    _names_the_file(rep["results"]["own"]["control"], wrong)
    _names_the_default(rep["results"]["default"]["control"])
    for row in rep["results"]["own"]["steps"]:
        assert len(row["response_control"]) == 4
    saved = json.loads((d / "traj.json").read_text())
    assert saved["results"]["own"]["control"]["c_prime_file"]["path"] == str(wrong)
    printed = capsys.readouterr().out
    digest = hashlib.sha256(wrong.read_bytes()).hexdigest()[:12]
    assert f"c' (the control context): your own: control_file {wrong}" in printed
    assert f"{wrong} sha256 {digest}" in printed and "[source: default]" in printed


@pytest.mark.parametrize("own", [True, False])
def test_the_lens_names_its_control(own, tok, tmp_path, capsys):
    data, wrong = _data(tmp_path)
    student = save_checkpoint(tmp_path / "student", tiny(tok), tok)
    options = [f"data={data}"] + ([f"control_file={wrong}"] if own else [])
    report = lens.execute(lens.LensConfig(
        ckpt=[str(student)], task="jsonl", task_options=options, n_levels=4, batch=4,
        threads=1, max_cases=1, out=str(tmp_path / "lens")))
    saved = json.loads((tmp_path / "lens.json").read_text())["control"]
    assert saved == report.control
    printed = capsys.readouterr().out
    if own:
        _names_the_file(saved, wrong)
        assert f"{wrong} sha256 " in printed
    else:
        _names_the_default(saved)
        assert "[source: default]" in printed


@pytest.mark.parametrize("own", [True, False])
def test_the_trl_callback_logs_its_control_and_keeps_the_answers_with_it(own, tok, tmp_path,
                                                                         caplog):
    from transformers import TrainerControl, TrainerState

    from nca_interp.trl_callbacks import ContextReturnCallback

    data, wrong = _data(tmp_path)
    task = make_task("jsonl", data=str(data), **({"control_file": str(wrong)} if own else {}))
    cb = ContextReturnCallback(task, every=1, n_items=4, tokenizer=tok)
    state = TrainerState()
    state.global_step = 1
    with caplog.at_level(logging.INFO, logger="nca_interp.trl_callbacks"):
        cb.on_step_end(None, state, TrainerControl(), model=tiny(tok))
    assert len(cb.history[0]["response_control"]) == 4
    assert "c_prime" not in cb.history[0]  # said once, as the callback's own
    said = [r.getMessage() for r in caplog.records if "c' (the control context)" in r.getMessage()]
    assert len(said) == 1
    if own:
        _names_the_file(cb.c_prime, wrong)
        assert f"{wrong} sha256 " in said[0]
    else:
        _names_the_default(cb.c_prime)
        assert "[source: default]" in said[0]


def test_the_trl_callback_refuses_a_c_prime_that_is_c_before_training(tok, tmp_path,
                                                                      monkeypatch):
    """Helper-39's note on probe 10's Q-E: the callback drew c' only after generating both
    views at its first measurement, so one shared one-word c (no order of its words differs:
    c' would be c) stopped training mid-run; now it is refused where the callback is made, and
    a measurement draws c' before it generates anything."""
    from nca_interp.errors import UsageError
    from nca_interp.trl_callbacks import ContextReturnCallback, _measure_views

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"Say w{i}",
                                        "answer": f"w{i}"}) + "\n" for i in range(8)))
    persona = tmp_path / "c.txt"
    persona.write_text("Pirate")
    task = make_task("jsonl", data=str(data), context_file=str(persona), scorer="exact")
    with pytest.raises(UsageError, match="c' would be c itself"):
        ContextReturnCallback(task, every=1, n_items=4, tokenizer=tok)
    generated = []
    monkeypatch.setattr("nca_interp.trl_callbacks.play_levels",
                        lambda *a, **k: generated.append(1))
    with pytest.raises(UsageError, match="c' would be c itself"):
        _measure_views(tiny(tok), tok, task, None, 4, 0, True)
    assert generated == []  # refused before any generation
