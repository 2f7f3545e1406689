"""The analysis registry, the contract every analysis keeps, and the one writer of its files.

An analysis is a module (its command: `python -m <module>`) with

- a config dataclass (`<Name>Config`), which its command line parses into;
- `run(config) -> Report` (or `run(**fields)`, which builds the config): the computation, no
  file written;
- `show(report)`: the tables it prints;
- `figures(report) -> {suffix: figure}`: suffix "" is written to `OUT.html`, any other to
  `OUT_<suffix>.html`;
- `execute(config)`: `analysis.execute` on the module: checks, run, show, `write`;

(`Analysis`, a Protocol), and one registration, `register(AnalysisSpec(...))`: its name, module,
what it measures, the files it writes in a pipeline folder (`AnalysisSpec.outputs`) and its
report class. The registry knows analyses only: the paper pipeline (`nca_interp.paper.reproduce`)
plans its stages from it (its own plans for the built-in analyses, a default plan for any other),
and the folder layout (`nca_interp.paper.layout`), `--keep`'s choices and the generated
architecture page iterate it (`specs()`), so a new analysis is one module and one `register`
call. The built-in ones are registered at the end of this file.

A report is typed (`nca_interp.reports`): `make_report` builds the report class the analysis
registered (the config it ran with, the task, the context kind, a `RunRecord` per run it measured
and `results`, an entry per checkpoint or run, plus the analysis's own declared fields), and
refuses a key the class does not declare, so each field's documentation is its declaration.
The pipeline calls `execute` and redraws figures with `figure_stem`, so file names are decided
here once. `load` reads a report file of any version this package wrote (`reports.from_json`
brings older files to the current `reports.VERSION`). """

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from nca_interp import identity, reports
from nca_interp.errors import UsageError
from nca_interp.fsio import link_runs_home
from nca_interp.plugins import import_plugins

__all__ = ["PLUGINS_ENV", "REGISTRY", "Analysis", "AnalysisSpec", "checkpoint_paths",
           "command_defaults", "config", "data_record", "decoded", "discover", "environment",
           "execute",
           "figure_stem", "from_json", "infer_analysis", "json_of", "label_of", "load",
           "make_report",
           "module", "names", "register", "report_class",
           "short_labels", "spec", "specs", "to_frame"]

log = logging.getLogger(__spec__.name if __spec__ else __name__)  # python -m too

PATH_FIELDS = ("ckpt", "runs")  # the checkpoint field of a config (trajectory: run folders)


@runtime_checkable
class Analysis(Protocol):
    """What an analysis module provides (checked when its spec loads it)."""

    def run(self, cfg: Any = None, /, **fields) -> dict: ...

    def show(self, report: dict) -> None: ...

    def figures(self, report: dict) -> dict: ...

    def execute(self, cfg: Any) -> dict: ...

    def main(self, argv: list[str] | None = None) -> dict: ...


@dataclass(frozen=True)
class AnalysisSpec:
    """One registered analysis.

    Args:
        name: the registry key (and `--keep`'s word for it).
        module: the importable module keeping the `Analysis` contract; `python -m <module>` is
            its command.
        what: one line: what it measures.
        files: the JSON files it writes in a pipeline folder, by role (a name, or a glob for a
            family such as the teacher's per-context files); `outputs()` lists them.
        report: its report class (`nca_interp.reports.Report` or a subclass declaring its
            entry and top-level fields), or "module:Class"; None: an untyped `Report` (its
            entries as written, its own keys in `extra`).
    """

    name: str
    module: str
    what: str
    files: dict[str, str] = field(default_factory=dict)
    report: type | str | None = None

    def outputs(self) -> tuple[str, ...]:
        return tuple(self.files.values())

    def file(self, role: str) -> str:
        return self.files[role]

    def load(self) -> Analysis:
        """The module, checked to keep the contract (one line naming what it lacks)."""
        import importlib

        try:
            mod = importlib.import_module(self.module)
        except ModuleNotFoundError as e:
            raise UsageError(f"analysis {self.name!r}: its module {self.module} cannot be "
                             f"imported ({e}); put it on the path (PYTHONPATH) or fix the "
                             "module in its registration") from e
        missing = [n for n in ("run", "show", "figures", "execute", "main")
                   if not callable(getattr(mod, n, None))]
        if missing:
            raise UsageError(f"analysis {self.name!r} ({self.module}) lacks "
                             f"{', '.join(missing)}: an analysis module defines run, show, "
                             "figures, execute and main (nca_interp.analysis.Analysis)")
        return mod

    def config_class(self) -> type | None:
        """Its config dataclass: the module's `<Name>Config` declaring `ANALYSIS = name`, or
        else the one `<Name>Config` the module defines (None where there is none)."""
        mod: Any = self.load()
        found: list[type] = [
            c for c in vars(mod).values() if isinstance(c, type) and dataclasses.is_dataclass(c)
            and c.__name__.endswith("Config")
            and (getattr(c, "ANALYSIS", None) == self.name or c.__module__ == mod.__name__)]
        declared = [c for c in found if getattr(c, "ANALYSIS", None) == self.name]
        return (declared or found)[0] if found else None


REGISTRY: dict[str, AnalysisSpec] = {}


def register(entry: AnalysisSpec) -> AnalysisSpec:
    """Add an analysis to the pipeline, the layout, `--keep` and the architecture page (one
    call, in the analysis's own module, so that importing it registers it). The same spec again
    is a no-op; another spec under a registered name, or a file another analysis writes, is
    refused (one line naming the clash)."""
    before = REGISTRY.get(entry.name)
    if before is not None and before != entry:
        raise UsageError(f"analysis {entry.name!r} is registered twice ({before.module} and "
                         f"{entry.module}): give the new one another name")
    for other in REGISTRY.values():
        shared = set(other.outputs()) & set(entry.outputs())
        if other.name != entry.name and shared:
            raise UsageError(f"analysis {entry.name!r} would write {', '.join(sorted(shared))}, "
                             f"which {other.name!r} writes: choose other file names")
    REGISTRY[entry.name] = entry
    return entry


PLUGINS_ENV = "NCA_INTERP_ANALYSES"  # modules to import for their registrations, comma-separated
_DISCOVERED: list[bool] = []


def discover() -> None:
    """Import, once, the analyses registered outside this package: every module named by the
    `nca_interp.analyses` entry-point group of an installed package (`[project.entry-points.
    "nca_interp.analyses"] toy = "toy_analysis"`) and by NCA_INTERP_ANALYSES (a script's own,
    `NCA_INTERP_ANALYSES=toy_analysis`). Each module's import registers it, so every command
    (the pipeline's --keep, its help, the pages) sees it."""
    if _DISCOVERED:
        return
    _DISCOVERED.append(True)
    import_plugins("nca_interp.analyses", PLUGINS_ENV, "analysis")


def specs() -> tuple[AnalysisSpec, ...]:
    """Every registered analysis, in registration order (the pipeline's order)."""
    discover()
    return tuple(REGISTRY.values())


def names() -> tuple[str, ...]:
    return tuple(s.name for s in specs())


def spec(name: str) -> AnalysisSpec:
    discover()
    if name not in REGISTRY:
        raise UsageError(f"{name!r} is not an analysis; one of {', '.join(REGISTRY)}")
    return REGISTRY[name]


def module(name: str) -> Analysis:
    """The module of the analysis registered as `name`."""
    return spec(name).load()


def task_options_list(options) -> list[str] | None:
    """Task options as the commands take them (["KEY=VALUE", ...]) from a dict, a list of
    `KEY=VALUE` or the command line's comma string; anything else is left for the type check
    to name."""
    if isinstance(options, dict):
        return [f"{k}={v}" for k, v in options.items()]
    if isinstance(options, str):
        return [o for o in options.split(",") if o]
    return options


def config(cls, cfg=None, fields: dict | None = None):
    """The config of a `run` call: `cfg` as given, or `cls(**fields)`, where a first positional
    checkpoint folder or list of them stands for the checkpoint field (`ckpt`, trajectory's
    `runs`); not a config and fields both, and no field the command does not have. The
    checkpoint field is normalised (one folder as str or Path: a list of one)."""
    from nca_interp.cli import as_paths

    fields = dict(fields or {})
    if "task_options" in fields:
        fields["task_options"] = task_options_list(fields["task_options"])
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


def command_defaults(mod, cfg):
    """The command line alone, naming no checkpoint: the module's embedded demo checkpoints
    (`mod.DEMO`, asset names), said in the first line. Only `main` calls this: the Python API
    with an empty list is refused (`checkpoint_paths`), never given the demo."""
    from nca_interp.assets import embedded

    where = next(n for n in PATH_FIELDS if hasattr(cfg, n))
    if getattr(cfg, where) or not getattr(mod, "DEMO", None) or getattr(cfg, "beside", None):
        return cfg
    setattr(cfg, where, [str(embedded(n)) for n in mod.DEMO])
    log.info(f"no checkpoint named: the embedded demo checkpoints {', '.join(mod.DEMO)}")
    return cfg


def checkpoint_paths(cfg) -> list[str]:
    """The checkpoint folders of a config, at least one (an empty list is refused: it is not
    "the embedded checkpoints", which only the bare command line falls back to)."""
    from nca_interp.cli import as_paths

    where = next(n for n in PATH_FIELDS if hasattr(cfg, n))
    paths = as_paths(getattr(cfg, where), where)
    if not paths:
        raise UsageError(f"no checkpoint given ({where} is empty); name the checkpoint folders "
                         "to analyse")
    from nca_interp.checkpoint import check_architecture, verify_folder

    seen: dict[Path, str] = {}
    for p in paths:  # the user's folders are named, before any baseline is made from them
        folder = verify_folder(p)
        check_architecture(folder)
        if folder in seen:  # its rows twice, as if two runs agreed (the fourth probe)
            raise UsageError(f"{p} is given twice (as {seen[folder]} too); name each "
                             "checkpoint once (a copy of a run is not a second run either)")
        seen[folder] = p
    from nca_interp.runs import in_progress

    for p in paths:  # a half-trained run reads like a finished one in every table
        if (note := in_progress(p)) is not None:
            log.warning(f"note: {note}")
    return paths


def prompt_format(path: str | Path | None) -> str | None:
    """How a checkpoint folder's prompts are written: "chat template" when its tokenizer
    carries one (tokenizer_config.json's `chat_template`, or chat_template.jinja / .json),
    else "plain"; None for no folder. Read from the files, no tokenizer built."""
    if path is None or not Path(path).is_dir():
        return None
    folder = Path(path)
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return "chat template"
    config = folder / "tokenizer_config.json"
    if config.is_file():
        from nca_interp.fsio import read_json

        try:
            if read_json(config, "tokenizer config").get("chat_template"):
                return "chat template"
        except (ValueError, AttributeError):
            pass  # unreadable: the tokenizer load names it
    return "plain"


def check_prompt_formats(paths: list[str]) -> None:
    """Say so when the checkpoints of one analysis are prompted in different formats (a copy
    of a model folder without its chat template reads other text than the original)."""
    formats = {p: prompt_format(p) for p in paths}
    kinds = {f for f in formats.values() if f}
    if len(kinds) > 1:
        plain = [p for p, f in formats.items() if f == "plain"]
        log.warning(f"note: {', '.join(plain)} {'has' if len(plain) == 1 else 'have'} no "
                    "chat template while the other checkpoints have one: they are prompted as "
                    "plain text, not in the chat format (each report entry records its "
                    "prompt_format); copy the tokenizer files with the template into the "
                    "folder to compare like with like")


def run_identity(label: str, path: str | Path | None) -> dict:
    """A run's identity (from its run config when `path` has one), its folder and the format
    its prompts were written in."""
    rid = identity.of_path(path) if path is not None else identity.RunId(label)
    return {**rid.to_dict(), "path": None if path is None else str(path),
            "prompt_format": prompt_format(path)}


def make_report(cfg, *, task: str | None, context: str | None,
                paths: Mapping[str, str | Path | None],
                results: dict, **extra):
    """The typed report (`nca_interp.reports`) of the analysis whose config `cfg` is (named by
    the class's `ANALYSIS`, as the built-ins' configs in `nca_interp.configs` are, else found
    by the module that defines the class): `paths` maps each key of `results` to its folder;
    `extra` are the analysis's own top-level fields. A key its report class does not declare is
    refused, so what a report holds is what its class documents."""
    from nca_interp.cli import to_dict

    module = type(cfg).__module__
    if module == "__main__":  # `python -m nca_interp.layer_sim`: the class's module runs as main
        import sys

        module = getattr(getattr(sys.modules["__main__"], "__spec__", None), "name", module)
    name = getattr(type(cfg), "ANALYSIS", None) or \
        next((s.name for s in specs() if s.module == module), None)
    cls = report_class(name)
    return cls.from_json({"config": to_dict(cfg), "task": task, "context": context,
                          "runs": {k: run_identity(k, paths.get(k)) for k in results},
                          "results": results, "analysis": name,
                          "environment": environment(cfg), **extra},
                         f"{name or 'analysis'} report", complete=True)


def environment(cfg) -> dict:
    """Where a report's numbers were computed: the precision its `--precision` resolved to on
    this machine (a config without one computes in fp32: `load_checkpoint` keeps float32), the
    device, whether the CPU has native bf16, torch's threads, and the versions that computed
    them. `auto` alone does not say which: it is bf16 on one CPU and fp32 on another."""
    import platform
    from importlib import metadata

    import torch

    from nca_interp.models import native_bf16, resolve_device, resolved_precision

    device = resolve_device(getattr(cfg, "device", "cpu") or "cpu")
    precision = getattr(cfg, "precision", None)

    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    return {"precision": resolved_precision(device, precision) if precision else "fp32",
            "device": str(device), "cpu_native_bf16": native_bf16(),
            "threads": torch.get_num_threads(), "python": platform.python_version(),
            **{name: version(name) for name in ("torch", "transformers", "transformer-lens",
                                                "nca_interp")}}


def data_record(task, levels: list) -> dict:
    """What an analysis fed in, so that a reader can check it: the task's options, the sha256
    of every data file they name (a JSONL, a context file, a question file), each item's unit
    in order, and the sha256 of the prompts as the task renders them (x without c), one per
    line. Own data (`jsonl`) also keeps the prompts themselves."""
    import hashlib

    from nca_interp.tasks import option_file, task_record

    record = task_record(task)
    files = {}
    for key, value in record.items():
        if (file := option_file(value)) is not None:  # a long regex is no file name
            digest = hashlib.sha256(file.read_bytes()).hexdigest()
            files[key] = {"path": value, "sha256": digest}
    prompts = [task.render(lv) for lv in levels]
    out = {"task_options": record, "files": files, "units": [task.unit(lv) for lv in levels],
           "prompts_sha256": hashlib.sha256("\n".join(prompts).encode()).hexdigest()}
    if task.name == "jsonl":
        out["prompts"] = prompts
        out["ids"] = [lv.id for lv in levels]  # the units may be groups
    return out


def decoded(tok, ids, mask) -> list[str]:
    """Each row's kept tokens (`mask`) as text: the responses a report analysed."""
    return [tok.decode(row[m.bool()].tolist(), skip_special_tokens=True)
            for row, m in zip(ids, mask)]


def short_labels(paths: list[str]) -> dict[str, str]:
    """A column name for each path: its folder name, or as many trailing parts as make it
    unique (`opd/final` and `nca/final`, not two columns called `final`)."""
    parts = {p: Path(p).parts for p in paths}
    out = {}
    for p in paths:
        k = 1
        while k < len(parts[p]) and sum(q[-k:] == parts[p][-k:] for q in parts.values()) > 1:
            k += 1
        out[p] = "/".join(parts[p][-k:])
    return out


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


def json_of(stem: Path) -> Path:
    """The report file of `stem` (`figure_stem(out, "")`): the stem and .json, whatever dots it
    holds (`--out e.txt` writes e.txt.json beside e.txt.html, under the lock .e.txt.nca-lock:
    never e.json, which is another stem's, `--out e`'s)."""
    return stem.with_name(f"{stem.name}.json")


def write(report, out: str | Path, figures: dict, png: bool = False) -> list[str]:
    """Each of the report's figures, then its JSON (`out` with .json), last: the JSON records
    the sha256 of every figure file it belongs with (`report["figures"]`), so a kill between
    the two leaves a pair `stale_figures` names, never one that passes for whole. A PNG that
    cannot be exported leaves the HTML and the JSON written, then is one RunError. Returns
    the paths written, the JSON first."""
    from nca_interp.cli import write_json
    from nca_interp.errors import RunError
    from nca_interp.plots import figure_files, figure_path, png_bytes

    stem = figure_stem(out, "")
    files: dict[Path, bytes] = {}
    for suffix, fig in figures.items():
        files.update(figure_files(fig, figure_stem(stem, suffix)))
    png_error = None
    for suffix, fig in figures.items() if png else ():
        try:
            files[figure_path(figure_stem(stem, suffix), ".png")] = png_bytes(fig)
        except RunError as e:
            png_error = e
            break
    typed = from_json(report)
    replaced = json_of(stem).is_file()
    typed["figures"] = _replace_figures(stem, typed.get("analysis"), files)
    if isinstance(report, dict):  # an untyped plug-in's own dict sees it too
        report["figures"] = typed["figures"]
    written = [str(write_json(json_of(stem), typed)), *map(str, files)]
    _pending(stem).unlink(missing_ok=True)
    if replaced:  # an edited report was replaced without a word (the fourth probe)
        log.warning(f"note: replaced the earlier report {json_of(stem)} (a report "
                    "is replaced by its own analysis; to keep one, choose another --out)")
    if png_error is not None:
        raise RunError(f"{png_error} The report and its HTML figures were written.")
    return written


def redraw(json_path: str | Path, figures: dict, png: bool = False) -> list[str]:
    """Redraw a written report's figures from its JSON (the pipeline's `render_figures`),
    under the same rules as `write`: only the figures the JSON records as its own, unchanged
    since, are replaced; the JSON's record is updated only where a figure's bytes changed."""
    from nca_interp.cli import write_json
    from nca_interp.fsio import read_json
    from nca_interp.plots import figure_files

    json_path = Path(json_path)
    stem = json_path.with_suffix("")
    files: dict[Path, bytes] = {}
    for suffix, fig in figures.items():
        files.update(figure_files(fig, figure_stem(stem, suffix), png))
    raw = read_json(json_path, "report")
    shas = _replace_figures(stem, raw.get("analysis"), files)
    if raw.get("figures") != {**(raw.get("figures") or {}), **shas}:
        raw["figures"] = {**(raw.get("figures") or {}), **shas}
        write_json(json_path, raw)
    _pending(stem).unlink(missing_ok=True)
    return [str(p) for p in files]


def _pending(stem: Path) -> Path:
    """Where `write` records the figures it is about to write (`.STEM.nca-figures`): a kill
    between a figure and its JSON leaves that figure recognisable as this report's own."""
    return stem.with_name(f".{stem.name}.nca-figures")


def _replace_figures(stem: Path, analysis: str | None, files: dict[Path, bytes]
                     ) -> dict[str, str]:
    """Check every target is absent or this report's own and unchanged (`check_own_output`),
    record the new sha256s in the pending file, then write the files. Returns the record."""
    import hashlib

    from nca_interp.cli import write_json
    from nca_interp.plots import write_files

    recorded = own_outputs(stem, analysis)
    for path in files:  # every name first: nothing is written if one is not ours
        check_own_output(path, recorded)
    shas = {p.name: hashlib.sha256(data).hexdigest() for p, data in files.items()}
    if files:
        previous = _pending_shas(stem)
        write_json(_pending(stem), {n: sorted({d, *previous.get(n, ())}) for n, d in
                                    shas.items()})
        write_files(files)
    return shas


def _pending_shas(stem: Path) -> dict[str, list[str]]:
    """What a killed `write` had recorded it would write (`_pending`), or nothing."""
    from nca_interp.fsio import check_target, read_json

    path = check_target(_pending(stem))
    if not path.exists():
        return {}
    try:
        d = read_json(path, "pending figure record")
    except UsageError:
        d = None
    if not (isinstance(d, Mapping) and all(
            isinstance(vs, list) and all(isinstance(v, str) for v in vs) for vs in d.values())):
        # not the record `write` makes (it writes it whole): a file of someone else's at the
        # name, which the record would replace and then delete (the sixth probe)
        raise UsageError(f"{path} is not the record of figures this package writes there; it "
                         "is never written over: move it or choose another --out")
    return {str(n): list(vs) for n, vs in d.items()}


def analysis_of(mod) -> str | None:
    """The registered name of analysis module `mod` (None for one not registered)."""
    discover()
    name = getattr(mod, "__name__", None)
    if name == "__main__":  # `python -m nca_interp.evaluate`: the module runs as __main__
        name = getattr(getattr(mod, "__spec__", None), "name", None)
    return next((n for n, spec in REGISTRY.items() if spec.module == name), None)


def own_outputs(stem: Path, analysis: str | None = None) -> dict[str, set[str] | None]:
    """The file names a report at `stem` may replace: its JSON, if that is a report of this
    package (of `analysis`, when named), and the figures that JSON records as its own, each
    with the sha256s it may have now (None: any): the recorded one, and those a killed write
    had announced (`_pending`). A JSON of anything else there is refused (one line), never
    replaced."""
    from nca_interp.fsio import check_target, read_json

    json_path = check_target(json_of(stem))
    pending = {n: set(ds) for n, ds in _pending_shas(stem).items()}  # a killed write's
    if not json_path.exists():
        return dict(pending)
    if json_path.is_dir():
        raise UsageError(f"--out {stem}: {json_path} is a folder; choose another --out")
    try:
        d = read_json(json_path, "report")
    except UsageError:
        d = None
    if not (isinstance(d, Mapping) and isinstance(d.get("results"), Mapping)
            and "config" in d):
        raise UsageError(f"--out {stem}: {json_path} exists and is not a report of this "
                         "package; it is never written over: move it or choose another --out")
    if analysis is not None and d.get("analysis") not in (None, analysis):
        raise UsageError(f"--out {stem}: {json_path} is a {d.get('analysis')} report, not "
                         f"{analysis}'s; a report is replaced only by its own analysis: move it "
                         "or choose another --out")
    recorded = d.get("figures")
    figures = recorded if isinstance(recorded, Mapping) else {}
    accepted: dict[str, set[str] | None] = {json_path.name: None}
    for name, digest in figures.items():
        accepted[str(name)] = {digest} if isinstance(digest, str) else None
    for name, digests in pending.items():  # a kill between a figure and its JSON
        if name not in accepted or accepted[name] is not None:
            accepted[name] = (accepted.get(name) or set()) | digests
    return accepted


def check_own_output(path: Path, recorded: dict[str, set[str] | None]) -> None:
    """Refuse to write `path` when something is there that this report did not write (a
    user's file, another report's figure of the same name, a folder or a link), or that it
    wrote and someone changed since (its sha256 is not one `own_outputs` accepts)."""
    import hashlib

    from nca_interp.fsio import check_target

    check_target(path)
    if not path.exists():
        return
    if path.is_dir() or path.name not in recorded:
        raise UsageError(f"{path} exists and this report did not write it (its JSON does not "
                         "record it: a file of yours or another report's figure); it is never "
                         "written over: move it or choose another --out")
    accepted = recorded[path.name]
    if accepted is not None and hashlib.sha256(path.read_bytes()).hexdigest() not in accepted:
        raise UsageError(f"{path} was changed since this report wrote it (its sha256 is not "
                         "the one its JSON records); it is never written over: move it or "
                         "choose another --out")


def check_outputs(out: str | Path, analysis: str | None = None) -> None:
    """Before any work: `--out` names a file stem, not a folder, and its JSON and main figure
    are absent or this analysis's report's own (`own_outputs`, `check_own_output`)."""
    stem = figure_stem(Path(out).expanduser(), "")
    if len(stem.name.encode()) + NAME_MARGIN > 255:  # NAME_MAX of every common file system
        raise UsageError(f"--out {out}: its name is {len(stem.name.encode())} bytes, and a report "
                         f"writes names up to {NAME_MARGIN} bytes longer (its figures, its lock), "
                         "more than the 255 a file name may have: choose a shorter --out")
    if Path(out).expanduser().is_dir():
        raise UsageError(f"--out {out} is a folder; --out names the report's file stem, e.g. "
                         f"{Path(out) / 'report'}")
    if str(out).endswith(("/", os.sep)):
        raise UsageError(f"--out {out} ends in /; --out names the report's file stem, e.g. "
                         f"{Path(out) / 'report'}")
    stem = figure_stem(Path(out).expanduser(), "")
    recorded = own_outputs(stem, analysis)
    from nca_interp.plots import figure_path

    check_own_output(figure_path(stem, ".html"), recorded)


# bytes a report adds to its stem's name: `.STEM.nca-figures`, `STEM_<figure>.html` (a figure
# suffix such as `_opd_positions`, with a run's name in it)
NAME_MARGIN = 64


def stale_figures(json_path: str | Path) -> list[str]:
    """The figure files a written report records that are missing or other than it recorded
    (a kill between a figure and its report): redraw them with the same command."""
    import hashlib

    from nca_interp.fsio import read_json

    json_path = Path(json_path)
    recorded = read_json(json_path, "report").get("figures") or {}
    return [name for name, digest in recorded.items()
            if not (json_path.parent / name).is_file() or
            hashlib.sha256((json_path.parent / name).read_bytes()).hexdigest() != digest]


def input_paths(cfg) -> dict[Path, str]:
    """Everything an analysis config reads, by what names it: its checkpoints (and each run's
    recorded initial checkpoint and teacher), --teacher / --init, task option files, and the
    model cache. `--out` must keep clear of all of them."""
    from nca_interp.checkpoint import read_run_config
    from nca_interp.fsio import default_cache
    from nca_interp.tasks import option_file

    found: dict[str, str] = {}

    def add(what: str, p) -> None:
        if isinstance(p, (str, os.PathLike)) and str(p):
            found.setdefault(str(Path(p).expanduser().resolve()), what)

    for name in (*PATH_FIELDS, "pair", "control"):
        value = getattr(cfg, name, None)  # evaluate's `control` is a flag, not folders
        for p in value if isinstance(value, (list, tuple)) else []:
            add(f"checkpoint {p}", p)
            try:
                run = read_run_config(p) if Path(p).is_dir() else {}
            except ValueError:
                run = {}  # unreadable: the analysis names it when it reads it
            for key in ("student", "teacher"):
                if isinstance(run.get(key), str):
                    from nca_interp.assets import resolve

                    add(f"{p}'s {key} {run[key]}", resolve(run[key]))
    for name in ("teacher", "init", "beside"):
        add(f"--{name} {getattr(cfg, name, None)}", getattr(cfg, name, None))
    for opt in getattr(cfg, "task_options", None) or []:
        value = opt.partition("=")[2] if isinstance(opt, str) else ""
        if (file := option_file(value)) is not None:  # pattern=@FILE: FILE
            add(f"task option {opt}", file)
    add("the model cache", default_cache() / "models")
    return {Path(p): what for p, what in found.items()}


def check_out_clear(cfg, out: str | Path) -> None:
    """Refuse an `--out` whose files would land inside, or over, anything the analysis
    reads (a checkpoint's config.json, its tokenizer, a data file): one line, before any work."""
    stem = figure_stem(Path(out).expanduser().resolve(), "")
    if not stem.name:  # the root (`/`, `/..`): no name to add .json to
        raise UsageError(f"--out {out} is a folder; --out names the report's file stem, e.g. "
                         f"{Path(out) / 'report'}")
    from nca_interp.plots import figure_path

    targets = {json_of(stem), figure_path(stem, ".html"),
               stem.parent / "plotly.min.js"}
    from nca_interp.checkpoint import LOADED_FILES

    for q, what in input_paths(cfg).items():
        if q in targets or q == stem:
            raise UsageError(f"--out {out} would write over {what}; an analysis never writes "
                             "into its inputs: choose an --out outside them")
        if q == stem.parent or q in stem.parent.parents:
            if q.is_dir() or not q.exists():
                raise UsageError(f"--out {out} lies inside {what}; an analysis never writes "
                                 "into its inputs: choose an --out outside them")
    # a checkpoint folder that is not among the inputs still is one: a report there read as
    # its chat template or config by whoever loads it next
    loaded = sorted(t.name for t in targets if t.name in LOADED_FILES)
    if loaded and (stem.parent / "config.json").is_file():
        raise UsageError(f"--out {out} would put {loaded[0]} into the checkpoint folder "
                         f"{stem.parent}, where the loader reads a file of that name: choose "
                         "another --out (the sixth probe)")


# the config fields that name one checkpoint folder per value (param_delta's --pair and
# --control are checked by param_delta itself: a value there is "A,B", a comma escaped)
CHECKPOINT_FIELDS = ("ckpt", "init", "teacher")


def check_checkpoints_exist(cfg) -> None:
    """Refuse a config whose checkpoint fields name a path that does not exist, with the
    loader's own one-line error, before any file is made (the loaders check the rest)."""
    from nca_interp.checkpoint import verify_folder

    for name in CHECKPOINT_FIELDS:
        value = getattr(cfg, name, None)
        paths = [value] if isinstance(value, str) else \
            value if isinstance(value, (list, tuple)) else []  # a flag of that name: no path
        for path in paths:
            if isinstance(path, str) and not Path(path).expanduser().exists():
                verify_folder(path)


def execute(mod, cfg) -> dict:
    """An analysis command on its config: checked before any work (fields, --out writable),
    run, its JSON and figures written when the config has an `out`, then its tables printed."""
    import torch

    from nca_interp.cli import check_writable, validate

    validate(cfg)
    out = getattr(cfg, "out", None)
    if isinstance(out, str) and not out.strip():  # `--out "$OUT"` with OUT unset: no silent run
        raise UsageError("--out is empty: name the report's stem (OUT.json, OUT.html), e.g. "
                         "--out runs/mine/report")
    lock = None
    if out:
        from nca_interp.cli import check_disk
        from nca_interp.plots import check_bundle
        from nca_interp.runlock import RunLock

        check_checkpoints_exist(cfg)  # a missing input is said before runs/ is touched
        link_runs_home(out)  # a default runs/... output lands outside the work tree
        check_out_clear(cfg, out)
        check_outputs(out, analysis_of(mod))
        stem = figure_stem(Path(out).expanduser(), "")
        check_writable(json_of(stem))
        check_bundle(stem.parent)
        check_disk(stem.parent, OUT_BYTES, f"the report {stem}.json and its figures",
                   "free space or choose an --out on another disk")
        stem.parent.mkdir(parents=True, exist_ok=True)
        # one writer per report: a second analysis with the same --out is refused before any
        # work, instead of both saying "wrote" and one report silently replacing the other
        lock = RunLock(stem.parent, f".{stem.name}.nca-lock", label=f"the report {stem}.json")
    try:
        if getattr(cfg, "threads", None):
            torch.set_num_threads(cfg.threads)
        where = next(n for n in PATH_FIELDS if hasattr(cfg, n))
        check_prompt_formats([str(p) for p in getattr(cfg, where) or []])
        report = mod.run(cfg)
        written = write(report, out, mod.figures(report), getattr(cfg, "png", False)) \
            if out else []
    finally:
        if lock is not None:
            lock.release()
    mod.show(report)  # after the files: a table that fails to print loses no work
    if written:
        log.info(" ".join(["wrote", *map(str, written)]))
    return report


# what a report and its figures may take on disk, checked free before the work: the JSON of a
# 30-layer report with per-item responses and its HTML figures, plus plotly's bundle (4.6 MB)
OUT_BYTES = 32 * 2**20


def to_frame(report: Mapping):
    """One tidy table of any analysis's report (pandas, the `frames` extra): a row per number,
    with the run it belongs to (`run`, and its `method`, `seed`, `beta`, `step` from the
    report's identities), the `metric` (the key path inside the run's entry, dots joining
    nested keys) and, for per-layer or per-item lists, its `index`. Strings (regimes, responses)
    and booleans are left out; filter `metric` for the table you want, e.g.
    `df[df.metric == "correct_c"]` or `df[df.metric.str.startswith("cos")]`."""
    try:
        import pandas as pd
    except ImportError as e:
        raise ImportError("to_frame needs pandas: pip install 'nca_interp[frames]'") from e
    report = from_json(report)
    rows = []

    def walk(run: str, value, path: str, index=None) -> None:
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return
        if isinstance(value, (int, float)):
            rows.append({"run": run, "metric": path, "index": index, "value": float(value)})
        elif isinstance(value, Mapping):
            for k, v in value.items():
                walk(run, v, f"{path}.{k}" if path else str(k), index)
        elif isinstance(value, (list, tuple)) and index is None:
            for i, v in enumerate(value):
                walk(run, v, path, i)

    for run, entry in report.get("results", {}).items():
        walk(run, entry, "")
    frame = pd.DataFrame(rows, columns=["run", "metric", "index", "value"])
    ids = report.get("runs", {})
    for key in ("method", "seed", "beta", "step"):
        frame.insert(1, key, [(ids.get(r) or {}).get(key) for r in frame["run"]])
    return frame


def report_class(name: str | None) -> type[reports.Report]:
    """The report class an analysis registered (`AnalysisSpec.report`), or `Report`."""
    if not name:
        return reports.Report
    spec = REGISTRY.get(name)
    if spec is None:
        discover()
        spec = REGISTRY.get(name)
    target = getattr(spec, "report", None)
    if target is None:
        return reports.Report
    if isinstance(target, str):
        where, _, attr = target.partition(":")
        target = getattr(importlib.import_module(where), attr)
    return target


def infer_analysis(d: Mapping, path: str | Path | None = None) -> str | None:
    """Which analysis wrote a report of version 0 or 1: its file name (the registry's file
    names), else the one report class whose required fields every entry has."""
    from fnmatch import fnmatch

    if path is not None:
        for spec in specs():
            if any(fnmatch(Path(path).name, f) for f in spec.outputs()):
                return spec.name
    results = d.get("results") or {}
    entries = [e for e in results.values() if isinstance(e, Mapping)] \
        if isinstance(results, Mapping) else []
    if not entries:
        return None
    fits = []
    for spec in specs():
        cls = report_class(spec.name)
        entry = cls.ENTRY
        if entry is None:
            continue
        required = {f.name for f in dataclasses.fields(entry)
                    if f.default is dataclasses.MISSING}
        if all(required <= set(e) for e in entries):
            fits.append(spec.name)
    return fits[0] if len(fits) == 1 else None


def from_json(d: Mapping, path: str | Path | None = None,
              analysis: str | None = None) -> reports.Report:
    """The typed report of a dict read from a file of any version (`upgrade`); its class from
    `analysis`, else the file's own `analysis`, else `infer_analysis`."""
    if isinstance(d, reports.Report):
        return d
    where = str(path) if path is not None else "report"
    if not isinstance(d, Mapping):
        raise reports.ReportError(f"{where}: a report is a JSON object, not "
                                  f"{type(d).__name__}")
    version = d.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise reports.ReportError(f"{where}: format version {version!r} is not a version this "
                                  "package wrote (a whole number); the file is damaged or no "
                                  "nca_interp report")
    if version > reports.VERSION:
        raise reports.ReportError(f"{where}: format version {version}, newer than this "
                                  f"package reads ({reports.VERSION}); upgrade nca_interp")
    d = reports.upgrade(d)
    name = analysis or d.get("analysis") or infer_analysis(d, path)
    return report_class(name).from_json(d, where)


def load(path: str | Path, analysis: str | None = None,
         complete: bool = False) -> reports.Report:
    """A report file as its typed report (see `from_json`). `complete`: refused in one line
    naming the file unless it holds what its analysis writes, every required field of its
    declared type and a results entry (`reports.check_complete`), as a reader that draws every
    field needs (`paper.figures.render_figures`); without it an older or hand-made file's
    missing fields read as absent."""
    from nca_interp.fsio import read_json

    report = from_json(read_json(path, "report"), path, analysis)
    if complete:
        reports.check_complete(report, str(path))
    return report


# the analyses built in, in the pipeline's order; a new one is one more call like these
register(AnalysisSpec(
    "evaluate", "nca_interp.evaluate",
    "accuracy with and without c, paired; harm, help, both-right, length change, regime",
    files={"teacher": "teacher_*.json", "context_return": "context_return.json",
           "context_control": "context_control.json"},
    report="nca_interp.reports:ContextReturnReport"))
register(AnalysisSpec(
    "trajectory", "nca_interp.trajectory",
    "the context return at every saved checkpoint of a run, with KLs on the student's samples",
    files={"trajectory": "trajectory.json", "steps": "trajectory_*steps.json"},
    report="nca_interp.reports:TrajectoryReport"))
register(AnalysisSpec(
    "layer_sim", "nca_interp.layer_sim",
    "per-layer cosine of hidden states with and without c, with its nulls",
    files={"response": "layer_sim.json", "generating": "layer_sim_generating.json",
           "prompt": "layer_sim_prompt.json"},
    report="nca_interp.reports:LayerSimReport"))
register(AnalysisSpec(
    "grad_align", "nca_interp.grad_align",
    "angles between the gradients of the loss terms, noise-corrected, over training",
    files={"opd": "grad_align_opd.json", "nca": "grad_align_nca.json",
           "seeds": "grad_align_*_s*.json"},
    report="nca_interp.reports:GradAlignReport"))
register(AnalysisSpec(
    "param_delta", "nca_interp.param_delta",
    "where the update went: parameter deltas per layer and module, against permutation nulls",
    files={"param_delta": "param_delta.json"},
    report="nca_interp.reports:ParamDeltaReport"))
register(AnalysisSpec(
    "patching", "nca_interp.patching",
    "where c's effect is carried: activation patching, head ablation (heads chosen on held-out "
    "cases), logit lens",
    files={"patching": "patching.json"},
    report="nca_interp.reports:PatchingReport"))
register(AnalysisSpec(
    "lens", "nca_interp.lens",
    "where c still acts, token by token and layer by layer (logit lens), against a wrong c' "
    "and the arithmetic floor; the forks that carry harm cases",
    files={"lens": "lens.json"},
    report="nca_interp.reports:LensReport"))
