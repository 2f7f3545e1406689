"""Angles between the gradients of the distillation loss terms, each beside its noise floor.

    python -m nca_interp.grad_align runs/sokoban_opd/checkpoints/step_* --teacher runs/base

On one on-policy batch per checkpoint (y ~ g(.|x), the same batch for every term), the gradient
of each term of nca_interp.losses separately:
  opd  KL(g(.|x) || f(.|x,c))      what OPD trains (the no-context view)
  ctx  KL(g(.|x,c) || f(.|x,c))    where distillation would pull the context view
  nca  KL(sg[g(.|x)] || g(.|x,c))  the anchor NCA adds

A gradient angle from one finite batch is noisy: two independent batches give the *same* term
gradients 70-90 degrees apart at 64 prompts. So the batch is split into two independent halves
and every term's gradient is taken on each half (g1, g2). Reported, globally and per layer x
module:
  self_angle_deg  angle(g_t1, g_t2): the term's own noise floor; a between-term angle is only
                  evidence where it stands clear of both terms' floors
  snr             estimated signal / noise of the full-batch gradient: |mu|^2 ~ g1.g2 (unbiased,
                  the halves are independent), noise^2 ~ |g1 - g2|^2 / 4. A term with snr <= 1
                  is within its own sampling noise and gets no angle (null)
  angle_deg       between terms on the full batch (biased towards 90 degrees by noise)
  angle_xfit_deg  cross-fitted: cos = (a1.b2 + a2.b1) / 2 / sqrt(a1.a2 * b1.b2), each term on
                  one half against the other term on the other, an unbiased estimate of the
                  angle between the two expected gradients (clipped to [-1, 1])
  norm            full-batch gradient norm per term, and their ratios
Memory is bounded: micro-batches for sampling and backward, each (term, half)
gradient spilled to a temporary safetensors file and the inner products streamed tensor by
tensor in float64 (nca_interp.reduce), so at most the model, its gradient and a chunk of each
spilled vector are in memory.
"""

from __future__ import annotations

import itertools
import math
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from nca_interp.checkpoint import check_same_tokenizer, load_checkpoint
from nca_interp.cli import check_arguments, check_writable, entry, parse_config, to_dict, write_json
from nca_interp.evaluate import TASK_OPTIONS_HELP, max_response_tokens
from nca_interp.losses import TERMS, loss_terms
from nca_interp.models import context_limit, resolve_device
from nca_interp.reduce import Gram, cosine, stream_by_name
from nca_interp.rollout import Batch, onpolicy_batch
from nca_interp.runs import (
    check_same_tokenizers,
    resolve_task_and_context,
    step_of,
    teacher_of,
)
from nca_interp.tensorfiles import TensorFolder, row_chunks, save_sharded

HALVES = (1, 2)


def label(term: str, half: int) -> str:
    return f"{term}:{half}"


def sample_halves(student, tok, task, levels: list, context: str, temperature: float,
                  seed: int, micro_batch: int, limit: int) -> list[list[Batch]]:
    """Two independent halves of on-policy prompts, each a list of micro-batches. Each
    micro-batch samples with its own generator (seeded by seed, half and index), so the draw
    depends on --micro-batch as it does on --seed."""
    device = next(student.parameters()).device
    half = len(levels) // 2
    out = []
    for h in range(2):
        mine = levels[h * half: (h + 1) * half]
        pieces = []
        for i in range(0, len(mine), micro_batch):
            gen = torch.Generator(device).manual_seed(seed * 1_000_003 + h * 10_007 + i)
            pieces.append(onpolicy_batch(student, tok, task, mine[i: i + micro_batch], context,
                                         max_response_tokens(task), temperature, gen,
                                         limit)[0])
        out.append(pieces)
    return out


def spill_term_gradients(student, teacher, halves: list[list[Batch]], terms, folder: Path,
                         temperature: float = 1.0) -> dict[str, float]:
    """For each (term, half): accumulate the gradient of the half's token-mean term over its
    micro-batches and write it to `folder/{term}_{half}/` (shards in the gradient's dtype, one
    in memory at a time). Returns each
    half's token count (the weights of the full-batch mean)."""
    tokens = {}
    params = dict(student.named_parameters())
    for h, pieces in zip(HALVES, halves):
        denom = float(sum(int(b.resp_mask.sum()) for b in pieces))
        tokens[h] = denom
        for term in terms:
            student.zero_grad(set_to_none=True)
            for piece in pieces:
                loss_terms(student, teacher, piece, (term,), denom=denom,
                           temperature=temperature)[term].backward()
            save_sharded(((n, p.grad if p.grad is not None else torch.zeros_like(p))
                          for n, p in params.items()), folder / f"{term}_{h}")
    student.zero_grad(set_to_none=True)
    return tokens


def stream_gram(folder: Path, labels: list[str]) -> Gram:
    """Inner products of the spilled gradients, tensor by tensor, row chunk by row chunk."""
    gram = Gram(labels)
    with ExitStack() as stack:
        readers = [stack.enter_context(TensorFolder(folder / lab.replace(":", "_")))
                   for lab in labels]
        stream_by_name(gram, ((name, [r.rows(name, a, b) for r in readers])
                              for name in readers[0].names()
                              for a, b in row_chunks(readers[0].shape(name))))
    return gram


def alignment_of(gram: Gram, key: str, terms: list[str], tokens: dict[int, float]) -> dict:
    """Angles, floors, cross-fitted angles and norms of one parameter group."""
    G = gram.mats[key]
    w = {h: tokens[h] / sum(tokens.values()) for h in HALVES}
    full = gram.combine(key, {t: {label(t, h): w[h] for h in HALVES} for t in terms})
    idx = {t: i for i, t in enumerate(terms)}
    i = {(t, h): gram.index(label(t, h)) for t in terms for h in HALVES}
    out: dict = {"norm": {t: float(np.sqrt(max(full[idx[t], idx[t]], 0.0))) for t in terms},
                 "self_angle_deg": {}, "snr": {}, "angle_deg": {}, "cos": {},
                 "angle_xfit_deg": {}, "cos_xfit": {}}
    signal = {}
    for t in terms:
        a, b = i[(t, 1)], i[(t, 2)]
        out["self_angle_deg"][t] = angle_deg(cosine(G, a, b))
        s2 = G[a, b]  # unbiased for |E g|^2
        noise2 = (G[a, a] + G[b, b] - 2 * G[a, b]) / 4
        snr = math.sqrt(s2 / noise2) if s2 > 0 and noise2 > 0 else (0.0 if noise2 > 0 else None)
        out["snr"][t] = snr
        signal[t] = s2 if (snr is None and s2 > 0) or (snr is not None and snr > 1) else None
    for a, b in itertools.combinations(terms, 2):
        pair = f"{a}~{b}"
        ok = signal[a] is not None and signal[b] is not None
        c = cosine(full, idx[a], idx[b]) if ok else None
        out["cos"][pair], out["angle_deg"][pair] = c, angle_deg(c)
        if ok:
            cross = (G[i[(a, 1)], i[(b, 2)]] + G[i[(a, 2)], i[(b, 1)]]) / 2
            cx = float(cross / math.sqrt(signal[a] * signal[b]))
        else:
            cx = None
        out["cos_xfit"][pair] = cx
        out["angle_xfit_deg"][pair] = angle_deg(None if cx is None else max(-1.0, min(1.0, cx)))
    return out


def alignment(gram: Gram, terms: list[str], tokens: dict[int, float]) -> dict:
    glob = alignment_of(gram, "global", terms, tokens)
    n = glob["norm"]
    glob["norm_ratio"] = {f"{a}/{b}": (n[a] / n[b] if n[b] else None)
                          for a, b in itertools.permutations(terms, 2)}
    cells = [k for k in gram.mats if k != "global" and ":" not in k]
    return {"global": glob, "modules": {k: alignment_of(gram, k, terms, tokens) for k in cells},
            "tokens": {str(h): v for h, v in tokens.items()}}


def angle_deg(cos: float | None) -> float | None:
    return None if cos is None else math.degrees(math.acos(max(-1.0, min(1.0, cos))))


def checkpoint_alignment(student, teacher, halves: list[list[Batch]], terms=TERMS,
                         temperature: float = 1.0) -> dict:
    with tempfile.TemporaryDirectory(prefix="grad_align_") as tmp:
        tokens = spill_term_gradients(student, teacher, halves, terms, Path(tmp), temperature)
        gram = stream_gram(Path(tmp), [label(t, h) for t in terms for h in HALVES])
    return alignment(gram, list(terms), tokens)


@dataclass
class GradAlignConfig:
    ckpt: list[str] = field(default_factory=list, metadata={
        "help": "student checkpoints (e.g. a run's checkpoints/step_*); default: embedded OPD"})
    teacher: str | None = field(default=None, metadata={
        "help": "teacher checkpoint; default: the run's teacher/initial student"})
    task: str | None = field(default=None, metadata={"help": "default: from the run config"})
    task_options: list[str] | None = field(default=None, metadata={"help": TASK_OPTIONS_HELP})
    context: str | None = field(default=None, metadata={"help": "default: the run's context"})
    batch: int = field(default=2048, metadata={
        "help": "on-policy prompts, split into two independent halves (noise floor)",
        "check": "even>=4"})
    micro_batch: int = field(default=128, metadata={"help": "prompts per forward/backward",
                                                    "check": ">=1"})
    temperature: float = field(default=1.0, metadata={"help": "rollout (and loss) temperature"})
    seed: int = field(default=0, metadata={"help": "levels and sampling seed"})
    device: str = field(default="cpu", metadata={"help": "cpu|cuda|auto"})
    dtype: str | None = field(default=None, metadata={
        "help": "float32|bfloat16|float16 for both models; default: as stored"})
    out: str = field(default="runs/demo/grad_align", metadata={"help": "output stem"})
    png: bool = field(default=False, metadata={"help": "also write PNGs (needs kaleido)"})
    threads: int = field(default=2, metadata={"help": "torch threads"})


def fmt_angle(v: float | None) -> str:
    return f"{v:>7.1f}" if v is not None else f"{'-':>7}"


def format_table(results: dict[str, dict]) -> str:
    """Between-term angles (full batch and cross-fitted) beside each term's noise floor."""
    first = next(iter(results.values()))["global"]
    pairs, terms = list(first["angle_deg"]), list(first["self_angle_deg"])
    w = max(12, *(len(n) for n in results))
    head = [f"{p:>7}" for p in pairs] + [f"x:{p:>7}" for p in pairs] + \
        [f"{'floor ' + t:>10}" for t in terms] + [f"{'snr ' + t:>8}" for t in terms] + \
        [f"{'|' + t + '|':>9}" for t in terms]
    lines = [f"{'angle (deg)':<{w}} " + " ".join(head)]
    for name, r in results.items():
        g = r["global"]
        cells = [fmt_angle(g["angle_deg"][p]) for p in pairs] + \
            [f"  {fmt_angle(g['angle_xfit_deg'][p])}" for p in pairs] + \
            [f"{fmt_angle(g['self_angle_deg'][t]):>10}" for t in terms] + \
            [f"{g['snr'][t]:>8.2f}" if g["snr"][t] is not None else f"{'-':>8}"
             for t in terms] + [f"{g['norm'][t]:>9.4f}" for t in terms]
        lines.append(f"{name:<{w}} " + " ".join(cells))
    lines.append("(x: cross-fitted angle; floor: angle between the term's gradients on the two "
                 "half batches; '-': a term within its own sampling noise, snr <= 1)")
    return "\n".join(lines)


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def run(ckpts: list[str] | None = None, *, teacher: str | None = None,
        task: str | None = None, task_options: list[str] | None = None,
        context: str | None = None, batch: int = 2048, micro_batch: int = 128,
        temperature: float = 1.0, seed: int = 0, device: str = "cpu",
        dtype: str | None = None) -> dict:
    """Gradient angles between the loss terms at each checkpoint (see the module docstring):
    `results[name]["global"]` holds `angle_xfit_deg`, `self_angle_deg` (the noise floors),
    `snr` and norms; `per_module` the same per layer x module; `steps` the training steps."""
    check_arguments(GradAlignConfig, batch=batch, micro_batch=micro_batch, dtype=dtype,
                    temperature=temperature, seed=seed)
    if not ckpts:
        from nca_interp.assets import embedded

        ckpts = [str(embedded("sokoban_opd"))]
    found, context = resolve_task_and_context(ckpts, task, context, task_options)
    dev = str(resolve_device(device))
    dt = DTYPES[dtype] if dtype else "stored"
    for path in ckpts:  # every pair checked before any gradient is computed
        check_same_tokenizers([path, teacher_of(path, teacher)])
    levels = found.levels("grad", batch, seed)
    results = {}
    for path in ckpts:
        student, tok = load_checkpoint(path, device=dev, dtype=dt)
        teacher_model, tok_t = load_checkpoint(teacher_of(path, teacher), device=dev, dtype=dt)
        check_same_tokenizer(tok, tok_t, path, teacher_of(path, teacher))
        teacher_model.requires_grad_(False)
        view = found.for_tokenizer(tok)
        halves = sample_halves(student, tok, view, levels, context, temperature, seed,
                               micro_batch, min(context_limit(student),
                                                context_limit(teacher_model)))
        student.train()
        name = Path(path).name if Path(path).name not in results else path
        results[name] = checkpoint_alignment(student, teacher_model, halves, TERMS, temperature)
        del student, teacher_model
    steps = [step_of(p) for p in ckpts]
    return {"task": found.name, "context": context, "batch": batch,
            "steps": steps if all(s is not None for s in steps) else None,
            "results": results}


def figures(report: dict) -> dict:
    """{"grad_align": angles and floors per checkpoint, "grad_align_steps": over training
    (with more than one checkpoint)}."""
    from nca_interp.plots import grad_align_figure, grad_align_over_steps

    out = {"grad_align": grad_align_figure(report)}
    if len(report["results"]) > 1:
        out["grad_align_steps"] = grad_align_over_steps(report)
    return out


def main(argv: list[str] | None = None) -> dict:
    from nca_interp.plots import write_figure

    cfg = parse_config(GradAlignConfig, argv, __doc__, positional="ckpt")
    check_writable(cfg.out)
    torch.set_num_threads(cfg.threads)
    if not cfg.ckpt:
        from nca_interp.assets import embedded

        cfg.ckpt = [str(embedded("sokoban_opd"))]
    result = run(cfg.ckpt, teacher=cfg.teacher, task=cfg.task, task_options=cfg.task_options,
                 context=cfg.context, batch=cfg.batch, micro_batch=cfg.micro_batch,
                 temperature=cfg.temperature, seed=cfg.seed, device=cfg.device, dtype=cfg.dtype)
    report = {"config": to_dict(cfg), **result}
    print(f"task={report['task']} context={report['context']} batch={cfg.batch} (two halves "
          f"of {cfg.batch // 2})")
    print(format_table(report["results"]))
    out = Path(cfg.out)
    write_json(out.with_suffix(".json"), report)
    written = []
    for name, fig in figures(report).items():
        stem = out if name == "grad_align" else f"{out}_steps"
        written += write_figure(fig, stem, png=cfg.png)
    print("wrote", out.with_suffix(".json"), *written)
    return report

if __name__ == "__main__":
    sys.exit(entry(main))
