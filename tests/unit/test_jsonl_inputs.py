"""Own data refused early and in one line: text that is not valid Unicode, a field no model's
context could hold (both when the file is read), a chat template the sandbox blocks (at the
first rendering), and task options whose values hold commas."""

import copy
import json
from pathlib import Path

import pytest

from nca_interp import rollout
from nca_interp.errors import InputError, UsageError
from nca_interp.tasks import jsonl, parse_task_options, task_from_record


def write(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def good(n=4):
    return [{"prompt": f"p{i}", "context": "c", "answer": "a"} for i in range(n)]


def load(tmp_path, rows, *options):
    data = write(tmp_path / "d.jsonl", rows)
    t = task_from_record(None, "jsonl", None, [f"data={data}", *options])
    return jsonl.items(t.config)


# -- text that is not Unicode ---------------------------------------------------------------

@pytest.mark.parametrize("row, field", [
    ('{"prompt": "\\ud800 hi", "context": "c"}', "prompt"),
    ('{"prompt": "hi", "context": "c \\udfff"}', "context"),
    ('{"prompt": "hi", "context": "c", "answer": "\\ud83d"}', "answer"),
    ('{"prompt": [{"role": "system", "content": "s\\udc00"}, {"role": "user", "content": "u"}],'
     ' "context": "c"}', "prompt"),
])
def test_a_lone_surrogate_is_refused_when_the_file_is_read(tmp_path, row, field):
    with pytest.raises(InputError, match=rf'd.jsonl:2: "{field}".* is not valid Unicode text: '
                                         "a lone surrogate"):
        load(tmp_path, [good()[0], row, *good()[1:]])


# -- fields no context could hold --------------------------------------------------------------

@pytest.mark.parametrize("field", ["prompt", "context"])
def test_a_field_longer_than_any_context_is_refused_when_the_file_is_read(tmp_path, field):
    rows = good()
    rows[2][field] = "word " * (jsonl.MAX_FIELD_CHARS // 5 + 1)
    with pytest.raises(InputError, match=rf'd.jsonl:3: "{field}" holds [0-9,]+ characters'):
        load(tmp_path, rows)


def test_encode_refuses_a_text_no_context_could_hold_before_tokenizing():
    class Untouchable:
        unk_token_id = None

        def __call__(self, *a, **k):
            raise AssertionError("tokenized")

    with pytest.raises(rollout.ContextOverflowError, match="characters"):
        rollout.encode(Untouchable(), ["x" * (33 * 100)], limit=100)


# -- chat templates -----------------------------------------------------------------------------

@pytest.mark.parametrize("template, why", [
    ("{% set x = messages.append(1) %}hi", "sandbox forbids"),
    ("{{ messages.__class__.__mro__ }}", "sandbox forbids"),
    ("{{ foo.bar }}", "'foo' is undefined"),
    ("{{ raise_exception('no system role') }}", "no system role"),
])
def test_a_template_that_fails_is_one_line_at_the_first_rendering(tmp_path, tok, template,
                                                                  why):
    chat_tok = copy.deepcopy(tok)
    chat_tok.chat_template = template
    data = write(tmp_path / "d.jsonl", good())
    t = task_from_record(None, "jsonl", None, [f"data={data}"])
    with pytest.raises(UsageError, match=why) as e:
        t.for_tokenizer(chat_tok)
    assert "chat template" in str(e.value) and "\n" not in str(e.value)


# -- commas inside option values ----------------------------------------------------------------

def test_a_comma_inside_a_path_is_rejoined_when_the_file_exists(tmp_path):
    path = tmp_path / "my,own,file.jsonl"
    path.write_text("")
    head, *rest = str(path).split(",")
    got = parse_task_options("jsonl", [f"data={head}", *rest, "scorer=exact"])
    assert got == {"data": str(path), "scorer": "exact"}


@pytest.mark.parametrize("pieces", [
    ["data=a\\", "b.jsonl", "scorer=exact"],
    ['data="a', 'b.jsonl"', "scorer=exact"],
    ["data=a\\,b.jsonl", "scorer=exact"],
    ['data="a,b.jsonl"', "scorer=exact"],
])
def test_an_escaped_or_quoted_comma_stays_in_its_value(pieces):
    assert parse_task_options("jsonl", pieces) == {"data": "a,b.jsonl", "scorer": "exact"}


def test_a_stray_piece_says_how_to_write_a_comma(tmp_path):
    with pytest.raises(UsageError, match=r'comma inside a value.*\\,.*"'):
        parse_task_options("jsonl", [f"data={tmp_path}/no", "such.jsonl", "scorer=exact"])


def test_a_repeated_task_option_is_refused_naming_its_key():
    with pytest.raises(UsageError, match="data") as e:
        parse_task_options("jsonl", ["data=a.jsonl", "data=b.jsonl"])
    assert "twice" in str(e.value) and "\n" not in str(e.value)


# -- values JSON has no word for, and fields of the wrong kind ---------------------------------

@pytest.mark.parametrize("row, why", [
    ('{"prompt": "Q", "context": "c", "answer": NaN}', "NaN"),
    ('{"prompt": "Q", "context": "c", "answer": Infinity}', "Infinity"),
    ('{"prompt": "Q", "context": "c", "group": -Infinity}', "-Infinity"),
    ('{"prompt": "Q", "context": "c", "answer": 4}', '"answer" must be text'),
    ('{"prompt": "Q", "context": "c", "answer": ["a"]}', '"answer" must be text'),
    ('{"prompt": 5, "context": "c"}', '"prompt" must be text or a list of chat messages'),
    ('{"prompt": "Q", "context": {"a": 1}}', '"context" must be text, not dict'),  # 11 U-M
    ('{"prompt": "Q", "context": "c", "group": 1' + "0" * 5000 + "}", "digits"),
    ('{"prompt": "Q\\u0000", "context": "c"}', r'"prompt" holds a control character \(\\x00\)'),
    ('{"prompt": "Q", "context": "c\\u001b[0m"}', r'"context" holds a control character \(\\x1b\)'),
    ('{"prompt": [{"role": "user", "content": "u\\u0007"}], "context": "c"}',
     r"control character \(\\x07\)"),
])
def test_a_value_no_prompt_can_hold_is_refused_naming_file_and_line(tmp_path, row, why):
    with pytest.raises(InputError, match=why) as e:
        load(tmp_path, [good()[0], row, *good()[1:]])
    assert str(e.value).startswith(str(tmp_path / "d.jsonl") + ":2: ")
    assert "\n" not in str(e.value)


def test_tabs_and_newlines_are_text(tmp_path):
    rows = good()
    rows[1]["prompt"] = "a\tb\r\nc"
    assert load(tmp_path, rows)[1].prompt == "a\tb\r\nc"


# -- chat templates that run away ----------------------------------------------------------------

def chat_task(tmp_path, tok, template):
    chat_tok = copy.deepcopy(tok)
    chat_tok.chat_template = template
    t = task_from_record(None, "jsonl", None, [f"data={write(tmp_path / 'd.jsonl', good())}"])
    return t, chat_tok


def test_a_template_that_raises_any_error_is_one_line(tmp_path, tok):
    t, chat_tok = chat_task(tmp_path, tok, "{% for i in range(10**9) %}x{% endfor %}")
    with pytest.raises(UsageError, match="chat template .* (OverflowError|Range too big)") as e:
        t.for_tokenizer(chat_tok)
    assert "\n" not in str(e.value)


def test_a_template_that_renders_too_long_is_stopped(tmp_path, tok, monkeypatch):
    from nca_interp import tokenizer

    monkeypatch.setattr(tokenizer, "RENDER_SECONDS", 0.5)
    loops = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
    t, chat_tok = chat_task(tmp_path, tok, loops + "{{ messages[0]['content'] }}")
    import time

    start = time.monotonic()
    with pytest.raises(UsageError, match="took more than 0.5 s to render") as e:
        t.for_tokenizer(chat_tok)
    assert time.monotonic() - start < 5 and "\n" not in str(e.value)
    import signal

    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None, signal.default_int_handler)


def test_a_template_that_renders_a_huge_text_is_refused(tmp_path, tok, monkeypatch):
    from nca_interp import tokenizer

    monkeypatch.setattr(tokenizer, "MAX_RENDER_CHARS", 10_000)
    t, chat_tok = chat_task(tmp_path, tok, "{% for i in range(2000) %}xxxxxxxxxx{% endfor %}")
    with pytest.raises(UsageError, match="20,000 characters") as e:
        t.for_tokenizer(chat_tok)
    assert "\n" not in str(e.value)


def test_a_template_renders_in_another_thread_without_a_timer(tok):
    import threading

    from nca_interp.tokenizer import render_chat

    chat_tok = copy.deepcopy(tok)
    chat_tok.chat_template = "{{ messages[0]['content'] }}"
    got = []
    thread = threading.Thread(target=lambda: got.append(
        render_chat(chat_tok, [{"role": "user", "content": "hi"}])))
    thread.start()
    thread.join()
    assert got == ["hi"]


def test_a_later_layer_of_options_replaces_an_earlier_ones_key():
    from nca_interp.tasks import merged_task_options

    preset = ["data=a\\", "b.jsonl", "scorer=exact", "max_new=24"]
    got = merged_task_options(preset, ["data=c.jsonl", "max_new=32"])
    assert got == ["scorer=exact", "data=c.jsonl", "max_new=32"]
    assert parse_task_options("jsonl", got)["max_new"] == 32
    assert merged_task_options(None, ["max_new=1", "max_new=2"]) == ["max_new=1", "max_new=2"]


def test_encode_names_the_text_that_holds_a_character_outside_the_vocabulary(tok):
    with pytest.raises(UsageError, match=r"in the text beginning 'bad\\x00 question") as e:
        rollout.encode(tok, ["fine", "bad\x00 question " * 20])
    assert "\n" not in str(e.value) and len(str(e.value)) < 300
