"""Cost of patching sweeps, each way side by side in one run: full forwards against the rerun of
only the blocks from the hooked layer on (`nca_interp.patching.rerun`).

    python -m bench.patching_cost [--ckpt DIR] [--threads 1] [--cases 64] [--heads true]
                                  [--resid true] [--heads-ablated 0.5] [--null-draws 10]
                                  [--kind harm] [--generation true] [--null-ways W,W]
                                  [--null-k 4] [--null-chunk 8]

The harm cases of a checkpoint (default: the embedded Sokoban OPD), topped up with its
controls to `--cases`, are one left-padded batch. Timed: one plain batched forward of the
context view; the source activations cached once; the residual-stream sweep (one patched
forward per layer, as the groups scope runs per position group) by full forwards and by reruns
(the kept clean run included); with `--heads true`, the layer x head sweep both ways too
(L x H forwards each: long on a 30-layer model); each also by the column cut (only the columns
from the first patched one rerun, `Rerun.logits(hooks, first)`). Printed beside each: the
largest difference of the patched last-position logits between the ways (float rounding: the
rerun unembeds the last position alone). The random-head null of the held-out head table
(`--null-draws` head sets of `--null-k`) is timed up to three ways (`--null-ways`): every case
decoded per set (`decode`), one teacher-forced run a set with the moved answers decoded from
their prompts (`draw`: session 41's path) and the sets stacked along the batch with the moved
answers decoded on from their runs together (`stacked`: `heads.Outcomes.many`).
"""

from __future__ import annotations

import argparse
import resource
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
    ap.add_argument("--null-ways", default="decode,draw,stacked",
                    help="the null's ways timed, of decode, draw, stacked (see above)")
    ap.add_argument("--null-chunk", type=int, default=8,
                    help="sets each way times before the next way's turn")
    ap.add_argument("--kind", default="harm", choices=("harm", "help"),
                    help="the cases batched first (then controls)")
    ap.add_argument("--generation", default="true", choices=("true", "false"),
                    help="time the greedy answers both ways (whole sequence each step: long)")
    args = ap.parse_args(argv)
    for flag in ("threads", "cases", "n_levels", "null_k", "null_chunk"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')} must be at least 1 (got {getattr(args, flag)})")
    ways = args.null_ways.split(",")
    if not set(ways) <= set(NULL_WAYS) or not ways:
        ap.error(f"--null-ways takes some of {','.join(NULL_WAYS)} (got {args.null_ways})")
    if not 0 <= args.heads_ablated <= 1:
        ap.error(f"--heads-ablated is a share of the heads, 0 to 1 (got {args.heads_ablated})")
    torch.set_num_threads(args.threads)
    task, ctx = resolve_task_and_context([args.ckpt], None, None)
    model, tok = load_checkpoint(args.ckpt)
    task = task.for_tokenizer(tok)
    harm, control, counts = patching.find_cases(model, tok, task, ctx,
                                                task.levels("test", args.n_levels), args.kind)
    rows = (harm + control)[:args.cases]  # timing needs a batch: the cases, then controls
    if not rows:
        raise InputError(f"{args.ckpt}: no {args.kind} or control case among {args.n_levels} test "
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
    out = {"ckpt": args.ckpt, "cases": len(cases), "kind": f"{min(len(harm), len(rows))} "
           f"{args.kind} + "
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
    if args.generation == "true":
        out["generation"] = generation_cost(bridge, task, tok, model, cases, args.heads_ablated)
    if args.null_draws > 0:
        out["null"] = null_cost(bridge, task, tok, model, cases, args.null_draws, args.null_k,
                                ways, args.null_chunk)
    out["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB on Linux
    print(f"peak resident memory of this process (every way above): {out['peak_rss_gb']:.2f} GB")
    return out


NULL_WAYS = ("decode", "draw", "stacked")


def null_cost(bridge, task, tok, model, cases, draws: int, k: int,
              ways: list[str] = NULL_WAYS, chunk: int = 8) -> dict:
    """The random-head null on the same `draws` head sets of `k`, up to three ways: `decode`
    decodes every case per set (`heads.answered_right`); `draw` is one teacher-forced run a
    set, its moved answers decoded from their prompts (`heads.Outcomes` one set at a time,
    decoding on from the run turned off: session 41's path); `stacked` is `Outcomes.many` (the
    sets stacked along the batch, the moved answers decoded on from their runs in one batch).
    The ways take turns, `chunk` sets at a time, so a load that changes while they run falls
    on each alike; `draw` and `stacked` share one `Outcomes` (its setup, the unablated answers
    decoded and their clean run kept, timed once). The outcomes must be identical and, where
    the cases' prefixes are the answers, the effects equal."""
    from nca_interp.patching.interventions import view_lds

    L, H = bridge.cfg.n_layers, bridge.cfg.n_heads
    every = [(li, h) for li in range(L) for h in range(H)]
    rng = np.random.default_rng(0)
    sets = [[every[j] for j in rng.choice(len(every), min(k, len(every)), replace=False)]
            for _ in range(draws)]
    stops = stop_ids(tok, model)
    ld_src = view_lds(bridge, cases)[0]
    t0 = time.perf_counter()
    fast = Outcomes(bridge, task, cases, stops) if {"draw", "stacked"} & set(ways) else None
    if fast is not None:
        fast.run._suffix_ok()  # the clean keys and values kept: setup, as the answers are
    setup = time.perf_counter() - t0
    ld = ld_src if fast is not None and fast.shares_prefix else None
    got = {w: [] for w in ways}
    secs = dict.fromkeys(ways, 0.0)
    counts = {}
    for lo in range(0, draws, chunk):
        part = sets[lo:lo + chunk]
        for way in ways:
            t0 = time.perf_counter()
            if way == "decode":
                got[way] += [(None, answered_right(bridge, task, cases, s, stops)) for s in part]
            elif way == "draw":
                before = (fast.decoded, fast.from_prompt)
                rows, go_on = fast.rows, fast.go_on
                fast.rows, fast.go_on = len(cases), False
                got[way] += [fast.many([s], ld)[0] for s in part]
                fast.rows, fast.go_on = rows, go_on
                c = counts.setdefault(way, {"decoded": 0, "from_prompt": 0})
                c["decoded"] += fast.decoded - before[0]
                c["from_prompt"] += fast.from_prompt - before[1]
            else:
                before = (fast.decoded, fast.from_prompt)
                got[way] += fast.many(part, ld)
                c = counts.setdefault(way, {"decoded": 0, "from_prompt": 0})
                c["decoded"] += fast.decoded - before[0]
                c["from_prompt"] += fast.from_prompt - before[1]
            secs[way] += time.perf_counter() - t0
    if fast is not None:
        counts["stacked_rows"], counts["decoded_on"] = fast.run.rows_ok, fast.go_on
    base = ways[0]
    same = {w: sum(bool(np.array_equal(a[1], b[1])) for a, b in zip(got[base], got[w]))
            for w in ways}
    diff = {w: max((float(np.nanmax(np.abs(a[0] - b[0]))) for a, b in zip(got["draw"], got[w])
                    if a[0] is not None and b[0] is not None), default=None)
            for w in ways if "draw" in got}
    print(f"random-head null, {draws} sets of {k} heads over {len(cases)} cases, the ways taking "
          f"turns {chunk} sets at a time (setup, the unablated answers decoded and their clean "
          f"run kept once: {setup:.2f} s):")
    for w in ways:
        extra = f"; {counts[w]['decoded']} answers decoded, {counts[w]['from_prompt']} from " \
            "the prompt" if w in counts else ""
        print(f"  {w:<8}{secs[w]:>9.2f} s ({secs[base] / secs[w]:.2f}x of {base}); {same[w]}/"
              f"{draws} sets' outcomes as {base}'s; max |effect - draw's| {diff.get(w)}{extra}")
    if fast is not None:
        print(f"  stacked runs: {counts['stacked_rows']}; decoding on from the runs: "
              f"{counts['decoded_on']}")
    return {"draws": draws, "k": k, "chunk": chunk, "seconds": secs, "setup_s": setup,
            "identical_sets": same, "max_effect_diff": diff, "counts": counts,
            "answers": draws * len(cases)}


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
