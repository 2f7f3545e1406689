"""Text games with privileged context.

A `Task` bundles a game module (sokoban, frozenlake), its config, and the two things every later
stage needs: `prompt(level, context=None)` (the student view x) / `prompt(level, context=c)` (the
teacher view [c, x]) and `score(level, response)`.

Where the context goes: it is placed *before* the board, followed by one newline, so the student
prompt x is always a suffix of the teacher prompt [c, x] and response tokens line up.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import resources
from types import ModuleType

from nca_interp.tasks import frozenlake, sokoban
from nca_interp.tasks.sokoban import Outcome

CONTEXT_KINDS = ("state", "plan", "rules")
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
            raise ValueError(f"context_as must be user or system, not {self.context_as!r}")
        messages = []
        if context is not None and self.context_as == "system":
            messages.append({"role": "system", "content": context})
        user = x_text if context is None or self.context_as == "system" \
            else f"{context}\n\n{x_text}"
        messages.append({"role": "user", "content": user})
        return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=True,
                                                  **dict(self.template_kwargs))


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

    def level(self, seed: int | str):
        return self.game.generate_level(seed, self.config)

    def levels(self, split: str, n: int, seed: int = 0) -> list:
        """`n` levels of `split`. The `test` split is fixed by `seed`; any other split excludes
        every board of the first 1000 test levels of the same seed."""
        if split == "test":
            return [self.level(f"test-{seed}-{i}") for i in range(n)]
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
                raise RuntimeError(f"{self.name}: almost every level is held out; use a larger "
                                   "board so training and test levels can differ")
        return out

    def render(self, level) -> str:
        return (self.game.render_compact if self.fmt == "compact" else
                self.game.render_textarena)(level)

    def context(self, level, kind: str) -> str:
        if kind == "state":
            return self.game.state_context(level)
        if kind == "plan":
            moves = level.solution[: self.plan_k]
            if self.fmt == "compact":
                return f"M:{moves}"
            return "The first optimal moves are: " + " ".join(_MOVE_TO_CHAT[m] for m in moves)
        if kind == "rules":
            if self.rules_text is not None:
                return self.rules_text
            return resources.files("nca_interp.tasks").joinpath(f"rules/{self.name}.txt") \
                .read_text().strip()
        raise ValueError(f"unknown context kind {kind!r}; choose one of {CONTEXT_KINDS}")

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

    def target(self, level) -> str:
        """The solver-optimal response text (end-of-response is the tokenizer's eos)."""
        if self.fmt == "compact":
            return level.solution
        return " ".join(_MOVE_TO_CHAT[m] for m in level.solution)

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
        out: Outcome = self.game.play(level, moves, self.config.max_invalid)
        return Scored(out.won, True, moves, out.invalid)


def make_task(name: str, fmt: str = "compact", plan_k: int = 3, **config) -> Task:
    """`make_task("sokoban", dim_room=(8, 8))`, `make_task("frozenlake", size=3, num_holes=2)`."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {FORMATS}")
    if name == "sokoban":
        return Task(name, sokoban, sokoban.SokobanConfig(**config), fmt, plan_k)
    if name == "frozenlake":
        return Task(name, frozenlake, frozenlake.FrozenLakeConfig(**config), fmt, plan_k)
    raise ValueError(f"unknown task {name!r}; choose sokoban or frozenlake")


def task_record(task: Task) -> dict:
    """What a run config stores about its task; `task_from_record` reads it back."""
    return {"name": task.name, "fmt": task.fmt, "plan_k": task.plan_k,
            **json_safe(asdict(task.config))}


def json_safe(d: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def task_from_record(record: dict | None, name: str | None = None,
                     fmt: str | None = None) -> Task:
    """The task a run was trained on. `name` overrides it (a different game then starts from
    that game's defaults); `fmt` overrides the rendering."""
    record = record if isinstance(record, dict) else {}
    name = name or record.get("name") or "sokoban"
    if record.get("name") != name:
        record = {}
    game = {"sokoban": sokoban.SokobanConfig, "frozenlake": frozenlake.FrozenLakeConfig}.get(name)
    if game is None:
        raise ValueError(f"unknown task {name!r}; choose sokoban or frozenlake")
    known = {f.name for f in fields(game)}
    config = {k: tuple(v) if isinstance(v, list) else v for k, v in record.items() if k in known}
    return make_task(name, fmt or record.get("fmt", "compact"), record.get("plan_k", 3), **config)
