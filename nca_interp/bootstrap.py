"""Bootstrap resampling, one implementation for every interval in the package.

Two designs: `iid_indices` resamples items (cases, prompts) with replacement; `cluster_indices`
resamples the independent units items belong to (a level; a fact asked in many phrasings),
keeping each drawn unit's items together, so items that are not independent never narrow an
interval. `percentile_ci` turns bootstrap statistics into a 95% percentile interval. A fixed
seed gives the same draws, so reports are reproducible.

With few units the percentile cluster bootstrap under-covers (its spread is the plug-in one,
no small-sample correction: about 89% at 8 clusters in tests/unit/test_bootstrap.py's
simulation). `cluster_t_interval` is the interval for those: a cluster-robust standard error
(CR1) with Student's t on G - 1 degrees of freedom, which holds its nominal coverage at 8 and 12
clusters in the same simulation. The few-clusters rule (`FEW_CLUSTERS`, `mean_ci`,
`widened`) decides which a mean's interval is, here once for evaluate's reports and the rule
book's verdicts alike.
"""

from __future__ import annotations

import functools

import numpy as np

from nca_interp.errors import UsageError

__all__ = ["FEW_CLUSTERS", "Z95", "cluster_indices", "cluster_t_interval", "few_cluster_factor",
           "iid_indices", "mean_ci", "n_units", "percentile_ci", "t_quantile", "widened"]

# Under this many clusters an interval of a mean is the cluster-robust t interval
# (`cluster_t_interval`), not the percentile cluster bootstrap, which under-covers there (about
# 86-89% for a nominal 95% at 8 clusters in tests/unit/test_bootstrap.py's simulation); ~30 is
# where the two agree within a point. The rule book's few-clusters rule
# (nca_interp.paper.rules.FEW_CLUSTERS) is this constant.
FEW_CLUSTERS = 30
Z95 = 1.959963984540054  # the two-sided 95% normal quantile


def iid_indices(n: int, n_boot: int = 2000, seed: int = 0) -> np.ndarray:
    """(n_boot, n) item indices drawn with replacement."""
    return np.random.default_rng(seed).integers(0, n, (n_boot, n))


def cluster_indices(units: list[str], n_boot: int = 2000, seed: int = 0) -> list[np.ndarray]:
    """`n_boot` index arrays: each draws len(unique units) units with replacement and takes
    every item of each drawn unit (sizes vary with the units drawn)."""
    labels, inverse = np.unique(np.asarray(units), return_inverse=True)
    members = [np.flatnonzero(inverse == u) for u in range(len(labels))]
    rng = np.random.default_rng(seed)
    return [np.concatenate([members[u] for u in rng.integers(0, len(labels), len(labels))])
            for _ in range(n_boot)]


def n_units(units: list[str]) -> int:
    return len(np.unique(np.asarray(units)))


def percentile_ci(boots, axis: int = 0, nan: bool = False) -> tuple:
    """The 95% percentile interval (2.5th, 97.5th) of bootstrap statistics along `axis`;
    `nan=True` ignores NaNs (cells undefined in some resamples)."""
    pct = np.nanpercentile if nan else np.percentile
    return pct(boots, 2.5, axis), pct(boots, 97.5, axis)


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """The `p` quantile of Student's t with `df` degrees of freedom (no scipy here): the CDF by
    Simpson's rule in theta = atan(t / sqrt(df)), where the density is c * cos(theta)^(df - 1),
    smooth and bounded, inverted by bisection; within 1e-5 of tabled values (tested)."""
    if not 0 < p < 1 or df < 1:
        raise UsageError(f"t_quantile needs 0 < p < 1 and df >= 1 (got {p}, {df})")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    from math import atan, lgamma, log, pi, sqrt

    c = np.exp(lgamma((df + 1) / 2) - lgamma(df / 2) - 0.5 * log(pi))

    def cdf(t: float) -> float:
        theta = np.linspace(0.0, atan(t / sqrt(df)), 4001)
        f = c * np.cos(theta) ** (df - 1)
        h = theta[-1] / 4000
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def cluster_t_interval(values, units: list[str], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the mean of item `values` (a paired difference per item, say) with a
    `level` interval whose standard error is cluster-robust over `units` (CR1: the items of a
    unit may be correlated, units independent) and whose critical value is Student's t on
    G - 1 degrees of freedom (G units). For few units, where the percentile cluster bootstrap
    under-covers. Fewer than 2 units: no interval (NaN bounds)."""
    y = np.asarray(values, dtype=float)
    labels, inverse = np.unique(np.asarray(units), return_inverse=True)
    g, n = len(labels), len(y)
    mean = float(y.mean())
    if g < 2:
        return mean, float("nan"), float("nan")
    scores = np.bincount(inverse, weights=y - mean, minlength=g)  # each unit's summed residual
    se = float(np.sqrt(g / (g - 1) * (scores ** 2).sum()) / n)
    q = t_quantile(0.5 + level / 2, g - 1)
    return mean, mean - q * se, mean + q * se


def mean_ci(values, units: list[str], boot: list) -> list:
    """The few-clusters rule's 95% interval of the mean of item `values` over `units`: `boot`
    (the percentile cluster bootstrap's) from `FEW_CLUSTERS` units up or under 2, else the
    cluster-robust t interval (`cluster_t_interval`)."""
    g = n_units(units)
    if not 2 <= g < FEW_CLUSTERS:
        return list(boot)
    _, lo, hi = cluster_t_interval(values, units)
    return [float(lo), float(hi)]


def few_cluster_factor(g: int) -> float:
    """How much wider the CR1 t interval of a mean over `g` clusters is than the percentile
    cluster bootstrap's (the few-clusters rule's widening of a report's bootstrap interval
    where no per-item outcomes are kept): the bootstrap's spread is the CR0 standard error
    (no G / (G - 1) correction) with normal quantiles, so the factor is
    t(0.975, g - 1) sqrt(g / (g - 1)) / z(0.975): 1.29 at 8 clusters, 1.17 at 12, 1 at
    `FEW_CLUSTERS` or more (the bootstrap is kept there)."""
    if g >= FEW_CLUSTERS:
        return 1.0
    if g < 2:
        raise UsageError(f"a mean over {g} cluster has no interval to widen")
    return t_quantile(0.975, g - 1) * (g / (g - 1)) ** 0.5 / Z95


def widened(point: float, lo: float, hi: float, g: int) -> tuple[float, float]:
    """A percentile cluster-bootstrap interval [`lo`, `hi`] of a mean over `g` clusters, each
    half (from `point`) scaled by `few_cluster_factor`: the few-clusters rule where the
    per-item outcomes that would give the CR1 t interval are not kept."""
    f = few_cluster_factor(g)
    return point - f * (point - min(lo, point)), point + f * (max(hi, point) - point)
