"""Cost of patching sweeps, each way side by side in one run: full forwards against the rerun of
only the blocks from the hooked layer on (`nca_interp.patching.rerun`).

    python -m bench.patching_cost [--ckpt DIR] [--threads 1] [--cases 64] [--heads true]
                                  [--resid true] [--heads-ablated 0.5] [--null-draws 10]

The harm cases of a checkpoint (default: the embedded Sokoban OPD), topped up with its
controls to `--cases`, are one left-padded batch. Timed: one plain batched forward of the
context view; the source activations cached once; the residual-stream sweep (one patched
forward per layer, as the groups scope runs per position group) by full forwards and by reruns
(the kept clean run included); with `--heads true`, the layer x head sweep both ways too
(L x H forwards each: long on a 30-layer model); each also by the column cut (only the columns
from the first patched one rerun, `Rerun.logits(hooks, first)`). Printed beside each: the
largest difference of the patched last-position logits between the ways (float rounding: the
rerun unembeds the last position alone).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from bench.common import timeit
from nca_interp import patching
from nca_interp.assets import embedded
from nca_interp.checkpoint import load_checkpoint
from nca_interp.errors import InputError
from nca_interp.hooks import boot_bridge
from nca_interp.models import context_limit
from nca_interp.names import head_z_hook, resid_hook
from nca_interp.patching.heads import Outcomes, answered_right, prompt_context
from nca_interp.patching.interventions import ablation_hooks, greedy
from nca_interp.patching.rerun import Rerun
from nca_interp.rollout import pad_id, stop_ids
from nca_interp.runs import resolve_task_and_context


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", default=str(embedded("sokoban_opd")))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cases", type=int, default=64)
    ap.add_argument("--n-levels", type=int, default=1000)
    ap.add_argument("--heads", default="true", choices=("true", "false"))
    ap.add_argument("--resid", default="true", choices=("true", "false"),
                    help="the residual sweep (false with --heads false: the answers alone)")
    ap.add_argument("--heads-ablated", type=float, default=0.5,
                    help="share of heads whose reading of c the timed greedy answers remove: "
                         "every round(1/share)-th head, so 0.3 removes a third (the count "
                         "removed is printed)")
    ap.add_argument("--null-draws", type=int, default=10,
                    help="random head sets timed for the null of the flipped rate, both ways "
                         "(0: skip)")
    ap.add_argument("--null-k", type=int, default=4, help="heads per random set")
    args = ap.parse_args(argv)
    for flag in ("threads", "cases", "n_levels", "null_k"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')} must be at least 1 (got {getattr(args, flag)})")
    if not 0 <= args.heads_ablated <= 1:
        ap.error(f"--heads-ablated is a share of the heads, 0 to 1 (got {args.heads_ablated})")
    torch.set_num_threads(args.threads)
    task, ctx = resolve_task_and_context([args.ckpt], None, None)
    model, tok = load_checkpoint(args.ckpt)
    task = task.for_tokenizer(tok)
    harm, control, counts = patching.find_cases(model, tok, task, ctx,
                                                task.levels("test", args.n_levels))
    rows = (harm + control)[:args.cases]  # timing needs a batch: harm cases, then controls
    if not rows:
        raise InputError(f"{args.ckpt}: no harm or control case among {args.n_levels} test "
                         f"levels (it wins none of them either way), so there is no batch to "
                         f"time: raise --n-levels or time a checkpoint that wins some")
    cases = patching.build_cases(tok, task, ctx, rows, context_limit(model))
    bridge = boot_bridge(args.ckpt, loaded=(model, tok))
    L, H = bridge.cfg.n_layers, bridge.cfg.n_heads
    W0 = cases.src_ids.shape[1]
    dst = (cases.dst_ids, cases.dst_mask)
    plain = timeit(lambda: patching.last_logits(bridge, *dst), 3, 1)
    resid = [resid_hook(i) for i in range(L)]
    z = [head_z_hook(i) for i in range(L)]
    cache = timeit(lambda: patching.cache_of(bridge, cases.src_ids, cases.src_mask, resid + z),
                   3, 1)
    src = patching.cache_of(bridge, cases.src_ids, cases.src_mask, resid + z)
    where = cases.groups["all"]
    sweeps, firsts = {}, {}
    if args.resid == "true":  # each position group the sweep patches, and its first column
        for g in patching.GROUPS:
            at = cases.groups[g]
            sweeps[f"resid {g}"] = [[(n, patching.patch_hook(src[n][:, -W0:], at))]
                                    for n in resid]
            cols = torch.nonzero(at.any(0))
            firsts[f"resid {g}"] = dst[0].shape[1] - W0 + int(cols[0]) if len(cols) else None
    if args.heads == "true":
        sweeps["head"] = [[(n, patching.patch_hook(src[n][:, -W0:], where, h))]
                          for n in z for h in range(H)]
        cols = torch.nonzero(where.any(0))
        firsts["head"] = dst[0].shape[1] - W0 + int(cols[0]) if len(cols) else None
    out = {"ckpt": args.ckpt, "cases": len(cases), "kind": f"{min(len(harm), len(rows))} harm + "
           f"{len(rows) - min(len(harm), len(rows))} control",
           "layers": L, "heads": H, "tokens": int(cases.dst_mask.sum()),
           "plain_forward_s": plain, "cache_source_s": cache, "sweeps": {}}
    print(f"checkpoint {args.ckpt}: {out['cases']} cases ({out['kind']}, {out['tokens']} "
          f"tokens), {L} layers x {H} heads, {args.threads} thread(s)")
    print(f"{'one batched forward, context view (s)':<44}{plain:.4f}")
    print(f"{'source activations cached once (s)':<44}{cache:.4f}")
    if sweeps:
        print(f"{'sweep':<16}{'forwards':>9}{'full (s)':>10}{'rerun (s)':>10}{'cut (s)':>9}"
              f"{'full/rerun':>11}{'full/cut':>9}{'max |diff|':>11}")
    for name, hooks in sweeps.items():
        t0 = time.perf_counter()
        full = [patching.last_logits(bridge, *dst, h) for h in hooks]
        t_full = time.perf_counter() - t0
        t0 = time.perf_counter()
        run = Rerun(bridge, *dst)
        fast = [run.logits(h) for h in hooks]
        t_fast = time.perf_counter() - t0
        t0 = time.perf_counter()
        run = Rerun(bridge, *dst)
        cut = [run.logits(h, firsts[name]) for h in hooks]
        t_cut = time.perf_counter() - t0
        diff = max(float((a - b).abs().max()) for a, b in zip(full, fast + cut))
        out["sweeps"][name] = {"forwards": len(hooks), "full_s": t_full, "rerun_s": t_fast,
                               "cut_s": t_cut, "speedup": t_full / t_fast,
                               "cut_speedup": t_full / t_cut, "max_abs_diff": diff,
                               "exact": run.exact, "column_cut": bool(run.suffix),
                               "first_column": firsts[name], "width": int(dst[0].shape[1])}
        print(f"{name:<16}{len(hooks):>9}{t_full:>10.2f}{t_fast:>10.2f}{t_cut:>9.2f}"
              f"{t_full / t_fast:>10.2f}x{t_full / t_cut:>8.2f}x{diff:>11.1e}")
    if sweeps:
        print("rerun: blocks l.. of a kept clean run and the last position's unembedding; cut: "
              "the same from the group's first patched column on, the earlier columns' keys "
              "and values kept (both columns include keeping their clean run)")
    out["generation"] = generation_cost(bridge, task, tok, model, cases, args.heads_ablated)
    if args.null_draws > 0:
        out["null"] = null_cost(bridge, task, tok, model, cases, args.null_draws, args.null_k)
    return out


def null_cost(bridge, task, tok, model, cases, draws: int, k: int) -> dict:
    """The random-head null of the flipped rate, both ways on the same `draws` head sets of
    `k`: every case decoded per set (`heads.answered_right`), and `heads.Outcomes` (one
    teacher-forced rerun per set, decoding only the cases it moves, the unablated answers
    decoded once and counted in its time). The outcomes must agree."""
    L, H = bridge.cfg.n_layers, bridge.cfg.n_heads
    every = [(li, h) for li in range(L) for h in range(H)]
    rng = np.random.default_rng(0)
    sets = [[every[j] for j in rng.choice(len(every), min(k, len(every)), replace=False)]
            for _ in range(draws)]
    stops = stop_ids(tok, model)
    t0 = time.perf_counter()
    plain = [answered_right(bridge, task, cases, s, stops) for s in sets]
    t_plain = time.perf_counter() - t0
    t0 = time.perf_counter()
    fast = Outcomes(bridge, task, cases, stops)
    quick = [fast.answered_right(s) for s in sets]
    t_fast = time.perf_counter() - t0
    agree = sum(bool(np.array_equal(a, b)) for a, b in zip(plain, quick))
    print(f"null of the flipped rate, {draws} random sets of {k} heads over {len(cases)} cases: "
          f"every case decoded {t_plain:.2f} s, decoded where moved {t_fast:.2f} s "
          f"({t_plain / t_fast:.2f}x; {fast.decoded} of {draws * len(cases)} case answers "
          f"decoded); {agree}/{draws} sets' outcomes identical")
    return {"draws": draws, "k": k, "decode_every_s": t_plain, "outcomes_s": t_fast,
            "speedup": t_plain / t_fast, "decoded": fast.decoded,
            "answers": draws * len(cases), "identical_sets": agree}


def generation_cost(bridge, task, tok, model, cases, share: float) -> dict:
    """The held-out head table's greedy answers with heads' reading of c removed, both ways:
    the whole sequence rerun at every step, and the KV-cached decoding (its first step checked
    against the former); the same tokens, or the difference is printed."""
    L, H = bridge.cfg.n_layers, bridge.cfg.n_heads
    ids, mask = cases.dst_prompt
    ctx = prompt_context(cases)
    every = [(li, h) for li in range(L) for h in range(H)]
    heads = every[::max(1, round(1 / share))] if share > 0 else []
    hooks = ablation_hooks(ctx, heads)
    times, outs = {}, {}
    for way, kv in (("rerun", False), ("cached", True)):
        t0 = time.perf_counter()
        outs[way] = greedy(bridge, ids, mask, task.max_response_tokens(),
                           stop_ids(tok, model), pad_id(tok), hooks, kv_cache=kv)
        times[way] = time.perf_counter() - t0
    same = sum(a == b for a, b in zip(outs["rerun"], outs["cached"]))
    mean_len = sum(map(len, outs["rerun"])) / len(ids)
    print(f"greedy answers, {len(heads)} of {L * H} heads' reading of c removed, {len(ids)} "
          f"cases, mean {mean_len:.1f} tokens: whole sequence each step {times['rerun']:.2f} s, "
          f"KV cache {times['cached']:.2f} s ({times['rerun'] / times['cached']:.2f}x); "
          f"{same}/{len(ids)} answers identical")
    return {"heads_ablated": len(heads), "mean_tokens": mean_len, "rerun_s": times["rerun"],
            "cached_s": times["cached"], "speedup": times["rerun"] / times["cached"],
            "identical": same, "n": len(ids)}


if __name__ == "__main__":
    main()
