"""FrozenLake (deterministic): seeded grids with a BFS solvability check, BFS optimal path,
textarena-style table rendering and a compact rendering.

Start at the top-left, goal at the bottom-right; a move off the grid is invalid (textarena:
"you hit a wall"), stepping on a hole loses, reaching the goal wins.
"""

from __future__ import annotations

import random
import sys
from collections import deque
from dataclasses import dataclass, field

from nca_interp.errors import UsageError
from nca_interp.tasks.base import Outcome, TaskSpec, check_types, register, whole
from nca_interp.tasks.sokoban import MAX_INVALID, MAX_SOLUTION, MOVES

__all__ = ["FrozenLakeConfig", "FrozenLakeLevel", "generate_level", "play", "render_textarena"]

Pos = tuple[int, int]
SIZES = (2, 20)  # grid sides; larger prompts grow fast


@dataclass(frozen=True)
class FrozenLakeConfig:
    size: int = 4
    num_holes: int = 4
    min_solution: int = 1
    max_solution: int = 64
    max_invalid: int = 1

    def __post_init__(self):
        check_types(self)
        n = whole("size", self.size, *SIZES, " (the grid's side)")
        whole("num_holes", self.num_holes, 0, (n - 1) ** 2,
              f" on a {n}x{n} grid (a path from corner to corner keeps {2 * n - 1} cells free)")
        shortest = 2 * (n - 1)
        whole("max_solution", self.max_solution, shortest, MAX_SOLUTION,
              f" (the longest optimal path kept; on a {n}x{n} grid every path has at least "
              f"{shortest} moves)")
        whole("min_solution", self.min_solution, 1, self.max_solution,
              f" (the shortest optimal path kept; at most max_solution {self.max_solution})")
        whole("max_invalid", self.max_invalid, 0, MAX_INVALID,
              " (invalid moves in a row before the game is lost)")


@dataclass(frozen=True)
class FrozenLakeLevel:
    size: int
    holes: frozenset[Pos]
    start: Pos
    goal: Pos
    solution: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        return render_compact(self)


def solve(level: FrozenLakeLevel) -> str | None:
    """BFS shortest hole-free path from start to goal as a move string, None if none exists."""
    parent: dict[Pos, tuple[Pos, str] | None] = {level.start: None}
    queue = deque([level.start])
    while queue:
        p = queue.popleft()
        if p == level.goal:
            moves = []
            while (step := parent[p]) is not None:
                p, m = step
                moves.append(m)
            return "".join(reversed(moves))
        for m, (dr, dc) in MOVES.items():
            q = (p[0] + dr, p[1] + dc)
            if 0 <= q[0] < level.size and 0 <= q[1] < level.size and q not in level.holes \
                    and q not in parent:
                parent[q] = (p, m)
                queue.append(q)
    return None


def generate_level(seed: int | str, cfg: FrozenLakeConfig = FrozenLakeConfig()) -> FrozenLakeLevel:
    rng = random.Random(f"frozenlake-{seed}")
    n = cfg.size
    start, goal = (0, 0), (n - 1, n - 1)
    cells = [(r, c) for r in range(n) for c in range(n) if (r, c) not in (start, goal)]
    for _ in range(10_000):
        holes = frozenset(rng.sample(cells, cfg.num_holes))
        level = FrozenLakeLevel(n, holes, start, goal)
        plan = solve(level)
        if plan is not None and cfg.min_solution <= len(plan) <= cfg.max_solution:
            return FrozenLakeLevel(n, holes, start, goal, plan)
    raise UsageError(f"no solvable grid passed the filter for seed {seed!r} ({cfg.num_holes} "
                     f"holes on a {n}x{n} grid, optimal paths of {cfg.min_solution}.."
                     f"{cfg.max_solution} moves): widen min/max_solution, or use fewer holes")


def play(level: FrozenLakeLevel, moves: str, max_invalid: int = 1) -> Outcome:
    """textarena's rules: a move off the grid is invalid and changes nothing; more than
    `max_invalid` invalid moves *in a row* lose (the count resets after a valid move); a hole
    loses, the goal wins. `Outcome.invalid` counts every invalid move, for reporting."""
    p, invalid, in_a_row = level.start, 0, 0
    for i, m in enumerate(moves):
        dr, dc = MOVES[m]
        q = (p[0] + dr, p[1] + dc)
        if not (0 <= q[0] < level.size and 0 <= q[1] < level.size):
            invalid += 1
            in_a_row += 1
            if in_a_row > max_invalid:
                return Outcome(False, i + 1, invalid)
            continue
        in_a_row = 0
        p = q
        if p in level.holes:
            return Outcome(False, i + 1, invalid)
        if p == level.goal:
            return Outcome(True, i + 1, invalid)
    return Outcome(False, len(moves), invalid)


def _cells(level: FrozenLakeLevel) -> list[list[str]]:
    grid = [[" "] * level.size for _ in range(level.size)]
    for r, c in level.holes:
        grid[r][c] = "H"
    grid[level.goal[0]][level.goal[1]] = "G"
    grid[level.start[0]][level.start[1]] = "P"
    return grid


def render_textarena(level: FrozenLakeLevel) -> str:
    """textarena 0.7.4 FrozenLake-v0's board observation (cells of width 3, +---+ rules)."""
    rule = "+" + "+".join("-" * 5 for _ in range(level.size)) + "+"
    lines = [rule]
    for row in _cells(level):
        lines.append("|" + "|".join(f" {cell:^3} " for cell in row) + "|")
        lines.append(rule)
    board = "\n".join(lines)
    actions = ", ".join(["[up]", "[down]", "[left]", "[right]", "[w]", "[a]", "[s]", "[d]"])
    return f"Current Board:\n\n{board}\n\nAvailable Actions: {actions}"


def render_compact(level: FrozenLakeLevel) -> str:
    """One character per cell (`_` frozen, `H` hole, `G` goal, `P` player), rows by newline."""
    return "\n".join("".join("_" if ch == " " else ch for ch in row) for row in _cells(level))


def parse_board(text: str) -> FrozenLakeLevel:
    rows = text.strip("\n").split("\n")
    n = len(rows)
    if n < 2 or any(len(r) != n for r in rows):
        raise UsageError("malformed FrozenLake board: need a square grid of at least 2x2")
    holes, start, goal = set(), None, None
    for r, row in enumerate(rows):
        for c, ch in enumerate(row):
            if ch == "H":
                holes.add((r, c))
            elif ch == "P":
                start = (r, c)
            elif ch == "G":
                goal = (r, c)
            elif ch != "_":
                raise UsageError(f"malformed FrozenLake board: unknown symbol {ch!r} at ({r}, {c})")
    if start is None or goal is None:
        raise UsageError("malformed FrozenLake board: needs one P and one G")
    level = FrozenLakeLevel(n, frozenset(holes), start, goal)
    plan = solve(level)
    if plan is None:
        raise UsageError("FrozenLake board has no hole-free path to the goal")
    return FrozenLakeLevel(n, level.holes, start, goal, plan)


def state_context(level: FrozenLakeLevel) -> str:
    """Hole coordinates (0-based row,col) and the goal offset: derivable from the board."""
    holes = " ".join(f"H{r},{c}" for r, c in sorted(level.holes))
    dr, dc = level.goal[0] - level.start[0], level.goal[1] - level.start[1]
    return f"{holes} G{dr:+d},{dc:+d}".strip()


def advance(level: FrozenLakeLevel, moves: str) -> FrozenLakeLevel | None:
    """The level with the player moved by `moves` (on the grid, no hole, not at the goal),
    re-solved; None otherwise."""
    p = level.start
    for m in moves:
        dr, dc = MOVES[m]
        p = (p[0] + dr, p[1] + dc)
        if not (0 <= p[0] < level.size and 0 <= p[1] < level.size) or p in level.holes:
            return None
    if p == level.goal:
        return None
    moved = FrozenLakeLevel(level.size, level.holes, p, level.goal)
    plan = solve(moved)
    return None if plan is None else FrozenLakeLevel(level.size, level.holes, p, level.goal, plan)





register(TaskSpec("frozenlake", FrozenLakeConfig, sys.modules[__name__]))
