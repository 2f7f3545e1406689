"""The tasks: text games and QA with privileged context, each registered by its own file.

`make_task(name, ...)` builds any registered task; `REGISTRY` (nca_interp.tasks.base) holds
them, filled by importing every module of this package (a module registers its task with one
`register(TaskSpec(...))` call at its end). What a task is, the `Game` interface and how to add
one: `nca_interp.tasks.base`.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import asdict, fields

from nca_interp.errors import UsageError
from nca_interp.plugins import import_plugins
from nca_interp.tasks.base import (
    FORMATS,
    REGISTRY,
    ChatFormat,
    QATask,
    Scored,
    Task,
    TaskSpec,
    context_choices,
    names,
    register,
    rotated,
    shuffled_words,
    spec,
    task_choices,
)

for _module in pkgutil.iter_modules(__path__):  # each task's file registers it
    importlib.import_module(f"{__name__}.{_module.name}")

PLUGINS_ENV = "NCA_INTERP_TASKS"  # modules to import for their registrations, comma-separated


def discover() -> None:
    """Import the tasks registered outside this package: every module named by the
    `nca_interp.tasks` entry-point group of an installed package and by NCA_INTERP_TASKS (a
    script's own: `PYTHONPATH=docs/examples/task NCA_INTERP_TASKS=toy_task`). Each module's
    import registers its task (an imported module is not imported again)."""
    import_plugins("nca_interp.tasks", PLUGINS_ENV, "task")


discover()

__all__ = ["CONTEXT_CHOICES", "FORMATS", "PLUGINS_ENV", "REGISTRY", "TASKS", "TASK_CHOICES",
           "ChatFormat", "QATask", "Scored", "Task", "TaskSpec", "context_choices", "discover",
           "json_safe", "make_task", "parse_task_options", "register", "rotated", "shuffled_words",
           "task_choices", "task_from_record", "task_record"]


# read from the registry when asked, so a task registered after import is in them too
LAZY_NAMES = {"TASKS": names, "TASK_CHOICES": task_choices, "CONTEXT_CHOICES": context_choices}


def __getattr__(name: str):
    if name in LAZY_NAMES:
        return LAZY_NAMES[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_task(name: str, fmt: str = "compact", plan_k: int = 3, **config) -> Task:
    """`make_task("sokoban", dim_room=(8, 8))`, `make_task("frozenlake", size=3, num_holes=2)`,
    `make_task("sysprompt", kb=0)`, `make_task("opcd", "textarena", train=..., test=...,
    system_prompt=...)`."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}; choose one of {FORMATS}")
    entry = spec(name)
    return entry.task(name, entry.module, entry.config(**config), fmt, plan_k)


def task_record(task: Task) -> dict:
    """What a run config stores about its task; `task_from_record` reads it back."""
    return {"name": task.name, "fmt": task.fmt, "plan_k": task.plan_k,
            **json_safe(asdict(task.config))}


def json_safe(d: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def parse_task_options(name: str, options: list[str] | None) -> dict:
    """`["kb=3", "word_len=3"]` or `["train=a.jsonl", "test=b.jsonl", "system_prompt=s.txt"]`
    into typed config values of task `name` (`none` is None)."""
    defaults = {f.name: f.default for f in fields(spec(name).config)}
    out = {}
    for opt in options or []:
        key, sep, value = opt.partition("=")
        if not sep or key not in defaults:
            raise UsageError(f"task option {opt!r}: expected KEY=VALUE with KEY one of "
                             f"{sorted(defaults)} for {name}")
        default = defaults[key]
        try:
            if value.lower() == "none":
                out[key] = None
            elif isinstance(default, bool):
                out[key] = value.lower() in ("1", "true", "yes")
            elif isinstance(default, float):
                out[key] = float(value)
            elif isinstance(default, int) or key == "kb":
                out[key] = int(value)
            elif isinstance(default, tuple):
                out[key] = tuple(int(v) for v in value.split("x"))
            else:
                out[key] = value
        except ValueError:
            want = ("integers like 6x6" if isinstance(default, tuple) else
                    "a number" if isinstance(default, float) else "an integer")
            raise UsageError(f"task option {key}={value!r}: {key} takes {want} for {name} "
                             f"(default {default})") from None
    return out


def task_from_record(record: dict | None, name: str | None = None,
                     fmt: str | None = None, options: list[str] | None = None) -> Task:
    """The task a run was trained on. `name` overrides it (a different task then starts from
    that task's defaults); `fmt` overrides the rendering; `options` (KEY=VALUE) override
    config fields, e.g. the data files of `opcd`."""
    record = record if isinstance(record, dict) else {}
    name = name or record.get("name") or "sokoban"
    if record.get("name") != name:
        record = {}
    known = {f.name for f in fields(spec(name).config)}
    config = {k: tuple(v) if isinstance(v, list) else v for k, v in record.items() if k in known}
    if name == "sysprompt" and record and "layout" not in record:
        config["layout"] = "table"  # runs recorded before layouts existed used the table
    config.update(parse_task_options(name, options))
    return make_task(name, fmt or record.get("fmt", "compact"), record.get("plan_k", 3), **config)
