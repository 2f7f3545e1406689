"""The contract every analysis keeps, and the one writer of its files.

Each of the six analyses (`evaluate`, `trajectory`, `layer_sim`, `grad_align`, `param_delta`,
`patching`) is a module with

- a config dataclass (`CONFIG`), which its command line parses into;
- `run(config) -> Report` (or `run(**fields)`, which builds the config): the computation, no
  file written;
- `show(report)`: the tables it prints;
- `figures(report) -> {suffix: figure}`: suffix "" is written to `OUT.html`, any other to
  `OUT_<suffix>.html`;
- `execute(config)`: `analysis.execute` on the module: checks, run, show, `write`.

A report is a dict whose first keys are always `REPORT_KEYS`: the config it ran with, the task,
the context kind, the identity of every run it measured (`identity.RunId` fields plus the
folder, by the same keys as `results`), and `results`, keyed by checkpoint (or run) label; an
analysis adds its own keys after them (layer_sim's `layers`, param_delta's `comparison`). The
pipeline (`train.reproduce`) calls `execute` and redraws figures with `figure_stem`, so file
names are decided here once. `load` reads a report file, bringing files written before this
contract (`reports` or `per_checkpoint` for `results`) to the same shape (`migrate`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from nca_interp import identity

PATH_FIELDS = ("ckpt", "runs")  # the checkpoint field of a config (trajectory: run folders)
ANALYSES = ("evaluate", "trajectory", "layer_sim", "grad_align", "param_delta", "patching")
REPORT_KEYS = ("config", "task", "context", "runs", "results")
_LEGACY_RESULTS = ("reports", "per_checkpoint")


def module(name: str):
    """The analysis module called `name` (one of ANALYSES)."""
    import importlib

    if name not in ANALYSES:
        raise ValueError(f"{name!r} is not an analysis; one of {', '.join(ANALYSES)}")
    return importlib.import_module(f"nca_interp.{name}")


def config(cls, cfg=None, fields: dict | None = None):
    """The config of a `run` call: `cfg` as given, or `cls(**fields)`, where a first positional
    checkpoint folder or list of them stands for the checkpoint field (`ckpt`, trajectory's
    `runs`); not a config and fields both, and no field the command does not have. The
    checkpoint field is normalised (one folder as str or Path: a list of one)."""
    from nca_interp.cli import as_paths

    fields = dict(fields or {})
    names = [f.name for f in dataclasses.fields(cls)]
    where = next(n for n in PATH_FIELDS if n in names)
    if cfg is not None and not isinstance(cfg, cls):
        if isinstance(cfg, (str, os.PathLike, list, tuple)):
            cfg, fields = None, {where: cfg, **fields}
        else:
            raise TypeError(f"run takes a {cls.__name__} or checkpoint folders, not "
                            f"{type(cfg).__name__}")
    if cfg is not None:
        if fields:
            raise TypeError(f"pass a {cls.__name__} or keyword fields, not both "
                            f"({', '.join(fields)})")
    else:
        unknown = sorted(set(fields) - set(names))
        if unknown:
            raise TypeError(f"{cls.__name__} has no field {', '.join(unknown)}; its fields: "
                            f"{', '.join(names)}")
        cfg = cls(**fields)
    setattr(cfg, where, as_paths(getattr(cfg, where), where) or [])
    return cfg


def run_identity(label: str, path: str | Path | None) -> dict:
    """A run's identity (from its run config when `path` has one) and its folder."""
    rid = identity.of_path(path) if path is not None else identity.RunId(label)
    return {**rid.to_dict(), "path": None if path is None else str(path)}


def make_report(cfg, *, task: str, context: str | None, paths: dict[str, str | Path | None],
                results: dict, **extra) -> dict:
    """A report of the shared shape: `paths` maps each key of `results` to its folder."""
    from nca_interp.cli import to_dict

    return {"config": to_dict(cfg), "task": task, "context": context,
            "runs": {k: run_identity(k, paths.get(k)) for k in results}, "results": results,
            **extra}


def label_of(path: str | Path, taken) -> str:
    """A checkpoint's results key: its folder name, or its path where that name is taken."""
    name = Path(path).name
    return name if name not in taken else str(path)


def figure_stem(out: str | Path, suffix: str) -> Path:
    """Where figure `suffix` of a report written to `out` goes (`out` without .json)."""
    out = Path(out)
    if out.suffix == ".json":
        out = out.with_suffix("")
    return out if not suffix else out.with_name(f"{out.name}_{suffix}")


def write(report: dict, out: str | Path, figures: dict, png: bool = False) -> list[str]:
    """The report's JSON (`out` with .json) and each of its figures; the paths written."""
    from nca_interp.cli import write_json
    from nca_interp.plots import write_figure

    stem = figure_stem(out, "")
    written = [str(write_json(stem.with_suffix(".json"), report))]
    for suffix, fig in figures.items():
        written += write_figure(fig, figure_stem(stem, suffix), png=png)
    return written


def execute(mod, cfg) -> dict:
    """An analysis command on its config: checked before any work (fields, --out writable),
    run, its tables printed, its JSON and figures written when the config has an `out`."""
    import torch

    from nca_interp.cli import check_writable, validate

    validate(cfg)
    out = getattr(cfg, "out", None)
    if out:
        check_writable(figure_stem(out, "").with_suffix(".json"))
    if getattr(cfg, "threads", None):
        torch.set_num_threads(cfg.threads)
    report = mod.run(cfg)
    mod.show(report)
    if out:
        print("wrote", *write(report, out, mod.figures(report), getattr(cfg, "png", False)))
    return report


def migrate(report: dict) -> dict:
    """A report file written before the shared shape, in it: `results` for `reports` /
    `per_checkpoint`, and task, context and runs filled from its config and entries (the
    numbers are not touched)."""
    if all(k in report for k in REPORT_KEYS):
        return report
    r = dict(report)
    for old in _LEGACY_RESULTS:
        if old in r and "results" not in r:
            r["results"] = r.pop(old)
    results = r.get("results", {})
    first = next(iter(results.values()), {}) if isinstance(results, dict) else {}
    first = first if isinstance(first, dict) else {}
    cfg = r.get("config", {})
    task = r.get("task", cfg.get("task") or first.get("task"))
    context = r.get("context", cfg.get("context") or first.get("context"))
    named = [*(cfg.get("ckpt") or []), *(cfg.get("runs") or []), *(r.get("checkpoints") or [])]
    folders = {Path(f).name: str(f) for f in named}
    runs = r.get("runs") or {k: _legacy_identity(k, v, folders) for k, v in results.items()}
    rest = {k: v for k, v in r.items() if k not in REPORT_KEYS}
    return {"config": cfg, "task": task, "context": context, "runs": runs, "results": results,
            **rest}


def _legacy_identity(key: str, entry, folders: dict[str, str]) -> dict:
    """The identity of an entry of a report file without `runs`: read from the name of its
    run folder (the key, the folder the config names by that key, or the entry's own run or
    checkpoint; `<run>/checkpoints/step_N` is run `<run>` at step N), with the method, seed and
    beta the entry's own `identity` records."""
    entry = entry if isinstance(entry, dict) else {}
    path = key if "/" in key else folders.get(key) or entry.get("run") or entry.get("checkpoint")
    p = Path(path) if path else Path(key)
    step = int(p.name[5:]) if p.name.startswith("step_") and p.name[5:].isdigit() else None
    run = p.parent.parent if step is not None else p
    rid = dataclasses.replace(identity.legacy_of_name(run.name), step=step)
    own = entry.get("identity")
    if isinstance(own, dict):
        rid = dataclasses.replace(rid, **{k: v for k, v in own.items()
                                          if k in ("method", "seed", "beta") and v is not None})
    return {**rid.to_dict(), "path": str(path) if path else None}


def load(path: str | Path) -> dict:
    """A report file in the shared shape (see `migrate`)."""
    return migrate(json.loads(Path(path).read_text()))
