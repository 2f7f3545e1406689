r"""Parity of our Sokoban / FrozenLake executors and renderings with textarena 0.7.4, *running*.

textarena is not a dependency of the project; run this with a scratch venv that has it
(`pip install --no-deps textarena==0.7.4` plus `nltk rich requests websockets
numpy`), with the repository on PYTHONPATH:

    python3 -m venv /tmp/ta && /tmp/ta/bin/pip install --no-deps textarena==0.7.4 \
        && /tmp/ta/bin/pip install nltk rich requests websockets numpy
    PYTHONPATH=. /tmp/ta/bin/python bench/textarena_parity.py --trajectories 3000

Each trajectory: one of our levels loaded into textarena's env (its room arrays / grid), then
a random move string (valid, invalid, repeated-invalid moves) played move by move in both.
Compared after every move: whether the game has ended, won or lost, and the board string.
Prints the number of trajectories and moves compared and every mismatch (exit 1 if any).
"""

from __future__ import annotations

import argparse
import random
import sys

import numpy as np
import textarena as ta
from textarena.envs.FrozenLake.env import FrozenLakeEnv
from textarena.envs.Sokoban.env import SokobanEnv

from nca_interp.tasks import frozenlake, sokoban

CHAT = {"U": "[up]", "D": "[down]", "L": "[left]", "R": "[right]"}


def sokoban_env(level: sokoban.SokobanLevel) -> SokobanEnv:
    env = SokobanEnv(dim_room=(level.height, level.width), num_boxes=len(level.boxes))
    env.reset(num_players=1, seed=0)
    fixed = np.ones((level.height, level.width), dtype=int)
    for r, c in level.walls:
        fixed[r, c] = 0
    for r, c in level.targets:
        fixed[r, c] = 2
    state = fixed.copy()
    for r, c in level.boxes:
        state[r, c] = 3 if (r, c) in level.targets else 4
    state[level.player] = 5
    env.room_fixed, env.room_state = fixed, state
    env.player_position = np.array(level.player)
    return env


def board_of(env: SokobanEnv) -> str:
    return (f"Current Board:\n\n{env.create_board_str(env.room_state)}\nAvailable Moves: "
            + ", ".join(env.action_space))


def ours_after(level, moves: str):
    """Our executor's state after `moves` (invalid moves change nothing)."""
    boxes, player = level.boxes, level.player
    for m in moves:
        nxt = sokoban.step(level, boxes, player, m)
        if nxt is not None:
            boxes, player = nxt
    return sokoban.SokobanLevel(level.height, level.width, level.walls, level.targets,
                                tuple(sorted(boxes)), player)


def check_sokoban(n: int, rng: random.Random) -> tuple[int, int, list[str]]:
    bad, moves_seen = [], 0
    for t in range(n):
        level = sokoban.generate_level(f"parity-{t}")
        env = sokoban_env(level)
        if board_of(env) != sokoban.render_textarena(level):
            bad.append(f"sokoban {t}: initial board differs")
        plan = "".join(rng.choice("UDLR") for _ in range(rng.randint(1, 14)))
        if rng.random() < 0.3:  # some solving trajectories, with invalid moves mixed in
            plan = "".join(m + (rng.choice("UDLR") if rng.random() < 0.3 else "")
                           for m in level.solution)
        def board_matches(i, plan=plan, level=level, env=env):
            return board_of(env) == sokoban.render_textarena(ours_after(level, plan[:i + 1]))

        moves, mismatch = compare_game(env, plan, ours_end(sokoban.play, level, plan),
                                       board_matches)
        moves_seen += moves
        bad += [f"sokoban {t} {plan!r}: {m}" for m in mismatch]
    return n, moves_seen, bad


def compare_game(env, plan: str, ours: tuple, board_matches=None) -> tuple[int, list[str]]:
    """Play `plan` in textarena's env; compare the end (won, move it ended at) with ours and,
    after every move that does not end the game, the board. Returns (moves played, problems)."""
    done, i, problems = False, -1, []
    for i, m in enumerate(plan):  # noqa: B007 - i is read after the loop
        done, _ = env.step(CHAT[m])
        if not done and board_matches is not None and not board_matches(i):
            problems.append(f"move {i}: board differs")
        if done:
            break
    theirs = (done and env.state.rewards.get(0) == 1, i + 1 if done else None)
    if theirs != ours:
        problems.append(f"textarena (won, ended) {theirs}, ours {ours}")
    return i + 1, problems


def ours_end(play, level, plan: str):
    """(won, the move our executor ended the game at or None). Our Outcome cannot tell
    'lost on the last move' from 'ran out of moves', so replay with one move more: a game
    that had ended is unchanged by it."""
    out, longer = play(level, plan), play(level, plan + "U")
    ended = out.won or out.moves_made < len(plan) or (
        longer.moves_made == out.moves_made and longer.invalid == out.invalid)
    return out.won, (out.moves_made if ended else None)


def frozen_env(level: frozenlake.FrozenLakeLevel) -> FrozenLakeEnv:
    env = FrozenLakeEnv(size=level.size, num_holes=len(level.holes))
    env.reset(num_players=1, seed=0)
    grid = [[" "] * level.size for _ in range(level.size)]
    for r, c in level.holes:
        grid[r][c] = "H"
    grid[level.goal[0]][level.goal[1]] = "G"
    env.state.game_state["grid"] = grid
    env.state.game_state["player_pos"] = level.start
    env.state.game_state["goal_pos"] = level.goal
    env.player_pos = level.start
    return env


def check_frozenlake(n: int, rng: random.Random) -> tuple[int, int, list[str]]:
    bad, moves_seen = [], 0
    for t in range(n):
        level = frozenlake.generate_level(f"parity-{t}")
        env = frozen_env(level)
        first = f"Current Board:\n\n{env._render_board()}\n\nAvailable Actions: " + \
            ", ".join(["[up]", "[down]", "[left]", "[right]", "[w]", "[a]", "[s]", "[d]"])
        if first != frozenlake.render_textarena(level):
            bad.append(f"frozenlake {t}: initial board differs")
        plan = "".join(rng.choice("UDLR") for _ in range(rng.randint(1, 12)))
        if rng.random() < 0.3:
            plan = "".join(m + (rng.choice("UL") if rng.random() < 0.3 else "")
                           for m in level.solution)
        moves, mismatch = compare_game(env, plan, ours_end(frozenlake.play, level, plan))
        moves_seen += moves
        bad += [f"frozenlake {t} {plan!r}: {m}" for m in mismatch]
    return n, moves_seen, bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trajectories", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    print(f"textarena {ta.__version__ if hasattr(ta, '__version__') else '0.7.4'}")
    failures = []
    for name, fn in (("sokoban", check_sokoban), ("frozenlake", check_frozenlake)):
        n, moves, bad = fn(args.trajectories, rng)
        failures += bad
        print(f"{name:<11} trajectories {n:>6}  moves compared {moves:>7}  mismatches {len(bad)}")
    for line in failures[:20]:
        print("  ", line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
