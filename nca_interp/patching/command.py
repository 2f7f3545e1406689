"""The patching command: finds each checkpoint's cases (`cases`), runs the sweeps
(`interventions`, `attribution`) and the held-out head selection (`heads`), writes the report and
prints its tables. What the numbers mean: the package's docstring (`nca_interp.patching`), whose
names (`patching.run`, `patching.main`, ...) are this module's, imported on first use.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from nca_interp import analysis
from nca_interp.checkpoint import load_checkpoint, verify_folder
from nca_interp.cli import finite_json, parse_config, validate
from nca_interp.configs import PatchingConfig
from nca_interp.errors import UsageError
from nca_interp.hooks import as_bridge, attached_hooks, boot_bridge
from nca_interp.labelled import Arrays, Labelled, as_float, stack_ragged
from nca_interp.models import context_limit
from nca_interp.patching.attribution import (
    BY,
    agreement,
    attribute,
    confirmed_sweep,
    head_candidates,
)
from nca_interp.patching.cases import Cases, build_cases, find_cases
from nca_interp.patching.heads import halves, held_out_heads, interval
from nca_interp.patching.interventions import (
    GROUPS,
    ablation,
    logit_lens,
    pattern_edits_reach_logits,
    sweep,
)
from nca_interp.reports import Patching, PatchingReport, as_report
from nca_interp.rollout import stop_ids
from nca_interp.runs import resolve_task_and_context
from nca_interp.tasks import Task, make_task
from nca_interp.tokenizer import check_tokenizer

__all__ = ["ABLATE_NOTE", "CORE_OPTIONS", "DEMO", "DEMO_SCOPE", "DIRECTIONS", "FLIPPED",
           "ablate_of", "arrays_of", "direction_record", "execute", "figures", "format_report",
           "kind_of", "main", "measure", "patch", "report_arrays", "run", "run_checkpoint",
           "show", "sweeps"]

log = logging.getLogger(__spec__.name if __spec__ else __name__)  # python -m too

PACKAGE = "nca_interp.patching"  # the registered analysis module: its names are this module's


def summarise(arr: np.ndarray, units: list | None = None) -> dict:
    with warnings.catch_warnings():  # a node not patched (attribution's method) is all NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return {"per_case": np.asarray(arr).tolist(), **interval(arr, units=units)}


def run(cfg: PatchingConfig | None = None, /, **fields) -> dict:
    """The patching report of each checkpoint (an `analysis` report, results keyed by
    checkpoint name; see `run_checkpoint` for each entry's fields); at least one checkpoint
    (the bare command line, naming none, patches the embedded Sokoban OPD student at
    `DEMO_SCOPE`). `run(PatchingConfig(...))` or `run(ckpt=[...], ...)`."""
    cfg = analysis.config(PatchingConfig, cfg, fields)
    validate(cfg)
    _check_exact_sizes(cfg)
    paths = analysis.checkpoint_paths(cfg)
    for p in paths:
        verify_folder(p)
    results: dict[str, dict] = {}
    folders: dict[str, str] = {}
    for p in paths:
        r = run_checkpoint(p, cfg)
        name = analysis.label_of(r["checkpoint"], results)
        results[name], folders[name] = r, p
    first = next(iter(results.values()))
    return analysis.make_report(cfg, task=first["task"], context=first["context"],
                                paths=folders, results=results)


def _check_exact_sizes(cfg: PatchingConfig) -> None:
    sizes = {f.name: f.default for f in dataclasses.fields(PatchingConfig)}
    ignored = [n for n in ("top_k", "n_check") if getattr(cfg, n) != sizes[n]]
    if cfg.method == "exact" and ignored:  # --top-k 5 was ignored without a word
        raise UsageError(f"--{ignored[0].replace('_', '-')} sizes --method attribution's exact "
                         "checks; --method exact patches every node: drop one of them")


def demo_scope(cfg: PatchingConfig) -> PatchingConfig:
    """`cfg` at DEMO_SCOPE when it names no checkpoint and leaves the scope at its defaults."""
    defaults = PatchingConfig()
    if cfg.ckpt or any(getattr(cfg, k) != getattr(defaults, k) for k in DEMO_SCOPE):
        return cfg
    log.info("no checkpoint named: the embedded Sokoban OPD student, demo scope "
             + ", ".join(f"{k}={v}" for k, v in DEMO_SCOPE.items())
             + " (name checkpoints, or set any of these, for the full default)")
    return dataclasses.replace(cfg, **DEMO_SCOPE)


def run_checkpoint(path: str, cfg: PatchingConfig) -> dict:
    """The patching report of one checkpoint folder: `measure` on the model it holds.

    Fields: checkpoint, task, context, kind, scope, ablate, counts (levels, right_no_c,
    right_c, harm, help, both), n_layers, n_heads; with cases: `<kind>` (n, t_star, ld_no_c,
    ld_c), forward and reverse (resid_groups, mlp; in the full scope also resid_offsets,
    heads), ablation (per head), heads (the held-out table of `patching.heads`), lens,
    control, cost."""
    path = str(verify_folder(path))
    found, ctx = resolve_task_and_context([path], cfg.task, cfg.context, cfg.task_options)
    _check_scored(found, f"{path}'s data")
    t0 = time.time()
    model, tok = load_checkpoint(path)
    return measure(model, tok, found, ctx, cfg, path,
                   lambda: boot_bridge(path, loaded=(model, tok)), t0)


def _check_scored(task, what: str) -> None:
    if not getattr(task, "scored", True):
        raise UsageError(f"patching follows harm or help cases, which need a score: {what} "
                         "has no scorer and no answers; pass scorer= (or answers) in "
                         "--task-options")


def measure(model, tok, found, ctx: str, cfg: PatchingConfig, path: str, make_bridge,
            t0: float | None = None) -> dict:
    """One model's patching entry (the fields `run_checkpoint` lists): its cases found on the
    plain `model`, then every sweep on the bridge `make_bridge()` returns (wrapping the
    model in place for a folder's, a copy for one in memory); `path` names it in the entry."""
    t0 = time.time() if t0 is None else t0
    kind, scope, ablate, seed = cfg.kind, cfg.scope, cfg.ablate, cfg.seed
    max_cases, ks, n_random, n_random_generate = (cfg.max_cases, cfg.ks, cfg.n_random,
                                                  cfg.n_random_generate)
    found = found.for_tokenizer(tok)
    limit, stops = context_limit(model), stop_ids(tok, model)
    levels = found.levels("test", cfg.n_levels, seed)
    rows, control_rows, counts = find_cases(model, tok, found, ctx, levels, kind)
    bridge = make_bridge()
    own_hooks = attached_hooks(bridge)  # the bridge's own (OPT's attention keeps six)
    no_ablation = None if pattern_edits_reach_logits(bridge) else (
        f"not measured: through TransformerLens's bridge, editing the hooked attention pattern "
        f"changes none of this {model.config.model_type} model's logits (its attention does not "
        "read it), so removing heads' reading of c would measure exactly nothing; the residual, "
        "MLP and head-output patching and the logit lens do take effect and are reported")
    if no_ablation:
        log.warning(f"{Path(path).name}: head ablation {no_ablation}")
    report = {"checkpoint": path, "task": found.name, "context": ctx, "kind": kind,
              "scope": scope, "ablate": ablate, "counts": counts, "n_layers": bridge.cfg.n_layers,
              "n_heads": bridge.cfg.n_heads, "data": analysis.data_record(found, levels)}
    control = build_cases(tok, found, ctx, control_rows[:max_cases], limit, ablate) \
        if control_rows else None
    control_units = [found.unit(lv) for lv in control.levels] if control is not None else None
    if control is not None:
        report["control"] = {"n": len(control), "lens": {
            k: summarise(v, control_units) for k, v in logit_lens(bridge, control).items()}}
    if not rows:
        what = {"harm": "right without c, wrong with c", "help": "wrong without c, right with c"}
        report["note"] = f"no {kind} case ({what[kind]}) among these levels"
        return report
    cases = build_cases(tok, found, ctx, rows[:max_cases], limit, ablate)
    units = [found.unit(lv) for lv in cases.levels]
    report["cases"] = [{"unit": found.unit(lv), "right": tok.decode(right),
                        "wrong": tok.decode(wrong), "t_star": t}
                       for lv, right, wrong, t in rows[:max_cases]]
    stats = {"forwards": 0}
    t1 = time.time()
    res, attr, picked = sweeps(bridge, cases, cfg, stats, units, not no_ablation)
    sweep_s = time.time() - t1
    fwd = res["forward"]
    report[kind] = {"n": len(cases), "t_star": cases.t_star,
                    "ld_no_c": fwd["ld_src"], "ld_c": fwd["ld_dst"]}
    for tag in ("forward", "reverse"):
        report[tag] = direction_record(res[tag], attr.get(tag), units, cfg)
    abl = res.get("ablation")
    report["ablation"] = None if abl is None else {
        **summarise(abl, units), **method_record(abl, attr.get("ablation"), picked, units, cfg)}
    report["heads"] = {"note": f"head ablation {no_ablation}"} if no_ablation or abl is None else \
        held_out_heads(bridge, found, cases, control, abl, kind, list(ks), stops, n_random,
                       n_random_generate, seed, stats, units, control_units,
                       picked and {"A": picked["A"], "B": picked["B"]}, cfg.null_stop)
    report["lens"] = {k: summarise(v, units) for k, v in logit_lens(bridge, cases).items()}
    report["cost"] = {"cases": len(cases), "method": cfg.method,
                      "patched_forwards": stats["forwards"],
                      "ablation_forwards": stats.get("ablation_forwards", 0),
                      "attribution_forwards": stats.get("attribution_forwards", 0),
                      "attribution_backwards": stats.get("attribution_backwards", 0),
                      "generations": stats.get("generations", 0),
                      # answers a head set moved, so decoded (`heads.Outcomes`)
                      "decoded_cases": stats.get("decoded_cases", 0), "sweep_s": sweep_s,
                      "total_s": time.time() - t0}
    assert attached_hooks(bridge) == own_hooks
    # NaN (a node attribution left unpatched, a case whose views barely differ) as None: the
    # report in memory is what its file holds
    return finite_json(report)


CORE_OPTIONS = ("kind", "scope", "n_levels", "max_cases", "ablate", "ks", "n_random",
                "n_random_generate", "null_stop", "method", "top_k", "n_check", "seed")


def patch(model, tok, task: Task | str, context: str, **options) -> Arrays:
    """The core, on a model in memory (a transformers causal LM and its `tok`; the sweeps run
    on a TransformerBridge over a copy): its cases among `n_levels` held-out items, every
    sweep, the head table and the logit lens, as the command patches a checkpoint folder,
    as labelled arrays (`arrays_of`). `task` a Task or its name (its defaults); `options` the
    command's (`CORE_OPTIONS`: kind, scope, n_levels, max_cases, method, ...)."""
    if set(options) - set(CORE_OPTIONS):
        raise UsageError(f"patching.patch takes the options {list(CORE_OPTIONS)}, not "
                         f"{sorted(set(options) - set(CORE_OPTIONS))}")
    cfg = PatchingConfig(**options)
    validate(cfg)
    _check_exact_sizes(cfg)
    check_tokenizer(tok)
    task = make_task(task) if isinstance(task, str) else task
    _check_scored(task, "the task")
    return arrays_of(measure(model, tok, task, context, cfg, "in memory",
                             lambda: as_bridge(model, tok)))


FAMILIES = ("mlp", "resid_offsets", "heads")  # a direction's families beside resid_groups
# each checkpoint finds its own cases; its prompts' length bounds the offsets (32 at most)
RAGGED = ("case", "control_case", "offset")
TAGS = ("forward", "reverse")  # the sweeps' directions (what `DIRECTIONS` says they mean)


def _put(out: dict, name: str, summary: dict | None, dims: tuple[str, ...], coords: dict,
         case: str = "case") -> None:
    """A family's `summarise`d effects as `name` (case, *dims), `name_mean` (*dims) and
    `name_ci95` (*dims, bound)."""
    if summary is None:
        return
    per = as_float(summary["per_case"])
    out[name] = Labelled(per, (case, *dims), {**coords, case: tuple(range(len(per)))}, name)
    out[f"{name}_mean"] = Labelled(as_float(summary["mean"]), dims, coords, f"{name}_mean")
    out[f"{name}_ci95"] = Labelled(np.stack([as_float(summary["lo"]), as_float(summary["hi"])],
                                            -1), (*dims, "bound"),
                                   {**coords, "bound": ("lo", "hi")}, f"{name}_ci95")


def arrays_of(entry: Mapping) -> Arrays:
    """One checkpoint's patching entry (as `measure` gives it, or as a report holds it) as
    labelled arrays: per direction (`forward`, `reverse`) each residual group
    (`<direction>_resid_<group>`: case x layer), `<direction>_mlp` (case x layer),
    `<direction>_resid_offsets` (case x layer x offset) and `<direction>_heads` (case x layer
    x head); `ablation` (case x layer x head); the logit lens `lens_<kl|rank_no_c|rank_c>`
    (case x layer, from the embeddings) and the controls' (`control_lens_*`, control_case x
    layer); each with its `_mean` and `_ci95` (bound: lo, hi); `t_star`, `ld_no_c`, `ld_c`
    per case; the counts as numbers. `attrs`: the cases, the head table, the methods, the
    cost and any note. A node attribution left unpatched is NaN."""
    L, H = int(entry["n_layers"]), int(entry["n_heads"])
    blocks = {"layer": tuple(str(i) for i in range(L))}
    lens_layers = {"layer": ("embed", *blocks["layer"])}
    out: dict[str, Labelled] = {}
    kind = kind_of(entry)
    found = entry.get(kind)
    if found:
        n = {"case": tuple(range(len(found["t_star"])))}
        for k, v in (("t_star", found["t_star"]), ("ld_no_c", found["ld_no_c"]),
                     ("ld_c", found["ld_c"])):
            out[k] = Labelled(as_float(v), ("case",), n, k)
    for tag in TAGS:
        res = entry.get(tag) or {}
        for g, summary in (res.get("resid_groups") or {}).items():
            _put(out, f"{tag}_resid_{g}", summary, ("layer",), blocks)
        _put(out, f"{tag}_mlp", res.get("mlp"), ("layer",), blocks)
        if res.get("resid_offsets"):
            K = np.shape(res["resid_offsets"]["mean"])[-1]
            _put(out, f"{tag}_resid_offsets", res["resid_offsets"], ("layer", "offset"),
                 {**blocks, "offset": tuple(range(1, K + 1))})
        _put(out, f"{tag}_heads", res.get("heads"), ("layer", "head"),
             {**blocks, "head": tuple(range(H))})
    _put(out, "ablation", entry.get("ablation"), ("layer", "head"),
         {**blocks, "head": tuple(range(H))})
    for k, summary in (entry.get("lens") or {}).items():
        _put(out, f"lens_{k}", summary, ("layer",), lens_layers)
    for k, summary in ((entry.get("control") or {}).get("lens") or {}).items():
        _put(out, f"control_lens_{k}", summary, ("layer",), lens_layers, "control_case")
    for k, v in (entry.get("counts") or {}).items():
        out[f"count_{k}"] = Labelled(as_float(v), (), {}, f"count_{k}")
    methods = {tag: (entry.get(tag) or {}).get("methods") for tag in TAGS}
    return Arrays(out, {"kind": kind, "cases": entry.get("cases"), "heads": entry.get("heads"),
                        "methods": methods, "cost": entry.get("cost"),
                        "note": entry.get("note"), "counts": entry.get("counts")})


def report_arrays(report: PatchingReport | dict) -> Arrays:
    """A patching report's entries as the core's labelled arrays (`arrays_of`), stacked on
    `checkpoint` (the report's result keys), each checkpoint's cases at their own labels (its
    `case` padded with NaN to the most cases any found; a checkpoint with none is NaN)."""
    report = as_report(report, PatchingReport)
    parts = {name: arrays_of(migrate(e.to_json())) for name, e in report.results.items()}
    return stack_ragged(parts, "checkpoint", RAGGED)


def sweeps(bridge, cases: Cases, cfg: PatchingConfig, stats: dict, units: list,
           ablate: bool) -> tuple[dict, dict, dict | None]:
    """Both directions' sweeps and, with `ablate`, each head's reading of c removed, by
    `cfg.method`: ({"forward", "reverse", "ablation"}: exact effects (NaN where attribution
    left a node unpatched), {"forward", "reverse", "ablation"}: attribution estimates (empty
    for the exact method), the heads patched exactly for the head table (None: all))."""
    if cfg.method == "exact":
        res: dict[str, Any] = {tag: sweep(bridge, cases, tag, stats, cfg.scope)
                               for tag in ("forward", "reverse")}
        res["ablation"] = ablation(bridge, cases, stats=stats) if ablate else None
        return res, {}, None
    attr: dict[str, Any] = {tag: attribute(bridge, cases, tag, stats, cfg.scope, ablation=ablate)
            for tag in ("forward", "reverse")}
    rng = np.random.default_rng(cfg.seed + 2)
    res = {tag: confirmed_sweep(bridge, cases, tag, stats, cfg.scope, attr[tag], cfg.top_k,
                                cfg.n_check, rng) for tag in ("forward", "reverse")}
    if not ablate:
        return res, attr, None
    attr["ablation"] = attr["forward"].pop("ablation")
    N, (L, H) = len(cases), attr["ablation"].shape[1:]
    # the held-out table's halves (`heads.halves`, same seed): each half's candidates are
    # ranked on its own cases; enough of them for the largest k below all heads
    split = halves(N, cfg.seed, units) if N >= 4 and (units is None or len(set(units)) >= 2) \
        else None
    k = max([cfg.top_k] + [k for k in cfg.ks if k < L * H])
    picked = head_candidates(attr["ablation"], split, k, cfg.n_check, rng)
    res["ablation"] = ablation(bridge, cases, picked["all"], stats)
    return res, attr, picked


def method_record(exact: np.ndarray, attr: np.ndarray | None, picked: dict | None,
                  units: list, cfg: PatchingConfig) -> dict:
    """What produced a family's numbers (`method`), and with attribution its estimates
    (`attribution`, summarised as the exact ones are), its candidates and `agreement` (rank
    correlation, top-k overlap and misses of the random check, `attribution.agreement`)."""
    if attr is None:
        return {"method": BY["exact"]}
    if picked is None:  # a family patched in full: the attribution is compared on every node
        return {"method": BY["exact"], "attribution": summarise(attr, units),
                "agreement": agreement(attr, exact, cfg.top_k)}
    top = sorted(set(picked.get("top", [])) | set(picked.get("top_a", []))
                 | set(picked.get("top_b", [])))
    return {"method": BY["attribution"], "attribution": summarise(attr, units),
            "candidates": {"top": top, "check": picked["check"]},
            "agreement": agreement(attr, exact, cfg.top_k, picked["check"])}


def direction_record(res: dict, attr: dict | None, units: list, cfg: PatchingConfig) -> dict:
    """One direction's report: each family's summary of exact effects, and beside it
    `methods` (what produced it, the attribution and their agreement: `method_record`)."""
    out: dict[str, Any] = {}
    methods: dict[str, dict] = {}
    for k in ("resid_groups", "mlp", "resid_offsets", "heads"):
        if k not in res:
            continue
        if k == "resid_groups":
            out[k] = {g: summarise(v, units) for g, v in res[k].items()}
            for g, v in res[k].items():
                methods[f"{k}.{g}"] = method_record(v, None if attr is None else attr[k][g],
                                                    None, units, cfg)
        else:
            out[k] = summarise(res[k], units)
            methods[k] = method_record(res[k], None if attr is None else attr[k],
                                       res.get("candidates", {}).get(k), units, cfg)
    out["methods"] = methods
    return out


def fmt(v) -> str:
    return "  -  " if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:5.2f}"


def ci(s: dict | None) -> str:
    """`mean [lo, hi]` of an interval dict."""
    if not s or s.get("mean") is None:
        return "-"
    return f"{fmt(s['mean']).strip()} [{fmt(s['lo']).strip()}, {fmt(s['hi']).strip()}]"


def stop_text(stop: int | None) -> str:
    """How a k's draws ended early (`heads.null_summary`), or nothing where they did not."""
    return (f", ending once {stop} draws of either reach the observed (p = {stop} / draws)"
            if stop else "")


def null_text(s: dict | None) -> str:
    if not s or not s.get("n"):
        return "-"
    stopped = f", {s['n']} draws: stopped" if s.get("stopped_at") else ""
    return (f"{s['mean']:.2f} (95% of draws {s['lo']:.2f} to {s['hi']:.2f}; p {s['p']:.3f}"
            f"{stopped})")


DIRECTIONS = {"harm": {"forward": "no-context -> context (restores the right answer)",
                       "reverse": "context -> no-context (injects the harm)"},
              "help": {"forward": "no-context -> context (removes the help)",
                       "reverse": "context -> no-context (injects the help)"}}
FLIPPED = {"harm": "harm cases answered right", "help": "help cases answered wrong"}


# what a report that does not record a field meant by it (the one migration of old files)
MIGRATE = {"kind": "harm", "ablate": "context"}


def migrate(r: Mapping) -> dict:
    """A report with every field `MIGRATE` names (a report that lacks one gets its meaning)."""
    return {**MIGRATE, **r}


def kind_of(r: Mapping) -> str:
    """The case kind of a report: harm or help."""
    return migrate(r)["kind"]


def ablate_of(r: Mapping) -> str:
    """What a report's head ablation removed: prefix or context."""
    return migrate(r)["ablate"]


ABLATE_NOTE = {
    "prefix": "attention removed from everything [c, x] has before what it shares with x: c and "
              "the newline that joins it to x (every head removed: the no-context run, where x is "
              "a suffix of [c, x])",
    "context": "attention removed from c's own tokens only (`--ablate context`): the newline "
               "joining c to x stays readable, so removing every head "
               "is not the no-context run: what the all-heads row leaves unexplained includes "
               "that newline's own effect"}


def format_report(r: Patching) -> str:
    c, kind = r.counts, kind_of(r)
    assert c is not None  # every entry counts its cases
    lines = [f"{Path(r.checkpoint).name}: task={r.task} context={r.context}  levels "
             f"{c['levels']}, right without c {c['right_no_c']}, harm cases {c['harm']}, "
             f"help cases {c.get('help', '-')}, both right {c['both']}"]
    if kind not in r:
        return "\n".join(lines + [r.note or ""])
    L, H, lens, cost = r.n_layers, r.n_heads, r.lens, r.cost
    assert L is not None and H is not None and lens is not None and cost is not None  # with cases
    lines.append(f"patched {r[kind]['n']} {kind} cases (0 = run unchanged, 1 = the other "
                 "view's value; mean [95% bootstrap over cases, a unit's cases together])")
    for tag in ("forward", "reverse"):
        lines.append(f"  residual stream, {DIRECTIONS[kind][tag]}:")
        lines.append("    layer " + " ".join(f"{g:>18}" for g in GROUPS))
        rg = r[tag]["resid_groups"]
        for layer in range(L):
            cells = [f"{fmt(rg[g]['mean'][layer])} [{fmt(rg[g]['lo'][layer])},"
                     f"{fmt(rg[g]['hi'][layer])}]" for g in GROUPS]
            lines.append(f"    {layer:>5} " + " ".join(f"{x:>18}" for x in cells))
        mlp = r[tag]["mlp"]
        lines.append("    mlp out: " + "  ".join(f"L{i} {fmt(mlp['mean'][i])}"
                                                 for i in range(L)))
        if "heads" in r[tag]:
            hd = np.array(r[tag]["heads"]["mean"], dtype=float)  # None: not patched
            top = np.argsort(-np.nan_to_num(hd, nan=-9), axis=None)[:4]
            lines.append("    heads (hook_z): " + ", ".join(
                f"L{i // H}H{i % H} {hd.flat[i]:.2f}" for i in top))
    if r.ablation is not None:
        ab = np.array(r.ablation["mean"], dtype=np.float64)
        top = np.argsort(-np.nan_to_num(ab, nan=-9), axis=None)[:6]
        lines.append("  removing one head's attention to c, all cases (1 = the no-context "
                     "value): " + ", ".join(f"L{i // H}H{i % H} {ab.flat[i]:.2f}" for i in top))
    lines += format_heads(r).splitlines()
    kl = lens["kl"]["mean"]
    lines.append("  logit lens at the deciding position, KL(no c || c) per layer (embed first): "
                 + " ".join(f"{v:.2f}" for v in kl))
    if r.control is not None:
        ckl = r.control["lens"]["kl"]["mean"]
        lines.append("    controls (both right):                                 " +
                     " ".join(f"{v:.2f}" for v in ckl))
    rk = lens["rank_c"]["mean"]
    lines.append("  rank of the right answer in the context view per layer: " +
                 " ".join(f"{v:.1f}" for v in rk))
    lines += format_agreement(r).splitlines()
    parts = [f"{cost['patched_forwards']} batched patched runs"]
    if "ablation_forwards" in cost:  # reports from before attribution patching lack these
        parts.append(f"{cost['ablation_forwards']} head ablations")
    if cost.get("attribution_forwards") or cost.get("attribution_backwards"):
        parts.append(f"{cost['attribution_forwards']} + {cost['attribution_backwards']} "
                     "attribution forwards + backwards")
    method = f" ({cost['method']})" if "method" in cost else ""
    decoded = f" ({cost['decoded_cases']} answers decoded)" if "decoded_cases" in cost else ""
    lines.append(f"  cost{method}: {', '.join(parts)} and {cost.get('generations', 0)} "
                 f"generations{decoded} over {cost['cases']} cases; {cost['sweep_s']:.1f} s "
                 f"sweeps, {cost['total_s']:.1f} s in all")
    return "\n".join(lines)


def format_agreement(r: Patching) -> str:
    """Attribution against exact patching, per family (nothing for the exact method)."""
    fams = [(f"{tag} {k}", m) for tag in ("forward", "reverse")
            for k, m in (r[tag] or {}).get("methods", {}).items()]
    fams += [("removing a head's reading of c", r.ablation)] if r.ablation else []
    out = [f"    {name:<34} Spearman {fmt(m['agreement']['spearman'])}, top-"
           f"{m['agreement']['k']} overlap {fmt(m['agreement']['top_k_overlap'])} over "
           f"{m['agreement']['n_exact']}/{m['agreement']['n_nodes']} patched exactly, "
           f"{len(m['agreement']['misses'])} misses in the random check"
           for name, m in fams if m and "agreement" in m]
    return "\n".join(["  attribution against exact patching (tables above: exact effects):"]
                     + out) if out else ""


def format_heads(r: Patching) -> str:
    """The held-out head table as text."""
    kind = kind_of(r)
    hd = r.heads or {}
    if "rows" not in hd:
        return "  heads: " + hd.get("note", "")
    out = [f"  heads chosen on one half of the cases, judged on the other ({FLIPPED[kind]}; "
           f"nulls: {'up to ' if hd.get('null_stop') else ''}{hd['n_random']} / "
           f"{hd['n_random_generate']} random-head draws"
           f"{stop_text(hd.get('null_stop'))}):",
           f"    {'k':>3} {'chosen on A':<22} {'pct':>4} {'LD effect':>18} {'null':>44} "
           f"{'flipped':>18} {'null':>44} {'broken controls':>18}"]
    for row in hd["rows"]:
        out.append(f"    {row['k']:>3} {','.join(row['chosen_on_a'])[:22]:<22} "
                   f"{row['percentile']:>4.0f} {ci(row['effect']):>18} "
                   f"{null_text(row.get('effect_null')):>44} {ci(row['flipped']):>18} "
                   f"{null_text(row.get('flipped_null')):>44} "
                   f"{ci(row.get('broken_control')):>18}")
    return "\n".join(out)


def show(report: PatchingReport | dict) -> None:
    report = as_report(report, PatchingReport)
    for r in report.results.values():
        print(format_report(r) + "\n")


def figures(report: PatchingReport | dict) -> dict:
    """{"<checkpoint>_positions", "<checkpoint>_heads", "<checkpoint>_lens"} of each
    checkpoint with cases (`plots.patching_figures`)."""
    report = as_report(report, PatchingReport)
    from nca_interp.plots import patching_figures

    # a results key is the folder name, or the whole path where two share it (`runs/a/final`,
    # `runs/b/final`): figures take the shortest unique trailing parts, `/` written `_`
    names = {k: v.replace("/", "_").replace("\\", "_")
             for k, v in analysis.short_labels(list(report.results)).items()}
    if len(set(names.values())) < len(names):  # `a_b` beside `a/b`: positions tell them apart
        names = {k: f"{i + 1}_{v}" for i, (k, v) in enumerate(names.items())}
    return {f"{names[name]}_{suffix}": fig for name, r in report.results.items()
            for suffix, fig in patching_figures(r).items()}


def main(argv: list[str] | PatchingConfig | None = None) -> dict:
    cfg = demo_scope(parse_config(PatchingConfig, argv, sys.modules[PACKAGE].__doc__,
                                 positional="ckpt"))
    return execute(analysis.command_defaults(sys.modules[PACKAGE], cfg))


DEMO = ("sokoban_opd",)  # what the bare command line patches (at DEMO_SCOPE)


# with no checkpoint named and the scope left at its defaults: the embedded OPD student with
# this scope (16 cases, one head per half, 20 random-head draws: under a minute on one CPU
# core; the full default patches 64 cases with 100 draws per k and an answer-outcome null)
DEMO_SCOPE: dict[str, Any] = {"scope": "groups", "max_cases": 16, "ks": [1], "n_random": 20,
              "n_random_generate": 0}


def execute(cfg: PatchingConfig) -> dict:
    """The command on a config object (what `nca_interp.paper.reproduce` calls; `main` parses the
    command line into one): see `analysis.execute`."""
    return analysis.execute(sys.modules[PACKAGE], cfg)
