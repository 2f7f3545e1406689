"""The tenth probe's jsonl cases (#71, /work/notes/probe10.md: H-B, T-D, Q-H, Q-E): a regex
pattern, a chat template or a shared c that got past probe 9's fixes one step beside them.
Each failed before its fix."""

import copy
import json
from pathlib import Path

import pytest

from nca_interp import evaluate
from nca_interp.checkpoint import save_checkpoint
from nca_interp.errors import UsageError
from nca_interp.tasks import jsonl, task_from_record
from tests.conftest import tiny
from tests.spies import shown


def write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def rows(n=8, context=lambda i: f"you always answer {i + 1}", **extra):
    return [{"prompt": f"what is {i} plus one", "context": context(i), "answer": str(i + 1),
             "id": f"q{i}", "split": "test" if i < n // 2 else "train", **extra}
            for i in range(n)]


def task(data: Path, *options):
    """The task as a run config's `task` record or --task-options build it."""
    return task_from_record(None, "jsonl", None, [f"data={data}", *options])


def run(student: Path, tmp_path: Path, *options, control: bool = False) -> dict:
    return evaluate.execute(evaluate.EvalConfig(
        ckpt=[str(student)], task="jsonl", task_options=list(options), n_levels=8,
        control=control, out=str(tmp_path / "rep")))


@pytest.fixture
def student(tok, tmp_path):
    return save_checkpoint(tmp_path / "student", tiny(tok), tok)


def one_line(err: pytest.ExceptionInfo, *words: str) -> str:
    msg = str(err.value)
    assert "\n" not in msg and len(msg) < 600, msg
    assert all(w in msg for w in words), msg
    return msg


# -- H-B: every branch of a pattern counts ---------------------------------------------------

@pytest.mark.parametrize("pattern", [
    "(?:a{60000}|b{60000})",  # two branches, each under the limit alone
    "(?:" + "|".join(["a{3400}"] * 30) + ")",  # the probe's 30 branches, cheap ones
    "(a)?(?(1)a{60000}|b{60000})",  # a conditional compiles both arms
    "(?:(?:a{300}|b{300}){200})",  # nesting multiplies the branches' sum
])
def test_a_pattern_is_bounded_over_every_branch_before_regex_compiles_it(tmp_path, monkeypatch,
                                                                           pattern):
    """H-B: the H-A bound counted an alternation as its largest branch, but `regex` compiles
    every branch: `(?:a{99999}|...)` x30, counted 99,999, took 1.15 GB. The sum over the
    branches (times any repeat around them) is bounded, refused in one line before `regex`
    compiles (a compile here fails the test instead of taking memory)."""
    import regex

    data = write(tmp_path / "d.jsonl", rows())

    def no_compile(*a, **k):
        raise AssertionError(f"regex compiled {pattern[:40]!r} before the bound refused it")

    monkeypatch.setattr(regex, "compile", no_compile)
    with pytest.raises(UsageError) as err:
        task(data, "scorer=regex", f"pattern={pattern}")
    one_line(err, "100,000", "open repeat")


def test_patterns_within_the_bound_over_all_branches_still_compile(tmp_path):
    for sane in ["(?:a{50000}|b{50000})", "(cat|dog|bird)+", r"\d{1,3}(,\d{3})*",
                 "(?:yes|no){3}", "(?=a{10})a{10}"]:
        assert jsonl.check_regex(sane) == sane


# -- T-D: a pattern nested too deeply -------------------------------------------------------

DEEP = "(" * 2000 + "a" + ")" * 2000  # within MAX_PATTERN_CHARS: the parser's recursion
DEEPISH = "(" * 400 + "a" + ")" * 400  # re compiles it; regex's compiler recurses past it


@pytest.mark.parametrize("pattern", [DEEP, DEEPISH])
def test_a_deeply_nested_pattern_is_one_line_not_a_recursion_error(tmp_path, pattern):
    """T-D: `check_regex` caught only re.error; a pattern nested 5000 groups deep (a run
    config's, or given) was a RecursionError traceback."""
    data = write(tmp_path / "d.jsonl", rows())
    with pytest.raises(UsageError) as err:
        task(data, "scorer=regex", f"pattern={pattern}")
    one_line(err, "nests its groups too deeply", "characters")


def test_a_deeply_nested_pattern_file_is_refused_before_any_response(student, tmp_path,
                                                                      monkeypatch):
    """T-D: a `pattern=@FILE` was read only when scoring, after every response was generated:
    the RecursionError came at the end of the run's work. It is checked when the task meets
    the checkpoint, before anything is generated."""
    data = write(tmp_path / "d.jsonl", rows())
    deep = tmp_path / "deep.txt"
    deep.write_text(DEEP + "\n")
    seen = shown(monkeypatch)
    with pytest.raises(UsageError) as err:
        run(student, tmp_path, f"data={data}", "scorer=regex", f"pattern=@{deep}")
    one_line(err, f"pattern file {deep}", "nests its groups too deeply")
    assert seen == []  # nothing generated first
    bad = tmp_path / "bad.txt"
    bad.write_text("(unclosed\n")
    with pytest.raises(UsageError, match="is not a regular expression"):
        run(student, tmp_path, f"data={data}", "scorer=regex", f"pattern=@{bad}")
    assert seen == []


# -- Q-H: the chat template checked on every item --------------------------------------------

KEEPS_FIRST_ONLY = (  # the system message only for the prompt of the first item
    "{% for m in messages %}{% if m['role'] == 'system' and messages[-1]['content'] == "
    "'what is 0 plus one' %}<s>{{ m['content'] }}</s>{% endif %}{% if m['role'] == 'user' %}"
    "<u>{{ m['content'] }}</u>{% endif %}{% endfor %}<a>")
KEEPS_SHORT_ONLY = (  # the system message only when it is short
    "{% for m in messages %}{% if m['role'] == 'system' and m['content'] | length < 8 %}"
    "<s>{{ m['content'] }}</s>{% endif %}{% if m['role'] == 'user' %}<u>{{ m['content'] }}"
    "</u>{% endif %}{% endfor %}<a>")


KEEPS_BUT_ONE = (  # the system message for every prompt but one training item's
    "{% for m in messages %}{% if m['role'] == 'system' and messages[-1]['content'] != "
    "'what is 6 plus one' %}<s>{{ m['content'] }}</s>{% endif %}{% if m['role'] == 'user' %}"
    "<u>{{ m['content'] }}</u>{% endif %}{% endfor %}<a>")


def chat_student(tok, tmp_path: Path, template: str) -> tuple:
    chat_tok = copy.deepcopy(tok)
    chat_tok.chat_template = template
    return chat_tok, save_checkpoint(tmp_path / "chat", tiny(tok), chat_tok)


@pytest.mark.parametrize("template, data_rows", [
    (KEEPS_FIRST_ONLY, rows()),
    (KEEPS_SHORT_ONLY, rows(context=lambda i: "be nice" if i == 0 else "be very nice to me")),
])
def test_a_template_that_drops_c_for_any_item_is_refused_before_any_work(
        tok, tmp_path, monkeypatch, template, data_rows):
    """Q-H: Q-A's check rendered only the first item; a template keeping the system message
    for that item alone (or for a short c) passed, then dropped c for every item evaluated
    (response_c == response_no_c, regime C, exit 0). Refused in one line before anything is
    generated."""
    chat_tok, student = chat_student(tok, tmp_path, template)
    data = write(tmp_path / "d.jsonl", data_rows)
    first = jsonl.items(task(data).config)[0]
    from nca_interp.tokenizer import render_chat

    kept = render_chat(chat_tok, jsonl.chat_messages(first, first.context, "system"))
    assert first.context in kept  # the first item alone passed Q-A's check
    seen = shown(monkeypatch)
    with pytest.raises(UsageError) as err:
        run(student, tmp_path, f"data={data}")
    one_line(err, "drops the context", "context_as=user")
    assert seen == []
    ok = task(data, "context_as=user").for_tokenizer(chat_tok)  # the remedy works on all
    assert all(ok.prompt(it) != ok.prompt(it, it.context) for it in jsonl.items(ok.config))


def test_every_item_is_rendered_training_items_too(tok, tmp_path, monkeypatch):
    """Q-H, one step beside it: distillation trains on the training items, so a template
    dropping c for one of them (here q6, no held-out item) would train on identical views.
    Every item is rendered both ways; the first whose views are one prompt is named by file,
    line and id."""
    chat_tok, student = chat_student(tok, tmp_path, KEEPS_BUT_ONE)
    data = write(tmp_path / "d.jsonl", rows())
    seen = shown(monkeypatch)
    with pytest.raises(UsageError) as err:
        run(student, tmp_path, f"data={data}")
    one_line(err, "drops the context", f"{data}:7", "item 'q6'", "context_as=user")
    assert seen == []
    with pytest.raises(UsageError, match="item 'q6'"):
        task(data).for_tokenizer(chat_tok)


# -- Q-E: a default c' that is c itself ------------------------------------------------------

def test_one_shared_one_word_c_is_refused_for_the_control_before_any_work(student, tmp_path,
                                                                          monkeypatch):
    """Q-E: with every item's c "nice", the default c' (c's words shuffled) was "nice": the
    control's responses were the c view's, reads_c 0.000 [0, 0] was printed as "blind to c",
    and c' was called "another group's c", exit 0. Refused before any response, saying how
    to give a wrong c."""
    data = write(tmp_path / "d.jsonl", rows(context=lambda i: "nice"))
    seen = shown(monkeypatch)
    with pytest.raises(UsageError) as err:
        run(student, tmp_path, f"data={data}", control=True)
    one_line(err, "every item shares the c 'nice'", "control_file=", "\"control\" field")
    assert seen == []
    persona = tmp_path / "persona.txt"  # the same through context_file=
    persona.write_text("nice nice\n")
    shared = write(tmp_path / "s.jsonl", [{k: v for k, v in r.items() if k != "context"}
                                          for r in rows()])
    with pytest.raises(UsageError) as err:
        run(student, tmp_path, f"data={shared}", f"context_file={persona}", control=True)
    one_line(err, f"context_file {persona}", "control_file=")
    assert seen == []
    wrong = tmp_path / "wrong.txt"  # the remedy the message names works
    wrong.write_text("rude\n")
    r = run(student, tmp_path, f"data={data}", f"control_file={wrong}", control=True)
    assert r["results"]["student"]["items"]["context_control"] == ["rude"] * 4


def test_a_default_c_prime_is_never_the_items_own_c(tmp_path):
    """Q-E, one step beside it: a two-word shared c shuffled to itself for about half the
    items (S/data.jsonl's "be nice", item 0); contexts that differ only in spacing were taken
    for another group's c; one group whose items all read one-word contexts has no other
    group to take from. Where c's words have another order it is used, else refused; the
    note says "words shuffled", not "another group's c"."""
    data = write(tmp_path / "d.jsonl", rows(20, context=lambda i: "be nice"))
    t = task(data)
    levels = t.levels("test", 99)
    assert len(levels) == 10
    wrong = [t.control_context(levels, i, "context") for i in range(len(levels))]
    assert all(" ".join(w.split()) != "be nice" and sorted(w.split()) == ["be", "nice"]
               for w in wrong), wrong
    note = t.control_note(levels, "context")
    assert "words shuffled" in note and "another group" not in note, note
    spaced = write(tmp_path / "s.jsonl", rows(8, context=lambda i: "be  nice" if i % 2 else
                                              "be nice"))
    t = task(spaced)
    levels = t.levels("test", 99)
    for i in range(len(levels)):
        assert " ".join(t.control_context(levels, i, "context").split()) != "be nice"
    one_group = write(tmp_path / "g.jsonl", [
        *rows(4, context=lambda i: ["nice", "kind"][i % 2], group="g", split="test"),
        {"prompt": "train on me", "context": "nice", "id": "t0", "split": "train"}])
    t = task(one_group)
    levels = t.levels("test", 99)
    with pytest.raises(UsageError) as err:
        t.control_context(levels, 0, "context")
    one_line(err, "no item of another group", "item 'q0'", "control_file=")
