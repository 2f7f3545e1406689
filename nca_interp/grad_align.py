"""Angles between the gradients of the distillation loss terms, beside each term's self-angle.

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
  self_angle_deg  angle(g_t1, g_t2): the term's own noise level; a between-term angle is only
                  evidence where it stands clear of both terms' self-angles. A floor only where
                  the term's between-term angles all sit above it: a term with less noise than
                  its partner can sit closer to it than to itself, and the table marks such a
                  self-angle a reference ('ref')
  snr             estimated signal / noise of the full-batch gradient: |mu|^2 ~ g1.g2 (unbiased,
                  the halves are independent), noise^2 ~ |g1 - g2|^2 / 4. A term with snr <= 1
                  is within its own sampling noise and gets no angle (null)
  angle_deg       between terms on the full batch (biased towards 90 degrees by noise)
  angle_xfit_deg  cross-fitted: cos = (a1.b2 + a2.b1) / 2 / sqrt(a1.a2 * b1.b2), each term on
                  one half against the other term on the other, an unbiased estimate of the
                  angle between the two expected gradients (clipped to [-1, 1])
  norm            full-batch gradient norm per term, and their ratios
The terms share their views: one forward of each view per micro-batch serves all three, and
each term takes its own backward from the kept graph (1.32x faster on an 8-layer run than a
forward per term; bench.grad_align_cost). Memory is bounded: micro-batches for sampling and
backward, each (term, half) gradient spilled to a temporary safetensors file and the inner
products streamed tensor by tensor in float64 (nca_interp.reduce), so at most the model, one
gradient (each term's running sum and one more, where a part has several micro-batches and they
fit SHARED_GRAD_BYTES) and a chunk of each spilled vector are in memory.
"""

from __future__ import annotations

import sys

from nca_interp.cli import parse_early
from nca_interp.configs import GradAlignConfig

if __name__ == "__main__":  # --help and a bad flag answered before torch is imported
    PARSED = parse_early(GradAlignConfig, __doc__, positional="ckpt")

import itertools
import math
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import torch

from nca_interp import analysis
from nca_interp.checkpoint import check_same_tokenizer, load_checkpoint
from nca_interp.cli import (
    entry,
    parse_config,
    validate,
)
from nca_interp.errors import UsageError
from nca_interp.evaluate import max_response_tokens
from nca_interp.fsio import spill_folder
from nca_interp.labelled import Arrays, Labelled, as_float, stack
from nca_interp.layer_sim import task_and_items
from nca_interp.losses import TERMS, loss_views, terms_of
from nca_interp.models import context_limit, resolve_device, weights_dtype
from nca_interp.param_delta import layer_module_grid
from nca_interp.progress import bar
from nca_interp.reduce import Gram, cosine, stream_by_name
from nca_interp.reports import GradAlign, GradAlignReport, as_report, null_role
from nca_interp.rollout import Batch, onpolicy_batch
from nca_interp.runs import (
    check_same_tokenizers,
    check_trained_on,
    resolve_task_and_context,
    step_of,
    teacher_of,
)
from nca_interp.tasks import Task
from nca_interp.tensorfiles import TensorFolder, row_chunks, save_sharded
from nca_interp.tokenizer import check_tokenizer

__all__ = ["DEMO", "ZERO_REL", "align", "arrays_of", "execute", "figures", "format_table", "main",
           "report_arrays", "run", "self_cell", "show", "undefined_terms", "zero_terms"]

HALVES = (1, 2)


def label(term: str, part: int) -> str:
    return f"{term}:{part}"


def sample_halves(student, tok, task, levels: list, context: str, temperature: float,
                  seed: int, micro_batch: int, limit: int, parts: int = 2) -> list[list[Batch]]:
    """`parts` independent parts of the on-policy prompts (2: two halves), each a list of
    micro-batches. Each micro-batch samples with its own generator (seeded by seed, part and
    index), so the draw depends on --micro-batch as it does on --seed."""
    device = next(student.parameters()).device
    half = len(levels) // parts
    out = []
    for h in range(parts):
        mine = levels[h * half: (h + 1) * half]
        pieces = []
        for i in range(0, len(mine), micro_batch):
            gen = torch.Generator(device).manual_seed(seed * 1_000_003 + h * 10_007 + i)
            pieces.append(onpolicy_batch(student, tok, task, mine[i: i + micro_batch], context,
                                         max_response_tokens(task), temperature, gen,
                                         limit)[0])
        out.append(pieces)
    return out


# a part of several micro-batches keeps every term's running gradient sum at once (with one
# in the making) where that comes to at most this many bytes (SmolLM2's three terms and one:
# 2.2 GB); above it each term runs its own forwards, one sum in memory at a time
SHARED_GRAD_BYTES = 4 << 30


def spill_term_gradients(student, teacher, halves: list[list[Batch]], terms, folder: Path,
                         temperature: float = 1.0) -> dict[int, float]:
    """For each (term, part): the gradient of the part's token-mean term summed over its
    micro-batches, written to `folder/{term}_{part}/` (shards in the gradient's dtype, one in
    memory at a time). Returns each part's token count (the weights of the full-batch mean).

    The terms share their views (the student's logits with and without c, the teacher's), so
    one forward of each per micro-batch serves all of them; each term's KL is then built, its
    gradient taken and its graph freed before the next (the views' graphs are held as in an
    NCA training step). A part of one micro-batch writes each term's gradient as soon as it is
    taken (one gradient in memory); with several, the terms' running sums are held together,
    or, past SHARED_GRAD_BYTES, the loop goes term by term (the same gradients, more
    forwards). With dropout on, the terms now share each view's dropout mask."""
    names, params = zip(*((n, p) for n, p in student.named_parameters() if p.requires_grad))
    frozen = [(n, p) for n, p in student.named_parameters() if not p.requires_grad]
    size = sum(p.numel() * p.element_size() for p in params)

    def save(term, h, grads):
        save_sharded(itertools.chain(
            ((n, g if g is not None else torch.zeros_like(p))
             for n, p, g in zip(names, params, grads)),
            ((n, torch.zeros_like(p)) for n, p in frozen)), folder / f"{term}_{h}")

    tokens = {}
    for h, pieces in enumerate(halves, 1):
        denom = float(sum(int(b.resp_mask.sum()) for b in pieces))
        tokens[h] = denom
        shared = len(pieces) == 1 or size * (len(terms) + 1) <= SHARED_GRAD_BYTES
        for group in [tuple(terms)] if shared else [(t,) for t in terms]:
            sums: dict[str, list | None] = {t: [None] * len(params) for t in group}
            for piece in pieces:
                views = loss_views(student, teacher, piece, group, temperature)
                for i, t in enumerate(group):
                    loss = terms_of(views, piece, (t,), denom)[t]
                    grads = torch.autograd.grad(loss, params, allow_unused=True,
                                                retain_graph=i < len(group) - 1)
                    del loss
                    if len(pieces) == 1:
                        save(t, h, grads)
                    else:
                        sums[t] = [g if acc is None else acc if g is None else acc.add_(g)
                                   for acc, g in zip(sums[t] or [], grads)]
                    del grads
                del views
            for t in group if len(pieces) > 1 else ():
                save(t, h, sums[t])
                sums[t] = None
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


def halves_of(gram: Gram, key: str, terms: list[str], tokens: dict[int, float]
              ) -> tuple[np.ndarray, list[str]]:
    """The Gram matrix of each term's two half-batch gradients (parts 1..P/2 and P/2+1..P,
    token-weighted means), labelled `term:1`, `term:2`: with two parts, the parts themselves."""
    P = len(tokens)
    halves = {1: range(1, P // 2 + 1), 2: range(P // 2 + 1, P + 1)}
    weights = {}
    for t in terms:
        for h, ps in halves.items():
            total = sum(tokens[p] for p in ps)
            weights[label(t, h)] = {label(t, p): tokens[p] / total for p in ps}
    return gram.combine(key, weights), list(weights)


# A term's gradient counts as zero (no direction, so no angle) when it is zero by construction
# (`analytic_zero`: the context view's KL(g(.|x,c) || f(.|x,c)) while student and teacher are
# one model, where fp32 rounding left 1.6e-5 of OPD's norm on the persona's base model, |ctx|
# 1.1e-4 against |opd| 6.9, and an snr of 3.8 because rounding repeats between halves), or when
# its norm is below ZERO_REL of the largest term's: a few float32 ulps of that term's scale,
# where no direction is left to measure. A relative bound cannot tell rounding from a small
# real gradient above that: a converged FrozenLake OPD term measured 8.6e-5 of the context
# view's and is a real, sampling-noise-limited gradient (its snr decides).
ZERO_REL = 1e-6


def zero_terms(norms: dict[str, float], analytic_zero: tuple[str, ...] = ()) -> dict[str, str]:
    """The terms whose gradient is zero up to numerical noise, with why."""
    top = max(norms.values(), default=0.0)
    out = {t: "zero by construction: student and teacher are one model" for t in analytic_zero
           if t in norms}
    for t, n in norms.items():
        if t not in out and (top == 0 or n <= ZERO_REL * top):
            out[t] = (f"norm {n:.3g} is {n / top:.1e} of the largest term's, within numerical "
                      "noise of zero" if top else "every term's gradient is zero")
    return out


def alignment_of(gram: Gram, key: str, terms: list[str], tokens: dict[int, float],
                 detail: bool = False, n_splits: int = 200, seed: int = 0,
                 analytic_zero: tuple[str, ...] = ()) -> dict:
    """Angles, floors, cross-fitted angles and norms of one parameter group; with `detail` and
    four or more parts, also the part statistics of `part_statistics`. A term whose gradient is
    zero up to numerical noise (`zero_terms`) is listed under `undefined` and gets no angle."""
    P = len(tokens)
    H, hl = halves_of(gram, key, terms, tokens)
    hw = {1: sum(tokens[p] for p in range(1, P // 2 + 1)),
          2: sum(tokens[p] for p in range(P // 2 + 1, P + 1))}
    w = {h: hw[h] / sum(hw.values()) for h in HALVES}
    G = H
    full = np.array([[sum(w[h] * w[k] * H[hl.index(label(a, h)), hl.index(label(b, k))]
                          for h in HALVES for k in HALVES) for b in terms] for a in terms])
    idx = {t: i for i, t in enumerate(terms)}
    i = {(t, h): hl.index(label(t, h)) for t in terms for h in HALVES}
    out: dict = {"norm": {t: float(np.sqrt(max(full[idx[t], idx[t]], 0.0))) for t in terms},
                 "self_angle_deg": {}, "snr": {}, "angle_deg": {}, "cos": {},
                 "angle_xfit_deg": {}, "cos_xfit": {}}
    zero = zero_terms(out["norm"], analytic_zero)
    out["undefined"] = zero
    signal: dict[str, float | None] = {}
    for t in terms:
        if t in zero:  # no direction to measure: every angle with it is undefined, never 90
            out["self_angle_deg"][t], out["snr"][t], signal[t] = None, None, None
            continue
        a, b = i[(t, 1)], i[(t, 2)]
        out["self_angle_deg"][t] = angle_deg(cosine(G, a, b))
        s2 = G[a, b]  # unbiased for |E g|^2
        noise2 = (G[a, a] + G[b, b] - 2 * G[a, b]) / 4
        snr = math.sqrt(s2 / noise2) if s2 > 0 and noise2 > 0 else (0.0 if noise2 > 0 else None)
        out["snr"][t] = snr
        signal[t] = s2 if (snr is None and s2 > 0) or (snr is not None and snr > 1) else None
    for t1, t2 in itertools.combinations(terms, 2):
        pair = f"{t1}~{t2}"
        s1, s2 = signal[t1], signal[t2]
        c = cosine(full, idx[t1], idx[t2]) if s1 is not None and s2 is not None else None
        out["cos"][pair], out["angle_deg"][pair] = c, angle_deg(c)
        cx: float | None = None
        if s1 is not None and s2 is not None:
            cross = (G[i[(t1, 1)], i[(t2, 2)]] + G[i[(t1, 2)], i[(t2, 1)]]) / 2
            cx = float(cross / math.sqrt(s1 * s2))
        out["cos_xfit"][pair] = cx
        out["angle_xfit_deg"][pair] = angle_deg(None if cx is None else max(-1.0, min(1.0, cx)))
    if detail and P >= 4:
        out["parts"] = part_statistics(gram, key, terms, P, n_splits, seed, tuple(zero))
    return out


def _u(M: np.ndarray, S) -> float:
    """Mean of the off-diagonal entries of M over the parts S: an unbiased estimate of the
    inner product of the two expected gradients (parts are independent)."""
    S = list(S)
    sub = M[np.ix_(S, S)]
    return float((sub.sum() - np.trace(sub)) / (len(S) * (len(S) - 1)))


def _ccos(Mab, Maa, Mbb, S) -> float | None:
    """Noise-corrected cosine over the parts S: U_ab / sqrt(U_aa U_bb), None where a term has
    no signal (U <= 0)."""
    ua, ub = _u(Maa, S), _u(Mbb, S)
    return _u(Mab, S) / math.sqrt(ua * ub) if ua > 0 and ub > 0 else None


def part_statistics(gram: Gram, key: str, terms: list[str], P: int, n_splits: int = 200,
                    seed: int = 0, zero: tuple[str, ...] = ()) -> dict:
    """Statistics of P independent parts of the batch (a_p: term a's token-mean gradient on
    part p), all from the Gram matrix of the part gradients:
      cos_corrected  U_ab / sqrt(U_aa U_bb), U = the mean of a_p . b_q over p != q: the cosine
                     of the expected gradients with the noise removed (the cross-fitted cosine
                     averaged over every split), clipped to [-1, 1] in the angle
      ci95           delete-one-part jackknife interval (normal, clipped)
      splits         central 95% of the cross-fitted cosine over `n_splits` random balanced
                     splits of the parts into two halves
      noise_scale    tr(Sigma_part) / |E g|^2: the part-to-part variance against the signal
                     (the simple gradient noise scale, in parts); the floor it predicts for two
                     halves, acos(1 / (1 + noise_scale / (P/2))), beside the floor measured over
                     the same splits
      positive_control  each term against itself on disjoint halves of the parts: an estimator
                     that removes noise must find ~1 (0 degrees) there, where the raw angle
                     between the halves is the floor"""
    idx = {(t, p): gram.index(label(t, p)) for t in terms for p in range(1, P + 1)}
    G = gram.mats[key]

    def block(a, b):
        return G[np.ix_([idx[(a, p)] for p in range(1, P + 1)],
                        [idx[(b, p)] for p in range(1, P + 1)])]

    M = {(a, b): block(a, b) for a in terms for b in terms}
    rng = np.random.default_rng(seed)
    splits = []
    for _ in range(n_splits):
        perm = rng.permutation(P)
        splits.append((sorted(perm[: P // 2].tolist()), sorted(perm[P // 2:].tolist())))
    every = range(P)

    def mean_dot(Mab, S, T):
        return float(Mab[np.ix_(S, T)].mean())

    out: dict = {"n_parts": P, "n_splits": n_splits, "pairs": {}, "terms": {}}
    for a, b in itertools.combinations(terms, 2):
        if a in zero or b in zero:  # a zero gradient has no direction (zero_terms)
            out["pairs"][f"{a}~{b}"] = {"cos_corrected": None, "ci95": None,
                                        "angle_corrected_deg": None, "angle_ci95_deg": None,
                                        "splits": None}
            continue
        Mab, Maa, Mbb = M[(a, b)], M[(a, a)], M[(b, b)]
        c = _ccos(Mab, Maa, Mbb, every)
        jack = [_ccos(Mab, Maa, Mbb, [p for p in every if p != k]) for k in every]
        ci = None
        known = [j for j in jack if j is not None]
        if c is not None and len(known) == len(jack):
            jm = float(np.mean(known))
            se = math.sqrt((P - 1) / P * sum((j - jm) ** 2 for j in known))
            ci = [max(-1.0, c - 1.96 * se), min(1.0, c + 1.96 * se)]
        xs = []
        for S, T in splits:
            den = mean_dot(Maa, S, T) * mean_dot(Mbb, S, T)
            if den > 0:
                xs.append((mean_dot(Mab, S, T) + mean_dot(Mab, T, S)) / 2 / math.sqrt(den))
        out["pairs"][f"{a}~{b}"] = {
            "cos_corrected": c, "ci95": ci,
            "angle_corrected_deg": angle_deg(None if c is None else max(-1.0, min(1.0, c))),
            "angle_ci95_deg": None if ci is None else [angle_deg(ci[1]), angle_deg(ci[0])],
            "splits": [float(np.percentile(xs, 2.5)), float(np.percentile(xs, 97.5))]
            if xs else None}
    for t in terms:
        Maa = M[(t, t)]
        u = _u(Maa, every)
        spread = float((np.trace(Maa) - P * Maa.mean()) / (P - 1))  # tr Sigma_part
        noise = spread / u if u > 0 else None
        floors: list[float | None] = []
        pos: list[float | None] = []
        for S, T in splits:
            ss, tt, st = mean_dot(Maa, S, S), mean_dot(Maa, T, T), mean_dot(Maa, S, T)
            floors.append(angle_deg(st / math.sqrt(ss * tt)) if ss > 0 and tt > 0 else None)
            us, ut = (_u(Maa, S), _u(Maa, T)) if len(S) > 1 else (0.0, 0.0)
            pos.append(st / math.sqrt(us * ut) if us > 0 and ut > 0 else None)
        floor_deg = [f for f in floors if f is not None]
        control = [v for v in pos if v is not None]
        out["terms"][t] = {
            "noise_scale": noise,
            "floor_predicted_deg": None if noise is None else
            angle_deg(1 / (1 + noise / (P / 2))),
            "floor_splits_deg": float(np.mean(floor_deg)) if floor_deg else None,
            "positive_control": {"mean": float(np.mean(control)),
                                 "lo": float(np.percentile(control, 2.5)),
                                 "hi": float(np.percentile(control, 97.5))} if control else None}
    return out


def alignment(gram: Gram, terms: list[str], tokens: dict[int, float],
              analytic_zero: tuple[str, ...] = ()) -> dict:
    glob = alignment_of(gram, "global", terms, tokens, detail=True, analytic_zero=analytic_zero)
    n = glob["norm"]
    glob["norm_ratio"] = {f"{a}/{b}": (n[a] / n[b] if n[b] else None)
                          for a, b in itertools.permutations(terms, 2)}
    cells = [k for k in gram.mats if k != "global" and ":" not in k]
    return {"global": glob, "modules": {k: alignment_of(gram, k, terms, tokens,
                                                        analytic_zero=analytic_zero)
                                        for k in cells},
            "tokens": {str(h): v for h, v in tokens.items()}}


def angle_deg(cos: float | None) -> float | None:
    return None if cos is None else math.degrees(math.acos(max(-1.0, min(1.0, cos))))


def checkpoint_alignment(student, teacher, halves: list[list[Batch]], terms=TERMS,
                         temperature: float = 1.0) -> dict:
    with spill_folder("grad_align") as tmp:
        tokens = spill_term_gradients(student, teacher, halves, terms, tmp, temperature)
        gram = stream_gram(Path(tmp), [label(t, h) for t in terms
                                       for h in range(1, len(halves) + 1)])
    # the context view's KL(g(.|x,c) || f(.|x,c)) is 0 at every sample while g is f
    zero = ("ctx",) if "ctx" in terms and same_model(student, teacher) else ()
    return alignment(gram, list(terms), tokens, analytic_zero=zero)


def same_model(a, b) -> bool:
    """Whether two models hold the same weights (self-distillation's step 0)."""
    if a is b:
        return True
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    return pa.keys() == pb.keys() and all(
        pa[k].shape == pb[k].shape and torch.equal(pa[k].detach().cpu(), pb[k].detach().cpu())
        for k in pa)


def align(student, teacher, tok, task: Task | str, levels: list | int, context: str,
          parts: int = 2, micro_batch: int = 128, temperature: float = 1.0, seed: int = 0,
          terms: tuple[str, ...] = TERMS) -> Arrays:
    """The core: the loss terms' gradient angles of a `student` against its `teacher`, both
    transformers models in memory sharing `tok`, on one on-policy batch of `levels` (y ~
    g(.|x) sampled with `seed`; `task` a Task or its name, `levels` its items or how many of
    its "grad" split, drawn with `seed` as the command does) split into `parts` independent
    parts (an even number; 4 or more adds the noise-corrected statistics). The student's mode
    and the teacher's `requires_grad` are restored after.

    Labelled arrays (see the module docstring for each statistic): over all parameters,
    `norm`, `self_angle_deg`, `snr` per `term` and `angle_deg`, `cos`, `angle_xfit_deg`,
    `cos_xfit` per `pair` ("opd~ctx", ...), `norm_ratio` per `ratio`; the same per `layer` x
    `module` with `_by_module` (layer "all": the parameters outside the blocks); with 4 or
    more parts `cos_corrected`, `angle_corrected_deg` per pair, their `ci95` and `splits`
    (pair, bound) and the terms' `noise_scale`, floors and `positive_control`. `attrs`: the
    terms without a direction (`undefined`), the parts' token counts and the responses."""
    task, levels = task_and_items(task, levels, "grad", seed)
    check_tokenizer(tok)
    entry = measure(student, teacher, tok, task, levels, context, parts, micro_batch,
                    temperature, seed, terms)
    arrays = arrays_of(entry, list(terms))
    return Arrays(arrays.arrays, {**arrays.attrs, "responses": entry["responses"]})


def measure(student, teacher, tok, task, levels: list, context: str, parts: int = 2,
            micro_batch: int = 128, temperature: float = 1.0, seed: int = 0,
            terms: tuple[str, ...] = TERMS) -> dict:
    """`align` as the report's entry (`alignment`'s dict and the responses as text): what the
    command writes for each checkpoint."""
    if parts < 2 or parts % 2 or len(levels) < parts:
        raise UsageError(f"align splits the items into an even number of parts (2 or more, at "
                         f"most one per item), not {parts} parts of {len(levels)} items")
    was_training = student.training
    frozen = {n: p.requires_grad for n, p in teacher.named_parameters()}
    try:
        student.eval()
        teacher.requires_grad_(False)
        halves = sample_halves(student, tok, task.for_tokenizer(tok), levels, context,
                               temperature, seed, micro_batch,
                               min(context_limit(student), context_limit(teacher)), parts)
        student.train()
        out = checkpoint_alignment(student, teacher, halves, terms, temperature)
    finally:
        student.train(was_training)
        for n, p in teacher.named_parameters():
            p.requires_grad_(frozen[n])
    out["responses"] = [text for part in halves for b in part
                        for text in analysis.decoded(tok, b.resp, b.resp_mask)]
    return out


def arrays_of(result: dict, terms: list[str]) -> Arrays:
    """One checkpoint's alignment (`alignment`'s dict, a report entry's `global` and
    `modules`) as labelled arrays: see `align`."""
    pairs = [f"{a}~{b}" for a, b in itertools.combinations(terms, 2)]
    ratios = [f"{a}/{b}" for a, b in itertools.permutations(terms, 2)]
    by = {"term": terms, "pair": pairs, "ratio": ratios}
    stats = {"norm": "term", "self_angle_deg": "term", "snr": "term", "angle_deg": "pair",
             "cos": "pair", "angle_xfit_deg": "pair", "cos_xfit": "pair"}
    g = result["global"]
    out = {k: Labelled(as_float([g[k].get(x) for x in by[d]]), (d,), {d: by[d]}, k)
           for k, d in stats.items()}
    out["norm_ratio"] = Labelled(as_float([g["norm_ratio"].get(x) for x in ratios]),
                                 ("ratio",), {"ratio": ratios}, "norm_ratio")
    cells = result["modules"]
    _, layers, modules = layer_module_grid(dict.fromkeys(cells, 0.0), None)
    outside = sorted({k.split(".", 1)[1] for k in cells if k.startswith("all.")})
    layers, modules = (["all"] if outside else []) + layers, modules + outside
    for k, d in stats.items():
        name = f"{k}_by_module"
        out[name] = Labelled(as_float([[[(cells.get(f"{lay}.{m}") or {}).get(k, {}).get(x)
                                         for x in by[d]] for m in modules] for lay in layers]),
                             ("layer", "module", d), {"layer": layers, "module": modules,
                                                      d: by[d]}, name)
    detail = g.get("parts")
    if detail:
        bound = {"bound": ("lo", "hi")}
        p, t = detail["pairs"], detail["terms"]
        for k in ("cos_corrected", "angle_corrected_deg"):
            out[k] = Labelled(as_float([p[x][k] for x in pairs]), ("pair",), {"pair": pairs}, k)
        for k in ("ci95", "angle_ci95_deg", "splits"):
            out[k] = Labelled(as_float([p[x][k] or [None, None] for x in pairs]),
                              ("pair", "bound"), {"pair": pairs, **bound}, k)
        for k in ("noise_scale", "floor_predicted_deg", "floor_splits_deg"):
            out[k] = Labelled(as_float([t[x][k] for x in terms]), ("term",), {"term": terms}, k)
        out["positive_control"] = Labelled(
            as_float([[(t[x]["positive_control"] or {}).get(s) for s in ("mean", "lo", "hi")]
                      for x in terms]), ("term", "stat"),
            {"term": terms, "stat": ("mean", "lo", "hi")}, "positive_control")
    return Arrays(out, {"undefined": g.get("undefined") or {}, "tokens": result.get("tokens"),
                        "n_parts": detail["n_parts"] if detail else 2})


def report_arrays(report: GradAlignReport | dict) -> Arrays:
    """A grad_align report as the labelled arrays `align` returns, its entries stacked on
    `checkpoint` (the results' keys); each entry's attrs (`undefined`, `tokens`, responses)
    under its key."""
    report = as_report(report, GradAlignReport)
    parts = {}
    for name, e in report.results.items():
        entry = e.to_json()
        arrays = arrays_of(entry, list(entry["global"]["norm"]))
        parts[name] = Arrays(arrays.arrays, {**arrays.attrs, "responses": entry.get("responses")})
    return stack(parts, "checkpoint")




def self_cell(g: dict, term: str, none: set) -> str:
    """A term's self-angle as a table cell, 'ref' where a cross-fitted angle of that term sits
    at or below it (`reports.null_role`: a reference there, not a floor)."""
    own = None if term in none else g["self_angle_deg"][term]
    against = [(own, a) for pair, a in g["angle_xfit_deg"].items()
               if term in pair.split("~") and a is not None and not set(pair.split("~")) & none]
    ref = own is not None and bool(against) and null_role(against) == "reference"
    return fmt_angle(own) + (" ref" if ref else "")


def fmt_angle(v: float | None) -> str:
    return f"{v:>7.1f}" if v is not None else f"{'-':>7}"


def undefined_terms(report) -> dict[str, dict[str, str]]:
    """Per checkpoint, the terms without a direction (`zero_terms`): as the report recorded
    them, or judged from its norms and config for a report written before they were recorded
    (a checkpoint that is its own teacher: the context view's KL is zero by construction)."""
    out = {}
    teacher = (report.config or {}).get("teacher")
    for name, r in report.results.items():
        g = r.global_ or {}
        if "undefined" in g:
            out[name] = g["undefined"] or {}
            continue
        path = getattr(report.runs.get(name), "path", None) if report.runs else None
        own = teacher is not None and path is not None and str(path) == str(teacher)
        out[name] = zero_terms(g.get("norm") or {}, ("ctx",) if own else ())
    return out


def _blank_undefined(pair: str, none: set[str]) -> bool:
    return any(t in none for t in pair.split("~"))


def format_table(results: Mapping[str, GradAlign], undefined: dict | None = None) -> str:
    """Between-term angles (full batch and cross-fitted) beside each term's noise floor; a
    term without a direction (`undefined`: checkpoint -> term -> why) gets no angle."""
    undefined = undefined or {}
    first = next(iter(results.values())).global_ or {}
    pairs, terms = list(first["angle_deg"]), list(first["self_angle_deg"])
    w = max(12, *(len(n) for n in results))
    head = [f"{p:>7}" for p in pairs] + [f"x:{p:>7}" for p in pairs] + \
        [f"{'self ' + t:>11}" for t in terms] + [f"{'snr ' + t:>8}" for t in terms] + \
        [f"{'|' + t + '|':>9}" for t in terms]
    lines = [f"{'angle (deg)':<{w}} " + " ".join(head)]
    for name, r in results.items():
        g, none = r.global_ or {}, set(undefined.get(name) or ())

        def angle(key: str, pair: str, g=g, none=none) -> str:
            return fmt_angle(None if _blank_undefined(pair, none) else g[key][pair])

        cells = [angle("angle_deg", p) for p in pairs] + \
            [f"  {angle('angle_xfit_deg', p)}" for p in pairs] + \
            [f"{self_cell(g, t, none):>11}" for t in terms] + \
            [f"{g['snr'][t]:>8.2f}" if g["snr"][t] is not None and t not in none
             else f"{'-':>8}" for t in terms] + [f"{g['norm'][t]:>9.4f}" for t in terms]
        lines.append(f"{name:<{w}} " + " ".join(cells))
    lines.append("(x: cross-fitted angle; self: angle between the term's gradients on the two "
                 "half batches, a floor for the term's cross-fitted angles where they all sit "
                 "above it, 'ref' where one does not: a reference, not a floor; '-': a term "
                 "within its own sampling noise, snr <= 1, or with no direction at all)")
    for name in results:
        for t, why in (undefined.get(name) or {}).items():
            lines.append(f"{name}: {t}'s gradient is undefined ({why}); no angle with it")
    return "\n".join(lines)




def run(cfg: GradAlignConfig | None = None, /, **fields) -> dict:
    """Gradient angles between the loss terms at each checkpoint (see the module docstring),
    an `analysis` report: `results[name]["global"]` holds `angle_xfit_deg`, `self_angle_deg`
    (the noise floors), `snr` and norms; `modules` the same per layer x module; `steps` the
    training steps. `run(GradAlignConfig(...))` or `run(ckpt=[...], ...)`."""
    cfg = analysis.config(GradAlignConfig, cfg, fields)
    validate(cfg)
    batch, parts, seed = cfg.batch, cfg.parts, cfg.seed
    if batch % parts or batch // parts < 1:
        raise UsageError(f"--batch {batch} must split into --parts {parts} equal parts; pass a "
                         "multiple of --parts")
    ckpts = analysis.checkpoint_paths(cfg)
    found, context = resolve_task_and_context(ckpts, cfg.task, cfg.context, cfg.task_options)
    dev = resolve_device(cfg.device)
    dt = weights_dtype(dev, cfg.precision)
    device = str(dev)
    teachers = {path: teacher_of(path, cfg.teacher) for path in ckpts}  # each checked once
    for path in ckpts:  # every pair checked before any gradient is computed
        check_same_tokenizers([path, teachers[path]])
        check_trained_on(teachers[path], found.name, "the teacher")
    levels = found.levels("grad", batch, seed)
    results: dict[str, dict] = {}
    folders: dict[str, str] = {}
    for path in bar(ckpts, "grad_align", unit="ckpt"):
        student, tok = load_checkpoint(path, device=device, dtype=dt)
        teacher_model, tok_t = load_checkpoint(teachers[path], device=device, dtype=dt)
        check_same_tokenizer(tok, tok_t, path, teachers[path])
        name = analysis.label_of(path, results)
        folders[name] = path
        results[name] = measure(student, teacher_model, tok, found, levels, context, parts,
                                cfg.micro_batch, cfg.temperature, seed)
        del student, teacher_model
    steps = [step_of(p) for p in ckpts]
    return analysis.make_report(cfg, task=found.name, context=context, paths=folders,
                                results=results, batch=batch,
                                data=analysis.data_record(found, levels[:parts * (batch // parts)]),
                                steps=steps if all(s is not None for s in steps) else None)


DEMO = ("sokoban_opd",)  # what the bare command line aligns


def format_corrected(results: Mapping[str, GradAlign], undefined: dict | None = None) -> str:
    """The noise-corrected angles (P independent parts) with their 95% jackknife intervals;
    empty when the report has no parts beyond two halves. No angle with an `undefined` term."""
    undefined = undefined or {}
    rows: dict[str, dict] = {n: r.global_["parts"] for n, r in results.items()
                             if r.global_ and r.global_.get("parts")}
    if not rows:
        return ""
    pairs = list(next(iter(rows.values()))["pairs"])
    w = max(12, *(len(n) for n in rows))

    def cell(p: dict) -> str:
        a, ci = p["angle_corrected_deg"], p["angle_ci95_deg"]
        if a is None:
            return f"{'-':>22}"
        return f"{a:>6.1f} [{ci[0]:5.1f}, {ci[1]:5.1f}]" if ci else f"{a:>6.1f} [  -  ,   -  ]"

    lines = [f"{'corrected (deg)':<{w}} " + " ".join(f"{p:>22}" for p in pairs)]
    for name, parts in rows.items():
        none = set(undefined.get(name) or ())
        lines.append(f"{name:<{w}} " + " ".join(
            f"{'-':>22}" if _blank_undefined(p, none) else cell(parts["pairs"][p])
            for p in pairs))
    lines.append(f"(noise-corrected angle over {next(iter(rows.values()))['n_parts']} "
                 "independent parts, with its 95% jackknife interval; '-': no signal)")
    return "\n".join(lines)


def show(report: GradAlignReport | dict) -> None:
    report = as_report(report, GradAlignReport)
    batch = report.batch
    parts = report.config.get("parts") or 2
    print(f"task={report.task} context={report.context} batch={batch} ({parts} parts "
          f"of {batch // parts}; floors from two halves of {batch // 2})")
    undefined = undefined_terms(report)
    print(format_table(report.results, undefined))
    corrected = format_corrected(report.results, undefined)
    if corrected:
        print(corrected)


def figures(report: GradAlignReport | dict) -> dict:
    """{"": angles and floors per checkpoint, "steps": over training (with more than one
    checkpoint of one run; checkpoints of different runs have no course to draw)}."""
    report = as_report(report, GradAlignReport)
    from nca_interp.plots import grad_align_figure, grad_align_over_steps, grad_x

    out = {"": grad_align_figure(report)}
    if len(report.results) > 1 and grad_x(report)[1]:  # one run's course over training
        out["steps"] = grad_align_over_steps(report)
    return out


def main(argv: list[str] | GradAlignConfig | None = None) -> dict:
    cfg = parse_config(GradAlignConfig, argv, __doc__, positional="ckpt")
    return execute(analysis.command_defaults(sys.modules[__name__], cfg))


def execute(cfg: GradAlignConfig) -> dict:
    """The command on a config object (what `nca_interp.paper.reproduce` calls; `main` parses the
    command line into one): see `analysis.execute`."""
    return analysis.execute(sys.modules[__name__], cfg)

if __name__ == "__main__":
    sys.exit(entry(main, parsed=PARSED))
