"""The training commands' configs (`SFTConfig`, `DistillConfig`) and the option groups they are
composed of (TRL-style: a command's config subclasses the groups it takes and adds its own
fields; a field whose default differs, such as SFT's learning rate, is declared again in the
command's config). Nothing here imports torch, so `python -m train.sft --help` and a bad flag
are answered before the command's heavy imports (`nca_interp.cli.parse_early`).

- `RunOptions`: where the run goes, its length, seed, saving and held-out evaluation;
- `OptimOptions`: AdamW and its learning-rate schedule;
- `EstimatorOptions`: how the KL terms are estimated (`nca_interp.losses.Estimator`);
- `DeviceOptions`: threads, device and precision.

`nca_interp.cli.parse_config` shows a config's own fields first, then each group under its
title (the first line of its docstring).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nca_interp.configs import PRECISION_HELP, TASK_OPTIONS_HELP
from nca_interp.errors import UsageError
from nca_interp.tasks import context_choices, task_choices
from nca_interp.tasks.base import names, spec

__all__ = ["OLD_TASK_FLAGS", "DeviceOptions", "DistillConfig", "EstimatorOptions",
           "OptimOptions", "RunOptions", "SFTConfig", "refuse_old_task_flags", "sft_tasks"]

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


@dataclass
class SFTConfig(RunOptions, OptimOptions, DeviceOptions):
    """What to teach (its own fields: task, data, model), then the run, optimiser and device
    groups (train/options.py), with SFT's own defaults for some of theirs."""

    # options --help leaves to --help-all (each task's fields, architecture details, optimiser)
    EXPERT = ("min_entities", "contexts", "p_no_context", "pack", "follow_ups", "p_detour",
              "n_heads", "d_mlp", "schedule", "weight_decay", "clip", "eval_every",
              "eval_levels", "precision", "resume_from", "lora_alpha", "lora_dropout")

    out: str = field(default="runs/sokoban_base", metadata={"help": "run directory"})
    task: str = field(default="sokoban", metadata={"help": lambda: sft_tasks()})
    task_options: list[str] | None = field(default=None, metadata={"help": TASK_OPTIONS_HELP + (
        "; e.g. dim_room=8x8, remap=LRUD (the remapped-keys variant: the teacher trains on a "
        "random permutation per level, stated by the `remap` context; the run records the "
        "fixed one distillation internalizes), kb=0 (sysprompt: the knowledge base "
        "distillation will use; the teacher reads a fresh one per question)")})
    min_entities: int | None = field(default=None, metadata={
        "help": "sysprompt curriculum: training KBs have min..n_entities entities"})
    contexts: list[str] | None = field(default=None, metadata={
        "help": "context kinds to train with (default: state,plan for games, system for QA)"})
    p_no_context: float = field(default=0.1, metadata={"help": "fraction without context"})
    pack: int = field(default=1, metadata={
        "help": "QA: questions per example about the same knowledge base (--batch counts "
                "questions); each answer is trained, follow-up questions are seen untrained"})
    follow_ups: str = field(default="open", metadata={
        "help": "QA --pack: follow-up questions without their options (open: `lake of K`, a "
                "third of the tokens; read KBs at 0.49 after 400 steps) or with them (full: "
                "0.19)"})
    p_detour: float = field(default=0.3, metadata={
        "help": "games: fraction whose response starts with 1-2 random moves (not trained on) "
                "followed by the optimal plan from there, so the teacher stays right off its "
                "own path"})
    steps: int = field(default=1500, metadata={"help": "optimizer steps"})
    batch: int = field(default=128, metadata={"help": "examples per step"})
    lr: float = field(default=2e-3, metadata={"help": "peak learning rate"})
    warmup: int = field(default=100, metadata={"help": "warm-up steps"})
    schedule: str = field(default="cosine", metadata={"help": "cosine|constant"})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay"})
    n_layers: int = field(default=4, metadata={"help": "model layers"})
    d_model: int = field(default=128, metadata={"help": "model width"})
    n_heads: int = field(default=4, metadata={"help": "attention heads"})
    d_mlp: int = field(default=384, metadata={"help": "MLP width"})
    arch: str = field(default="qwen3", metadata={"help": "qwen3|qwen2|llama"})
    init: str | None = field(default=None, metadata={
        "help": "start from this checkpoint's weights and architecture (recorded in place of "
                "--n-layers etc.) instead of a random init, e.g. a rule variant's teacher from "
                "the plain game's teacher; same tokenizer required"})
    seed: int = field(default=0, metadata={"help": "init and data seed"})
    lora_rank: int = field(default=0, metadata={"check": ">=0", "help": (
        "train only a LoRA adapter of this rank on every attention and MLP projection (0: full "
        "fine-tuning); saved merged, the adapter in adapter/; wants ~10x the --lr")})
    lora_alpha: float | None = field(default=None, metadata={"check": ">0", "help": (
        "LoRA scale numerator (the update is alpha/rank * B @ A); default 2 * --lora-rank")})
    lora_dropout: float = field(default=0.0, metadata={"check": "prob", "help": (
        "dropout on LoRA's input (above 0, a resumed run no longer equals an uninterrupted "
        "one: the dropout masks' random state is not saved)")})
    eval_every: int = field(default=250, metadata={"help": "held-out eval interval (steps)"})
    save_every: int = field(default=250, metadata={"help": "checkpoint interval (steps)"})


# train.sft's task flags before --task-options (older manifests record them): flag -> option
OLD_TASK_FLAGS = {"--dim-room": "dim_room", "--num-boxes": "num_boxes", "--remap": "remap",
                  "--size": "size", "--num-holes": "num_holes", "--kb": "kb",
                  "--n-entities": "n_entities", "--n-attributes": "n_attributes",
                  "--layout": "layout", "--word-len": "word_len"}


def sft_tasks() -> str:
    """The registered tasks train.sft can supervise (for --task's help and its refusal)."""
    return "|".join(n for n in names() if spec(n).task.teacher_sft)


def refuse_old_task_flags(argv: list[str]) -> None:
    """A command with a task flag from before --task-options gets the exact replacement."""
    found, rest = [], []
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag in OLD_TASK_FLAGS:
            value = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            found.append(f"{OLD_TASK_FLAGS[flag]}="
                         f"{value.replace(',', 'x') if flag == '--dim-room' else value}")
            rest.append(arg if eq else f"{arg} {value}")
    if found:
        raise UsageError(f"train.sft takes the task's settings as --task-options, like every "
                         f"command: pass --task-options {','.join(found)} in place of "
                         f"{' '.join(rest)}")


@dataclass
class DistillConfig(RunOptions, OptimOptions, EstimatorOptions, DeviceOptions):
    """What to distil (its own fields), then the run, optimiser, estimator and device groups
    (train/options.py)."""

    # options --help leaves to --help-all (optimiser, estimator details, devices, memory)
    EXPERT = ("schedule", "weight_decay", "clip", "temperature", "kl_k",
              "kl_support", "kl_tail", "kl_form", "nca_kl", "eval_every", "eval_levels",
              "teacher_device", "precision", "micro_batch", "grad_checkpointing", "role",
              "resume_from", "lens_every", "lens_items")

    student: str = field(default="runs/sokoban_base", metadata={"help": "initial checkpoint"})
    out: str = field(default="runs/sokoban_opd", metadata={"help": "run directory"})
    method: str = field(default="opd", metadata={"help": "opd|nca"})
    teacher: str | None = field(default=None, metadata={
        "help": "teacher checkpoint (same tokenizer); default: --student (self-distillation)"})
    beta: float = field(default=1.0, metadata={"help": "NCA weight (ignored for opd)"})
    context: str | None = field(default=None, metadata={
        "help": lambda: f"privileged context kind: {context_choices()}; default: the task's"})
    task: str | None = field(default=None, metadata={
        "help": lambda: f"{task_choices()}; default: the student's training task"})
    task_options: list[str] | None = field(default=None, metadata={"help": TASK_OPTIONS_HELP})
    temperature: float = field(default=1.0, metadata={
        "help": "rollout temperature (> 0); the loss uses the same tempered views"})
    teacher_device: str | None = field(default=None, metadata={
        "help": "device of the teacher (e.g. cuda:1); default: the student's"})
    micro_batch: int = field(default=0, metadata={
        "help": "prompts per forward/backward on each rank (0: the whole slice at once)"})
    grad_checkpointing: bool = field(default=False, metadata={
        "help": "recompute activations in backward (less memory, ~1/3 more compute)"})
    lens_every: int = field(default=0, metadata={
        "help": "every N steps (and the last) log the two-view lens's headline (lens_kl, "
                "lens_kl_control, lens_kl_floor, by third) to metrics.jsonl; 0: never",
        "check": ">=0"})
    lens_items: int = field(default=8, metadata={
        "help": "held-out items the --lens-every headline reads", "check": "levels"})
    role: str | None = field(default=None, metadata={
        "help": "what the run is in a study besides its method, recorded in its run config and "
                "read by every report as its method: opdsized (OPD at NCA's update size, "
                "nca_interp.paper.size_control)", "check": "choice:opdsized"})
