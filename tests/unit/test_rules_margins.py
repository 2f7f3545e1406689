"""The smallest-effect, constant, coverage and few-cluster rules of the rule book
(nca_interp/paper/rules.py, #70) on synthetic data with known answers: for each rule a clear
effect below its margin, a clear effect above it, one lucky unit among five nulls, and a
constant. Each case fails when its rule is weakened (a margin dropped, "partly" given to one
clear unit, the coverage counted over the units analysed, 1.96 in place of t)."""

import json

import numpy as np
import pytest

from nca_interp.paper import claims, judge, rules

NULLS = [judge.Estimate(0.0, -0.03, 0.03) for _ in range(5)]
LUCKY = judge.Estimate(0.06, 0.035, 0.085)  # clear of 0 on its own


# -- the effect rule (judge.effect: degrades, improves, reads c) --------------------------------

def test_effect_clear_of_zero_but_below_the_margin_is_never_shown():
    # wholly below the margin: too small to count, shown
    below = judge.effect([judge.Estimate(0.01, 0.005, 0.015)] * 3,
                         judge.Estimate(0.01, 0.005, 0.015, 3), 0.0, 1, 0.02)
    assert below.verdict == "not reproduced"
    # clear of 0, reaching the margin, its estimate short of it: not shown either way
    short = judge.effect([judge.Estimate(0.012, 0.004, 0.03)] * 3,
                         judge.Estimate(0.012, 0.004, 0.03, 3), 0.0, 1, 0.02)
    assert short.verdict == "inconclusive" and "short of the smallest effect" in short.reason


def test_effect_clear_above_the_margin_is_reproduced():
    units = [judge.Estimate(0.05, 0.03, 0.07)] * 3
    assert judge.effect(units, judge.Estimate(0.05, 0.035, 0.065, 3), 0.0, 1,
                        0.02).verdict == "reproduced"
    # the break's direction (below 0) by the same margin
    down = [judge.Estimate(-0.05, -0.07, -0.03)] * 3
    assert judge.effect(down, judge.Estimate(-0.05, -0.065, -0.035, 3), 0.0, -1,
                        0.02).verdict == "reproduced"


def test_effect_one_lucky_unit_among_five_nulls_is_not_partly():
    units = [*NULLS, LUCKY]
    # the pooled mean 0.01: even an interval clear of 0 cannot make it partly
    for pooled in (judge.Estimate(0.01, -0.01, 0.03, 6), judge.Estimate(0.01, 0.001, 0.02, 6)):
        assert judge.effect(units, pooled, 0.0, 1, 0.02).verdict not in ("partly",
                                                                        "reproduced")


def test_effect_pooled_clear_with_no_unit_clear_is_not_partly():
    units = [judge.Estimate(0.04, -0.01, 0.09)] * 3
    j = judge.effect(units, judge.Estimate(0.04, 0.01, 0.07, 3), 0.0, 1, 0.02)
    assert j.verdict == "inconclusive"


def test_effect_a_zero_width_difference_is_a_measured_absence():
    """Two methods right on exactly the same items: NCA - OPD is 0 on every item, a
    measurement (the absence shown), not the constant rule's untestable quantity."""
    zero = judge.Estimate(0.0, 0.0, 0.0)
    assert judge.effect([zero] * 3, judge.Estimate(0.0, 0.0, 0.0, 3), 0.0, 1,
                        0.02).verdict == "not reproduced"


# -- the counted rule (rules.verdict: internalizes, longer, the gap, shallow k/q) ---------------

def test_counted_clear_units_below_the_margin_are_not_reproduced_or_inconclusive():
    assert rules.verdict([True] * 3, effect=0.01, margin=0.02, reach=False) == "not reproduced"
    assert rules.verdict([True] * 3, effect=0.01, margin=0.02, reach=True) == "inconclusive"


def test_counted_clear_units_above_the_margin_are_reproduced():
    assert rules.verdict([True] * 3, effect=0.05, margin=0.02) == "reproduced"
    assert rules.verdict([True, False, False], effect=0.05, margin=0.02) == "partly"


def test_counted_one_lucky_unit_among_five_nulls_is_not_partly():
    flags = [True] + [False] * 5
    # the mean of one 0.06 and five 0s is 0.01: short of a 0.02 margin
    assert rules.verdict(flags, effect=0.01, margin=0.02, reach=True) == "inconclusive"
    assert rules.verdict(flags, effect=0.01, margin=0.02, reach=False) == "not reproduced"


def test_counted_a_constant_is_not_measurable():
    assert rules.verdict([False] * 3, constant=True) == "not measurable"
    assert rules.verdict([False] * 3, against=[True] * 3, constant=True) == "not measurable"


def test_pooled_and_prevents_need_the_pooled_point_past_the_margin():
    assert rules.pooled(True, [True] * 3, effect=0.01, margin=0.02) == "inconclusive"
    assert rules.pooled(True, [True] * 3, effect=0.01, margin=0.02, reach=False) == \
        "not reproduced"
    assert rules.pooled(True, [True] * 3, effect=0.05, margin=0.02) == "reproduced"
    assert rules.pooled(True, [False] * 3) == "inconclusive"  # no unit clear: not partly
    m = rules.HARM_MARGIN
    assert rules.prevents("reproduced", [True] * 3, 3, 0.005, 0.01, 0.015) == "not reproduced"
    assert rules.prevents("reproduced", [True] * 3, 3, 0.005, 0.01, m + 0.01) == "inconclusive"
    assert rules.prevents("reproduced", [True] * 3, 3, 0.03, 0.05, 0.07) == "reproduced"
    # one lucky pair of six, the pooled gap short of the margin
    assert rules.prevents("reproduced", [True] + [False] * 5, 6, -0.01, 0.01,
                          0.03) == "inconclusive"


# -- the rules applied by the claims ----------------------------------------------------------

def _report(no_c, ci_no_c, rel=None, ci_rel=(None, None)):
    return {"correct_no_c": no_c, "correct_c": 0.9, "harm": 0.05, "regime": "C",
            "delta_c": 0.9 - no_c, "rel_len_both": rel, "len_c": 10, "len_no_c": 10,
            "ci95": {"correct_no_c": list(ci_no_c), "harm": [0.0, 0.1], "correct_c": [0.8, 1.0],
                     "delta_c": [0.0, 0.1], "rel_len_both": list(ci_rel)}}


def _write(tmp_path, runs):
    (tmp_path / "context_return.json").write_text(json.dumps({"results": runs}))
    return tmp_path


def test_internalizing_by_a_point_is_not_internalizing(tmp_path):
    """`sokoban` internalized "partly" on +1.0 point (#70): below RISE_MARGIN."""
    base = _report(0.50, (0.50, 0.50))
    tiny = {f"t_opd_s{s}": _report(0.51, (0.505, 0.515)) for s in range(3)}
    assert claims.internalizes(_write(tmp_path, {"t_base": base, **tiny})).verdict == \
        "not reproduced"
    big = {f"t_opd_s{s}": _report(0.60, (0.55, 0.65)) for s in range(3)}
    assert claims.internalizes(_write(tmp_path, {"t_base": base, **big})).verdict == \
        "reproduced"
    lucky = {"t_opd_s0": _report(0.56, (0.52, 0.60)),
             **{f"t_opd_s{s}": _report(0.50, (0.45, 0.55)) for s in range(1, 6)}}
    c = claims.internalizes(_write(tmp_path, {"t_base": base, **lucky}))
    assert c.verdict == "inconclusive" and "falls short" in c.reason


def test_longer_by_one_or_two_percent_is_not_longer(tmp_path):
    """`longer` was "partly" on +1.1% and +2.0% (#70): below LENGTH_MARGIN."""
    base = _report(0.5, (0.4, 0.6), 0.0, (-0.01, 0.01))

    def runs(*rels):
        return {"t_base": base, **{f"t_opd_s{i}": _report(0.5, (0.4, 0.6), r, (r - w, r + w))
                                   for i, (r, w) in enumerate(rels)}}

    assert claims.longer(_write(tmp_path, runs((0.011, 0.005), (0.02, 0.005),
                                               (0.015, 0.005)))).verdict == "not reproduced"
    assert claims.longer(_write(tmp_path, runs((0.2, 0.05), (0.3, 0.05),
                                               (0.25, 0.05)))).verdict == "reproduced"
    lucky = runs((0.06, 0.02), *[(0.0, 0.02)] * 5)
    assert claims.longer(_write(tmp_path, lucky)).verdict in ("inconclusive", "not reproduced")


def test_a_gap_within_the_papers_near_perfect_is_no_gap(tmp_path):
    """facts_rule's gap was "reproduced" on 0.003 of cosine (#70): within 1 - 0.997."""
    def gap(opd, nca):
        row = lambda c: {"cos": [1.0, 0.999, 0.999, c, c], "cos_std": [0, 1e-4, 1e-4, 1e-4, 1e-4],  # noqa: E731
                         "n_examples": 100}
        (tmp_path / "layer_sim.json").write_text(json.dumps({"results": {
            "t_base": row(0.99), "random_init": row(0.5),
            **{f"t_opd_s{s}": row(opd) for s in range(3)},
            **{f"t_nca_s{s}": row(nca) for s in range(3)}}}))
        return claims.opd_gap(tmp_path)

    assert gap(0.9975, 0.9995).verdict == "not reproduced"  # +0.002, clear of 0
    assert gap(0.95, 0.9995).verdict == "reproduced"


def test_coverage_counts_the_seeds_trained_not_the_seeds_analysed(tmp_path):
    """The 12-layer row's direction claim: 1 of 3 NCA seeds analysed is not measurable."""
    runs = {"t_base": _report(0.5, (0.4, 0.6)),
            **{f"t_nca_s{s}": _report(0.5, (0.4, 0.6)) for s in range(3)}}
    _write(tmp_path, runs)
    cells = {f"step_{i}": {"global": {"parts": {"pairs": {"opd~nca": {
        "angle_corrected_deg": 120.0, "angle_ci95_deg": [115.0, 125.0],
        "cos_corrected": float(np.cos(np.radians(120)))}}}}, "modules": {}} for i in range(2)}
    (tmp_path / "grad_align_nca.json").write_text(json.dumps({"results": cells}))
    c = claims.nca_new_direction(tmp_path)
    assert c.verdict == "not measurable" and c.coverage == (1, 3)


# -- few clusters ------------------------------------------------------------------------------

@pytest.mark.parametrize("g", [8, 12])
def test_a_pooled_mean_over_few_clusters_takes_the_t_interval(g):
    from nca_interp.bootstrap import cluster_t_interval
    from nca_interp.paper.claims.stats import cluster_pooled

    rng = np.random.default_rng(g)
    units = [f"u{i}" for i in range(g) for _ in range(6)]
    y = np.repeat(rng.normal(0, 1, g), 6) + rng.normal(0, 1, 6 * g)
    _, lo, hi = cluster_t_interval(y, units)
    e = cluster_pooled(y, [units], 1)
    assert (e.lo, e.hi) == pytest.approx((lo, hi))
