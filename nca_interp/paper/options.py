"""The pipeline's config (`python -m nca_interp.paper.reproduce`'s flags), its presets and
settings (nca_interp/paper/settings.toml) and the steps `--keep` may name.

Nothing here imports torch, so `reproduce --help` and a bad flag are answered before the
pipeline's heavy imports (`nca_interp.cli.parse_early`); `nca_interp.paper.reproduce` re-exports
every name.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from nca_interp import analysis
from nca_interp.paper import require_clone
from nca_interp.paper.layout import OWN_STEPS
from nca_interp.paper.settings import load

require_clone()  # before the clone's train/ is imported: one line elsewhere

from train.options import DistillConfig  # noqa: E402 - the line above says why

__all__ = ["STEPS", "ReproduceConfig", "keepable", "planned", "presets", "settings"]


def presets() -> dict:
    """The presets of nca_interp/paper/settings.toml, parsed when first asked (never at
    import)."""
    return load().presets


def settings() -> dict:
    """The published settings of nca_interp/paper/settings.toml, parsed when first asked."""
    return load().settings


# the steps after training, in order (each analysis the registry plans runs within `analyses`)
STEPS = ("context_return", "over_training", "analyses")


def planned() -> tuple[str, ...]:
    """The registered analyses the `analyses` step runs: every one without a step of its own
    (`OWN_STEPS`), each by its plan (`reproduce.plan_of`)."""
    return tuple(s.name for s in analysis.specs() if s.name not in OWN_STEPS)


def keepable() -> tuple[str, ...]:
    """What --keep may name: the steps after training, and each analysis within `analyses`."""
    return (*STEPS, *planned())


# The distillation flags a setting passes through unchanged (their help and checks are
# train.distill's); only values other than train.distill's defaults reach its command line.
_DISTILL = {f.name: f.metadata for f in fields(DistillConfig)}


@dataclass
class ReproduceConfig:
    # options --help leaves to --help-all (estimator details, analysis sizes, folders)
    EXPERT = ("student_from", "kl_k", "kl_support", "kl_tail", "kl_form", "nca_kl", "grad_batch",
              "grad_seeds", "grad_every", "trajectory_every", "runs", "figures", "keep",
              "teacher_only", "publish")

    task: str = field(default="sokoban", metadata={
        "help": lambda: "a preset: " + ", ".join(presets()) + " (settings.toml)"})
    name: str | None = field(default=None, metadata={
        "help": "setting name: students go to RUNS/NAME_<method>_s<seed>, figures to "
                "FIGURES/NAME (default: the task); a task's settings share RUNS/TASK_base"})
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2], metadata={
        "help": "distillation seeds (the teacher is shared)"})
    student_from: str | None = field(default=None, metadata={
        "help": "cross-model distillation: students start from RUNS/<this task>_base (train it "
                "first with its own pipeline) and learn from this task's teacher"})
    methods: list[str] = field(default_factory=lambda: ["opd", "nca"], metadata={
        "help": "distillation methods to train (opd, nca)", "check": "choice:opd|nca"})
    analyses: bool = field(default=True, metadata={
        "help": "false: stop after the context-return evaluation and the trajectory (a sweep "
                "row); true: every analysis and figure"})
    context: str | None = field(default=None, metadata={
        "help": "context kind to distil; default: the preset's (settings.toml), else the "
                "task's, as for train.distill (plan for games)"})
    teacher_steps: int | None = field(default=None, metadata={
        "help": "teacher SFT steps (default: the preset's)"})
    distill_steps: int | None = field(default=None, metadata={
        "help": "OPD/NCA steps (default: the preset's; 200 for the games)"})
    batch: int | None = field(default=None, metadata={
        "help": "OPD/NCA prompts per step (default: the preset's; 128 for the games)"})
    lr: float | None = field(default=None, metadata={
        "help": "OPD/NCA learning rate (default: the preset's; 3e-4 for the games)"})
    beta: float = field(default=1.0, metadata={"help": "NCA weight"})
    task_options: list[str] | None = field(default=None, metadata={
        "help": "KEY=VALUE task config for the students and every analysis, after the "
                "preset's (e.g. kb=1: sysprompt students internalize another knowledge base "
                "from the same teacher)"})
    kl: str = field(default="full", metadata=_DISTILL["kl"])
    kl_k: int = field(default=256, metadata=_DISTILL["kl_k"])
    kl_support: str = field(default="p", metadata=_DISTILL["kl_support"])
    kl_tail: str = field(default="renorm", metadata=_DISTILL["kl_tail"])
    kl_form: str = field(default="k1", metadata=_DISTILL["kl_form"])
    nca_kl: str = field(default="same", metadata=_DISTILL["nca_kl"])
    save_every: int | None = field(default=None, metadata={
        "help": "distillation checkpoint interval (default: the preset's)"})
    n_levels: int | None = field(default=None, metadata={
        "help": "held-out levels for evaluation (default: the preset's)"})
    grad_batch: int | None = field(default=None, metadata={
        "help": "grad_align prompts per checkpoint (two halves: the noise floor)",
        "check": ">=1"})
    grad_seeds: int | None = field(default=None, metadata={
        "help": "grad_align: runs of each method (the first seeds) whose gradients are aligned "
                "(default: the preset's, at most the seeds given)", "check": ">=1"})
    grad_every: int = field(default=1, metadata={
        "help": "grad_align: every k-th saved checkpoint, counted back from the final one "
                "(which is always aligned)", "check": ">=1"})
    trajectory_every: int | None = field(default=None, metadata={
        "help": "trajectory stage: every k-th saved checkpoint (default: 1 with --dose, "
                "else 2)", "check": ">=1"})
    dose: bool | None = field(default=None, metadata={
        "help": "harm against drift: the trajectory over every seed with the control "
                "context, then its dose page (default: the preset's)"})
    quick: bool = field(default=False, metadata={
        "help": "one seed, 40 distill steps, 300 levels, into RUNS/figures/NAME_quick"})
    runs: str = field(default="runs", metadata={
        "help": "where run directories go; the default runs/ is made a link to "
                "$NCA_INTERP_RUNS (default ~/.cache/nca_interp/runs), outside the work tree"})
    figures: str = field(default="figures", metadata={
        "help": "where figures go (the repository's figures/ holds published settings: a "
                "command other than a setting's goes to RUNS/figures/ instead, unless "
                "--publish)"})
    png: bool = field(default=False, metadata={"help": "also write PNGs (needs kaleido)"})
    threads: int = field(default=2, metadata={"help": "torch threads"})
    keep: list[str] | None = field(default=None, metadata={
        "help": lambda: "steps whose outputs stay as they are although checkpoints changed "
                        "(students retrained and shown identical): context_return, "
                        "over_training, analyses, or one analysis (" + ", ".join(planned())
                        + "); only the students the other steps read are trained",
        "check": lambda: "choice:" + "|".join(keepable())})
    publish: bool = field(default=False, metadata={
        "help": "replace a published setting's files (figures/NAME) with a run whose command "
                "differs from the setting's (other seeds, --quick, other steps); without it "
                "such a run goes to RUNS/figures/NAME_<tag>, its students to RUNS/NAME_<tag>_* "
                "and a teacher of other --teacher-steps to RUNS/TASK_base_<tag> (tag: quick, or "
                "custom_ and a hash of the differing flags)"})
    teacher_only: bool = field(default=False, metadata={
        "help": "stop after the teacher and its per-context evaluation"})
    jobs: int = field(default=2, metadata={
        "help": "distillation runs in parallel, threads split between them (on 2 cores two "
                "1-thread runs beat one 2-thread run)"})
