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
from pathlib import Path
from typing import Any

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
           "merged_task_options", "names_code", "option_file", "refuse_recorded_code",
           "rejoin_commas", "task_choices", "task_from_record", "task_record"]


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


def option_file(value) -> Path | None:
    """The file a task option's text names (`~` expanded; `@FILE`, jsonl's `pattern=@FILE`,
    names FILE), or None: not a text, no file there, or a text no file name can be (a regex
    `pattern=` of 256 bytes or more, whose stat raised ENAMETOOLONG after every response was
    generated: the tenth probe's U-A)."""
    if not isinstance(value, str) or not value:
        return None
    value = value.removeprefix("@")
    if not value:
        return None
    try:
        return Path(value).expanduser() if Path(value).expanduser().is_file() else None
    except OSError:  # ENAMETOOLONG, EACCES on a folder on the way: no file it can name
        return None


def json_safe(d: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def parse_task_options(name: str, options: list[str] | None) -> dict:
    """`["kb=3", "word_len=3"]` or `["train=a.jsonl", "test=b.jsonl", "system_prompt=s.txt"]`
    into typed config values of task `name` (`none` is None).

    The command line splits `--task-options` at every comma, so a value's own comma arrives as
    two pieces; they are joined again when written `data=my\\,file.jsonl` (a piece ending in a
    backslash) or `data="my,file.jsonl"` (a piece with an unclosed double quote), or when the
    path they make together exists (`data=my,file.jsonl`, a file you have). A key given twice
    is refused (the last would win silently); layers of options, where a later one is meant to
    replace an earlier one's key, go through `merged_task_options` first."""
    declared = {f.name: f for f in fields(spec(name).config)}
    defaults = {k: f.default for k, f in declared.items()}
    out: dict[str, Any] = {}
    pieces = _rejoined(list(options or []))
    i, prev = 0, ""
    while i < len(pieces):
        opt = pieces[i]
        i += 1
        key, sep, value = opt.partition("=")
        if not sep or key not in defaults:
            if prev and isinstance(out[prev], str) and isinstance(defaults[prev], str):
                path, i = _rejoined_path(out[prev], pieces, i - 1)
                if path is not None:
                    out[prev] = path
                    continue
                raise UsageError(f"task option {opt!r}: expected KEY=VALUE with KEY one of "
                                 f"{sorted(defaults)} for {name}; if it is the rest of "
                                 f"{prev}={out[prev]!r}, write a comma inside a value as \\, "
                                 f"({prev}=a\\,b) or quote the value ('{prev}=\"a,b\"')")
            raise UsageError(f"task option {opt!r}: expected KEY=VALUE with KEY one of "
                             f"{sorted(defaults)} for {name}")
        if key in out:
            raise UsageError(f"task option {key} is given twice ({key}={out[key]!r} and "
                             f"then {opt}); give each option once")
        default, prev = defaults[key], key
        kind = _kind(declared[key])
        value = _unquoted(value)
        try:
            if value.lower() == "none":
                out[key] = None
            elif kind is bool:  # "maybe" read False without a word (the fourth probe)
                from nca_interp.cli import FALSE_WORDS, TRUE_WORDS

                if value.lower() not in TRUE_WORDS + FALSE_WORDS:
                    raise UsageError(f"task option {key}={value!r}: {key} takes true or false "
                                     f"(one of {', '.join(TRUE_WORDS + FALSE_WORDS)}) for "
                                     f"{name}")
                out[key] = value.lower() in TRUE_WORDS
            elif kind is float:
                out[key] = float(value)
            elif kind is int:
                out[key] = int(value)
            elif kind is tuple:
                out[key] = tuple(int(v) for v in value.split("x"))
            else:
                out[key] = value
        except ValueError:
            want = ("integers like 6x6" if kind is tuple else "a number" if kind is float
                    else "true or false (1/true/yes/on, 0/false/no/off)" if kind is bool
                    else "an integer")
            raise UsageError(f"task option {key}={value!r}: {key} takes {want} for {name} "
                             f"(default {default})") from None
    return out


def _kind(f) -> type:
    """What a task option's text is read as: its default's type, or for a field whose default
    is None (`kb`, `min_entities`) the type its annotation names."""
    if f.default is not None:
        return type(f.default)
    declared = str(f.type)
    return next((t for t in (bool, float, int, tuple) if declared.startswith(t.__name__)), str)


def merged_task_options(*layers: list[str] | tuple[str, ...] | None) -> list[str]:
    """Layers of KEY=VALUE pieces (a preset's, then a command's) as one list for
    `parse_task_options`, a later layer's key replacing every piece of an earlier layer's (a
    value's comma-split rest goes with its key). A key twice within one layer stays twice, to
    be refused."""
    out: list[tuple[str, str]] = []  # (key, piece)
    for layer in layers:
        tagged, key = [], ""
        for piece in layer or ():
            head, sep, _ = piece.partition("=")
            key = head if sep and head.isidentifier() else key
            tagged.append((key, piece))
        mine = {k for k, _ in tagged if k}
        out = [(k, p) for k, p in out if k not in mine] + tagged
    return [p for _, p in out]


def rejoin_commas(pieces: list[str]) -> list[str]:
    r"""Values as written before the command line split a list flag at commas (`\,` and
    double quotes keep a comma inside one, as `parse_task_options` reads them): for path lists
    such as param_delta's `--pair`."""
    return [_unquoted(p) for p in _rejoined(pieces)]


def _rejoined(pieces: list[str]) -> list[str]:
    """The options as written before the command line split them at commas: a piece ending in
    a backslash, or with an unclosed double quote, goes on into the next."""
    out: list[str] = []
    for piece in pieces:
        if out and (out[-1].endswith("\\") or out[-1].count('"') % 2):
            last = out.pop()
            piece = (last[:-1] if last.endswith("\\") else last) + "," + piece
        out.append(piece)
    return out


def _unquoted(value: str) -> str:
    r"""A value without its surrounding double quotes, its `\,` read as a comma."""
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value.replace("\\,", ",")


def _rejoined_path(head: str, pieces: list[str], i: int) -> tuple[str | None, int]:
    """`head` joined by commas with pieces i, i+1, ... up to the first join that names an
    existing file, and the index after it; (None, i) when none does."""
    for j in range(i, len(pieces)):
        path = ",".join([head, *pieces[i:j + 1]])
        if option_file(path) is not None:
            return path, j + 1
    return None, i


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
    given = parse_task_options(name, options)
    refuse_recorded_code(config, given, "the checkpoint's run config")
    config.update(given)
    return make_task(name, fmt or record.get("fmt", "compact"), record.get("plan_k", 3), **config)


def refuse_recorded_code(recorded: dict, given: dict, where: str) -> None:
    """A UsageError for the first option of `recorded` (typed task options read from a file:
    a run config, a manifest's recorded command, a report) that names code while `given`, the
    options this command or caller named, has no value for its key. `where` names the file."""
    for key, value in recorded.items():
        if key not in given and names_code(key, value):
            said = str(value).replace(",", "\\,")
            raise UsageError(
                f"{where} names the {key} {value!r}: code, which this package runs only when "
                "this command names it (a checkpoint, manifest or report is data, never code). "
                f"To run it, add --task-options {key}={said} (or name another {key})")


def names_code(key: str, value) -> bool:
    """Whether task option `key=value` names code to import and run (a `FILE.py:fn` or
    `module:fn` scorer), which only a command line or a caller may name, never a run config."""
    return key == "scorer" and isinstance(value, str) and ":" in value
