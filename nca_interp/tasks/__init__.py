"""Text games and system-prompt QA with privileged context.

A `Task` bundles a game module (sokoban, frozenlake), its config, and the two things every later
stage needs: `prompt(level, context=None)` (the student view x) / `prompt(level, context=c)` (the
teacher view [c, x]) and `score(level, response)`.

Where the context goes: it is placed *before* the board, followed by one newline, so the student
prompt x is always a suffix of the teacher prompt [c, x] and response tokens line up.

`QATask` is the same interface for system-prompt QA (`sysprompt`: a synthetic knowledge base;
`opcd`: local files in OPCD's MedMCQA/safety schema): a level is a question, the one context
kind is `system`, the response an option letter (tiny models) or `<answer>X</answer>` (chat
models), and success is accuracy rather than a win.
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import resources
from types import ModuleType

from nca_interp.errors import UsageError
from nca_interp.tasks import facts, frozenlake, jsonl, opcd, sokoban, sysprompt
from nca_interp.tasks.sokoban import Outcome

__all__ = ["CONTEXT_CHOICES", "TASKS", "TASK_CHOICES", "QATask", "Task", "make_task",
           "task_from_record", "task_record"]

CONTEXT_KINDS = ("state", "plan", "rules", "remap")  # games; QA tasks: one kind, "system"
TASKS = ("sokoban", "frozenlake", "sysprompt", "opcd", "facts", "jsonl")
# every command's help lists the same choices, from here
TASK_CHOICES = "|".join(TASKS)
CONTEXT_CHOICES = ("|".join(CONTEXT_KINDS) + " (sokoban, frozenlake), system (sysprompt, opcd), "
                   "facts|rule (facts: the kind its options name), context (jsonl)")
_CONFIGS = {"sokoban": sokoban.SokobanConfig, "frozenlake": frozenlake.FrozenLakeConfig,
            "sysprompt": sysprompt.SyspromptConfig, "opcd": opcd.OPCDConfig,
            "facts": facts.FactsConfig, "jsonl": jsonl.JsonlConfig}
_MODULES = {"sokoban": sokoban, "frozenlake": frozenlake, "sysprompt": sysprompt,
            "opcd": opcd, "facts": facts, "jsonl": jsonl}
FORMATS = ("compact", "textarena")
_CHAT_MOVE = re.compile(r"\[\s*(up|down|left|right|w|a|s|d)\s*\]", re.IGNORECASE)
_CHAT_TO_MOVE = {"up": "U", "w": "U", "down": "D", "s": "D", "left": "L", "a": "L",
                 "right": "R", "d": "R"}
_MOVE_TO_CHAT = {"U": "[up]", "D": "[down]", "L": "[left]", "R": "[right]"}


@dataclass(frozen=True)
class Scored:
    won: bool
    parsed: bool
    moves: str
    invalid: int


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
        return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=True,
                                                  **dict(self.template_kwargs))


def rotated(values) -> list:
    """`values` shifted by one place (entity e gets entity e+1's): a derangement whenever the
    values differ, so every fact of a rotated knowledge base is wrong."""
    values = list(values)
    return values[1:] + values[:1]


def shuffled_words(text: str, seed: int) -> str:
    """`text`'s words in a seeded random order: the same tokens, no longer an instruction."""
    words = text.split()
    random.Random(seed).shuffle(words)
    return " ".join(words)


@dataclass(frozen=True)
class Task:
    """A game plus its config. `fmt` is `compact` (tiny char models: plan of U/D/L/R, then
    end-of-response) or `textarena` (chat models: textarena boards, `[up]`-style moves)."""

    name: str
    game: ModuleType
    config: object
    fmt: str = "compact"
    plan_k: int = 3  # moves revealed by the `plan` context
    rules_text: str | None = None
    chat: ChatFormat | None = None  # set by `for_tokenizer` for checkpoints with a template

    success = "win"  # what `Scored.won` means in reports
    # the context kind commands use when none is named (and none is recorded by the run): the
    # one the published game settings distil (train/settings.toml)
    default_context = "plan"
    context_kinds = CONTEXT_KINDS
    unit_name = "level"  # what the bootstrap resamples: the independent unit of `unit()`

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
        out, i = [], 0
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

    def keys(self, level) -> str:
        """The letters typed for up, down, left, right on this level (Sokoban's remapped-keys
        variant; every other game and an unremapped level: U, D, L, R)."""
        return getattr(level, "keys", "UDLR")

    def encode(self, level, moves: str) -> str:
        """Directions (U/D/L/R) as the letters the level's keys make the player type."""
        keys = dict(zip("UDLR", self.keys(level)))
        return "".join(keys[m] for m in moves)

    def decode(self, level, typed: str) -> str:
        """Typed letters back to directions (inverse of `encode`)."""
        back = dict(zip(self.keys(level), "UDLR"))
        return "".join(back[m] for m in typed)

    def context(self, level, kind: str) -> str:
        if kind == "state":
            return self.game.state_context(level)
        if kind == "remap":
            if self.fmt == "compact":  # content-addressed: the key follows its direction
                return "K:" + " ".join(f"{d}={k}" for d, k in zip("UDLR", self.keys(level)))
            return "The moves are remapped: " + ", ".join(
                f"{_MOVE_TO_CHAT[k]} moves {d}" for d, k in
                zip(("up", "down", "left", "right"), self.keys(level)))
        if kind == "plan":
            moves = self.encode(level, level.solution[: self.plan_k])
            if self.fmt == "compact":
                return f"M:{moves}"
            return "The first optimal moves are: " + " ".join(_MOVE_TO_CHAT[m] for m in moves)
        if kind == "rules":
            if self.rules_text is not None:
                return self.rules_text
            return resources.files("nca_interp.tasks").joinpath(f"rules/{self.name}.txt") \
                .read_text().strip()
        raise UsageError(f"unknown context kind {kind!r}; choose one of {CONTEXT_KINDS}")

    def control_context(self, levels: list, i: int, kind: str) -> str:
        """A context of the same kind and form for item `i` that does not fit it (the control
        that separates reading c from merely having a context): for games, the context of the
        next evaluated level whose text differs (another level's plan or state)."""
        own = self.context(levels[i], kind)
        for k in range(1, len(levels)):
            other = self.context(levels[(i + k) % len(levels)], kind)
            if other != own:
                return other
        return shuffled_words(own, i)

    def prompt(self, level, context: str | None = None) -> str:
        """Student view x, or teacher view [c, x] when `context` is given."""
        if self.chat is not None:
            return self.chat(self.render(level), context)
        x = self.render(level) + ("\n>" if self.fmt == "compact" else "\n")
        return x if context is None else f"{context}\n{x}"

    def for_tokenizer(self, tokenizer, context_as: str = "user",
                      template_kwargs: tuple = (("enable_thinking", False),)) -> Task:
        """This task as a checkpoint with `tokenizer` must see it: a tokenizer with a chat
        template gets textarena boards and `[up]` moves inside its template; any other keeps
        the task as it is."""
        if not getattr(tokenizer, "chat_template", None):
            return self
        return replace(self, fmt="textarena",
                       chat=ChatFormat(tokenizer, context_as, tuple(template_kwargs)))

    def max_response_tokens(self) -> int:
        longest = self.config.max_solution
        return 2 * longest + 4 if self.fmt == "compact" else 8 * longest + 16

    def target(self, level) -> str:
        """The solver-optimal response text (end-of-response is the tokenizer's eos)."""
        if self.fmt == "compact":
            return self.encode(level, level.solution)
        return " ".join(_MOVE_TO_CHAT[m] for m in self.encode(level, level.solution))

    def parse(self, response: str) -> str | None:
        """Move string from a response, None when it cannot be parsed."""
        if self.fmt == "compact":
            return response if response and set(response) <= set("UDLR") else None
        found = _CHAT_MOVE.findall(response)
        return "".join(_CHAT_TO_MOVE[m.lower()] for m in found) or None

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

    def for_tokenizer(self, tokenizer, context_as: str = "system",
                      template_kwargs: tuple = (("enable_thinking", False),)) -> Task:
        return super().for_tokenizer(tokenizer, context_as, template_kwargs)

    def max_response_tokens(self) -> int:
        if self.fmt == "compact":
            return 8
        return getattr(self.config, "max_new", 32)

    def target(self, level) -> str:
        if self.fmt != "compact":
            return f"<answer>{level.answer}</answer>"
        return self._compact_target(level)

    def parse(self, response: str, level) -> str | None:
        """The option `response` chose (a letter, or yes/no), None if it chose none."""
        return sysprompt.parse_answer(response, self._allowed(level),
                                      tagged=self.fmt != "compact")

    def score(self, level, response: str) -> Scored:
        """Right or wrong; unparseable output is wrong, never an error."""
        choice = self.parse(response, level)
        if choice is None:
            return Scored(False, False, "", 0)
        return Scored(choice == level.answer, True, choice, 0)


@dataclass(frozen=True)
class SyspromptTask(QATask):
    """A synthetic knowledge base in the system prompt; the unit is the fact asked about (one
    (entity, attribute) cell is asked in many phrasings and option orders, not independent)."""

    unit_name = "fact"

    def unit(self, level) -> str:
        return f"{level.entity}.{level.attribute}"

    def prompt(self, level, context: str | None = None) -> str:
        """As for games, except that a compact question supplies its own cue (none when the
        prompt ends on the key the answer is bound to)."""
        if self.chat is not None or self.fmt != "compact":
            return super().prompt(level, context)
        x = self.render(level) + sysprompt.cue(level)
        return x if context is None else f"{context}\n{x}"

    def _system_prompt(self, level) -> str:
        return sysprompt.system_prompt(level)

    def control_context(self, levels: list, i: int, kind: str) -> str:
        """The same knowledge base with each attribute's values rotated across the entities
        (every fact wrong, same layout and length)."""
        self.context(levels[i], kind)  # the kind check
        kb = levels[i].kb
        return replace(kb, values=tuple(zip(*[rotated(col) for col in zip(*kb.values)]))
                       ).render()

    def _allowed(self, level) -> str:
        return sysprompt.LETTERS[: len(level.options)]

    def _compact_target(self, level) -> str:
        return sysprompt.compact_target(level, self.config)

    def parse(self, response: str, level) -> str | None:
        if self.fmt == "compact":
            return sysprompt.parse_compact(response, level, self.config)
        return super().parse(response, level)


@dataclass(frozen=True)
class OPCDTask(QATask):
    """OPCD-format local files (a system prompt file, train / test JSONL); the unit is the
    item."""

    unit_name = "question"

    def unit(self, level) -> str:
        return level.key

    def _system_prompt(self, level) -> str:
        return opcd.read_system_prompt(self.config.system_prompt)

    def control_context(self, levels: list, i: int, kind: str) -> str:
        """The system prompt's words shuffled."""
        self.context(levels[i], kind)  # the kind check
        return shuffled_words(opcd.read_system_prompt(self.config.system_prompt), i)

    def _allowed(self, level) -> str:
        return opcd.allowed(self.config, level)

    def _compact_target(self, level) -> str:
        return level.answer


@dataclass(frozen=True)
class FactsTask(Task):
    """Invented facts or a behavioural rule in a chat model's system message, free-form
    answers (`nca_interp.tasks.facts`). The config's `kind` is the one context kind and what
    success means: `facts` (the right value) or `rule` (the answer follows the rule)."""

    success = "accuracy"
    unit_name = "fact"

    @property
    def default_context(self) -> str:
        return self.config.kind

    @property
    def context_kinds(self) -> tuple[str, ...]:
        return (self.config.kind,)

    def unit(self, level) -> str:
        return f"{level.entity}.{level.attribute}"

    def level(self, seed: int | str, split: str = "train"):
        return facts.generate_level(seed, self.config, split)

    def levels(self, split: str, n: int, seed: int = 0) -> list:
        """Held-out: every (country, attribute, held-out phrasing), the first `n`; training:
        random draws of the training phrasings (disjoint from the held-out ones by wording)."""
        if split == "test":
            return facts.all_test_questions(self.config, seed)[:n]
        return [self.level(f"{split}-{seed}-{i}") for i in range(n)]

    def sample_levels(self, stream: str, n: int, exclude: set[str]) -> list:
        return [self.level(f"{stream}-{i}") for i in range(n)]

    def render(self, level) -> str:
        return facts.render(level)

    def context(self, level, kind: str) -> str:
        if kind != self.config.kind:
            raise UsageError(f"this facts task distils the {self.config.kind!r} context, not "
                             f"{kind!r}; pass --task-options kind={kind} for the other one")
        if kind == "facts":
            return level.kb.render(self.config.n_attributes)
        return facts.RULES[self.config.rule]

    def control_context(self, levels: list, i: int, kind: str) -> str:
        """`facts`: the same sentences with each attribute's values rotated across the
        countries (every fact wrong, same form and length); `rule`: the rule's words shuffled
        (no instruction)."""
        self.context(levels[i], kind)  # the kind check
        if kind == "rule":
            return shuffled_words(facts.RULES[self.config.rule], i)
        kb = levels[i].kb
        wrong = [dict(v) for v in kb.values]
        for attr in kb.values[0]:
            for v, new in zip(wrong, rotated([v[attr] for v in kb.values])):
                v[attr] = new
        return replace(kb, values=tuple(wrong)).render(self.config.n_attributes)

    def for_tokenizer(self, tokenizer, context_as: str = "system",
                      template_kwargs: tuple = (("enable_thinking", False),)) -> Task:
        return super().for_tokenizer(tokenizer, context_as, template_kwargs)

    def prompt(self, level, context: str | None = None) -> str:
        if self.chat is not None:
            return self.chat(self.render(level), context)
        x = self.render(level) + "\n>"
        return x if context is None else f"{context}\n{x}"

    def max_response_tokens(self) -> int:
        return self.config.max_new

    def target(self, level) -> str:
        if self.config.kind == "rule":
            return facts.styled(level.value, self.config.rule)
        return f"{level.value}." if self.chat is None else f"The answer is {level.value}."

    def score(self, level, response: str) -> Scored:
        """Right value (`facts`) or rule followed (`rule`); never an error."""
        ok = facts.follows_rule(response, self.config.rule, level.kb) \
            if self.config.kind == "rule" else facts.answered(response, level)
        return Scored(ok, True, response.strip()[:80], 0)


@dataclass(frozen=True)
class JsonlTask(Task):
    """A researcher's own prompts and contexts from a JSONL file (`nca_interp.tasks.jsonl`):
    the prompts used exactly as written, c placed as `context_as` says, responses scored by the
    named scorer (or not at all: `scored` is False)."""

    budget_tokenizer: object = field(default=None, compare=False, repr=False)
    success = "accuracy"
    unit_name = "item"
    default_context = "context"
    context_kinds = jsonl.KINDS

    @property
    def scored(self) -> bool:
        return jsonl.scored(self.config)

    def unit(self, level) -> str:
        return level.key

    def level(self, seed: int | str, split: str = "train"):
        return jsonl.generate_level(seed, self.config, split)

    def levels(self, split: str, n: int, seed: int = 0) -> list:
        """Held-out: the test items in file order, the first `n`; training: seeded draws."""
        if split == "test":
            return jsonl.all_test_questions(self.config, seed)[:n]
        return [self.level(f"{split}-{seed}-{i}") for i in range(n)]

    def sample_levels(self, stream: str, n: int, exclude: set[str]) -> list:
        return [self.level(f"{stream}-{i}") for i in range(n)]  # train items only

    def render(self, level) -> str:
        return level.text()

    def context(self, level, kind: str) -> str:
        if kind not in jsonl.KINDS:
            raise UsageError(f"jsonl has one context kind, context (the item's c), not "
                             f"{kind!r}")
        return jsonl.shared_context(self.config) or level.context

    def control_context(self, levels: list, i: int, kind: str) -> str:
        """Another item's c (the next one whose c differs); with one shared c, its words
        shuffled."""
        own = self.context(levels[i], kind)
        if self.config.context_file:
            return shuffled_words(own, i)
        pool = [it for it in jsonl.items(self.config) if it.context != own]
        if not pool:
            return shuffled_words(own, i)
        order = [it.id for it in jsonl.items(self.config)]
        here = order.index(levels[i].id)
        return min(pool, key=lambda it: (order.index(it.id) - here - 1) % len(order)).context

    def for_tokenizer(self, tokenizer, context_as: str | None = None,
                      template_kwargs: tuple = (("enable_thinking", False),)) -> Task:
        task = super().for_tokenizer(tokenizer, "system", template_kwargs)
        return replace(task, budget_tokenizer=tokenizer)

    def prompt(self, level, context: str | None = None) -> str:
        """x exactly as written (a chat checkpoint: through its template); c as `context_as`
        places it."""
        where = self.config.context_as
        if self.chat is not None:
            text = self.chat.tokenizer.apply_chat_template(
                jsonl.chat_messages(level, context, where), tokenize=False,
                add_generation_prompt=True, **dict(self.chat.template_kwargs))
            return f"{context}\n{text}" if context is not None and where == "prefix" else text
        x = level.text()
        return x if context is None else f"{context}\n{x}"

    def max_response_tokens(self) -> int:
        """`max_new`, else the longest reference answer in tokens (of the checkpoint's
        tokenizer once known; characters before) plus a margin, else DEFAULT_BUDGET."""
        if self.config.max_new:
            return self.config.max_new
        answers = [it.answer for it in jsonl.items(self.config) if it.answer]
        if not answers:
            return jsonl.DEFAULT_BUDGET
        tok = self.budget_tokenizer
        longest = max(len(tok.encode(a, add_special_tokens=False)) if tok is not None
                      else len(a) for a in answers)
        return longest + jsonl.BUDGET_MARGIN

    def target(self, level) -> str:
        if level.answer is None:
            raise UsageError(f"item {level.id!r} has no answer, so there is no reference "
                             "response: pass --responses own or base (layer_sim)")
        return level.answer

    def score(self, level, response: str) -> Scored:
        ok = jsonl.score(self.config, level, response)
        return Scored(bool(ok), ok is not None, response.strip()[:80], 0)


def make_task(name: str, fmt: str = "compact", plan_k: int = 3, **config) -> Task:
    """`make_task("sokoban", dim_room=(8, 8))`, `make_task("frozenlake", size=3, num_holes=2)`,
    `make_task("sysprompt", kb=0)`, `make_task("opcd", "textarena", train=..., test=...,
    system_prompt=...)`."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}; choose one of {FORMATS}")
    if name not in _CONFIGS:
        raise UsageError(f"unknown task {name!r}; choose one of {TASKS}")
    cls = {"sysprompt": SyspromptTask, "opcd": OPCDTask, "facts": FactsTask,
           "jsonl": JsonlTask}.get(name, Task)
    return cls(name, _MODULES[name], _CONFIGS[name](**config), fmt, plan_k)


def task_record(task: Task) -> dict:
    """What a run config stores about its task; `task_from_record` reads it back."""
    return {"name": task.name, "fmt": task.fmt, "plan_k": task.plan_k,
            **json_safe(asdict(task.config))}


def json_safe(d: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def parse_task_options(name: str, options: list[str] | None) -> dict:
    """`["kb=3", "word_len=3"]` or `["train=a.jsonl", "test=b.jsonl", "system_prompt=s.txt"]`
    into typed config values of task `name` (`none` is None)."""
    if name not in _CONFIGS:
        raise UsageError(f"unknown task {name!r}; choose one of {TASKS}")
    defaults = {f.name: f.default for f in fields(_CONFIGS[name])}
    out = {}
    for opt in options or []:
        key, sep, value = opt.partition("=")
        if not sep or key not in defaults:
            raise UsageError(f"task option {opt!r}: expected KEY=VALUE with KEY one of "
                             f"{sorted(defaults)} for {name}")
        default = defaults[key]
        try:
            if value.lower() == "none":
                out[key] = None
            elif isinstance(default, bool):
                out[key] = value.lower() in ("1", "true", "yes")
            elif isinstance(default, float):
                out[key] = float(value)
            elif isinstance(default, int) or key == "kb":
                out[key] = int(value)
            elif isinstance(default, tuple):
                out[key] = tuple(int(v) for v in value.split("x"))
            else:
                out[key] = value
        except ValueError:
            want = ("integers like 6x6" if isinstance(default, tuple) else
                    "a number" if isinstance(default, float) else "an integer")
            raise UsageError(f"task option {key}={value!r}: {key} takes {want} for {name} "
                             f"(default {default})") from None
    return out


def task_from_record(record: dict | None, name: str | None = None,
                     fmt: str | None = None, options: list[str] | None = None) -> Task:
    """The task a run was trained on. `name` overrides it (a different task then starts from
    that task's defaults); `fmt` overrides the rendering; `options` (KEY=VALUE) override
    config fields, e.g. the data files of `opcd`."""
    record = record if isinstance(record, dict) else {}
    name = name or record.get("name") or "sokoban"
    if record.get("name") != name:
        record = {}
    if name not in _CONFIGS:
        raise UsageError(f"unknown task {name!r}; choose one of {TASKS}")
    known = {f.name for f in fields(_CONFIGS[name])}
    config = {k: tuple(v) if isinstance(v, list) else v for k, v in record.items() if k in known}
    if name == "sysprompt" and record and "layout" not in record:
        config["layout"] = "table"  # runs recorded before layouts existed used the table
    config.update(parse_task_options(name, options))
    return make_task(name, fmt or record.get("fmt", "compact"), record.get("plan_k", 3), **config)
