"""The claim about attention heads (patching): OPD's harm runs through a few heads reading c."""

from __future__ import annotations

from pathlib import Path

from nca_interp import analysis
from nca_interp.identity import students
from nca_interp.paper import judge, rules
from nca_interp.paper.claims.claim import Claim
from nca_interp.paper.layout import PATCHING

__all__ = ["heads_carry_harm"]


def _clear(row: dict) -> bool:
    """Removing the chosen heads' reading of c stands clear of removing random heads: on the
    held-out half, both the teacher-forced LD effect and the answers flipped beat the random-
    head draws (one-sided p <= 0.05), the LD interval sits above the null's mean, the answers
    flipped exceed the null's mean by `rules.HEADS_MARGIN` (the smallest-effect rule), and the
    chosen heads break fewer controls than they fix harm cases (intervals apart)."""
    e, en, f, fn = (row.get(k) or {} for k in ("effect", "effect_null", "flipped",
                                                "flipped_null"))
    bc = row.get("broken_control")
    return bool(en.get("n") and fn.get("n") and en["p"] <= rules.ALPHA and fn["p"] <= rules.ALPHA
                and e["lo"] > en["mean"] and f["mean"] - fn["mean"] >= rules.HEADS_MARGIN
                and (bc is None or bc["hi"] < f["lo"]))



def heads_carry_harm(figs: Path) -> Claim:
    """OPD's harm runs through a few heads' reading of c, judged on held-out cases (the first
    OPD seed's patching): reproduced when one head, the same whether chosen on either half of
    the harm cases, stands clear of random heads on the other half (`_clear`); partly when only
    2 or 4 heads together do, or the single head chosen differs between the halves; not
    measurable under rules.HEADS_MIN_CASES harm cases."""
    from nca_interp.patching import ABLATE_NOTE, ablate_of, kind_of

    claim = "OPD's harm runs through a few heads reading c (chosen on half the cases)"
    name, r = next(iter(students(analysis.load(figs / PATCHING), "opd")),
                   (None, None))
    if r is None:
        return Claim(claim, "no OPD run patched", "-", "not measurable")
    n = (r.harm or {}).get("n", 0)  # harm cases patched (help reports have none)
    rows = (r.heads or {}).get("rows", [])
    if kind_of(r) != "harm" or n < rules.HEADS_MIN_CASES or not rows:
        why = f"{kind_of(r)} cases patched, not harm cases" if kind_of(r) != "harm" else \
            f"{r.counts['harm']} harm cases (fewer than {rules.HEADS_MIN_CASES})"
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
    e = one["effect"]  # the held-out k=1 LD effect's interval: what the patching can detect
    mde = judge.mde_of_halfwidths([(e["hi"] - e["lo"]) / 2])
    return Claim(claim, measured, null, verdict, reason,
                 detectable="" if mde is None else f"{mde:.2f} LD", p=_p(top, clear))


def _p(top: list[dict], clear: list[int]) -> float | None:
    """The heads claim's p (rules: multiplicity): a row's random-draw p's must both pass,
    so its p is the larger; k=1 where it is clear (reproduced), else the smallest over the
    rows standing clear (partly), else over every row with a null."""
    rows = [r for r in top if r.get("effect_null", {}).get("n") and
            r.get("flipped_null", {}).get("n")]
    if not rows:
        return None
    ps = {r["k"]: max(r["effect_null"]["p"], r["flipped_null"]["p"]) for r in rows}
    if 1 in clear and 1 in ps:
        return ps[1]
    return min(ps[k] for k in clear if k in ps) if clear else min(ps.values())
