"""Your own data: prompts and privileged contexts from a JSONL file, scored by a rule you name.

    --task jsonl --task-options data=mine.jsonl,scorer=startswith,pattern=Ahoy
    --task jsonl --task-options data=mine.jsonl,context_file=persona.txt,scorer=score.py:fn

One JSON object per line:

- `prompt` (x): text, or a list of chat messages (`{"role": ..., "content": ...}`) used as
  written; nothing is appended to it;
- `context` (c): per item, or one text shared by every item from `context_file=`;
- `control` (optional): your own wrong context c' for the item, what `evaluate --control`
  shows in c's place (c' for every item at once: `control_file=`); without either, c' is
  another group's c, or with one shared c its words shuffled, which keep any keyword a rule
  scores (a persona's "Ahoy"): give your own where that matters (and where c' would be c
  itself, a one-word shared c: refused before any work). The report names where c' came
  from and keeps it, with the control's responses, per item;
- `answer` (optional): the reference a scorer compares with, and the response budget's length;
- `split` (optional): `train` or `test`; items without one are split by a seeded draw
  (`test_share`, `split_seed`);
- `id` (optional): the item's name in every report (default: its line number);
- `group` (optional): items that share a group (one fact asked in several phrasings) are one
  independent unit: every interval resamples groups, not items, and a group is never split
  between train and test (default: each item its own group).

Where c goes (`context_as`): `system` (the system message; without c the chat template's own
default system message stays), `user` (c, a blank line, then the user's first message) or
`prefix` (c and a newline before the whole prompt text). A checkpoint without a chat template
always gets `c\\nx`.

Scorers (`scorer=`): `exact`, `contains`, `startswith` (against `pattern=` when given, else the
item's `answer`; case and surrounding space ignored), `regex` (`pattern=`, or `pattern=@FILE`),
`language` (`language=fr|de|...`: the identifier of the `french` rule), or your function
`scorer=path/to/file.py:fn` (or `module:fn`), called as `fn(item: dict, response: str)` on the raw
response and returning a bool, or a finite number in [0, 1] read as right when >= 0.5, within
`scorer_timeout` seconds (default 10, at most an hour) per item. It runs in a worker process of
its own (`nca_interp.scorer_worker`), imported when the task meets its checkpoint's tokenizer,
before any response is generated; anything else it does (NaN, another type, an exception,
`sys.exit`, a hang) stops the command with one line naming the item, and no process it started
outlives the command. Without a scorer, an item's `answer` is scored `exact`; with neither,
nothing is scored, and `evaluate` reports what needs no score (the views' KL, the length
change).

Refused when the file is read, naming file and line: text that is not valid Unicode (a lone
surrogate such as `"\\ud800"`), a control character other than tab, newline and carriage return
in a text the model is fed (`"\\u0000"`: no tokenizer's vocabulary has it), a field of more than
`MAX_FIELD_CHARS` characters (no model's context holds it; tokenizing it would take minutes
first), the constants JSON itself has no word for (`NaN`, `Infinity`, which Python's reader
takes), and a number too long to read.

A value with a comma in it (`data=my,file.jsonl`) is written `data=my\\,file.jsonl` or quoted,
`'data="my,file.jsonl"'`; a path that exists is also rejoined when written plainly.
"""

from __future__ import annotations

import functools
import json
import math
import random
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nca_interp import scorer_worker
from nca_interp.errors import InputError, UsageError
from nca_interp.fsio import read_text
from nca_interp.tasks.base import (
    MAX_NEW,
    MAX_SEED,
    Scored,
    Task,
    TaskSpec,
    check_types,
    register,
    reordered,
    same_context,
    stripped_span,
    whole,
)

__all__ = ["BUDGET_MARGIN", "DEFAULT_BUDGET", "KINDS", "MAX_FIELD_CHARS", "JsonlConfig",
           "JsonlTask", "all_test_questions", "chat_messages", "generate_level", "items", "score",
           "scored", "shared_context", "shared_control", "user_scorer", "whole_groups"]

CONTEXT_AS = ("system", "user", "prefix")
SCORERS = ("exact", "contains", "startswith", "regex", "language")
KINDS = ("context",)  # the one context kind: the item's c (or the shared file's)
DEFAULT_BUDGET = 64  # response tokens when no item has an answer
BUDGET_MARGIN = 8  # tokens past the longest answer
# 32 characters per token (more than any tokenizer packs into a token of text) times 128k tokens
# (the longest window of the checkpoints loaded here): a field no context could hold
MAX_FIELD_CHARS = 32 * 131_072


@dataclass(frozen=True)
class JsonlConfig:
    data: str = ""  # the JSONL file
    context_file: str = ""  # one c shared by every item (else each item's `context`)
    control_file: str = ""  # one wrong context c' for every item without its own `control`
    context_as: str = "system"  # system | user | prefix
    scorer: str = ""  # exact | contains | startswith | regex | language | FILE.py:fn | module:fn
    pattern: str = ""  # for regex (or @FILE), or a fixed text for exact/contains/startswith
    language: str = ""  # for scorer=language
    test_share: float = 0.25  # held-out share of the items that name no split
    split_seed: int = 0
    max_new: int = 0  # response budget in tokens; 0: from the data (longest answer + margin)
    scorer_timeout: float = scorer_worker.DEFAULT_TIMEOUT  # seconds per item for your scorer

    def __post_init__(self):
        check_types(self)
        if not self.data:
            raise UsageError("task jsonl needs data=FILE.jsonl (one JSON object per line with "
                             "prompt and context); see docs/own_data.md")
        if self.context_as not in CONTEXT_AS:
            raise UsageError(f"context_as must be one of {', '.join(CONTEXT_AS)}, not "
                             f"{self.context_as!r}")
        if not 0 < self.test_share < 1:
            raise UsageError(f"test_share must lie between 0 and 1, not {self.test_share}")
        whole("split_seed", self.split_seed, 0, MAX_SEED, " (the seed of the train/test draw)")
        whole("max_new", self.max_new, 0, MAX_NEW, " (the response budget in tokens; 0: from "
              "the data)")
        scorer_worker.check_timeout(self.scorer_timeout)  # finite: inf overflows a time_t
        builtin = self.scorer in SCORERS
        if self.scorer and not builtin and ":" not in self.scorer:
            raise UsageError(f"scorer={self.scorer!r}: choose one of {', '.join(SCORERS)}, or "
                             "your function as path/to/file.py:fn or module:fn")
        if self.scorer == "regex" and not self.pattern:
            raise UsageError("scorer=regex needs pattern=REGEX (or pattern=@FILE)")
        if self.scorer == "language" and not self.language:
            raise UsageError("scorer=language needs language=CODE (fr, de, es, ...)")
        if self.scorer == "language":
            from nca_interp.tasks.language import language

            try:  # an unknown code fails here, not after the responses are generated
                language("a test", (self.language,))
            except ValueError:
                raise UsageError(f"language={self.language!r} is not a language code the "
                                 "identifier knows (fr, de, es, it, pt, nl, ...)") from None
        if self.scorer == "regex" and not self.pattern.startswith("@"):
            check_regex(self.pattern)


@dataclass(frozen=True)
class Item:
    id: str
    prompt: str | tuple  # text, or chat messages as ((role, content), ...)
    context: str | None
    answer: str | None
    split: str
    source: str  # file:line, for messages
    raw: dict = field(compare=False, repr=False, hash=False)
    group: str = ""  # the independent unit it belongs to ("": itself)
    control: str | None = None  # the user's own wrong context c' for this item

    @property
    def unit(self) -> str:
        return self.group or self.id

    @property
    def key(self) -> str:
        return self.id

    @property
    def solution(self) -> str | None:
        return self.answer

    def text(self) -> str:
        """The prompt as one text (a message list: its contents, one per line)."""
        if isinstance(self.prompt, str):
            return self.prompt
        return "\n".join(content for _, content in self.prompt)


def _fail(where: str, why: str) -> InputError:
    return InputError(f"{where}: {why}; every line must be one JSON object with \"prompt\" (text "
                      "or chat messages) and \"context\" (unless context_file= is given)")


def _messages(value, where: str) -> tuple:
    out = []
    for m in value:
        if not (isinstance(m, dict) and isinstance(m.get("role"), str)
                and isinstance(m.get("content"), str)):
            raise _fail(where, "a chat message must be {\"role\": ..., \"content\": ...}")
        out.append((m["role"], m["content"]))
    if not out or out[-1][0] != "user":
        raise _fail(where, "a message list must end with a user message")
    return tuple(out)


PROMPT_FIELDS = ("prompt", "context", "answer", "control")  # the fields a model is fed
# C0 control characters but tab, newline and carriage return: no tokenizer has them as text
CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")


def check_text(value, where: str, field: str) -> None:
    """An InputError when a text in `value` (a field of the line at `where`, searched through
    its lists and objects) is no valid Unicode, or one of PROMPT_FIELDS is longer than
    MAX_FIELD_CHARS: both would fail later, in a traceback or after minutes of tokenizing."""
    if isinstance(value, dict):
        for k, v in value.items():
            check_text(k, where, field)
            check_text(v, where, field)
    elif isinstance(value, list):
        for v in value:
            check_text(v, where, field)
    elif isinstance(value, str):
        field = field.encode("utf-8", "backslashreplace").decode("utf-8")  # a broken key too
        fed = field in (*PROMPT_FIELDS, "context_file", "control_file")
        if len(value) > MAX_FIELD_CHARS and fed:
            raise InputError(f"{where}: \"{field}\" holds {len(value):,} characters, more than "
                             f"the {MAX_FIELD_CHARS:,} any model's context could hold; shorten "
                             "it or split it into several items")
        bad = CONTROL.search(value) if fed else None
        if bad:
            raise InputError(f"{where}: \"{field}\" holds a control character "
                             f"({ascii(bad.group())[1:-1]}) at character {bad.start()}, which no "
                             "tokenizer reads as text; remove it (tab, newline and carriage "
                             "return are fine)")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InputError(f"{where}: \"{field}\" is not valid Unicode text: a lone surrogate "
                             f"({ascii(value[e.start])[1:-1]}) at character {e.start}; write the "
                             "whole character (a surrogate pair, or the character itself)"
                             ) from None


def _no_constant(name: str):
    raise UsageError(f"{name} is no JSON value (Python's reader takes it, no other does); "
                     "write a number, or the text in quotes")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 reads as inf, past parse_constant
        raise UsageError(f"{text} is no finite number; write it as text, in quotes")
    return value


def _no_repeated_key(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    twice = next((k for k in keys if keys.count(k) > 1), None)
    if twice is not None:  # json keeps the last one without a word
        raise UsageError(f"the key {twice!r} is given twice in one object; give it once")
    return dict(pairs)


def parse_row(line: str, where: str):
    """One line's JSON value; an InputError naming `where` for what JSON does not allow (and
    Python reads anyway: NaN, Infinity) or Python cannot read (a number of over 4300 digits)."""
    try:
        return json.loads(line, parse_constant=_no_constant, parse_float=_finite,
                          object_pairs_hook=_no_repeated_key)
    except RecursionError:
        raise _fail(where, "JSON nested too deeply to read") from None
    except json.JSONDecodeError as e:
        raise _fail(where, f"not valid JSON (column {e.colno}: {e.msg})") from None
    except ValueError as e:  # ours above, or int()'s limit on digits
        said = " ".join(str(e).split())
        if "digits" in said:
            said = (f"a number of more than {sys.get_int_max_str_digits()} digits, more than "
                    "Python reads; write it as text, in quotes")
        raise InputError(f"{where}: {said}") from None


def parse_line(line: str, where: str, shared: bool, n: int) -> Item:
    row = parse_row(line, where)
    if not isinstance(row, dict):
        raise _fail(where, "not a JSON object")
    for name, value in row.items():
        check_text(name, where, name)
        check_text(value, where, name)
    prompt = row.get("prompt")
    if isinstance(prompt, list):
        prompt = _messages(prompt, where)
    elif prompt is not None and not isinstance(prompt, str):
        raise _fail(where, f"\"prompt\" must be text or a list of chat messages, not "
                           f"{type(prompt).__name__}")
    elif prompt is None or not prompt.strip():
        raise _fail(where, "\"prompt\" is missing or empty")
    context = row.get("context")
    if context is not None and not isinstance(context, str):  # probe 11 U-M: not "missing"
        raise _fail(where, f"\"context\" must be text, not {type(context).__name__}")
    if not shared and (context is None or not context.strip()):
        raise _fail(where, "\"context\" is missing or empty")
    control = row.get("control")
    if control is not None and (not isinstance(control, str) or not control.strip()):
        raise _fail(where, "\"control\" (your wrong context c') must be text that is not empty")
    answer = row.get("answer")
    if answer is not None and not isinstance(answer, str):
        raise _fail(where, f"\"answer\" must be text (a number too: \"4\", in quotes), not "
                           f"{type(answer).__name__}")
    split = row.get("split", "")
    if split not in ("", "train", "test"):
        raise _fail(where, f"\"split\" must be train or test, not {split!r}")
    ident = row.get("id", n)
    group = row.get("group", "")
    if isinstance(group, bool) or not isinstance(group, (str, int)):
        raise InputError(f"{where}: \"group\" must be text or a whole number (items of one "
                         f"fact share it), not {type(group).__name__}")
    return Item(str(ident), prompt, context, answer, split, where, row, str(group), control)


@functools.lru_cache(maxsize=8)
def load(path: str, shared: bool, test_share: float, split_seed: int,
         stamp: tuple = ()) -> tuple[Item, ...]:
    """Every item of a JSONL file, each with its split (blank lines allowed; any other bad line
    is an error naming file and line: nothing is dropped). `stamp` (the file's size and
    modification time) keys the cache, so an edited file is read again."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"data file {path} not found; pass data=FILE.jsonl, a file you have")
    items = [parse_line(line, f"{p}:{n}", shared, n)
             for n, line in enumerate(read_text(p, "data file").splitlines(), 1)
             if line.strip()]
    if not items:
        raise InputError(f"{p} holds no items")
    seen: dict[str, str] = {}
    for it in items:
        if it.id in seen:
            raise InputError(f"{it.source}: id {it.id!r} repeats the one at {seen[it.id]}; "
                             "give every item its own id")
        seen[it.id] = it.source
    for it in items:  # an ungrouped item is its own unit, named by its id
        other = seen.get(it.group) if it.group and it.group != it.id else None
        if other and not next(o for o in items if o.id == it.group).group:
            raise InputError(f"{it.source}: group {it.group!r} is also the id of the item at "
                             f"{other}, which names no group; rename the group or give that "
                             "item a group")
    fixed: dict[str, Item] = {}  # a group's explicit split, from its first item that names one
    for it in items:
        if it.split and fixed.setdefault(it.unit, it).split != it.split:
            first = fixed[it.unit]
            raise InputError(f"{it.source}: group {it.unit!r} is marked {it.split!r} here and "
                             f"{first.split!r} at {first.source}; a group's items must share "
                             "one split (or name none)")
    # the groups with no split named are held out by a seeded draw (one item per group: the
    # same draw as drawing items)
    free = list(dict.fromkeys(it.unit for it in items if it.unit not in fixed))
    random.Random(f"jsonl-split-{split_seed}").shuffle(free)
    held = set(free[: max(1, round(test_share * len(free)))] if free else [])
    out = tuple(it if it.split else
                replace(it, split=fixed[it.unit].split if it.unit in fixed else
                        "test" if it.unit in held else "train")
                for it in items)
    for split in ("train", "test"):
        if not any(it.split == split for it in out):
            raise InputError(f"{p}: no {split} item (of {len(out)}); mark some items "
                             f"\"split\": \"{split}\" or change test_share")
    return out


def items(cfg: JsonlConfig) -> tuple[Item, ...]:
    p = Path(cfg.data)
    stamp = (p.stat().st_size, p.stat().st_mtime_ns) if p.exists() else ()
    return load(cfg.data, bool(cfg.context_file), cfg.test_share, cfg.split_seed, stamp)


def shared_context(cfg: JsonlConfig) -> str | None:
    return _shared_text(cfg.context_file, "context_file", "context file")


def shared_control(cfg: JsonlConfig) -> str | None:
    """The one wrong context c' of `control_file=` (None when not given)."""
    return _shared_text(cfg.control_file, "control_file", "control file")


def _shared_text(path: str, option: str, what: str) -> str | None:
    if not path:
        return None
    p = Path(path)
    if not p.exists():
        raise InputError(f"{what} {p} not found; pass {option}=FILE, a file you have")
    text = read_text(p, what).strip()
    if not text:
        raise InputError(f"{what} {p} is empty")
    check_text(text, str(p), option)
    return text


def _shown(text: str, n: int = 80) -> str:
    return repr(text) if len(text) <= n else f"{text[:n - 20]!r}... ({len(text):,} characters)"


def _some(k: int, rest: int, own: int) -> str:
    """"the other K items: " where a c' draw covers only some of the items."""
    if k == rest and not own:
        return ""
    return f"{'the other ' if own and k == rest else ''}{k} items: "


def generate_level(seed: int | str, cfg: JsonlConfig, split: str = "train") -> Item:
    pool = [it for it in items(cfg) if it.split == split]
    return pool[random.Random(f"jsonl-{seed}").randrange(len(pool))]


def all_test_questions(cfg: JsonlConfig, seed: int = 0) -> list[Item]:
    """The held-out items, in file order."""
    return [it for it in items(cfg) if it.split == "test"]


def whole_groups(test: list[Item], n: int) -> list[Item]:
    """The items of the first groups (in order of first appearance) that fit in `n` items
    together, at least one group, in file order: `n` never cuts a group. Without groups: the
    first `n` items."""
    size: dict[str, int] = {}
    for it in test:
        size[it.unit] = size.get(it.unit, 0) + 1
    keep: set[str] = set()
    total = 0
    for unit, k in size.items():
        if keep and total + k > n:
            break
        keep.add(unit)
        total += k
    return [it for it in test if it.unit in keep]


# -- scoring -----------------------------------------------------------------------------------

def _norm(text: str) -> str:
    return " ".join(text.strip().lower().split())


# The most a pattern's counted repeats may multiply out to: the `regex` module expands them
# when it compiles (`x{4294967294}` asks for terabytes, `(a{1000}){1000}` for 280 MB), before
# any match time limit applies. A scorer's pattern needs a few dozen.
MAX_REPEAT_EXPANSION = 100_000
# ... and the longest pattern (probe 11 H-C: a class of 4000 members under {90000} took 1.9 GB)
MAX_PATTERN_CHARS = 4096


def _expansion(parsed) -> int:
    """How many times `parsed` (re's parse of a pattern, or a part of one) spells out its
    atoms once each counted repeat is multiplied out (an open repeat counts its minimum; a
    character class counts its members, as `regex` copies them into each repeat). The
    parts of a group, an alternation, a conditional or a lookaround are summed, not the largest
    taken: `regex` compiles every branch (`(?:a{99999}|b{99999}|...)` x30 took 1.15 GB)."""
    sre = _sre_parse()
    total = 0
    for op, av in parsed:
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            lo, hi, sub = av
            total += max(1, lo if hi == sre.MAXREPEAT else hi) * _expansion(sub)
        elif op == sre.IN:  # a class: `regex` copies its members into every repeated copy
            total += max(1, len(av))  # (a range or category one each: `[a-z]` costs 1)
        else:  # a group, branch, conditional, lookaround: every part
            total += max(1, sum(_expansion(p) for p in _parts(av)))
    return total


def _parts(av) -> list:
    """The parsed sub-patterns inside an item's argument (a group's, each branch's, ...)."""
    if isinstance(av, _sre_parse().SubPattern):
        return [av]
    if isinstance(av, (tuple, list)):
        return [p for a in av for p in _parts(a)]
    return []


def _sre_parse():
    """re's own parser (and its opcodes): the pattern as `re` reads it, without compiling it.
    Imported by name: typeshed has no stub for this private module."""
    import importlib

    return importlib.import_module("re._parser")


def check_regex(pattern: str, where: str = "pattern") -> str:
    """`pattern` if it compiles; a UsageError naming it otherwise (re.error is no ValueError:
    it would end in a traceback), where it nests too deeply for the parsers (both recurse: a
    RecursionError), or where its counted repeats multiply out past MAX_REPEAT_EXPANSION
    (checked on re's parse, before `regex` compiles it)."""
    import regex

    if len(pattern) > MAX_PATTERN_CHARS:
        raise UsageError(f"{where} {_shown(pattern)} holds {len(pattern):,} characters, more "
                         f"than the {MAX_PATTERN_CHARS:,} a scorer's pattern may (it needs a "
                         "few hundred; a checkpoint's run config may record the pattern)")
    try:
        re.compile(pattern)
        size = _expansion(_sre_parse().parse(pattern))
    except re.error as e:
        raise UsageError(f"{where} {pattern!r} is not a regular expression ({e})") from None
    except RecursionError:
        raise _too_deep(pattern, where) from None
    if size > MAX_REPEAT_EXPANSION:
        raise UsageError(f"{where} {_shown(pattern)} repeats its parts {size:,} times once its "
                         "counted "
                         f"repeats are multiplied out, over the limit of "
                         f"{MAX_REPEAT_EXPANSION:,}: use an open repeat (+, *) or a smaller "
                         "count (a checkpoint's run config may record the pattern)")
    try:
        regex.compile(pattern)  # what `_search` matches with
    except regex.error as e:
        raise UsageError(f"{where} {pattern!r} is not a regular expression ({e})") from None
    except RecursionError:
        raise _too_deep(pattern, where) from None
    return pattern


def _too_deep(pattern: str, where: str) -> UsageError:
    shown = pattern if len(pattern) <= 80 else f"{pattern[:60]}... ({len(pattern):,} characters)"
    return UsageError(f"{where} {shown!r} nests its groups too deeply to compile: flatten it "
                      "(a scorer's pattern needs a few levels; a checkpoint's run config may "
                      "record the pattern)")


# Seconds one regex match may take. Fixed, not scorer_timeout: a run config may record that
# (up to an hour) beside the pattern, and a sane pattern takes microseconds on a response.
REGEX_TIMEOUT = 10.0


def _search(pattern: str, response: str, label: str) -> bool:
    """`re.search(pattern, response)` found something, under REGEX_TIMEOUT: the `regex` module
    (re's syntax; a dependency of transformers too) stops a match that backtracks without end
    (`(a|aa)+$`, in a run config's `pattern` or given), one UsageError naming the pattern and
    the item, where `re` hung the command."""
    return _match(pattern, response, label) is not None


def _match(pattern: str, response: str, label: str):
    """`_search`'s match (or None), under the same time limit."""
    import regex

    try:
        return regex.search(pattern, response, timeout=REGEX_TIMEOUT)
    except TimeoutError:
        raise UsageError(f"scorer=regex: pattern {pattern!r} took longer than {REGEX_TIMEOUT:g} s "
                         f"on {label} (it backtracks without end): simplify the pattern (a "
                         "checkpoint's run config may record one; name another with "
                         "--task-options pattern=...)") from None


def _pattern(cfg: JsonlConfig) -> str:
    if cfg.pattern.startswith("@"):
        return check_regex(read_text(cfg.pattern[1:], "pattern file").strip(),
                           f"pattern file {cfg.pattern[1:]}")
    return cfg.pattern


def user_scorer(spec: str, timeout: float = scorer_worker.DEFAULT_TIMEOUT
                ) -> scorer_worker.ScorerWorker:
    """Your scorer `path/to/file.py:fn` or `module:fn` in its worker process (one per scorer
    and time limit, started at its first use; see `nca_interp.scorer_worker`): called as
    `fn(item, response)`, it says right or wrong under the contract, and a UsageError names
    whatever breaks it."""
    key = (spec, float(timeout))
    worker = _WORKERS.pop(key, None) or scorer_worker.ScorerWorker(spec, float(timeout))
    _WORKERS[key] = worker  # the most recently used last
    while len(_WORKERS) > MAX_WORKERS:  # the oldest closed (it starts again if used again)
        _WORKERS.pop(next(iter(_WORKERS))).close()
    return worker


# A command's scorer workers by (scorer, time limit), so that a scorer is imported once: each
# is closed when evicted, and by its finalizer when the process ends (never left behind).
_WORKERS: dict[tuple[str, float], scorer_worker.ScorerWorker] = {}
MAX_WORKERS = 4


def is_user_scorer(kind: str) -> bool:
    return bool(kind) and kind not in SCORERS


def scored(cfg: JsonlConfig) -> bool:
    """Whether responses to this data can be scored (a scorer, or answers to compare with)."""
    return bool(cfg.scorer) or any(it.answer is not None for it in items(cfg))


def score(cfg: JsonlConfig, item: Item, response: str) -> bool | None:
    """Whether `response` is right for `item`; None when nothing can score it. A user scorer's
    exception is an error naming the item."""
    kind = cfg.scorer or ("exact" if item.answer is not None else "")
    if not kind:
        return None
    if kind in ("exact", "contains", "startswith"):
        ref = cfg.pattern or item.answer
        if ref is None:
            raise UsageError(f"{item.source}: scorer={kind} needs the item's \"answer\" or "
                             "pattern=")
        got, want = _norm(response), _norm(ref)
        return {"exact": got == want, "contains": want in got,
                "startswith": got.startswith(want)}[kind]
    if kind == "regex":
        return _search(_pattern(cfg), response, f"item {item.id!r} ({item.source})")
    if kind == "language":
        from nca_interp.tasks.language import LANGUAGES, language

        langs = LANGUAGES if cfg.language in LANGUAGES else (*LANGUAGES, cfg.language)
        return language(response, langs) == cfg.language
    return user_scorer(kind, cfg.scorer_timeout).score(
        dict(item.raw, id=item.id), response, f"item {item.id!r} ({item.source})")


# -- prompts -------------------------------------------------------------------------------

def chat_messages(item: Item, context: str | None, context_as: str) -> list[dict]:
    """The item's chat messages with c placed as `context_as` says (`prefix` is placed by the
    caller, before the templated text)."""
    msgs = [{"role": "user", "content": item.prompt}] if isinstance(item.prompt, str) else \
        [{"role": r, "content": c} for r, c in item.prompt]
    if context is None or context_as == "prefix":
        return msgs
    if context_as == "system":
        if msgs[0]["role"] == "system":
            return [{"role": "system", "content": f"{context}\n\n{msgs[0]['content']}"},
                    *msgs[1:]]
        return [{"role": "system", "content": context}, *msgs]
    first = next(i for i, m in enumerate(msgs) if m["role"] == "user")
    msgs[first] = {"role": "user", "content": f"{context}\n\n{msgs[first]['content']}"}
    return msgs


def render_compact(item: Item) -> str:
    return item.text()


render_chat = render_compact


@dataclass(frozen=True)
class JsonlTask(Task):
    """A researcher's own prompts and contexts from a JSONL file (`nca_interp.tasks.jsonl`):
    the prompts used exactly as written, c placed as `context_as` says, responses scored by the
    named scorer (or not at all: `scored` is False)."""

    teacher_sft = False  # a checkpoint the user brings: nothing to supervise

    budget_tokenizer: Any = field(default=None, compare=False, repr=False)
    success = "accuracy"
    default_context = "context"
    context_kinds = KINDS

    @property
    def scored(self) -> bool:
        return scored(self.config)

    @property
    def unit_name(self) -> str:
        """What the intervals resample: groups when the data names any, else items."""
        return "group" if any(it.group for it in items(self.config)) else "item"

    def unit(self, level) -> str:
        return level.unit

    def level(self, seed: int | str, split: str = "train"):
        return generate_level(seed, self.config, split)

    def levels(self, split: str, n: int, seed: int = 0) -> list:
        """Held-out: the test items in file order, the first `n`, taken in whole groups (the
        groups whose items all fit in `n`, at least one); training: seeded draws."""
        if split == "test":
            return whole_groups(all_test_questions(self.config, seed), n)
        return [self.level(f"{split}-{seed}-{i}") for i in range(n)]

    def sample_levels(self, stream: str, n: int, exclude: set[str]) -> list:
        return [self.level(f"{stream}-{i}") for i in range(n)]  # train items only

    def render(self, level) -> str:
        return level.text()

    def context(self, level, kind: str) -> str:
        if kind not in KINDS:
            raise UsageError(f"jsonl has one context kind, context (the item's c), not "
                             f"{kind!r}")
        return shared_context(self.config) or level.context

    def control_context(self, levels: list, i: int, kind: str) -> str:
        """Your own c' where you give one (the item's `control`, else `control_file=`); else
        another unit's c (the next item of another group whose c differs: a rewording of the
        same fact would be no wrong c); with one shared c, its words shuffled. A c'
        that is the item's own c is refused, given or drawn (it would measure nothing: a
        one-word shared c shuffles to itself, and reads_c was 0 with exit 0)."""
        own = self.context(levels[i], kind)
        given = levels[i].control or shared_control(self.config)
        if given is not None:
            if same_context(given, own):
                where = "its \"control\"" if levels[i].control else \
                    f"control_file {self.config.control_file}"
                raise UsageError(f"{levels[i].source}: {where} is item {levels[i].id!r}'s own "
                                 "c, so the control would measure nothing; give a context "
                                 "that is wrong for it")
            return given
        other = None if self.config.context_file else self._other_c(levels[i])
        if other is not None:
            return other
        wrong = reordered(own, i)
        if wrong is None:
            raise UsageError(f"{self._no_other_c(levels[i], own)}, and no order of its words "
                             "differs from it, so the default control c' would be c itself "
                             "and measure nothing; give wrong contexts with control_file=FILE "
                             "or a \"control\" field per item")
        return wrong

    def _other_c(self, level) -> str | None:
        """The c of the next item (in file order, wrapping) of another group whose c differs
        from `level`'s, or None where no item has one."""
        pool = [it for it in items(self.config)
                if it.context is not None and level.context is not None
                and not same_context(it.context, level.context) and it.unit != level.unit]
        if not pool:
            return None
        order = [it.id for it in items(self.config)]
        here = order.index(level.id)
        return min(pool, key=lambda it: (order.index(it.id) - here - 1) % len(order)).context

    def _no_other_c(self, level, own: str) -> str:
        """Why `level` has no other unit's c to take, the start of a refusal."""
        if self.config.context_file:
            return f"context_file {self.config.context_file}: every item shares its c {_shown(own)}"
        if all(it.context is not None and same_context(it.context, own)
               for it in items(self.config)):
            return f"{self.config.data}: every item shares the c {_shown(own)}"
        return (f"{level.source}: no item of another group has a c other than item "
                f"{level.id!r}'s {_shown(own)}")

    def control_origin(self, level) -> tuple[str, str | None]:
        """("field", None) for an item with its own `control`, ("file", the path) under
        `control_file=`, else ("default", None): the draw of `control_context`."""
        if level.control:
            return "field", None
        if self.config.control_file:
            return "file", self.config.control_file
        return "default", None

    def control_note(self, levels: list, kind: str) -> str:
        """Where the c' of `control_context` comes from over `levels`, in one line."""
        own = sum(1 for lv in levels if lv.control)
        rest = len(levels) - own
        parts = [f"your own: the \"control\" field of {own} of {len(levels)} items"] if own \
            else []
        if rest and self.config.control_file:
            parts.append(f"your own: control_file {self.config.control_file}"
                         + (f" for the other {rest}" if own else " (one c' for every item)"))
            return "; ".join(parts)
        other = 0 if self.config.context_file else \
            sum(1 for lv in levels if not lv.control and self._other_c(lv) is not None)
        shuffled = rest - other
        if other:
            parts.append(f"{_some(other, rest, own)}another group's c (the next item of "
                         "another group whose c differs)")
        if shuffled:
            what = "the shared c's" if self.config.context_file else "the item's own c's"
            parts.append(f"{_some(shuffled, rest, own)}{what} words shuffled (they keep "
                         "any keyword a rule scores: give your own with control_file= or a "
                         "\"control\" field)")
        return "; ".join(parts)

    def for_tokenizer(self, tokenizer, context_as: str | None = None,
                      template_kwargs: tuple = (("enable_thinking", False),)) -> JsonlTask:
        """This task as the checkpoint with `tokenizer` sees it, checked before any work: the
        chat template renders every item with and without its c, a regex pattern (or its
        @FILE) compiles, and your scorer imports (their errors are one line here, not after the
        responses are generated)."""
        task = replace(super().for_tokenizer(tokenizer, "system", template_kwargs),
                       budget_tokenizer=tokenizer)
        if task.chat is None:  # no template to render turns: joining them would drop roles
            turns = next((it for it in items(self.config) if not isinstance(it.prompt, str)
                          and [r for r, _ in it.prompt] != ["user"]), None)
            if turns is not None and not isinstance(turns.prompt, str):
                name = getattr(tokenizer, "name_or_path", "") or "the checkpoint's tokenizer"
                raise UsageError(f"{turns.source}: item {turns.id!r} gives chat turns "
                                 f"({', '.join(r for r, _ in turns.prompt)}), but {name} has no "
                                 "chat template to render them (joined as lines, the roles "
                                 "would be lost); give the prompt as text, or use a checkpoint "
                                 "with a chat template")
        if task.chat is not None:
            task.check_template_keeps_c(tokenizer)
        shared_control(self.config)  # a missing control_file is named before any work
        if self.config.scorer == "regex":  # a pattern=@FILE too, not first when scoring
            _pattern(self.config)
        if is_user_scorer(self.config.scorer):
            user_scorer(self.config.scorer, self.config.scorer_timeout).start()
        return task

    def check_template_keeps_c(self, tokenizer) -> None:
        """A UsageError naming the first item whose prompt the chat template renders the same
        with and without its c (a template may drop c for some items only: one that keeps the
        system message for one prompt, or for a short c), checked on every item: rendering is
        cheap next to generating, and such an item's two views would silently be one."""
        for it in items(self.config):
            c = self.context(it, KINDS[0])
            if c and self.prompt(it) == self.prompt(it, c):
                name = getattr(tokenizer, "name_or_path", "") or "the checkpoint's tokenizer"
                raise UsageError(f"{it.source}: the chat template of {name} drops the context "
                                 f"(context_as={self.config.context_as}): item {it.id!r} "
                                 "renders the same prompt with and without its c, so the model "
                                 "would never see c; pass --task-options context_as=user (or "
                                 "prefix), or fix the template")

    def prompt(self, level, context: str | None = None) -> str:
        """x exactly as written (a chat checkpoint: through its template); c as `context_as`
        places it."""
        where = self.config.context_as
        if self.chat is not None:
            from nca_interp.tokenizer import render_chat

            text = render_chat(self.chat.tokenizer, chat_messages(level, context, where),
                               **dict(self.chat.template_kwargs))
            return f"{context}\n{text}" if context is not None and where == "prefix" else text
        x = level.text()
        return x if context is None else f"{context}\n{x}"

    def max_response_tokens(self) -> int:
        """`max_new`, else the longest reference answer in tokens (of the checkpoint's
        tokenizer once known; characters before) plus a margin, else DEFAULT_BUDGET."""
        if self.config.max_new:
            return self.config.max_new
        answers = [it.answer for it in items(self.config) if it.answer]
        if not answers:
            return DEFAULT_BUDGET
        tok = self.budget_tokenizer
        longest = max(len(tok.encode(a, add_special_tokens=False)) if tok is not None
                      else len(a) for a in answers)
        return longest + BUDGET_MARGIN

    def target(self, level) -> str:
        if level.answer is None:
            raise UsageError(f"item {level.id!r} has no answer, so there is no reference "
                             "response: pass --responses own or base (layer_sim)")
        return level.answer

    def answer_span(self, level, response: str) -> tuple[int, int] | None:
        """What the scorer reads: where the answer (or pattern=) stands for contains and
        startswith, the first match for regex, the whole response for exact, language and a
        scorer of your own (each reads all of it); None for unscored data."""
        kind = self.config.scorer or ("exact" if level.answer is not None else "")
        if kind in ("contains", "startswith"):
            words = _norm(self.config.pattern or level.answer or "").split()
            found = re.search(r"\s+".join(map(re.escape, words)), response, re.IGNORECASE) \
                if words else None
            return found.span() if found else None
        if kind == "regex":
            found = _match(_pattern(self.config), response,
                           f"item {level.id!r} ({level.source})")
            return found.span() if found is not None and found.end() > found.start() else None
        return stripped_span(response) if kind else None

    def score(self, level, response: str) -> Scored:
        ok = score(self.config, level, response)
        return Scored(bool(ok), ok is not None, response.strip()[:80], 0)


register(TaskSpec("jsonl", JsonlConfig, sys.modules[__name__], JsonlTask, "context"))
