"""Attribution patching against exact patching on one checkpoint, both in one run: how well
the first-order estimate ranks the nodes, and what each way costs.

    python -m bench.attribution_agreement [--ckpt DIR] [--threads 1] [--cases 64]
                                          [--top-k 8] [--n-check 8] [--kind harm|help]
                                          [--scope full|groups] [--task T --task-options ..]

The harm (or `--kind help`) cases of a checkpoint (default: the embedded Sokoban OPD, 4
layers) are patched in the full scope (or `--scope groups`: residual groups and MLPs, as the
30-layer settings publish), both directions, and every head's reading of c removed: by
exact patching of every node (one forward each), by attribution
(`nca_interp.patching.attribution.attribute`: per direction one forward of the source view,
one forward and one backward of the target, and the two views' LDs), and by what `--method
attribution` runs (attribution, then exact patching of its top `--top-k` candidates and
`--n-check` random others). Printed per node family: Spearman's rank correlation of the
nodes' mean effects (attribution against the exact full sweep), the top-k overlap, and
`found`: the share of the exact top k that the candidates patched (what the
attribution-then-exact mode would miss), then the wall time and
forward / backward counts of each way.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import torch

from nca_interp import patching
from nca_interp.assets import embedded
from nca_interp.checkpoint import load_checkpoint
from nca_interp.errors import InputError
from nca_interp.hooks import boot_bridge
from nca_interp.models import context_limit
from nca_interp.patching.attribution import (
    agreement,
    attribute,
    confirmed_sweep,
    head_candidates,
    means,
)
from nca_interp.patching.heads import halves
from nca_interp.runs import resolve_task_and_context


def families(res: dict, abl: np.ndarray | None) -> dict[str, np.ndarray]:
    """{"forward heads": N L H, ...}: every node family of both directions' sweeps (and the
    head ablation) under one flat name."""
    out = {}
    for tag in ("forward", "reverse"):
        for fam in ("resid_groups", "mlp", "resid_offsets", "heads"):
            if fam not in res[tag]:  # --scope groups
                continue
            if fam == "resid_groups":
                out.update({f"{tag} resid {g}": v for g, v in res[tag][fam].items()})
            else:
                out[f"{tag} {fam}"] = res[tag][fam]
    if abl is not None:
        out["reading of c removed"] = abl
    return out


def found(exact: np.ndarray, patched: np.ndarray, k: int) -> float:
    """The share of the exact full sweep's top k nodes that a partial sweep patched."""
    e, p = means(exact), np.isfinite(means(patched))
    top = np.argsort(-np.nan_to_num(e, nan=-np.inf), kind="stable")[:k]
    return float(p[top].mean())


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", default=str(embedded("sokoban_opd")))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cases", type=int, default=64)
    ap.add_argument("--n-levels", type=int, default=1000)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--n-check", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kind", choices=("harm", "help"), default="harm")
    ap.add_argument("--scope", choices=("full", "groups"), default="full")
    ap.add_argument("--task", default=None, help="default: from the run config")
    ap.add_argument("--task-options", default=None, help="as the commands' (comma-separated)")
    ap.add_argument("--context", default=None, help="default: the run's context")
    args = ap.parse_args(argv)
    for flag in ("threads", "cases", "n_levels", "top_k"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')} must be at least 1 (got {getattr(args, flag)})")
    torch.set_num_threads(args.threads)
    options = args.task_options.split(",") if args.task_options else None
    task, ctx = resolve_task_and_context([args.ckpt], args.task, args.context, options)
    model, tok = load_checkpoint(args.ckpt)
    task = task.for_tokenizer(tok)
    rows, _, _ = patching.find_cases(model, tok, task, ctx, task.levels("test", args.n_levels),
                                     args.kind)
    if len(rows) < 4:
        raise InputError(f"{args.ckpt}: {len(rows)} {args.kind} cases among {args.n_levels} "
                         "test levels; comparing rankings needs at least 4: raise --n-levels")
    cases = patching.build_cases(tok, task, ctx, rows[:args.cases], context_limit(model))
    bridge = boot_bridge(args.ckpt, loaded=(model, tok))
    L, H, N = bridge.cfg.n_layers, bridge.cfg.n_heads, len(cases)
    tags = ("forward", "reverse")

    t0, exact_stats = time.perf_counter(), {"forwards": 0}
    exact = {tag: patching.sweep(bridge, cases, tag, exact_stats, args.scope) for tag in tags}
    exact_abl = patching.ablation(bridge, cases, stats=exact_stats)
    t_exact = time.perf_counter() - t0

    t0, attr_stats = time.perf_counter(), {}
    attr = {tag: attribute(bridge, cases, tag, attr_stats, args.scope) for tag in tags}
    attr_abl = attr["forward"].pop("ablation")
    t_attr = time.perf_counter() - t0

    t0, conf_stats = time.perf_counter(), {"forwards": 0}
    rng = np.random.default_rng(args.seed + 2)  # as `patching.sweeps` draws
    conf = {tag: confirmed_sweep(bridge, cases, tag, conf_stats, args.scope, attr[tag],
                                 args.top_k, args.n_check, rng) for tag in tags}
    picked = head_candidates(attr_abl, halves(N, args.seed), args.top_k, args.n_check, rng)
    conf_abl = patching.ablation(bridge, cases, picked["all"], conf_stats)
    t_conf = time.perf_counter() - t0 + t_attr

    print(f"checkpoint {args.ckpt}: {N} {args.kind} cases, {L} layers x {H} heads, "
          f"{args.scope} scope, "
          f"{args.threads} thread(s); top-k {args.top_k}, random check {args.n_check}")
    print(f"{'family':<26}{'nodes':>6}{'Spearman':>10}{'top-k overlap':>15}{'found':>7}"
          f"{'patched':>9}")
    rows = {}
    ex, at, co = families(exact, exact_abl), families(attr, attr_abl), families(conf, conf_abl)
    for name in ex:
        a = agreement(at[name], ex[name], args.top_k)
        rows[name] = {**a, "found": found(ex[name], co[name], a["k"]),
                      "patched": int(np.isfinite(means(co[name])).sum())}
        print(f"{name:<26}{a['n_nodes']:>6}{a['spearman']:>10.2f}{a['top_k_overlap']:>15.2f}"
              f"{rows[name]['found']:>7.2f}{rows[name]['patched']:>9}")
    confirmed = [r for n, r in rows.items() if "offsets" in n or "heads" in n or "reading" in n]
    print("found: share of the exact top k among the nodes the attribution-then-exact mode "
          "patched; patched: nodes it patched exactly (resid groups and MLPs: all, always)")
    print(f"{'way':<34}{'wall (s)':>10}{'forwards':>10}{'backwards':>11}")
    ways = {"exact, every node": (t_exact, exact_stats["forwards"] +
                                  exact_stats["ablation_forwards"], 0),
            "attribution alone": (t_attr, attr_stats["attribution_forwards"],
                                  attr_stats["attribution_backwards"]),
            "attribution, then exact (default)": (
                t_conf, attr_stats["attribution_forwards"] + conf_stats["forwards"]
                + conf_stats["ablation_forwards"], attr_stats["attribution_backwards"])}
    for way, (t, f, b) in ways.items():
        print(f"{way:<34}{t:>10.2f}{f:>10}{b:>11}")
    print(f"speed-up against exact: attribution alone {t_exact / t_attr:.1f}x, attribution "
          f"then exact {t_exact / t_conf:.1f}x; over the confirmed families the mean Spearman "
          f"is {np.nanmean([r['spearman'] for r in confirmed]):.2f} and the exact top k found "
          f"{np.mean([r['found'] for r in confirmed]):.2f}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB on Linux
    print(f"peak resident memory of this process (every way above): {peak:.2f} GB")
    return {"peak_rss_gb": peak, "ckpt": args.ckpt, "cases": N, "layers": L, "heads": H,
            "families": rows,
            "ways": {w: {"wall_s": t, "forwards": f, "backwards": b}
                     for w, (t, f, b) in ways.items()}}


if __name__ == "__main__":
    main()
