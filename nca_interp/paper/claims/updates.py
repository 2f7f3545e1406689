"""Claims about the parameter updates (param_delta): shallow layers and k/q first, NCA's updates
differ from OPD's (and from a size-matched OPD's).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nca_interp import analysis
from nca_interp.fsio import read_json
from nca_interp.identity import RunId, by_name
from nca_interp.paper import judge, rules
from nca_interp.paper.claims.claim import Claim, count_verdict, runs_of, spread_text
from nca_interp.paper.claims.stats import (
    label_permutation_p,
)
from nca_interp.paper.layout import PARAM_DELTA

__all__ = ["shallow_qk", "size_matched", "updates_differ"]


def _adam(figs: Path) -> dict:
    return analysis.load(figs / PARAM_DELTA)



def shallow_qk(figs: Path) -> Claim:
    """Updates concentrate in shallow layers, mostly k_proj / q_proj (Adam-normalised size,
    which removes the learning-rate budget): for every checkpoint, the first third of the layers
    moves more than the last third, and k_proj and q_proj rank first among the projection
    and MLP matrices."""
    pd = _adam(figs)
    mats = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    flags, cells, ratios = [], [], []
    n = pd.n_layers
    third = max(1, n // rules.DEPTH_THIRDS)
    for path, r in pd.results.items():
        lay = r.per_layer_adam
        if lay.get("0") is None:
            return Claim("Updates concentrate in shallow layers, mostly k/q", "-", "-",
                         "not measurable", "no learning-rate record")
        shallow = np.mean([lay[str(i)] for i in range(third)])
        deep = np.mean([lay[str(i)] for i in range(n - third, n)])
        mod = r.per_module_adam
        top2 = sorted(mats, key=lambda m: -(mod.get(m) or 0))[:2]
        flags.append(shallow > deep and set(top2) == {"q_proj", "k_proj"})
        ratios.append(float(shallow / deep))
        cells.append(f"{Path(path).name}: shallow/deep {shallow / deep:.2f}, top {'+'.join(top2)}")
    # the runs' spread of shallow / deep: the smallest departure of its mean from 1 (uniform)
    # a one-sample test over these runs detects (80% power)
    mde = float((judge.Z95 + judge.Z_POWER) * np.std(ratios, ddof=1) / np.sqrt(len(ratios))) \
        if len(ratios) > 1 else None
    mean_ratio = float(np.mean(ratios))
    verdict = count_verdict(flags, effect=mean_ratio - 1, margin=rules.DEPTH_MARGIN,
                            reach=False)  # runs carry no interval: short of it is shown short
    reason = (f"the mean shallow / deep ratio {mean_ratio:.2f} falls short of the smallest "
              f"effect of interest {1 + rules.DEPTH_MARGIN:g}" if any(flags) and
              1 < mean_ratio < 1 + rules.DEPTH_MARGIN else "")
    return Claim("Updates concentrate in shallow layers, mostly k/q", "; ".join(cells),
                 f"ratio 1 = uniform over depth, {1 + rules.DEPTH_MARGIN:g} the smallest "
                 "concentration of interest; 7 matrix types", verdict, reason,
                 coverage=(len(flags), len(flags)),
                 detectable="" if mde is None else f"{mde:.3f} (shallow/deep)")



def design_min_p(who: dict, pairs: dict) -> float:
    """The smallest p the exact label permutation can give with these runs, whatever their
    cosines: one labeling in C(n, n_opd), two when the methods have equal seeds (a labeling
    and its swap are one partition)."""
    from math import comb

    runs = {r for k in pairs for r in k.split("~") if r in who and who[r].method in
            ("opd", "nca")}
    n_opd = sum(who[r].method == "opd" for r in runs)
    n = len(runs)
    return (2 if 2 * n_opd == n else 1) / comb(n, n_opd) if n else 1.0


def _short_of_margin(apart: float, what: str) -> str:
    """The smallest-effect rule's reason for the updates: the cross mean lies less than
    `rules.UPDATE_MARGIN` below the seed-to-seed mean (or not below it)."""
    where = f"{apart:.3f} below" if apart >= 5e-4 else f"{-apart:.3f} above" \
        if apart <= -5e-4 else "at"
    return (f"the {what} mean lies {where} the seed-to-seed mean, short of the smallest effect "
            f"of interest {rules.UPDATE_MARGIN:g} of cosine: pairs of runs carry no interval, "
            "so short of it is shown short (the smallest-effect rule, checked first)")


def updates_differ(figs: Path) -> Claim:
    """NCA's updates differ from OPD's: over every pair of runs in param_delta.json, each
    cross-method cosine cos(dOPD, dNCA) is below each within-method (seed-to-seed) cosine,
    a complete separation with the exact label permutation p at most `rules.ALPHA`; partly:
    the cross-method mean is below each method's own seed-to-seed mean; inconclusive where
    that fails and the seeds allow no p at or under `rules.ALPHA` (the rule book's "updates
    differ")."""
    rep = _adam(figs)
    pairs, who = rep.all_pairs or {}, by_name(rep)
    cross, within, by_method = [], [], {"opd": [], "nca": []}
    for key, v in pairs.items():
        a, b = key.split("~")
        ia, ib = who.get(a, RunId(a)), who.get(b, RunId(b))  # unmeasured: no student
        if not (ia.of_method() and ib.of_method()) or v["global_cos"] is None:
            continue
        (within if ia.method == ib.method else cross).append(v["global_cos"])
        if ia.method == ib.method and ia.method in by_method:
            by_method[ia.method].append(v["global_cos"])
    if not cross or not within:
        return Claim("NCA's updates differ from OPD's", "-", "-", "not measurable",
                     "needs two seeds of each method")
    p, p_min, n_labelings = label_permutation_p(pairs, {n: i.method for n, i in who.items()})
    reason = ""
    apart = float(np.mean(within) - np.mean(cross))  # the smallest-effect rule's estimate
    if apart < rules.UPDATE_MARGIN:  # checked first: the pairs carry no interval to reach it
        verdict, reason = "not reproduced", _short_of_margin(apart, "cross-method")
    elif max(cross) < min(within) and p <= rules.ALPHA:
        verdict = "reproduced"
    elif all(np.mean(cross) < np.mean(w) for w in by_method.values() if w):
        # below each method's own seed-to-seed cosine: OPD's seeds agree more with each
        # other than with NCA's, and NCA's likewise
        verdict = "partly"
        if p > rules.ALPHA:
            reason = (f"the direction only: permutation p {p:.2f}, at best {p_min:.2f} with "
                      "these seeds")
    elif design_min_p(who, pairs) > rules.ALPHA:  # these seeds can never show it
        verdict, reason = "inconclusive", (f"the cross-method mean is not below each method's "
                                           f"own, and these seeds allow no p under "
                                           f"{rules.ALPHA:g} (smallest possible "
                                           f"{design_min_p(who, pairs):.2f})")
    else:
        verdict = "not reproduced"
        reason = "the cross-method mean is not below each method's own seed-to-seed mean"
    sizes = _update_sizes(figs)
    ratio = _size_ratio(figs)
    if ratio is not None and not 1 / rules.SIZE_MATCH <= ratio <= rules.SIZE_MATCH:
        if verdict in ("reproduced", "partly"):
            sized = (figs.parent / f"{figs.name}_size" / PARAM_DELTA).exists()
            verdict = "partly"
            reason = (f"NCA's update is {ratio:.2f}x OPD's in size: the direction difference "
                      "may come from the larger step; "
                      + ("the size-matched OPD row decides" if sized else
                         "needs an OPD run matched to NCA's size: python -m "
                         f"nca_interp.paper.size_control --setting {figs.name}"))
    elif ratio is not None:
        sizes += f" (sizes matched: NCA / OPD {ratio:.2f})"
    return Claim("NCA's updates differ from OPD's", f"cos(dOPD, dNCA) {spread_text(cross)}",
                 f"seed-to-seed (same method) {spread_text(within)}: OPD-OPD "
                 f"{np.mean(by_method['opd']):.3f}, NCA-NCA {np.mean(by_method['nca']):.3f}; "
                 "method-label permutation p = "
                 f"{p:.3f} (exact, {n_labelings} labelings; smallest possible "
                 f"{p_min:.3f}){sizes}", verdict, reason, p=p)




def _size_ratio(figs: Path) -> float | None:
    """Mean Adam-normalised update size of the NCA runs over that of the OPD runs."""
    rep = _adam(figs)
    size = {m: [v.global_adam for v in runs_of(rep, m) if v.global_adam is not None]
            for m in ("opd", "nca")}
    if not size["opd"] or not size["nca"]:
        return None
    return float(np.mean(size["nca"]) / np.mean(size["opd"]))



def _update_sizes(figs: Path) -> str:
    """'; Adam-normalised update size NCA / OPD ...' from param_delta's per-checkpoint totals
    (a direction difference can hide a magnitude difference), or '' where absent."""
    rep = _adam(figs)
    size = {m: [v.global_adam for v in runs_of(rep, m) if v.global_adam is not None]
            for m in ("opd", "nca")}
    if not size["opd"] or not size["nca"]:
        return ""
    return (f"; update size (Adam-normalised) OPD {spread_text(size['opd'])}, NCA "
            f"{spread_text(size['nca'])}")



def size_matched(figs: Path) -> Claim:
    """NCA's update differs from OPD's in direction, not only in size
    (`nca_interp.paper.size_control`: OPD retrained with its lr scaled to NCA's total movement).
    Over every pair of runs: reproduced when each cos(d sized OPD, d NCA) is below each seed-to-seed
    cosine of the two groups and the exact label-permutation p <= 0.05, with the sizes matched
    within rules.SIZE_MATCH; partly when the cross-group mean is below the within-group mean; the
    same seed's cos(d OPD, d sized OPD) says how far size alone turns an OPD update."""
    rep = analysis.load(figs / PARAM_DELTA)
    # results are keyed by path, all_pairs by run name
    who = by_name(rep)
    kind = {n: i.method for n, i in who.items() if i.student}
    size = {k: [v.global_sq ** 0.5 for v in runs_of(rep, k)] for k in ("opd", "opdsized", "nca")}
    cross, within, same_seed, sized = [], [], [], {}
    for key, v in rep.all_pairs.items():
        a, b = key.split("~")
        ka, kb = kind.get(a), kind.get(b)
        if v["global_cos"] is None or not (ka and kb):
            continue
        if {ka, kb} == {"opd", "opdsized"} and who[a].seed == who[b].seed:
            same_seed.append(v["global_cos"])
        if "opd" in (ka, kb):
            continue
        (within if ka == kb else cross).append(v["global_cos"])
        sized[key] = v
    claim = "NCA's updates differ from a size-matched OPD's"
    if not cross or not within:
        return Claim(claim, "-", "-", "not measurable", "needs two seeds of each",
                     spec="size_matched")
    # the permutation compares OPD with NCA: the size-matched OPD takes OPD's label
    p, p_min, n_labelings = label_permutation_p(
        sized, {n: "opd" if m == "opdsized" else m for n, m in kind.items()})
    ratio = float(np.mean(size["opdsized"]) / np.mean(size["nca"]))
    reason = ""
    apart = float(np.mean(within) - np.mean(cross))  # the smallest-effect rule's estimate
    if apart < rules.UPDATE_MARGIN:  # checked first, as updates_differ
        verdict, reason = "not reproduced", _short_of_margin(apart, "cross-group")
    elif max(cross) < min(within) and p <= rules.ALPHA:
        verdict = "reproduced"
    elif np.mean(cross) < np.mean(within):
        verdict = "partly"
        if p > rules.ALPHA:
            reason = f"permutation p {p:.2f}, at best {p_min:.2f} with these seeds"
    elif design_min_p({n: RunId(n, method="opd" if m == "opdsized" else m)
                       for n, m in kind.items()}, sized) > rules.ALPHA:
        verdict, reason = "inconclusive", ("the cross-group mean is not below the seed-to-seed "
                                           "mean, and these seeds allow no p under "
                                           f"{rules.ALPHA:g}")
    else:
        verdict = "not reproduced"
    if not 1 / rules.SIZE_MATCH <= ratio <= rules.SIZE_MATCH:
        verdict, reason = "not measurable", f"sizes not matched: sized OPD / NCA {ratio:.2f}"
    made = read_json((figs / "manifest.json")) \
        if (figs / "manifest.json").exists() else {}
    if made.get("rounds"):  # how the sizes were matched: lr multiplier of the last round
        last = made["rounds"][-1]
        claim += (f" (OPD at lr x{last['lr_multiplier']:.2f}, round {last['round']} of size "
                  "matching)")
    return Claim(claim, f"cos(d sized OPD, d NCA) {spread_text(cross)}",
            f"seed-to-seed (same group) {spread_text(within)}; permutation p = {p:.3f} (exact, "
            f"{n_labelings} labelings; smallest possible {p_min:.3f}); size alone: cos(d OPD, "
            f"d sized OPD) same seed {spread_text(same_seed)}; update norm OPD "
            f"{spread_text(size['opd'])}, sized OPD {spread_text(size['opdsized'])}, NCA "
            f"{spread_text(size['nca'])} (sized OPD / NCA {ratio:.2f})", verdict, reason,
            spec="size_matched", p=p)
