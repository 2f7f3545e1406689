import itertools
import re

import pytest

from nca_interp.tasks import frozenlake, make_task, sokoban
from nca_interp.tasks.sokoban import SokobanConfig, generate_level, play, solve


def brute_force_shortest(level, max_len):
    for n in range(max_len + 1):
        for moves in itertools.product("UDLR", repeat=n):
            if play(level, "".join(moves), max_invalid=10**6).won:
                return n
    return None


@pytest.mark.parametrize("seed", range(12))
def test_bfs_solution_is_optimal(seed):
    level = generate_level(seed, SokobanConfig(dim_room=(5, 6), max_solution=6))
    assert brute_force_shortest(level, len(level.solution)) == len(level.solution)
    assert play(level, level.solution, max_invalid=0).won


def test_generation_reproducible_and_varied():
    a = [generate_level(i) for i in range(20)]
    b = [generate_level(i) for i in range(20)]
    assert [x.key for x in a] == [x.key for x in b]
    assert len({x.key for x in a}) > 15
    big = generate_level(3, SokobanConfig(dim_room=(8, 8), num_boxes=2, max_solution=40))
    assert len(big.boxes) == 2 and solve(big) == big.solution


def test_difficulty_filter():
    cfg = SokobanConfig(min_solution=5, max_solution=7)
    assert all(5 <= len(generate_level(i, cfg).solution) <= 7 for i in range(10))


FIXED = "_X_O\n_P_#\n____\n____"


def test_textarena_rendering_exact():
    level = sokoban.parse_board(FIXED)
    assert sokoban.render_textarena(level) == (
        "Current Board:\n\n"
        "# # # # # #\n# _ X _ O #\n# _ P _ # #\n# _ _ _ _ #\n# _ _ _ _ #\n# # # # # #\n"
        "\nAvailable Moves: up, down, left, right")
    assert sokoban.render_compact(level) == FIXED
    on = sokoban.parse_board("S√_\n_X_\n___")  # player on target, box on target
    assert "P √" in sokoban.render_textarena(on)  # textarena draws the player as P anywhere
    assert "S" not in sokoban.render_textarena(on).split("Available")[0]
    assert sokoban.render_compact(on).startswith("S√")  # compact keeps S (invertible)


def test_executor_rules():
    level = sokoban.parse_board("_X_O\n_P_#\n____\n____")
    assert play(level, "U").invalid == 1  # box pushed into the outer wall: blocked
    assert not play(level, "UU").won and play(level, "UU").moves_made == 2  # 2 in a row lose
    assert play(level, "UUUUU", max_invalid=10).invalid == 5
    assert play(level, level.solution).won
    walls = sokoban.parse_board("P#__\n_X__\n___O\n____")
    assert play(walls, "R").invalid == 1  # into an inner wall
    stacked = sokoban.parse_board("_____\nPXX__\n_____\n___OO")
    assert play(stacked, "R").invalid == 1  # two boxes in a row cannot be pushed


def test_invalid_count_resets_after_a_valid_move():
    """textarena: the error allowance (1) is per streak; a valid move in between forgives."""
    level = sokoban.parse_board("_X_O\n_P_#\n____\n____")  # solution LURR
    # U: box into the outer wall (invalid); R: valid; R: into the inner wall (invalid);
    # L: back to the start; then the optimal plan. Two invalid moves, never two in a row.
    out = play(level, "URRL" + level.solution)
    assert out.won and out.invalid == 2
    lost = play(level, "URRR" + level.solution)  # the 2nd and 3rd invalid are in a row
    assert not lost.won and lost.moves_made == 4 and lost.invalid == 3
    assert not play(level, "URRL" + level.solution, max_invalid=0).won


def test_frozenlake_invalid_streaks():
    level = frozenlake.parse_board("P__H\nHH__\n____\nH__G")  # solution RRDDDR
    out = frozenlake.play(level, "URURDDDR")  # U off-grid, R, U off-grid, ... : never 2 in a row
    assert out.won and out.invalid == 2
    assert not frozenlake.play(level, "UURRDDDR").won  # two in a row lose


def test_malformed_boards_raise():
    for bad in ["_X\n_", "_Q_\n___", "PP\nXO", "_X_\n___"]:
        with pytest.raises(ValueError, match="malformed|unsolvable"):
            sokoban.parse_board(bad)
    with pytest.raises(ValueError, match="unsolvable"):
        sokoban.parse_board("XP_\nO__")  # box in a corner
    with pytest.raises(ValueError):
        frozenlake.parse_board("PH\nHG")


def test_frozenlake_rules_and_render():
    level = frozenlake.parse_board("P__H\nHH__\n____\nH__G")
    assert level.solution == "RRDDDR"
    assert frozenlake.play(level, "RRDDDR").won
    assert not frozenlake.play(level, "D").won  # hole
    assert frozenlake.play(level, "UURRDDDR").invalid == 2
    assert not frozenlake.play(level, "UURRDDDR").won
    text = frozenlake.render_textarena(level)
    assert text.startswith("Current Board:\n\n+-----+-----+-----+-----+\n|  P  |     |     |  H  |")
    assert text.endswith("Available Actions: [up], [down], [left], [right], [w], [a], [s], [d]")
    levels = [frozenlake.generate_level(i) for i in range(30)]
    assert all(frozenlake.solve(lv) is not None for lv in levels)


@pytest.mark.parametrize("name", ["sokoban", "frozenlake"])
def test_prompt_views_and_contexts(name):
    task = make_task(name)
    level = task.level(0)
    x = task.prompt(level)
    for kind in ["state", "plan", "rules"]:
        c = task.context(level, kind)
        assert task.prompt(level, c) == c + "\n" + x  # context first, x is a suffix
    assert task.context(level, "plan") == "M:" + level.solution[:3]
    with pytest.raises(ValueError, match="unknown context"):
        task.context(level, "oracle")


def test_state_context_derivable():
    level = sokoban.parse_board("_X_O\n_P_#\n____\n____")
    assert sokoban.state_context(level) == "P1,1 X0,1 O0,3 D+0,+2"


@pytest.mark.parametrize("fmt", ["compact", "textarena"])
def test_parser_never_crashes(fmt):
    task = make_task("sokoban", fmt)
    level = task.level(1)
    for garbage in ["", "hello", "UDLRX", "[jump]", "\x00\n", "√√√", "[UP] [up]" * 50]:
        s = task.score(level, garbage)
        assert s.won in (True, False)
    assert task.score(level, task.target(level)).won
    assert not task.score(level, "nonsense").parsed


def test_chat_parser_matches_textarena_aliases():
    task = make_task("sokoban", "textarena")
    assert task.parse("I go [Up] then [ d ] and [s]") == "URD"


def test_held_out_disjoint_from_training():
    task = make_task("sokoban")
    held = task.held_out_keys(200)
    train = task.sample_levels("train-0-0", 300, held)
    assert not held & {lv.key for lv in train}


def test_remapped_keys_round_trip_and_score():
    """The remapped-keys variant: the target is typed through the level's keys, scoring decodes
    it back; a response typed in plain directions loses wherever the keys differ from them."""
    task = make_task("sokoban", remap="random")
    levels = task.levels("test", 40)
    assert len({lv.keys for lv in levels}) > 4  # many permutations drawn
    plain = make_task("sokoban")
    for lv, lv0 in zip(levels, plain.levels("test", 40)):
        assert lv == lv0  # the board does not depend on the keys
        typed = task.target(lv)
        assert task.decode(lv, typed) == lv.solution
        assert task.score(lv, typed).won
        assert task.context(lv, "remap") == "K:" + " ".join(
            f"{d}={k}" for d, k in zip("UDLR", lv.keys))
        assert task.context(lv, "plan") == "M:" + typed[:3]
        if any(task.encode(lv, m) != m for m in lv.solution):
            assert task.target(lv) != lv.solution
    fixed = make_task("sokoban", remap="LRUD")
    lv = fixed.levels("test", 1)[0]
    assert lv.keys == "LRUD" and fixed.encode(lv, "UDLR") == "LRUD"
    assert plain.target(plain.levels("test", 1)[0]) == plain.levels("test", 1)[0].solution
    chat = make_task("sokoban", "textarena", remap="LRUD")
    lv = chat.levels("test", 1)[0]
    assert chat.score(lv, chat.target(lv)).won and "[left] moves up" in chat.context(lv, "remap")
    with pytest.raises(ValueError, match="permutation"):
        make_task("sokoban", remap="UUDL")


def test_remap_teacher_trains_on_random_keys_and_records_the_fixed_ones():
    from train import sft

    cfg = sft.parse_config(sft.SFTConfig, ["--task-options", "remap=LRUD", "--contexts", "remap",
                                           "--p-detour", "0", "--p-no-context", "0"])
    recorded, trained = sft.task_of(cfg)
    assert recorded.config.remap == "LRUD" and trained.config.remap == "random"
    prompts, responses = sft.batch_for_step(trained, cfg, 0, set())
    levels = trained.sample_levels(f"train-{cfg.seed}-0", cfg.batch, set())
    for p, r, lv in zip(prompts, responses, levels):
        assert p.startswith("K:" + " ".join(f"{d}={k}" for d, k in zip("UDLR", lv.keys)) + "\n")
        assert r[-1][0] == trained.encode(lv, lv.solution)
    with pytest.raises(ValueError, match="fixed permutation"):
        sft.task_of(sft.parse_config(sft.SFTConfig, ["--task-options", "remap=random"]))


def test_a_new_task_is_one_file_and_one_registration(capsys):
    """A toy game registered with one call is a task like any other: make_task builds it, the
    task options parse into its config, and every command's help lists it with its contexts."""
    import types
    from dataclasses import dataclass

    from nca_interp import tasks
    from nca_interp.cli import parse_config
    from nca_interp.evaluate import EvalConfig
    from nca_interp.tasks.base import REGISTRY, Outcome, TaskSpec, register

    @dataclass(frozen=True)
    class ToyConfig:
        goal: str = "R"
        max_solution: int = 1
        max_invalid: int = 1

    @dataclass(frozen=True)
    class ToyLevel:
        key: str
        solution: str

    game = types.SimpleNamespace(
        generate_level=lambda seed, cfg: ToyLevel(f"toy-{seed}", cfg.goal),
        render_compact=lambda lv: "goal?", render_textarena=lambda lv: "Where is the goal?",
        state_context=lambda lv: f"G:{lv.solution}",
        play=lambda lv, moves, max_invalid=1: Outcome(moves == lv.solution, len(moves), 0))
    register(TaskSpec("toygame", ToyConfig, game, contexts="state|plan"))
    try:
        task = tasks.make_task("toygame", **tasks.parse_task_options("toygame", ["goal=L"]))
        level = task.level(0)
        assert task.score(level, "L").won and not task.score(level, "R").won
        assert task.prompt(level, task.context(level, "state")) == "G:L\ngoal?\n>"
        assert "toygame" in tasks.TASKS
        with pytest.raises(SystemExit):
            parse_config(EvalConfig, ["--help"])
        shown = re.sub(r"\s+", " ", capsys.readouterr().out)
        assert "|toygame;" in shown and "state|plan (toygame)" in shown
        from nca_interp.paper.architecture import task_table  # the generated page's row

        assert any(r.startswith("| toygame |") and "state, plan" in r for r in task_table())
        with pytest.raises(ValueError, match="registered twice"):
            register(TaskSpec("toygame", ToyConfig, game, contexts="state"))
    finally:
        REGISTRY.pop("toygame")
    with pytest.raises(ValueError, match="unknown task 'toygame'"):
        tasks.make_task("toygame")


def test_a_task_of_your_own_is_found_through_nca_interp_tasks(monkeypatch):
    """docs/examples/task/toy_task.py, outside the package and named by NCA_INTERP_TASKS, is a
    task like the built-in ones: it plays, its options parse, every command's help lists it.
    Its `rules` kind, which it does not offer, and a module that cannot be imported are
    refused in one line each."""
    import sys
    from pathlib import Path

    from nca_interp import tasks
    from nca_interp.errors import UsageError
    from nca_interp.tasks.base import REGISTRY, Task, TaskSpec, register
    from tests.conftest import command_help

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "docs" / "examples"
                                    / "task"))
    monkeypatch.setenv(tasks.PLUGINS_ENV, "toy_task")
    try:
        tasks.discover()
        assert "corridor" in tasks.TASKS
        task = tasks.make_task("corridor", **tasks.parse_task_options("corridor", ["max_len=3"]))
        levels = [task.level(i) for i in range(20)]
        assert {len(lv.solution) for lv in levels} == {2, 3}
        assert all(task.score(lv, lv.solution).won for lv in levels)
        assert not any(task.score(lv, lv.solution[:-1]).won for lv in levels)
        assert task.context(levels[0], "plan") == "M:" + levels[0].solution[:3]
        shown = re.sub(r"\s+", " ", command_help("nca_interp.evaluate"))
        assert "--task TASK corridor|facts|" in shown and "state|plan (corridor)" in shown
        register(TaskSpec("corridor_rules", REGISTRY["corridor"].config,
                          REGISTRY["corridor"].module, Task))  # offers rules by default
        with pytest.raises(UsageError, match="corridor_rules has no rules text: write "):
            tasks.make_task("corridor_rules").context(levels[0], "rules")
    finally:
        REGISTRY.pop("corridor", None)
        REGISTRY.pop("corridor_rules", None)
        sys.modules.pop("toy_task", None)
    monkeypatch.setenv(tasks.PLUGINS_ENV, "no_such_task_module")
    with pytest.raises(UsageError, match="NCA_INTERP_TASKS names the task module "
                                         "no_such_task_module, which cannot be imported"):
        tasks.discover()
