"""Teachers as the outer cluster and ratios by the percentile bootstrap (#70 items 2 and 7),
on synthetic data whose answers are known in closed form."""

import json

import numpy as np
import pytest

from nca_interp.bootstrap import t_quantile
from nca_interp.paper.claims.stats import cluster_pooled, ratio_estimate


def two_teachers(a: float = 0.3, b: float = -0.1, seeds: int = 4, units: int = 20):
    """Per-item values of 2 teachers x `seeds` seeds x `units` units: teacher A's items all
    `a`, B's all `b`, plus a small seeded per-item noise that averages to 0 within a teacher."""
    rng = np.random.default_rng(0)
    vals, seed_unit, unit, teacher = [], [], [], []
    for t, level in (("A", a), ("B", b)):
        noise = rng.normal(0, 0.01, seeds * units)
        noise -= noise.mean()  # each teacher's mean exactly its level
        vals += list(level + noise)
        seed_unit += [f"{t}{s}|{u}" for s in range(seeds) for u in range(units)]
        unit += [f"{t}|{u}" for s in range(seeds) for u in range(units)]
        teacher += [t] * (seeds * units)
    return np.array(vals), [seed_unit, unit], teacher


def test_two_teachers_with_different_effects_widen_the_interval_to_the_t_on_one_df():
    """With 2 equal teachers whose means are a and b, the CR1 interval over teacher clusters
    is (a + b) / 2 +- t(0.975, 1) |a - b| / 2 exactly (the score of each teacher is n/2 (a-b)/2,
    and G / (G - 1) = 2); over seeds and units alone it is a few hundredths wide."""
    vals, clusterings, teacher = two_teachers()
    seeds_only = cluster_pooled(vals, clusterings, 8)
    nested = cluster_pooled(vals, clusterings, 8, teachers=teacher)
    half = t_quantile(0.975, 1) * 0.4 / 2
    assert nested.point == pytest.approx(0.1)
    assert nested.lo == pytest.approx(0.1 - half, abs=1e-6)
    assert nested.hi == pytest.approx(0.1 + half, abs=1e-6)
    assert seeds_only.hi - seeds_only.lo < 0.5  # seeds alone: far narrower
    assert nested.hi - nested.lo > 10 * (seeds_only.hi - seeds_only.lo)
    # one teacher named (or none): the interval is the seeds' own, unchanged
    one = cluster_pooled(vals, clusterings, 8, teachers=["A"] * len(vals))
    assert (one.lo, one.hi) == (seeds_only.lo, seeds_only.hi)


def test_a_ratio_takes_the_percentile_bootstrap_not_a_normal_interval():
    """Two clusters, A (num 1, den 1: ratio 1) and B (num 1, den 3: ratio 1/3): a resample
    is AA (1), AB (1/2) or BB (1/3), each extreme with probability 1/4 > 2.5%, so the 95%
    percentile interval is exactly [1/3, 1] around the pooled 1/2, asymmetric, where a
    delta-method interval is symmetric."""
    e = ratio_estimate([1.0, 1.0], [1.0, 3.0], ["A", "B"])
    assert e.point == pytest.approx(0.5)
    assert (e.lo, e.hi) == (pytest.approx(1 / 3), pytest.approx(1.0))
    assert e.hi - e.point == pytest.approx(3 * (e.point - e.lo))  # 1/2 above, 1/6 below
    # a constant ratio in every cluster: the interval is that ratio
    flat = ratio_estimate([0.5, 1.0, 1.5], [1.0, 2.0, 3.0], ["a", "b", "c"])
    assert (flat.lo, flat.point, flat.hi) == (pytest.approx(0.5),) * 3


def test_a_ratio_whose_denominator_can_be_zero_is_not_measurable():
    assert ratio_estimate([1.0, 1.0], [0.0, 0.0], ["a", "b"]) is None  # exactly 0
    den = [1.0, -1.0] * 10  # sums to 0 and its interval straddles 0
    assert ratio_estimate([0.5] * 20, den, [str(i) for i in range(20)]) is None
    den = [1.0, -0.8] * 10  # sum 2, but a resample can reach 0
    assert ratio_estimate([0.5] * 20, den, [str(i) for i in range(20)]) is None


def _items(units, c, ctrl):
    return {"unit": units, "correct_c": c, "correct_control": ctrl}


def test_the_reads_c_share_of_the_teacher_has_its_bootstrap_interval_or_is_not_measurable(
        tmp_path):
    """The claims' share of the teacher's reads_c: a percentile interval over units where the
    reports keep per-item control outcomes; not measurable where the teacher's reads_c can be
    0; the point alone, said so, where no items are kept."""
    from nca_interp.paper import claims

    units = [f"u{i}" for i in range(40)]
    teacher = _items(units, [1] * 40, [0] * 40)  # reads_c 1 on every unit
    nca = _items(units, [1] * 20 + [0] * 20, [0] * 40)  # reads_c 1 on half the units

    def write(base_items, nca_items, base_reads=(1.0, 1.0, 1.0)):
        rep = {"results": {
            "t_base": {"control": {"reads_c": base_reads[0],
                                   "reads_c_ci95": list(base_reads[1:])},
                       **({"items": base_items} if base_items else {})},
            **{f"t_nca_s{i}": {"control": {"reads_c": 0.5, "reads_c_ci95": [0.34, 0.66]},
                               **({"items": nca_items} if nca_items else {})}
               for i in range(3)}}}
        (tmp_path / "context_control.json").write_text(json.dumps(rep))
        return claims.nca_reads_context(tmp_path).cell

    cell = write(teacher, nca)
    assert "NCA reads_c 0.500 beside the teacher's 1.000: 50% [" in cell
    lo, hi = (float(x.rstrip("%")) for x in
              cell.split("50% [")[1].split("]")[0].split(", "))
    assert 30 < lo < 40 and 60 < hi < 70  # the binomial spread of 20 of 40 units, +-15 points
    blind = _items(units, [1, 0] * 20, [0, 1] * 20)  # the teacher's reads_c sums to 0
    assert "the share is not measurable" in write(blind, nca, (0.0, -0.3, 0.3))
    assert "no interval: the control runs keep no per-item outcomes" in write(None, None)
    assert "not measurable" in write(None, None, (0.1, -0.05, 0.25))


def test_pooled_settings_of_two_teachers_take_the_teacher_as_the_outer_cluster(tmp_path):
    """Two pooled settings whose OPD seeds break by different amounts: with one teacher the
    wider interval is over (setting, unit) clusters and the claim says the teacher's variance
    is in no interval; with two teachers the interval over teacher clusters (the t on one
    degree of freedom) is far wider, and the claim names both."""
    from nca_interp.paper import claims

    units = [f"fact{i}" for i in range(8) for _ in range(6)]

    def items(lost: int):
        first = {u: units.index(u) for u in units}
        return {"unit": units, "correct_no_c": [True] * len(units),
                "correct_c": [not (int(u[4:]) < lost and first[u] == i)
                              for i, u in enumerate(units)]}

    def write(teachers):
        for kb, lost in ((0, 8), (1, 1)):
            reps = {f"{teachers[kb]}": {"harm": 0.0, "regime": "B", "items": items(0)}}
            for s in range(4):
                reps[f"kb{kb}_opd_s{s}"] = {"regime": "A", "items": items(lost)}
                reps[f"kb{kb}_nca_s{s}"] = {"regime": "C", "items": items(0)}
            (tmp_path / f"kb{kb}").mkdir(exist_ok=True)
            (tmp_path / f"kb{kb}" / "context_return.json").write_text(
                json.dumps({"results": reps}))
        breaks = claims.pooled_claims(("kb0", "kb1"), tmp_path)[0]
        wider = breaks.measured.split("wider [")[1].split("]")[0]
        return breaks, [float(x) for x in wider.split(", ")]

    one, (lo1, hi1) = write(("t_base", "t_base"))
    assert "one teacher (t_base): its variance between rebuilds is not in the interval" \
        in one.null
    two, (lo2, hi2) = write(("t_base", "u_base"))
    assert "2 teachers (t_base, u_base), the outer cluster" in two.null
    # teacher means -8/48 and -1/48: (a + b) / 2 +- t(0.975, 1) |a - b| / 2
    half = t_quantile(0.975, 1) * (7 / 48) / 2
    assert (lo2, hi2) == (pytest.approx(-9 / 96 - half, abs=2e-3),
                          pytest.approx(-9 / 96 + half, abs=2e-3))
    assert hi2 - lo2 > 5 * (hi1 - lo1)


class _Row(dict):
    """A context_return row as the claims read it: fields by key, `ci95`, `items_`."""

    def __init__(self, items=None, ci95=None, **fields):
        super().__init__(fields)
        self.items_, self.ci95 = items, ci95 or {}

    def __getattr__(self, key):
        return self[key]


def test_a_length_change_pairs_per_item_where_the_reports_keep_lengths():
    """Per-item lengths (evaluate keeps them now): every both-right item of the seed grows
    10 -> 12 tokens (+20%), of step 0 10 -> 11 (+10%), so the paired difference is +10% on
    every resample: its interval is [+10%, +10%] exactly, where step 0's and the seed's
    intervals in quadrature (the fallback without items) are wide. An item wrong with c,
    however long, is not in rel_len_both."""
    from nca_interp.paper.claims import harm

    units = [f"u{i}" for i in range(12)]

    def row(grow: int, rel: float, ci: list[float]) -> _Row:
        items = {"unit": units, "correct_no_c": [1] * 12, "correct_c": [1] * 11 + [0],
                 "length_no_c": [10] * 12, "length_c": [10 + grow] * 11 + [500]}
        return _Row(items, {"rel_len_both": ci}, rel_len_both=rel)

    base, opd = row(1, 0.10, [0.0, 0.2]), row(2, 0.20, [0.1, 0.3])
    (unit,) = harm._length_units(base, [opd])
    assert (unit.lo, unit.point, unit.hi) == (pytest.approx(0.1),) * 3
    # without per-item lengths: step 0's interval in quadrature, wide
    base.items_, opd.items_ = None, None
    (wide,) = harm._length_units(base, [opd])
    assert wide.point == pytest.approx(0.1) and wide.hi - wide.lo > 0.2
