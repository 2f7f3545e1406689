"""What every task is: the `Task` a command works with, the `Game` interface a game module
offers it, the QA variant, and the registry that names them.

A `Task` bundles a game module (sokoban, frozenlake), its config, and the two things every later
stage needs: `prompt(level, context=None)` (the student view x) / `prompt(level, context=c)` (the
teacher view [c, x]) and `score(level, response)`.

Where the context goes: it is placed *before* the board, followed by one newline, so the student
prompt x is always a suffix of the teacher prompt [c, x] and response tokens line up.

`QATask` is the same interface for system-prompt QA (`sysprompt`: a synthetic knowledge base;
`opcd`: local files in OPCD's MedMCQA/safety schema): a level is a question, the one context
kind is `system`, the response an option letter (tiny models) or `<answer>X</answer>` (chat
models), and success is accuracy rather than a win.

A new task is one file: its config dataclass (with `max_solution`, the longest solution, from
which the response budget is made, and `max_invalid`, the invalid moves tolerated), its level
generation (or item reading), a `Task` subclass where the defaults do not fit, and one
`register(TaskSpec(...))` call. A file in this package is imported by it; a file of your own
is found through NCA_INTERP_TASKS (module names, comma-separated) or the `nca_interp.tasks`
entry-point group. Every command's choices, help and `make_task` then list it. The worked
example is `docs/examples/task/toy_task.py`. The `rules` context kind reads
`nca_interp/tasks/rules/<name>.txt`: register a task without one with
`contexts="state|plan"`.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from typing import Any, Protocol, TypeVar

from nca_interp.errors import UsageError

__all__ = ["ChatFormat", "FORMATS", "Game", "MAX_NEW", "MAX_SEED", "MOVE_TO_CHAT", "Outcome",
           "QATask", "REGISTRY", "Scored", "Task", "TaskSpec", "check_types", "context_choices",
           "names", "parse_answer", "register", "reordered", "rotated", "same_context",
           "shuffled_words", "spec", "stripped_span", "task_choices", "whole"]

FORMATS = ("compact", "textarena")
_CHAT_MOVE = re.compile(r"\[\s*(up|down|left|right|w|a|s|d)\s*\]", re.IGNORECASE)
_CHAT_TO_MOVE = {"up": "U", "w": "U", "down": "D", "s": "D", "left": "L", "a": "L",
                 "right": "R", "d": "R"}
MOVE_TO_CHAT = {"U": "[up]", "D": "[down]", "L": "[left]", "R": "[right]"}
MAX_SEED = 2**31 - 1  # a knowledge base's or a split's number: any seed, none negative
MAX_NEW = 8192  # response tokens: more is a typo that would generate for hours


def whole(name: str, value, lo: int, hi: int, why: str = "") -> int:
    """`value` if it is a whole number in lo..hi; else a UsageError naming the task option and
    its range (the command line and the Python API's `task_options` get the same line)."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise UsageError(f"task option {name} must be a whole number {lo}..{hi}{why}, not "
                         f"{value!r}")
    return value


_KINDS = (("bool", (bool,), "true or false"), ("float", (int, float), "a number"),
          ("int", (int,), "a whole number"), ("str", (str,), "a text"))


def check_types(config) -> None:
    """Refuse a field of a task config whose value is not of its declared type (the Python API
    takes anything: None for a count, a text for a number), naming the field: the ranges are
    then each config's `__post_init__`'s to check."""
    for f in fields(config):
        value, declared = getattr(config, f.name), str(f.type)
        if value is None and "None" in declared:
            continue
        for kind, types, said in _KINDS:
            if declared.startswith(kind):
                if not isinstance(value, types) or (kind != "bool" and isinstance(value, bool)):
                    raise UsageError(f"task option {f.name} must be {said}"
                                     f"{' or none' if 'None' in declared else ''}, not "
                                     f"{value!r}")
                break


@dataclass(frozen=True)
class Outcome:
    """A game played out: won, moves made until it ended, invalid moves."""

    won: bool
    moves_made: int
    invalid: int


class Game(Protocol):
    """What a game module offers `Task` (sokoban.py, frozenlake.py): seeded levels, their two
    renderings, the `state` context and the rules' executor. A level has `key` (its identity:
    held-out levels are excluded from training by it) and `solution` (an optimal move string
    of U/D/L/R). `Task` also reads two fields of the game's config: `max_solution` and
    `max_invalid` (docs/examples/task/toy_task.py)."""

    def generate_level(self, seed: int | str, cfg): ...

    def render_compact(self, level) -> str: ...

    def render_textarena(self, level) -> str: ...

    def state_context(self, level) -> str: ...

    def play(self, level, moves: str, max_invalid: int = 1) -> Outcome: ...


@dataclass(frozen=True)
class Scored:
    won: bool
    parsed: bool
    moves: str
    invalid: int


class DropsContext(UsageError):
    """A chat template renders an item's prompt the same with and without its c."""


@dataclass(frozen=True)
class ChatFormat:
    """Prompts through a checkpoint's own chat template, with the *same* template settings for
    the student and the teacher view (e.g. Qwen3 `enable_thinking=False` on both sides; a
    mismatch is a known cause of large first-token divergence).

    `context_as="user"` puts the context as a block before the board inside the user message
    (OPCD's "experience" style, games); `"system"` makes it the system message (system-prompt
    tasks)."""

    tokenizer: object = field(compare=False, repr=False)
    context_as: str = "user"
    template_kwargs: tuple = (("enable_thinking", False),)

    def __call__(self, x_text: str, context: str | None) -> str:
        if self.context_as not in ("user", "system"):
            raise UsageError(f"context_as must be user or system, not {self.context_as!r}")
        messages = []
        if context is not None and self.context_as == "system":
            messages.append({"role": "system", "content": context})
        user = x_text if context is None or self.context_as == "system" \
            else f"{context}\n\n{x_text}"
        messages.append({"role": "user", "content": user})
        from nca_interp.tokenizer import render_chat  # a sandbox refusal is one line

        text = render_chat(self.tokenizer, messages, **dict(self.template_kwargs))
        if context and text == self(x_text, None):  # every prompt given c, wherever it is
            name = getattr(self.tokenizer, "name_or_path", "") or "the checkpoint's tokenizer"
            shown = x_text if len(x_text) <= 60 else f"{x_text[:50]}..."
            raise DropsContext(f"the chat template of {name} drops the context (context_as="
                               f"{self.context_as}) for the item {shown!r}: its prompt is the "
                               "same with and without c, so the model would never see c "
                               "there; fix the template so that it renders every message, or "
                               "use a checkpoint whose template does")
        return text


def rotated(values) -> list:
    """`values` shifted by one place (entity e gets entity e+1's): a derangement whenever the
    values differ, so every fact of a rotated knowledge base is wrong."""
    values = list(values)
    return values[1:] + values[:1]


def same_context(a: str, b: str) -> bool:
    """Two contexts that differ only in spacing: one prompt to a model."""
    return " ".join(a.split()) == " ".join(b.split())


def reordered(text: str, seed: int) -> str | None:
    """`text`'s words in a seeded order other than its own (the seeded shuffle, or where
    that draws the same order, the words turned by one), None where no order differs (one
    word, or one word repeated): a c' that is c would measure nothing."""
    out = shuffled_words(text, seed)
    if same_context(out, text):
        words = text.split()
        out = " ".join(words[1:] + words[:1])
    return None if same_context(out, text) else out


def shuffled_words(text: str, seed: int) -> str:
    """`text`'s words in a seeded random order: the same tokens, no longer an instruction."""
    words = text.split()
    random.Random(seed).shuffle(words)
    return " ".join(words)


_T = TypeVar("_T", bound="Task")  # a task's method returning a copy of the same class


@dataclass(frozen=True)
class Task:
    """A game (a module with the `Game` interface) plus its config. `fmt` is `compact` (tiny
    char models: plan of U/D/L/R, then end-of-response) or `textarena` (chat models: textarena
    boards, `[up]`-style moves)."""

    name: str
    game: Any  # the game's module: `Game` (a QA task's module adds what `QATask` calls)
    config: Any  # the task's own config dataclass (SokobanConfig, JsonlConfig, ...)
    fmt: str = "compact"
    plan_k: int = 3  # moves revealed by the `plan` context
    rules_text: str | None = None
    chat: ChatFormat | None = None  # set by `for_tokenizer` for checkpoints with a template

    # `train.sft` supervises a teacher on the task's targets (solver plans, answer keys); the
    # tasks of checkpoints a user brings set False (nothing to supervise: distil them directly)
    teacher_sft = True
    success = "win"  # what `Scored.won` means in reports
    # read-only per task (a subclass sets a class attribute, or computes one from its config)
    @property
    def default_context(self) -> str:
        """The context kind commands use when none is named (and none is recorded by the run):
        the one the published game settings distil (nca_interp/paper/settings.toml)."""
        return "plan"

    @property
    def context_kinds(self) -> tuple[str, ...]:
        return ("state", "plan", "rules")

    @property
    def unit_name(self) -> str:
        """What the bootstrap resamples: the independent unit of `unit()`."""
        return "level"

    def unit(self, level) -> str:
        """The independent unit a held-out item belongs to (bootstrap intervals resample
        units, not items): every game level is its own."""
        return level.key

    def level(self, seed: int | str, split: str = "train"):
        return self.game.generate_level(seed, self.config)

    def levels(self, split: str, n: int, seed: int = 0) -> list:
        """`n` levels of `split`. The `test` split is fixed by `seed`; any other split excludes
        every board of the first 1000 test levels of the same seed."""
        if split == "test":
            return [self.level(f"test-{seed}-{i}", "test") for i in range(n)]
        return self.sample_levels(f"{split}-{seed}", n, self.held_out_keys(1000, seed))

    def held_out_keys(self, n: int = 1000, seed: int = 0) -> set[str]:
        return {lv.key for lv in self.levels("test", n, seed)}

    def sample_levels(self, stream: str, n: int, exclude: set[str]) -> list:
        """`n` levels seeded by `stream`, skipping boards in `exclude` (the held-out set)."""
        out: list = []
        i = 0
        while len(out) < n:
            lv = self.level(f"{stream}-{i}")
            i += 1
            if lv.key not in exclude:
                out.append(lv)
            if i > 100 * n + 1000:
                raise UsageError(f"{self.name}: almost every level is held out; use a larger "
                                   "board so training and test levels can differ")
        return out

    def render(self, level) -> str:
        return (self.game.render_compact if self.fmt == "compact" else
                self.game.render_textarena)(level)

    def encode(self, level, moves: str) -> str:
        """Directions (U/D/L/R) as the letters the player types: the same letters, unless the
        game remaps its keys (`SokobanTask`)."""
        return moves

    def decode(self, level, typed: str) -> str:
        """Typed letters back to directions (inverse of `encode`)."""
        return typed

    def moves_text(self, level, moves: str) -> str:
        """Directions as a response types them: letters (compact) or `[up]` words (chat)."""
        typed = self.encode(level, moves)
        return typed if self.fmt == "compact" else " ".join(MOVE_TO_CHAT[m] for m in typed)

    def for_teacher(self, **training) -> Task:
        """The task `train.sft` trains a teacher on (the run records `self`): the task itself.
        A variant overrides it (remapped keys: a random permutation per level, stated by c;
        sysprompt: a fresh knowledge base per question); `training` holds train.sft's
        curriculum settings (`min_entities`)."""
        return self

    def context(self, level, kind: str) -> str:
        if kind == "state":
            return self.game.state_context(level)
        if kind == "plan":
            moves = self.encode(level, level.solution[: self.plan_k])
            if self.fmt == "compact":
                return f"M:{moves}"
            return "The first optimal moves are: " + " ".join(MOVE_TO_CHAT[m] for m in moves)
        if kind == "rules":
            if self.rules_text is not None:
                return self.rules_text
            found = resources.files("nca_interp.tasks").joinpath(f"rules/{self.name}.txt")
            if not found.is_file():
                raise UsageError(f"task {self.name} has no rules text: write "
                                 f"nca_interp/tasks/rules/{self.name}.txt, or register it "
                                 "without the rules kind (TaskSpec(..., contexts='state|plan'))")
            return found.read_text().strip()
        raise UsageError(f"unknown context kind {kind!r} for {self.name}; choose one of "
                         f"{'|'.join(self.context_kinds)}")

    def control_context(self, levels: list, i: int, kind: str) -> str:
        """A context of the same kind and form for item `i` that does not fit it (the control
        that separates reading c from merely having a context): for games, the context of the
        next evaluated level whose text differs (another level's plan or state)."""
        own = self.context(levels[i], kind)
        for k in range(1, len(levels)):
            other = self.context(levels[(i + k) % len(levels)], kind)
            if not same_context(other, own):
                return other
        wrong = reordered(own, i)
        if wrong is None:  # c' = c would measure nothing (probe 10, beside Q-E)
            raise UsageError(f"every evaluated level has the same {kind} context, "
                             f"{own!r}, and its words have no other order: the control "
                             "c' needs levels with different contexts (raise --n-levels)")
        return wrong

    def control_origin(self, level) -> tuple[str, str | None]:
        """Where item `level`'s c' comes from: ("default", None), the task's own draw
        (`control_note` says which); own data can also give ("field", None), the item's own
        c', or ("file", its path)."""
        return "default", None

    def control_note(self, levels: list, kind: str) -> str:
        """Where `control_context`'s c' comes from, in one line (reports keep it beside the
        control's numbers)."""
        return (f"another level's {kind}: the next evaluated level whose {kind} differs (its "
                "words shuffled where none does)")

    def prompt(self, level, context: str | None = None) -> str:
        """Student view x, or teacher view [c, x] when `context` is given."""
        if self.chat is not None:
            return self.chat(self.render(level), context)
        x = self.render(level) + ("\n>" if self.fmt == "compact" else "\n")
        return x if context is None else f"{context}\n{x}"

    def for_tokenizer(self: _T, tokenizer, context_as: str = "user",
                      template_kwargs: tuple = (("enable_thinking", False),)) -> _T:
        """This task as a checkpoint with `tokenizer` must see it: a tokenizer with a chat
        template gets textarena boards and `[up]` moves inside its template, checked before
        any work to show c (`check_sees_context`); any other keeps the task as it is."""
        if not getattr(tokenizer, "chat_template", None):
            return self
        task = replace(self, fmt="textarena",
                       chat=ChatFormat(tokenizer, context_as, tuple(template_kwargs)))
        task.check_sees_context()
        return task

    def check_sees_context(self, n: int = 3) -> None:
        """Refuse, in one line, a chat template that renders any of `n` items' prompts the
        same with and without their c: one that keeps only user turns drops c from the system
        message, so the model never sees it (facts, sysprompt, opcd: evaluate reported
        "context irrelevant" and distillation trained at loss 0 with exit 0, probe 10 Q-G). A
        template that drops c for other items only is refused where such a prompt is rendered
        (`ChatFormat.__call__` compares every prompt given c with its no-c twin: probe 11
        Q-J)."""
        if self.chat is None:
            return
        kind = self.default_context
        for i, level in enumerate(self.check_levels(n)[:n]):
            c = self.context(level, kind)
            try:
                same = bool(c) and self.prompt(level) == self.prompt(level, c)
            except DropsContext:  # the same, found where the prompt was rendered
                same = True
            if same:
                name = getattr(self.chat.tokenizer, "name_or_path", "") or \
                    "the checkpoint's tokenizer"
                where = getattr(self.config, "context_as", self.chat.context_as)
                fix = ("pass --task-options context_as=user (or prefix), or fix the template"
                       if hasattr(self.config, "context_as") else
                       "fix the template so that it renders the system message, or use a "
                       "checkpoint whose template does")
                raise UsageError(f"the chat template of {name} drops the context (context_as="
                                 f"{where}): held-out item {i} of {self.name} renders the same "
                                 "prompt with and without its c, so the model would never "
                                 f"see c; {fix}")

    def check_levels(self, n: int) -> list:
        """The items `check_sees_context` renders: the first `n` held-out ones."""
        return self.levels("test", n)

    def max_response_tokens(self) -> int:
        longest = self.config.max_solution
        return 2 * longest + 4 if self.fmt == "compact" else 8 * longest + 16

    def target(self, level) -> str:
        """The solver-optimal response text (end-of-response is the tokenizer's eos)."""
        return self.moves_text(level, level.solution)

    def parse(self, response: str, level=None) -> str | None:
        """Move string from a response, None when it cannot be parsed (`level`: the item, for
        tasks whose answers depend on it)."""
        if self.fmt == "compact":
            return response if response and set(response) <= set("UDLR") else None
        found = _CHAT_MOVE.findall(response)
        return "".join(_CHAT_TO_MOVE[m.lower()] for m in found) or None

    def answer_span(self, level, response: str) -> tuple[int, int] | None:
        """Where in `response` (character offsets, end exclusive) the answer `score` reads
        lies: here the moves, first to last. None where it reads none, and for a task that
        parses or scores its own way without naming its span (a plugin's own `score`): the
        moves are then not what it reads. The lens's answer region (`lens.answer_tokens`)."""
        if type(self).parse is not Task.parse or type(self).score is not Task.score:
            return None
        moves = re.finditer(r"[UDLR]+" if self.fmt == "compact" else _CHAT_MOVE, response)
        found = [m.span() for m in moves]
        return (found[0][0], found[-1][1]) if found else None

    def score(self, level, response: str) -> Scored:
        """Parse and play a response; unparseable output is a loss, never an error."""
        moves = self.parse(response)
        if moves is None:
            return Scored(False, False, "", 0)
        moves = self.decode(level, moves)
        out: Outcome = self.game.play(level, moves, self.config.max_invalid)
        return Scored(out.won, True, moves, out.invalid)


@dataclass(frozen=True)
class QATask(Task):
    """System-prompt QA: multiple-choice questions answered by an option. `SyspromptTask` and
    `OPCDTask` differ in where c, the unit and the compact format come from; see the module
    docstring."""

    success = "accuracy"
    default_context = "system"
    context_kinds = ("system",)

    def level(self, seed: int | str, split: str = "train"):
        return self.game.generate_level(seed, self.config, split)

    def levels(self, split: str, n: int, seed: int = 0) -> list:
        """Held-out questions of a fixed prompt are a finite set: the first `n` of it (fewer
        if it is smaller), never repeated. Otherwise as for games."""
        if split == "test" and getattr(self.config, "kb", 0) is not None:
            return self.game.all_test_questions(self.config, seed)[:n]
        return super().levels(split, n, seed)

    def held_out_keys(self, n: int = 1000, seed: int = 0) -> set[str]:
        return {q.key for q in self.levels("test", n, seed)}

    def render(self, level) -> str:
        return (self.game.render_compact if self.fmt == "compact" else
                self.game.render_chat)(level)

    def context(self, level, kind: str) -> str:
        if kind != "system":
            raise UsageError(f"{self.name} has one context kind, system (its system prompt), "
                             f"not {kind!r}")
        return self._system_prompt(level)

    def for_tokenizer(self: _T, tokenizer, context_as: str = "system",
                      template_kwargs: tuple = (("enable_thinking", False),)) -> _T:
        return super().for_tokenizer(tokenizer, context_as, template_kwargs)

    def max_response_tokens(self) -> int:
        if self.fmt == "compact":
            return 8
        return getattr(self.config, "max_new", 32)

    def target(self, level) -> str:
        if self.fmt != "compact":
            return f"<answer>{level.answer}</answer>"
        return self._compact_target(level)

    # what each QA task says itself (SyspromptTask, OPCDTask)
    def _system_prompt(self, level) -> str:
        raise NotImplementedError

    def _compact_target(self, level) -> str:
        raise NotImplementedError

    def _allowed(self, level) -> str:
        raise NotImplementedError

    def parse(self, response: str, level=None) -> str | None:
        """The option `response` chose (a letter, or yes/no), None if it chose none."""
        return parse_answer(response, self._allowed(level),
                                      tagged=self.fmt != "compact")

    def answer_span(self, level, response: str) -> tuple[int, int] | None:
        """The last `<answer>` tag's content (the tagged format), else the whole response."""
        if self.fmt != "compact":
            found = list(_ANSWER_TAG.finditer(response))
            return found[-1].span(1) if found else None
        return stripped_span(response)

    def score(self, level, response: str) -> Scored:
        """Right or wrong; unparseable output is wrong, never an error."""
        choice = self.parse(response, level)
        if choice is None:
            return Scored(False, False, "", 0)
        return Scored(choice == level.answer, True, choice, 0)



def stripped_span(response: str) -> tuple[int, int] | None:
    """The response without its leading and trailing white space, as offsets (None: empty)."""
    body = response.strip()
    if not body:
        return None
    start = len(response) - len(response.lstrip())
    return start, start + len(body)


_ANSWER_TAG = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.IGNORECASE | re.DOTALL)


def parse_answer(response: str, allowed: str, tagged: bool) -> str | None:
    """The chosen option: with `tagged`, the content of the *last* `<answer>...</answer>` tag
    (OPCD's rule); otherwise the whole response must be one allowed answer. Case-insensitive;
    None when nothing valid is found (garbage is a wrong answer, never an error)."""
    if tagged:
        found = _ANSWER_TAG.findall(response)
        if not found:
            return None
        response = found[-1]
    choice = response.strip()
    for option in allowed.split("|") if "|" in allowed else list(allowed):
        if choice.lower() == option.lower():
            return option
    return None


@dataclass(frozen=True)
class TaskSpec:
    """One registered task: its name, config dataclass, game or data module and `Task` class,
    and how its context kinds read in every command's help (`contexts`, with an optional note
    for kinds its options choose)."""

    name: str
    config: type
    module: object
    task: type[Task] = Task
    contexts: str = "state|plan|rules"
    note: str = ""


REGISTRY: dict[str, TaskSpec] = {}


def register(entry: TaskSpec) -> TaskSpec:
    """Add a task to every command (one call, in the task's own file); a name registered twice
    is refused."""
    if entry.name in REGISTRY and REGISTRY[entry.name] != entry:
        raise UsageError(f"task {entry.name!r} is registered twice")
    REGISTRY[entry.name] = entry
    return entry


def spec(name: str) -> TaskSpec:
    if name not in REGISTRY:
        raise UsageError(f"unknown task {name!r}; choose one of {', '.join(names())}")
    return REGISTRY[name]


def names() -> tuple[str, ...]:
    """Every registered task, in alphabetical order."""
    return tuple(sorted(REGISTRY))


def task_choices() -> str:
    """`facts|frozenlake|...`: every registered task, for the commands' help."""
    return "|".join(names())


def context_choices() -> str:
    """Every registered task's context kinds, tasks with the same kinds named together."""
    groups: dict[tuple[str, str], list[str]] = {}
    for s in (REGISTRY[n] for n in names()):
        groups.setdefault((s.contexts, s.note), []).append(s.name)
    return ", ".join(f"{kinds} ({', '.join(names)}{': ' + note if note else ''})"
                     for (kinds, note), names in groups.items())
