"""The claim about attention heads (patching): OPD's harm runs through a few heads reading c."""

from __future__ import annotations

from pathlib import Path

from nca_interp import analysis
from nca_interp.identity import students
from nca_interp.paper import judge, rules
from nca_interp.paper.claims.claim import Claim
from nca_interp.paper.layout import CONTEXT_RETURN, PATCHING

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
    """OPD's harm runs through a few heads' reading of c, judged on held-out cases, each
    patched OPD seed on its own (`_seed`): reproduced when one head, the same whether chosen on
    either half of the harm cases, stands clear of random heads on the other half (`_clear`);
    partly when only 2 or 4 heads together do, or the single head chosen differs between the
    halves; not measurable under rules.HEADS_MIN_CASES harm cases. The seed is the unit, counted
    as trained (the coverage rule): patching fewer than half of the OPD seeds trained (those
    of context_return.json) is not measurable, the reason naming the seeds patched and the
    command that patches the rest. Several seeds judged follow the every-seed rule."""
    claim = "OPD's harm runs through a few heads reading c (chosen on half the cases)"
    patch = analysis.load(figs / PATCHING)
    patched = students(patch, "opd")
    if not patched:
        return Claim(claim, "no OPD run patched", "-", "not measurable")
    trained = _trained_opd(figs) or {name: None for name, _ in patched}
    total = len(set(trained) | {name for name, _ in patched})
    seeds = [_seed(name, r) for name, r in patched]
    judged = [x for x in seeds if x["verdict"] is not None]
    first = seeds[0]
    if not judged:  # no seed's own cases can be judged: help cases, or too few harm cases
        return Claim(claim, first["measured"], "-", "not measurable",
                     "; ".join(x["reason"] for x in seeds), coverage=(0, total))
    if 2 * len(judged) < total:
        names = ", ".join(x["name"] for x in judged)
        reason = (f"only {names} patched and judged: {len(judged)} of the {total} OPD seeds "
                  "trained (the coverage rule: units counted as trained, not as analysed); "
                  "patch the others: " + _patch_more(patch.config, trained,
                                                     [x["name"] for x in judged]))
        return Claim(claim, first["measured"], first["null"], "not measurable", reason,
                     coverage=(len(judged), total), detectable=first["mde"])
    words = [x["verdict"] for x in judged]
    verdict = "reproduced" if all(w == "reproduced" for w in words) else \
        "partly" if any(w in ("reproduced", "partly") for w in words) else "not reproduced"
    ps = [x["p"] for x in judged if x["p"] is not None]
    reason = "; ".join(f"{x['name']}: {x['reason']}" if len(judged) > 1 else x["reason"]
                       for x in judged if x["reason"])
    return Claim(claim, "; ".join(x["measured"] for x in judged),
                 "; ".join(x["null"] for x in judged), verdict, reason,
                 coverage=(len(judged), total), detectable=first["mde"],
                 p=rules.counted_p(ps, verdict == "reproduced"))


def _trained_opd(figs: Path) -> dict[str, str | None]:
    """The OPD seeds this setting trained (context_return.json's), name to checkpoint path;
    empty where the setting has no such report."""
    src = figs / CONTEXT_RETURN
    if not src.exists():
        return {}
    rep = analysis.load(src)
    runs = getattr(rep, "runs", None) or {}
    return {name: getattr(runs.get(name), "path", None) for name, _ in students(rep, "opd")}


def _patch_more(config: dict, trained: dict[str, str | None], patched: list[str]) -> str:
    """The patching command of this report's config with every trained OPD seed's
    checkpoint (each is patched on its own cases)."""
    ckpt = list(config.get("ckpt") or [])
    ckpt += [path for name, path in trained.items() if name not in patched and path
             and path not in ckpt]
    def value(v) -> str:
        return ",".join(map(str, v)) if isinstance(v, list | tuple) else str(v)

    opts = [f"--{k.replace('_', '-')} {value(config[k])}" for k in
            ("task", "task_options", "context", "kind", "max_cases") if config.get(k)]
    out = f" --out {config['out']}" if config.get("out") else ""
    return f"python -m nca_interp.patching {' '.join(ckpt)} {' '.join(opts)}{out}"


def _seed(name: str, r) -> dict:
    """One patched OPD seed's judgement: its verdict word (None: not judged, with the reason),
    what was measured, the null, the detectable effect and the p (rules: multiplicity)."""
    from nca_interp.patching import ABLATE_NOTE, ablate_of, kind_of

    n = (r.harm or {}).get("n", 0)  # harm cases patched (help reports have none)
    rows = (r.heads or {}).get("rows", [])
    if kind_of(r) != "harm" or n < rules.HEADS_MIN_CASES or not rows:
        why = f"{kind_of(r)} cases patched, not harm cases" if kind_of(r) != "harm" else \
            f"{r.counts['harm']} harm cases (fewer than {rules.HEADS_MIN_CASES})"
        return {"name": name, "verdict": None, "reason": f"{name}: {why}",
                "measured": f"{name}: {why}", "null": "-", "mde": "", "p": None}

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
    return {"name": name, "verdict": verdict, "reason": reason, "measured": measured,
            "null": null, "mde": "" if mde is None else f"{mde:.2f} LD", "p": _p(top, clear)}


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
