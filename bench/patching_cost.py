"""Cost of a full layer x head patching sweep against the forward passes it needs.

    python -m bench.patching_cost [--ckpt DIR] [--threads 1] [--cases 64]

The harm cases of a checkpoint (default: the embedded Sokoban OPD; the system-prompt OPD has
many more) are batched into one left-padded batch. Timed side by side in one run: one plain
batched forward of the context view, the source activations cached once (run_with_cache), and
the sweep that patches every head's output (hook_z) from the cache, one batched forward per
(layer, head). The ratio per patched forward says what the hooks cost; the sweep needs L x H + 1
forwards (not 2 x L x H: the source is cached once and reused).
"""

from __future__ import annotations

import argparse
import time

import torch

from bench.common import timeit
from nca_interp import patching
from nca_interp.assets import embedded
from nca_interp.checkpoint import load_checkpoint
from nca_interp.hooks import boot_bridge
from nca_interp.models import context_limit
from nca_interp.runs import resolve_task_and_context


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", default=str(embedded("sokoban_opd")))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cases", type=int, default=64)
    ap.add_argument("--n-levels", type=int, default=1000)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    task, ctx = resolve_task_and_context([args.ckpt], None, None)
    model, tok = load_checkpoint(args.ckpt)
    task = task.for_tokenizer(tok)
    harm, control, counts = patching.find_cases(model, tok, task, ctx,
                                                task.levels("test", args.n_levels))
    rows = harm or control  # timing only needs a batch
    cases = patching.build_cases(tok, task, ctx, rows[:args.cases], context_limit(model))
    bridge = boot_bridge(args.ckpt, loaded=(model, tok))
    L, H = bridge.cfg.n_layers, bridge.cfg.n_heads
    W0 = cases.src_ids.shape[1]
    names = [f"blocks.{i}.attn.hook_z" for i in range(L)]
    plain = timeit(lambda: patching.last_logits(bridge, cases.dst_ids, cases.dst_mask), 5, 1)
    cache = timeit(lambda: patching.cache_of(bridge, cases.src_ids, cases.src_mask, names), 5, 1)
    src = patching.cache_of(bridge, cases.src_ids, cases.src_mask, names)
    t0 = time.perf_counter()
    for i in range(L):
        for h in range(H):
            patching.last_logits(bridge, cases.dst_ids, cases.dst_mask,
                                 [(names[i], patching.patch_hook(src[names[i]][:, -W0:],
                                                                 cases.groups["all"], h))])
    sweep = time.perf_counter() - t0
    out = {"cases": len(cases), "kind": "harm" if harm else "control",
           "layers": L, "heads": H, "plain_forward_s": plain, "cache_source_s": cache,
           "sweep_s": sweep, "forwards": L * H + 1,
           "per_patched_forward_vs_plain": sweep / (L * H) / plain}
    print(f"checkpoint {args.ckpt}: {out['cases']} {out['kind']} cases, {L} layers x {H} heads")
    print(f"{'one batched forward, context view (s)':<48}{plain:.4f}")
    print(f"{'source activations cached once (s)':<48}{cache:.4f}")
    print(f"{'layer x head sweep, ' + str(L * H) + ' patched forwards (s)':<48}{sweep:.4f}")
    print(f"{'forwards needed (sweep + cache)':<48}{L * H + 1}  (without caching: {2 * L * H})")
    print(f"{'patched forward / plain forward':<48}"
          f"{out['per_patched_forward_vs_plain']:.2f}x")
    return out


if __name__ == "__main__":
    main()
