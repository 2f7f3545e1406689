"""Who a run is: setting, method, seed, beta, estimator, step, read from its run config.

A distillation run records its method, seed and effective beta in `run_config.json`; the
pipeline names its folders `<setting>_<method>_s<seed>` and reports key their entries by that
name. `of_config` reads a run config; `of_path` a checkpoint folder (its run's config, or a
folder with none: a teacher, a fetched model, a user's checkpoint); `of_name` is the one reader
of a report key, for reports that do not carry an `identity` of their own; `of` takes either.
Nothing else in the package reads identity out of a name.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

METHODS = ("opd", "nca", "opdsized")  # opdsized: OPD retrained at NCA's update size
_NAME = re.compile(r"^(?P<setting>.+)_(?P<method>opdsized|opd|nca)(?P<round>\d*)_s(?P<seed>\d+)$")


@dataclass(frozen=True)
class RunId:
    name: str
    setting: str | None = None
    method: str | None = None  # None: not a student (a teacher, a base model, a random init)
    seed: int | None = None
    beta: float | None = None
    estimator: str | None = None
    step: int | None = None

    @property
    def student(self) -> bool:
        return self.method is not None

    def to_dict(self) -> dict:
        return asdict(self)


def of_name(name: str) -> RunId:
    """A report key `<setting>_<method>[round]_s<seed>` (anything else: not a student)."""
    m = _NAME.match(name)
    if not m:
        return RunId(name)
    return RunId(name, m["setting"], m["method"], int(m["seed"]))


def of_config(name: str, config: dict, step: int | None = None) -> RunId:
    """A distillation run's identity from its run config (`train.distill` records method,
    seed, beta_effective and kl); the setting is the folder name without its method and seed."""
    from_name = of_name(name)
    return RunId(name, from_name.setting, config.get("method"), config.get("seed"),
                 config.get("beta_effective", config.get("beta")), config.get("kl"), step)


def of_path(path: str | Path) -> RunId:
    """A checkpoint folder's identity: its run's config (the folder, or the run two levels
    up for `<run>/checkpoints/step_N`), else the name alone."""
    p = Path(path)
    step = int(p.name[5:]) if re.fullmatch(r"step_\d+", p.name) else None
    run = p.parent.parent if step is not None else p
    cfg = run / "run_config.json"
    if cfg.exists():
        config = json.loads(cfg.read_text())
        if config.get("method") in METHODS:
            return of_config(run.name, config, step)
    return RunId(run.name, step=step)


def of(name: str, entry: dict | None = None) -> RunId:
    """A report entry's identity: its own `identity` when it carries one, else its key's."""
    if entry and isinstance(entry.get("identity"), dict) and "name" in entry["identity"]:
        return RunId(**entry["identity"])
    return of_name(name)


def students(entries: dict, method: str | None = None) -> list[tuple[str, dict]]:
    """(key, entry) of every student of `method` (any method: None) in report `entries`."""
    return [(k, v) for k, v in entries.items()
            if (i := of(k, v if isinstance(v, dict) else None)).student
            and (method is None or i.method == method)]


def is_student(name: str, method: str | None = None) -> bool:
    """Whether report key `name` is an OPD or NCA student (of `method` when given; the
    size-matched OPD only when asked for by name)."""
    i = of_name(name)
    return i.method == method if method else i.method in ("opd", "nca")


def partner(name: str, entries: dict, method: str) -> tuple[str, dict] | None:
    """The entry of `method` with the same setting and seed as student `name` (None: absent)."""
    me = of_name(name)
    if not me.student:
        return None
    return next(((k, v) for k, v in entries.items()
                 if (i := of(k, v if isinstance(v, dict) else None)).method == method
                 and i.seed == me.seed and i.setting == me.setting), None)
