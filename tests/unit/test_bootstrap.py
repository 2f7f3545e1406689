"""The one bootstrap: cluster resampling keeps units whole, and the 95% interval covers the
truth about 95% of the time (an independent check by simulation, not a re-implementation)."""

import numpy as np

from nca_interp.bootstrap import cluster_indices, iid_indices, percentile_ci


def test_cluster_resamples_keep_each_unit_whole():
    units = ["a", "a", "a", "b", "c", "c"]
    for idx in cluster_indices(units, n_boot=200, seed=1):
        drawn = [units[i] for i in idx]
        for u in set(drawn):  # a unit appears a multiple of its size
            assert drawn.count(u) % units.count(u) == 0


def test_percentile_interval_covers_the_truth_about_95_percent():
    rng = np.random.default_rng(0)
    hits = 0
    for trial in range(200):
        x = rng.random(80) < 0.3
        boots = x[iid_indices(len(x), 500, seed=trial)].mean(1)
        lo, hi = percentile_ci(boots)
        hits += lo <= 0.3 <= hi
    assert 0.88 <= hits / 200 <= 0.99


def test_correlated_items_widen_the_cluster_interval():
    """Items of one unit that always agree are one observation: the cluster interval is as
    wide as the interval over units, wider than treating items as independent."""
    rng = np.random.default_rng(3)
    per_unit = rng.random(20) < 0.5
    x = np.repeat(per_unit, 10).astype(float)
    units = [str(i) for i in np.repeat(np.arange(20), 10)]
    cl = [x[i].mean() for i in cluster_indices(units, 1000, seed=0)]
    iid = x[iid_indices(len(x), 1000, seed=0)].mean(1)
    w_cl = np.subtract(*percentile_ci(cl)[::-1])
    w_iid = np.subtract(*percentile_ci(iid)[::-1])
    assert w_cl > 2 * w_iid
