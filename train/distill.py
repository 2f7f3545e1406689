r"""On-policy distillation (OPD) and OPD + No-Context Anchoring (NCA).

    python -m train.distill --method opd --student runs/sokoban_base --context state \
        --out runs/sokoban_opd
    python -m train.distill --method nca --beta 1 --student runs/sokoban_base --context state \
        --out runs/sokoban_nca

Each step: draw levels, sample y ~ g(.|x) without context (KV cache, --temperature), score the
same tokens under the teacher with context, and take one AdamW step on
L = L_OPD + beta * L_NCA (math in nca_interp/losses.py; beta = 0 for --method opd).
Without --teacher the teacher is the student's initial checkpoint (self-distillation).
Checkpoints every --save-every steps under OUT/checkpoints/step_*; a killed run restarted with
the same command resumes from the last one and ends at the same weights (data and sampling
seeds are functions of the step).

Bigger models: --device cuda (bf16 autocast by default there, --precision), --teacher-device
cuda:1 to keep the teacher on its own GPU, --grad-checkpointing, --micro-batch M (forward,
teacher scoring and backward M prompts at a time; gradients accumulate to the same update).
Data parallel on torch.distributed (NCCL on GPUs, gloo on CPUs):

    torchrun --nproc-per-node 8 -m train.distill --device cuda --method nca ...

Each rank samples and scores its slice of the global --batch (the sampling noise is drawn for
the global batch, so N ranks sample the tokens one process would), DDP all-reduces gradients,
the loss is normalised by the global token count, and only rank 0 writes checkpoints, metrics
and evaluations; a restarted torchrun job resumes like a single process.

--lens-every N logs the two-view lens's headline (nca_interp.lens.monitor) into metrics.jsonl
every N steps: lens_kl, the mean per-token KL(q_x || q_c) on the student's own samples, beside
lens_kl_control (a wrong c' of c's form) and lens_kl_floor (arithmetic), each also by third of
the response (_first, _middle, _last), on --lens-items held-out items.
"""

from __future__ import annotations

import logging
import sys

from nca_interp.cli import parse_early

from .options import DistillConfig

if __name__ == "__main__":  # --help and a bad flag answered before torch is imported
    PARSED = parse_early(DistillConfig, __doc__)

import math
import time
from contextlib import nullcontext

import torch

from nca_interp import progress
from nca_interp.checkpoint import (
    check_same_tokenizer,
    load_checkpoint,
    read_run_config,
    verify_folder,
)
from nca_interp.cli import check_disk, check_writable, entry, parse_config, to_dict
from nca_interp.errors import UsageError
from nca_interp.evaluate import max_response_tokens
from nca_interp.lens import monitor
from nca_interp.losses import Estimator, combine, loss_terms
from nca_interp.models import autocast, context_limit, resolved_precision
from nca_interp.prefix import PrefixCache
from nca_interp.rollout import Batch, onpolicy_batch
from nca_interp.runs import check_context, check_trained_on, lr_at, task_for_checkpoints
from nca_interp.tasks import task_record

from .common import (
    DISK_REMEDY,
    Dist,
    Run,
    all_finite,
    check_out,
    check_warmup,
    close_distributed,
    data_inputs,
    disk_needed,
    eval_wins,
    exit_worker,
    init_distributed,
    setup_torch,
)

__all__ = ["main"]

log = logging.getLogger(__spec__.name if __spec__ else __name__)  # python -m too


def task_for(cfg: DistillConfig, student_dir: str):
    verify_folder(student_dir)  # a missing folder is named as such, not as a missing task
    if cfg.task is None and not read_run_config(student_dir).get("task"):
        raise UsageError(f"{student_dir} has no run_config.json naming its task; pass --task")
    return task_for_checkpoints([student_dir], cfg.task, options=cfg.task_options)


def estimators(cfg: DistillConfig) -> tuple[Estimator, Estimator]:
    """(OPD's, NCA's) estimator of the KL (`--kl ...`; the one KL path, nca_interp.losses)."""
    est = Estimator(cfg.kl, cfg.kl_k, cfg.kl_support, cfg.kl_tail, cfg.kl_form)
    return est, (Estimator() if cfg.nca_kl == "full" else est)


def accumulate(student, teacher, batch: Batch, terms_needed: tuple[str, ...], beta: float,
               cfg: DistillConfig, denom: torch.Tensor, dist: Dist, amp,
               prefix_cache: PrefixCache | None = None) -> dict[str, float]:
    """Forward, score and backward this rank's slice in micro-batches; gradients accumulate to
    d/dtheta of the global-batch loss. Each piece's terms are its KL sum over the global token
    count `denom`, so pieces over micro-batches and ranks add up to the global mean; the loss
    is scaled by the world size because DDP averages gradients over ranks. Returns the summed
    term values of this rank (sum them over ranks for the global mean)."""
    rows = batch.resp.shape[0]
    step = cfg.micro_batch or rows
    starts = list(range(0, rows, step))
    totals: dict[str, float] = {}
    for i, a in enumerate(starts):
        piece = batch if step >= rows else batch.rows(a, min(a + step, rows))
        last = i == len(starts) - 1
        sync = nullcontext() if last or dist.world == 1 else student.no_sync()
        with sync:
            with amp:
                terms = loss_terms(student, teacher, piece, terms_needed, denom,
                                   cfg.temperature, *estimators(cfg),
                                   prefix_cache=prefix_cache)
            (combine(terms, beta) * dist.world).backward()
        for name, value in terms.items():
            totals[name] = totals.get(name, 0.0) + value.item()
    return totals


def main(argv: list[str] | DistillConfig | None = None) -> None:
    cfg = parse_config(DistillConfig, argv, __doc__)
    if cfg.method not in ("opd", "nca"):
        raise UsageError(f"--method must be opd or nca, not {cfg.method!r}")
    beta = cfg.beta if cfg.method == "nca" else 0.0
    warmup_note = check_warmup(cfg)
    setup_torch(cfg.threads)
    dist, device = init_distributed(cfg.device)
    cfg.precision = resolved_precision(device, cfg.precision)  # the run records what auto meant
    if cfg.batch % dist.world:
        raise UsageError(f"--batch {cfg.batch} does not split evenly over {dist.world} ranks")
    inputs = {"--student": cfg.student, "--teacher": cfg.teacher}
    check_out(cfg.out, inputs)
    if cfg.teacher:
        verify_folder(cfg.teacher)
    task = task_for(cfg, cfg.student)
    check_trained_on(cfg.teacher, task.name, "--teacher")
    check_context(task, cfg.context or task.default_context)
    check_writable(cfg.out, "run")
    teacher_dir = cfg.teacher or cfg.student
    student, tok = load_checkpoint(cfg.student, device=str(device))
    teacher_device = cfg.teacher_device or str(device)
    teacher, tok_t = load_checkpoint(teacher_dir, device=teacher_device)
    check_same_tokenizer(tok, tok_t, cfg.student, teacher_dir)
    teacher.requires_grad_(False)
    if cfg.grad_checkpointing:
        student.activation_checkpointing_enable({"use_reentrant": False})
    task = task.for_tokenizer(tok)
    cfg.context = cfg.context or task.default_context
    run = Run(cfg.out, {**to_dict(cfg), "kind": "distill", "beta_effective": beta,
                        "task": task_record(task)}, writer=dist.main,
              inputs={**inputs, **data_inputs(task_record(task))},
              resume_from=cfg.resume_from)
    try:  # a failed run releases its directory (a run in this process may follow)
        opt = torch.optim.AdamW(student.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        dist.barrier()  # rank 0 has checked the run directory
        start = run.resume(student, opt)
        if dist.main:
            check_disk(cfg.out, sum(disk_needed(sum(p.numel() * p.element_size()
                                                    for p in student.parameters()),
                                                cfg.steps, cfg.save_every, start)),
                       f"training {cfg.out} to step {cfg.steps}", DISK_REMEDY)
        model = student  # what the loss runs through: DDP all-reduces its gradients
        if dist.world > 1:
            model = torch.nn.parallel.DistributedDataParallel(
                student, device_ids=[device.index] if device.type == "cuda" else None)
        amp = autocast(device, cfg.precision)
        held_out = task.held_out_keys(1000, seed=0)
        eval_levels = task.levels("test", cfg.eval_levels, seed=0)
        limit = min(context_limit(student), context_limit(teacher))
        max_new = max_response_tokens(task)
        terms_needed = ("opd", "nca") if beta else ("opd",)
        prefix_cache = PrefixCache()  # the frozen teacher's shared context, once per run
        local = cfg.batch // dist.world
        shard = (dist.rank * local, cfg.batch)
        student.train()
        if warmup_note and start < cfg.steps:
            log.warning(warmup_note)
        bar = progress.bar(range(start, cfg.steps), cfg.method, total=cfg.steps, initial=start,
                           show=dist.main, leave=True)
        for step in bar:
            t0 = time.time()
            levels = task.sample_levels(f"distill-{cfg.seed}-{step}", cfg.batch, held_out)
            mine = levels[shard[0]: shard[0] + local]
            gen = torch.Generator(device).manual_seed(cfg.seed * 1_000_003 + step)
            with amp:
                batch, texts, lengths = onpolicy_batch(student, tok, task, mine, cfg.context,
                                                       max_new, cfg.temperature, gen, limit, shard)
            t_sample = time.time() - t0
            denom = dist.sum(batch.resp_mask.sum()).to(torch.float32)
            opt.zero_grad(set_to_none=True)
            totals = accumulate(model, teacher, batch, terms_needed, beta, cfg, denom, dist, amp,
                                prefix_cache)
            won = [task.score(lv, t).won for lv, t in zip(mine, texts)]
            stats = dist.sum(torch.tensor([*totals.values(), sum(won), sum(lengths)],
                                          device=device))
            terms = dict(zip(totals, stats.tolist()))
            for name, value in terms.items():
                if not math.isfinite(value):
                    raise FloatingPointError(
                        f"loss term {name!r} is {value} at step {step + 1}; stopping. The "
                        f"last good checkpoint is {run.resume_point() or cfg.student}")
            for g in opt.param_groups:
                g["lr"] = lr_at(step, cfg.lr, cfg.warmup, cfg.steps, cfg.schedule)
            gnorm = torch.nn.utils.clip_grad_norm_(student.parameters(), cfg.clip)
            opt.step()
            if not all_finite(student):
                raise FloatingPointError(
                    f"weights became NaN/Inf at step {step + 1} (grad norm {gnorm.item():.3g}); "
                    f"stopping without saving. The last good checkpoint is "
                    f"{run.resume_point() or cfg.student}; lower --lr or --clip")
            record = {"step": step + 1, "loss": terms["opd"] + beta * terms.get("nca", 0.0),
                      **terms, "sample_win": stats[-2].item() / cfg.batch,
                      "response_len": stats[-1].item() / cfg.batch,
                      "grad_norm": gnorm.item(), "lr": opt.param_groups[0]["lr"],
                      "sample_s": t_sample, "step_s": time.time() - t0}
            if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
                if dist.main:
                    wins = eval_wins(student, tok, task, eval_levels, [cfg.context])
                    record["eval_win_no_c"], record["eval_win_c"] = wins["none"], wins[cfg.context]
                dist.barrier()
            if cfg.lens_every and ((step + 1) % cfg.lens_every == 0 or step + 1 == cfg.steps):
                if dist.main:  # `python -m nca_interp.lens` on this step's checkpoint, in brief
                    lens = monitor(student, tok, task, cfg.context, cfg.lens_items)
                    record.update({f"lens_{k}": v for k, v in lens.items()})
                dist.barrier()
            run.log(record)
            bar.set_postfix(opd=f"{record['opd']:.3f}", win=f"{record['sample_win']:.2f}")
            if (step + 1) % cfg.save_every == 0 or step + 1 == cfg.steps:
                if dist.main:
                    run.save(step + 1, student, tok, opt)
                dist.barrier()
    finally:
        run.close()
    close_distributed(dist)
    if dist.main:
        print(f"done: {run.dir}")
    exit_worker(dist)


if __name__ == "__main__":
    sys.exit(entry(main, parsed=PARSED))
