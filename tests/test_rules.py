"""The verdict rule book (train/rules.py): each rule on both sides of each of its boundaries,
and docs/method.md states the rules the code applies."""

from pathlib import Path

from train import rules


def test_every_unit_clear_is_reproduced_one_short_is_partly():
    assert rules.verdict([True, True, True]) == "reproduced"
    assert rules.verdict([True, True, False]) == "partly"
    assert rules.verdict([False, False, False]) == "not reproduced"


def test_a_mean_on_the_wrong_side_is_not_reproduced_whatever_single_units_show():
    assert rules.verdict([True, False, False], mean_on_side=True) == "partly"
    assert rules.verdict([True, False, False], mean_on_side=False) == "not reproduced"
    assert rules.verdict([True, True], mean_on_side=False) == "not reproduced"


def test_fewer_than_half_of_the_units_judged_is_not_measurable():
    assert rules.verdict([True] * 6, total=12) == "reproduced"  # half: judged
    assert rules.verdict([True] * 5, total=12) == "not measurable"  # under half
    assert rules.verdict([True] * 4, total=12) == "not measurable"
    assert rules.verdict([], total=3) == "not measurable"
    # coverage never makes a verdict stronger: fewer judged units can only lose the verdict
    for judged in range(1, 13):
        v = rules.verdict([True] * judged, total=12)
        assert v in ("reproduced", "not measurable")
        assert (v == "reproduced") == (2 * judged >= 12)


def test_a_pooled_interval_needs_a_majority_of_units_to_be_reproduced():
    assert rules.pooled(True, [True, True, False]) == "reproduced"
    assert rules.pooled(True, [True, False, False, True]) == "partly"  # 2 of 4: no majority
    assert rules.pooled(True, [False] * 5 + [True] * 3) == "partly"  # sysprompt's 3 of 8
    assert rules.pooled(False, [True, False, False]) == "partly"
    assert rules.pooled(False, [False, False]) == "not reproduced"
    assert rules.pooled(True, [True, True], mean_on_side=False) == "not reproduced"


def test_reading_c_needs_half_the_teachers_reads_c():
    assert rules.reads_c(0.31, 0.6)
    assert rules.reads_c(0.30, 0.6)
    assert not rules.reads_c(0.29, 0.6)
    assert not rules.reads_c(0.007, 0.617)  # sokoban_long's NCA: 1% of the teacher's
    assert rules.reads_c(0.01, None) and rules.reads_c(0.01, 0.0)  # no teacher to compare


def test_the_method_page_states_the_rules_the_code_applies():
    text = (Path(__file__).resolve().parents[1] / "docs" / "method.md").read_text()
    assert rules.markdown() in text
    assert {name for name, _ in rules.RULES} >= {"every seed", "partly", "coverage",
                                                  "reading c"}
