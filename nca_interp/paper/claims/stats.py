"""The statistics the claims share: estimates from a report's intervals, pooling over seeds with
(seed, unit) and unit cluster bootstraps, paired harm gaps, the exact label permutation. The
tests that turn them into verdict words are nca_interp.paper.judge's and nca_interp.paper.rules'.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from nca_interp.bootstrap import widened
from nca_interp.errors import UsageError
from nca_interp.paper import dose, judge
from nca_interp.regimes import MEANS, mean_unit_interval

__all__ = ["average", "boot_mean", "bootstrap_seed", "cluster_pooled", "cluster_sums",
           "control_unit", "estimate_of", "gain_estimate", "interval", "label_permutation_p",
           "mean_interval", "n_teachers", "paired_harm_gap", "pool_units", "pooled_estimate",
           "pooled_gain", "pooled_harm_rate", "ratio_estimate", "resample",
           "teacher_clusterings"]

# The claims' cluster bootstrap: resamples and seed. Enough resamples that no published verdict
# changes with the seed (python -m nca_interp.paper.claims --stability 5 checks every setting: at
# 2000, two verdicts whose interval ends sit on a discrete jump changed).
BOOTSTRAP = {"n": 10000, "seed": 0}


# How far a percentile interval's ends may move between resamplings: six Monte-Carlo
# standard errors of the 2.5% quantile's probability at 10000 resamples (sqrt(.025 .975 /
# 10000) = 0.0016). A verdict that changes when the ends sit at 1.5% / 98.5% is on the edge.
EDGE = 0.01


def interval(boots: np.ndarray) -> tuple[float, float, tuple[float, float]]:
    """The 95% percentile interval of bootstrap statistics (NaNs ignored) and its outer ends
    (`EDGE` further out)."""
    q = np.nanpercentile(boots, [100 * (0.025 - EDGE), 2.5, 97.5, 100 * (0.975 + EDGE)])
    return float(q[1]), float(q[2]), (float(q[0]), float(q[3]))


def mean_interval(values, clusters: list) -> tuple[float, float, tuple[float, float]]:
    """The 95% interval of the mean of per-item `values` over `clusters`, and its outer ends
    (`interval`): the percentile cluster bootstrap, or under `rules.FEW_CLUSTERS` clusters the
    cluster-robust t interval (`bootstrap.cluster_t_interval`: the bootstrap under-covers
    there), whose ends carry no resampling error (outer ends = ends). A single cluster has no
    spread between clusters: the percentile bootstrap's zero-width interval is kept."""
    from nca_interp.bootstrap import cluster_t_interval, n_units
    from nca_interp.paper import rules

    labels = [str(c) for c in clusters]
    g = n_units(labels)
    if 2 <= g < rules.FEW_CLUSTERS:
        _, lo, hi = cluster_t_interval(np.asarray(values, float), labels)
        return lo, hi, (lo, hi)
    return interval(boot_mean(values, clusters))


def cluster_sums(arrays: list[np.ndarray], clusters: list) -> list[np.ndarray]:
    """Each array's sum over every resample of a cluster bootstrap of `clusters`, computed
    from per-cluster sums (the draws are `resample`'s, so a statistic of sums equals the one
    computed on its index sets, thousands of times faster on many items)."""
    labels, inverse = np.unique(np.asarray(clusters), return_inverse=True)
    k = len(labels)
    draws = np.random.default_rng(BOOTSTRAP["seed"]).integers(0, k, (BOOTSTRAP["n"], k))
    return [np.bincount(inverse, weights=np.asarray(a, float), minlength=k)[draws].sum(1)
            for a in arrays]


def boot_mean(values, clusters: list) -> np.ndarray:
    """The mean of `values` over every resample of a cluster bootstrap of `clusters`."""
    total, count = cluster_sums([values, np.ones(len(values))], clusters)
    return total / count


def resample(clusters: list) -> list[np.ndarray]:
    """Index sets of a cluster bootstrap of `clusters` (`BOOTSTRAP` resamples and seed)."""
    from nca_interp.bootstrap import cluster_indices

    return cluster_indices(clusters, BOOTSTRAP["n"], BOOTSTRAP["seed"])


@contextmanager
def bootstrap_seed(seed: int):
    """Run the claims under another bootstrap seed (the stability check)."""
    old = dict(BOOTSTRAP)
    BOOTSTRAP["seed"] = seed
    try:
        yield
    finally:
        BOOTSTRAP.update(old)


# The few-clusters rule for one report's means (`evaluate.MEANS`, `evaluate.mean_unit_interval`)
# and its regime (`evaluate.regime`) live in the library, so that evaluate's tables and these
# verdicts read one rule (the library imports nothing of the paper).


def estimate_of(r: dict, key: str, minus: float = 0.0) -> judge.Estimate:
    """One report's `key` and its 95% interval (less `minus`) as a judge estimate. A mean
    (`MEANS`) over fewer than `rules.FEW_CLUSTERS` units follows the few-clusters rule: the
    CR1 t interval of its per-item values where the report keeps them, else the report's
    percentile interval widened (`widened`); a ratio keeps the report's interval."""
    lo, hi = r.ci95[key]
    g = getattr(r, "n_units", None)
    if key in MEANS and lo is not None and g is not None and 2 <= g:
        lo, hi = mean_unit_interval(r, key, lo, hi, g)
    return judge.Estimate(r[key] - minus, min(lo, r[key]) - minus, max(hi, r[key]) - minus)


def control_unit(cell: dict, items: dict | None, g: int | None) -> judge.Estimate | None:
    """One seed's reads_c (its control cell `cell`: accuracy with c - with a wrong c of c's
    form) with its 95% interval by the few-clusters rule: from the per-item control outcomes
    where kept (`items`: unit, correct_c, correct_control; `mean_interval`, the CR1 t interval
    under `rules.FEW_CLUSTERS` units); else the report's interval, which reports without
    per-item control outcomes computed by the percentile cluster bootstrap, widened
    (`widened`) over its `g` units. None where the cell has no interval."""
    lo, hi = cell.get("reads_c_ci95") or [None, None]
    point = cell["reads_c"]
    if items is not None and "correct_control" in items:
        v = np.subtract(np.asarray(items["correct_c"], float),
                        np.asarray(items["correct_control"], float))
        lo, hi, _ = mean_interval(v, items["unit"])
        point = float(v.mean())
    elif lo is None:
        return None
    elif g is not None and g >= 2:
        lo, hi = widened(point, lo, hi, g)
    return judge.Estimate(point, min(lo, point), max(hi, point))



def pooled_estimate(runs: list[dict], per_item, units: list[judge.Estimate]
                    ) -> judge.Estimate | None:
    """The per-item quantity `per_item(items)` pooled over `runs` with a 95% bootstrap interval
    over (run, unit) clusters; where the reports keep no items, the t interval of the units'
    points, never narrower than one run's item noise (the runs share their items) (None for
    a single run: the run decides)."""

    if len(runs) == 1:
        return None
    if all(r.items_ is not None for r in runs):
        vals, seed_unit, unit = [], [], []
        for i, r in enumerate(runs):
            vals += list(per_item(r.items_))
            seed_unit += [f"{i}|{u}" for u in r.items_["unit"]]
            unit += [str(u) for u in r.items_["unit"]]
        # (seed, unit) clusters, and unit clusters (the seeds share their items): the wider
        return cluster_pooled(vals, [seed_unit, unit], len(runs))
    return pool_units(units, shared_items=True)


def cluster_pooled(values, clusterings: list[list], n: int,
                   teachers: list | None = None) -> judge.Estimate:
    """The mean of per-item `values` with the widest of the 95% intervals over each of
    `clusterings` (e.g. (seed, unit) and unit clusters: the seeds share their items;
    `mean_interval`: the cluster bootstrap, or the t interval under `rules.FEW_CLUSTERS`
    clusters), and its outer ends (`interval`); `n`: the seeds behind it. `teachers`: each
    item's teacher; where they name more than one, the teacher is the outer cluster (the
    step-0 rule: every item of a teacher, its seeds and units nested in it, drawn together;
    `teacher_clusterings`)."""
    v = np.asarray(values, float)
    m = float(v.mean())
    lo, hi, olo, ohi = m, m, m, m
    for clusters in teacher_clusterings(clusterings, teachers):
        b_lo, b_hi, (o_lo, o_hi) = mean_interval(v, clusters)
        lo, hi, olo, ohi = min(lo, b_lo), max(hi, b_hi), min(olo, o_lo), max(ohi, o_hi)
    return judge.Estimate(m, lo, hi, n, outer=(olo, ohi))


def ratio_estimate(num, den, clusters: list) -> judge.Estimate | None:
    """sum(num) / sum(den) of per-item values on the same items (a ratio of two means: NCA's
    reads_c over the teacher's, one harm over another) with the 95% percentile interval of the
    ratio over a cluster bootstrap of `clusters`, numerator and denominator drawn together:
    the resampled ratios' own quantiles, never a delta-method (normal) interval, which is
    symmetric where a ratio's distribution is not and fails as the denominator nears 0. None
    (not measurable) where the denominator can be zero: its sum is 0, or its own 95% interval
    reaches 0."""
    top, bottom = np.asarray(num, float), np.asarray(den, float)
    total = float(bottom.sum())
    t, b = cluster_sums([top, bottom], clusters)
    b_lo, b_hi, _ = interval(b)
    if total == 0 or b_lo <= 0 <= b_hi:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = np.where(b != 0, t / np.where(b != 0, b, 1), np.nan)
    lo, hi, outer = interval(ratios)
    point = float(top.sum()) / total
    return judge.Estimate(point, min(lo, point), max(hi, point), outer=outer)


def teacher_clusterings(clusterings: list[list], teachers: list | None) -> list[list]:
    """`clusterings` with the teacher as the outer cluster where `teachers` (one label per
    item) names more than one: seeds distilled from one teacher share its draw (the same
    command rebuilt a 12-layer teacher that read c at 0.462 where the lost one read 0.785,
    beside seed spreads of 0.446-0.461), so seeds alone understate the spread. One teacher
    (or none named): `clusterings` as they are, and the teacher's variance is in no interval
    (`n_teachers`, which callers say)."""
    if n_teachers(teachers) < 2:
        return list(clusterings)
    return [*clusterings, [str(t) for t in teachers]]


def n_teachers(teachers: list | None) -> int:
    """How many teachers `teachers` (one label per item; None: not recorded) names."""
    return len(set(teachers)) if teachers else 0


def pool_units(units: list[judge.Estimate], shared_items: bool = False
               ) -> judge.Estimate | None:
    """The units' mean with the t interval over them, never narrower than the units' own
    noise allows (units that agree by chance): independent units' noise averages out
    (1.96 sqrt(mean se^2 / n)); units measured on the same items (`shared_items`: seeds
    evaluated on one item set) share their item noise, which does not (1.96 sqrt(mean se^2)).
    None for fewer than two units."""
    if len(units) < 2:
        return None
    pts = [u.point for u in units]
    m = float(np.mean(pts))
    lo, hi = dose.t_interval(pts)
    n = 1 if shared_items else len(units)
    within = judge.Z95 * float(np.sqrt(np.mean([u.se ** 2 for u in units]) / n))
    half = max((hi - lo) / 2, within)
    return judge.Estimate(m, m - half, m + half, len(pts))


def average(estimates: list[judge.Estimate]) -> judge.Estimate:
    """Checkpoints nested in one seed as one unit: the mean point, and the mean of the ends of
    their intervals (averaging without narrowing: checkpoints of one run are not independent)."""
    return judge.Estimate(float(np.mean([e.point for e in estimates])),
                          float(np.mean([e.lo for e in estimates])),
                          float(np.mean([e.hi for e in estimates])), 1)



def pooled_gain(base: dict, runs: list[dict], key: str = "correct_c"
                ) -> tuple[float, tuple[float, float]]:
    """Accuracy of `runs` minus the step-0 model's on the same items (`key`: correct_c or
    correct_no_c), pooled over the runs, with a 95% bootstrap interval (`gain_estimate`)."""
    e = gain_estimate(base, runs, key)
    return e.point, (e.lo, e.hi)


def gain_estimate(base: dict, runs: list[dict], key: str = "correct_c") -> judge.Estimate:
    """`pooled_gain` as an estimate: the wider of the (run, unit) and unit cluster bootstraps
    (the runs share their items, and step 0's answers repeat in every run), with the outer
    ends of its interval (`interval`)."""
    diff, by_run, by_unit = [], [], []
    for i, r in enumerate(runs):
        if r.items_["unit"] != base.items_["unit"]:
            raise UsageError("a student and step 0 were not evaluated on the same items; "
                             "re-run the evaluation")
        diff += list(np.asarray(r.items_[key], float) - np.asarray(base.items_[key], float))
        by_run += [f"{i}|{u}" for u in r.items_["unit"]]
        by_unit += [str(u) for u in r.items_["unit"]]
    return cluster_pooled(diff, [by_run, by_unit], len(runs))



def paired_harm_gap(pairs: list[tuple[str, dict, dict]], where: str = "",
                    ) -> tuple[float, tuple[float, float], int]:
    """OPD's harm minus NCA's over (seed, OPD report, NCA report) pairs evaluated on the same
    held-out items, with a 95% bootstrap interval over (seed, unit) clusters: a resample draws
    the clusters with replacement and takes every item of each for both methods, so a seed's
    facts (or levels) move together and OPD and NCA stay paired. Harm pooled = items lost with
    c among those won without c, over all pairs. One pair gives that seed pair's own interval."""

    cols: dict[str, list] = {"o0": [], "o1": [], "n0": [], "n1": [], "cluster": []}
    for seed, o, n in pairs:
        if n.items_["unit"] != o.items_["unit"]:
            raise UsageError(f"{where}OPD and NCA of seed {seed} were not evaluated on the "
                             "same items; re-run the evaluation")
        cols["o0"] += o.items_["correct_no_c"]
        cols["o1"] += o.items_["correct_c"]
        cols["n0"] += n.items_["correct_no_c"]
        cols["n1"] += n.items_["correct_c"]
        cols["cluster"] += [f"{seed}|{u}" for u in n.items_["unit"]]
    a = {k: np.asarray(v, bool) for k, v in cols.items() if k != "cluster"}

    def gap(i) -> float:
        return pooled_harm_rate(a["o0"][i], a["o1"][i]) - pooled_harm_rate(a["n0"][i], a["n1"][i])

    o_lost, o_won, n_lost, n_won = cluster_sums(
        [a["o0"] & ~a["o1"], a["o0"], a["n0"] & ~a["n1"], a["n0"]], cols["cluster"])
    with np.errstate(invalid="ignore", divide="ignore"):
        boots = o_lost / o_won - n_lost / n_won  # NaN where a resample wins nothing without c
    lo, hi, _ = interval(boots)
    return gap(np.arange(len(cols["cluster"]))), (lo, hi), len(pairs)



def pooled_harm_rate(w0: np.ndarray, w1: np.ndarray) -> float:
    """Items lost with c among those won without c, pooled."""
    return float((w0 & ~w1).sum() / w0.sum()) if w0.any() else float("nan")



def label_permutation_p(pairs: dict, method_of: dict[str, str | None]
                        ) -> tuple[float, float, int]:
    """Exact permutation test of the method label over the runs in `pairs` (global cosines of
    every pair of deltas; `method_of`: each run name's method, opd or nca): statistic = mean
    within-label cosine - mean cross-label cosine; the p-value is the share of the relabelings
    with as many OPD runs (the observed one included) whose statistic is at least the observed
    one. Also the smallest p these runs allow (a labeling and its swap are the same partition
    when the methods have equal seeds)."""
    from itertools import combinations

    runs = sorted({r for k in pairs for r in k.split("~")
                   if method_of.get(r) in ("opd", "nca")})
    cos = {frozenset(k.split("~")): v["global_cos"] for k, v in pairs.items()
           if v["global_cos"] is not None}

    def stat(group: set) -> float:
        within, cross = [], []
        for a, b in combinations(runs, 2):
            c = cos.get(frozenset((a, b)))
            if c is not None:
                (within if (a in group) == (b in group) else cross).append(c)
        return float(np.mean(within) - np.mean(cross)) if within and cross else float("nan")

    observed = stat({r for r in runs if method_of[r] == "opd"})
    n_opd = sum(1 for r in runs if method_of[r] == "opd")
    labelings = [set(g) for g in combinations(runs, n_opd)]
    stats = [stat(g) for g in labelings]
    top = max(stats)
    return (sum(s >= observed - 1e-12 for s in stats) / len(stats),
            sum(s >= top - 1e-12 for s in stats) / len(stats), len(stats))
