"""Sokoban: seeded level generation, exact BFS solver, textarena-rules executor, renderings.

Generation follows gym-sokoban / textarena: a random walk carves the room topology, the box is
placed on its target, and reverse play (the player walking and pulling boxes) moves it away.
Coordinates are (row, col) in the full room, outer walls included; `dim_room=(6, 6)` is
textarena's default and has a 4x4 interior.
"""

from __future__ import annotations

import random
import sys
from collections import deque
from dataclasses import dataclass, field, replace

from nca_interp.errors import UsageError
from nca_interp.tasks.base import (
    MOVE_TO_CHAT,
    Outcome,
    Task,
    TaskSpec,
    check_types,
    register,
    whole,
)

__all__ = ["MAX_INVALID", "MAX_SOLUTION", "MOVES", "SokobanConfig", "SokobanLevel", "SokobanTask",
           "generate_level", "play", "render_textarena", "step"]

MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
IDENTITY = "UDLR"  # key order of a remap: the letters typed for up, down, left, right
# textarena 0.7.4 Sokoban-v0 symbols: 0 wall, 1 floor, 2 target, 3 box on target, 4 box,
# 5 player, 6 player on target.
SYMBOLS = {"wall": "#", "floor": "_", "target": "O", "box_on_target": "√", "box": "X",
           "player": "P", "player_on_target": "S"}
_MASKS = [  # floor stamps of the random walk, as in gym-sokoban
    [(0, -1), (0, 0), (0, 1)],
    [(-1, 0), (0, 0), (1, 0)],
    [(0, -1), (0, 0), (1, 0)],
    [(0, -1), (0, 0), (1, -1), (1, 0)],
    [(0, 0), (0, 1), (1, 0)],
]

Pos = tuple[int, int]
ROOM_SIDES = (4, 20)  # outer walls included: 2x2 interior at least; larger prompts grow fast
MAX_REVERSE_STEPS = 1000  # generation time grows with it; the walk has mixed long before
MAX_SOLUTION = 256  # the response budget is made from it (2 tokens per move and 4)
MAX_INVALID = 1000  # invalid moves in a row: more than any response holds


@dataclass(frozen=True)
class SokobanConfig:
    dim_room: tuple[int, int] = (6, 6)  # outer walls included, as textarena
    num_boxes: int = 1
    min_solution: int = 2  # difficulty filter on the optimal solution length
    max_solution: int = 12
    reverse_steps: int = 40
    max_invalid: int = 1  # textarena: an invalid move is a warning; the next one in a row loses
    # Rule variant "remapped keys": None (U/D/L/R move up/down/left/right), "random" (each level
    # draws its own permutation: a teacher learns to read it from the `remap` context) or a
    # fixed permutation of "UDLR" (the letters typed for up, down, left, right: the knowledge
    # distillation internalizes, as the system prompt's knowledge base).
    remap: str | None = None

    def __post_init__(self):
        room = self.dim_room
        lo, hi = ROOM_SIDES
        if not (isinstance(room, (tuple, list)) and len(room) == 2 and all(
                isinstance(x, int) and not isinstance(x, bool) and lo <= x <= hi for x in room)):
            raise UsageError(f"task option dim_room must be two whole numbers HxW (6x6: a 4x4 "
                             f"interior inside the outer walls), each {lo}..{hi}, not {room!r}")
        object.__setattr__(self, "dim_room", tuple(room))  # a list from JSON or the API
        check_types(self)
        h, w = room
        most = ((h - 2) * (w - 2) - 1) // 2  # a floor cell for each box, its target, the player
        whole("num_boxes", self.num_boxes, 1, most,
              f" for dim_room {h}x{w}: a level needs a box, and its {h - 2}x{w - 2} interior "
              f"holds at most {most} (a cell for each box and its target, one for the player)")
        whole("reverse_steps", self.reverse_steps, 1, MAX_REVERSE_STEPS,
              " (the player's backward walk that places the boxes; generation time grows with "
              "it)")
        whole("max_solution", self.max_solution, 1, MAX_SOLUTION,
              " (the longest optimal solution kept: the response budget is made from it)")
        whole("min_solution", self.min_solution, 1, self.max_solution,
              f" (the shortest optimal solution kept; at most max_solution {self.max_solution})")
        whole("max_invalid", self.max_invalid, 0, MAX_INVALID,
              " (invalid moves in a row before the game is lost)")
        if self.remap is not None and self.remap != "random" and \
                sorted(self.remap) != sorted(IDENTITY):
            raise UsageError(f"remap {self.remap!r}: use none, random, or a permutation of "
                             f"{IDENTITY} (the letters typed for up, down, left, right)")


@dataclass(frozen=True)
class SokobanLevel:
    height: int
    width: int
    walls: frozenset[Pos]
    targets: tuple[Pos, ...]
    boxes: tuple[Pos, ...]
    player: Pos
    solution: str = field(default="", compare=False)
    keys: str = field(default=IDENTITY, compare=False)  # remap: letters typed for U, D, L, R

    @property
    def key(self) -> str:
        return render_compact(self)


def _topology(rng: random.Random, h: int, w: int) -> set[Pos]:
    floor: set[Pos] = set()
    directions = [(1, 0), (0, 1), (-1, 0), (0, -1)]
    d = rng.choice(directions)
    r, c = rng.randint(1, h - 2), rng.randint(1, w - 2)
    for _ in range(int(1.7 * (h + w))):
        if rng.random() < 0.35:
            d = rng.choice(directions)
        r = max(min(r + d[0], h - 2), 1)
        c = max(min(c + d[1], w - 2), 1)
        for dr, dc in rng.choice(_MASKS):
            if 1 <= r + dr <= h - 2 and 1 <= c + dc <= w - 2:
                floor.add((r + dr, c + dc))
    return floor


def _reverse_play(rng: random.Random, floor: set[Pos], boxes: list[Pos], player: Pos,
                  steps: int) -> tuple[list[Pos], Pos]:
    """Walk the player backwards, pulling a box behind it with probability 1/2."""
    for _ in range(steps):
        dr, dc = rng.choice(list(MOVES.values()))
        nxt = (player[0] + dr, player[1] + dc)
        if nxt not in floor or nxt in boxes:
            continue
        behind = (player[0] - dr, player[1] - dc)
        if behind in boxes and rng.random() < 0.5:
            boxes[boxes.index(behind)] = player
        player = nxt
    return boxes, player


TRIES = 10_000  # random rooms drawn for one level before giving up


def generate_level(seed: int | str, cfg: SokobanConfig = SokobanConfig()) -> SokobanLevel:
    """One level from `seed`, retrying deterministically until the difficulty filter passes."""
    rng = random.Random(f"sokoban-{seed}")
    h, w = cfg.dim_room
    for _ in range(TRIES):
        floor = _topology(rng, h, w)
        if len(floor) < 2 * cfg.num_boxes + 1:
            continue
        cells = sorted(floor)
        targets = rng.sample(cells, cfg.num_boxes)
        player = rng.choice([p for p in cells if p not in targets])
        boxes, player = _reverse_play(rng, floor, list(targets), player, cfg.reverse_steps)
        if any(b in targets for b in boxes):
            continue
        walls = frozenset((r, c) for r in range(h) for c in range(w) if (r, c) not in floor)
        level = SokobanLevel(h, w, walls, tuple(sorted(targets)), tuple(sorted(boxes)), player)
        plan = solve(level)
        if plan is not None and cfg.min_solution <= len(plan) <= cfg.max_solution:
            return SokobanLevel(h, w, walls, level.targets, level.boxes, player, plan,
                                keys_for(seed, cfg))
    raise UsageError(f"no level passed the filter for seed {seed!r} in {TRIES} tries "
                     f"({cfg.num_boxes} box(es) in a {h}x{w} room, optimal solutions of "
                     f"{cfg.min_solution}..{cfg.max_solution} moves): widen min/max_solution, "
                     "or use fewer boxes or a larger room")


def keys_for(seed: int | str, cfg: SokobanConfig) -> str:
    """The level's key permutation: identity, the config's fixed one, or one drawn from the
    level seed (its own stream: the board does not depend on it)."""
    if cfg.remap is None:
        return IDENTITY
    if cfg.remap != "random":
        return cfg.remap
    keys = list(IDENTITY)
    random.Random(f"remap-{seed}").shuffle(keys)
    return "".join(keys)


def step(level: SokobanLevel, boxes: tuple[Pos, ...], player: Pos,
         move: str) -> tuple[tuple[Pos, ...], Pos] | None:
    """Apply one move; None when it is invalid (into a wall, or a blocked push)."""
    dr, dc = MOVES[move]
    nxt = (player[0] + dr, player[1] + dc)
    if nxt in level.walls or not (0 <= nxt[0] < level.height and 0 <= nxt[1] < level.width):
        return None
    if nxt in boxes:
        beyond = (nxt[0] + dr, nxt[1] + dc)
        if beyond in level.walls or beyond in boxes:
            return None
        boxes = tuple(sorted(beyond if b == nxt else b for b in boxes))
    return boxes, nxt


def solve(level: SokobanLevel, max_states: int = 200_000) -> str | None:
    """Exact BFS over (player, boxes); the optimal move string, or None if unsolvable."""
    start = (level.player, level.boxes)
    targets = set(level.targets)
    parent: dict = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        if set(state[1]) == targets:
            moves = []
            while parent[state] is not None:
                state, m = parent[state]
                moves.append(m)
            return "".join(reversed(moves))
        for m in MOVES:
            nxt = step(level, state[1], state[0], m)
            if nxt is None:
                continue
            key = (nxt[1], nxt[0])
            if key not in parent:
                parent[key] = (state, m)
                queue.append(key)
        if len(parent) > max_states:
            raise UsageError("solver state budget exceeded: too many boxes or too large a "
                             "room for exact BFS; use fewer boxes or a smaller dim_room")
    return None


def play(level: SokobanLevel, moves: str, max_invalid: int = 1) -> Outcome:
    """Execute `moves` with textarena's rules: an invalid move changes nothing; more than
    `max_invalid` of them *in a row* end the game as a loss (textarena's error count resets
    after every valid move); solved when every box is on a target. `Outcome.invalid` counts
    every invalid move of the game, for reporting."""
    boxes, player, invalid, in_a_row = level.boxes, level.player, 0, 0
    targets = set(level.targets)
    for i, m in enumerate(moves):
        nxt = step(level, boxes, player, m)
        if nxt is None:
            invalid += 1
            in_a_row += 1
            if in_a_row > max_invalid:
                return Outcome(False, i + 1, invalid)
            continue
        in_a_row = 0
        boxes, player = nxt
        if set(boxes) == targets:
            return Outcome(True, i + 1, invalid)
    return Outcome(False, len(moves), invalid)


def _grid(level: SokobanLevel, player_on_target: str = SYMBOLS["player_on_target"]
          ) -> list[list[str]]:
    s = SYMBOLS
    grid = [[s["wall"] if (r, c) in level.walls else s["floor"] for c in range(level.width)]
            for r in range(level.height)]
    for r, c in level.targets:
        grid[r][c] = s["target"]
    for r, c in level.boxes:
        grid[r][c] = s["box_on_target"] if (r, c) in level.targets else s["box"]
    r, c = level.player
    grid[r][c] = player_on_target if level.player in level.targets else s["player"]
    return grid


def render_textarena(level: SokobanLevel) -> str:
    """Identical to textarena 0.7.4 Sokoban-v0's board observation. textarena writes the
    player as 5 (`P`) wherever it stands, a target included, so `S` never shows there; the
    compact rendering keeps `S` (the board must stay invertible without the level)."""
    rows = "".join(" ".join(row) + "\n" for row in _grid(level, SYMBOLS["player"]))
    return f"Current Board:\n\n{rows}\nAvailable Moves: up, down, left, right"


def render_compact(level: SokobanLevel) -> str:
    """One character per interior cell, rows joined by newlines."""
    return "\n".join("".join(row[1:-1]) for row in _grid(level)[1:-1])


def parse_board(text: str) -> SokobanLevel:
    """Inverse of `render_compact` (walls added around); raises ValueError on a malformed board."""
    rows = text.strip("\n").split("\n")
    if not rows or len({len(r) for r in rows}) != 1:
        raise UsageError("malformed Sokoban board: rows must be non-empty and of equal length")
    h, w = len(rows) + 2, len(rows[0]) + 2
    inv = {v: k for k, v in SYMBOLS.items()}
    walls = {(r, c) for r in range(h) for c in range(w) if r in (0, h - 1) or c in (0, w - 1)}
    targets, boxes, players = [], [], []
    for r, row in enumerate(rows, start=1):
        for c, ch in enumerate(row, start=1):
            kind = inv.get(ch)
            if kind is None:
                raise UsageError(f"malformed Sokoban board: unknown symbol {ch!r} at ({r}, {c})")
            if kind == "wall":
                walls.add((r, c))
            if kind in ("target", "box_on_target", "player_on_target"):
                targets.append((r, c))
            if kind in ("box", "box_on_target"):
                boxes.append((r, c))
            if kind in ("player", "player_on_target"):
                players.append((r, c))
    if len(players) != 1 or len(boxes) != len(targets) or not boxes:
        raise UsageError(f"malformed Sokoban board: {len(players)} players, {len(boxes)} boxes, "
                         f"{len(targets)} targets (need 1 player and as many boxes as targets)")
    level = SokobanLevel(h, w, frozenset(walls), tuple(sorted(targets)), tuple(sorted(boxes)),
                         players[0])
    plan = solve(level)
    if plan is None:
        raise UsageError("Sokoban board is unsolvable")
    return SokobanLevel(h, w, level.walls, level.targets, level.boxes, level.player, plan)


def state_context(level: SokobanLevel) -> str:
    """Coordinates (interior, 0-based row,col) of player, boxes, targets and box-to-target
    offsets: everything here is derivable from the board."""
    def fmt(p: Pos) -> str:
        return f"{p[0] - 1},{p[1] - 1}"
    parts = [f"P{fmt(level.player)}"]
    parts += [f"X{fmt(b)}" for b in level.boxes]
    parts += [f"O{fmt(t)}" for t in level.targets]
    for b in level.boxes:
        t = min(level.targets, key=lambda t: abs(t[0] - b[0]) + abs(t[1] - b[1]))
        parts.append(f"D{t[0] - b[0]:+d},{t[1] - b[1]:+d}")
    return " ".join(parts)


def advance(level: SokobanLevel, moves: str) -> SokobanLevel | None:
    """The level after `moves` (all valid, not yet solved), re-solved; None otherwise."""
    boxes, player = level.boxes, level.player
    for m in moves:
        nxt = step(level, boxes, player, m)
        if nxt is None:
            return None
        boxes, player = nxt
    if set(boxes) == set(level.targets):
        return None
    moved = SokobanLevel(level.height, level.width, level.walls, level.targets, boxes, player)
    plan = solve(moved)
    return None if plan is None else SokobanLevel(level.height, level.width, level.walls,
                                                  level.targets, boxes, player, plan, level.keys)


@dataclass(frozen=True)
class SokobanTask(Task):
    """Sokoban as a task. A level of the remapped-keys variant (`remap=`) types other letters
    for its moves; the `remap` context says which."""

    context_kinds = ("state", "plan", "rules", "remap")

    def keys(self, level) -> str:
        """The letters typed for up, down, left, right on this level (U, D, L, R unless the
        level is remapped)."""
        return getattr(level, "keys", IDENTITY)

    def encode(self, level, moves: str) -> str:
        keys = dict(zip("UDLR", self.keys(level)))
        return "".join(keys[m] for m in moves)

    def decode(self, level, typed: str) -> str:
        back = dict(zip(self.keys(level), "UDLR"))
        return "".join(back[m] for m in typed)

    def for_teacher(self, **training) -> SokobanTask:
        """The remapped-keys teacher reads the keys from its context, as sysprompt's reads its
        knowledge base: it trains on a random permutation per level."""
        if self.config.remap == "random":
            raise UsageError("remap=random: name the fixed permutation distillation will use "
                             "(e.g. --task-options remap=LRUD); the teacher trains on random ones")
        if self.config.remap is None:
            return self
        return replace(self, config=replace(self.config, remap="random"))

    def context(self, level, kind: str) -> str:
        if kind != "remap":
            return super().context(level, kind)
        if self.fmt == "compact":  # content-addressed: the key follows its direction
            return "K:" + " ".join(f"{d}={k}" for d, k in zip("UDLR", self.keys(level)))
        return "The moves are remapped: " + ", ".join(
            f"{MOVE_TO_CHAT[k]} moves {d}" for d, k in
            zip(("up", "down", "left", "right"), self.keys(level)))


register(TaskSpec("sokoban", SokobanConfig, sys.modules[__name__], SokobanTask,
                  "state|plan|rules|remap"))
