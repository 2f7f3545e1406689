"""The paper's claims as code: each is a function from a pipeline folder's JSON to (measured,
null or control, verdict), with its rule written once, here.

    python -m train.claims facts                 # one setting's claims table
    python -m train.claims --write               # regenerate the blocks in README.md / docs

Verdicts: "reproduced" (the effect stands clear of its null in every seed, by the rule below),
"partly" (in the mean or in some seeds, not all), "not reproduced", or "not measurable" (the
quantity is undefined here, e.g. harm with no item right without c). Numbers are per-seed
point estimates with each run's 95% cluster-bootstrap interval from context_return.json where
a rule uses one; ranges over seeds are written "lo-hi" (a spread, not an interval).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nca_interp import analysis
from nca_interp.fsio import read_json, write_text
from nca_interp.identity import RunId, by_name, others, partner, roster, students
from train import dose, judge, rules
from train.blocks import Block
from train.settings import load


@dataclass(frozen=True)
class Claim:
    """One claim judged on one setting: what was measured, against which null, and the
    verdict, a word of the rule book's closed set (`rules.VERDICTS`) with its reason apart.
    `coverage` is (units judged, units) where the rule counts units; `also` holds verdicts
    under other thresholds (e.g. one scaled to this model beside the paper's 8B threshold),
    as (threshold, verdict word, reason). Tables, the referee page and the summary render
    this; none reads a verdict back out of text."""

    name: str
    measured: str
    null: str
    verdict: str
    reason: str = ""
    coverage: tuple[int, int] | None = None
    also: tuple[tuple[str, str, str], ...] = field(default=())

    def __post_init__(self):
        for word in (self.verdict, *(v for _, v, _ in self.also)):
            if word not in rules.VERDICTS:
                raise ValueError(f"verdict {word!r} is not one of {', '.join(rules.VERDICTS)}")

    @property
    def cell(self) -> str:
        """The verdict as a table shows it: the word, then its reason in parentheses, then
        each other threshold's verdict."""
        text = self.verdict + (f" ({self.reason})" if self.reason else "")
        for threshold, word, reason in self.also:
            text += f"; {threshold}: {word}" + (f" ({reason})" if reason else "")
        return text


def not_run(name: str, needs: str) -> Claim:
    """A claim whose data this setting did not produce."""
    return Claim(name, "not measured", needs, "not measurable", "not measured here")


def _runs(rep: dict, method: str) -> list[dict]:
    return [r for _, r in students(rep, method)]


def _base(rep: dict) -> dict:
    """The report's first entry that is no student (the teacher, step 0)."""
    return others(rep)[0][1]


def _spread(vals: list[float], pct: bool = False) -> str:
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    f = (lambda v: f"{100 * v:+.1f}%") if pct else (lambda v: f"{v:.3f}")
    return f(vals[0]) if len(vals) == 1 else f"{f(float(np.mean(vals)))} ({f(min(vals))} to " \
        f"{f(max(vals))}, n={len(vals)})"


def _verdict(flags: list[bool], mean_on_side: bool = True, total: int | None = None) -> str:
    """The rule book's verdict (train/rules.py, stated in docs/method.md)."""
    return rules.verdict(flags, mean_on_side, total)


def internalizes(figs: Path) -> Claim:
    """OPD raises accuracy without c above the step-0 null: every seed's interval lies above
    the initial checkpoint's point estimate."""
    rep = analysis.load(figs / "context_return.json")
    base, opd = _base(rep), _runs(rep, "opd")
    flags = [r["ci95"]["win_no_c"][0] > base["win_no_c"] for r in opd]
    return Claim("OPD internalizes c (right without c rises)",
                 _spread([r["win_no_c"] for r in opd]), f"step 0: {base['win_no_c']:.3f}",
                 _verdict(flags), coverage=(len(flags), len(opd)))


def degrades(figs: Path) -> Claim:
    """Context-induced degradation after OPD, as the paper states it: accuracy with c below
    accuracy without c, paired on the same items. The seed is the unit; the pooled estimate
    is the paired difference over the seeds' items, its interval the wider of (seed, unit)
    and unit clusters (`rules.BREAK_MARGIN` is the
    smallest drop the claim is about; `judge.effect`). Beside it, apart: whether the harm is
    beyond chance (the harm rule: above step 0's harm and the independence baseline)."""
    rep = analysis.load(figs / "context_return.json")
    base, opd = _base(rep), _runs(rep, "opd")
    name = "OPD students break when c returns (harm, regime A)"
    if all(r["harm"] is None for r in opd):
        return Claim(name, "no item right without c", "-", "not measurable")
    units = [_estimate(r, "delta_c") for r in opd]
    pooled = _pooled(opd, lambda it: np.asarray(it["won_c"], float) -
                     np.asarray(it["won_no_c"], float), units)
    j = judge.effect(units, pooled, 0.0, -1, rules.BREAK_MARGIN)
    step0 = base["harm"]
    own = [_harm_is_own(r, step0) for r in opd]
    beyond = f"harm beyond chance (harm rule) in {sum(own)} of {len(opd)} seeds" + (
        ", against the independence baseline alone: step 0 has nothing right without c"
        if step0 is None else "")
    regimes = " ".join(r["regime"] for r in opd)
    return Claim(name,
                 f"accuracy with c - without {_spread([u.point for u in units])}"
                 + (f", pooled {pooled}" if pooled is not None and len(opd) > 1 else "")
                 + f"; harm {_spread([r['harm'] for r in opd])}; regimes {regimes}",
                 f"0 (no change); step-0 harm "
                 f"{'-' if step0 is None else f'{step0:.3f}'}; independence baseline "
                 f"(1 - accuracy with c) "
                 f"{_spread([rules.independence_harm(r['win_c']) for r in opd])}",
                 j.verdict, "; ".join(x for x in (j.reason, beyond) if x),
                 coverage=(len(units), len(opd)))


def _estimate(r: dict, key: str, minus: float = 0.0) -> judge.Estimate:
    """One report's `key` and its 95% interval (less `minus`) as a judge estimate."""
    lo, hi = r["ci95"][key]
    return judge.Estimate(r[key] - minus, min(lo, r[key]) - minus, max(hi, r[key]) - minus)


def _pooled(runs: list[dict], per_item, units: list[judge.Estimate]) -> judge.Estimate | None:
    """The per-item quantity `per_item(items)` pooled over `runs` with a 95% bootstrap interval
    over (run, unit) clusters; where the reports keep no items, the t interval of the units'
    points (None for a single run: the run decides)."""
    from nca_interp.bootstrap import cluster_indices, percentile_ci

    if len(runs) == 1:
        return None
    if all("items" in r for r in runs):
        vals, seed_unit, unit = [], [], []
        for i, r in enumerate(runs):
            vals += list(per_item(r["items"]))
            seed_unit += [f"{i}|{u}" for u in r["items"]["unit"]]
            unit += [str(u) for u in r["items"]["unit"]]
        v, m = np.asarray(vals, float), float(np.mean(vals))
        # (seed, unit) clusters, and unit clusters (the seeds share their items): the wider
        lo, hi = m, m
        for cluster in (seed_unit, unit):
            boots = np.array([v[idx].mean() for idx in cluster_indices(cluster, 2000, 0)])
            b_lo, b_hi = percentile_ci(boots)
            lo, hi = min(lo, float(b_lo)), max(hi, float(b_hi))
        return judge.Estimate(m, lo, hi, len(runs))
    pts = [u.point for u in units]
    m = float(np.mean(pts))
    lo, hi = dose.t_interval(pts)
    # never narrower than the seeds' own intervals allow (seeds that agree by chance)
    within = judge.Z95 * float(np.sqrt(np.mean([u.se ** 2 for u in units]) / len(units)))
    half = max((hi - lo) / 2, within)
    return judge.Estimate(m, m - half, m + half, len(pts))


def _harm_is_own(r: dict, step0_harm: float | None) -> bool:
    """The rule book's harm rule on one report (train/rules.py)."""
    lo = r.get("ci95", {}).get("harm", [r["harm"]])[0] if r["harm"] is not None else None
    return rules.harm_is_own(lo, step0_harm, r["win_c"], r["regime"] == "A")


def nca_prevents(figs: Path) -> Claim:
    """NCA removes the harm: in every seed pair NCA's harm is below OPD's and NCA is never in
    regime A. Only judged where OPD degrades in some seed."""
    rep = analysis.load(figs / "context_return.json")
    opd, nca = _runs(rep, "opd"), _runs(rep, "nca")
    measured = f"harm {_spread([r['harm'] for r in nca])}; regimes " + \
        " ".join(r["regime"] for r in nca)
    control = f"OPD harm {_spread([r['harm'] for r in opd])}"
    breaks = degrades(figs)
    if breaks.verdict not in ("reproduced", "partly"):
        return Claim("NCA prevents the harm", measured, control, "not measurable",
                     f"OPD's break is {breaks.verdict} here: nothing shown to prevent")
    base = _base(rep)["harm"]  # None: undefined at step 0 (the harm rule says what then)
    harmed = [_harm_is_own(o, base) for o in opd]
    flags = [(n["harm"] or 0) < (o["harm"] or 0) and n["regime"] != "A"
             for o, n, h in zip(opd, nca, harmed) if h]
    verdict, reason = _verdict(flags, total=len(opd)), ""
    if verdict == "not measurable":
        reason = (f"OPD's harm is its own, by the harm rule, in {sum(harmed)} of {len(opd)} "
                  "seeds: nothing of OPD's to prevent")
    if (gap := pooled_harm_gap(figs)) is not None:
        d, (lo, hi), n_pairs = gap
        control += (f"; OPD - NCA harm pooled over {n_pairs} seed pair"
                    f"{'s' * (n_pairs != 1)}: {d:+.3f} [{lo:+.3f}, {hi:+.3f}] (paired, "
                    "(seed, unit) clusters)")
        if verdict == "reproduced" and not lo > 0:
            verdict, reason = "partly", "the pooled paired interval reaches 0"
    return Claim("NCA prevents the harm", measured, control, verdict, reason,
                 coverage=(len(flags), len(opd)))


def harm_not_drift(figs: Path) -> Claim | None:
    """OPD's harm is OPD's, not any drift's: at matched drift from step 0 (train.dose), NCA's
    harm lies below OPD's; a seed is clear when its mean difference plus its conservative
    half-width lies below 0, the pooled interval is the t interval over seeds (rules: matched
    drift, every seed). Judged only where OPD's harm is its own in some seed; None where the
    setting trained no OPD beside NCA (a beta variant)."""
    m = read_json((figs / "harm_drift.json"))["matched"].get("nca - opd")
    if m is None:
        return None
    rep = analysis.load(figs / "context_return.json")
    opd, base = _runs(rep, "opd"), _base(rep)["harm"]
    name = "OPD's harm is its own, not drift's (NCA's harm below OPD's at matched drift)"
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
                     "intervals: rerun the python -m train.dose command in harm_drift.md")
    flags = [v + h["half"][k] < 0 for k, v in h["per_seed"].items() if k in h["half"]]
    on_side = h["mean"] < 0
    verdict = _verdict(flags, on_side, total=len(h["seeds"]))
    if verdict in ("partly", "not reproduced"):
        verdict = rules.pooled(bool(h.get("t95")) and h["t95"][1] < 0, flags, on_side)
    return Claim(name, measured, null, verdict, coverage=(len(flags), len(h["seeds"])))


def pooled_harm_gap(figs: Path) -> tuple[float, tuple[float, float], int] | None:
    """OPD's harm minus NCA's, pooled over the seeds and paired by seed on the same held-out
    items (`paired_harm_gap`). None without per-item results (evaluate records them) for OPD
    and NCA of one seed."""
    for src in (figs / "context_return.json", figs / "context_control.json"):
        if not src.exists():
            continue
        rep = analysis.load(src)
        who, pairs = roster(rep), []
        for name, r in students(rep, "nca"):
            found = partner(rep, name, "opd")
            o = found[1] if found else None
            if o is not None and "items" in r and "items" in o:
                pairs.append((f"s{who[name].seed}", o, r))
        if pairs:
            return paired_harm_gap(pairs, where=f"{src}: ")
    return None


def paired_harm_gap(pairs: list[tuple[str, dict, dict]], where: str = "",
                    ) -> tuple[float, tuple[float, float], int]:
    """OPD's harm minus NCA's over (seed, OPD report, NCA report) pairs evaluated on the same
    held-out items, with a 95% bootstrap interval over (seed, unit) clusters: a resample draws
    the clusters with replacement and takes every item of each for both methods, so a seed's
    facts (or levels) move together and OPD and NCA stay paired. Harm pooled = items lost with
    c among those won without c, over all pairs. One pair gives that seed pair's own interval."""
    from nca_interp.bootstrap import cluster_indices, percentile_ci

    cols: dict[str, list] = {"o0": [], "o1": [], "n0": [], "n1": [], "cluster": []}
    for seed, o, n in pairs:
        if n["items"]["unit"] != o["items"]["unit"]:
            raise ValueError(f"{where}OPD and NCA of seed {seed} were not evaluated on the "
                             "same items; re-run the evaluation")
        cols["o0"] += o["items"]["won_no_c"]
        cols["o1"] += o["items"]["won_c"]
        cols["n0"] += n["items"]["won_no_c"]
        cols["n1"] += n["items"]["won_c"]
        cols["cluster"] += [f"{seed}|{u}" for u in n["items"]["unit"]]
    a = {k: np.asarray(v, bool) for k, v in cols.items() if k != "cluster"}

    def gap(i) -> float:
        return _pooled_harm(a["o0"][i], a["o1"][i]) - _pooled_harm(a["n0"][i], a["n1"][i])

    boots = np.array([gap(i) for i in cluster_indices(cols["cluster"], 2000, 0)])
    lo, hi = percentile_ci(boots, nan=True)
    return gap(np.arange(len(cols["cluster"]))), (float(lo), float(hi)), len(pairs)


# Settings judged together (train/settings.toml [pooled]): one claim table over every member's
# seeds (same task and teacher, e.g. two fixed knowledge bases), pooled with the member as
# part of each cluster.
POOLED = load().pooled


def _items(root: Path, members: tuple[str, ...]) -> dict[str, np.ndarray | list]:
    """Per-item results of every seed of every member, stacked: won without / with c for OPD,
    NCA and the member's teacher (step 0) on the same items, and the cluster of each item
    (member | seed | unit: a resample keeps a seed's unit together, OPD and NCA paired)."""
    cols: dict[str, list] = {k: [] for k in ("o0", "o1", "n0", "n1", "b0", "b1", "cluster",
                                             "seed")}
    for member in members:
        report = analysis.load(root / member / "context_return.json")
        base, who = _base(report), roster(report)
        for name, r in students(report, "nca"):
            found = partner(report, name, "opd")
            o = found[1] if found else None
            if o is None:
                continue
            if not (r["items"]["unit"] == o["items"]["unit"] == base["items"]["unit"]):
                raise ValueError(f"{member}: {name}, its OPD seed and the teacher were not "
                                 "evaluated on the same items; re-run the evaluation")
            for key, rep in (("o", o), ("n", r), ("b", base)):
                cols[key + "0"] += rep["items"]["won_no_c"]
                cols[key + "1"] += rep["items"]["won_c"]
            seed = f"s{who[name].seed}"
            cols["cluster"] += [f"{member}|{seed}|{u}" for u in r["items"]["unit"]]
            cols["seed"] += [f"{member}|{seed}"] * len(r["items"]["unit"])
    return {k: (np.asarray(v, bool) if k not in ("cluster", "seed") else v)
            for k, v in cols.items()}


def _pooled_harm(w0: np.ndarray, w1: np.ndarray) -> float:
    """Items lost with c among those won without c, pooled."""
    return float((w0 & ~w1).sum() / w0.sum()) if w0.any() else float("nan")


def pooled_claims(members: tuple[str, ...], root: Path = Path("figures")) -> list[Claim]:
    """The harm verdicts over every seed of several settings (e.g. two knowledge bases x 4
    seeds), each with two 95% bootstrap intervals: over (setting, seed, unit) clusters (seeds
    as independent replicates) and over (setting, unit) clusters (a fact drawn with all its
    seeds: the wider, when facts differ more than seeds do). A verdict needs both to clear:
    - OPD breaks (the rule of `degrades`, pooled): reproduced when the pooled accuracy with c
      minus without c lies below 0 (regime A; per-seed intervals over a few facts are too
      wide to show it, which is why the seeds are pooled), beside the teachers' own change on
      the same items (the step-0 null); partly when only the pooled harm's interval lies above
      the teachers' pooled harm; not reproduced otherwise.
    - NCA prevents the harm: only judged where OPD breaks (reproduced or partly); reproduced
      when the paired OPD - NCA harm interval lies above 0 and no NCA seed is in A.
    - NCA still reads c: each seed's reads_c (accuracy with c minus with a wrong c of the same
      form, `evaluate --control`) with its own interval, as `nca_reads_context` judges it.
    - NCA improves accuracy without c: the paired NCA - OPD interval above 0."""
    from nca_interp.bootstrap import cluster_indices, percentile_ci

    a = _items(root, members)
    by_seed = cluster_indices(a["cluster"], 2000, 0)
    by_fact = cluster_indices([f"{c.split('|')[0]}|{c.split('|', 2)[2]}" for c in a["cluster"]],
                              2000, 0)
    every = np.arange(len(a["cluster"]))

    def stat(fn) -> tuple[float, float, float, float, float]:
        """(point, the wider interval's lo and hi, then the seed-cluster lo and hi)."""
        s_lo, s_hi = percentile_ci(np.array([fn(i) for i in by_seed]), nan=True)
        f_lo, f_hi = percentile_ci(np.array([fn(i) for i in by_fact]), nan=True)
        return (fn(every), float(min(s_lo, f_lo)), float(max(s_hi, f_hi)), float(s_lo),
                float(s_hi))

    def harm(key):
        return lambda i: _pooled_harm(a[key + "0"][i], a[key + "1"][i])

    reps = {m: analysis.load(root / m / "context_return.json") for m in members}
    regimes = {meth: [r["regime"] for rep in reps.values() for r in _runs(rep, meth)]
               for meth in ("opd", "nca")}
    n_seeds = len(set(a["seed"]))
    where = (f"{n_seeds} seeds over {len(members)} settings ({', '.join(members)}); 95% "
             "intervals over (setting, seed, unit) clusters, then the wider of those and "
             "(setting, unit) clusters")
    opd, nca, base = stat(harm("o")), stat(harm("n")), stat(harm("b"))
    gap = stat(lambda i: harm("o")(i) - harm("n")(i))
    acc = stat(lambda i: float(a["n0"][i].mean() - a["o0"][i].mean()))
    delta = stat(lambda i: float(a["o1"][i].mean() - a["o0"][i].mean()))
    base_delta = stat(lambda i: float(a["b1"][i].mean() - a["b0"][i].mean()))
    def fmt(v, sign: str = "") -> str:
        f = f"{{:{sign}.3f}}"
        return (f"{f.format(v[0])} [{f.format(v[3])}, {f.format(v[4])}], wider "
                f"[{f.format(v[1])}, {f.format(v[2])}]")

    independence = rules.independence_harm(float(a["o1"].mean()))
    # the harm rule (train/rules.py): clear of the teachers' harm, and of the independence
    # baseline unless accuracy with c lies below accuracy without (pooled regime A)
    established = opd[1] > base[0] and (delta[2] < 0 or opd[1] > independence)
    seed_a = [r == "A" for r in regimes["opd"]]
    breaks = rules.pooled(delta[2] < 0, seed_a, mean_on_side=delta[0] < 0)
    if breaks == "reproduced" and not established:
        breaks = "partly"
    elif breaks == "not reproduced" and established and delta[0] < 0:
        breaks = "partly"
    why = (["pooled regime A"] if delta[2] < 0 else []) + \
        [f"{sum(seed_a)} of {len(seed_a)} seeds in A",
         "harm above the teachers'" if established else
         "its harm does not clear the teachers' harm"]
    if breaks == "partly" and delta[2] < 0 and not 2 * sum(seed_a) > len(seed_a):
        why.append("a majority of seeds is needed")
    breaks_why = "; ".join(why) if breaks != "not reproduced" else ""
    if breaks == "not reproduced":
        prevents, prevents_why = "not measurable", "OPD does not break here"
    else:
        prevents = "reproduced" if gap[1] > 0 and "A" not in regimes["nca"] else \
            "partly" if gap[0] > 0 else "not reproduced"
        prevents_why = ""
    improves = "reproduced" if acc[1] > 0 else "not reproduced" if acc[2] < 0 or acc[0] <= 0 \
        else "partly"
    improves_why = "the interval reaches 0" if improves == "partly" else ""
    ctl = {m: analysis.load(root / m / "context_control.json")
           for m in members if (root / m / "context_control.json").exists()}
    reads = {meth: [r["control"] for rep in ctl.values() for r in _runs(rep, meth)]
             for meth in ("opd", "nca")}
    reads["base"] = [r["control"] for rep in ctl.values() for _, r in others(rep)]
    teachers = [c["reads_c"] for c in reads["base"]]
    read_verdict, read_why, clear, share = reads_c_verdict(
        reads["nca"], float(np.mean(teachers)) if teachers else None)
    if clear:
        share = share.replace("the teacher's", "the teachers' mean")
        read_why = "; ".join(x for x in (read_why, f"{sum(clear)} of {len(clear)} seeds' "
                                         "intervals above 0" + (f", but {share}" if share
                                                                else "")) if x)
    return [
        Claim("OPD students break when c returns (pooled)",
         f"OPD: accuracy with c - without {fmt(delta, '+')}; harm {fmt(opd)}; per-seed "
         f"regimes {''.join(regimes['opd'])}",
         f"independence baseline (1 - OPD's accuracy with c) {independence:.3f}; "
         f"teachers (step 0) on the same items: with c - without {fmt(base_delta, '+')}; harm "
         f"{fmt(base)}; {where}", breaks, breaks_why, (len(seed_a), len(seed_a))),
        Claim("NCA prevents the harm (pooled, paired by seed)",
         f"NCA harm {fmt(nca)}; regimes {''.join(regimes['nca'])}",
         f"OPD - NCA harm {fmt(gap, '+')}", prevents, prevents_why),
        Claim("NCA still reads c (not blind to it)",
         f"NCA reads_c {_spread([c['reads_c'] for c in reads['nca']])}",
         f"teachers {_spread([c['reads_c'] for c in reads['base']])}; OPD "
         f"{_spread([c['reads_c'] for c in reads['opd']])} (accuracy with c - with a wrong c "
         "of the same form; per-seed 95% intervals)", read_verdict, read_why,
         (len(clear), len(reads["nca"]))),
        Claim("NCA improves accuracy without c (pooled, paired by seed)",
         f"NCA - OPD {fmt(acc, '+')}", where, improves, improves_why),
    ]


def nca_keeps_context(figs: Path) -> Claim:
    """NCA keeps what c gives: its accuracy with c does not fall below the step-0 model's by
    more than `rules.KEEP_MARGIN`, paired on the same items (`judge.equivalent`, one-sided:
    the 90% interval of NCA - step 0 above -margin). The seed is the unit; the pooled estimate
    is the paired difference over (seed, unit) clusters. Failing it means NCA's anchor made
    the context view ignore c."""
    rep = analysis.load(figs / "context_return.json")
    base, nca = _base(rep), _runs(rep, "nca")
    if not nca:
        return Claim("NCA keeps what c gives (accuracy with c)", "-", "-", "not measurable",
                     "no NCA run")
    paired = all("items" in r for r in (base, *nca))
    if paired:
        units = []
        for r in nca:
            d, (lo, hi) = pooled_gain(base, [r])
            units.append(judge.Estimate(d, min(lo, d), max(hi, d)))
        pooled = None
        if len(nca) > 1:
            d, (lo, hi) = pooled_gain(base, nca)
            pooled = judge.Estimate(d, min(lo, d), max(hi, d), len(nca))
    else:  # older reports: each seed's interval less step 0's point
        units = [_estimate(r, "win_c", base["win_c"]) for r in nca]
        pooled = _pooled(nca, None, units) if len(nca) > 1 else None
    j = judge.equivalent(units, pooled, 0.0, rules.KEEP_MARGIN, sides="lower")
    shown = pooled if pooled is not None else units[0]
    return Claim("NCA keeps what c gives (accuracy with c)",
                 f"{_spread([r['win_c'] for r in nca])}; NCA - step 0 "
                 + ("paired " if paired else "") + f"{shown}"
                 + (f" pooled over {len(nca)} seeds" if pooled is not None else ""),
                 f"step 0 with c: {base['win_c']:.3f}; OPD "
                 f"{_spread([r['win_c'] for r in _runs(rep, 'opd')])}; margin "
                 f"{rules.KEEP_MARGIN:g}", j.verdict, j.reason,
                 coverage=(len(units), len(nca)))


def pooled_gain(base: dict, runs: list[dict], key: str = "won_c"
                ) -> tuple[float, tuple[float, float]]:
    """Accuracy of `runs` minus the step-0 model's on the same items (`key`: won_c or
    won_no_c), pooled over the runs, with a 95% bootstrap interval over (run, unit) clusters:
    a resample keeps a run's unit together with step 0's answers on the same items."""
    from nca_interp.bootstrap import cluster_indices, percentile_ci

    diff, cluster = [], []
    for i, r in enumerate(runs):
        if r["items"]["unit"] != base["items"]["unit"]:
            raise ValueError("a student and step 0 were not evaluated on the same items; "
                             "re-run the evaluation")
        diff += list(np.asarray(r["items"][key], float) - np.asarray(base["items"][key], float))
        cluster += [f"{i}|{u}" for u in r["items"]["unit"]]
    d = np.asarray(diff)
    boots = np.array([d[i].mean() for i in cluster_indices(cluster, 2000, 0)])
    lo, hi = percentile_ci(boots)
    return float(d.mean()), (float(lo), float(hi))


def longer(figs: Path) -> Claim:
    """Answers grow when c returns after OPD: every seed's interval of rel_len_both lies above
    0 and its point above the step-0 model's."""
    rep = analysis.load(figs / "context_return.json")
    base, opd = _base(rep), _runs(rep, "opd")
    vals = [r["rel_len_both"] for r in opd]
    if all(v is None for v in vals):
        return Claim("OPD answers get longer with c (rel_len_both)", "no item right both ways",
                     "-", "not measurable")
    b = base["rel_len_both"]
    flags = [r["rel_len_both"] is not None and (r["ci95"]["rel_len_both"][0] or 0) > 0 and
             (b is None or r["rel_len_both"] > b) for r in opd]
    return Claim("OPD answers get longer with c (rel_len_both)", _spread(vals, pct=True),
                 "step 0: " + ("-" if b is None else f"{100 * b:+.1f}%"), _verdict(flags),
                 coverage=(len(flags), len(opd)))


def _layer_cos(figs: Path, method: str) -> tuple[list[list[float]], list[float], list[float]]:
    ls = analysis.load(figs / "layer_sim.json")
    runs = [r["cos"][1:] for r in _runs(ls, method)]
    base = next(r["cos"][1:] for n, r in others(ls) if n != "random_init")
    return runs, base, ls["results"]["random_init"]["cos"][1:]


def _seeds(rep: dict, method: str) -> str:
    who = roster(rep)
    seeds = sorted(str(who[n].seed) for n, _ in students(rep, method))
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(seeds)


def nca_improves_no_c(figs: Path) -> Claim:
    """The paper's claim that NCA also improves accuracy without c: per seed, NCA minus OPD
    (the same seed) on the same held-out items, with a 95% paired cluster-bootstrap interval
    over the task's units (needs per-item results: context_control.json, or a
    context_return.json written since evaluate records them). Reproduced: every seed's
    interval lies above 0; not reproduced: none does, or no more lie above 0 than below;
    partly otherwise, with the counts."""
    from nca_interp.bootstrap import cluster_indices, percentile_ci

    src = next((f for f in (figs / "context_control.json", figs / "context_return.json")
                if f.exists() and "items" in next(iter(analysis.load(f)["results"]
                                                       .values()))), None)
    if src is None:
        return not_run("NCA improves accuracy without c (vs OPD, same seed)",
                       "needs per-item evaluation results")
    rep = analysis.load(src)
    diffs, cis = [], []
    for name, r in students(rep, "nca"):
        found = partner(rep, name, "opd")
        opd = found[1] if found else None
        if opd is None:
            continue
        a = np.array(r["items"]["won_no_c"], float)
        b = np.array(opd["items"]["won_no_c"], float)
        diffs.append(float(a.mean() - b.mean()))
        boots = [a[i].mean() - b[i].mean() for i in cluster_indices(r["items"]["unit"], 2000, 0)]
        cis.append([float(v) for v in percentile_ci(np.array(boots))])
    if not diffs:
        return Claim("NCA improves accuracy without c (vs OPD, same seed)", "-", "-",
                     "not measurable", "needs OPD and NCA of the same seed")
    flags = [lo > 0 for lo, _ in cis]
    verdict, reason = _verdict(flags, mean_on_side=float(np.mean(diffs)) > 0), ""
    worse = sum(hi < 0 for _, hi in cis)
    if verdict == "partly" and worse >= sum(flags):  # worse seeds count against better ones
        verdict = "not reproduced"
    if verdict != "reproduced" and any(flags):
        reason = (f"{sum(flags)} seed pairs better, {worse} worse, "
                  f"{len(cis) - sum(flags) - worse} within the interval")
    if verdict == "reproduced" and len(flags) < 3:  # every pair clears, but too few pairs
        verdict, reason = "partly", (f"clear in the {len(flags)} seed "
                                     f"pair{'s' * (len(flags) != 1)} measured; 3 needed")
    return Claim("NCA improves accuracy without c (vs OPD, same seed)",
                 f"NCA - OPD {_spread(diffs)} ({len(diffs)} seed "
                 f"pair{'s' * (len(diffs) != 1)})",
                 "95% paired intervals " + ", ".join(f"[{lo:+.3f}, {hi:+.3f}]"
                                                     for lo, hi in cis),
                 verdict, reason, coverage=(len(flags), len(flags)))


# How much of the teacher's use of c an NCA student must keep to count as reading c: a student
# whose reads_c is a sliver of the teacher's is measurably not blind, but close to it.
READS_C_SHARE = 0.5


def reads_c_verdict(nca: list[dict], teacher: float | None
                    ) -> tuple[str, str, list[bool], str]:
    """The verdict on NCA reading c from its seeds' control cells (reads_c with its 95%
    interval) and the teacher's reads_c: reproduced when every seed's interval lies above 0 and
    their mean is at least READS_C_SHARE of the teacher's; partly when some do, or all do at
    less than that share; not reproduced when none does. Returns the verdict word, its reason,
    each seed's flag and, where the share decided, what it was."""
    flags = [c["reads_c_ci95"][0] is not None and c["reads_c_ci95"][0] > 0 for c in nca]
    if not nca:
        return "not measurable", "not measured here", flags, ""
    if not any(flags):
        return "not reproduced", "NCA is blind to what c says", flags, ""
    mean = float(np.mean([c["reads_c"] for c in nca]))
    if not rules.reads_c(mean, teacher, READS_C_SHARE):
        return "not reproduced", "close to blind", flags, (
            f"NCA reads_c {mean:.3f} is {mean / teacher:.0%} of the teacher's {teacher:.3f}, "
            f"under the {READS_C_SHARE:.0%} the rule asks")
    return _verdict(flags, mean_on_side=mean > 0), "", flags, ""


def nca_reads_context(figs: Path) -> Claim:
    """Robust, not blind: NCA still uses what c says. Each checkpoint is evaluated with c and
    with a control context of c's form that is wrong for the item (`evaluate --control`);
    reads_c = accuracy with c - with the control. Reproduced: every NCA seed's 95% interval of
    reads_c lies above 0 and the NCA seeds' mean reads_c is at least READS_C_SHARE of the
    teacher's; partly: some seeds' intervals above 0, or all of them at less than that share
    (the size against the teacher is named); not reproduced: every one includes 0 or lies
    below (NCA ignores c, so 'no harm' is blindness). The teacher's and OPD's reads_c are the
    reference."""
    f = figs / "context_control.json"
    if not f.exists():
        return not_run("NCA still reads c (not blind to it)",
                       "needs figures/<setting>/context_control.json (evaluate --control)")
    reps = analysis.load(f)

    def cells(method):
        return [r["control"] for r in _runs(reps, method)]

    nca, opd = cells("nca"), cells("opd")
    base = [r["control"] for _, r in others(reps)]
    teacher = base[0]["reads_c"] if base else None  # step 0: the teacher but cross-model
    verdict, reason, flags, share = reads_c_verdict(nca, teacher)
    if len(base) > 1:  # cross-model: NCA is judged against its own start, not the teacher
        share = share.replace("the teacher's", "step 0's")
    why = [reason] if reason else []
    if verdict == "partly" and not all(flags):  # how many seeds, how much against the teacher
        why.append(f"{sum(flags)} of {len(flags)} seeds' intervals above 0; NCA reads_c at "
                   f"most {max(c['reads_c'] for c in nca):.3f}"
                   + (f", {'step 0' if len(base) > 1 else 'the teacher'}'s {teacher:.3f}"
                      if base else ""))
    elif share:
        why.append(f"{sum(flags)} of {len(flags)} seeds' intervals above 0, but {share}")
    if nca and len(nca) < 3:
        why.append(f"in {_seeds(reps, 'nca')}; 3 seeds needed to generalise")
    return Claim("NCA still reads c (not blind to it)",
            f"NCA reads_c {_spread([c['reads_c'] for c in nca])} "
            f"({_seeds(reps, 'nca')} with the control run)",
            (f"step 0 {base[0]['reads_c']:.3f}; teacher {base[1]['reads_c']:.3f}" if len(base) > 1
             else f"teacher {_spread([c['reads_c'] for c in base])}") + "; OPD "
            f"{_spread([c['reads_c'] for c in opd])} (accuracy with c - with a wrong c of the "
            "same form)", verdict, "; ".join(why), coverage=(len(flags), len(nca)))


def _floor(figs: Path) -> float | None:
    """The anisotropy floor of the NCA runs' layer cosines: the highest per-layer mean cosine
    between views of *different* items (layer_sim's `cos_other`) over the NCA seeds; None where
    a layer_sim report has no `cos_other`."""
    ls = analysis.load(figs / "layer_sim.json")
    floors = [max(r["cos_other"][1:]) for r in _runs(ls, "nca") if "cos_other" in r]
    return max(floors) if floors else None


PAPER_COS = 0.997  # the 8B model's threshold for near-identical views


def scaled_cos(floor: float, threshold: float = PAPER_COS) -> float:
    """The paper's threshold scaled to this model: the same share of the way from the cosine
    two *different* items already have (the different-item floor, this model's anisotropy) to
    1, i.e. (cos - floor) / (1 - floor) >= threshold."""
    return floor + threshold * (1.0 - floor)


def _identical_verdict(nca: list[list[float]], opd: list[list[float]], threshold: float
                       ) -> tuple[str, str]:
    mins = [min(r) for r in nca]
    flags = [m >= threshold for m in mins]
    if any(flags):
        return _verdict(flags), ""
    if all(all(a > b for a, b in zip(n, o)) for n, o in zip(nca, opd)):  # another claim
        return "not reproduced", (f"no seed reaches {threshold:.4g}; above OPD at every "
                                  "layer, which is a different claim")
    return "not reproduced", ""


def nca_identical(figs: Path) -> Claim:
    """With NCA the two views' hidden states stay near-identical: cosine >= 0.997 (the 8B
    paper's threshold) at every layer (response positions) in every seed; partly: above OPD's
    at every layer. Beside it, the same rule at the threshold scaled to this model
    (`scaled_cos` of the different-item floor, where layer_sim measured it). When views of
    *different* items already reach 0.997 at some layer, the 8B threshold says nothing: not
    measurable."""
    nca, base, rnd = _layer_cos(figs, "nca")
    opd, _, _ = _layer_cos(figs, "opd")
    floor = _floor(figs)
    mins = [min(r) for r in nca]
    verdict, reason = _identical_verdict(nca, opd, PAPER_COS)
    if floor is not None and floor >= PAPER_COS:
        verdict, reason = "not measurable", f"different items already reach {PAPER_COS}"
    also = ()
    if floor is not None:
        t = scaled_cos(floor)
        also = ((f"threshold scaled to this model ({t:.4g})",
                 *_identical_verdict(nca, opd, t)),)
    floor_text = "different-item floor not measured (older layer_sim run)" if floor is None \
        else f"different-item floor up to {floor:.3f}"
    return Claim("NCA keeps the views near-identical (cos >= 0.997 every layer)",
                 f"lowest layer cos {_spread(mins)}",
                 f"OPD lowest {_spread([min(r) for r in opd])}; step 0 {min(base):.3f}; random "
                 f"init {min(rnd):.3f}; {floor_text}", verdict, reason,
                 coverage=(len(mins), len(mins)), also=also)


def _later_half(r: dict, half: int) -> tuple[float, float]:
    """A layer_sim row's mean cosine over the later half of its layers and that mean's
    standard error: each layer's (cos_std / sqrt(n_examples)) averaged, as if the layers moved
    together (the conservative case: neighbouring layers' errors are correlated)."""
    cos = r["cos"][1:][half:]
    std = (r.get("cos_std") or [0.0] * len(r["cos"]))[1:][half:]
    n = max(1, r.get("n_examples", 1))
    return float(np.mean(cos)), float(np.mean(std)) / n ** 0.5


def opd_gap(figs: Path) -> Claim:
    """OPD leaves a gap in the middle and late layers: its mean cos over the later half of the
    layers is below the step-0 model's in every seed (a gap the teacher already has is not
    OPD's), each seed judged by the 95% interval of its difference from step 0 (standard
    errors from layer_sim's per-layer spread over examples)."""
    rep = analysis.load(figs / "layer_sim.json")
    ls = rep["results"]
    opd_rows = _runs(rep, "opd")
    base_row = next(r for n, r in others(rep) if n != "random_init")
    half = (len(base_row["cos"]) - 1) // 2
    b, b_se = _later_half(base_row, half)
    late = [_later_half(r, half) for r in opd_rows]
    diffs = [(v - b, 1.96 * (se ** 2 + b_se ** 2) ** 0.5) for v, se in late]
    flags = [d + w < 0 for d, w in diffs]
    rnd = float(np.mean(ls["random_init"]["cos"][1:][half:]))
    return Claim("OPD leaves a gap in middle / late layers (later-half cos below step 0's)",
                 f"later-half cos {_spread([v for v, _ in late])}; OPD - step 0 per seed "
                 + ", ".join(f"{d:+.3f} [{d - w:+.3f}, {d + w:+.3f}]" for d, w in diffs),
                 f"step 0 {b:.3f}; random init {rnd:.3f}",
                 _verdict(flags, mean_on_side=float(np.mean([d for d, _ in diffs])) < 0),
                 coverage=(len(flags), len(flags)))


def orthogonal(figs: Path) -> Claim:
    """OPD's gradient and the context view's are near-orthogonal: at every checkpoint of the
    OPD runs (seed 0, and further seeds where grad_align_opd_s<seed>.json exists), the
    cross-fitted angle opd~ctx lies in 75-105 degrees, and both terms' noise floors (the angle
    between their two half batches) are below 75 degrees, so the angle is not what two
    noise-dominated gradients give. Checkpoints where a term is within its own sampling noise
    (no angle) or a floor reaches 75 degrees are not judged. Fewer than 3 seeds: said so."""
    from train.layout import grad_files

    runs = {label: [r["global"] for r in analysis.load(f)["results"].values()]
            for label, f in grad_files(figs) if label.startswith("opd")}
    if not runs:  # a sweep row: no gradients aligned, no row (not an empty one)
        raise FileNotFoundError(figs / "grad_align_opd.json")
    if all(r.get("parts") for rows in runs.values() for r in rows):
        return orthogonal_corrected({k: [r["parts"]["pairs"]["opd~ctx"] for r in rows]
                                     for k, rows in runs.items()})
    rows = runs["opd"]  # an older grad_align (no --parts): seed 0's raw cross-fitted angle
    ang = [r["angle_xfit_deg"].get("opd~ctx") for r in rows]
    floors = [max(r["self_angle_deg"].get("opd") or 180, r["self_angle_deg"].get("ctx") or 180)
              for r in rows]
    judged = [(a, f) for a, f in zip(ang, floors) if a is not None and f < 75]
    flags = [75 <= a <= 105 for a, _ in judged]
    if judged:
        verdict = _verdict(flags, total=len(ang))
        reason = (f"{len(judged)} of {len(ang)} checkpoints judged, 1 seed, raw angle; 3 seeds "
                  "and the noise-corrected angle (grad_align --parts) needed")
    else:
        verdict, reason = "not measurable", "a term within its noise, or floors >= 75 deg"
    fmt = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
    return Claim("OPD's gradient is near-orthogonal to the context view's",
                 "opd~ctx " + " ".join(fmt(a) for a in ang) + " deg over training",
                 "noise floors " + " ".join(fmt(f) for f in floors) + " deg", verdict, reason,
                 coverage=(len(judged), len(ang)))


def _band_verdict(status: list[str], mean_on_side: bool, total: int) -> str:
    """An angle claim's verdict from its checkpoints' status: `clear` (the interval inside the
    band), `against` (wholly outside), `straddles` (across a bound): the rule book's unit rule,
    except that when no checkpoint is clear and none is against, the data cannot tell:
    inconclusive, not "not reproduced"."""
    if not status or 2 * len(status) < total:
        return "not measurable"
    if not mean_on_side:
        return "not reproduced"
    if any(s == "clear" for s in status) or any(s == "against" for s in status):
        return _verdict([s == "clear" for s in status], total=total)
    return "inconclusive"


def _band(lo: float, hi: float) -> str:
    return "clear" if 75 <= lo and hi <= 105 else \
        "against" if hi < 75 or lo > 105 else "straddles"


def orthogonal_corrected(runs: dict[str, list[dict]]) -> Claim:
    """The same claim on the noise-corrected angle (grad_align --parts >= 4), pooled over the
    OPD seeds in `runs` (label -> cells over training): a checkpoint counts as near-orthogonal
    when the 95% jackknife interval of the corrected angle lies inside 75-105 degrees, as not
    when it lies wholly outside; checkpoints whose interval straddles a bound, or where a term
    has no signal, are not judged."""
    judged, angles = [], []
    for c in (c for cells in runs.values() for c in cells):
        ci = c.get("angle_ci95_deg")
        if c["angle_corrected_deg"] is None or not ci:
            continue  # a term without signal: no angle to judge
        angles.append(c["angle_corrected_deg"])
        judged.append(_band(*ci))  # straddling a bound is not clear
    n_cells = sum(len(cells) for cells in runs.values())
    seeds = f"{len(runs)} seed" + ("s" if len(runs) > 1 else "")
    if judged:
        mean = float(np.mean(angles))
        verdict = _band_verdict(judged, 75 <= mean <= 105, n_cells)
        reason = (f"{judged.count('clear')} of {len(judged)} checkpoints' intervals inside "
                  f"75-105 deg, {judged.count('straddles')} straddling a bound, mean "
                  f"{mean:.0f} deg, {seeds}" + ("; 3 needed to generalise" if len(runs) < 3
                                                else ""))
    else:
        verdict, reason = "not measurable", "a term has no signal at any checkpoint"

    def fmt(c: dict) -> str:
        return "-" if c["angle_corrected_deg"] is None else f"{c['angle_corrected_deg']:.0f}"

    def ci(c: dict) -> str:
        lo_hi = c.get("angle_ci95_deg")
        return "-" if not lo_hi else f"[{lo_hi[0]:.0f}, {lo_hi[1]:.0f}]"

    def label(k: str) -> str:  # "opd" is seed 0, "opd s<n>" a further seed
        return "" if len(runs) == 1 else ("s0: " if k == "opd" else k[4:] + ": ")

    return Claim("OPD's gradient is near-orthogonal to the context view's",
                 "noise-corrected opd~ctx " + "; ".join(
                     label(k) + " ".join(fmt(c) for c in cells) for k, cells in runs.items())
                 + " deg over training",
                 "95% jackknife intervals " + "; ".join(
                     label(k) + ", ".join(ci(c) for c in cells) for k, cells in runs.items()),
                 verdict, reason, coverage=(len(judged), n_cells))


def nca_new_direction(figs: Path) -> Claim:
    """NCA adds a direction OPD's gradient lacks: in the NCA runs (seed 0, and further seeds
    where grad_align_nca_s<seed>.json exists), the angle between the OPD term's gradient and
    the NCA term's stands clear of alignment. A checkpoint counts when the 95% jackknife
    interval of the noise-corrected angle opd~nca lies wholly above 75 degrees, against when
    it lies wholly below; an older grad_align (no --parts) is judged on the raw cross-fitted
    angle where both terms' noise floors are below 75 degrees. Angles wholly above 105 degrees
    (the NCA term pulls against OPD's) are counted apart. Fewer than 3 seeds: said so."""
    from train.layout import grad_files

    runs = {label: [r["global"] for r in analysis.load(f)["results"].values()]
            for label, f in grad_files(figs) if label.startswith("nca")}
    if not runs:
        raise FileNotFoundError(figs / "grad_align_nca.json")
    cells, judged, opposed, raw = [], [], 0, False
    for rows in runs.values():
        for g in rows:
            c = g.get("parts", {}).get("pairs", {}).get("opd~nca")
            if c is not None:
                a, ci = c["angle_corrected_deg"], c.get("angle_ci95_deg")
                lo, hi = ci if ci and a is not None else (None, None)
            else:  # raw angle: the interval is the angle itself where both floors are low
                raw = True
                a = g["angle_xfit_deg"].get("opd~nca")
                floor = max(g["self_angle_deg"].get("opd") or 180,
                            g["self_angle_deg"].get("nca") or 180)
                lo = hi = a if a is not None and floor < 75 else None
            cells.append(a)
            if lo is None:
                continue
            # a new direction is near-orthogonal: an interval wholly beyond 105 deg opposes
            # OPD's term instead, and one straddling 75 or 105 deg is not clear of either
            judged.append(_band(lo, hi))
            opposed += lo > 105
    seeds = f"{len(runs)} seed" + ("s" if len(runs) > 1 else "")
    if not judged:
        verdict, reason = "not measurable", "a term has no signal at any checkpoint"
    else:
        verdict = _band_verdict(judged, True, len(cells))
        reason = (f"{judged.count('clear')} of {len(judged)} checkpoints' intervals inside "
                  f"75-105 deg, {judged.count('straddles')} straddling a bound, {seeds}") \
            + (", raw angle" if raw else "") \
            + ("; 3 needed to generalise" if len(runs) < 3 else "")
        if opposed:
            reason += (f"; in {opposed} the NCA term opposes OPD's (wholly beyond 105 deg), "
                       "which is not a new direction")
    fmt = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
    return Claim("NCA adds a direction OPD's gradient lacks (opd~nca in NCA runs)",
                 ("raw" if raw else "noise-corrected") + " opd~nca " + " ".join(map(fmt, cells))
                 + " deg over training", "aligned: 0 deg; judged against 75 deg with "
                 + ("each term's noise floor" if raw else "95% jackknife intervals"), verdict,
                 reason, coverage=(len(judged), len(cells)))


HEADS_MIN_CASES = 20  # harm cases for the head verdict: 10 to choose on, 10 to judge on


def _clear(row: dict) -> bool:
    """Removing the chosen heads' reading of c stands clear of removing random heads: on the
    held-out half, both the teacher-forced LD effect and the answers flipped beat the random-
    head draws (one-sided p <= 0.05), the LD interval sits above the null's mean, and the
    chosen heads break fewer controls than they fix harm cases (intervals apart)."""
    e, en, f, fn = (row.get(k) or {} for k in ("effect", "effect_null", "flipped",
                                                "flipped_null"))
    bc = row.get("broken_control")
    return bool(en.get("n") and fn.get("n") and en["p"] <= 0.05 and fn["p"] <= 0.05
                and e["lo"] > en["mean"] and (bc is None or bc["hi"] < f["lo"]))


def heads_carry_harm(figs: Path) -> Claim:
    """OPD's harm runs through a few heads' reading of c, judged on held-out cases (the first
    OPD seed's patching): reproduced when one head, the same whether chosen on either half of
    the harm cases, stands clear of random heads on the other half (`_clear`); partly when only
    2 or 4 heads together do, or the single head chosen differs between the halves; not
    measurable under HEADS_MIN_CASES harm cases."""
    from nca_interp.patching import ABLATE_NOTE, ablate_of, kind_of

    claim = "OPD's harm runs through a few heads reading c (chosen on half the cases)"
    name, r = next(iter(students(analysis.load(figs / "patching.json"), "opd")),
                   (None, None))
    if r is None:
        return Claim(claim, "no OPD run patched", "-", "not measurable")
    n = r.get("harm", {}).get("n", 0)  # harm cases patched (help reports have none)
    rows = r.get("heads", {}).get("rows", [])
    if kind_of(r) != "harm" or n < HEADS_MIN_CASES or not rows:
        why = f"{kind_of(r)} cases patched, not harm cases" if kind_of(r) != "harm" else \
            f"{r['counts']['harm']} harm cases (fewer than {HEADS_MIN_CASES})"
        return Claim(claim, f"{name}: {why}", "-", "not measurable")

    def ci(s: dict) -> str:
        return f"{s['mean']:.2f} [{s['lo']:.2f}, {s['hi']:.2f}]"

    one = rows[0]
    top = [row for row in rows if "effect_null" in row]
    clear = [row["k"] for row in top if _clear(row)]
    stable = one["chosen_on_a"][0] == one["chosen_on_b"][0]
    every = rows[-1]
    measured = (f"{name}, {n} harm cases: k=1 chose {one['chosen_on_a'][0]} on half A, "
                f"{one['chosen_on_b'][0]} on half B; held-out LD effect {ci(one['effect'])}, "
                f"answers flipped {ci(one['flipped'])}; k standing clear: "
                f"{', '.join(map(str, clear)) or 'none'}; all {every['k']} heads: flipped "
                f"{ci(every['flipped'])}")
    null = (f"{one['effect_null']['n']} draws of k random heads neither half chose: k=1 LD "
            f"{one['effect_null']['mean']:.2f} (p {one['effect_null']['p']:.3f}), flipped "
            f"{one['flipped_null']['mean']:.2f} (p {one['flipped_null']['p']:.3f}); percentile "
            f"{one['percentile']:.0f}; broken controls {ci(one['broken_control'])}"
            if one.get("broken_control") and one.get("flipped_null", {}).get("n") else "-")
    null += f"; {ABLATE_NOTE[ablate_of(r)]}"
    if 1 in clear and stable:
        verdict, reason = "reproduced", ""
    elif 1 in clear:
        verdict, reason = "partly", (f"one head stands clear, but half A chose "
                                     f"{one['chosen_on_a'][0]} and half B "
                                     f"{one['chosen_on_b'][0]}")
    elif clear:
        verdict, reason = "partly", (f"no single head stands clear; "
                                     f"{' and '.join(map(str, clear))} heads together do")
    else:
        verdict, reason = "not reproduced", ""
    return Claim(claim, measured, null, verdict, reason)


def _adam(figs: Path) -> dict:
    return analysis.load(figs / "param_delta.json")


def shallow_qk(figs: Path) -> Claim:
    """Updates concentrate in shallow layers, mostly k_proj / q_proj (Adam-normalised size,
    which removes the learning-rate budget): for every checkpoint, the first third of the layers
    moves more than the last third, and k_proj and q_proj rank first among the projection
    and MLP matrices."""
    pd = _adam(figs)
    mats = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    flags, cells = [], []
    n = pd["n_layers"]
    third = max(1, n // 3)
    for path, r in pd["results"].items():
        lay = r["per_layer_adam"]
        if lay.get("0") is None:
            return Claim("Updates concentrate in shallow layers, mostly k/q", "-", "-",
                         "not measurable", "no learning-rate record")
        shallow = np.mean([lay[str(i)] for i in range(third)])
        deep = np.mean([lay[str(i)] for i in range(n - third, n)])
        mod = r["per_module_adam"]
        top2 = sorted(mats, key=lambda m: -(mod.get(m) or 0))[:2]
        flags.append(shallow > deep and set(top2) == {"q_proj", "k_proj"})
        cells.append(f"{Path(path).name}: shallow/deep {shallow / deep:.2f}, top {'+'.join(top2)}")
    return Claim("Updates concentrate in shallow layers, mostly k/q", "; ".join(cells),
                 "ratio 1 = uniform over depth; 7 matrix types", _verdict(flags),
                 coverage=(len(flags), len(flags)))


def updates_differ(figs: Path) -> Claim:
    """NCA's updates differ from OPD's: over every pair of runs in param_delta.json, each
    cross-method cosine cos(dOPD, dNCA) is below each within-method (seed-to-seed) cosine,
    a complete separation (with two seeds per method, the most extreme of the label
    permutations); partly: the cross-method mean is below the within-method mean."""
    rep = _adam(figs)
    pairs, who = rep.get("all_pairs", {}), by_name(rep)
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
    if max(cross) < min(within) and p <= 0.05:
        verdict = "reproduced"
    elif all(np.mean(cross) < np.mean(w) for w in by_method.values() if w):
        # below each method's own seed-to-seed cosine: OPD's seeds agree more with each
        # other than with NCA's, and NCA's likewise
        verdict = "partly"
        if p > 0.05:
            reason = (f"the direction only: permutation p {p:.2f}, at best {p_min:.2f} with "
                      "these seeds")
    else:
        verdict = "not reproduced"
    sizes = _update_sizes(figs)
    ratio = _size_ratio(figs)
    if ratio is not None and not 1 / SIZE_MATCH <= ratio <= SIZE_MATCH:
        if verdict != "not reproduced":
            sized = (figs.parent / f"{figs.name}_size" / "param_delta.json").exists()
            verdict = "partly"
            reason = (f"NCA's update is {ratio:.2f}x OPD's in size: the direction difference "
                      "may come from the larger step; "
                      + ("the size-matched OPD row decides" if sized else
                         "needs an OPD run matched to NCA's size: python -m "
                         f"train.size_control --setting {figs.name}"))
    elif ratio is not None:
        sizes += f" (sizes matched: NCA / OPD {ratio:.2f})"
    return Claim("NCA's updates differ from OPD's", f"cos(dOPD, dNCA) {_spread(cross)}",
                 f"seed-to-seed (same method) {_spread(within)}; method-label permutation p = "
                 f"{p:.3f} (exact, {n_labelings} labelings; smallest possible "
                 f"{p_min:.3f}){sizes}", verdict, reason)


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


# Update sizes within this factor count as magnitude-matched: a direction difference between
# updates of unequal size can be a magnitude effect (a longer Adam path bends further).
SIZE_MATCH = 1.1


def _size_ratio(figs: Path) -> float | None:
    """Mean Adam-normalised update size of the NCA runs over that of the OPD runs."""
    rep = _adam(figs)
    size = {m: [v["global_adam"] for v in _runs(rep, m) if v.get("global_adam") is not None]
            for m in ("opd", "nca")}
    if not size["opd"] or not size["nca"]:
        return None
    return float(np.mean(size["nca"]) / np.mean(size["opd"]))


def _update_sizes(figs: Path) -> str:
    """'; Adam-normalised update size NCA / OPD ...' from param_delta's per-checkpoint totals
    (a direction difference can hide a magnitude difference), or '' where absent."""
    rep = _adam(figs)
    size = {m: [v["global_adam"] for v in _runs(rep, m) if v.get("global_adam") is not None]
            for m in ("opd", "nca")}
    if not size["opd"] or not size["nca"]:
        return ""
    return (f"; update size (Adam-normalised) OPD {_spread(size['opd'])}, NCA "
            f"{_spread(size['nca'])}")


def size_matched(figs: Path) -> Claim:
    """NCA's update differs from OPD's in direction, not only in size (`train.size_control`:
    OPD retrained with its lr scaled to NCA's total movement). Over every pair of runs:
    reproduced when each cos(d sized OPD, d NCA) is below each seed-to-seed cosine of the two
    groups and the exact label-permutation p <= 0.05, with the sizes matched within
    SIZE_MATCH; partly when the cross-group mean is below the within-group mean; the same
    seed's cos(d OPD, d sized OPD) says how far size alone turns an OPD update."""
    rep = analysis.load(figs / "param_delta.json")
    # results are keyed by path, all_pairs by run name
    who = by_name(rep)
    kind = {n: i.method for n, i in who.items() if i.student}
    size = {k: [v["global_sq"] ** 0.5 for v in _runs(rep, k)] for k in ("opd", "opdsized", "nca")}
    cross, within, same_seed, sized = [], [], [], {}
    for key, v in rep["all_pairs"].items():
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
        return Claim(claim, "-", "-", "not measurable", "needs two seeds of each")
    # the permutation compares OPD with NCA: the size-matched OPD takes OPD's label
    p, p_min, n_labelings = label_permutation_p(
        sized, {n: "opd" if m == "opdsized" else m for n, m in kind.items()})
    ratio = float(np.mean(size["opdsized"]) / np.mean(size["nca"]))
    reason = ""
    if max(cross) < min(within) and p <= 0.05:
        verdict = "reproduced"
    elif np.mean(cross) < np.mean(within):
        verdict = "partly"
        if p > 0.05:
            reason = f"permutation p {p:.2f}, at best {p_min:.2f} with these seeds"
    else:
        verdict = "not reproduced"
    if not 1 / SIZE_MATCH <= ratio <= SIZE_MATCH:
        verdict, reason = "not measurable", f"sizes not matched: sized OPD / NCA {ratio:.2f}"
    made = read_json((figs / "manifest.json")) \
        if (figs / "manifest.json").exists() else {}
    if made.get("rounds"):  # how the sizes were matched: lr multiplier of the last round
        last = made["rounds"][-1]
        claim += (f" (OPD at lr x{last['lr_multiplier']:.2f}, round {last['round']} of size "
                  "matching)")
    return Claim(claim, f"cos(d sized OPD, d NCA) {_spread(cross)}",
            f"seed-to-seed (same group) {_spread(within)}; permutation p = {p:.3f} (exact, "
            f"{n_labelings} labelings; smallest possible {p_min:.3f}); size alone: cos(d OPD, "
            f"d sized OPD) same seed {_spread(same_seed)}; update norm OPD {_spread(size['opd'])}, "
            f"sized OPD {_spread(size['opdsized'])}, NCA {_spread(size['nca'])} (sized OPD / "
            f"NCA {ratio:.2f})", verdict, reason)


CLAIMS: tuple[Callable[[Path], Claim | None], ...] = (internalizes, degrades, nca_prevents,
                                               harm_not_drift,
                                               nca_keeps_context, nca_reads_context,
                                               nca_improves_no_c, longer,
                                               nca_identical,
                                               opd_gap, orthogonal, nca_new_direction,
                                               shallow_qk, updates_differ,
                                               heads_carry_harm)


def claims(figs: Path) -> list[Claim]:
    """Every claim whose JSON exists in `figs`."""
    out = []
    for fn in CLAIMS:
        try:
            claim = fn(figs)
        except FileNotFoundError:
            continue
        if claim is not None:
            out.append(claim)
    if (figs.parent / f"{figs.name}_size" / "param_delta.json").exists():
        out.append(size_matched(figs.parent / f"{figs.name}_size"))
    return out


def table(figs: Path) -> str:
    if figs.name in POOLED:
        settings = load().settings
        try:
            found = pooled_claims(POOLED[figs.name], figs.parent)
            found += [size_matched(figs.parent / f"{m}_size") for m in POOLED[figs.name]
                      if (figs.parent / f"{m}_size" / "param_delta.json").exists()]
        except FileNotFoundError:  # a member not run yet: say how to run it
            found = [not_run("harm verdicts pooled over " + ", ".join(POOLED[figs.name]),
                             "; ".join(f"`{settings[m].command(m)}`"
                                       for m in POOLED[figs.name]))]
    else:
        found = claims(figs)
    rows = ["| claim | measured | null / control | verdict |", "|---|---|---|---|"]
    rows += [f"| {c.name} | {c.measured} | {c.null} | **{c.cell}** |" for c in found]
    return "\n".join(rows)


def claims_block(name: str) -> Block:
    return Block.named(f"claims:{name}", "python -m train.claims --write")


RULES = Block.named("rules", "python -m train.claims --write; train/rules.py")


def refresh(text: str, root: Path = Path("figures")) -> str:
    """`text` with every claims block, and the rule book's block, regenerated."""
    for name in re.findall(r"<!-- claims:([\w-]+):begin", text):
        text = claims_block(name).replace(text, table(root / name), f"claims block {name}")
    return RULES.replace(text, rules.markdown(), optional=True)


DOCS = ("README.md", "docs/index.md", "docs/real_model.md", "docs/results/sysprompt_kbs.md",
        "docs/method.md")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("settings", nargs="*", default=[])
    ap.add_argument("--figures", default="figures")
    ap.add_argument("--write", action="store_true",
                    help="regenerate every claims block of " + ", ".join(DOCS))
    args = ap.parse_args(argv)
    for name in args.settings:
        print(f"{name}\n{table(Path(args.figures) / name)}\n")
    if args.write:
        for doc in map(Path, DOCS):
            if doc.exists():
                write_text(doc, refresh(doc.read_text(), Path(args.figures)))


if __name__ == "__main__":
    main()
