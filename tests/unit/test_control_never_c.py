"""A control context c' that is c itself measures nothing (reads_c 0 by construction): where a
task's own draw would give c back (every game level evaluated with one plan of one word, an
OPCD system prompt of one word) the command is refused in one line, and where another order of
c's words exists, that order is c' (the case probe 10 found for jsonl, Q-E, beside it here)."""

from pathlib import Path

import pytest

from nca_interp.errors import UsageError
from nca_interp.tasks import make_task
from nca_interp.tasks.base import same_context

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "opcd"


def test_games_whose_levels_share_one_single_word_context_are_refused():
    task = make_task("sokoban")
    level = task.levels("test", 1)[0]
    own = task.context(level, "plan")
    assert len(own.split()) == 1  # a compact plan is one word: no other order
    with pytest.raises(UsageError, match="needs levels with different contexts"):
        task.control_context([level], 0, "plan")
    with pytest.raises(UsageError, match="needs levels with different contexts"):
        task.control_context([level, level], 1, "plan")
    two = task.levels("test", 2)
    assert not same_context(task.control_context(two, 0, "plan"), task.context(two[0], "plan"))


@pytest.mark.parametrize("prompt,refused", [("Doctor.", True), ("Answer as a doctor.", False),
                                            ("yes yes", True)])
def test_an_opcd_system_prompt_is_never_its_own_control(tmp_path, prompt, refused):
    system = tmp_path / "system.txt"
    system.write_text(prompt)
    task = make_task("opcd", "textarena", train=str(FIX / "medmcqa_train.jsonl"),
                     test=str(FIX / "medmcqa_test.jsonl"), system_prompt=str(system))
    levels = task.levels("test", 2)
    if refused:
        with pytest.raises(UsageError, match="no other order of its words"):
            task.control_context(levels, 0, "system")
        return
    for i in range(len(levels)):  # every seed, the shuffle's own order included
        wrong = task.control_context(levels, i, "system")
        assert not same_context(wrong, prompt) and sorted(wrong.split()) == sorted(prompt.split())
