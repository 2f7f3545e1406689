"""The presets and published settings, read from one data file (`nca_interp/paper/settings.toml`).

A *preset* is how a task's teacher is made and the distillation defaults it uses (`python -m
nca_interp.paper.reproduce --task <preset>`). A *setting* is one published pipeline run: a preset,
the flags it ran with and its seeds; `figures/<setting>/` holds its outputs. A setting may be a
*variant* of another (an estimator, an NCA weight, a knowledge base) and may carry a
*size control* (`figures/<setting>_size/`, made by `nca_interp.paper.size_control`). Everything that
lists settings (the pipeline, claims, summary, sweep, referee, docs) reads them from here.

The file is validated when loaded: an unknown key, a value of the wrong type, a setting naming
a missing preset or variant is refused in one line that names the file and the entry.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from functools import cache
from pathlib import Path

import tomllib

from nca_interp.errors import UsageError

__all__ = ["Preset", "load"]

FILE = Path(__file__).with_name("settings.toml")
VARIANTS = ("estimator", "beta", "kb", "replicate")  # replicate: the recipe retrained


@dataclass(frozen=True)
class Preset:
    """How a task's teacher is made and its distillation defaults; a command-line flag of
    `nca_interp.paper.reproduce` overrides a default."""

    sft_args: tuple[str, ...] = ()  # train.sft flags of the teacher (task, room, model size)
    task: str = "sokoban"  # the task evaluated (what --task means to the analyses)
    # a registry model (nca_interp.fetch): the teacher as it is, or with `sft_args` the model
    # the teacher is fine-tuned from
    fetched: str | None = None
    teacher_init: str | None = None  # the teacher is fine-tuned from this preset's teacher
    teacher_steps: int = 1000
    teacher_contexts: tuple[str, ...] = ("state", "plan")  # the teacher is evaluated with
    context: str | None = None  # the context distilled (None: the task's default_context)
    task_options: tuple[str, ...] = ()  # KEY=VALUE task config (fetched teachers)
    distill_steps: int = 200
    batch: int = 128
    lr: float = 3e-4
    warmup: int = 10
    save_every: int = 25
    n_levels: int = 1000
    grad_batch: int = 2048
    grad_micro_batch: int = 128
    grad_parts: int = 8  # independent parts of the grad_align batch (noise-corrected angles)
    grad_seeds: int = 1  # runs of each method (first seeds) whose gradients are aligned
    patching: str | None = None  # None: run it; otherwise why it is not run for this preset
    patching_kw: tuple[tuple[str, object], ...] = ()  # PatchingConfig fields for this preset
    patching_base: bool = True  # also patch the teacher (the step-0 null of the students)
    # the trajectory over every checkpoint of every seed with the control context, and harm against
    # drift from it (nca_interp.paper.dose); otherwise every other checkpoint of the first seed
    dose: bool = False
    note: str = ""

    @property
    def fetched_as_is(self) -> bool:
        """The registry weights are the teacher (no SFT; no run config names its task)."""
        return self.fetched is not None and not self.sft_args


@dataclass(frozen=True)
class Setting:
    """One published pipeline run: a preset, the flags it ran with and its seeds."""

    preset: str
    flags: tuple[str, ...] = ()
    seeds: tuple[int, ...] = (0, 1, 2)
    analyses: bool = True
    sweep: str | None = None  # its row's description in the Sokoban sweep (None: not a row)
    variant_of: str | None = None  # the setting this one varies (same task; same teacher
    # and seeds, except a replicate, which retrains the recipe from scratch)
    variant: str | None = None  # what it varies: one of VARIANTS
    size_control: bool = False  # figures/<name>_size holds OPD retrained at NCA's update size

    def command(self, name: str) -> str:
        parts = ["python -m nca_interp.paper.reproduce --task", self.preset]
        if name != self.preset:
            parts += ["--name", name]
        parts += [*self.flags, "--seeds", ",".join(map(str, self.seeds))]
        if not self.analyses:
            parts += ["--analyses", "false"]
        return " ".join(parts)


@dataclass(frozen=True)
class Catalogue:
    presets: dict[str, Preset]
    settings: dict[str, Setting]
    sweep_rows: tuple[str, ...]  # the Sokoban sweep's rows, in table order
    pooled: dict[str, tuple[str, ...]]  # settings judged together (one claims table)
    depth_rows: tuple[str, ...] = ()  # the depth sweep's rows (presets), shallow first

    def variants(self, of: str, kind: str) -> tuple[str, ...]:
        """The settings varying `of` by `kind`, in file order."""
        return tuple(n for n, s in self.settings.items()
                     if s.variant_of == of and s.variant == kind)


def _typed(cls, entry: dict, where: str):
    """`cls(**entry)` after checking every key is a field and every value has its type."""
    known = {f.name: f for f in fields(cls)}
    for key, value in entry.items():
        if key not in known:
            raise UsageError(f"{FILE}: {where}: unknown key {key!r}; known: "
                             f"{', '.join(known)}")
        default = known[key].default
        if isinstance(default, tuple):  # TOML arrays (patching_kw: an inline table)
            typed = isinstance(value, dict if key == "patching_kw" else list)
        else:
            typed = isinstance(value, type(default)) or \
                (isinstance(default, float) and isinstance(value, int)
                 and not isinstance(value, bool))
        if default not in (None, MISSING) and not typed:
            raise UsageError(f"{FILE}: {where}: {key} = {value!r} should be a "
                             f"{type(default).__name__}")
    out = {}
    for key, value in entry.items():
        if key == "patching_kw":
            value = tuple(value.items())
        elif isinstance(value, list):
            value = tuple(value)
        out[key] = value
    missing = [f.name for f in known.values() if f.default is MISSING and f.name not in out]
    if missing:
        raise UsageError(f"{FILE}: {where}: {', '.join(missing)} missing")
    return cls(**out)


def parse(text: str) -> Catalogue:
    data = tomllib.loads(text)
    unknown = set(data) - {"presets", "settings", "sweep_rows", "depth_rows", "pooled"}
    if unknown:
        raise UsageError(f"{FILE}: unknown table(s) {', '.join(sorted(unknown))}")
    presets = {n: _typed(Preset, e, f"preset {n}") for n, e in data["presets"].items()}
    for n, p in presets.items():
        if p.fetched and p.teacher_init:
            raise UsageError(f"{FILE}: preset {n}: its teacher starts either from a fetched "
                             "model or from another preset's teacher (teacher_init), not both")
        if p.teacher_init is not None and p.teacher_init not in presets:
            raise UsageError(f"{FILE}: preset {n}: teacher_init {p.teacher_init!r} is not a "
                             "preset")
    settings = {n: _typed(Setting, e, f"setting {n}") for n, e in data["settings"].items()}
    for n, s in settings.items():
        if s.preset not in presets:
            raise UsageError(f"{FILE}: setting {n}: preset {s.preset!r} is not a preset")
        if (s.variant_of is None) != (s.variant is None) or \
                (s.variant is not None and s.variant not in VARIANTS):
            raise UsageError(f"{FILE}: setting {n}: a variant needs both variant_of and "
                             f"variant (one of {', '.join(VARIANTS)})")
        if s.variant_of is not None and s.variant_of not in settings:
            raise UsageError(f"{FILE}: setting {n}: variant_of {s.variant_of!r} is not a "
                             "setting")
    rows = tuple(data.get("sweep_rows", ()))
    pooled = {k: tuple(v) for k, v in data.get("pooled", {}).items()}
    for name in (*rows, *(m for v in pooled.values() for m in v)):
        if name not in settings:
            raise UsageError(f"{FILE}: {name!r} (sweep_rows / pooled) is not a setting")
    depth = tuple(data.get("depth_rows", ()))
    for name in depth:
        if name not in presets:
            raise UsageError(f"{FILE}: {name!r} (depth_rows) is not a preset")
    return Catalogue(presets, settings, rows, pooled, depth)


@cache
def load(path: Path = FILE) -> Catalogue:
    return parse(path.read_text())
