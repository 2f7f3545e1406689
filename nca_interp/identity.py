"""Who a run is: setting, method, seed, beta, estimator, step, read from its run config.

A distillation run records its method, seed, effective beta and estimator in
`run_config.json` (a size-controlled OPD run also its `role`, `opdsized`); `of_config` reads
one, `of_path` a checkpoint folder (its run's config, or a folder with none: a teacher, a
fetched model, a user's checkpoint: not a student). Every report carries the identity of each
entry it measured (`runs`, written by `analysis.make_report` through `of_path`); readers take
it from there with `roster`, `students`, `others` and `partner`. `legacy_of_name` reads a
pipeline folder name (`<setting>_<method>[round]_s<seed>`) and serves only
`reports.upgrade`, for report files written before reports carried `runs`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from nca_interp.errors import UsageError

__all__ = ["RunId", "by_name", "legacy_of_name", "of_path", "others", "partner", "roster",
           "students"]

METHODS = ("opd", "nca", "opdsized")  # opdsized: OPD retrained at NCA's update size
ROLES = ("opdsized",)  # what a run may be besides its loss's method (train.distill --role)
_LEGACY_NAME = re.compile(
    r"^(?P<setting>.+)_(?P<method>opdsized|opd|nca)(?P<round>\d*)_s(?P<seed>\d+)$")


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

    def of_method(self, method: str | None = None) -> bool:
        """An OPD or NCA student (of `method` when given; the size-matched OPD only when asked
        for by name)."""
        return self.method == method if method else self.method in ("opd", "nca")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RunId:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


def legacy_of_name(name: str) -> RunId:
    """A pipeline folder name `<setting>_<method>[round]_s<seed>` (anything else: not a
    student); only for report files without `runs` (`reports.upgrade`)."""
    m = _LEGACY_NAME.match(name)
    if not m:
        return RunId(name)
    return RunId(name, m["setting"], m["method"], int(m["seed"]))


def of_config(name: str, config: dict, step: int | None = None) -> RunId:
    """A distillation run's identity from its run config (`train.distill` records method,
    role, seed, beta_effective and kl); the setting is the folder name less the
    `_<method>_s<seed>` the pipeline appends (None for a folder named otherwise)."""
    method = config.get("role") or config.get("method")
    seed, setting = config.get("seed"), None
    if seed is not None and name.endswith(f"_s{seed}"):
        head = name[: -len(f"_s{seed}")]
        for m in dict.fromkeys((method, config.get("method"))):
            stem = head.rstrip("0123456789") if m in ROLES else head  # a size-control round
            if m and stem.endswith(f"_{m}"):
                setting = stem[: -len(m) - 1]
                break
    return RunId(name, setting, method, seed,
                 config.get("beta_effective", config.get("beta")), config.get("kl"), step)


def of_path(path: str | Path) -> RunId:
    """A checkpoint folder's identity: its run's config (the folder, or the run two levels
    up for `<run>/checkpoints/step_N`), else the name alone (not a student)."""
    p = Path(path)
    step = int(p.name[5:]) if re.fullmatch(r"step_\d+", p.name) else None
    run = p.parent.parent if step is not None else p
    cfg = run / "run_config.json"
    if cfg.exists():
        from nca_interp.fsio import read_json

        config = read_json(cfg, "run config")
        if config.get("method") in METHODS:
            return of_config(run.name, config, step)
    return RunId(run.name, step=step)


def roster(report: Mapping) -> dict[str, RunId]:
    """Each results key's identity as the report records it (`runs`); where an entry carries
    an `identity` of its own (a trajectory's, read from the same run config), each value it
    records wins (so its beta fills a `runs` entry written without one)."""
    if "runs" not in report:
        raise UsageError("a report without `runs`: read report files with "
                         "nca_interp.analysis.load")
    out = {}
    for key, entry in report["results"].items():
        d = dict(report["runs"].get(key) or {"name": key})
        own = entry.get("identity") if isinstance(entry, Mapping) else None
        if isinstance(own, Mapping):
            d.update({k: v for k, v in own.items() if v is not None})
        d.setdefault("name", key)
        out[key] = RunId.from_dict(d)
    return out


def by_name(report: Mapping) -> dict[str, RunId]:
    """The report's identities keyed by run folder name (param_delta's pairs are)."""
    return {rid.name: rid for rid in roster(report).values()}


def students(report: Mapping, method: str | None = None) -> list[tuple[str, Any]]:
    """(key, entry) of every OPD/NCA student (of `method` when given) in the report."""
    who = roster(report)
    return [(k, v) for k, v in report["results"].items() if who[k].of_method(method)]


def others(report: Mapping) -> list[tuple[str, Any]]:
    """(key, entry) of every entry that is no student: teachers, base models, random inits."""
    who = roster(report)
    return [(k, v) for k, v in report["results"].items() if not who[k].student]


def partner(report: Mapping, key: str, method: str) -> tuple[str, Any] | None:
    """The entry of `method` with the same setting and seed as student `key` (None: absent)."""
    who = roster(report)
    me = who[key]
    if not me.student:
        return None
    return next(((k, v) for k, v in report["results"].items()
                 if who[k].method == method and who[k].seed == me.seed
                 and who[k].setting == me.setting), None)
