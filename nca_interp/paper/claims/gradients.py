"""Claims about the loss terms' gradients (grad_align): OPD's is near-orthogonal to the context
view's, NCA's adds a direction OPD's lacks.

The seed is the unit: a seed's checkpoints over training (each with the 95% jackknife interval
of its noise-corrected angle, `grad_align --parts`) are averaged into one estimate without
narrowing its interval (`stats.average`), the seeds are pooled (`stats.pool_units`) and
`judge.within_band` decides against the rule book's band (`rules.ORTHO_BAND`). A checkpoint
whose terms' supports could not reach the band's edge (`rules.SUPPORT_MIN`) is not judged:
its angle says nothing about the terms, only about where their gradients live. Nor is one whose
noise-corrected cosine left [-1, 1]: a clipped 0 or 180 degrees is no angle.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nca_interp import analysis
from nca_interp.errors import UsageError
from nca_interp.grad_align import undefined_terms
from nca_interp.paper import judge, rules
from nca_interp.paper.claims.claim import Claim
from nca_interp.paper.claims.stats import average, pool_units

__all__ = ["nca_new_direction", "orthogonal", "orthogonal_corrected"]


def support_bound(modules: dict, a: str, b: str) -> float | None:
    """The largest cosine two gradients can reach given each module's gradient norm (a
    grad_align cell's `modules`: name -> {"norm": {term: norm}}): sum_m |a_m| |b_m| /
    (|a| |b|). None where the cell records no module norms."""
    if not modules:
        return None
    na = np.array([m["norm"][a] for m in modules.values()], float)
    nb = np.array([m["norm"][b] for m in modules.values()], float)
    den = float(np.linalg.norm(na) * np.linalg.norm(nb))
    return float(na @ nb / den) if den > 0 else None


def _gather(figs: Path, method: str, pair: str) -> dict[str, list[dict]]:
    """Label ("opd", "opd s1", ...) -> the checkpoints' cells of `pair`, each with its
    support bound; FileNotFoundError where no grad_align report of `method` exists."""
    from nca_interp.paper.layout import grad_files

    terms = pair.split("~")
    runs: dict[str, list[dict]] = {}
    for label, f in grad_files(figs):
        if not label.startswith(method):
            continue
        cells = []
        report = analysis.load(f)
        undefined = undefined_terms(report)  # a term without a direction gives no angle
        for name, r in report.results.items():
            parts = r.global_.get("parts")
            if not parts:
                raise UsageError(f"{f} has no noise-corrected angles: rerun python -m "
                                 "nca_interp.grad_align with --parts 4")
            cell = dict(parts["pairs"][pair])
            if any(t in (undefined.get(name) or {}) for t in terms):
                cell.update(cos_corrected=None, ci95=None, angle_corrected_deg=None,
                            angle_ci95_deg=None, splits=None)
            cells.append({**cell, "support": support_bound(r.modules or {}, *terms)})
        runs[label] = cells
    if not runs:
        raise FileNotFoundError(figs / f"grad_align_{method}.json")
    return runs


def _seed_units(runs: dict[str, list[dict]]
                ) -> tuple[list[judge.Estimate], list[str], int, int]:
    """Each seed's checkpoints averaged into one unit (checkpoints with no signal, a
    noise-corrected cosine outside [-1, 1] included (`rules.cosine_in_range`), or whose
    supports cannot reach the band, left out); the labels of the seeds judged; how many
    checkpoints had no signal; how many were left out for their supports."""
    units, labels, silent, unsupported = [], [], 0, 0
    for label, cells in runs.items():
        ests = []
        for c in cells:
            a, ci = c.get("angle_corrected_deg"), c.get("angle_ci95_deg")
            if a is None or not ci or not rules.cosine_in_range(c.get("cos_corrected")):
                silent += 1
            elif c["support"] is not None and c["support"] < rules.SUPPORT_MIN:
                unsupported += 1
            else:
                ests.append(judge.Estimate(a, min(ci[0], a), max(ci[1], a)))
        if ests:
            units.append(average(ests))
            labels.append(label)
    return units, labels, silent, unsupported


def _label(k: str, runs: dict) -> str:  # "opd" is seed 0, "opd s<n>" a further seed
    return "" if len(runs) == 1 else ("s0: " if " " not in k else k.split(" ", 1)[1] + ": ")


def trained_seeds(figs: Path, method: str) -> int:
    """How many seeds of `method` this setting trained (its evaluation's students; 0 where
    it has none): the units the coverage rule counts, however many were analysed."""
    from nca_interp.paper.claims.claim import runs_of
    from nca_interp.paper.layout import CONTEXT_RETURN

    f = figs / CONTEXT_RETURN
    return len(runs_of(analysis.load(f), method)) if f.exists() else 0


def _judge_band(name: str, runs: dict[str, list[dict]], pair: str, oppose: bool,
                trained: int = 0) -> Claim:
    """The band claim on `pair` over the seeds in `runs`; `oppose`: say where the angle lies
    wholly beyond the band's upper bound (a term pulling against the other); `trained`: the
    seeds the setting trained, the coverage rule's units where more than were analysed."""
    lo, hi = rules.ORTHO_BAND
    units, labels, silent, unsupported = _seed_units(runs)
    pooled = pool_units(units)
    n = max(len(runs), trained)
    if not units or 2 * len(units) < n:
        j = judge.Judgement("not measurable", f"{len(units)} of {n} seeds trained have an "
                            "angle to judge (not analysed, no signal, or supports that cannot "
                            "reach the band)")
    else:
        j = judge.within_band(units, pooled, lo, hi)
    extra = [f"{n} seed{'s' * (n != 1)}" + (f"; {rules.MIN_SEEDS} needed to generalise"
                                            if n < rules.MIN_SEEDS else "")]
    if silent:
        extra.append(f"{silent} checkpoint{'s' * (silent != 1)} without signal left out (no "
                     "noise-corrected cosine, or one outside [-1, 1])")
    if unsupported:
        extra.append(f"{unsupported} checkpoint{'s' * (unsupported != 1)} left out: their "
                     "supports cannot reach "
                     f"cos {np.cos(np.radians(lo)):.2f}")
    decide = pooled if pooled is not None else (units[0] if units else None)
    if oppose and decide is not None:
        beyond = sum(u.lo > hi for u in units)
        if decide.lo > hi:
            extra.append(f"the NCA term opposes OPD's (beyond {hi:g} deg), which is not a "
                         "new direction")
        elif beyond:
            extra.append(f"in {beyond} seed{'s' * (beyond != 1)} the NCA term opposes "
                         f"OPD's (wholly beyond {hi:g} deg)")
    fmt = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
    def angle(c: dict) -> float | None:  # no angle where the estimate left [-1, 1]
        return c.get("angle_corrected_deg") if rules.cosine_in_range(c.get("cos_corrected")) \
            else None

    by_seed = "; ".join(_label(k, runs) + " ".join(fmt(angle(c)) for c in cells)
                        for k, cells in runs.items())
    seeds = ", ".join(f"{(_label(k, runs) or '')}{u.point:.0f} [{u.lo:.0f}, {u.hi:.0f}]"
                      for k, u in zip(labels, units))
    bounds = [c["support"] for cells in runs.values() for c in cells
              if c["support"] is not None]
    return Claim(name,
                 f"noise-corrected {pair} {by_seed} deg over training; per seed {seeds}"
                 + (f"; pooled {decide.point:.0f} [{decide.lo:.0f}, {decide.hi:.0f}]"
                    if pooled is not None else ""),
                 f"band {lo:g}-{hi:g} deg (rules.ORTHO_BAND); seed intervals: checkpoints' 95% "
                 "jackknife intervals averaged"
                 + (f"; largest cosine the supports allow {min(bounds):.2f}-{max(bounds):.2f}"
                    if bounds else "; supports not recorded (older grad_align)"),
                 j.verdict, "; ".join(x for x in (j.reason, *extra) if x),
                 coverage=(len(units), n),
                 detectable="" if j.mde is None else f"{j.mde:.0f} deg", p=j.p)


def orthogonal(figs: Path) -> Claim:
    """OPD's gradient and the context view's are near-orthogonal: in the OPD runs (seed 0,
    and further seeds where grad_align_opd_s<seed>.json exists), the noise-corrected angle
    opd~ctx lies inside the band, seeds as units."""
    return orthogonal_corrected(_gather(figs, "opd", "opd~ctx"), trained_seeds(figs, "opd"))


def orthogonal_corrected(runs: dict[str, list[dict]], trained: int = 0) -> Claim:
    """`orthogonal` on gathered cells (label -> opd~ctx cells over training)."""
    for cells in runs.values():
        for c in cells:
            c.setdefault("support", None)
    return _judge_band("OPD's gradient is near-orthogonal to the context view's", runs,
                       "opd~ctx", oppose=False, trained=trained)


def nca_new_direction(figs: Path) -> Claim:
    """NCA adds a direction OPD's gradient lacks: in the NCA runs, the noise-corrected angle
    between the OPD term's gradient and the NCA term's lies inside the band (near-orthogonal:
    a new direction), seeds as units. Wholly beyond the band's upper bound the NCA term
    opposes OPD's: not a new direction, and said so."""
    return _judge_band("NCA adds a direction OPD's gradient lacks (opd~nca in NCA runs)",
                       _gather(figs, "nca", "opd~nca"), "opd~nca", oppose=True,
                       trained=trained_seeds(figs, "nca"))
