"""The fourth fault probe's task-option and report cases: each bad input is one `error:` line
before any work (no traceback, no silent wrong value, no hang), from the command line and from
the Python API alike."""

import json
from dataclasses import fields

import pytest

from nca_interp import evaluate, layer_sim
from nca_interp.checkpoint import save_checkpoint
from nca_interp.errors import UsageError
from nca_interp.tasks import make_task, task_record
from nca_interp.tasks import sokoban as sokoban_module
from tests.conftest import tiny
from tests.integration.test_bad_input import TASK, refused

QUICK = ["--n-levels", "4", "--threads", "1"]
# the fields a task's config needs set before its numbers are checked
REQUIRED = {"jsonl": {"data": "mine.jsonl"}}


@pytest.fixture
def base(tok, tmp_path):
    return save_checkpoint(tmp_path / "base", tiny(tok), tok, {"task": TASK})


def numeric_fields(task: str) -> list[str]:
    cls = make_task(task, **REQUIRED.get(task, {})).config
    return [f.name for f in fields(cls) if str(f.type).startswith(("int", "float", "tuple"))]


def test_negative_task_options_are_refused(base, capsys):
    """`max_invalid=-1` was read as 0 (an invalid move lost at once); every count or size of
    every task is refused below its range, the range in the message."""
    err = refused(evaluate.main, [str(base), *QUICK, "--task-options", "max_invalid=-1"],
                  capsys)
    assert "max_invalid must be a whole number 0..1000" in err and "not -1" in err
    with pytest.raises(UsageError, match="max_invalid must be a whole number 0..1000"):
        evaluate.run(str(base), n_levels=4, threads=1, task_options={"max_invalid": -1})
    checked = 0
    for task in ("sokoban", "frozenlake", "sysprompt", "facts", "jsonl", "opcd"):
        for name in numeric_fields(task):
            bad = (-1, -1) if name == "dim_room" else -1
            with pytest.raises(UsageError, match=rf"{name} must (.*\d+\.\.\d+|lie between|be "
                                                 r"a number of seconds|be 1 .* or 3)"):
                make_task(task, **{**REQUIRED.get(task, {}), name: bad})
            checked += 1
    assert checked >= 20


@pytest.mark.parametrize("option,needle", [
    ("dim_room=none", "dim_room must be two whole numbers HxW"),
    ("dim_room=6x6x6", "dim_room must be two whole numbers HxW"),
    ("num_boxes=-1", "num_boxes must be a whole number 1..7 for dim_room 6x6"),
    ("num_boxes=0", "a level needs a box"),
    ("num_boxes=1000", "holds at most 7"),
])
def test_malformed_room_and_box_counts_are_one_line(base, tmp_path, capsys, option, needle):
    """dim_room=none was `cannot unpack non-iterable NoneType`, 6x6x6 `too many values to
    unpack`, num_boxes=-1 `Sample larger than population`, and 0 or 1000 advised widening
    min/max_solution: now the room and the boxes it holds are named, in evaluate, layer_sim
    and the API."""
    assert needle in refused(evaluate.main, [str(base), *QUICK, "--task-options", option],
                             capsys)
    assert needle in refused(layer_sim.main, [str(base), *QUICK, "--task-options", option,
                                              "--out", str(tmp_path / "ls")], capsys)
    assert not (tmp_path / "ls.json").exists()
    key, _, value = option.partition("=")
    with pytest.raises(UsageError, match=needle):
        evaluate.run(str(base), n_levels=4, threads=1, task_options={key: value})
    if option == "dim_room=none":
        with pytest.raises(UsageError, match=needle):
            make_task("sokoban", dim_room=None)


def test_options_that_scale_generation_time_are_bounded(base, capsys, monkeypatch):
    """reverse_steps=1000000000 generated levels for minutes; now it is refused before the
    first level is drawn, as is a fixed knowledge base whose held-out set would take minutes
    to enumerate."""
    def no_generation(*a, **k):
        raise AssertionError("a level was generated before the option was checked")

    monkeypatch.setattr(sokoban_module, "_reverse_play", no_generation)
    err = refused(evaluate.main, [str(base), *QUICK, "--task-options",
                                  "reverse_steps=1000000000"], capsys)
    assert "reverse_steps must be a whole number 1..1000" in err
    with pytest.raises(UsageError, match="held-out questions, more than the 100,000"):
        make_task("sysprompt", n_entities=12, n_options=8)
    with pytest.raises(UsageError, match=r"max_new must be a whole number 4..8192"):
        make_task("facts", max_new=10**9)
    with pytest.raises(UsageError, match=r"max_solution must be a whole number 1..256"):
        make_task("sokoban", max_solution=10**9)


def test_checkpoints_of_different_tasks_refused(tok, tmp_path, capsys):
    """A sokoban and a frozenlake checkpoint together ended in `'FrozenLakeConfig' object has
    no attribute 'dim_room'`: now one line names both tasks."""
    runs = [save_checkpoint(tmp_path / name, tiny(tok), tok,
                            {"task": task_record(make_task(name))})
            for name in ("sokoban", "frozenlake")]
    paths = list(map(str, runs))
    for main, extra in ((evaluate.main, []), (layer_sim.main, ["--out", str(tmp_path / "ls")])):
        err = refused(main, [*paths, *QUICK, *extra], capsys)
        assert "trained on different tasks" in err
        assert f"sokoban in {paths[0]}" in err and f"frozenlake in {paths[1]}" in err
    assert not (tmp_path / "ls.json").exists()


def test_a_beside_report_with_fields_of_the_wrong_type_is_damaged(tok, tmp_path, capsys):
    """A report whose "layers" was hand-edited to 999 ended in `object of type 'int' has no
    len()`; every field --beside reads is checked first, the field and the file named."""
    ref = save_checkpoint(tmp_path / "ref", tiny(tok), tok, {"task": TASK})
    out = tmp_path / "published"
    layer_sim.main([str(ref), "--n-levels", "2", "--threads", "1", "--out", str(out)])
    good = json.loads(out.with_suffix(".json").read_text())
    edits = {"layers": lambda d: d.update(layers=999),
             "checkpoints": lambda d: d.update(checkpoints="x"),
             "config.n_levels": lambda d: d["config"].update(n_levels="2"),
             "responses": lambda d: d.update(responses=None),
             "data.task_options": lambda d: d["data"].update(task_options=[1]),
             "results['ref'].n_examples": lambda d: d["results"]["ref"].update(n_examples=[])}
    for field, edit in edits.items():
        d = json.loads(json.dumps(good))
        edit(d)
        path = tmp_path / "edited.json"
        path.write_text(json.dumps(d))
        err = refused(layer_sim.main, ["--beside", str(path), "--threads", "1",
                                       "--out", str(tmp_path / "again")], capsys)
        assert f"{path} is damaged: its {field} is " in err, err
    assert not (tmp_path / "again.json").exists()


def test_a_bool_task_option_that_is_no_bool_is_refused():
    """roster=maybe read False without a word (the task-option twin of the bool flags)."""
    from nca_interp.tasks import parse_task_options

    with pytest.raises(UsageError, match="roster takes true or false"):
        parse_task_options("sysprompt", ["roster=maybe"])
    assert parse_task_options("sysprompt", ["roster=off"]) == {"roster": False}


def test_a_report_whose_runs_are_no_mapping_is_damaged(tmp_path):
    """A hand-edited report's "runs": 5 was an AttributeError in the typed reader."""
    import json

    from nca_interp import analysis
    from nca_interp.reports import ReportError

    (tmp_path / "r.json").write_text(json.dumps({"config": {}, "task": "sokoban", "context":
                                                 "plan", "runs": 5, "results": {}}))
    with pytest.raises(ReportError, match="runs is int, not a mapping"):
        analysis.load(tmp_path / "r.json")


def test_the_lens_names_the_layers_of_its_deepest_checkpoint(tok, tmp_path, base):
    """Checkpoints of two depths: the report named the last one's layers (a 3-layer model's
    fourth value had no name: the sixth probe)."""
    from nca_interp import lens

    deep = save_checkpoint(tmp_path / "deep", tiny(tok, n_layers=3), tok, {"task": TASK})
    report = lens.run(ckpt=[str(deep), str(base)], n_levels=2, max_cases=0, threads=1,
                      device="cpu", context="state")
    assert report["layers"] == ["embed", "0", "1", "2"]
    assert [len(e["depth"]["lens_kl"]) for e in report["results"].values()] == [4, 3]
