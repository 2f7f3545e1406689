"""grad_align's gradient step, side by side in one run: every loss term from one shared forward
of each view (what grad_align runs) against a forward of its own views per term.

    python -m bench.grad_align_cost [--ckpt DIR] [--teacher DIR] [--batch 64] [--parts 8]
                                    [--micro-batch 8] [--threads 1] [--repeat 3]

One on-policy batch of the checkpoint (default: the embedded Sokoban OPD, its teacher the
embedded base) is sampled once and split into `--parts` parts; both ways spill the three terms'
gradients of every part. Printed: the median seconds of each way, their ratio, and the largest
relative difference of the Gram matrices the two produce (float rounding only: the same
gradients, summed in the same order).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from nca_interp import grad_align
from nca_interp.assets import embedded
from nca_interp.checkpoint import load_checkpoint
from nca_interp.losses import TERMS
from nca_interp.models import context_limit
from nca_interp.runs import resolve_task_and_context


def spill_and_reduce(student, teacher, parts, by_term: bool) -> tuple[float, np.ndarray]:
    labels = [grad_align.label(t, h) for t in TERMS for h in range(1, len(parts) + 1)]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        for terms in ([(t,) for t in TERMS] if by_term else [TERMS]):
            grad_align.spill_term_gradients(student, teacher, parts, terms, Path(tmp))
        seconds = time.perf_counter() - t0
        return seconds, grad_align.stream_gram(Path(tmp), labels).mats["global"]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", default=str(embedded("sokoban_opd")))
    ap.add_argument("--teacher", default=str(embedded("sokoban_base")))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    task, ctx = resolve_task_and_context([args.ckpt], None, None)
    student, tok = load_checkpoint(args.ckpt)
    teacher, _ = load_checkpoint(args.teacher)
    teacher.requires_grad_(False)
    task = task.for_tokenizer(tok)
    levels = task.levels("grad", args.batch, 0)
    parts = grad_align.sample_halves(student, tok, task, levels, ctx, 1.0, 0, args.micro_batch,
                                     context_limit(student), args.parts)
    runs = {"shared": [], "by_term": []}
    grams = {}
    for _ in range(args.repeat):
        for way in runs:  # alternated, so a change of load falls on both
            seconds, grams[way] = spill_and_reduce(student, teacher, parts, way == "by_term")
            runs[way].append(seconds)
    med = {way: float(np.median(v)) for way, v in runs.items()}
    diff = float(np.abs(grams["shared"] - grams["by_term"]).max() /
                 np.abs(grams["by_term"]).max())
    out = {"ckpt": args.ckpt, "batch": args.batch, "parts": args.parts,
           "micro_batch": args.micro_batch, "threads": args.threads, "seconds": runs,
           "median_s": med, "speedup": med["by_term"] / med["shared"],
           "gram_max_rel_diff": diff}
    print(f"checkpoint {args.ckpt}: {args.batch} prompts in {args.parts} parts, micro-batch "
          f"{args.micro_batch}, {args.threads} thread(s), median of {args.repeat}")
    print(f"{'way':<34}{'s':>8}{'range':>18}")
    for way, label in (("by_term", "a forward of its own per term"),
                       ("shared", "one forward per view (grad_align)")):
        v = runs[way]
        print(f"{label:<34}{med[way]:>8.2f}{min(v):>9.2f} to {max(v):<6.2f}")
    print(f"speedup {out['speedup']:.2f}x; Gram matrices differ by {diff:.1e} (relative)")
    return out


if __name__ == "__main__":
    main()
