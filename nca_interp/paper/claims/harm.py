"""Claims about accuracy when c returns: OPD internalizes c, breaks when c returns (harm), NCA
prevents the harm, keeps what c gives, still reads c, improves accuracy without c; answers grow
longer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nca_interp import analysis
from nca_interp.errors import UsageError
from nca_interp.identity import others, partner, roster, students
from nca_interp.paper import dose, judge, rules
from nca_interp.paper.claims.claim import (
    Claim,
    base_of,
    count_verdict,
    not_run,
    runs_of,
    seeds_text,
    spread_text,
)
from nca_interp.paper.claims.stats import (
    cluster_pooled,
    cluster_sums,
    control_unit,
    estimate_of,
    gain_estimate,
    interval,
    mean_interval,
    paired_harm_gap,
    pool_units,
    pooled_estimate,
    ratio_estimate,
    teacher_clusterings,
)
from nca_interp.paper.layout import CONTEXT_CONTROL, CONTEXT_RETURN, HARM_DRIFT
from nca_interp.paper.settings import load
from nca_interp.regimes import regime
from nca_interp.reports import read_derived

__all__ = ["degrades", "gain_over_step0", "harm_not_drift", "internalizes", "longer",
           "nca_improves_no_c", "nca_keeps_context", "nca_prevents", "nca_reads_context",
           "paired_length_unit", "pooled_claims", "pooled_harm_gap", "pooled_settings",
           "reads_c_pooled", "reads_c_verdict", "reads_ratio"]


# The one reading of accuracies at 0 everywhere (rules.RULES, "the floor"): a measurement, judged
# as any other (a zero-width interval on the null is against), said in the reason.
FLOOR = "a floor: no student is right on any item without c"


# Every setting here distils from one teacher (step 0), measured once: its variance between
# rebuilds of the same command (#70: one 12-layer teacher read 0.462 with c, a lost one 0.785)
# is in no interval. Said beside every claim that compares a seed with step 0.
ONE_TEACHER = "one teacher: its variance between rebuilds is not in the interval"


def step0_units(base, runs: list, key: str = "correct_no_c") -> tuple[list[judge.Estimate], bool]:
    """Each run's `key` minus step 0's as one unit (the step-0 rule: step 0 is measured, not
    exact): paired on the same items where every report keeps them (`stats.gain_estimate`:
    the items' cluster interval, or the t interval under rules.FEW_CLUSTERS clusters), else
    the run's interval less step 0's point widened by step 0's own interval in quadrature
    (older reports; the same items' positive correlation makes this conservative). Returns
    the units and whether they are paired."""
    if base.items_ is not None and all(r.items_ is not None for r in runs):
        return [gain_estimate(base, [r], key) for r in runs], True
    b = estimate_of(base, key)  # the few-clusters rule: widened where the units are few
    b_half = (b.hi - b.lo) / 2
    out = []
    for r in runs:
        d = r[key] - base[key]
        e = estimate_of(r, key)
        below, above = e.point - e.lo, e.hi - e.point
        out.append(judge.Estimate(d, d - (below ** 2 + b_half ** 2) ** 0.5,
                                  d + (above ** 2 + b_half ** 2) ** 0.5))
    return out, False


def internalizes(figs: Path) -> Claim:
    """OPD raises accuracy without c above step 0's, step 0 measured on the same items (the
    step-0 rule, `step0_units`): every seed's interval of OPD - step 0 lies above 0, and the
    seeds' mean by more than `rules.RISE_MARGIN` (the smallest-effect rule)."""
    rep = analysis.load(figs / CONTEXT_RETURN)
    base, opd = base_of(rep), runs_of(rep, "opd")
    units, paired = step0_units(base, opd)
    flags = [u.lo > 0 for u in units]
    against = [u.hi <= 0 for u in units]  # reaches no rise
    rise = float(np.mean([u.point for u in units])) if opd else None
    reach = any(u.hi >= rules.RISE_MARGIN for u in units)
    verdict = count_verdict(flags, against=against, effect=rise, margin=rules.RISE_MARGIN,
                            reach=reach)
    halves = [(u.hi - u.lo) / 2 for u in units]
    floor = bool(opd) and base.correct_no_c == 0 and all(
        r.correct_no_c == 0 and r.ci95["correct_no_c"][1] == 0 for r in opd)
    # zero-width intervals have no spread to compute a detectable effect from
    mde = None if floor else judge.mde_of_halfwidths(halves)
    reason = FLOOR + " (step 0 neither)" if floor else \
        _absent(rules.RISE_MARGIN) if verdict == "not reproduced" and rise is not None and \
        rise < rules.RISE_MARGIN and not reach else \
        _short(rise, rules.RISE_MARGIN) if any(flags) and rise is not None and \
        0 < rise < rules.RISE_MARGIN else \
        _straddle_reason(flags, against) if verdict == "inconclusive" else ""
    ps = [rules.interval_p(u.point, u.lo, u.hi) for u in units]
    return Claim("OPD internalizes c (right without c rises)",
                 spread_text([r.correct_no_c for r in opd]) + "; OPD - step 0 per seed "
                 + ", ".join(str(u) for u in units),
                 f"step 0: {base.correct_no_c:.3f}, measured on the same items ("
                 + ("paired per item" if paired else "its interval in quadrature: no per-item "
                    "results") + f"); {ONE_TEACHER}", verdict, reason,
                 coverage=(len(flags), len(opd)),
                 detectable="-" if floor else "" if mde is None else f"{mde:.3f}",
                 p=rules.counted_p(ps, all(flags)))


def _short(effect: float, margin: float, pct: bool = False) -> str:
    """The smallest-effect rule's reason: the seeds' mean falls short of the margin."""
    f = (lambda v: f"{100 * v:+.1f}%") if pct else (lambda v: f"{v:+.3f}")
    return (f"the seeds' mean {f(effect)} falls short of the smallest effect of interest "
            f"{f(margin)}")


def _absent(margin: float, pct: bool = False) -> str:
    """The smallest-effect rule's absence shown (checked before the straddling units): no
    seed's interval reaches the margin."""
    m = f"{100 * margin:+.1f}%" if pct else f"{margin:+.3f}"
    return (f"every seed's interval lies short of the smallest effect of interest {m}: too "
            "small to count, shown (the smallest-effect rule, checked first)")


def _straddle_reason(flags: list[bool], against: list[bool]) -> str:
    n = len(flags)
    return (f"no seed clear, {sum(against)} of {n} clear the other way, "
            f"{n - sum(flags) - sum(against)} straddling the null")



def degrades(figs: Path) -> Claim:
    """Context-induced degradation after OPD, as the paper states it: accuracy with c below
    accuracy without c, paired on the same items. The seed is the unit; the pooled estimate
    is the paired difference over the seeds' items, its interval the wider of (seed, unit)
    and unit clusters (`rules.BREAK_MARGIN` is the
    smallest drop the claim is about; `judge.effect`). The harm's independence baseline is
    printed beside it as a description (no verdict: `rules.RULES`, "beyond chance")."""
    rep = analysis.load(figs / CONTEXT_RETURN)
    base, opd = base_of(rep), runs_of(rep, "opd")
    name = "OPD students break when c returns (harm, regime A)"
    if not opd:
        return Claim(name, "no OPD student here", "-", "not measurable")
    opd = _with_items(figs, opd)
    units = [estimate_of(r, "delta_c") for r in opd]
    pooled = pooled_estimate(opd, lambda it: np.asarray(it["correct_c"], float) -
                     np.asarray(it["correct_no_c"], float), units)
    j = judge.effect(units, pooled, 0.0, -1, rules.BREAK_MARGIN)
    step0 = base.harm
    regimes = " ".join(regime(r) for r in opd)
    return Claim(name,
                 f"accuracy with c - without {spread_text([u.point for u in units])}"
                 + (f", pooled {pooled}" if pooled is not None and len(opd) > 1 else "")
                 + f"; harm {spread_text([r.harm for r in opd])}; regimes {regimes}",
                 f"0 (no change); step-0 harm "
                 f"{'-' if step0 is None else f'{step0:.3f}'}; independence baseline "
                 f"(1 - accuracy with c) "
                 f"{spread_text([rules.independence_harm(r.correct_c) for r in opd])}",
                 j.verdict, j.reason,
                 coverage=(len(units), len(opd)), detectable=f"{j.mde:.3f}", p=j.p)



def _with_items(figs: Path, runs: list, method: str = "opd") -> list:
    """`runs` (a context-return report's) or, where one of them keeps no per-item outcomes,
    the same runs of the control report (its no-c and with-c views are the same evaluation:
    taken only where every accuracy agrees and every run keeps its items)."""
    ctl = figs / CONTEXT_CONTROL
    if all(r.items_ is not None for r in runs) or not ctl.exists():
        return runs
    other = runs_of(analysis.load(ctl), method)
    same = [(r.correct_no_c, r.correct_c) for r in other] == \
        [(r.correct_no_c, r.correct_c) for r in runs]
    return other if same and all(r.items_ is not None for r in other) else runs


def _harm_is_own(r: dict, step0_harm: float | None) -> bool:
    """The rule book's harm rule on one report (nca_interp/paper/rules.py)."""
    lo = (r.ci95 or {}).get("harm", [r.harm])[0] if r.harm is not None else None
    return rules.harm_is_own(lo, step0_harm, r.correct_c, regime(r) == "A")



def nca_prevents(figs: Path) -> Claim:
    """NCA removes the harm: in every seed pair NCA's harm is below OPD's and NCA is never in
    regime A. Only judged where OPD degrades in some seed."""
    rep = analysis.load(figs / CONTEXT_RETURN)
    opd, nca = runs_of(rep, "opd"), runs_of(rep, "nca")
    measured = f"harm {spread_text([r.harm for r in nca])}; regimes " + \
        " ".join(regime(r) for r in nca)
    control = f"OPD harm {spread_text([r.harm for r in opd])}"
    breaks = degrades(figs)
    if breaks.verdict not in ("reproduced", "partly"):
        return Claim("NCA prevents the harm", measured, control,
                     rules.prevents(breaks.verdict, [], len(opd), None),
                     f"OPD's break is {breaks.verdict} here: nothing shown to prevent")
    base = base_of(rep).harm  # None: undefined at step 0 (the harm rule says what then)
    harmed = [_harm_is_own(o, base) for o in opd]
    flags = [(n.harm or 0) < (o.harm or 0) and regime(n) != "A"
             for o, n, h in zip(opd, nca, harmed) if h]
    lo, d, hi, mde = None, None, None, ""
    if (gap := pooled_harm_gap(figs)) is not None:
        d, (lo, hi), n_pairs = gap
        mde = f"{judge.detectable(judge.Estimate(d, min(lo, d), max(hi, d), n_pairs)):.3f}"
        control += (f"; OPD - NCA harm pooled over {n_pairs} seed pair"
                    f"{'s' * (n_pairs != 1)}: {d:+.3f} [{lo:+.3f}, {hi:+.3f}] (paired, "
                    "(seed, unit) clusters)")
    verdict = rules.prevents(breaks.verdict, flags, len(opd), lo, d, hi)
    reason = ""
    if d is not None and verdict in ("inconclusive", "not reproduced") and \
            count_verdict(flags, total=len(opd)) in ("reproduced", "partly"):
        reason = (f"the pooled OPD - NCA harm {d:+.3f} falls short of the smallest effect of "
                  f"interest {rules.HARM_MARGIN:g}")
    if verdict == "not measurable":
        reason = (f"OPD's harm is its own, by the harm rule, in {sum(harmed)} of {len(opd)} "
                  "seeds: nothing of OPD's to prevent")
    elif verdict == "partly" and count_verdict(flags, total=len(opd)) == "reproduced":
        reason = "the pooled paired interval reaches 0"
    return Claim("NCA prevents the harm", measured, control, verdict, reason,
                 coverage=(len(flags), len(opd)), detectable=mde,
                 p=None if d is None else rules.interval_p(d, min(lo, d), max(hi, d)))



def harm_not_drift(figs: Path) -> Claim:
    """OPD's harm is OPD's, not any drift's: at matched drift from step 0 (nca_interp.paper.dose),
    NCA's harm lies below OPD's; a seed is clear when its mean difference plus its conservative
    half-width lies below 0, the pooled interval is the t interval over seeds (rules: matched drift,
    every seed). Judged only where OPD's harm is its own in some seed; None where the setting
    trained no OPD beside NCA (a beta variant)."""
    m = read_derived(figs / HARM_DRIFT)["matched"].get("nca - opd")
    name = "OPD's harm is its own, not drift's (NCA's harm below OPD's at matched drift)"
    if m is None:
        return Claim(name, "-", "-", "not measurable", "no OPD run trained beside NCA here")
    rep = analysis.load(figs / CONTEXT_RETURN)
    opd, base = runs_of(rep, "opd"), base_of(rep).harm
    own = sum(_harm_is_own(o, base) for o in opd)
    h = m.get("harm")
    if not h or not h["n"]:
        return Claim(name, "no NCA checkpoint inside OPD's drift range", "-", "not measurable")
    below, _ = dose.clear_seeds(h)
    measured = (f"NCA - OPD harm {h['mean']:+.3f}" + (
        f" (seed range {h['min']:+.3f} to {h['max']:+.3f}, t interval [{h['t95'][0]:+.3f}, "
        f"{h['t95'][1]:+.3f}])" if h.get("t95") else "") + f", {h['pairs']} checkpoints")
    null = (f"0 (same seed, same prompts, only the loss differs): below 0 in {h['below_0']} of "
            f"{h['n']} seeds, clear of it in {below}; OPD's harm its own (harm rule) in {own} "
            f"of {len(opd)} seeds")
    if not own:
        return Claim(name, measured, null, "not measurable",
                     "OPD's final harm is its own in no seed: no harm of OPD's to attribute")
    if "half" not in h:
        return Claim(name, measured, null, "not measurable", "harm_drift.json has no per-seed "
                     "intervals: rerun the python -m nca_interp.paper.dose command in "
                     "harm_drift.md")
    flags = [v + h["half"][k] < 0 for k, v in h["per_seed"].items() if k in h["half"]]
    on_side = h["mean"] < 0
    margin = dict(effect=-h["mean"], margin=rules.HARM_MARGIN,
                  reach=any(v - h["half"][k] <= -rules.HARM_MARGIN
                            for k, v in h["per_seed"].items() if k in h["half"]))
    verdict = count_verdict(flags, on_side, total=len(h["seeds"]), **margin)
    if verdict in ("partly", "not reproduced"):
        verdict = rules.pooled(bool(h.get("t95")) and h["t95"][1] < 0, flags, on_side, **margin)
    reason = _absent(-rules.HARM_MARGIN) if verdict == "not reproduced" and \
        not margin["reach"] and -h["mean"] < rules.HARM_MARGIN else \
        _short(-h["mean"], rules.HARM_MARGIN) if 0 < -h["mean"] < rules.HARM_MARGIN \
        and verdict in ("inconclusive", "not reproduced") else ""
    ps = [rules.interval_p(v, v - h["half"][k], v + h["half"][k], 0.0, -1)
          for k, v in h["per_seed"].items() if k in h["half"]]
    p = rules.counted_p(ps, all(flags))
    if not all(flags) and verdict == "reproduced" and h.get("t95"):  # the pooled path decided
        p = rules.interval_p(h["mean"], min(h["t95"][0], h["mean"]),
                             max(h["t95"][1], h["mean"]), 0.0, -1)
    return Claim(name, measured, null, verdict, reason,
                 coverage=(len(flags), len(h["seeds"])), p=p)



def pooled_harm_gap(figs: Path) -> tuple[float, tuple[float, float], int] | None:
    """OPD's harm minus NCA's, pooled over the seeds and paired by seed on the same held-out
    items (`paired_harm_gap`). None without per-item results (evaluate records them) for OPD
    and NCA of one seed."""
    for src in (figs / CONTEXT_RETURN, figs / CONTEXT_CONTROL):
        if not src.exists():
            continue
        rep = analysis.load(src)
        who, pairs = roster(rep), []
        for name, r in students(rep, "nca"):
            found = partner(rep, name, "opd")
            o = found[1] if found else None
            if o is not None and r.items_ is not None and o.items_ is not None:
                pairs.append((f"s{who[name].seed}", o, r))
        if pairs:
            return paired_harm_gap(pairs, where=f"{src}: ")
    return None



# Settings judged together (nca_interp/paper/settings.toml [pooled]): one claim table over every
# member's seeds (same task and teacher, e.g. two fixed knowledge bases), pooled with the member as
# part of each cluster.
def pooled_settings() -> dict[str, tuple[str, ...]]:
    """Settings judged together (nca_interp/paper/settings.toml [pooled]), read when asked (nothing
    is parsed at import)."""
    return load().pooled



def _items(root: Path, members: tuple[str, ...]) -> dict[str, np.ndarray | list]:
    """Per-item results of every seed of every member, stacked: won without / with c for OPD,
    NCA and the member's teacher (step 0) on the same items, and the cluster of each item
    (member | seed | unit: a resample keeps a seed's unit together, OPD and NCA paired)."""
    cols: dict[str, list] = {k: [] for k in ("o0", "o1", "n0", "n1", "b0", "b1", "cluster",
                                             "seed", "teacher")}
    for member in members:
        report = analysis.load(root / member / CONTEXT_RETURN)
        base, who = base_of(report), roster(report)
        teacher = teacher_of(report)
        for name, r in students(report, "nca"):
            found = partner(report, name, "opd")
            o = found[1] if found else None
            if o is None:
                continue
            if not (r.items_["unit"] == o.items_["unit"] == base.items_["unit"]):
                raise UsageError(f"{member}: {name}, its OPD seed and the teacher were not "
                                 "evaluated on the same items; re-run the evaluation")
            for key, rep in (("o", o), ("n", r), ("b", base)):
                cols[key + "0"] += rep.items_["correct_no_c"]
                cols[key + "1"] += rep.items_["correct_c"]
            seed = f"s{who[name].seed}"
            cols["cluster"] += [f"{member}|{seed}|{u}" for u in r.items_["unit"]]
            cols["seed"] += [f"{member}|{seed}"] * len(r.items_["unit"])
            cols["teacher"] += [teacher] * len(r.items_["unit"])
    return {k: (np.asarray(v, bool) if k not in ("cluster", "seed", "teacher") else v)
            for k, v in cols.items()}


def teacher_of(report: dict) -> str:
    """The teacher (step 0) a report's students were distilled from, as the report records
    it: its first non-student entry's checkpoint path (else its name). Two members of a pooled
    setting with the same one share a teacher."""
    key = others(report)[0][0]
    run = (report.get("runs") or {}).get(key) or {}
    return str(run.get("path") or key)


def teacher_text(teachers: list) -> str:
    """What a pooled claim says of its teachers: several are the outer cluster; one's variance
    between rebuilds is in no interval (the step-0 rule)."""
    names = list(dict.fromkeys(teachers))
    if len(names) > 1:
        return (f"{len(names)} teachers ({', '.join(names)}), the outer cluster: a third "
                "interval over teacher clusters, the widest kept")
    return f"one teacher ({names[0]}): its variance between rebuilds is not in the interval" \
        if names else ONE_TEACHER



def pooled_claims(members: tuple[str, ...], root: Path = Path("figures")) -> list[Claim]:
    """The harm verdicts over every seed of several settings (e.g. two knowledge bases x 4
    seeds), each with two 95% bootstrap intervals: over (setting, seed, unit) clusters (seeds
    as independent replicates) and over (setting, unit) clusters (a fact drawn with all its
    seeds: the wider, when facts differ more than seeds do). A verdict needs both to clear:
    - OPD breaks (the rule of `degrades`, pooled): accuracy with c below without c, judged by
      `judge.effect` on the wider pooled interval with each seed's own interval as a unit;
      whether the harm clears the teachers' harm and the independence baseline (beyond
      chance) is said apart.
    - NCA prevents the harm: only judged where OPD breaks (reproduced or partly); reproduced
      when the paired OPD - NCA harm interval lies above 0 and no NCA seed is in A.
    - NCA still reads c: each seed's reads_c (accuracy with c minus with a wrong c of the same
      form, `evaluate --control`) with its own interval, as `nca_reads_context` judges it.
    - NCA improves accuracy without c: `judge.effect` on the paired NCA - OPD difference
      (the wider pooled interval, each seed pair's cluster-bootstrap interval a unit)."""

    a = _items(root, members)
    # every statistic below is a function of item sums, so each resample is a sum of
    # per-cluster sums over `resample`'s own draws (stats.cluster_sums; equal to the index sets)
    cols = {"one": np.ones(len(a["cluster"]))}
    for key in ("o", "n", "b"):
        cols[key + "0"], cols[key + "1"] = a[key + "0"], a[key + "1"]
        cols[key + "h"] = a[key + "0"] & ~a[key + "1"]  # lost with c, won without

    def sums(idx: np.ndarray | None, clusters: list | None) -> dict[str, np.ndarray]:
        """Column sums over the items `idx` (all: None): their total, or with `clusters`
        (one label per item of `idx`) over every bootstrap resample."""
        pick = {k: (v if idx is None else v[idx]) for k, v in cols.items()}
        if clusters is None:
            return {k: np.asarray(v, float).sum() for k, v in pick.items()}
        return dict(zip(pick, cluster_sums(list(pick.values()), clusters)))

    facts = [f"{c.split('|')[0]}|{c.split('|', 2)[2]}" for c in a["cluster"]]

    def boot(fn, idx: np.ndarray | None, clusters: list):
        """The 95% interval of `fn` over `clusters` (of the items `idx`; all: None): a mean
        of per-item values (`fn.items`) by `mean_interval` (the t interval under
        rules.FEW_CLUSTERS clusters), a ratio by the percentile cluster bootstrap."""
        if hasattr(fn, "items"):
            return mean_interval(fn.items if idx is None else fn.items[idx], clusters)
        return interval(np.asarray(fn(sums(idx, clusters))))

    def stat(fn) -> tuple:
        """(point, the widest interval's lo and hi, the seed-cluster lo and hi, the widest
        interval's outer ends): over (setting, seed, unit) and (setting, unit) clusters, and
        where the members have more than one teacher, teacher clusters (the outer one)."""
        s_lo, s_hi, s_out = boot(fn, None, a["cluster"])
        lo, hi, out = s_lo, s_hi, s_out
        for clusters in teacher_clusterings([facts], a["teacher"]):
            f_lo, f_hi, f_out = boot(fn, None, clusters)
            lo, hi, out = min(lo, f_lo), max(hi, f_hi), (min(out[0], f_out[0]),
                                                          max(out[1], f_out[1]))
        return float(fn(sums(None, None))), lo, hi, s_lo, s_hi, out

    def harm(key):
        def rate(t):  # pooled_harm_rate on sums: NaN where nothing is won without c
            won = np.asarray(t[key + "0"], float)
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(won > 0, t[key + "h"] / won, np.nan)
        return rate

    def diff(k1: str, k0: str):
        def mean(t):
            return (t[k1] - t[k0]) / t["one"]
        mean.items = cols[k1].astype(float) - cols[k0].astype(float)  # a mean of these
        return mean

    reps = {m: analysis.load(root / m / CONTEXT_RETURN) for m in members}
    regimes = {meth: [regime(r) for rep in reps.values() for r in runs_of(rep, meth)]
               for meth in ("opd", "nca")}
    n_seeds = len(set(a["seed"]))
    where = (f"{n_seeds} seeds over {len(members)} settings ({', '.join(members)}); 95% "
             "intervals over (setting, seed, unit) clusters, then the wider of those and "
             f"(setting, unit) clusters; {teacher_text(a['teacher'])}")
    opd, nca, base = stat(harm("o")), stat(harm("n")), stat(harm("b"))
    gap = stat(lambda t: harm("o")(t) - harm("n")(t))
    acc, delta, base_delta = stat(diff("n0", "o0")), stat(diff("o1", "o0")), stat(diff("b1", "b0"))
    def fmt(v, sign: str = "") -> str:
        f = f"{{:{sign}.3f}}"
        return (f"{f.format(v[0])} [{f.format(v[3])}, {f.format(v[4])}], wider "
                f"[{f.format(v[1])}, {f.format(v[2])}]")

    independence = rules.independence_harm(float(a["o1"].mean()))
    # the harm rule (said apart): clear of the teachers' harm, and of the
    # independence baseline unless accuracy with c lies below accuracy without
    established = opd[1] > base[0] and (delta[2] < 0 or opd[1] > independence)
    seed_a = [r == "A" for r in regimes["opd"]]

    def per_seed(fn) -> list[judge.Estimate]:
        """Each seed's estimate of `fn` with its own cluster-bootstrap interval."""
        out = []
        for seed in dict.fromkeys(a["seed"]):
            idx = np.array([i for i, s in enumerate(a["seed"]) if s == seed])
            lo, hi, outer = boot(fn, idx, [a["cluster"][i] for i in idx])
            v = float(fn(sums(idx, None)))
            out.append(judge.Estimate(v, min(lo, v), max(hi, v), outer=outer))
        return out

    def est(v) -> judge.Estimate:
        return judge.Estimate(v[0], v[1], v[2], n_seeds, outer=v[5])

    brk = judge.effect(per_seed(diff("o1", "o0")),
                       est(delta), 0.0, -1, rules.BREAK_MARGIN)
    breaks = brk.verdict
    breaks_why = "; ".join(x for x in (
        brk.reason, f"regime A (a seed's own interval, by the few-clusters rule, below 0) in "
        f"{sum(seed_a)} of {len(seed_a)} seeds",
        "OPD's harm its own by the harm rule (above the teachers' harm, and in A or above the "
        "independence baseline)" if established else "OPD's harm not its own by the harm rule "
        "(it does not clear the teachers' harm, or neither is it in A nor above the independence "
        "baseline)") if x)
    if breaks not in ("reproduced", "partly"):
        prevents, prevents_why = "not measurable", f"OPD's break is {breaks} here"
    elif not established:  # the harm rule, as the per-setting claim applies it
        prevents, prevents_why = "not measurable", (
            "OPD's pooled harm is not its own by the harm rule: nothing of OPD's to prevent")
    else:
        prevents = "reproduced" if gap[1] > 0 and "A" not in regimes["nca"] else \
            "partly" if gap[0] > 0 else "not reproduced"
        prevents_why = ""
        if gap[0] < rules.HARM_MARGIN and prevents != "not reproduced":  # smallest effect
            prevents = "inconclusive" if gap[2] >= rules.HARM_MARGIN else "not reproduced"
            prevents_why = _short(gap[0], rules.HARM_MARGIN)
    imp = judge.effect(per_seed(diff("n0", "o0")),
                       est(acc), 0.0, 1, rules.BREAK_MARGIN, what="seed pairs")
    improves, improves_why = imp.verdict, imp.reason
    ctl = {m: analysis.load(root / m / CONTEXT_CONTROL)
           for m in members if (root / m / CONTEXT_CONTROL).exists()}
    reads = {meth: [r.control for rep in ctl.values() for r in runs_of(rep, meth)]
             for meth in ("opd", "nca")}
    reads["base"] = [r.control for rep in ctl.values() for _, r in others(rep)]
    teachers = [c["reads_c"] for c in reads["base"]]
    nca_items = [None if r.items_ is None else
                 {**r.items_, "unit": [f"{m}|{u}" for u in r.items_["unit"]]}
                 for m, rep in ctl.items() for r in runs_of(rep, "nca")]
    nca_units = [r.n_units for rep in ctl.values() for r in runs_of(rep, "nca")]
    # the teachers' mean as one cell (the share needs per-item outcomes of every member to
    # pair; where the members' reports keep none, the point alone, said so)
    mean_cell = {"reads_c": float(np.mean(teachers)),
                 "reads_c_ci95": [min(c["reads_c_ci95"][0] for c in reads["base"]),
                                  max(c["reads_c_ci95"][1] for c in reads["base"])]
                 if all(c.get("reads_c_ci95") and c["reads_c_ci95"][0] is not None
                        for c in reads["base"]) else [None, None]} if teachers else None
    read_verdict, read_why, clear, share, read_mde, read_p = reads_c_verdict(
        reads["nca"], mean_cell, nca_items, None, "the teachers' mean", nca_units)
    read_why = "; ".join(x for x in (read_why, share) if x)
    return [
        Claim("OPD students break when c returns (pooled)",
         f"OPD: accuracy with c - without {fmt(delta, '+')}; harm {fmt(opd)}; per-seed "
         f"regimes {''.join(regimes['opd'])}",
         f"independence baseline (1 - OPD's accuracy with c) {independence:.3f}; "
         f"teachers (step 0) on the same items: with c - without {fmt(base_delta, '+')}; harm "
         f"{fmt(base)}; {where}", breaks, breaks_why, (len(seed_a), len(seed_a)),
         detectable=f"{brk.mde:.3f}", spec="degrades", p=brk.p),
        Claim("NCA prevents the harm (pooled, paired by seed)",
         f"NCA harm {fmt(nca)}; regimes {''.join(regimes['nca'])}",
         f"OPD - NCA harm {fmt(gap, '+')}", prevents, prevents_why,
         detectable=f"{judge.detectable(est(gap)):.3f}", spec="nca_prevents",
         p=rules.interval_p(gap[0], gap[1], gap[2])),
        Claim("NCA still reads c (not blind to it)",
         f"NCA reads_c {spread_text([c['reads_c'] for c in reads['nca']])}",
         f"teachers {spread_text([c['reads_c'] for c in reads['base']])}; OPD "
         f"{spread_text([c['reads_c'] for c in reads['opd']])} (accuracy with c - with a wrong c "
         "of the same form; per-seed 95% intervals)", read_verdict, read_why,
         (len(clear), len(reads["nca"])), detectable=read_mde, spec="nca_reads_context",
         p=read_p),
        Claim("NCA improves accuracy without c (pooled, paired by seed)",
         f"NCA - OPD {fmt(acc, '+')}", where, improves, improves_why,
         detectable=f"{imp.mde:.3f}", spec="nca_improves_no_c", p=imp.p),
    ]



def gain_over_step0(figs: Path, method: str, key: str = "correct_c"
                    ) -> tuple[dict, list, bool, list[judge.Estimate], judge.Estimate | None]:
    """`method`'s accuracy (`key`) less step 0's, per seed and pooled over seeds: step 0, the
    runs, whether they are paired per item, each seed's estimate and the pooled one (None for
    one seed). Paired where every report keeps its per-item outcomes: the context return's,
    else (an older return report) its control run's, the same evaluation where their accuracies
    with c agree; the pooled interval the wider of (seed, unit) and unit clusters
    (`gain_estimate`). Unpaired (older reports): each seed's interval less step 0's point."""
    rep = analysis.load(figs / CONTEXT_RETURN)
    base, runs = base_of(rep), runs_of(rep, method)
    paired = all(r.items_ is not None for r in (base, *runs))
    ctl = figs / CONTEXT_CONTROL
    if not paired and ctl.exists():
        other = analysis.load(ctl)
        o_base, o_runs = base_of(other), runs_of(other, method)
        same = [r.correct_c for r in (o_base, *o_runs)] == [r.correct_c for r in (base, *runs)]
        if all(r.items_ is not None for r in (o_base, *o_runs)) and same:
            base, runs, paired = o_base, o_runs, True
    if paired:
        units = [gain_estimate(base, [r], key) for r in runs]
        pooled = gain_estimate(base, runs, key) if len(runs) > 1 else None
    else:
        units = [estimate_of(r, key, getattr(base, key)) for r in runs]
        pooled = pooled_estimate(runs, None, units) if len(runs) > 1 else None
    return base, runs, paired, units, pooled


def nca_keeps_context(figs: Path) -> Claim:
    """NCA keeps what c gives: its accuracy with c does not fall below the step-0 model's by
    more than `rules.KEEP_MARGIN`, paired on the same items (`judge.equivalent`, one-sided:
    the 90% interval of NCA - step 0 above -margin). The seed is the unit; the pooled estimate
    is the paired difference, its interval the wider of (seed, unit) and unit clusters
    (`stats.gain_estimate`). Failing it means NCA's anchor made the context view ignore c."""
    rep = analysis.load(figs / CONTEXT_RETURN)
    if not runs_of(rep, "nca"):
        return Claim("NCA keeps what c gives (accuracy with c)", "-", "-", "not measurable",
                     "no NCA run")
    base, nca, paired, units, pooled = gain_over_step0(figs, "nca")
    j = judge.equivalent(units, pooled, 0.0, rules.KEEP_MARGIN, sides="lower")
    shown = pooled if pooled is not None else units[0]
    return Claim("NCA keeps what c gives (accuracy with c)",
                 f"{spread_text([r.correct_c for r in nca])}; NCA - step 0 "
                 + ("paired " if paired else "") + f"{shown}"
                 + (f" pooled over {len(nca)} seeds" if pooled is not None else ""),
                 f"step 0 with c: {base.correct_c:.3f}; OPD "
                 f"{spread_text([r.correct_c for r in runs_of(rep, 'opd')])}; margin "
                 f"{rules.KEEP_MARGIN:g}; {ONE_TEACHER}", j.verdict, j.reason,
                 coverage=(len(units), len(nca)), detectable=f"{j.mde:.3f}", p=j.p)



def longer(figs: Path) -> Claim:
    """Answers grow when c returns after OPD: every seed's interval of rel_len_both lies above
    0 and its point above the step-0 model's, the seeds' mean above the larger of 0 and step
    0's by `rules.LENGTH_MARGIN` (the smallest-effect rule). A length the task fixes is a
    constant: not measurable."""
    rep = analysis.load(figs / CONTEXT_RETURN)
    base, opd = base_of(rep), runs_of(rep, "opd")
    vals = [r.rel_len_both for r in opd]
    if all(v is None for v in vals):
        return Claim("OPD answers get longer with c (rel_len_both)", "no item right both ways",
                     "-", "not measurable")
    fixed = _fixed_length([base, *opd])
    if fixed is not None:  # a constant cannot grow: untestable, not "not reproduced"
        return Claim("OPD answers get longer with c (rel_len_both)", spread_text(vals, pct=True),
                     f"step 0: {100 * (base.rel_len_both or 0):+.1f}%", "not measurable",
                     f"every answer, with c and without, is exactly {fixed:g} tokens long in "
                     "every run: the task fixes the length, which cannot change")
    b = base.rel_len_both
    units = _length_units(base, opd)  # None: a seed without a change to judge
    paired = all(_has_lengths(base, r) for r in opd)
    # the null: the larger of 0 and step 0's change, step 0 with its own noise (the step-0
    # rule): against step 0 where its change is above 0, against 0 where not
    flags = [u is not None and u.lo > 0 for u in units]
    against = [u is not None and u.hi <= 0 for u in units]
    known = [u for u in units if u is not None]
    grow = float(np.mean([u.point for u in known])) if known else 0.0
    reach = any(u.hi >= rules.LENGTH_MARGIN for u in known)
    verdict = count_verdict(flags, against=against, effect=grow, margin=rules.LENGTH_MARGIN,
                            reach=reach)
    widths = [(u.hi - u.lo) / 2 for u in known]
    mde = f"{100 * judge.mde_of_halfwidths(widths):.1f}%" if widths else ""
    ps = [rules.interval_p(u.point, u.lo, u.hi) for u in known]
    return Claim("OPD answers get longer with c (rel_len_both)", spread_text(vals, pct=True),
                 "step 0: " + ("-" if b is None else f"{100 * b:+.1f}%") + (
                     "" if b is None or b <= 0 else " paired per item on the same items (the "
                     "percentile bootstrap of the two ratios' difference)" if paired else
                     " with its own interval in quadrature (the reports keep no per-item "
                     "lengths to pair)") + f"; {ONE_TEACHER}", verdict,
                 _absent(rules.LENGTH_MARGIN, pct=True) if verdict == "not reproduced" and
                 known and not reach and grow < rules.LENGTH_MARGIN else
                 _short(grow, rules.LENGTH_MARGIN, pct=True) if any(flags) and
                 0 < grow < rules.LENGTH_MARGIN else
                 _straddle_reason(flags, against) if verdict == "inconclusive" else "",
                 coverage=(len(flags), len(opd)), detectable=mde,
                 p=rules.counted_p(ps, all(flags)))



def _has_lengths(base, r) -> bool:
    """Whether step 0's report and run `r`'s keep per-item lengths on the same items."""
    need = ("unit", "correct_no_c", "correct_c", "length_no_c", "length_c")
    return all(e.items_ is not None and all(k in e.items_ for k in need) for e in (base, r)) \
        and base.items_["unit"] == r.items_["unit"]


def paired_length_unit(base, r) -> judge.Estimate | None:
    """Run `r`'s rel_len_both less step 0's where step 0's change is above 0 (else less 0),
    paired per item: each view's lengths summed over the items right both ways, both runs'
    sums drawn on the same units by one cluster bootstrap, and the 95% percentile interval of
    the difference of the two ratios (a ratio: the ratios rule, never a normal interval).
    None where `r` has no item right both ways."""
    def cols(e) -> list[np.ndarray]:
        it = e.items_
        both = np.asarray(it["correct_no_c"], bool) & np.asarray(it["correct_c"], bool)
        return [np.asarray(it["length_no_c"], float) * both,
                np.asarray(it["length_c"], float) * both]

    (r0, r1), (b0, b1) = cols(r), cols(base)
    if not r0.any():
        return None
    against_b = base.rel_len_both is not None and base.rel_len_both > 0
    s_r0, s_r1, s_b0, s_b1 = cluster_sums([r0, r1, b0, b1], r.items_["unit"])
    with np.errstate(invalid="ignore", divide="ignore"):
        boots = np.where(s_r0 > 0, s_r1 / s_r0 - 1, np.nan) - (
            np.where(s_b0 > 0, s_b1 / s_b0 - 1, np.nan) if against_b else 0.0)
    point = (r1.sum() / r0.sum() - 1) - ((b1.sum() / b0.sum() - 1) if against_b else 0.0)
    lo, hi, outer = interval(boots)
    return judge.Estimate(float(point), min(lo, point), max(hi, point), outer=outer)


def _length_units(base, opd: list) -> list[judge.Estimate | None]:
    """Each OPD seed's length change less the larger of 0 and step 0's change: where the
    reports keep per-item lengths, paired per item (`paired_length_unit`); else where step 0's
    change is above 0 it is a measurement, its 95% interval combined with the seed's in
    quadrature (the step-0 rule; the same items' positive correlation makes this
    conservative); else 0, exact. None where a seed has no change or interval."""
    if opd and all(_has_lengths(base, r) for r in opd):
        return [paired_length_unit(base, r) for r in opd]
    b = base.rel_len_both
    b_ci = (base.ci95 or {}).get("rel_len_both") or [None, None]
    b_half = (b_ci[1] - b_ci[0]) / 2 if b is not None and b > 0 and None not in b_ci else 0.0
    null = b if b is not None and b > 0 else 0.0
    out = []
    for r in opd:
        lo, hi = (r.ci95 or {}).get("rel_len_both") or [None, None]
        if r.rel_len_both is None or lo is None or hi is None:
            out.append(None)
            continue
        v = r.rel_len_both
        below, above = v - min(lo, v), max(hi, v) - v
        out.append(judge.Estimate(v - null, v - null - (below ** 2 + b_half ** 2) ** 0.5,
                                  v - null + (above ** 2 + b_half ** 2) ** 0.5))
    return out


def _fixed_length(runs) -> float | None:
    """The one answer length of runs whose answers all have it, with c and without (mean
    lengths equal, every interval of the relative change [0, 0]); None otherwise."""
    lengths = set()
    for r in runs:
        ci = (r.ci95 or {}).get("rel_len_both") or [None, None]
        if r.rel_len_both != 0 or list(ci) != [0, 0] or r.len_no_c != r.len_c:
            return None
        lengths.add(r.len_c)
    return lengths.pop() if len(lengths) == 1 else None


def nca_improves_no_c(figs: Path) -> Claim:
    """The paper's claim that NCA also improves accuracy without c: NCA minus OPD (the same
    seed) on the same held-out items, an effect above 0 (`judge.effect`, margin
    `rules.BREAK_MARGIN`): each seed pair with its paired cluster-bootstrap interval over the
    task's units, pooled over the pairs with the wider of (pair, unit) and unit clusters (needs
    per-item results: context_control.json, or a context_return.json written since evaluate
    records them)."""

    name = "NCA improves accuracy without c (vs OPD, same seed)"
    src = next((f for f in (figs / CONTEXT_CONTROL, figs / CONTEXT_RETURN)
                if f.exists() and next(iter(analysis.load(f).results.values())).items_
                is not None), None)
    if src is None:
        return not_run(name,
                       "per-item evaluation results (an evaluation since items were recorded)",
                       "python -m nca_interp.evaluate --control")
    rep = analysis.load(src)
    units, diff, by_pair, by_unit = [], [], [], []
    for key, r in students(rep, "nca"):
        found = partner(rep, key, "opd")
        if found is None:
            continue
        d = np.array(r.items_["correct_no_c"], float) - \
            np.array(found[1].items_["correct_no_c"], float)
        lo, hi, outer = mean_interval(d, r.items_["unit"])
        m = float(d.mean())
        units.append(judge.Estimate(m, min(lo, m), max(hi, m), outer=outer))
        diff += list(d)
        by_pair += [f"{len(units)}|{u}" for u in r.items_["unit"]]
        by_unit += [str(u) for u in r.items_["unit"]]
    if not units:
        return Claim(name, "-", "-", "not measurable", "needs OPD and NCA of the same seed")
    if not any(r.items_["correct_no_c"] and any(r.items_["correct_no_c"])
               for _, r in students(rep)):
        return Claim(name, f"NCA - OPD 0 on every item ({len(units)} seed pairs)",
                     "0 (no change)", "not reproduced", FLOOR + " (NCA - OPD is 0 on every "
                     "item)", coverage=(len(units), len(units)), detectable="-", p=1.0)
    # the wider of the two clusterings: the seeds share their items
    pooled = cluster_pooled(diff, [by_pair, by_unit], len(units)) if len(units) > 1 else None
    j = judge.effect(units, pooled, 0.0, 1, rules.BREAK_MARGIN, what="seed pairs")
    few = "" if len(units) >= rules.MIN_SEEDS else \
        f"{len(units)} seed pair{'s' * (len(units) != 1)}; {rules.MIN_SEEDS} needed to generalise"
    return Claim(name,
                 f"NCA - OPD {spread_text([u.point for u in units])} ({len(units)} seed "
                 f"pair{'s' * (len(units) != 1)})" + (f", pooled {pooled}" if pooled else ""),
                 "0 (no change); 95% paired intervals " + ", ".join(
                     f"[{u.lo:+.3f}, {u.hi:+.3f}]" for u in units),
                 j.verdict, "; ".join(x for x in (j.reason, few) if x),
                 coverage=(len(units), len(units)), detectable=f"{j.mde:.3f}", p=j.p)


def reads_c_pooled(units: list[judge.Estimate], items: list[dict | None] | None,
                   widened: bool = False) -> tuple[judge.Estimate | None, str]:
    """NCA's reads_c pooled over its seeds, and how (the rule book's pooled estimate): where
    every seed's report keeps its per-item control outcomes (`items`: unit, correct_c,
    correct_control), a cluster bootstrap over (seed, unit) and unit clusters, as every
    accuracy claim; where they do not (control runs before per-item control outcomes were
    kept), the t interval of the seeds' reads_c, never narrower than their root-mean-square
    half-width (`stats.pool_units` with shared items; `widened`: some seed's interval was
    widened by the few-clusters rule, said in the reason). None for a single seed (it
    decides)."""
    if len(units) < 2:
        return None, ""
    if items and len(items) == len(units) and all(
            it is not None and "correct_control" in it for it in items):
        diff, by_seed_unit, by_unit = [], [], []
        for i, it in enumerate(items):
            diff += list(np.subtract(it["correct_c"], it["correct_control"]))
            by_seed_unit += [f"{i}|{u}" for u in it["unit"]]
            by_unit += [str(u) for u in it["unit"]]
        return (cluster_pooled(diff, [by_seed_unit, by_unit], len(units)),
                "pooled by a cluster bootstrap of the items")
    return pool_units(units, shared_items=True), (
        "pooled by the t interval over seeds, never narrower than one seed's item noise (these "
        "control runs keep no per-item outcomes, and the seeds share their items" + (
            "; each seed's interval by the few-clusters rule: its report's percentile "
            f"bootstrap over fewer than {rules.FEW_CLUSTERS} units widened by t(0.975, G - 1) "
            "sqrt(G / (G - 1)) / 1.96" if widened else "") + ")")


def reads_ratio(nca: list[dict], teacher: dict, items: list[dict | None] | None = None,
                teacher_items: dict | None = None
                ) -> tuple[float | None, tuple[float, float] | None]:
    """NCA's mean reads_c over the teacher's (`teacher`: its control cell), a ratio: (point,
    its 95% interval) by the percentile cluster bootstrap of the ratio over units where every
    report keeps its per-item control outcomes on the same items (`stats.ratio_estimate`:
    NCA's seeds stacked, the teacher's items beside each); (None, None), not measurable,
    where the teacher's reads_c can be 0 (its interval reaches 0); (point, None) where no
    per-item outcomes are kept to resample."""
    kept = teacher_items is not None and "correct_control" in teacher_items and items and \
        all(it is not None and "correct_control" in it and it["unit"] == teacher_items["unit"]
            for it in items)
    if kept:
        num, den, units = [], [], []
        t_diff = list(np.subtract(teacher_items["correct_c"], teacher_items["correct_control"]))
        for it in items:
            num += list(np.subtract(it["correct_c"], it["correct_control"]))
            den += t_diff
            units += [str(u) for u in it["unit"]]
        e = ratio_estimate(num, den, units)
        return (None, None) if e is None else (e.point, (e.lo, e.hi))
    t, (lo, hi) = teacher["reads_c"], (teacher.get("reads_c_ci95") or [None, None])
    if t == 0 or (lo is not None and lo <= 0 <= hi):
        return None, None
    return float(np.mean([c["reads_c"] for c in nca])) / t, None


def reads_share(nca: list[dict], teacher: dict | None, items: list[dict | None] | None = None,
                teacher_items: dict | None = None, whose: str = "the teacher's") -> str:
    """How large NCA's reads_c is beside the teacher's (`reads_ratio`), said in words: a
    description, no rule."""
    if teacher is None or not nca:
        return ""
    mean = float(np.mean([c["reads_c"] for c in nca]))
    head = f"NCA reads_c {mean:.3f} beside {whose} {teacher['reads_c']:.3f}: "
    point, ci = reads_ratio(nca, teacher, items, teacher_items)
    if point is None:
        return head + ("the share is not measurable (the teacher's reads_c can be 0: its "
                       "interval reaches 0)")
    if ci is None:
        return head + (f"{point:.0%} of it (no interval: the control runs keep no per-item "
                       "outcomes to resample)")
    return head + (f"{point:.0%} [{ci[0]:.0%}, {ci[1]:.0%}] of it (95% percentile bootstrap "
                   "of the ratio over units)")


def reads_c_verdict(nca: list[dict], teacher: dict | None,
                    items: list[dict | None] | None = None,
                    teacher_items: dict | None = None, whose: str = "the teacher's",
                    n_units: list[int | None] | None = None
                    ) -> tuple[str, str, list[bool], str, str, float | None]:
    """The verdict on NCA reading c from its seeds' control cells (reads_c with its 95%
    interval): an effect claim (`judge.effect`, margin `rules.READ_MARGIN`) on the pooled
    reads_c (`reads_c_pooled`; `items`: each seed's per-item outcomes, where kept):
    reproduced when it lies clear above 0 and a majority of seeds do on their own; not
    reproduced when the interval excludes a reads_c as large as the margin (blind to c);
    inconclusive otherwise. Returns the verdict word, its reason, each seed's flag (clear
    above 0), how large NCA's reads_c is beside the teacher's (`reads_share`: description, no
    rule; `teacher`: its control cell), and the minimum detectable reads_c, and the p of its
    test (rules: multiplicity). Each seed's interval follows the few-clusters rule
    (`stats.control_unit`; `n_units`: each seed's units, for reports without per-item control
    outcomes)."""
    est = [control_unit(c, items[i] if items else None, n_units[i] if n_units else None)
           for i, c in enumerate(nca)]
    flags = [e is not None and e.lo > 0 for e in est]
    judged = [i for i, e in enumerate(est) if e is not None]
    units = [est[i] for i in judged]
    if not units:
        return "not measurable", "not measured here", flags, "", "", None
    few = [n_units[i] is not None and n_units[i] < rules.FEW_CLUSTERS and not (
        items and items[i] is not None and "correct_control" in items[i])
        for i in judged] if n_units else []
    pooled, how = reads_c_pooled(units, [items[i] for i in judged] if items else None,
                                 any(few))
    j = judge.effect(units, pooled, 0.0, 1, rules.READ_MARGIN)
    reason = "; ".join(x for x in (j.reason, how) if x)
    decide = pooled if pooled is not None else units[0]
    if j.verdict == "not reproduced":  # below the margin: blind, or reading c by too little
        reason = ("NCA reads c by less than the margin: " if decide.lo > 0 else
                  "NCA is blind to what c says: ") + reason
    share = reads_share([nca[i] for i in judged], teacher,
                        [items[i] for i in judged] if items else None, teacher_items, whose)
    return j.verdict, reason, flags, share, f"{j.mde:.3f}", j.p


def nca_reads_context(figs: Path) -> Claim:
    """Robust, not blind: NCA still uses what c says. Each checkpoint is evaluated with c and
    with a control context of c's form that is wrong for the item (`evaluate --control`);
    reads_c = accuracy with c - with the control, judged as an effect above 0
    (`reads_c_verdict`). Its size beside the teacher's (step 0's, across models) is printed
    as a description: whether NCA keeps what c gives is the keeps claim's question."""
    f = figs / CONTEXT_CONTROL
    if not f.exists():
        raise FileNotFoundError(f)
    reps = analysis.load(f)

    def cells(method):
        return [r.control for r in runs_of(reps, method)]

    nca, opd = cells("nca"), cells("opd")
    base = [r.control for _, r in others(reps)]
    first = others(reps)[0][1] if base else None  # step 0: the teacher but cross-model
    # cross-model: NCA beside its own start, not the teacher
    verdict, reason, flags, share, mde, p = reads_c_verdict(
        nca, base[0] if base else None, [r.items_ for r in runs_of(reps, "nca")],
        first.items_ if first is not None else None,
        "step 0's" if len(base) > 1 else "the teacher's",
        [r.n_units for r in runs_of(reps, "nca")])
    why = [x for x in (reason, share) if x]
    if nca and len(nca) < rules.MIN_SEEDS:
        why.append(f"in {seeds_text(reps, 'nca')}; {rules.MIN_SEEDS} seeds needed to generalise")
    return Claim("NCA still reads c (not blind to it)",
            f"NCA reads_c {spread_text([c['reads_c'] for c in nca])} "
            f"({seeds_text(reps, 'nca')} with the control run)",
            (f"step 0 {base[0]['reads_c']:.3f}; teacher {base[1]['reads_c']:.3f}" if len(base) > 1
             else f"teacher {spread_text([c['reads_c'] for c in base])}") + "; OPD "
            f"{spread_text([c['reads_c'] for c in opd])} (accuracy with c - with a wrong c of the "
            "same form)", verdict, "; ".join(why), coverage=(len(flags), len(nca)),
            detectable=mde, p=p)
