"""The verdict rule book (nca_interp/paper/rules.py): each rule on both sides of each of its
boundaries, and docs/method.md states the rules the code applies."""

from pathlib import Path

from nca_interp.paper import rules


def test_every_unit_clear_is_reproduced_one_short_is_partly():
    assert rules.verdict([True, True, True]) == "reproduced"
    assert rules.verdict([True, True, False]) == "partly"
    assert rules.verdict([False, False, False]) == "not reproduced"


def test_a_mean_on_the_wrong_side_is_not_reproduced_whatever_single_units_show():
    assert rules.verdict([True, False, False], mean_on_side=True) == "partly"
    assert rules.verdict([True, False, False], mean_on_side=False) == "not reproduced"
    assert rules.verdict([True, True], mean_on_side=False) == "not reproduced"


def test_units_that_straddle_the_null_are_inconclusive_a_majority_against_is_not():
    straddle, against = [False, False, False], [False, False, False]
    assert rules.verdict(straddle, against=against) == "inconclusive"
    assert rules.verdict(straddle, mean_on_side=False, against=against) == "inconclusive"
    assert rules.verdict(straddle, against=[True, True, False]) == "not reproduced"
    assert rules.verdict(straddle, against=[True, False, False]) == "inconclusive"
    # a clear unit: the partly / every-seed rules as before
    assert rules.verdict([True, False, False], against=[False, True, True]) == "partly"
    assert rules.verdict([True, False, False], mean_on_side=False,
                         against=[False, True, True]) == "not reproduced"
    assert rules.verdict(straddle) == "not reproduced"  # units without intervals


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


def test_the_method_page_states_the_rules_the_code_applies():
    text = (Path(__file__).resolve().parents[2] / "docs" / "method.md").read_text()
    assert rules.markdown() in text
    assert {name for name, _ in rules.RULES} >= {"every seed", "partly", "coverage",
                                                  "reading c", "angles", "the gap",
                                                  "the paper's thresholds", "not run"}


def test_a_harm_is_opds_own_only_clear_of_step_0_and_of_chance_or_in_regime_a():
    # clears step 0 (0.05) and the independence baseline (1 - 0.8 = 0.2)
    assert rules.harm_is_own(0.25, 0.05, correct_c=0.8, regime_a=False)
    # clears step 0 only: a student right without c by chance is 'harmed' this much anyway
    assert not rules.harm_is_own(0.15, 0.05, correct_c=0.8, regime_a=False)
    # ... unless accuracy with c lies below accuracy without (regime A): degradation itself
    assert rules.harm_is_own(0.15, 0.05, correct_c=0.8, regime_a=True)
    # never without clearing step 0's harm, regime A or not
    assert not rules.harm_is_own(0.04, 0.05, correct_c=0.99, regime_a=True)
    assert not rules.harm_is_own(None, 0.0, correct_c=0.5, regime_a=True)
    # an undefined step-0 harm is no harm of 0: only the independence baseline can decide
    assert not rules.harm_is_own(0.15, None, correct_c=0.8, regime_a=True)
    assert rules.harm_is_own(0.25, None, correct_c=0.8, regime_a=False)
    assert rules.independence_harm(0.75) == 0.25


def test_breaking_is_accuracy_with_c_below_without_and_chance_is_printed_not_judged(tmp_path):
    import json

    from nca_interp.paper import claims

    def write(correct_c: float, ci: tuple, harm_ci=(0.04, 0.08), seeds=3):
        reps = {"t_base": {"harm": 0.01, "regime": "B", "correct_no_c": 0.6, "correct_c": 0.9},
                **{f"t_opd_s{s}": {"harm": 0.06, "regime": "A" if ci[1] < 0 else "C",
                                   "correct_c": correct_c, "correct_no_c": 0.8,
                                   "delta_c": correct_c - 0.8,
                                   "ci95": {"harm": list(harm_ci), "delta_c": list(ci)}}
                   for s in range(seeds)}}
        (tmp_path / "context_return.json").write_text(json.dumps({"results": reps}))
        return claims.degrades(tmp_path)

    # accuracy with c is above accuracy without: no break, and enough data to exclude one
    up = write(0.85, (0.03, 0.07))
    assert up.verdict == "not reproduced" and "independence baseline" in up.null
    assert not up.also  # no "beyond chance" column: it could never fire (#70)
    # a clear drop in every seed
    assert write(0.5, (-0.4, -0.2)).verdict == "reproduced"
    # a large drop too noisy to tell (one seed of 8 facts): inconclusive, not "no"
    noisy = write(0.45, (-0.8, 0.1), seeds=1)
    assert noisy.verdict == "inconclusive" and "would decide" in noisy.reason
    # three such seeds on the same items do not show it together: they share their item
    # noise, so pooling them (without per-item outcomes) narrows nothing
    assert write(0.45, (-0.8, 0.1)).verdict == "inconclusive"
    # collapse to chance (sysprompt_kb0: 0.724 -> 0.375 with c in every seed): harm sits at
    # the independence baseline, yet accuracy with c falls clear below without: it breaks,
    # the baseline printed beside it
    reps = {"t_base": {"harm": 0.14, "regime": "B", "correct_no_c": 0.29,
            "correct_c": 0.72},
            **{f"t_opd_s{s}": {"harm": 0.647, "regime": "C", "correct_c": 0.375,
                               "correct_no_c": 0.724, "delta_c": -0.349,
                               "ci95": {"harm": [0.55, 0.74], "delta_c": [-0.45, -0.25]}}
               for s in range(4)}}
    (tmp_path / "context_return.json").write_text(json.dumps({"results": reps}))
    chance = claims.degrades(tmp_path)
    assert chance.verdict == "reproduced" and not chance.also
    assert "independence baseline (1 - accuracy with c) 0.625" in chance.null


def test_prevents_needs_a_shown_break_own_harm_pairs_and_a_pooled_gap():
    assert rules.prevents("inconclusive", [True, True], 2, 0.1) == "not measurable"
    assert rules.prevents("reproduced", [], 3, None) == "not measurable"  # no own harm
    assert rules.prevents("reproduced", [True, True, True], 3, 0.05) == "reproduced"
    assert rules.prevents("partly", [True, True, True], 3, -0.01) == "partly"  # pooled reaches 0
    assert rules.prevents("reproduced", [True, False, True], 3, 0.05) == "partly"
    assert rules.prevents("reproduced", [False, False], 3, 0.05) == "not reproduced"


def test_beyond_chance_needs_the_interval_above_the_baseline_and_step_0():
    assert rules.beyond_chance(0.75, 0.8, 0.1, 0.3) == (True, False)  # baseline 0.7
    assert rules.beyond_chance(0.65, 0.8, 0.1, 0.3) == (False, False)  # straddles 0.7
    assert rules.beyond_chance(0.1, 0.2, 0.0, 0.7) == (False, True)   # under 0.3
    assert rules.beyond_chance(0.75, 0.8, 0.76, 0.3) == (False, False)  # not above step 0
    assert rules.beyond_chance(0.75, 0.8, None, 0.3) == (True, False)  # no step-0 harm


def test_every_claim_is_typed_by_the_rule_book_and_carries_its_type(tmp_path):
    """Each judged claim names its row of `rules.SPECS` (quantity, unit, null, side, rule,
    margin): a claim function without a row, a row naming no rule, or a type outside the book
    fails here; a missing input keeps its type on the "not run" row."""
    import pytest

    from nca_interp.errors import UsageError
    from nca_interp.paper import claims

    for fn, _, _ in claims.CLAIMS:
        assert fn.__name__ in rules.SPECS, f"{fn.__name__} has no type in rules.SPECS"
    for spec in rules.SPECS.values():
        assert spec.quantity and spec.unit and spec.null and spec.direction
    with pytest.raises(ValueError, match="not a rule"):
        rules.Spec("q", "seed", "0", "above", "a rule nobody wrote")
    with pytest.raises(UsageError, match="not in the rule book"):
        claims.Claim("c", "m", "n", "partly", spec="vibes")
    rows = claims.claims(tmp_path)  # nothing here: every row not run, every row typed
    assert rows and all(c.verdict == "not run" and c.typed is not None for c in rows)
    assert {c.spec for c in rows} == {fn.__name__ for fn, _, _ in claims.CLAIMS}
    assert "| `degrades` | accuracy with c - without c (OPD) |" in rules.markdown()
