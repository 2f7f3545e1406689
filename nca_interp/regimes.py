"""The regime of a context return (A: c hurts, B: c still needed, C: neither), by the
few-clusters rule: one function for every reader, so that evaluate's reports and tables, the
figures, the pages and the rule book's verdicts (nca_interp.paper.claims) cannot disagree.

    regime(report.results["sokoban_opd_s0"])   # "A"

A regime reads the 95% interval of accuracy with c - without. Under
`bootstrap.FEW_CLUSTERS` units that interval is the cluster-robust t interval of the per-item
outcomes (the percentile cluster bootstrap under-covers there), or, where a report keeps no
per-item outcomes, the report's percentile interval widened (`bootstrap.widened`); from
`FEW_CLUSTERS` units up it is the report's own.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from nca_interp.bootstrap import FEW_CLUSTERS, cluster_t_interval, widened

__all__ = ["MEANS", "mean_unit_interval", "regime", "regime_of"]


def regime_of(ci_delta: list[float], n_correct_no_c: int) -> str:
    """A (context hurts): the 95% interval of correct_c - correct_no_c lies below 0, which needs
    items correct without c (where harm is measured); B (context still needed): above 0; C
    otherwise. The interval is the few-clusters rule's (`regime` reads it from a report)."""
    lo, hi = ci_delta
    if hi < 0 and n_correct_no_c > 0:
        return "A"
    return "B" if lo > 0 else "C"


# A report's means over items (an accuracy, or accuracy with c - without) and the per-item
# outcomes each is the mean of: under the few-clusters rule their intervals are the CR1 t
# interval, whatever the report's own. Ratios (harm, help, the relative length change) keep
# the report's percentile bootstrap.
MEANS = {"correct_no_c": ("correct_no_c", None), "correct_c": ("correct_c", None),
         "delta_c": ("correct_c", "correct_no_c")}


def _field(r, name: str, key: str | None = None):
    """A report entry's field, typed (an attribute) or a plain dict (its JSON key)."""
    try:
        value = getattr(r, name, None)
    except KeyError:  # a mapping whose attributes read its keys
        value = None
    if value is None and isinstance(r, Mapping):
        value = r.get(key or name)
    return value


def mean_unit_interval(r, key: str, lo: float, hi: float, g: int) -> tuple[float, float]:
    """The few-clusters rule's 95% interval of one report entry's mean `key` (`MEANS`), given
    the entry's own [`lo`, `hi`] over `g` units: that interval from `FEW_CLUSTERS` units up;
    under it the CR1 t interval of the per-item outcomes where the entry keeps them, else its
    interval widened (`bootstrap.widened`)."""
    if g >= FEW_CLUSTERS:
        return lo, hi
    plus, less = MEANS[key]
    it = _field(r, "items_", "items")
    if it is not None and plus in it and (less is None or less in it):
        v = np.asarray(it[plus], float) - (np.asarray(it[less], float) if less else 0.0)
        _, m_lo, m_hi = cluster_t_interval(v, [str(u) for u in it["unit"]])
        return m_lo, m_hi
    return widened(r[key], lo, hi, g)


def regime(r) -> str | None:
    """A report entry's regime by the few-clusters rule: `regime_of` the interval of accuracy
    with c - without that `mean_unit_interval` gives (the report's percentile interval from
    `FEW_CLUSTERS` units up; under it the CR1 t interval of the per-item outcomes, or the
    report's interval widened where it keeps none), the point inside it. The one regime: what
    evaluate writes, its table and the pages print, and every verdict reads; a report that
    records no interval keeps its own."""
    ci = _field(r, "ci95") or {}
    point, delta = _field(r, "delta_c"), ci.get("delta_c")
    if point is None or not delta or delta[0] is None:
        return _field(r, "regime")
    lo, hi = delta
    g = _field(r, "n_units")
    if g is not None and g >= 2:
        lo, hi = mean_unit_interval(r, "delta_c", lo, hi, g)
    right = _field(r, "n_correct_no_c")
    right = (_field(r, "correct_no_c") or 0) > 0 if right is None else right > 0
    return regime_of([min(lo, point), max(hi, point)], int(right))
