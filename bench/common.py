"""Shared timing helpers for the benchmarks (one thing at a time: the machine has 2 cores)."""

from __future__ import annotations

import time

import torch


def timeit(fn, repeat: int = 10, warmup: int = 2) -> float:
    """Median seconds per call."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def parse_args(doc: str, argv, batch: int, **extra):
    """--ckpt (default: the embedded Sokoban base), --batch, --threads, plus `extra` defaults;
    sets torch's threads and flush-denormal as training does."""
    import argparse

    from nca_interp.assets import embedded

    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--ckpt", default=str(embedded("sokoban_base")))
    ap.add_argument("--batch", type=int, default=batch)
    ap.add_argument("--threads", type=int, default=2)
    for name, default in extra.items():
        ap.add_argument(f"--{name}", default=default)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    return args


def matmul_peak_gflops(threads: int, sizes=(512, 1024, 2048)) -> float:
    torch.set_num_threads(threads)
    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)
        s = timeit(lambda a=a, b=b: a @ b, repeat=5, warmup=1)
        best = max(best, 2 * n**3 / s / 1e9)
    return best


def add_step_args(ap, batch: int, steps: int) -> None:
    """What a step benchmark runs on: --ckpt (default: the embedded Sokoban base), --task,
    --context, --task-options (KEY=VALUE,...), --batch, --steps (timed, after a warm-up),
    --threads."""
    from nca_interp.assets import embedded

    ap.add_argument("--ckpt", default=str(embedded("sokoban_base")))
    ap.add_argument("--task", default=None)
    ap.add_argument("--context", default=None)
    ap.add_argument("--task-options", default=None)
    ap.add_argument("--batch", type=int, default=batch)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--threads", type=int, default=2)


def self_distillation(ckpt: str, task: str | None, context: str | None, options, threads: int):
    """A step benchmark's models: the student and a frozen copy as its teacher, both from
    `ckpt`, with the task as the checkpoint must see it and the context kind. Returns
    (student, teacher, tok, task, context)."""
    from nca_interp.checkpoint import load_checkpoint
    from nca_interp.runs import resolve_task_and_context

    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    found, ctx = resolve_task_and_context([ckpt], task, context, options)
    student, tok = load_checkpoint(ckpt)
    teacher, _ = load_checkpoint(ckpt)
    teacher.requires_grad_(False)
    return student, teacher, tok, found.for_tokenizer(tok), ctx
