"""The multiplicity rule of the rule book (nca_interp/paper/rules.py, #70 item 4) on synthetic
claims with known answers: Holm's step-down correction over a setting's tested claims, each
claim's p found by inverting the interval its raw rule tests. A claim clear at p 0.04 among
twelve does not stay clear; a very strong effect does; claims outside the family are untouched.
Each test fails when the correction is removed (`rules.after_holm` returning the raw word, or
`rules.holm` rejecting every p at 0.05)."""

import math

import pytest

from nca_interp.paper import claims, judge, rules
from nca_interp.paper.claims.claim import Claim


def _claim(name: str, verdict: str, p: float | None) -> Claim:
    return Claim(name, "-", "-", verdict, p=p)


def _family(ps_words: list[tuple[float | None, str]]) -> list[Claim]:
    return claims.corrected([_claim(f"c{i}", w, p) for i, (p, w) in enumerate(ps_words)])


def _estimate_with_p(point: float, p: float) -> judge.Estimate:
    """A symmetric 95% interval around `point` whose two-sided p against 0 is `p`."""
    z = math.sqrt(2) * _erfcinv(p)
    se = point / z
    return judge.Estimate(point, point - judge.Z95 * se, point + judge.Z95 * se)


def _erfcinv(y: float) -> float:
    lo, hi = 0.0, 10.0
    for _ in range(200):  # erfc falls monotonically: bisect
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if math.erfc(mid) > y else (lo, mid)
    return (lo + hi) / 2


def test_inverting_an_interval_that_touches_the_null_gives_alpha():
    assert rules.interval_p(0.05, 0.0, 0.1) == pytest.approx(0.05)
    assert rules.interval_p(-0.05, -0.1, 0.0, direction=-1) == pytest.approx(0.05)
    assert rules.interval_p(0.05, 0.01, 0.09) < 0.05 < rules.interval_p(0.05, -0.01, 0.11)
    # zero width: clear or not, nothing in between
    assert rules.interval_p(0.0, 0.0, 0.0) == 1.0 and rules.interval_p(0.1, 0.1, 0.1) == 0.0


def test_one_claim_clear_at_0_04_among_twelve_does_not_stay_clear():
    unit = _estimate_with_p(0.05, 0.04)
    j = judge.effect([unit], None, 0.0, 1, rules.BREAK_MARGIN)
    assert j.verdict == "reproduced" and j.p == pytest.approx(0.04, abs=1e-6)
    found = _family([(j.p, j.verdict)] + [(0.5, "inconclusive")] * 11)
    assert found[0].holm == "inconclusive"
    assert "against 0.0042" in found[0].holm_note  # 0.05 / 12: the smallest p is ranked first
    assert claims.family_size(found) == 12
    assert claims.holm_cell(found[0]).startswith("**inconclusive** (changed)")


def test_a_very_strong_effect_stays_clear_where_a_weak_one_does_not():
    strong = judge.effect([_estimate_with_p(0.3, 1e-6)], None, 0.0, 1, rules.BREAK_MARGIN)
    weak = judge.effect([_estimate_with_p(0.05, 0.03)], None, 0.0, 1, rules.BREAK_MARGIN)
    found = _family([(strong.p, strong.verdict), (weak.p, weak.verdict)]
                    + [(0.6, "not reproduced")] * 10)
    assert [c.holm for c in found[:2]] == ["reproduced", "inconclusive"]


def test_holm_steps_down_where_bonferroni_would_not():
    # p 0.01, 0.02, 0.04 among three: each clears alpha / (m - k) in turn (0.0167, 0.025, 0.05)
    found = _family([(0.04, "partly"), (0.01, "reproduced"), (0.02, "reproduced")])
    assert [c.holm for c in found] == ["partly", "reproduced", "reproduced"]
    # the step-down stops at the first failure: 0.03 fails 0.025, so 0.04 is not rejected
    # either, although it would clear its own 0.05
    found = _family([(0.01, "reproduced"), (0.03, "reproduced"), (0.04, "partly")])
    assert [c.holm for c in found] == ["reproduced", "inconclusive", "inconclusive"]


def test_only_tested_claims_are_the_family_and_absences_are_unchanged():
    found = _family([(0.04, "reproduced"), (None, "reproduced"), (0.001, "not measurable"),
                     (None, "not run"), (0.9, "not reproduced"), (0.3, "inconclusive")])
    # the family: the first, the absence and the inconclusive (3); 0.04, the smallest, meets
    # 0.05 / 3 and fails it
    assert claims.family_size(found) == 3
    assert [c.holm for c in found] == ["inconclusive", "reproduced", "not measurable",
                                       "not run", "not reproduced", "inconclusive"]
    assert found[1].holm_note == "not tested"


def test_a_weaker_p_never_keeps_a_stronger_word():
    """The updates' 'direction only' partly (its permutation p never passed on its own) was
    kept at p 0.1 while a partly at p 0.04 was demoted (the independent re-judgement of
    session 45): now both read inconclusive unless Holm rejects their null."""
    assert rules.after_holm("partly", 0.1, False) == "inconclusive"
    assert rules.after_holm("partly", 0.04, False) == "inconclusive"
    assert rules.after_holm("partly", 0.04, True) == "partly"
    for word in rules.VERDICTS:  # monotone in p: the demotion never depends on p alone
        ps = sorted([0.001, 0.03, 0.2, 0.7])
        kept = [rules.after_holm(word, p, False) == word for p in ps]
        assert kept == sorted(kept, reverse=True)


def test_a_counted_claim_needs_every_unit_at_its_threshold():
    # reproduced: each unit clear (intersection-union: the largest p); partly: one (the smallest)
    assert rules.counted_p([0.001, 0.03, 0.01], every=True) == 0.03
    assert rules.counted_p([0.001, 0.3, 0.6], every=False) == 0.001
    found = _family([(rules.counted_p([0.001, 0.03, 0.01], True), "reproduced")]
                    + [(0.5, "inconclusive")] * 3)
    assert found[0].holm == "inconclusive"  # 0.03 > 0.05 / 4


def test_the_equivalence_and_band_p_agree_with_their_raw_tests():
    inside = judge.Estimate(0.0, -0.015, 0.015)  # 90% interval well above -0.02
    edge = judge.Estimate(0.0, -0.0238, 0.0238)  # 90% lower end just at -0.02
    assert judge.equivalent([inside], None, 0.0, 0.02, sides="lower").p < 0.05
    assert judge.equivalent([edge], None, 0.0, 0.02, sides="lower").p == \
        pytest.approx(0.05, abs=0.002)
    band = judge.within_band([judge.Estimate(90, 80, 100)], None, 75, 105)
    assert band.verdict == "reproduced" and band.p < 0.05
    straddle = judge.within_band([judge.Estimate(90, 70, 110)], None, 75, 105)
    assert straddle.p > 0.05
