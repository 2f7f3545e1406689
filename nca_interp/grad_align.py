"""Angles between the gradients of the distillation loss terms.

    python -m nca_interp.grad_align runs/sokoban_opd/checkpoints/step_* --teacher runs/base

On one on-policy batch per checkpoint (y ~ g(.|x), the same batch for every term), the gradient
of each term of nca_interp.losses separately:
  opd  KL(g(.|x) || f(.|x,c))      what OPD trains (the no-context view)
  ctx  KL(g(.|x,c) || f(.|x,c))    where distillation would pull the context view
  nca  KL(sg[g(.|x)] || g(.|x,c))  the anchor NCA adds
Reported globally and per layer x module: cosine and angle for every pair, norm ratios, and the
part of the NCA gradient orthogonal to the OPD gradient (|g_nca - proj_opd g_nca| / |g_nca|).
A term whose gradient is zero (e.g. ctx when student == teacher) has no angle (null).
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from nca_interp.assets import resolve
from nca_interp.checkpoint import load_checkpoint, read_run_config
from nca_interp.cli import parse_config, to_dict
from nca_interp.evaluate import TASK_OPTIONS_HELP, max_response_tokens
from nca_interp.layer_sim import resolve_task_and_context
from nca_interp.losses import TERMS, loss_terms
from nca_interp.models import context_limit
from nca_interp.names import module_of
from nca_interp.rollout import onpolicy_batch


def term_gradients(student, teacher, batch, terms=TERMS) -> dict[str, dict[str, torch.Tensor]]:
    """{term: {hf_param_name: grad}} for each loss term on the same batch."""
    grads = {}
    for term in terms:
        student.zero_grad(set_to_none=True)
        loss_terms(student, teacher, batch, (term,))[term].backward()
        grads[term] = {n: (p.grad.detach().clone() if p.grad is not None
                           else torch.zeros_like(p)) for n, p in student.named_parameters()}
    student.zero_grad(set_to_none=True)
    return grads


def _cos(a: torch.Tensor, b: torch.Tensor, floor: float = 0.0) -> float | None:
    """Cosine, or None when either vector is zero (norm <= floor: round-off, not a direction)."""
    na, nb = a.norm(), b.norm()
    if na <= floor or nb <= floor:
        return None
    return float((a @ b) / (na * nb))


def angle_deg(cos: float | None) -> float | None:
    return None if cos is None else math.degrees(math.acos(max(-1.0, min(1.0, cos))))


def alignment(grads: dict[str, dict[str, torch.Tensor]]) -> dict:
    """Global and per-(layer, module) cosines/angles between every pair of term gradients."""
    terms = list(grads)
    names = list(grads[terms[0]])
    flat = {t: torch.cat([grads[t][n].flatten().double() for n in names]) for t in terms}
    pairs = list(itertools.combinations(terms, 2))
    # A term that is zero in exact arithmetic (ctx when student == teacher) leaves round-off of
    # up to ~1e-6 relative size (float32); its "direction" is noise, so it gets no angle.
    floor = 1e-4 * max(float(v.norm()) for v in flat.values())
    out = {"global": {"cos": {}, "angle_deg": {}, "norm": {t: float(flat[t].norm())
                                                            for t in terms}}}
    for a, b in pairs:
        c = _cos(flat[a], flat[b], floor)
        out["global"]["cos"][f"{a}~{b}"] = c
        out["global"]["angle_deg"][f"{a}~{b}"] = angle_deg(c)
    g = out["global"]["norm"]
    out["global"]["norm_ratio"] = {f"{a}/{b}": (g[a] / g[b] if g[b] else None)
                                   for a, b in itertools.permutations(terms, 2)}
    if "nca" in flat and "opd" in flat and flat["opd"].norm() > 0 and flat["nca"].norm() > 0:
        o, n = flat["opd"], flat["nca"]
        perp = n - (n @ o) / (o @ o) * o
        out["global"]["nca_orth_to_opd"] = float(perp.norm() / n.norm())
    groups: dict[str, list[str]] = {}
    for name in names:
        layer, module = module_of(name)
        groups.setdefault(f"{'all' if layer is None else layer}.{module}", []).append(name)
    out["modules"] = {}
    for key, members in groups.items():
        vec = {t: torch.cat([grads[t][n].flatten().double() for n in members]) for t in terms}
        out["modules"][key] = {"cos": {f"{a}~{b}": _cos(vec[a], vec[b], floor)
                                       for a, b in pairs},
                               "norm": {t: float(vec[t].norm()) for t in terms}}
    return out


@dataclass
class GradAlignConfig:
    ckpt: list[str] = field(default_factory=list, metadata={
        "help": "student checkpoints (e.g. a run's checkpoints/step_*); default: embedded OPD"})
    teacher: str | None = field(default=None, metadata={
        "help": "teacher checkpoint; default: the run's teacher/initial student"})
    task: str | None = field(default=None, metadata={"help": "default: from the run config"})
    task_options: list[str] | None = field(default=None, metadata={"help": TASK_OPTIONS_HELP})
    context: str | None = field(default=None, metadata={"help": "default: the run's context"})
    batch: int = field(default=64, metadata={"help": "on-policy prompts"})
    temperature: float = field(default=1.0, metadata={"help": "rollout temperature"})
    seed: int = field(default=0, metadata={"help": "levels and sampling seed"})
    out: str = field(default="figures/demo/grad_align", metadata={"help": "output stem"})
    png: bool = field(default=False, metadata={"help": "also write PNGs (needs kaleido)"})
    threads: int = field(default=2, metadata={"help": "torch threads"})


def teacher_of(path: str, override: str | None) -> str:
    run = read_run_config(path)
    t = override or resolve(run.get("teacher")) or resolve(run.get("student"))
    if not t:
        raise ValueError(f"{path} does not name its teacher in run_config.json; pass --teacher")
    return t


def step_of(path: str) -> int | None:
    name = Path(path).name
    return int(name.split("_")[1]) if name.startswith("step_") else None


def format_table(results: dict[str, dict]) -> str:
    pairs = list(next(iter(results.values()))["global"]["angle_deg"])
    w = max(12, *(len(n) for n in results))
    lines = [f"{'angle (deg)':<{w}} " + " ".join(f"{p:>9}" for p in pairs) +
             f" {'|opd|':>9} {'|ctx|':>9} {'|nca|':>9} {'nca⊥opd':>9}"]
    for name, r in results.items():
        g = r["global"]
        cells = [f"{g['angle_deg'][p]:>9.2f}" if g["angle_deg"][p] is not None else f"{'-':>9}"
                 for p in pairs]
        norms = [f"{g['norm'].get(t, 0):>9.4f}" for t in ("opd", "ctx", "nca")]
        orth = g.get("nca_orth_to_opd")
        lines.append(f"{name:<{w}} " + " ".join(cells + norms) +
                     (f" {orth:>9.3f}" if orth is not None else f" {'-':>9}"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    from nca_interp.plots import grad_align_figure, grad_align_over_steps, write_figure

    cfg = parse_config(GradAlignConfig, argv, __doc__, positional="ckpt")
    torch.set_num_threads(cfg.threads)
    if not cfg.ckpt:
        from nca_interp.assets import embedded

        cfg.ckpt = [str(embedded("sokoban_opd"))]
    task, context = resolve_task_and_context(cfg.ckpt, cfg.task, cfg.context,
                                             cfg.task_options)
    levels = task.levels("grad", cfg.batch, cfg.seed)
    results = {}
    for path in cfg.ckpt:
        student, tok = load_checkpoint(path)
        teacher, _ = load_checkpoint(teacher_of(path, cfg.teacher))
        teacher.requires_grad_(False)
        gen = torch.Generator().manual_seed(cfg.seed)
        view = task.for_tokenizer(tok)
        batch, _, _ = onpolicy_batch(student, tok, view, levels, context,
                                     max_response_tokens(view), cfg.temperature, gen,
                                     min(context_limit(student), context_limit(teacher)))
        student.train()
        name = Path(path).name if Path(path).name not in results else path
        results[name] = alignment(term_gradients(student, teacher, batch))
    steps = [step_of(p) for p in cfg.ckpt]
    report = {"config": to_dict(cfg), "task": task.name, "context": context,
              "steps": steps if all(s is not None for s in steps) else None,
              "results": results}
    print(f"task={task.name} context={context} batch={cfg.batch}")
    print(format_table(results))
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    written = write_figure(grad_align_figure(report), out, png=cfg.png)
    if len(results) > 1:
        written += write_figure(grad_align_over_steps(report), f"{out}_steps", png=cfg.png)
    print("wrote", out.with_suffix(".json"), *written)
    return report


if __name__ == "__main__":
    main()
