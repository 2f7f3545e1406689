"""Markdown tables of a pipeline's results, printed from its JSON outputs (numbers are never
typed by hand), and written to figures/<task>/README.md with --write.

    python -m nca_interp.paper.report --task sokoban --write
"""

from __future__ import annotations

if __name__ == "__main__":  # Ctrl-C while the imports below run: one line, not a traceback
    from nca_interp.cli import quiet_interrupt

    quiet_interrupt()

import argparse
from pathlib import Path

import numpy as np

from nca_interp import analysis
from nca_interp.errors import UsageError
from nca_interp.evaluate import format_c_prime, label, metric_of
from nca_interp.fsio import read_json, write_text
from nca_interp.identity import RunId, roster
from nca_interp.paper.layout import (
    CONTEXT_CONTROL,
    CONTEXT_RETURN,
    GRAD_ALIGN_OPD,
    HARM_DRIFT,
    LENS,
    PARAM_DELTA,
    PATCHING,
    TEACHER_GLOB,
    TRAJECTORY,
    analysis_files,
    grad_files,
)
from nca_interp.regimes import regime
from nca_interp.reports import null_role, read_derived

__all__ = ["MARK", "context_control", "context_return", "lens", "main", "per_seed", "render",
           "teacher", "write_page"]


def fmt_range(r: dict) -> str:
    if r["min"] == r["max"]:
        return f"{r['mean']:.3f}"
    return f"{r['mean']:.3f} ({r['min']:.3f} to {r['max']:.3f})"  # a seed range, not a CI


def metric(figs: Path) -> str:
    """`win` (games) or `accuracy` (QA), as the pipeline's evaluations recorded it."""
    for f in [figs / CONTEXT_RETURN, *sorted(figs.glob(TEACHER_GLOB))]:
        if f.exists():
            return metric_of(analysis.load(f).results)
    return "win"


def teacher(figs: Path) -> str:
    m = "accuracy" if metric(figs) == "accuracy" else "win"
    rows = [f"| context kind | {m} without c | {m} with c | harm | help | regime |",
            "|---|---|---|---|---|---|"]
    for f in sorted(figs.glob(TEACHER_GLOB)):
        r = next(iter(analysis.load(f).results.values()))
        cells = [with_ci(r, k) for k in ("correct_no_c", "correct_c", "harm", "help")]
        rows.append(f"| {f.stem.split('_', 1)[1]} | " + " | ".join(cells) +
                    f" | {regime(r)} |")
    return "\n".join(rows)


def with_ci(r: dict, k: str) -> str:
    v, ci = r.get(k), r.ci95.get(k, [None, None])
    if v is None:
        return "-"
    return f"{v:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci[0] is not None else "")


def context_return(figs: Path) -> str:
    s = read_derived(figs / "context_return_summary.json")
    keys = ["correct_no_c", "correct_c", "harm", "help", "both", "rel_len_both", "rel_len"]
    rows = ["| model | " + " | ".join(label(k, metric(figs)) for k in keys) +
            " | regime per seed |",
            "|---" * (len(keys) + 2) + "|"]
    for method, r in s.items():
        rows.append(f"| {method} | " + " | ".join(fmt_range(r[k]) if r.get(k) else "-"
                                                  for k in keys) +
                    f" | {' '.join(r['regimes'])} |")
    return "\n".join(rows)


def per_seed(figs: Path) -> str:
    rep = analysis.load((figs / CONTEXT_RETURN)).results
    keys = ["correct_no_c", "correct_c", "harm", "help", "delta_c", "rel_len_both"]
    rows = ["| run | " + " | ".join(label(k, metric(figs)) for k in keys) +
            " | regime | resampled unit |", "|---" * (len(keys) + 3) + "|"]
    for name, r in rep.items():
        cells = [with_ci(r, k) for k in keys]
        unit = f"{r.n_units or r.n} {r.unit or 'level'}s" + \
            f" ({r.n_correct_no_c} right without c)" if r.n_correct_no_c is not None else ""
        rows.append(f"| {name} | " + " | ".join(cells) + f" | {regime(r)} | {unit} |")
    return "\n".join(rows)


def _group(key: str, rid: RunId) -> str:
    """A row of the seed-pooled tables: `<setting>_<method>` for a student, else its key."""
    return f"{rid.setting}_{rid.method}" if rid.student and rid.setting else key


def _random_init_note(rep) -> str:
    """What `random_init` is on this page (#70 item 7): a reference, never a floor where its
    cosine sits at or above a measured model's at some layer."""
    rnd = rep.results.get("random_init")
    if rnd is None or rnd.cos is None:
        return "no `random_init` row."
    above = {i for n, r in rep.results.items() if n != "random_init" and r.cos is not None
             for i, (a, b) in enumerate(zip(rnd.cos[1:], r.cos[1:])) if a >= b}
    if not above:
        return "`random_init` (same config, untrained) is a reference below every model here."
    return (f"`random_init` (same config, untrained) is a reference, not a floor: its cosine "
            f"sits at or above a measured model's at {len(above)} of {len(rnd.cos) - 1} "
            "layers, so a model's cosine above it shows nothing by itself.")


def layer_sim(figs: Path, name: str = "layer_sim") -> str:
    rep = analysis.load(figs / f"{name}.json")
    layers = rep.layers[1:]
    out = [f"Positions: {rep.at or 'response'}; every model teacher-forced on "
           f"{rep.responses_from or 'its own greedy responses'}. Mean (min to max) over "
           "seeds; " + _random_init_note(rep)]
    if rep.beside:  # rebuilt beside an earlier report: say what was recomputed, what carried
        b = rep.beside
        changed = "; ".join(f"{name} differed at " + ", ".join(
            f"{stat} {'/'.join(labs)}" for stat, labs in ch.items())
            for name, ch in b["recomputed"].items() if ch)
        out.append(f"Rebuilt with `layer_sim --beside` from an earlier report (sha256 "
                   f"`{b['sha256'][:12]}`): its {b['checked']['entry']} recomputed agrees within "
                   f"{b['checked']['max_abs_diff']:.1g} (tolerance {b['checked']['atol']:g}); "
                   f"the other entries carried as they were; "
                   f"{', '.join(b['recomputed']) or 'no baseline'} recomputed"
                   + (f" ({changed} from the earlier report's)" if changed
                      else ", as the earlier report had it") + ".")
    metrics = [m for m in ("cos", "cos_other", "cos_centred", "cka", "cka_debiased")
               if all(m in r for r in rep.results.values())]  # in every entry: a report
    # rebuilt with --beside holds older entries (cos_other: the different-item floor)
    if next(iter(rep.results.values())).ctx_attn_ratio_layer is not None:
        metrics.append("ctx_attn_ratio_layer")
    for metric in metrics:
        shift = 1 if metric != "ctx_attn_ratio_layer" else 0  # no embedding entry there
        rows = [f"| {metric} | " + " | ".join(f"L{lab}" for lab in layers) + " |",
                "|---" * (len(layers) + 1) + "|"]
        groups: dict[str, list[list[float]]] = {}
        who = roster(rep)
        for run, r in rep.results.items():
            groups.setdefault(_group(run, who[run]), []).append(r[metric][shift:])
        for key, vals in groups.items():
            v = np.array(vals)
            cells = [f"{m:.3f}" + (f" ({lo:.3f} to {hi:.3f})" if len(vals) > 1 else "")
                     for m, lo, hi in zip(v.mean(0), v.min(0), v.max(0))]
            rows.append(f"| {key} | " + " | ".join(cells) + " |")
        out.append("\n".join(rows))
    if next(iter(rep.results.values())).ctx_attn_ratio is not None:
        rows = ["| model | max head | median head | top heads (ratio; 1 = uniform) |",
                "|---|---|---|---|"]
        for run, r in rep.results.items():
            R = np.array(r.ctx_attn_ratio)
            order = np.argsort(-R, axis=None)[:4]
            top = ", ".join(f"L{i // R.shape[1]}H{i % R.shape[1]} {R.flat[i]:.2f}" for i in order)
            rows.append(f"| {run} | {R.max():.2f} | {np.median(R):.2f} | {top} |")
        out.append("Context reading per head (attention on c / c's share of the visible keys):"
                   "\n\n" + "\n".join(rows))
    return "\n\n".join(out)


def grad_align(figs: Path) -> str:
    def ang(v):
        return "-" if v is None else f"{v:.0f}°"

    rows = ["| run | step | prompts | opd~ctx | opd~nca | nca~ctx | self opd | self ctx | "
            "self nca | \\|ctx\\|/\\|opd\\| |", "|---" * 10 + "|"]
    refs = total = 0
    for method, path in grad_files(figs):
        rep = analysis.load(path)
        steps = rep.steps or [None] * len(rep.results)
        for step, r in zip(steps, rep.results.values()):
            g = r.global_
            if "angle_xfit_deg" not in g:
                raise UsageError(f"{path} predates noise floors; re-run the grad_align stage")
            x, f = g["angle_xfit_deg"], g["self_angle_deg"]
            ratio = g["norm_ratio"].get("ctx/opd")
            selfs = []
            for t in ("opd", "ctx", "nca"):
                against = [(f[t], a) for pair, a in x.items()
                           if t in pair.split("~") and a is not None]
                ref = f[t] is not None and bool(against) and null_role(against) == "reference"
                refs, total = refs + ref, total + (f[t] is not None)
                selfs.append(ang(f[t]) + (" ref" if ref else ""))
            rows.append(f"| {method} | {step} | {rep.config['batch']} | {ang(x['opd~ctx'])} | "
                        f"{ang(x['opd~nca'])} | {ang(x['nca~ctx'])} | " + " | ".join(selfs)
                        + f" | {'-' if ratio is None else f'{ratio:.2f}'} |")
    rows.append("\nAngles are cross-fitted (each term on one half batch against the other term "
                "on the other half); self: the angle between a term's own gradients on the two "
                "halves, a floor for the angles between that term and another where they all "
                "sit above it; 'ref' where one sits at or below it, a reference, not a floor "
                f"({refs} of {total} self-angles here). '-': a term within its sampling noise "
                "(snr <= 1) gets no angle.")
    parts = part_rows(figs)
    return "\n".join(rows) + ("\n\n" + parts if parts else "")


def part_rows(figs: Path) -> str:
    """The noise-corrected angles (grad_align --parts >= 4), where the JSON has them."""
    def ang(p):
        if p is None or p["angle_corrected_deg"] is None:
            return "-"
        ci = p["angle_ci95_deg"]
        return f"{p['angle_corrected_deg']:.0f}° [{ci[0]:.0f}, {ci[1]:.0f}]" if ci else \
            f"{p['angle_corrected_deg']:.0f}°"

    def term(t, name, pairs):
        if t is None or t["noise_scale"] is None:
            return "-"
        pc = t["positive_control"]
        against = [(t["floor_splits_deg"], p["angle_corrected_deg"]) for k, p in pairs.items()
                   if name in k.split("~") and p and p["angle_corrected_deg"] is not None]
        ref = bool(against) and null_role(against) == "reference"
        return (f"{t['noise_scale']:.1f}; half-half {t['floor_splits_deg']:.0f}°"
                f"{' ref' if ref else ''} (predicted {t['floor_predicted_deg']:.0f}°); self "
                f"{pc['mean']:.2f}" if pc else f"{t['noise_scale']:.1f}")

    rows = ["| run | step | parts | opd~ctx | opd~nca | nca~ctx | opd: noise scale; half-half; "
            "self-cos | ctx: noise scale; half-half; self-cos |", "|---" * 8 + "|"]
    n = 0
    for method, path in grad_files(figs):
        rep = analysis.load(path)
        steps = rep.steps or [None] * len(rep.results)
        for step, r in zip(steps, rep.results.values()):
            st = r.global_.get("parts")
            if not st:
                continue
            n += 1
            pr, tm = st["pairs"], st["terms"]
            rows.append(f"| {method} | {step} | {st['n_parts']} | {ang(pr.get('opd~ctx'))} | "
                        f"{ang(pr.get('opd~nca'))} | {ang(pr.get('nca~ctx'))} | "
                        f"{term(tm.get('opd'), 'opd', pr)} | {term(tm.get('ctx'), 'ctx', pr)} |")
    if not n:
        return ""
    return ("Noise-corrected angles (U-statistic over independent parts of the batch, "
            "[95% delete-one-part jackknife]); noise scale = part-to-part variance / |E g|^2; "
            "half-half: the mean angle between a term's two halves over random splits (a "
            "floor where every corrected angle of that term sits above it, 'ref' where one sits "
            "at or below it: a reference, not a floor) beside the one its noise scale "
            "predicts; self-cos: a term against itself on disjoint halves, the positive control "
            "(~1 when the estimator removes the noise).\n\n" + "\n".join(rows))


def param_delta(figs: Path) -> str:
    rep = analysis.load(figs / PARAM_DELTA)
    out = []
    per = rep.results
    names = [Path(p).name for p in per]
    modules = sorted(next(iter(per.values())).per_module)
    for key, title in (("per_module", "Relative delta per module type (||dW|| / ||W0||)"),
                       ("per_module_adam", "Adam-normalised delta per module type "
                        "(||dW|| / (sum lr x sqrt(n)); 1 = every element moved lr every step "
                        "one way)")):
        if key not in next(iter(per.values())):
            continue
        rows = ["| module | " + " | ".join(names) + " |", "|---" * (len(per) + 1) + "|"]
        for m in modules:
            rows.append(f"| {m} | " + " | ".join("-" if r[key].get(m) is None else
                                                 f"{r[key][m]:.4f}" for r in per.values()) + " |")
        out.append(f"{title}:\n\n" + "\n".join(rows))
    # in depth order (the report keys layers as text: "10" sorted before "2" on 30 layers)
    layers = sorted(next(iter(per.values())).per_layer,
                    key=lambda k: (k == "all", not k.isdigit(), int(k) if k.isdigit() else 0, k))
    rows = ["| layer | " + " | ".join(f"{n} rel | {n} adam" for n in names) + " |",
            "|---" * (2 * len(per) + 1) + "|"]
    for layer in layers:
        cells = []
        for r in per.values():
            adam = (r.per_layer_adam or {}).get(layer)
            cells += [f"{r.per_layer[layer]:.4f}", "-" if adam is None else f"{adam:.4f}"]
        rows.append(f"| {layer} | " + " | ".join(cells) + " |")
    out.append("Delta per layer:\n\n" + "\n".join(rows))
    cmp, ctrl = rep.comparison, rep.control
    a, b = Path(cmp["a"]).name, Path(cmp["b"]).name
    head = f"| module | cos(d{a}, d{b}) |"
    if ctrl:
        head += f" control cos(d{Path(ctrl['a']).name}, d{Path(ctrl['b']).name}) |"
    rows = [head, "|---|---|" + ("---|" if ctrl else "")]
    for m in ["global", *sorted(cmp.get("per_module_cos", {}))]:
        v = cmp["global_cos"] if m == "global" else cmp["per_module_cos"][m]
        line = f"| {m} | {'-' if v is None else f'{v:.3f}'} |"
        if ctrl:
            c = ctrl["global_cos"] if m == "global" else ctrl["per_module_cos"].get(m)
            line += f" {'-' if c is None else f'{c:.3f}'} |"
        rows.append(line)
    out.append("Do NCA's updates differ from OPD's? Against the seed-to-seed control:\n\n" +
               "\n".join(rows))
    if rep.all_pairs is not None:
        out.append("Global cosine of every pair of deltas: " + ", ".join(
            f"{k} {v['global_cos']:.3f}" for k, v in rep.all_pairs.items()))
    top = sorted(cmp["specific"]["share"].items(), key=lambda kv: -kv[1])[:5]
    out.append(f"NCA-specific delta (d{b} - d{a}) largest shares: " +
               ", ".join(f"{k} {v:.1%}" for k, v in top))
    return "\n\n".join(out)


def patching(figs: Path) -> str:
    from nca_interp.patching import DIRECTIONS, FLIPPED, kind_of

    rep = analysis.load(figs / PATCHING)
    out = []
    for name, r in rep.results.items():
        c, kind = r.counts, kind_of(r)
        head = (f"**{name}**: {c['levels']} held-out items, right without c {c['right_no_c']}, "
                f"harm cases {c['harm']}, help cases {c.get('help', '-')}, both right "
                f"{c['both']}.")
        if kind not in r:
            out.append(head + f" No {kind} case: nothing to localise.")
            continue
        L = r.n_layers

        def cell(s, i):
            return f"{s['mean'][i]:.2f} [{s['lo'][i]:.2f}, {s['hi'][i]:.2f}]"

        rows = ["| layer | resid, all aligned | resid, x only | resid, response prefix | "
                "resid, deciding position | MLP out | reverse: resid all |",
                "|---|---|---|---|---|---|---|"]
        f, rv = r.forward, r.reverse
        for i in range(L):
            rows.append(f"| {i} | " + " | ".join(cell(f["resid_groups"][g], i)
                                                  for g in ("all", "x", "response", "decide"))
                        + f" | {cell(f['mlp'], i)} | {cell(rv['resid_groups']['all'], i)} |")
        H = r.n_heads
        if r.ablation is None:  # a model whose attention ignores pattern edits (OPT)
            heads = "not measured (" + r.heads.get("note", "no ablation") + ")"
        else:
            # None where --method attribution left a head unpatched
            ab = np.array(r.ablation["mean"], dtype=float)
            top = np.argsort(-np.nan_to_num(ab, nan=-9), axis=None)[:4]
            heads = ", ".join(f"L{i // H}H{i % H} {ab.flat[i]:.2f}" for i in top)
        out.append(f"{head} Patched: {r[kind]['n']} {kind} cases (forward = "
                   f"{DIRECTIONS[kind]['forward']}; 0 = the run unchanged, 1 = the other run's "
                   "logit difference at the deciding position; mean [95% bootstrap over "
                   "cases]).\n\n" + "\n".join(rows) +
                   f"\n\nRemoving one head's attention to c, all cases (in-sample ranking): "
                   f"{heads}.\n\n" + heads_table(r, kind, FLIPPED[kind]) +
                   "\n\nLogit lens, KL(no c || c) at the deciding position per layer (embed "
                   f"first): {kind} cases " + " ".join(f"{v:.2f}" for v in r.lens["kl"]["mean"])
                   + "; controls " + (" ".join(f"{v:.2f}" for v in
                                                r.control["lens"]["kl"]["mean"])
                                       if r.control is not None else "-") + ".")
        out[-1] += methods(r)
    return "\n\n".join(out)


# a family where attribution's ranking and the exact effects agree less than this (Spearman, or
# the share of the exact top k among attribution's top k) or where the random check finds a node
# attribution ranked too low: the page says they disagree
AGREE = 0.5


def methods(r) -> str:
    """Which method produced each number of a patching report, and for each family ranked by
    attribution how its ranking agrees with the exact effects; '' for reports written before
    attribution patching (every number exact)."""
    fams = [(f"{tag}, {k.replace('resid_groups.', 'resid ')}", m)
            for tag in ("forward", "reverse")
            for k, m in (getattr(r, tag) or {}).get("methods", {}).items()]
    fams += [("removing a head's reading of c", r.ablation)] if r.ablation else []
    fams = [(name, m) for name, m in fams if m and "agreement" in m]
    if not fams:
        return ""
    rows = ["| family | numbers from | Spearman (attribution vs exact) | top-k overlap | "
            "patched exactly | misses of the random check |", "|---|---|---|---|---|---|"]
    apart = []
    for name, m in fams:
        a = m["agreement"]
        by = "every node exact" if m["method"].startswith("exact patching of every") else \
            "exact, on attribution's candidates"
        rho, ov = a["spearman"], a["top_k_overlap"]
        rows.append(f"| {name} | {by} | {'-' if rho is None else f'{rho:.2f}'} | "
                    f"{'-' if ov is None else f'{ov:.2f}'} (k={a['k']}) | "
                    f"{a['n_exact']}/{a['n_nodes']} | {len(a['misses'])} |")
        if any(v is not None and v < AGREE for v in (rho, ov)) or a["misses"]:
            apart.append(name)
    said = (f"Attribution and exact patching disagree (Spearman or top-k overlap below {AGREE}, "
            f"or a miss) on: {', '.join(apart)}; there attribution alone would mislead, and the "
            "numbers above are the exact ones." if apart else "Attribution and exact patching "
            f"agree on every family (Spearman and top-k overlap at least {AGREE}, no miss in the "
            "random check).")
    return ("\n\nWhich method produced each number: every table and verdict above reads exact "
            "effects; attribution patching only chose which heads and positions to patch "
            "exactly.\n\n" + "\n".join(rows) + "\n\n" + said)


def _num(v: float) -> str:
    """A KL or share: four decimals, or two significant digits where that would read 0."""
    return f"{v:.4f}" if v == 0 or abs(v) >= 1e-3 else f"{v:.1e}"


def _iv(v, ci) -> str:
    """A token mean with its interval ('-' where undefined)."""
    if v is None:
        return "-"
    lo, hi = ci if ci else (None, None)
    return _num(v) + (f" [{_num(lo)}, {_num(hi)}]" if lo is not None else "")


def _restored(f: dict, kind: str) -> str:
    n, share = f.get(f"n_{kind}", 0), f.get(f"{kind}_restored")
    cases = f"{n} case" + ("" if n == 1 else "s")
    if share is None:
        return cases if n else "none"
    within = f.get(f"{kind}_restored_within")
    tried = len(f.get(kind) or [])
    null = f.get(f"{kind}_restored_null")
    swaps = sum(len(c.get("null_at") or []) for c in f.get(kind) or [])
    return (f"{cases}; of {tried} tried, {share:.0%} restored by the first fork's token"
            + (f" (null: {null:.0%} of {swaps} swaps where the views agree)"
               if null is not None else " (no null drawn)")
            + (f", {within:.0%} within the forks tried" if within is not None else ""))


def _token_cell(text) -> str:
    """A token as a table cell shows it: quoted, its newlines and pipes escaped."""
    if not isinstance(text, str):
        return "-"
    return "`" + repr(text)[1:-1].replace("|", "\\|").replace("`", "'") + "`"


def _fork_table(rep, limit: int = 8) -> str:
    """The harm cases' first forks, a row each (at most `limit` a checkpoint): where in the
    response the views' greedy choices first part, the token the c view writes there and the
    one the no-c view would, whether continuing from that swap gives the right answer, and the
    case's null (its swaps where the views agree that do the same): which tokens carry the
    harm."""
    rows = ["| checkpoint | item | first fork (token) | c view writes | no-c view writes | right "
            "after the swap | the case's null: swaps where the views agree, right after |",
            "|---|---|---|---|---|---|---|"]
    for name, e in rep.results.items():
        for case in ((e.forks or {}).get("harm") or [])[:limit]:
            if case.get("first_fork") is None:
                continue
            null = case.get("null_right")  # absent: a report from before the swap null
            rows.append(f"| {name} | {case.get('item')} | {case['first_fork']} | "
                        f"{_token_cell(case.get('writer_token'))} | "
                        f"{_token_cell(case.get('donor_token'))} | "
                        f"{'yes' if case.get('restored') else 'no'} | "
                        + ("not drawn" if null is None else
                           f"{sum(map(bool, null))} of {len(null)}") + " |")
    if len(rows) == 2:
        return ""
    return ("The harm cases' first forks (right without c, wrong with it; at most "
            f"{limit} a checkpoint):\n\n" + "\n".join(rows))


def _parts_table(rep) -> str:
    """Where in each response c acts, by what the tokens are (`lens.PARTS`): the first token,
    the answer the task's scorer reads, the end; beside the control and the floor."""
    from nca_interp.lens import PARTS

    rows = ["| checkpoint | series | " + " | ".join(PARTS) + " |",
            "|---|---|" + "---|" * len(PARTS)]
    for name, e in rep.results.items():
        if not e.parts:
            continue
        for key, said in (("kl", "KL with c"), ("kl_control", "with c' (control)"),
                          ("kl_floor", "floor")):
            cells = [_iv(v, b) if key != "kl_floor" else ("-" if v is None else f"{v:.1e}")
                     for v, b in zip(e.parts[key], e.ci95[f"{key}_parts"])]
            rows.append(f"| {name} | {said} | " + " | ".join(cells) + " |")
    if len(rows) == 2:
        return ""
    n = next(e.parts["n_tokens"] for e in rep.results.values() if e.parts)
    said = ", ".join(f"{p} {'-' if k is None else k}" for p, k in zip(PARTS, n))
    return ("By part of the response (tokens of the first checkpoint: " + said + "; the "
            "answer: the tokens whose text lies in the span the task's scorer reads, "
            "`Task.answer_span`; the end: each response's last token, eos where it "
            "stopped):\n\n" + "\n".join(rows))


def _lens_reading(name: str, e) -> str:
    """One checkpoint's lens in words, from its intervals: does the returning c move its next
    tokens more than a wrong c' does, and in which third of the response most."""
    (lo, hi), (clo, chi) = e.ci95["kl"], e.ci95["kl_control"]
    if None in (lo, hi, clo, chi):
        return f"{name}: no interval"
    against = ("more than a wrong c' does" if lo > chi else
               "less than a wrong c' does" if hi < clo else
               "no more than a wrong c' does (the intervals overlap)")
    third = max(range(3), key=lambda k: e.thirds["kl"][k] or 0)
    return f"{name}: c moves it {against}, most in the {('first', 'middle', 'last')[third]} third"


def lens(figs: Path) -> str:
    """The two-view lens (`python -m nca_interp.lens`): where in the response the returning c
    still moves each checkpoint's next-token distribution (KL(q_x || q_c) per token on its own
    samples), beside a wrong c' of c's form and the floor; the forks of harm and help cases;
    over training where the lens read a run's steps."""
    out = []
    for path in (p for p in (figs / LENS,) if p.exists()):
        rep = analysis.load(path)
        cfg = rep.config
        note = _manifest_note(figs, path)  # e.g. students retrained for the lens alone
        rows = ["| checkpoint | KL with c, all tokens | first third | middle third | last third "
                "| KL with a wrong c' (control) | floor | top token changed by c / by c' | harm "
                "cases (right without c, wrong with it) | help cases |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for name, e in rep.results.items():
            ci = e.ci95
            thirds = [_iv(v, b) for v, b in zip(e.thirds["kl"], ci["kl_thirds"])]
            flip = e.overall["flip"], e.overall["flip_control"]
            rows.append(f"| {name} | {_iv(e.overall['kl'], ci['kl'])} | " + " | ".join(thirds)
                        + f" | {_iv(e.overall['kl_control'], ci['kl_control'])} | "
                        f"{_floor_cell(e.overall['kl_floor'], [e.overall['kl']])} | "
                        + " / ".join("-" if v is None else _num(v) for v in flip)
                        + f" | {_restored(e.forks, 'harm')} | {_restored(e.forks, 'help')} |")
        reading = [_lens_reading(name, e) for name, e in rep.results.items()
                   if not name.endswith(" step 0") or name == next(iter(rep.results))]
        e0 = next(iter(rep.results.values()))
        text = (f"`{path.name}`: {e0.n_items} held-out items ({e0.n_units} units), one sample "
                f"y ~ g(.|x) each at temperature {cfg['temperature']}; KL(q_x || q_c) in nats "
                "per response token on that sample, 95% cluster-bootstrap intervals; the "
                "control is the same with a wrong c' of c's form, the floor the no-c view "
                "against itself in another layout (arithmetic): a floor where it sits below the "
                "KL with c, marked a reference where it does not (c acts there no more than "
                "arithmetic does). A fork is a token where the "
                "views' greedy choices differ; restored = continuing from the first fork with "
                "the other view's token makes the answer right (a harm case's c view given "
                "the no-c view's token; a help case's no-c view given c's); its null: "
                "one token swapped where the views agree (for the writing view's own "
                "runner-up) and continued, the share of such swaps that do the same.\n\n"
                + "\n".join(rows) + "\n\nRead against the control: " + "; ".join(reading) + ".")
        if note:
            text = f"Its students: {note}.\n\n" + text
        forks = _fork_table(rep)
        if forks:
            text += "\n\n" + forks
        parts = _parts_table(rep)
        if parts:
            text += "\n\n" + parts
        if rep.control:  # reports written before the lens recorded c' say nothing of it
            text += "\n\n" + format_c_prime(rep.control) + "."
        if rep.layers:
            deep = [f"{name}: settles without c at {e.depth['settle_x']:.1f}, with c at "
                    f"{e.depth['settle_c']:.1f}; at forks the views part from layer "
                    + ("-" if e.depth["part"] is None else f"{e.depth['part']:.1f}")
                    for name, e in rep.results.items() if e.depth]
            text += ("\n\nLogit lens (mean layer index of " + str(len(rep.layers) - 1)
                     + " blocks from which a view's top token stays its final one): "
                     + "; ".join(deep) + ".")
        for run, ot in (rep.over_training or {}).items():
            lines = ["| step | KL with c | first third | middle third | last third | with c' "
                     "(control) | floor |", "|---|---|---|---|---|---|---|"]
            for i, st in enumerate(ot["step"]):
                kl, ci = ot["kl"][i], ot["ci95"]["kl"][i]
                lines.append(f"| {st} | " + " | ".join(_iv(v, b) for v, b in zip(kl, ci))
                             + f" | {_iv(ot['kl_control'][i][0], ot['ci95']['kl_control'][i][0])}"
                             f" | {_floor_cell(ot['kl_floor'][i][0], [kl[0]])} |")
            text += (f"\n\nOver training, `{run}` (step 0 = the checkpoint it started from, "
                     "the null):\n\n" + "\n".join(lines))
        out.append(text)
    return "\n\n".join(out)


def _manifest_note(figs: Path, path: Path) -> str:
    """The note manifest.json keeps on how `path` was made, where it says one (a stage run
    by its own command, outside the pipeline), else ""."""
    mf = figs / "manifest.json"
    files = read_json(mf).get("files", {}) if mf.exists() else {}
    entry = next((v for k, v in files.items()
                  if Path(k).name == path.name and Path(k).parent.name == figs.name), {})
    note = entry.get("note") if isinstance(entry, dict) else None
    return note.rstrip(".") if isinstance(note, str) else ""


def _floor_cell(floor: float, measured: list) -> str:
    """The lens's arithmetic floor as a cell, called a reference where it does not sit below
    the KL with c it is read against (`null_role`)."""
    role = null_role((floor, m) for m in measured)
    return f"{floor:.1e}" + (" (reference)" if role == "reference" else "")


def heads_table(r: dict, kind: str, flipped: str) -> str:
    """Held-out head selection against its random-head null."""
    hd = r.heads
    if "rows" not in hd:
        return hd.get("note", "")

    def ci(s):
        return "-" if not s else f"{s['mean']:.2f} [{s['lo']:.2f}, {s['hi']:.2f}]"

    def null(s):
        if not s or not s.get("n"):
            return "-"
        stopped = f", stopped: {s['stopped_at']} reached it" if s.get("stopped_at") else ""
        return (f"{s['mean']:.2f} ({s['lo']:.2f} to {s['hi']:.2f}; p {s['p']:.3f}, "
                f"{s['n']} draws{stopped})")

    from nca_interp.patching import ABLATE_NOTE, ablate_of

    rows = [f"Heads chosen on one half of the cases, judged on the other ({flipped}); "
            "percentile: the chosen heads' single-head effect on the held-out half among all "
            "heads; nulls: k random heads neither half chose (mean, central 95% of draws, "
            f"one-sided p); {ABLATE_NOTE[ablate_of(r)]}.", "",
            "| k | chosen on half A | chosen on half B | percentile | LD effect | random heads | "
            "flipped | random heads | broken controls |", "|---|---|---|---|---|---|---|---|---|"]

    def heads(names: list[str], k: int) -> str:
        return ", ".join(names[:4]) + (" ..." if k > 4 else "")

    for row in hd["rows"]:
        chosen = f"{heads(row['chosen_on_a'], row['k'])} | {heads(row['chosen_on_b'], row['k'])}"
        rows.append(f"| {row['k']} | {chosen} | {row['percentile']:.0f} | {ci(row['effect'])} | "
                    f"{null(row.get('effect_null'))} | {ci(row['flipped'])} | "
                    f"{null(row.get('flipped_null'))} | {ci(row.get('broken_control'))} |")
    return "\n".join(rows)


def context_control(figs: Path) -> str:
    from nca_interp.evaluate import format_control

    reports = analysis.load((figs / CONTEXT_CONTROL)).results
    return (format_control(reports) + "\n\nreads_c near 0 means the checkpoint answers the same "
            "with the right context and with a wrong one: it does not use what c says (a "
            "student that is 'not harmed' by c that way is blind to it, not robust). The harm "
            "of c' is P(wrong with c' | right without c): what a context of this form costs "
            "when it carries nothing useful.")


def harm_drift(figs: Path) -> str:
    from nca_interp.paper.dose import markdown

    return markdown(read_derived(figs / HARM_DRIFT))


def scorer_agreement(figs: Path) -> str:
    from nca_interp.sizing import agreement_table

    return agreement_table(read_json((figs / "scorer_agreement.json")))


def trajectory_table(figs: Path) -> str:
    from nca_interp.trajectory import format_table

    return "```\n" + format_table(analysis.load(figs / TRAJECTORY).results) \
        + "\n```"


def stage_times(figs: Path) -> str:
    """Every file the manifest records, with the seconds of the stage that wrote it (training
    stages from their run directories when they ran outside the pipeline)."""
    files = read_json((figs / "manifest.json"))["files"]
    rows = ["| output | minutes | how measured |", "|---|---|---|"]
    for path, v in files.items():
        if v["seconds"] or "checkpoints/step_" in path:
            how = v.get("seconds_from", "wall clock of the stage in the pipeline")
            rows.append(f"| `{path}` | {v['seconds'] / 60:.1f} | {how} |")
    return "\n".join(rows)


def verdicts(figs: Path) -> str:
    """The setting's claims table (`nca_interp.paper.claims`), so its page shows every verdict
    beside the numbers it is read from."""
    from nca_interp.paper import claims

    return claims.table(figs)


def decisive(figs: Path) -> str:
    """Per method: harm, accuracy with c against step 0's and reads_c against the teacher's,
    with NCA's three verdicts read together (`nca_interp.paper.claims.decisive`)."""
    from nca_interp.paper.claims import decisive as table_of

    return table_of.table(figs)


def power_section(figs: Path) -> str:
    """Each accuracy claim on the published items and on `more_items/` ('' without it)."""
    from nca_interp.paper.claims import power

    return power.table(figs)


def figures_section(figs: Path) -> str:
    """Every figure of the folder: its PNG inline, a link to its interactive HTML (an HTML
    drawn without a PNG: the link alone)."""
    stems = sorted({p.stem for p in [*figs.glob("*.png"), *figs.glob("*.html")]})
    lines = []
    for stem in stems:
        html = f"[{stem} (interactive)]({stem}.html)" if (figs / f"{stem}.html").exists() \
            else stem
        png = f"\n\n![{stem}]({stem}.png)" if (figs / f"{stem}.png").exists() else ""
        lines.append(f"{html}{png}\n")
    return "\n".join(lines)


# the analyses this page draws sections for; any other registered analysis gets a row
# in `other_analyses` (its report files and figures), with no edit here
OWN_SECTIONS = ("evaluate", "trajectory", "layer_sim", "grad_align", "param_delta", "patching",
                "lens")


def other_analyses(figs: Path) -> str:
    """A row per report of a registered analysis this page has no section for: what it
    measures, its JSON and its interactive figure."""
    rows = [(name, path) for name, path in analysis_files(figs) if name not in OWN_SECTIONS]
    if not rows:
        return ""
    lines = ["| analysis | what it measures | report | figure |", "|---|---|---|---|"]
    for name, path in rows:
        html = analysis.figure_stem(path, "").with_suffix(".html")
        fig = f"[{html.name}]({html.name})" if html.exists() else "-"
        lines.append(f"| {name} | {analysis.spec(name).what} | [{path.name}]({path.name}) | "
                     f"{fig} |")
    return "\n".join(lines)


MARK = "<!-- python -m nca_interp.paper.report --task "  # a generated page's first line


def write_page(figs: Path, text: str) -> Path:
    """`figs/README.md` written with `text`, unless a file is there that this module did not
    generate (its first line is not `MARK`): a user's own notes are never written over."""
    page = figs / "README.md"
    if page.is_file() and not page.is_symlink():
        with open(page, encoding="utf-8", errors="replace") as f:
            first = f.readline()
        if not first.startswith(MARK):
            raise UsageError(f"{page} is not a page this command wrote (its first line is not "
                             f"the generator's mark, {MARK.strip()} ...); it is never written "
                             "over: move it away, then --write again")
    return write_text(page, text + "\n")


def render(figs: Path) -> str:
    """The whole generated report of one pipeline folder, as markdown."""
    manifest = read_json((figs / "manifest.json"))
    task = figs.name
    lines = [f"{MARK}{task} -->",
             f"# {task}: generated tables\n",
             "Every number below is read from the JSON files in this folder by "
             f"`python -m nca_interp.paper.report --task {task}`; `manifest.json` names the "
             f"command, commit "
             "and seconds of each file.\n"]
    if "pipeline_seconds" in manifest:
        lines.append(f"Pipeline wall time: {manifest['pipeline_seconds'] / 60:.1f} min "
                     f"(seeds {manifest['config']['seeds']}; {manifest.get('note', 'all stages')})"
                     ".\n")
    first = next(iter(sorted(figs.glob(TEACHER_GLOB))), None)
    n = next(iter(analysis.load(first).results.values())).n if first else "?"
    unit = "questions" if metric(figs) == "accuracy" else "levels"
    lines.append(f"## Teacher, {n} held-out {unit}, greedy\n\n{teacher(figs)}\n")
    if not (figs / "context_return_summary.json").exists():
        return "\n".join(lines)
    sections = [(f"Verdicts (`python -m nca_interp.paper.claims {task}`: each claim's null and "
                 f"seeds are in "
                 "nca_interp/paper/claims/, the verdict words follow the rule book in "
                 "nca_interp/paper/rules.py)",
                 verdicts),
                ("Prevents the harm while still reading c? The decisive table (each NCA verdict "
                 "as its own claim judges it, before Holm; `nca_interp/paper/claims/decisive.py`)",
                 decisive),
                ("Power: the same students on more held-out items (`more_items/`)",
                 power_section),
                ("Context return (mean (min to max) over seeds, a spread not an interval; harm = "
                  "P(lost with c | won "
                 "without c))", context_return),
                ("Per run, 95% cluster-bootstrap intervals", per_seed)]
    if (figs / CONTEXT_CONTROL).exists():
        sections.append(("Robust or blind: the same items with a control context of c's form "
                         "that is wrong for each item (95% cluster-bootstrap intervals)",
                         context_control))
    for name, what in (("layer_sim", "response positions"),
                       ("layer_sim_generating", "positions generating the response (trained "
                        "by both losses)"),
                       ("layer_sim_prompt", "prompt x positions (no loss touches them: the "
                        "control)")):
        if (figs / f"{name}.json").exists():
            sections.append((f"Layer similarity with vs without context: {what}",
                             lambda f, n=name: layer_sim(f, n)))
    if (figs / TRAJECTORY).exists():
        sections.append(("Context return over training (trajectory; step 0 = the initial "
                         "checkpoint, the null)", trajectory_table))
    if (figs / HARM_DRIFT).exists():
        sections.append(("Harm against drift (`python -m nca_interp.paper.dose`: the methods "
                         "compared at "
                         "the same distance from step 0, not only at the same step)", harm_drift))
    if (figs / "scorer_agreement.json").exists():
        sections.append(("The rule's scorer: language identifier against the word list "
                         "(`python -m nca_interp.sizing --agreement`)", scorer_agreement))
    if (figs / GRAD_ALIGN_OPD).exists():
        sections.append(("Gradient alignment (over training: seed 0 of each method, further "
                         "seeds of each where run)", grad_align))
    if (figs / PARAM_DELTA).exists():
        sections.append(("Parameter deltas", param_delta))
    if (figs / PATCHING).exists():
        patched = analysis.load(figs / PATCHING).results
        kinds = {r.kind or "harm" for r in patched.values()}
        sections.append((f"Causal patching of the {' / '.join(sorted(kinds))} cases "
                         f"({', '.join(patched)})", patching))
    if (figs / LENS).exists():
        sections.append(("Where the returning context still acts, token by token (the two-view "
                         "lens on the first seed's students)", lens))
    if other_analyses(figs):
        sections.append(("Other registered analyses (no section of their own on this page: "
                         "their reports and figures)", other_analyses))
    sections.append(("Stage times (manifest.json)", stage_times))
    if list(figs.glob("*.png")) or list(figs.glob("*.html")):
        sections.append(("Figures (drawn from this folder's JSON; each links its interactive "
                         "HTML)", figures_section))
    for title, fn in sections:
        body = fn(figs)
        if body or fn is not power_section:  # the power section only where more items ran
            lines.append(f"## {title}\n\n{body}\n")
    return "\n".join(lines)


def published(root: Path = Path("figures")) -> list[str]:
    """Every folder whose README.md this module writes: each setting with pipeline output,
    and each preset run as its own folder (the depth rows) whose page was written."""
    from nca_interp.paper.settings import load

    catalogue = load()
    return [name for name in dict.fromkeys([*catalogue.settings, *catalogue.presets])
            if (root / name / "manifest.json").exists()
            and (name in catalogue.settings or (root / name / "README.md").exists())]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="sokoban",
                    help="a setting, or 'all': every published folder (`published`)")
    ap.add_argument("--figures", default="figures")
    ap.add_argument("--write", action="store_true",
                    help="also write figures/<task>/README.md (what the README links)")
    ap.add_argument("--html", action="store_true",
                    help="also redraw every HTML figure of the folder from its JSON")
    ap.add_argument("--png", action="store_true",
                    help="with --html: the PNGs too (kaleido + Debian chromium)")
    args = ap.parse_args(argv)
    if args.png and not args.html:
        raise UsageError("--png draws the PNGs beside the HTML figures; pass --html "
                         "--png (or neither)")
    if args.task == "all":
        if args.html:
            raise UsageError("--task all rewrites pages only; redraw figures one "
                             "setting at a time (--task <setting> --html)")
        for name in published(Path(args.figures)):
            figs = Path(args.figures) / name
            if args.write:
                write_page(figs, render(figs))
                print(f"wrote {figs / 'README.md'}")
            else:
                print(render(figs))
        return
    figs = Path(args.figures) / args.task
    if not (figs / "manifest.json").exists():
        raise UsageError(f"{figs} holds no pipeline output (no manifest.json); run "
                         f"`python -m nca_interp.paper.reproduce --task {args.task}` first")
    if args.html:  # every report it redraws is whole, or one line, before anything is written
        from nca_interp.paper.figures import load_reports

        load_reports(figs)
    text = render(figs)
    print(text)
    if args.write:
        write_page(figs, text)
    if args.html:
        from nca_interp.paper.figures import render_figures

        print("\n".join(render_figures(figs, png=args.png)))


if __name__ == "__main__":
    import sys

    from nca_interp.cli import entry

    sys.exit(entry(main))  # a user error in one line (a damaged report), not a traceback
