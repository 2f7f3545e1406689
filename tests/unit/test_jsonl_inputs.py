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
