"""The wrong-context control takes the user's own c' (#70 item 7): a `control` field per item
or `control_file=`, shown to the model in c's place, named in the report with the control's
responses and lengths kept per item."""

import json
from pathlib import Path

import pytest

from nca_interp import evaluate
from nca_interp.checkpoint import save_checkpoint
from nca_interp.errors import UsageError
from nca_interp.tasks import task_from_record
from tests.conftest import tiny
from tests.spies import shown


def write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def rows(n=8, control=True):
    return [{"prompt": f"what is {i} plus one", "context": f"you always answer {i + 1}",
             "answer": str(i + 1), "id": f"q{i}", "split": "test" if i < 4 else "train",
             **({"control": f"PLANTED wrong context {i}"} if control else {})}
            for i in range(n)]


@pytest.fixture
def student(tok, tmp_path):
    return save_checkpoint(tmp_path / "student", tiny(tok), tok)


def run(student, tmp_path, *options):
    return evaluate.execute(evaluate.EvalConfig(
        ckpt=[str(student)], task="jsonl", task_options=list(options), n_levels=8,
        control=True, out=str(tmp_path / "rep")))


def test_a_planted_control_field_is_what_the_model_is_shown_and_the_report_names_it(
        student, tmp_path, monkeypatch, capsys):
    data = write(tmp_path / "d.jsonl", rows())
    seen = shown(monkeypatch)
    r = run(student, tmp_path, f"data={data}")["results"]["student"]
    planted = [f"PLANTED wrong context {i}" for i in range(4)]
    for i, c in enumerate(planted):  # c' in c's place, before the item's own prompt
        assert f"{c}\nwhat is {i} plus one" in seen
    assert not any("PLANTED" in t and "you always answer" in t for t in seen)
    items = r["items"]
    assert items["context_control"] == planted
    assert len(items["response_control"]) == len(items["length_control"]) == 4
    assert "the \"control\" field of 4 of 4 items" in r["control"]["c_prime"]
    assert "c' (the control context): your own" in capsys.readouterr().out
    # per-item lengths, so that a length change pairs per item
    assert sum(items["length_c"]) / 4 == pytest.approx(r["len_c"])
    assert sum(items["length_no_c"]) / 4 == pytest.approx(r["len_no_c"])
    assert sum(items["length_control"]) / 4 == pytest.approx(r["control"]["len"])


def test_a_control_file_is_shown_to_every_item_and_named(student, tmp_path, monkeypatch):
    data = write(tmp_path / "d.jsonl", rows(control=False))
    wrong = tmp_path / "butler.txt"
    wrong.write_text("You are Jeeves, a formal butler; never say ahoy.\n")
    seen = shown(monkeypatch)
    r = run(student, tmp_path, f"data={data}", f"control_file={wrong}")["results"]["student"]
    assert sum(t.startswith("You are Jeeves") for t in seen) == 4
    assert r["items"]["context_control"] == [wrong.read_text().strip()] * 4
    assert str(wrong) in r["control"]["c_prime"]


def test_a_shared_c_shuffled_says_it_keeps_cs_words(tmp_path):
    persona = tmp_path / "persona.txt"
    persona.write_text("You are Captain Quill; begin every answer with Ahoy!")
    data = write(tmp_path / "d.jsonl", [{"prompt": f"tell me about {w}", "split": s}
                                        for w, s in (("tides", "test"), ("rum", "train"))])
    t = task_from_record(None, "jsonl", None, [f"data={data}", f"context_file={persona}"])
    note = t.control_note(t.levels("test", 4), "context")
    assert "words shuffled" in note and "control_file=" in note


def test_a_control_that_is_the_items_own_c_is_refused_before_any_work(student, tmp_path,
                                                                     monkeypatch):
    bad = rows(control=False)
    bad[0]["control"] = bad[0]["context"]
    data = write(tmp_path / "d.jsonl", bad)
    seen = shown(monkeypatch)
    with pytest.raises(UsageError, match="item 'q0'.s own c"):
        run(student, tmp_path, f"data={data}")
    assert seen == []  # nothing generated first
    missing = write(tmp_path / "e.jsonl", rows(control=False))
    with pytest.raises(Exception, match="control file .* not found"):
        run(student, tmp_path, f"data={missing}", f"control_file={tmp_path / 'none.txt'}")
    assert seen == []
