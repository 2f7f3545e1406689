"""System-prompt QA: the synthetic knowledge-base task and OPCD-format local data."""

import json
from pathlib import Path

import pytest

from nca_interp.tasks import make_task, sysprompt, task_from_record, task_record
from nca_interp.tasks import opcd as opcd_data

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "opcd"


def test_knowledge_base_reproducible_by_seed():
    cfg = sysprompt.SyspromptConfig()
    assert sysprompt.knowledge_base(0, cfg) == sysprompt.knowledge_base(0, cfg)
    assert sysprompt.knowledge_base(0, cfg) != sysprompt.knowledge_base(1, cfg)
    kb = sysprompt.knowledge_base(0, cfg)
    for a in range(cfg.n_attributes):  # values of one attribute differ between entities
        assert len({kb.values[e][a] for e in range(cfg.n_entities)}) == cfg.n_entities
    task = make_task("sysprompt")
    assert task.levels("train", 20, seed=3) == task.levels("train", 20, seed=3)
    assert task_from_record(task_record(task)) == task


def stated(q, system: str) -> bool:
    """Whether the rendered KB states the asked fact (entity -> value), in its own layout."""
    name, attr = q.kb.names[q.entity], q.kb.attributes[q.attribute]
    value = q.kb.values[q.entity][q.attribute]
    lines = system.splitlines()
    if q.kb.layout == "facts":
        return f"{value} is {attr} of {name}" in lines
    if q.kb.layout == "rows":
        row = next(r for r in lines if r.endswith(f": {name}"))
        return f"{attr} {value}" in row.split(": ")[0].split(", ")
    row = next(r for r in lines if r.startswith(name + ":"))
    return row.split()[1 + q.attribute] == value


@pytest.mark.parametrize("kb,word_len,layout", [
    (0, 1, "facts"), (None, 1, "facts"), (0, 3, "facts"), (None, 3, "facts"),
    (0, 1, "rows"), (None, 3, "rows"), (0, 1, "table"), (None, 3, "table")])
def test_every_question_answerable_only_from_its_knowledge_base(kb, word_len, layout):
    task = make_task("sysprompt", kb=kb, word_len=word_len, layout=layout, n_attributes=3)
    for q in task.levels("train", 200, seed=0) + task.levels("test", 100, seed=0):
        system = task.context(q, "system")
        value = q.kb.values[q.entity][q.attribute]
        assert stated(q, system)  # the KB states the answer
        assert q.options[sysprompt.LETTERS.index(q.answer)] == value
        assert q.options.count(value) == 1
        # every option is a value of this attribute in the KB: only the binding decides
        column = {q.kb.values[e][q.attribute] for e in range(len(q.kb.names))}
        assert set(q.options) <= column
        # the question names only the entity and the attribute; x carries no KB
        assert q.text.rstrip("?") == q.phrasing.format(a=q.kb.attributes[q.attribute],
                                                       e=q.kb.names[q.entity]).rstrip("?")
        prompt = task.prompt(q)
        assert system not in prompt
        assert not set(system.splitlines()) & set(prompt.splitlines())  # no KB line either
        if layout != "table":  # the prompt ends on the key, as every fact in the KB does
            assert prompt.splitlines()[-1] == q.text == f"{q.kb.attributes[q.attribute]} of " \
                f"{q.kb.names[q.entity]}"


def test_curriculum_and_packed_questions_stay_answerable():
    """Curriculum KBs (1-4 entities) fill missing distractors from outside the KB; packed
    follow-up questions ask about the same KB. The answer is always in the KB, exactly once."""
    task = make_task("sysprompt", kb=None, min_entities=1)
    qs = task.levels("train", 300, seed=1)
    assert {len(q.kb.names) for q in qs} == {1, 2, 3, 4}
    for q in qs + [sysprompt.follow_up(q, i, task.config) for i, q in enumerate(qs[:50])]:
        assert q.options.count(q.value) == 1 and len(set(q.options)) == 4
        assert q.value == q.kb.values[q.entity][q.attribute]


def test_held_out_split_uses_unseen_option_orders():
    task = make_task("sysprompt")
    test = task.levels("test", 10_000)
    assert len(test) == len({q.key for q in test}) == 4 * 2 * 12  # finite, no repeats

    train = task.sample_levels("s", 500, task.held_out_keys())
    test_orders = {tuple(q.options.index(q.kb.values[e][q.attribute])
                         for e in [q.entity] + [x for x in range(4) if x != q.entity])
                   for q in test}
    train_orders = {tuple(q.options.index(q.kb.values[e][q.attribute])
                          for e in [q.entity] + [x for x in range(4) if x != q.entity])
                    for q in train}
    assert not test_orders & train_orders  # no option arrangement is shared
    assert {q.answer for q in test} == {q.answer for q in train} == set("ABCD")
    assert {(q.entity, q.attribute) for q in train} == {(q.entity, q.attribute) for q in test}


@pytest.mark.parametrize("fmt,response", [("compact", "value"), ("compact", "letter"),
                                           ("compact", "value_letter"), ("textarena", "value")])
def test_answer_parsing(fmt, response):
    task = make_task("sysprompt", fmt, response=response)
    q = next(q for q in task.levels("test", 50) if q.answer == "B")
    other = q.options[0]  # option A, wrong
    right, wrong = {
        ("compact", "value"): (q.value, other),
        ("compact", "letter"): ("B", "A"),
        ("compact", "value_letter"): (f"{q.value}:B", f"{other}:A"),
        ("textarena", "value"): ("I think <answer>A</answer>... no: <answer> b </answer>",
                                 "<answer>C</answer>"),
    }[fmt, response]
    assert task.score(q, right).won and task.score(q, task.target(q)).won
    assert not task.score(q, wrong).won and task.score(q, wrong).parsed
    for junk in ("BB", "", "zz", "<answer></answer>", "<answer>Z</answer>", "\x00\n>>",
                 "a:b:B", "y" if "y" not in q.options else "x"):
        if junk.strip() == right:
            continue
        s = task.score(q, junk)
        assert not s.won and not s.parsed, junk


def test_fixture_round_trip(tmp_path):
    items = opcd_data.load(str(FIX / "medmcqa_train.jsonl"))
    assert [i.id for i in items] == ["m1", "m2", "m3", "m4"]  # blank line skipped, none dropped
    assert items[2].options == ("20-40", "60-100", "120-160", "180-220")  # list form
    opcd_data.write(tmp_path / "copy.jsonl", list(items))
    again = opcd_data.load(str(tmp_path / "copy.jsonl"))
    assert [(i.question, i.options, i.answer, i.id) for i in again] == \
        [(i.question, i.options, i.answer, i.id) for i in items]
    task = make_task("opcd", "textarena", train=str(FIX / "medmcqa_train.jsonl"),
                     test=str(FIX / "medmcqa_test.jsonl"),
                     system_prompt=str(FIX / "medmcqa_system.txt"))
    test = task.levels("test", 100)
    assert [q.id for q in test] == ["t1", "t2"]
    for q in test:
        assert task.score(q, "reasoning... " + task.target(q)).won
        assert "single best option letter" in task.context(q, "system")
    safety = make_task("opcd", "textarena", kind="yesno", train=str(FIX / "safety_test.jsonl"),
                       test=str(FIX / "safety_test.jsonl"),
                       system_prompt=str(FIX / "safety_system.txt"))
    q3 = safety.levels("test", 3)[2]
    assert q3.answer == "yes" and safety.score(q3, "<answer>YES</answer>").won
    assert not safety.score(q3, "<answer>no</answer>").won
    assert not safety.score(q3, "<answer>maybe</answer>").parsed


@pytest.mark.parametrize("line,why", [
    ('{"question": "q", "options": {"A": "x", "B": "y"}, "answer": "C"}', "not one of"),
    ('{"question": "q", "options": {"A": "x", "C": "y"}, "answer": "A"}', "not A, B, C"),
    ('{"question": "", "options": ["x", "y"], "answer": "A"}', "empty .question"),
    ('{"question": "q", "options": ["x"], "answer": "A"}', "2-8 non-empty"),
    ('{"question": "q", "options": ["x", "y"]}', "empty .answer"),
    ('{"question": "q", "options": ["x", "y"], "answer": "A"', "not valid JSON"),
    ('["q", "A"]', "not a JSON object"),
])
def test_malformed_line_named(tmp_path, line, why):
    good = json.dumps({"question": "ok", "options": ["a", "b"], "answer": "A"})
    path = tmp_path / "bad.jsonl"
    path.write_text(good + "\n" + good + "\n" + line + "\n")
    with pytest.raises(opcd_data.DataFormatError, match=f"bad.jsonl:3: .*{why}"):
        opcd_data.load(str(path))


def test_missing_files_and_wrong_context_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        opcd_data.load(str(tmp_path / "absent.jsonl"))
    bad_yesno = tmp_path / "s.jsonl"
    bad_yesno.write_text('{"question": "q", "answer": "B"}\n')
    with pytest.raises(opcd_data.DataFormatError, match="s.jsonl:1: .*not yes or no"):
        opcd_data.load(str(bad_yesno), "yesno")
    task = make_task("sysprompt")
    with pytest.raises(ValueError, match="one context kind, system"):
        task.context(task.level(0), "plan")


def test_every_stage_runs_on_sysprompt(tmp_path):
    """The fixed-prompt task through SFT (random KBs), OPD/NCA (KB 0), evaluation (accuracy),
    layer_sim, grad_align and param_delta, with the system prompt as the default context."""
    from nca_interp import evaluate, grad_align, layer_sim, param_delta
    from nca_interp.checkpoint import read_run_config
    from train import distill, sft

    base = tmp_path / "base"
    sft.main(["--task", "sysprompt", "--out", str(base), "--n-layers", "2", "--d-model", "32",
              "--d-mlp", "64", "--batch", "8", "--steps", "2", "--eval-every", "2",
              "--eval-levels", "6", "--threads", "1", "--warmup", "1"])
    rec = read_run_config(base)
    assert rec["task"]["name"] == "sysprompt" and rec["task"]["kb"] == 0  # recorded: KB 0
    log = [json.loads(ln) for ln in (base / "metrics.jsonl").read_text().splitlines()]
    assert {"win_none", "win_system"} <= log[-1].keys()
    for method in ("opd", "nca"):
        distill.main(["--method", method, "--student", str(base), "--out",
                      str(tmp_path / method), "--batch", "8", "--steps", "2", "--save-every",
                      "1", "--eval-every", "2", "--eval-levels", "8", "--threads", "1"])
        assert read_run_config(tmp_path / method)["context"] == "system"
    ckpts = [str(base), str(tmp_path / "opd"), str(tmp_path / "nca")]
    reports = evaluate.main([*ckpts, "--n-levels", "30"])["results"]
    assert all(r["metric"] == "accuracy" and r["n"] == 30 for r in reports.values())
    assert "acc_no_c" in evaluate.format_table(reports)
    ls = layer_sim.main([*ckpts, "--n-levels", "8", "--out", str(tmp_path / "ls")])
    assert ls["context"] == "system" and len(ls["results"]) >= 3
    # the item noise clusters a fact's phrasings: units counted, a standard error per layer
    assert all(r["n_units"] <= r["n_examples"] == 8 and len(r["cos_se"]) == len(r["cos"])
               for r in ls["results"].values())
    ga = grad_align.main([str(tmp_path / "opd"), "--teacher", str(base), "--batch", "8",
                          "--out", str(tmp_path / "ga")])
    assert ga["task"] == "sysprompt"
    param_delta.main([str(tmp_path / "opd"), str(tmp_path / "nca"), "--init", str(base),
                      "--out", str(tmp_path / "pd")])


def test_layouts_and_records_from_before_layouts():
    with pytest.raises(ValueError, match="layout must be one of"):
        make_task("sysprompt", layout="grid")
    record = task_record(make_task("sysprompt", layout="facts"))
    assert task_from_record(record).config.layout == "facts"
    record.pop("layout")  # a run recorded before layouts existed rendered the table
    assert task_from_record(record).config.layout == "table"
