r"""Teacher (base) training: supervised on solver-optimal plans (games) or right answers (QA),
context on most examples.

    python -m train.sft --task sokoban --contexts state,plan --out runs/sokoban_base
    python -m train.sft --task sokoban --task-options dim_room=8x8 --out runs/sokoban8_base
    python -m train.sft --task sysprompt --task-options kb=0 --out runs/sysprompt_base
    python -m train.sft --task sokoban --init ~/.cache/nca_interp/models/smollm2-135m-instruct \
        --contexts state,plan --lr 5e-5 --out runs/sokoban_smollm2_base   # a chat model

For `sysprompt` the teacher reads a fresh random knowledge base from its system prompt on every
question (it learns to read facts, not to remember one KB); the run records `kb`, the fixed
knowledge base that distillation will later internalize. A checkpoint with a chat template
(`--init`) is trained in it: textarena boards and `[up]` moves inside its template.

Each example gets no context with probability --p-no-context, otherwise one kind from
--contexts; the loss is cross-entropy on the response tokens (plan + end-of-response). The
result is a teacher that is strong *with* context and weaker without. Killed runs resume from
their last checkpoint when restarted with the same command (data order is a function of step).

With --lora-rank R only a LoRA adapter on every attention and MLP projection is trained
(nca_interp.lora); each checkpoint holds the merged full weights, as a full fine-tuning run's
would (what distillation and every analysis load), and the adapter itself in `adapter/` (what a
resume continues, and small enough to keep in git):

    python -m train.sft --task sokoban --init ~/.cache/nca_interp/models/smollm2-135m-instruct \
        --contexts state,plan --lora-rank 16 --lr 5e-4 --out runs/sokoban_smollm2_lora
"""

from __future__ import annotations

import logging
import sys

from nca_interp.cli import parse_early

from .options import (  # noqa: F401 - OLD_TASK_FLAGS: read here as before
    OLD_TASK_FLAGS,
    SFTConfig,
    refuse_old_task_flags,
    sft_tasks,
)

if __name__ == "__main__":  # --help and a bad flag answered before torch is imported
    PARSED = parse_early(SFTConfig, __doc__, first=refuse_old_task_flags)

import random
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

from nca_interp import lora, progress
from nca_interp.checkpoint import load_checkpoint
from nca_interp.cli import entry, parse_config, to_dict, validate
from nca_interp.errors import UsageError
from nca_interp.forward import response_logits
from nca_interp.models import (
    ModelConfig,
    autocast,
    build_model,
    context_limit,
    resolve_device,
    resolved_precision,
)
from nca_interp.rollout import encode, segment_batch
from nca_interp.runs import lr_at
from nca_interp.tasks import QATask, Task, make_task, parse_task_options, task_record
from nca_interp.tokenizer import EOS, build_char_tokenizer

from .common import (
    Run,
    all_finite,
    check_out,
    check_warmup,
    data_inputs,
    eval_wins,
    setup_torch,
)

__all__ = ["execute", "main", "task_of"]

log = logging.getLogger(__spec__.name if __spec__ else __name__)  # python -m too


# LoRA's fields enter the run config only when --lora-rank is set: a full fine-tuning run records
# (and resumes, and digests) exactly as before they existed
LORA_FIELDS = ("lora_rank", "lora_alpha", "lora_dropout")

def task_of(cfg: SFTConfig) -> tuple[Task, Task]:
    """The task the run records (what distillation and evaluation will use) and the one it
    trains on (`Task.for_teacher`: the same, except for variants such as remapped keys and
    sysprompt's fresh knowledge bases)."""
    task = make_task(cfg.task, **parse_task_options(cfg.task, cfg.task_options))
    if not task.teacher_sft:
        raise UsageError(f"train.sft trains a teacher on {sft_tasks()}, not {cfg.task!r}: "
                         f"{cfg.task} is for checkpoints you bring (nothing to supervise); "
                         "distil them directly with python -m train.distill")
    return task, task.for_teacher(min_entities=cfg.min_entities)


def contexts_of(cfg: SFTConfig, task: Task) -> list[str]:
    return cfg.contexts or (["system"] if isinstance(task, QATask) else ["state", "plan"])


def batch_for_step(task, cfg: SFTConfig, step: int, held_out: set[str]):
    """Prompts and responses as (text, trained) segments; untrained segments (a detour, the
    packed follow-up questions) are seen by the model but carry no loss. Deterministic in
    (seed, step): the same batch after a resume."""
    if cfg.follow_ups not in ("full", "open"):
        raise UsageError(f"--follow-ups must be full or open, not {cfg.follow_ups!r}")
    rng = random.Random(f"sft-{cfg.seed}-{step}")
    n = cfg.batch // cfg.pack if isinstance(task, QATask) else cfg.batch
    levels = task.sample_levels(f"train-{cfg.seed}-{step}", n, held_out)
    contexts = contexts_of(cfg, task)
    prompts, responses = [], []
    for i, lv in enumerate(levels):
        kind = None if rng.random() < cfg.p_no_context else rng.choice(contexts)
        prompts.append(task.prompt(lv, None if kind is None else task.context(lv, kind)))
        if isinstance(task, QATask):
            segs = [(task.target(lv), True)]
            for j in range(1, cfg.pack):  # more questions about the same knowledge base
                q = task.game.follow_up(lv, f"pack-{cfg.seed}-{step}-{i}-{j}", task.config)
                asked = task.prompt(q) if cfg.follow_ups == "full" else \
                    q.text + task.game.cue(q)  # open: the question without its options
                segs += [(EOS, True), ("\n" + asked, False),
                         (task.target(q), True)]
            responses.append(segs)
            continue
        detour, rest = "", lv
        if rng.random() < cfg.p_detour:
            for _ in range(8):  # a few draws until the detour is legal and off the optimal path
                moves = "".join(rng.choice("UDLR") for _ in range(rng.randint(1, 2)))
                moved = task.game.advance(lv, moves)
                if moved is not None and moves != lv.solution[: len(moves)]:
                    detour, rest = moves, moved
                    break
        sep = " " if detour and task.fmt != "compact" else ""  # chat moves: `[up] [left]`
        responses.append([(task.moves_text(lv, detour) + sep, False),
                          (task.moves_text(lv, rest.solution), True)])
    return prompts, responses


def run_record(cfg: SFTConfig) -> dict:
    """The config a run records: LoRA's fields only when it trains an adapter."""
    return {k: v for k, v in to_dict(cfg).items() if cfg.lora_rank or k not in LORA_FIELDS}


def saved(model, adapted):
    """What a checkpoint holds and evaluation plays: the model itself, or for a LoRA run
    (`adapted`, the peft model) its merged full weights, whose save also writes the adapter
    into `adapter/` of the same folder, before its manifest and atomic rename, so a step
    checkpoint never lacks the adapter its resume needs."""
    if adapted is None:
        return model
    full = lora.merged(adapted)
    save_full = full.save_pretrained

    def save_pretrained(folder, **kwargs):
        save_full(folder, **kwargs)
        lora.save_adapter(adapted, Path(folder) / lora.ADAPTER_DIR)

    full.save_pretrained = save_pretrained
    return full


def main(argv: list[str] | SFTConfig | None = None) -> None:
    if not isinstance(argv, SFTConfig):  # a config from parse_early was checked there
        refuse_old_task_flags(sys.argv[1:] if argv is None else argv)
    execute(parse_config(SFTConfig, argv, __doc__))


def execute(cfg: SFTConfig) -> None:
    """Train (or resume) the teacher a config describes (what `nca_interp.paper.reproduce`
    calls)."""
    validate(cfg)
    if cfg.lora_rank and not cfg.init:
        raise UsageError(f"--lora-rank {cfg.lora_rank} adapts a trained model, and no --init "
                         "names one (a random init would train only the adapter): give --init "
                         "MODEL, or drop --lora-rank")
    warmup_note = check_warmup(cfg)
    check_out(cfg.out, {"--init": cfg.init})
    setup_torch(cfg.threads)
    recorded, task = task_of(cfg)
    device = resolve_device(cfg.device)
    # the run records what auto meant here
    cfg = replace(cfg, precision=resolved_precision(device, cfg.precision))
    amp = autocast(device, cfg.precision)
    if cfg.init:  # its own tokenizer: the char one, or a chat model's (its template then)
        model, tok = load_checkpoint(cfg.init)
        model = model.to(device)
        c = model.config  # the run records the architecture it trains, not the unused flags
        cfg = replace(cfg, arch=c.model_type, n_layers=c.num_hidden_layers,
                      d_model=c.hidden_size, n_heads=c.num_attention_heads,
                      d_mlp=c.intermediate_size)
    else:
        tok = build_char_tokenizer()
        model = build_model(ModelConfig(cfg.arch, cfg.n_layers, cfg.d_model, cfg.n_heads,
                                        cfg.n_heads, cfg.d_mlp), tok, cfg.seed)
        torch.nn.Module.to(model, device)  # transformers types its `to` wrapper without self
    recorded, task = recorded.for_tokenizer(tok), task.for_tokenizer(tok)
    adapted = None  # the peft model of a LoRA run; `model` is then its adapted HF model
    if cfg.lora_rank:
        alpha = cfg.lora_alpha or 2.0 * cfg.lora_rank
        cfg = replace(cfg, lora_alpha=alpha)
        adapted = lora.wrap(model, cfg.lora_rank, alpha, cfg.lora_dropout, cfg.seed)
        model = adapted.get_base_model()
    run = Run(cfg.out, {**run_record(cfg), "kind": "sft", "task": task_record(recorded)},
              inputs={"--init": cfg.init, **data_inputs(task_record(recorded))},
              resume_from=cfg.resume_from)
    try:  # a failed run releases its directory (a run in this process may follow)
        # Run compares the keys this command records, and a full fine-tuning command records
        # no lora_rank: a LoRA run's folder is told apart here
        if run.config.get("lora_rank", 0) != cfg.lora_rank:
            raise UsageError(f"--out {cfg.out} holds a run with --lora-rank "
                             f"{run.config.get('lora_rank', 0)}; resume it with its own "
                             "arguments or choose a new --out")
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr,
                                weight_decay=cfg.weight_decay)
        last = run.resume_point()
        # a LoRA run's step folders hold merged weights: they load into a throwaway merged
        # copy, and the adapter (what trains) from adapter/
        start = run.resume(saved(model, adapted) if adapted and last else model, opt)
        if adapted and last:
            lora.load_adapter(adapted, last / lora.ADAPTER_DIR)
        held_out = task.held_out_keys(1000, seed=0)
        eval_levels = task.levels("test", cfg.eval_levels, seed=0)
        model.train()
        if warmup_note and start < cfg.steps:
            log.warning(warmup_note)
        bar = progress.bar(range(start, cfg.steps), "sft", total=cfg.steps, initial=start,
                           leave=True)
        for step in bar:
            t0 = time.time()
            prompts, responses = batch_for_step(task, cfg, step, held_out)
            resp, rmask, lmask = segment_batch(tok, responses)
            ids, mask = encode(tok, prompts, context_limit(model), reserve=resp.shape[1])
            ids, mask, resp, rmask, lmask = (t.to(device) for t in (ids, mask, resp, rmask, lmask))
            with amp:
                logits = response_logits(model, ids, mask, resp, rmask)
            loss = (F.cross_entropy(logits.float().transpose(1, 2), resp, reduction="none")
                    * lmask).sum() / lmask.sum()
            for g in opt.param_groups:
                g["lr"] = lr_at(step, cfg.lr, cfg.warmup, cfg.steps, cfg.schedule)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            opt.step()
            if not all_finite(model):
                raise FloatingPointError(f"weights became NaN/Inf at step {step + 1} (loss "
                                         f"{loss.item():.3g}); stopping without saving. The last "
                                         f"good checkpoint is {run.resume_point()}; lower --lr")
            dt = time.time() - t0
            tokens = int(mask.sum() + rmask.sum())
            record = {"step": step + 1, "loss": loss.item(), "grad_norm": gnorm.item(),
                      "lr": opt.param_groups[0]["lr"], "tokens_per_s": tokens / dt, "step_s": dt}
            evaluate = (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps
            save = (step + 1) % cfg.save_every == 0 or step + 1 == cfg.steps
            held = saved(model, adapted) if evaluate or save else None
            if evaluate:
                with amp:
                    wins = eval_wins(held, tok, task, eval_levels, contexts_of(cfg, task))
                record.update({f"win_{k}": v for k, v in wins.items()})
            run.log(record)
            bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{record['tokens_per_s']:.0f}")
            if save:
                run.save(step + 1, held, tok, opt)  # publishing copies adapter/ as well
    finally:
        run.close()
    print(f"done: {run.dir}")


if __name__ == "__main__":
    sys.exit(entry(main, parsed=PARSED))
