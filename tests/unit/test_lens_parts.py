"""Where in a response the lens reads (nca_interp.lens.answer_tokens, parts_of): each task
names the span its scorer reads (`Task.answer_span`), the span becomes exactly the tokens
whose text lies in it, and the first token and the end are each response's own. The swap
test's null (`swap_forks(null_swaps=...)`) is drawn where the views agree."""

import json

import numpy as np
import torch

from nca_interp import lens
from nca_interp.tasks import make_task


def test_each_task_names_the_span_its_scorer_reads(tmp_path):
    soko = make_task("sokoban")
    assert soko.answer_span(None, "RRUL") == (0, 4)
    assert soko.answer_span(None, " RRUL ") == (1, 5)
    assert soko.answer_span(None, "no moves") is None
    chat = make_task("sokoban", fmt="textarena")
    said = "I go [up] then, after thought, [left]. Done"
    a, b = chat.answer_span(None, said)
    assert said[a:b] == "[up] then, after thought, [left]"
    qa = make_task("sysprompt", fmt="textarena")
    said = "<answer>B</answer> no, <answer> C </answer>"
    a, b = qa.answer_span(qa.levels("test", 1)[0], said)
    assert said[a:b] == "C"  # the last tag, as parse_answer reads it
    facts = make_task("facts", kind="facts")
    lv = facts.levels("test", 1)[0]
    said = f"Its capital, I think, is {lv.value.upper()}!"
    a, b = facts.answer_span(lv, said)
    assert said[a:b] == lv.value.upper()
    said = f"Perhaps {lv.others[0]} or {lv.value}"  # another country's value comes first
    a, b = facts.answer_span(lv, said)
    assert said[a:b] == lv.others[0]
    assert facts.answer_span(lv, f"{lv.value}x is no mention") is None
    rule = make_task("facts", kind="rule", rule="french")
    assert rule.answer_span(rule.levels("test", 1)[0], "  Le chat.\n") == (2, 10)
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"q{i}", "context": "c",
                                        "answer": "two apples", "id": f"a{i}"}) + "\n"
                            for i in range(4)))
    own = make_task("jsonl", data=str(data), scorer="contains")
    item = own.levels("test", 1)[0]
    said = "I have  Two\napples, really"
    a, b = own.answer_span(item, said)
    assert said[a:b] == "Two\napples"
    assert make_task("jsonl", data=str(data)).answer_span(item, " x ") == (1, 2)


def test_the_span_becomes_exactly_its_tokens_and_the_parts_are_each_responses_own(tok):
    """Character tokens: a response 'xRRULy' + eos has its answer at tokens 1..4; the first
    token is 0 and the end the eos, row by row (the second row shorter, padded)."""
    task = make_task("sokoban").for_tokenizer(tok)
    rows = [tok("xRRULy", add_special_tokens=False)["input_ids"] + [tok.eos_token_id],
            tok("DD", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]]
    N = max(map(len, rows))
    resp = torch.tensor([r + [tok.pad_token_id] * (N - len(r)) for r in rows])
    mask = np.array([[1] * len(r) + [0] * (N - len(r)) for r in rows], bool)
    answer = lens.answer_tokens(tok, task, [None, None], resp, mask)
    assert answer.tolist() == [[False, True, True, True, True, False, False],
                               [True, True, False, False, False, False, False]]
    first, ans, end = lens.parts_of(mask, answer)
    assert np.flatnonzero(first[0]).tolist() == [0] and np.flatnonzero(first[1]).tolist() == [0]
    assert np.flatnonzero(end[0]).tolist() == [6] and np.flatnonzero(end[1]).tolist() == [2]
    assert (ans == answer).all()
    assert lens.parts_of(mask, None)[1] is None


def test_a_task_scoring_its_own_way_is_not_read_as_moves():
    """A task that scores otherwise (a plugin's own `score`) and names no span has none: the
    base's moves span would mark any U/D/L/R letters of its answers as the answer."""
    from dataclasses import dataclass

    from nca_interp.tasks.base import Scored, Task

    @dataclass(frozen=True)
    class Own(type(make_task("sokoban"))):
        def score(self, level, response: str) -> Scored:
            return Scored("yes" in response, True, response, 0)

    base = make_task("sokoban")
    own = Own(**{f: getattr(base, f) for f in base.__dataclass_fields__})
    assert base.answer_span(None, "UD yes") == (0, 2) and own.answer_span(None, "UD yes") is None
    assert isinstance(own, Task)


def test_a_task_that_names_no_span_has_no_answer_part(tok):
    task = make_task("sokoban").for_tokenizer(tok)
    resp = torch.tensor([tok("xyz", add_special_tokens=False)["input_ids"]])
    assert lens.answer_tokens(tok, task, [None], resp, np.ones((1, 3), bool)) is None


def test_the_swap_null_is_drawn_where_the_views_agree_and_read_as_its_share(tmp_path):
    """The command's forks on the embedded Sokoban OPD: every null swap lies off the case's
    forks, within its response, at most --null-swaps a case; restored_null is their share and
    the report's harm_restored_null the mean over cases; the same seed draws the same."""
    from nca_interp.assets import embedded

    def forks(report, null_swaps=3):
        out = lens.execute(lens.LensConfig(
            ckpt=[str(embedded("sokoban_opd"))], n_levels=24, batch=8, threads=1, layers=False,
            max_cases=3, max_forks=1, null_swaps=null_swaps,
            out=str(tmp_path / report / "lens")))
        return next(iter(out.results.values())).forks

    f = forks("a")
    cases = f["harm"] + f["help"]
    assert cases, "the embedded OPD has harm or help cases among 24 levels"
    assert any(c["forks"] for c in cases)
    for case in cases:
        drawn = len(case["null_right"])
        assert drawn == len(case["null_at"]) <= 3
        assert case["null_at"] == sorted(set(case["null_at"]))
        assert not set(case["null_at"]) & set(case["forks"])
        assert all(0 <= t < case["n_tokens"] for t in case["null_at"])
        if drawn:
            assert case["restored_null"] == np.mean(case["null_right"])
    every = forks("all", null_swaps=1000)  # more draws than there are tokens: every one
    assert every["harm"] + every["help"]
    for case in every["harm"] + every["help"]:
        assert case["null_at"] == [t for t in range(case["n_tokens"]) if t not in case["forks"]]
    for kind in ("harm", "help"):
        shares = [c["restored_null"] for c in f[kind] if c["restored_null"] is not None]
        assert f[f"{kind}_restored_null"] == (np.mean(shares) if shares else None)
    assert forks("b") == f
