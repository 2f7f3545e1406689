"""The tenth probe's cases on what a run records (#71, /work/notes/probe10.md): a teacher
retrained in place, a run config's relative data path, a chat template that drops the system
message, a task option too long to be a path. Each failed before its fix."""

import pytest

from nca_interp.checkpoint import content_digest, save_checkpoint
from nca_interp.errors import UsageError
from tests.conftest import tiny


def _recorded(path) -> dict:
    return {"path": str(path.resolve()), "sha256": content_digest(path)}


@pytest.mark.parametrize("self_distilled", [False, True])
def test_a_runs_teacher_retrained_in_place_is_refused(tmp_path, tok, self_distilled):
    """Q-F: probe 9's Q-D check compared the run's start, not its teacher. A teacher retrained
    at the recorded path (or, in self-distillation, the start) was read by grad_align and
    trajectory as the run's teacher with exit 0: angles and KLs against another model."""
    from nca_interp import grad_align
    from nca_interp.runs import teacher_of

    base = save_checkpoint(tmp_path / "base", tiny(tok), tok)
    teacher = base if self_distilled else save_checkpoint(tmp_path / "T", tiny(tok, seed=3), tok)
    inputs = {"--student": _recorded(base)}
    if not self_distilled:
        inputs["--teacher"] = _recorded(teacher)
    run = save_checkpoint(tmp_path / "run", tiny(tok, seed=1), tok, run_config={
        "task": {"name": "sokoban"}, "context": "plan", "student": str(base),
        "teacher": None if self_distilled else str(teacher), "inputs": inputs})
    assert teacher_of(str(run), None) == str(teacher)  # unchanged: read
    was = content_digest(teacher)
    save_checkpoint(teacher, tiny(tok, seed=9), tok)  # the same path, another model
    for read in (lambda: teacher_of(str(run), None),
                 lambda: grad_align.run(ckpt=[str(run)], batch=4, parts=2, threads=1,
                                        out=str(tmp_path / "ga"))):
        with pytest.raises(UsageError, match="has changed since.*not this run's teacher") as e:
            read()
        assert was in str(e.value) and content_digest(teacher) in str(e.value)
        assert "--teacher" in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "ga.json").exists()
    assert teacher_of(str(run), str(teacher)) == str(teacher)  # named on purpose: read


def _write(path, rows) -> object:
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _rows(n=12):
    return [{"prompt": f"what is {i} plus one", "answer": str(i + 1), "id": f"q{i}"}
            for i in range(n)]


def test_a_runs_relative_data_path_is_read_where_the_run_read_it(tmp_path, tok, monkeypatch):
    """Q-I: `data=S/d.jsonl` is recorded as given, relative; from another folder evaluate read
    that folder's S/d.jsonl (a line added: a training item held out) and its S/c.txt as c,
    with exit 0, and probe 9's digest check was skipped as for a file named on purpose. Now
    the path the run recorded is read; where that file is gone, a file of other content is
    refused; the same content (a project moved whole) or a file this command names is read."""
    import shutil

    from nca_interp.runs import task_for_checkpoints
    from nca_interp.tasks import task_from_record, task_record

    monkeypatch.chdir(tmp_path)
    (tmp_path / "S").mkdir()
    data, cfile = _write(tmp_path / "S/d.jsonl", _rows()), tmp_path / "S/c.txt"
    cfile.write_text("be nice")
    record = task_record(task_from_record(None, "jsonl", None, [
        "data=S/d.jsonl", "context_file=S/c.txt", "test_share=0.5"]))
    assert record["data"] == "S/d.jsonl"  # as train.distill records it
    run = save_checkpoint(tmp_path / "run", tiny(tok), tok, run_config={
        "task": record, "context": "context", "inputs": {
            "task option data": _recorded(data), "task option context_file": _recorded(cfile)}})
    first = task_for_checkpoints([str(run)])
    held = [lv.id for lv in first.levels("test", 12)]
    other = tmp_path / "OTHER"
    (other / "S").mkdir(parents=True)
    _write(other / "S/d.jsonl", _rows(13))
    (other / "S/c.txt").write_text("be rude and loud")
    monkeypatch.chdir(other)
    here = task_for_checkpoints([str(run)])  # read where the run read it
    levels = here.levels("test", 12)
    assert [lv.id for lv in levels] == held
    assert here.context(levels[0], "context") == "be nice"
    shutil.move(tmp_path / "S", tmp_path / "S_moved")  # the run's files gone: S/ read here
    with pytest.raises(UsageError, match="is read as .* not as the file .* trained on") as e:
        task_for_checkpoints([str(run)])
    assert content_digest(other / "S/d.jsonl") in str(e.value)
    assert _recorded(tmp_path / "S_moved/d.jsonl")["sha256"] in str(e.value)
    assert "\n" not in str(e.value)
    for name in ("d.jsonl", "c.txt"):  # the same content (a project moved whole): read
        shutil.copy(tmp_path / "S_moved" / name, other / "S" / name)
    assert [lv.id for lv in task_for_checkpoints([str(run)]).levels("test", 12)] == held
    _write(other / "S/d.jsonl", _rows(13))  # another file named on purpose: read
    assert task_for_checkpoints([str(run)], options=["data=S/d.jsonl"]).config.data == \
        "S/d.jsonl"


KEEPS_ROLES = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>"
               "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")
DROPS_SYSTEM = ("{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}"
                "{% endif %}{% endfor %}")


def _opcd_options(tmp_path) -> dict:
    import json

    rows = [{"question": f"q{i}?", "options": {"A": "x", "B": "y"}, "answer": "A"}
            for i in range(4)]
    for split in ("train", "test"):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "sys.txt").write_text("always answer A")
    return {"train": str(tmp_path / "train.jsonl"), "test": str(tmp_path / "test.jsonl"),
            "system_prompt": str(tmp_path / "sys.txt")}


@pytest.mark.parametrize("name,options", [("facts", {}), ("facts", {"kind": "rule"}),
                                          ("sysprompt", {}), ("opcd", None)])
def test_a_chat_template_that_drops_the_system_message_is_refused_for_every_task(
        tmp_path, tok, name, options):
    """Q-G: probe 9's Q-A check was jsonl's alone. facts, sysprompt and opcd put c in the
    system message; a template rendering only user turns gave both views one prompt, and
    evaluate reported regime C while distillation trained at loss 0, with exit 0."""
    import copy

    from nca_interp.tasks import make_task

    task = make_task(name, **(options if options is not None else _opcd_options(tmp_path)))
    drops, keeps = copy.deepcopy(tok), copy.deepcopy(tok)
    drops.chat_template, keeps.chat_template = DROPS_SYSTEM, KEEPS_ROLES
    with pytest.raises(UsageError, match="drops the context.*never see c.*fix the template") \
            as e:
        task.for_tokenizer(drops)
    assert name in str(e.value) and "\n" not in str(e.value)
    seen = task.for_tokenizer(keeps)  # a template that renders the system message: read
    level = seen.levels("test", 1)[0]
    assert seen.prompt(level) != seen.prompt(level, seen.context(level, seen.default_context))
    game = make_task("sokoban")  # c in the user message: this template shows it
    assert game.for_tokenizer(drops).chat is not None


def test_evaluate_refuses_a_template_that_drops_c_before_generating(tmp_path, tok):
    """Q-G end to end: evaluate --task facts on such a checkpoint stops in one line before
    any response is generated, and writes no report."""
    import copy

    from nca_interp import evaluate

    drops = copy.deepcopy(tok)
    drops.chat_template = DROPS_SYSTEM
    ckpt = save_checkpoint(tmp_path / "drop", tiny(tok), drops)
    with pytest.raises(UsageError, match="drops the context"):
        evaluate.execute(evaluate.EvalConfig(ckpt=[str(ckpt)], task="facts", context="facts",
                                             n_levels=4, out=str(tmp_path / "rep")))
    assert not list(tmp_path.glob("rep*"))


def test_a_task_option_too_long_to_be_a_file_name_is_no_file(tmp_path, tok):
    """U-A: every task option's text was stat'ed as a path; a regex pattern= of 256 bytes or
    more raised ENAMETOOLONG ('File name too long'), for evaluate after every response was
    generated, with no report. Such a text names no file: the pattern is used."""
    import json

    from nca_interp import evaluate
    from nca_interp.tasks import option_file
    from train.common import data_inputs

    pattern = "ahoy|" + "x" * 300
    assert option_file(pattern) is None and option_file(str(tmp_path)) is None
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"say {i}", "context": "be nice",
                                        "split": "test" if i < 3 else "train",
                                        "id": f"q{i}"}) + "\n" for i in range(4)))
    assert option_file(str(data)) == data
    assert set(data_inputs({"data": str(data), "pattern": pattern})) == {"task option data"}
    ckpt = save_checkpoint(tmp_path / "student", tiny(tok), tok)
    report = evaluate.execute(evaluate.EvalConfig(
        ckpt=[str(ckpt)], task="jsonl", context="context", n_levels=3,
        task_options=[f"data={data}", "scorer=regex", f"pattern={pattern}"],
        out=str(tmp_path / "rep")))
    assert report["results"]["student"]["n"] == 3
    assert (tmp_path / "rep.json").is_file()
