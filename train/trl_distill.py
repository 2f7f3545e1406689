r"""OPD / NCA through TRL's DistillationTrainer (nca_interp.trl_nca), launchable with accelerate.

    python -m train.trl_distill --student runs/sokoban_base --out runs/trl_nca --method nca
    accelerate launch --config_file train/accelerate/ddp_cpu.yaml -m train.trl_distill \
        --student runs/sokoban_base --out runs/trl_nca --method nca --steps 100
    accelerate launch --config_file train/accelerate/fsdp_gpu.yaml -m train.trl_distill ...

The dataset is the task's training prompts: `prompt` = x, `teacher_prompt` = [c, x]. The final
student is written as a package checkpoint (manifest, run config naming its student, teacher,
task and context), so every analysis opens it (`evaluate`, `layer_sim`, `param_delta`, ...).
`--greedy` samples greedily (the tests compare processes on identical completions).
"""

from __future__ import annotations

if __name__ == "__main__":  # Ctrl-C while the imports below run: one line, not a traceback
    from nca_interp.cli import quiet_interrupt

    quiet_interrupt()

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from nca_interp.checkpoint import load_checkpoint, save_checkpoint
from nca_interp.cli import entry, parse_config, to_dict
from nca_interp.configs import PRECISION_HELP, TASK_OPTIONS_HELP
from nca_interp.errors import RunError, UsageError
from nca_interp.models import resolved_precision
from nca_interp.runs import resolve_task_and_context
from nca_interp.tasks import task_record

from .common import Dist, close_distributed, exit_worker

__all__ = ["TRLDistillConfig", "check_new_out", "main"]


@dataclass
class TRLDistillConfig:
    student: str = field(default="runs/sokoban_base", metadata={"help": "initial checkpoint"})
    out: str = field(default="runs/trl_opd", metadata={"help": "output checkpoint folder"})
    method: str = field(default="opd", metadata={"help": "opd|nca", "check": "choice:opd|nca"})
    teacher: str | None = field(default=None, metadata={"help": "default: --student"})
    beta: float = field(default=1.0, metadata={"help": "NCA weight"})
    context: str | None = field(default=None, metadata={"help": "default: the task's"})
    task: str | None = field(default=None, metadata={"help": "default: the student's"})
    task_options: list[str] | None = field(default=None, metadata={"help": TASK_OPTIONS_HELP})
    steps: int = field(default=100, metadata={"help": "optimizer steps"})
    batch: int = field(default=8, metadata={"help": "prompts per step (over all processes)"})
    lr: float = field(default=3e-4, metadata={"help": "learning rate"})
    clip: float = field(default=1.0, metadata={"help": "gradient-norm clip (0: none)",
                                               "check": ">=0"})
    temperature: float = field(default=1.0, metadata={"help": "sampling and loss temperature"})
    greedy: bool = field(default=False, metadata={"help": "greedy completions (tests)"})
    optim: str = field(default="adamw_torch", metadata={
        "help": "TRL / transformers optimizer name (sgd in the process-count test: Adam's first "
                "step turns float-rounding sign flips of near-zero gradients into full steps)"})
    kl: str = field(default="full", metadata={"help": "full|topk|sampled",
                                              "check": "choice:full|topk|sampled"})
    kl_k: int = field(default=256, metadata={"help": "topk support", "check": ">=1"})
    kl_support: str = field(default="p", metadata={"help": "p|q", "check": "choice:p|q"})
    kl_tail: str = field(default="renorm", metadata={
        "help": "renorm|bucket|none", "check": "choice:renorm|bucket|none"})
    kl_form: str = field(default="k1", metadata={"help": "k1|k3", "check": "choice:k1|k3"})
    seed: int = field(default=0, metadata={"help": "data and sampling seed"})
    precision: str = field(default="auto", metadata={
        "help": PRECISION_HELP,
        "check": "choice:auto|fp32|bf16"})



def check_new_out(cfg: TRLDistillConfig) -> None:
    """This command writes its student once, at the end, by replacing the folder at --out (and
    lets TRL write into --out.trl), and never resumes: both must be new (absent, or an empty
    folder), outside the run's input checkpoints and outside any run or checkpoint folder
    (`check_out`). Probe 11 L-A: it replaced whatever --out named (a user's files, a finished
    run, a run still training, the current folder) and exited 0."""
    from .common import check_no_links, check_out

    here = Path.cwd().resolve()
    if Path(cfg.out).expanduser().resolve() in (here, *here.parents):
        raise UsageError(f"--out {cfg.out} is the current folder or one above it, which "
                         "train.trl_distill would replace: choose a new --out")
    for out in (cfg.out, cfg.out + ".trl"):
        check_out(out, {"--student": cfg.student, "--teacher": cfg.teacher})
        folder = Path(out).expanduser()
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise UsageError(f"--out {out} is a file or a link; train.trl_distill writes a new "
                             "folder there: choose a new --out")
        if folder.is_dir():
            check_no_links(folder)
            held = sorted(p.name for p in folder.iterdir())
            if held:
                raise UsageError(f"--out {out} already holds {', '.join(held[:4])}"
                                 f"{' ...' if len(held) > 4 else ''}, which this run did not "
                                 "make, and train.trl_distill replaces the folder at the end: "
                                 "choose a new --out")


def main(argv: list[str] | None = None) -> str:
    try:
        from datasets import Dataset

        from nca_interp.trl_nca import NCADistillationConfig, NCADistillationTrainer
    except ImportError as e:
        raise RunError(f"{e}; install the extra: pip install 'nca_interp[trl]'") from e

    cfg = parse_config(TRLDistillConfig, argv, __doc__)
    check_new_out(cfg)  # before any work: the final save replaces the folder at --out whole
    lock = None
    if int(os.environ.get("RANK", "0")) == 0:  # one writer: two commands never share an --out
        from nca_interp.runlock import RunLock

        out = Path(cfg.out).expanduser().resolve()
        out.parent.mkdir(parents=True, exist_ok=True)
        lock = RunLock(out.parent, f".{out.name}.nca-lock", label=f"train.trl_distill --out {out}")
    gpu = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cfg.precision = resolved_precision(gpu, cfg.precision)  # the run records what auto meant
    task, ctx = resolve_task_and_context([cfg.student], cfg.task, cfg.context, cfg.task_options)
    student, tok = load_checkpoint(cfg.student)
    teacher, _ = load_checkpoint(cfg.teacher or cfg.student)
    view = task.for_tokenizer(tok)
    levels = task.levels("train", cfg.batch * cfg.steps, cfg.seed)
    data = Dataset.from_dict({"prompt": [view.prompt(lv) for lv in levels],
                              "teacher_prompt": [view.prompt(lv, view.context(lv, ctx))
                                                 for lv in levels]})
    world = int(os.environ.get("WORLD_SIZE", "1"))  # set by accelerate launch and torchrun
    if cfg.batch % world:
        raise UsageError(f"--batch {cfg.batch} does not split over {world} processes")
    args = NCADistillationConfig(
        output_dir=cfg.out + ".trl", per_device_train_batch_size=cfg.batch // world,
        max_steps=cfg.steps, learning_rate=cfg.lr, lr_scheduler_type="constant", optim=cfg.optim,
        max_grad_norm=cfg.clip, bf16=cfg.precision == "bf16",
        max_completion_length=view.max_response_tokens(), temperature=cfg.temperature,
        generation_kwargs={"do_sample": False} if cfg.greedy else None,
        nca_beta=cfg.beta if cfg.method == "nca" else 0.0, kl=cfg.kl, kl_k=cfg.kl_k,
        kl_support=cfg.kl_support, kl_tail=cfg.kl_tail, kl_form=cfg.kl_form, seed=cfg.seed,
        use_cpu=gpu.type == "cpu", report_to=[], save_strategy="no",
        logging_steps=1, shuffle_dataset=False, disable_dropout=True)
    trainer = NCADistillationTrainer(model=student, teacher_model=teacher, args=args,
                                     train_dataset=data, processing_class=tok)
    trainer.train()
    if trainer.accelerator.is_main_process:
        run = {**to_dict(cfg), "student": cfg.student, "teacher": cfg.teacher or cfg.student,
               "context": ctx, "task": task_record(task), "trainer": "trl", "processes": world,
               "history": trainer.state.log_history}
        save_checkpoint(cfg.out, trainer.accelerator.unwrap_model(trainer.model), tok, run)
    if lock is not None:
        lock.release()
    trainer.accelerator.wait_for_everyone()
    # the same guarded ending as train.distill's workers: a stalled gloo teardown dumps every
    # stack and exits 1 (never a hang), and a finished worker skips interpreter finalization
    dist = Dist(rank=int(os.environ.get("RANK", "0")), world=world)
    close_distributed(dist)
    exit_worker(dist)
    return cfg.out


if __name__ == "__main__":
    sys.exit(entry(main))
