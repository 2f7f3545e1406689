"""A task from outside the package, as a user adds one: one file and one registration.

A one-row corridor: the agent starts at the left end and must walk right to the goal. The
`plan` context is the first moves of the solution (the `Task` base makes it from `solution`),
`state` is this file's `state_context`. Put the folder on the path and name the module:

    PYTHONPATH=docs/examples/task NCA_INTERP_TASKS=toy_task \\
        python -m nca_interp.evaluate --help        # lists `corridor` and its contexts

What `Task` reads from a game (nca_interp.tasks.base.Game): `generate_level(seed, cfg)` giving
a level with `key` (its identity: held-out levels are kept out of training by it) and
`solution` (an optimal U/D/L/R string), `render_compact` / `render_textarena` (the board as a
tiny model and as a chat model reads it), `state_context(level)` and `play(level, moves,
max_invalid)`; from its config `max_solution` (the response budget) and `max_invalid`.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass

from nca_interp.tasks.base import Outcome, TaskSpec, register


@dataclass(frozen=True)
class CorridorConfig:
    min_len: int = 2
    max_len: int = 6
    max_solution: int = 6  # the longest solution: the response budget is made from it
    max_invalid: int = 1  # invalid moves tolerated before the game is lost


@dataclass(frozen=True)
class Corridor:
    key: str
    length: int

    @property
    def solution(self) -> str:
        return "R" * self.length


def generate_level(seed: int | str, cfg: CorridorConfig) -> Corridor:
    n = random.Random(f"corridor-{seed}").randint(cfg.min_len, cfg.max_len)
    return Corridor(f"corridor-{seed}", n)


def render_compact(level: Corridor) -> str:
    return "A" + "." * (level.length - 1) + "G"


def render_textarena(level: Corridor) -> str:
    return f"You are at the left end of a corridor; the goal is {level.length} steps away."


def state_context(level: Corridor) -> str:
    return f"goal at {level.length}"


def play(level: Corridor, moves: str, max_invalid: int = 1) -> Outcome:
    pos = invalid = made = 0
    for m in moves:
        made += 1
        if m == "R":
            pos += 1
        elif m == "L" and pos > 0:
            pos -= 1
        else:
            invalid += 1
            if invalid > max_invalid:
                break
        if pos == level.length:
            return Outcome(True, made, invalid)
    return Outcome(False, made, invalid)


register(TaskSpec("corridor", CorridorConfig, sys.modules[__name__], contexts="state|plan"))
