"""The option groups every training command's config is composed of (TRL-style: a command's
config subclasses the groups it takes and adds its own fields; a field whose default differs,
such as SFT's learning rate, is declared again in the command's config).

- `RunOptions`: where the run goes, its length, seed, saving and held-out evaluation;
- `OptimOptions`: AdamW and its learning-rate schedule;
- `EstimatorOptions`: how the KL terms are estimated (`nca_interp.losses.Estimator`);
- `DeviceOptions`: threads, device and precision.

`nca_interp.cli.parse_config` shows a config's own fields first, then each group under its
title (the first line of its docstring).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nca_interp.models import PRECISION_HELP

__all__ = ["DeviceOptions", "EstimatorOptions", "OptimOptions", "RunOptions"]

RESUME_HELP = ("a step checkpoint of this run (OUT/checkpoints/step_N) to go on from when the "
               "newest is damaged; later ones are moved to OUT/checkpoints/discarded/")


@dataclass
class RunOptions:
    """run: where it goes, how long, its seed, saving and held-out evaluation"""

    out: str = field(default="runs/run", metadata={"help": "run directory"})
    steps: int = field(default=200, metadata={"help": "optimizer steps"})
    seed: int = field(default=0, metadata={"help": "data and sampling seed"})
    save_every: int = field(default=25, metadata={"help": "checkpoint interval (steps)"})
    resume_from: str | None = field(default=None, metadata={"help": RESUME_HELP})
    eval_every: int = field(default=50, metadata={"help": "held-out greedy eval interval"})
    eval_levels: int = field(default=200, metadata={"help": "held-out levels per eval"})


@dataclass
class OptimOptions:
    """optimiser: AdamW and its learning-rate schedule"""

    batch: int = field(default=128, metadata={"help": "prompts per step"})
    lr: float = field(default=3e-4, metadata={"help": "learning rate"})
    warmup: int = field(default=10, metadata={"help": "warm-up steps"})
    schedule: str = field(default="constant", metadata={"help": "constant|cosine"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    clip: float = field(default=1.0, metadata={"help": "gradient-norm clip"})


@dataclass
class EstimatorOptions:
    """estimator: how the KL terms are computed (nca_interp.losses.Estimator)"""

    kl: str = field(default="full", metadata={
        "help": "KL estimator of the loss terms (nca_interp.losses.Estimator): full | topk | "
                "sampled", "check": "choice:full|topk|sampled"})
    kl_k: int = field(default=256, metadata={"help": "--kl topk: tokens in the support",
                                             "check": ">=1"})
    kl_support: str = field(default="p", metadata={
        "help": "--kl topk: whose top-k: p (the student's in OPD) or q (the teacher's)",
        "check": "choice:p|q"})
    kl_tail: str = field(default="renorm", metadata={
        "help": "--kl topk: renorm | bucket (the rest as one category) | none",
        "check": "choice:renorm|bucket|none"})
    kl_form: str = field(default="k1", metadata={
        "help": "--kl sampled: k1 (score-function gradient, unbiased) | k3 (verl's low-variance "
                "form; its OPD gradient is the forward KL's)", "check": "choice:k1|k3"})
    nca_kl: str = field(default="same", metadata={
        "help": "the NCA term's estimator: same (as --kl) or full", "check": "choice:same|full"})


@dataclass
class DeviceOptions:
    """device: threads, device and precision"""

    threads: int = field(default=2, metadata={"help": "torch threads"})
    device: str = field(default="auto", metadata={"help": "auto|cpu|cuda (GPU if there is one)"})
    precision: str = field(default="auto", metadata={"check": "choice:auto|fp32|bf16",
                                                     "help": PRECISION_HELP})
