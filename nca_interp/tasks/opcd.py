"""System-prompt QA from local files in the schema of OPCD's MedMCQA and safety sets.

One JSON object per line:

    {"question": "...", "options": {"A": "...", "B": "...", "C": "...", "D": "..."}, "answer": "B"}
    {"question": "...", "answer": "yes"}                      (safety: yes/no, no options)

`options` may also be a list (lettered A, B, ... in order); an `id` field is kept if present.
The privileged context is one system-prompt text file shared by every question. Responses are
scored from the content of the *last* `<answer>...</answer>` tag: an option letter (`mcq`) or
yes/no (`yesno`). A malformed line is an error that names the file and line; nothing is dropped.
Hub data cannot be fetched here: point `train`/`test`/`system_prompt` at files you have.
"""

from __future__ import annotations

import functools
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nca_interp.errors import InputError, UsageError
from nca_interp.fsio import read_text
from nca_interp.tasks.base import (
    MAX_NEW,
    QATask,
    TaskSpec,
    check_types,
    register,
    reordered,
    whole,
)
from nca_interp.tasks.sysprompt import LETTERS

__all__ = ["OPCDConfig", "OPCDTask", "allowed", "read_system_prompt"]

KINDS = ("mcq", "yesno")


class DataFormatError(InputError):
    """A line of an OPCD-format file that does not follow the schema."""


@dataclass(frozen=True)
class OPCDConfig:
    train: str = ""  # JSONL of training questions
    test: str = ""  # JSONL of held-out questions
    system_prompt: str = ""  # text file: the privileged context
    kind: str = "mcq"  # mcq (answer letter) | yesno (safety)
    max_new: int = 512  # response budget in tokens (chat models reason before answering)

    def __post_init__(self):
        check_types(self)
        whole("max_new", self.max_new, 1, MAX_NEW, " (the response budget in tokens)")
        if self.kind not in KINDS:
            raise UsageError(f"kind must be one of {KINDS}, not {self.kind!r}")


@dataclass(frozen=True)
class Item:
    question: str
    options: tuple[str, ...]  # empty for yes/no questions
    answer: str  # letter, or yes/no
    source: str  # file:line, for messages
    id: str | None = None

    @property
    def key(self) -> str:
        return self.question + "|" + "|".join(self.options)

    @property
    def solution(self) -> str:
        return self.answer


def _fail(where: str, why: str) -> DataFormatError:
    return DataFormatError(f"{where}: {why}; every line must be one JSON object with "
                           '"question", "answer" and (for mcq) "options" - fix or remove it')


def parse_line(line: str, where: str, kind: str) -> Item:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise _fail(where, f"not valid JSON ({e.msg})") from None
    except RecursionError:
        raise _fail(where, "JSON nested too deeply to read") from None
    if not isinstance(row, dict):
        raise _fail(where, "not a JSON object")
    question, answer = row.get("question"), row.get("answer")
    if not isinstance(question, str) or not question.strip():
        raise _fail(where, "missing or empty \"question\"")
    if not isinstance(answer, str) or not answer.strip():
        raise _fail(where, "missing or empty \"answer\"")
    answer = answer.strip()
    options = row.get("options")
    if kind == "yesno":
        if answer.lower() not in ("yes", "no"):
            raise _fail(where, f"answer {answer!r} is not yes or no")
        return Item(question, (), answer.lower(), where, row.get("id"))
    if isinstance(options, dict):
        letters = list(options)
        if letters != list(LETTERS[: len(letters)]):
            raise _fail(where, f"option keys {letters} are not A, B, C, ... in order")
        options = [options[k] for k in letters]
    if not isinstance(options, list) or not 2 <= len(options) <= len(LETTERS) \
            or not all(isinstance(o, str) and o.strip() for o in options):
        raise _fail(where, f"\"options\" must be 2-{len(LETTERS)} non-empty strings")
    if answer.upper() not in LETTERS[: len(options)]:
        raise _fail(where, f"answer {answer!r} is not one of the option letters "
                    f"{LETTERS[: len(options)]}")
    return Item(question, tuple(options), answer.upper(), where, row.get("id"))


@functools.lru_cache(maxsize=8)
def load(path: str, kind: str = "mcq") -> tuple[Item, ...]:
    """Every question of an OPCD-format JSONL file (blank lines are allowed)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"OPCD data file {path} not found; pass the path of a JSONL "
                                "file you have (nothing is downloaded)")
    items = tuple(parse_line(line, f"{p}:{n}", kind)
                  for n, line in enumerate(read_text(p, "OPCD data file").splitlines(), 1)
                  if line.strip())
    if not items:
        raise DataFormatError(f"{p} holds no questions")
    return items


def write(path: str | Path, items: list[Item]) -> None:
    """Write items back in the same schema (options as an A-D dict), atomically."""
    from nca_interp.fsio import write_text

    rows = []
    for it in items:
        row: dict[str, Any] = {"question": it.question, "answer": it.answer}
        if it.options:
            row["options"] = dict(zip(LETTERS, it.options))
        if it.id is not None:
            row["id"] = it.id
        rows.append(json.dumps(row) + "\n")
    write_text(path, "".join(rows))


def read_system_prompt(path: str) -> str:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"system-prompt file {path} not found")
    text = read_text(p, "system-prompt file").strip()
    if not text:
        raise DataFormatError(f"system-prompt file {path} is empty")
    return text


def check_split(cfg: OPCDConfig) -> None:
    """The train and test files are two files (one file for both would test on what was
    trained)."""
    if cfg.train and cfg.test and Path(cfg.train).exists() and Path(cfg.test).exists() and \
            Path(cfg.train).resolve().samefile(Path(cfg.test).resolve()):
        raise DataFormatError(f"train={cfg.train} and test={cfg.test} are the same file; "
                              "the held-out questions must be another file (split yours in two)")


def generate_level(seed: int | str, cfg: OPCDConfig, split: str = "train") -> Item:
    """A question drawn (seeded) from the train file, or from the test file for `test`."""
    check_split(cfg)
    items = load(cfg.test if split == "test" else cfg.train, cfg.kind)
    return items[random.Random(f"opcd-{seed}").randrange(len(items))]


def all_test_questions(cfg: OPCDConfig, seed: int = 0) -> list[Item]:
    """The test file, in file order (the held-out set)."""
    return list(load(cfg.test, cfg.kind))


def allowed(cfg: OPCDConfig, item: Item) -> str:
    return "yes|no" if cfg.kind == "yesno" else LETTERS[: len(item.options)]


def render_compact(item: Item) -> str:
    if not item.options:
        return item.question
    return item.question + "\n" + " ".join(f"{LETTERS[i]}:{o}" for i, o in
                                           enumerate(item.options))


def render_chat(item: Item) -> str:
    if not item.options:
        return (f"{item.question}\nAnswer yes or no inside <answer></answer> tags.")
    opts = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(item.options))
    return (f"Question: {item.question}\nOptions:\n{opts}\n"
            "Answer with the option letter inside <answer></answer> tags.")


@dataclass(frozen=True)
class OPCDTask(QATask):
    """OPCD-format local files (a system prompt file, train / test JSONL); the unit is the
    item."""

    teacher_sft = False  # a checkpoint the user brings: nothing to supervise

    unit_name = "question"

    def unit(self, level) -> str:
        return level.key

    def _system_prompt(self, level) -> str:
        return read_system_prompt(self.config.system_prompt)

    def control_context(self, levels: list, i: int, kind: str) -> str:
        """The system prompt's words shuffled (another order where the shuffle draws its
        own); refused where its words have no other order (a c' that is c measures nothing)."""
        self.context(levels[i], kind)  # the kind check
        own = read_system_prompt(self.config.system_prompt)
        wrong = reordered(own, i)
        if wrong is None:
            raise UsageError(f"the system prompt {own!r} has no other order of its words to "
                             "be the control c': give a longer one, or run without --control")
        return wrong

    def control_note(self, levels: list, kind: str) -> str:
        return "the system prompt's words shuffled (a seeded order per item)"

    def check_levels(self, n: int) -> list:
        """Questions of whichever file is given (a training run may name no test file)."""
        split = "test" if self.config.test else "train" if self.config.train else None
        return [] if split is None else [self.level(f"check-{i}", split) for i in range(n)]

    def _allowed(self, level) -> str:
        return allowed(self.config, level)

    def _compact_target(self, level) -> str:
        return level.answer


register(TaskSpec("opcd", OPCDConfig, sys.modules[__name__], OPCDTask, "system"))
