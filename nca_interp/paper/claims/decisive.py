"""The decisive table: does NCA prevent OPD's harm *while still reading c*?

The paper's central outcome has three parts, each a claim of its own in `harm`: NCA's harm below
OPD's (`nca_prevents`), NCA's accuracy with c kept at step 0's (`nca_keeps_context`), and NCA's
accuracy with c above its accuracy with a wrong c of the same form (`nca_reads_context`). NCA
can avoid the harm by not reading c at all; only the three together show the outcome. This
table puts them side by side for each method (OPD's row is the comparison) and reads them
together by the rule book's "together" rule (`rules.together`).
"""

from __future__ import annotations

from pathlib import Path

from nca_interp import analysis
from nca_interp.identity import others
from nca_interp.paper import judge, rules
from nca_interp.paper.claims.claim import base_of, runs_of, spread_text
from nca_interp.paper.claims.harm import (
    gain_over_step0,
    nca_keeps_context,
    nca_prevents,
    nca_reads_context,
    reads_c_pooled,
    reads_ratio,
)
from nca_interp.paper.claims.stats import control_unit
from nca_interp.paper.layout import CONTEXT_CONTROL, CONTEXT_RETURN

__all__ = ["rows", "table"]

METHODS = ("opd", "nca")


def _estimate(e: judge.Estimate | None, signed: bool = True) -> str:
    if e is None:
        return "-"
    f = "+.3f" if signed else ".3f"
    return f"{e.point:{f}} [{e.lo:{f}}, {e.hi:{f}}]"


def _reads(figs: Path, method: str) -> tuple[str, str]:
    """`method`'s reads_c (each seed's point, and the pooled estimate with its interval where
    the control run keeps per-item outcomes) and its share of the teacher's (a description:
    the ratios rule)."""
    ctl = figs / CONTEXT_CONTROL
    if not ctl.exists():
        return "not run (no control run)", "-"
    reps = analysis.load(ctl)
    runs = runs_of(reps, method)
    cells = [r.control for r in runs]
    if not cells:
        return "-", "-"
    items = [r.items_ for r in runs]
    # each seed's interval by the few-clusters rule, as the reads claim judges it
    units = [e for e in (control_unit(r.control, r.items_, r.n_units) for r in runs)
             if e is not None]
    pooled, _ = reads_c_pooled(units, items)
    shown = pooled if pooled is not None else (units[0] if len(units) == 1 else None)
    text = f"{spread_text([c['reads_c'] for c in cells])}"
    if shown is not None:
        text += f"; {'pooled ' if pooled is not None else ''}{_estimate(shown, signed=False)}"
    teacher = others(reps)
    if not teacher:
        return text, "-"
    point, ci = reads_ratio(cells, teacher[0][1].control, items, teacher[0][1].items_)
    if point is None:
        share = "not measurable (the teacher's reads_c interval reaches 0)"
    elif ci is None:
        share = f"{point:.0%} (no interval: no per-item control outcomes)"
    else:
        share = f"{point:.0%} [{ci[0]:.0%}, {ci[1]:.0%}]"
    whose = "step 0's" if len(teacher) > 1 else "the teacher's"  # cross-model: its own start
    return text, f"{share} of {whose} {teacher[0][1].control['reads_c']:.3f}"


def rows(figs: Path) -> list[str]:
    """One row per method: its seeds, harm, accuracy with c less step 0's (paired, pooled over
    seeds), reads_c and its share of the teacher's."""
    rep = analysis.load(figs / CONTEXT_RETURN)
    base = base_of(rep)
    out = []
    for method in METHODS:
        runs = runs_of(rep, method)
        if not runs:
            continue
        _, _, paired, units, pooled = gain_over_step0(figs, method)
        gain = pooled if pooled is not None else units[0]
        reads, share = _reads(figs, method)
        out.append(f"| {method.upper()} | {len(runs)} | {spread_text([r.harm for r in runs])} | "
                   f"{spread_text([r.correct_c for r in runs])} | "
                   f"{_estimate(gain)}{'' if paired else ' (unpaired)'} | {reads} | {share} |")
    head = ["| method | seeds | harm (mean (min to max) over seeds) | accuracy with c | "
            f"with c - step 0's ({base.correct_c:.3f}), 95% | reads_c = with c - with a wrong c "
            "| reads_c's share of the teacher's (step 0's) |", "|---|---|---|---|---|---|---|"]
    return head + out


def table(figs: Path) -> str:
    """The decisive table of one setting and its reading: the three NCA verdicts (each as its
    own claim judges it, before the multiplicity correction) and the together rule over them."""
    if not (figs / CONTEXT_RETURN).exists():
        return ""
    parts = [nca_prevents(figs), nca_keeps_context(figs)]
    if (figs / CONTEXT_CONTROL).exists():
        parts.append(nca_reads_context(figs))
    words = [c.verdict for c in parts] + ([] if len(parts) == 3 else ["not measurable"])
    lines = rows(figs)
    lines.append("")
    lines += [f"- {c.name}: **{c.verdict}**" + (f" ({c.reason})" if c.reason else "")
              for c in parts]
    if len(parts) < 3:
        lines.append("- NCA still reads c (not blind to it): **not measurable** (no control "
                     "run with a wrong c)")
    lines.append(f"- Together (prevents the harm *and* keeps what c gives *and* still reads "
                 f"it; the rule book's together rule): **{rules.together(words)}**")
    return "\n".join(lines)
