"""Each analysis command's config dataclass: its flags, their help and their checks.

This module imports no torch (only `nca_interp.cli` and the task registry), so a command parses
its command line here before its heavy imports: `python -m nca_interp.layer_sim --help` and a
bad flag are answered at once (`cli.parse_early`). Each command module re-exports its config
(`nca_interp.layer_sim.LayerSimConfig` is this module's); `ANALYSIS` names the registered
analysis a config belongs to (`analysis.make_report` reads it, since the class is not defined
in its analysis's module).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nca_interp.tasks import context_choices, task_choices

__all__ = ["PRECISION_HELP", "TASK_OPTIONS_HELP", "EvalConfig", "GradAlignConfig",
           "LayerSimConfig", "LensConfig", "ParamDeltaConfig", "PatchingConfig",
           "TrajectoryConfig"]

TASK_OPTIONS_HELP = ("task config overrides KEY=VALUE,... e.g. opcd's "
                     "train=a.jsonl,test=b.jsonl,system_prompt=s.txt,kind=mcq or sysprompt's "
                     "kb=1; a comma inside a value: \\, or \"quoted\"")
PRECISION_HELP = ("auto|fp32|bf16 (auto: bf16 on a GPU and on a CPU with native bf16, AVX512-BF16 "
                  "or AMX, fp32 elsewhere: bench/results/precision_*.txt; training and evaluate "
                  "autocast over fp32 weights, analyses that need no optimiser hold the weights "
                  "in bf16)")


@dataclass
class EvalConfig:
    ANALYSIS = "evaluate"

    ckpt: list[str] = field(default_factory=list, metadata={
        "help": "checkpoint folders (several: compared side by side on the same levels); "
                "default: the embedded Sokoban teacher"})
    task: str | None = field(default=None, metadata={
        "help": lambda: f"{task_choices()}; default: from the first checkpoint's run "
                "config"})
    task_options: list[str] | None = field(default=None, metadata={"help": TASK_OPTIONS_HELP})
    context: str | None = field(default=None, metadata={
        "help": lambda: f"{context_choices()}; default: the one the first checkpoint's run was "
                "trained with, else the task's"})
    fmt: str | None = field(default=None, metadata={"help": "compact|textarena"})
    n_levels: int = field(default=1000, metadata={"help": "held-out levels (fixed by --seed)"})
    seed: int = field(default=0, metadata={"help": "held-out set and sampling seed"})
    temperature: float = field(default=0.0, metadata={"help": "0 = greedy",
                                                      "check": "temperature_or_greedy"})
    threads: int = field(default=2, metadata={"help": "torch threads"})
    device: str = field(default="auto", metadata={"help": "auto|cpu|cuda"})
    precision: str = field(default="auto", metadata={"check": "choice:auto|fp32|bf16",
        "help": PRECISION_HELP})
    control: bool = field(default=False, metadata={
        "help": "also play every item with a control context of the same form that is wrong "
                "for it (another level's plan or state, a knowledge base with its values "
                "rotated across entities; own data: your own c', a \"control\" field or "
                "control_file=): accuracy with it, its harm, and reads_c = correct_c - "
                "correct_c' (0: blind to what c says)"})
    out: str | None = field(default=None, metadata={
        "help": "write OUT.json and the figure OUT.html (OUT may end in .json)"})
    png: bool = field(default=False, metadata={"help": "also write OUT.png (needs kaleido)"})

@dataclass
class TrajectoryConfig:
    ANALYSIS = "trajectory"

    runs: list[str] = field(default_factory=list, metadata={
        "help": "distillation run directories (each: run_config.json and checkpoints/step_*)"})
    teacher: str | None = field(default=None, metadata={
        "help": "teacher for the KLs (default: each run's own)"})
    context: str | None = field(default=None, metadata={
        "help": lambda: f"{context_choices()}; default: the one each run distilled"})
    n_levels: int = field(default=500, metadata={"help": "held-out levels for win rates",
                                                 "check": ">=1"})
    drift_levels: int = field(default=256, metadata={"help": "held-out prompts for the KLs",
                                                     "check": "levels"})
    every: int = field(default=1, metadata={"help": "use every k-th saved checkpoint (the last "
                                                    "always)", "check": ">=1"})
    control: bool = field(default=False, metadata={
        "help": "also play every checkpoint with the control context c' (reads_c per row)"})
    seed: int = field(default=0, metadata={"help": "held-out set and sampling seed"})
    threads: int = field(default=2, metadata={"help": "torch threads"})
    out: str | None = field(default=None, metadata={"help": "OUT.json and OUT.html"})
    png: bool = field(default=False, metadata={"help": "also write OUT.png (needs kaleido)"})

@dataclass
class LayerSimConfig:
    ANALYSIS = "layer_sim"

    ckpt: list[str] = field(default_factory=list, metadata={
        "help": "checkpoint folders; default: the embedded Sokoban base, OPD and NCA"})
    task: str | None = field(default=None, metadata={"help": "default: from the run config"})
    task_options: list[str] | None = field(default=None, metadata={"help": TASK_OPTIONS_HELP})
    context: str | None = field(default=None, metadata={
        "help": lambda: f"{context_choices()}; default: the context the checkpoints were "
                        "distilled with"})
    n_levels: int = field(default=200, metadata={"help": "held-out levels"})
    seed: int = field(default=0, metadata={"help": "held-out set seed"})
    baselines: bool = field(default=True, metadata={"help": "add the random-init baseline"})
    out: str = field(default="runs/layer_sim_demo/layer_sim",
                     metadata={"help": "output stem (.json/.html)"})
    png: bool = field(default=False, metadata={"help": "also write a PNG (needs kaleido)"})
    threads: int = field(default=2, metadata={"help": "torch threads"})
    device: str = field(default="auto", metadata={"help": "auto|cpu|cuda for the model passes"})
    batch: int = field(default=100, metadata={"help": "levels per hooked pass"})
    at: str = field(default="response", metadata={
        "help": "response (y's positions) | generating (the positions that produce y) | prompt "
                "(x's tokens, which no loss touches)"})
    beside: str | None = field(default=None, metadata={
        "help": "a layer_sim report (.json) to place the checkpoints beside: only they and the "
                "baselines are computed, on the report's items and settings; its first "
                "checkpoint is recomputed and must agree before its other entries are carried "
                "into the new report unchanged"})
    responses: str = field(default="reference", metadata={
        "help": "what every model (baselines included) is teacher-forced on: reference (the "
                "task's answer: solver plan / correct option) | base (the first checkpoint's "
                "greedy response) | own (each model its own greedy response)"})

@dataclass
class GradAlignConfig:
    ANALYSIS = "grad_align"

    ckpt: list[str] = field(default_factory=list, metadata={
        "help": "student checkpoints (e.g. a run's checkpoints/step_*); default: embedded OPD"})
    teacher: str | None = field(default=None, metadata={
        "help": "teacher checkpoint; default: the run's teacher/initial student"})
    task: str | None = field(default=None, metadata={"help": "default: from the run config"})
    task_options: list[str] | None = field(default=None, metadata={"help": TASK_OPTIONS_HELP})
    context: str | None = field(default=None, metadata={
        "help": lambda: f"{context_choices()}; default: the run's context"})
    batch: int = field(default=2048, metadata={
        "help": "on-policy prompts, split into two independent halves (noise floor)",
        "check": "even>=4"})
    micro_batch: int = field(default=128, metadata={"help": "prompts per forward/backward",
                                                    "check": ">=1"})
    parts: int = field(default=8, metadata={
        "help": "independent parts the batch is split into (each a group of micro-batches): "
                "2 gives the two halves alone; 4 or more adds the noise-corrected cosine with "
                "its jackknife interval, the noise scale and the positive control",
        "check": "even>=2"})
    temperature: float = field(default=1.0, metadata={"help": "rollout (and loss) temperature"})
    seed: int = field(default=0, metadata={"help": "levels and sampling seed"})
    device: str = field(default="auto", metadata={"help": "auto|cpu|cuda"})
    precision: str = field(default="auto", metadata={"check": "choice:auto|fp32|bf16",
                                                      "help": PRECISION_HELP})
    out: str = field(default="runs/grad_align_demo/grad_align", metadata={"help": "output stem"})
    png: bool = field(default=False, metadata={"help": "also write PNGs (needs kaleido)"})
    threads: int = field(default=2, metadata={"help": "torch threads"})

@dataclass
class ParamDeltaConfig:
    ANALYSIS = "param_delta"

    ckpt: list[str] = field(default_factory=list, metadata={
        "help": "checkpoints to compare (default: embedded Sokoban OPD and NCA)"})
    init: str | None = field(default=None, metadata={
        "help": "common initial checkpoint; default: the runs' --student"})
    pair: list[str] = field(default_factory=list, metadata={
        "help": "two of the checkpoints to compare (A,B: specific delta = dB - dA); "
                "default: the first two"})
    control: list[str] = field(default_factory=list, metadata={
        "help": "two checkpoints of one method and different seeds (C,D): cos(dC, dD) is "
                "printed beside every cos(dA, dB)"})
    rows: str = field(default="all", metadata={
        "help": "all | task (embed / lm_head: only the rows of tokens the task uses)"})
    task: str | None = field(default=None, metadata={"help": "for --rows task; default: "
                                                            "from the run config"})
    task_options: list[str] | None = field(default=None, metadata={"help": "for --rows task"})
    out: str = field(default="runs/param_delta_demo/param_delta", metadata={"help": "output stem"})
    lr: list[float] | float | None = field(default=None, metadata={
        "help": "peak learning rate of checkpoints not trained here (their run config records "
                "none), for the Adam-normalised view, one for all or one per checkpoint; "
                "with --steps", "check": ">0"})
    steps: list[int] | int | None = field(default=None, metadata={
        "help": "optimizer steps of those checkpoints (with --lr): one count for all, or one "
                "per checkpoint in the order given (5,10,10); a checkpoint that records its "
                "own (trainer state, published step) is counted by that", "check": ">=1"})
    warmup: int = field(default=0, metadata={"help": "their warm-up steps (with --lr)"})
    schedule: str = field(default="constant", metadata={"help": "their schedule: constant|cosine"})
    png: bool = field(default=False, metadata={"help": "also write PNGs (needs kaleido)"})
    threads: int = field(default=2, metadata={"help": "torch threads"})

@dataclass
class LensConfig:
    ANALYSIS = "lens"

    ckpt: list[str] = field(default_factory=list, metadata={
        "help": "checkpoint folders (a distilled run's start is added in front); default: the "
                "embedded Sokoban base, OPD and NCA"})
    task: str | None = field(default=None, metadata={"help": "default: from the run config"})
    task_options: list[str] | None = field(default=None, metadata={"help": TASK_OPTIONS_HELP})
    context: str | None = field(default=None, metadata={
        "help": lambda: f"{context_choices()}; default: the context the checkpoints were "
                        "distilled with"})
    n_levels: int = field(default=32, metadata={"help": "held-out items", "check": "levels"})
    seed: int = field(default=0, metadata={"help": "held-out set and sampling seed"})
    temperature: float = field(default=1.0, metadata={
        "help": "of the samples y ~ g(.|x) the per-token effect is read on (0: greedy)",
        "check": "temperature_or_greedy"})
    layers: bool = field(default=True, metadata={"help": "the logit lens, layer by layer"})
    max_cases: int = field(default=16, metadata={
        "help": "harm cases (and help cases) whose forks are swapped", "check": ">=0"})
    max_forks: int = field(default=4, metadata={
        "help": "forks swapped in turn before a case counts as not restored", "check": ">0"})
    null_swaps: int = field(default=4, metadata={
        "help": "the swap test's null: random non-fork tokens of each case swapped for the "
                "writer's own runner-up, each continued (0: none)", "check": ">=0"})
    batch: int = field(default=16, metadata={"help": "items per forward pass", "check": "batch"})
    over_training: list[str] | None = field(default=None, metadata={
        "help": "each folder named is a distillation run, read at these of its steps "
                "(0: the model it started from; mid; final; all; numbers), e.g. 0,mid,final"})
    out: str = field(default="runs/lens_demo/lens", metadata={"help": "output stem (.json/.html)"})
    png: bool = field(default=False, metadata={"help": "also write PNGs (needs kaleido)"})
    threads: int = field(default=2, metadata={"help": "torch threads"})
    device: str = field(default="auto", metadata={"help": "auto|cpu|cuda"})

# its choices are spelled out, not read from the patching modules (they import torch):
# tests/unit/test_cli_fast.py checks them against cases.KINDS, interventions.SCOPES, ...
@dataclass
class PatchingConfig:
    ANALYSIS = "patching"

    # options --help leaves to --help-all (the attribution path's sizes)
    EXPERT = ("top_k", "n_check", "ablate", "n_random_generate", "null_stop")

    ckpt: list[str] = field(default_factory=list, metadata={
        "help": "checkpoint folders, each patched on its own cases; default: the embedded "
                "Sokoban OPD"})
    task: str | None = field(default=None, metadata={"help": "default: from the run config"})
    task_options: list[str] | None = field(default=None, metadata={"help": TASK_OPTIONS_HELP})
    context: str | None = field(default=None, metadata={
        "help": lambda: f"{context_choices()}; default: the run's context"})
    kind: str = field(default="harm", metadata={
        "help": "cases patched: harm (right without c, wrong with it) or help (wrong without "
                "c, right with it: the context's effect on correct answers)",
        "check": "choice:harm|help"})
    scope: str = field(default="full", metadata={
        "help": "full: every sweep; groups: residual stream by position group and MLPs only "
                "(no layer x position map, no per-head output patching: for large models)",
        "check": "choice:full|groups"})
    n_levels: int = field(default=1000, metadata={"help": "held-out levels searched for cases"})
    max_cases: int = field(default=64, metadata={"help": "cases (and controls) patched",
                                                 "check": ">=1"})
    ablate: str = field(default="prefix", metadata={
        "help": "what removing a head's attention to the context removes: prefix (c and what "
                "joins it to x: removing it from every head gives the no-context run where x "
                "is a suffix of [c, x]) or context (c's own tokens only)",
        "check": "choice:prefix|context"})
    ks: list[int] = field(default_factory=lambda: [1, 2, 4], metadata={
        "help": "numbers of heads whose context reading is removed together (all heads are "
                "always added)", "check": ">=1"})
    n_random: int = field(default=100, metadata={
        "help": "random-head draws per k for the teacher-forced null", "check": "draws"})
    n_random_generate: int = field(default=100, metadata={
        "help": "random-head draws per k for the answer-outcome null (a greedy generation "
                "each)", "check": "draws"})
    null_stop: int = field(default=10, metadata={
        "help": "end a k's random-head draws once this many draws of either null reach the "
                "observed value (Besag and Clifford's sequential p = stop / draws: it stops "
                "only where p is large, so no verdict at p <= 0.05 changes); 0 draws them all",
        "check": ">=0"})
    method: str = field(default="attribution", metadata={
        "help": "attribution: rank every head, head reading of c and residual position by "
                "attribution patching (two forwards and one backward a direction), then patch "
                "exactly only the --top-k candidates and --n-check others at random; exact: "
                "patch every node (one forward each). The residual groups and MLPs are always "
                "patched exactly, and every table and verdict reads exact effects only",
        "check": "choice:attribution|exact"})
    top_k: int = field(default=8, metadata={
        "help": "with --method attribution: nodes of each family patched exactly as "
                "attribution ranks them (per half of the cases for the head table; at least "
                "the largest --ks below all heads)", "check": ">=1"})
    n_check: int = field(default=8, metadata={
        "help": "with --method attribution: nodes beyond the candidates patched exactly at "
                "random, so a node attribution ranked too low shows", "check": ">=0"})
    seed: int = field(default=0, metadata={"help": "held-out set, case halves and random heads"})
    out: str = field(default="runs/patching_demo/patching", metadata={"help": "output stem"})
    png: bool = field(default=False, metadata={"help": "also write PNGs (needs kaleido)"})
    threads: int = field(default=2, metadata={"help": "torch threads"})
