"""What the analyses read from run directories: the task a checkpoint was trained on, its
context kind, its teacher and its initial checkpoint. Shared plumbing, one floor below the
analyses (which never import each other for it)."""

from __future__ import annotations

import math
from pathlib import Path

from nca_interp.assets import resolve
from nca_interp.checkpoint import read_run_config
from nca_interp.tasks import Task, task_from_record


def task_for_checkpoints(paths: list[str], name: str | None = None,
                         fmt: str | None = None, options: list[str] | None = None) -> Task:
    """The task recorded in the first of `paths` whose run_config.json names one (a foreign
    checkpoint has none: then `name`, default sokoban, with that task's defaults), with
    KEY=VALUE `options` applied (e.g. `opcd`'s data files)."""
    records = [read_run_config(p).get("task") for p in paths]
    record = next((r for r in records if isinstance(r, dict)), None)
    return task_from_record(record, name, fmt, options)


def resolve_task_and_context(paths: list[str], task: str | None, context: str | None,
                             options: list[str] | None = None) -> tuple[Task, str]:
    runs = [read_run_config(p) for p in paths]
    found = task_for_checkpoints(paths, task, options=options)
    ctx = context or next((r["context"] for r in runs if r.get("context")), None) \
        or found.default_context
    return found, ctx


def teacher_of(path: str, override: str | None) -> str:
    run = read_run_config(path)
    t = override or resolve(run.get("teacher")) or resolve(run.get("student"))
    if not t:
        raise ValueError(f"{path} does not name its teacher in run_config.json; pass --teacher")
    return t


def initial_of(path: str) -> str | None:
    """The checkpoint a distilled run started from (its --student), if recorded."""
    return resolve(read_run_config(path).get("student"))


def with_initial_checkpoints(paths: list[str]) -> list[str]:
    """Add the checkpoint each distilled run started from (the base), once, in front."""
    seen = {str(Path(p).resolve()) for p in paths}
    bases = []
    for p in paths:
        init = initial_of(p)
        if init and Path(init).exists() and str(Path(init).resolve()) not in seen:
            seen.add(str(Path(init).resolve()))
            bases.append(init)
    return bases + list(paths)


def step_of(path: str) -> int | None:
    name = Path(path).name
    return int(name.split("_")[1]) if name.startswith("step_") else None


def lr_at(step: int, lr: float, warmup: int, total: int, schedule: str) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    if schedule == "cosine":
        frac = (step - warmup) / max(1, total - warmup)
        return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
    return lr
