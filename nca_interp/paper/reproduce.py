"""From nothing to every figure: teacher, OPD and NCA students per seed, context-return table,
layer_sim, grad_align over training checkpoints, param_delta, and a manifest.

    python -m nca_interp.paper.reproduce --task sokoban --seeds 0,1,2
    python -m nca_interp.paper.reproduce --task sokoban --quick          # one seed, short runs

Stages whose outputs exist and were made from their inputs as they are now (by content digest)
are skipped (training stages resume after a kill: each run directory continues from its last
checkpoint). Outputs: runs/<task>_* (checkpoints) and figures/<task>/
(JSON, HTML, PNG with --png). figures/<task>/manifest.json records, per file, the command,
commit, seeds and wall time that produced it.
"""

from __future__ import annotations

import sys

from nca_interp.cli import own_flags, parse_early
from nca_interp.paper.options import (  # noqa: F401 - re-exported: reproduce.presets() etc.
    STEPS,
    ReproduceConfig,
    keepable,
    planned,
    presets,
    settings,
)

if __name__ == "__main__":  # --help and a bad flag answered before torch is imported
    PARSED = parse_early(ReproduceConfig, __doc__)

import hashlib
import json
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from nca_interp import (
    analysis,
    evaluate,
    grad_align,
    layer_sim,
    lens,
    param_delta,
    patching,
    trajectory,
)
from nca_interp.checkpoint import (
    MANIFEST,
    content_digest,
    git_commit,
    latest_step_checkpoint,
    read_run_config,
    verify_folder,
    weights_digest,
)
from nca_interp.cli import (
    argv_of,
    check_disk,
    entry,
    parse_config,
    same_config,
    to_dict,
    write_json,
)
from nca_interp.errors import InputError, RunError, UsageError
from nca_interp.fsio import link_runs_home, read_json, write_text
from nca_interp.identity import roster, students
from nca_interp.paper import dose, kept
from nca_interp.paper.figures import render_figures
from nca_interp.paper.layout import (
    CONTEXT_CONTROL,
    CONTEXT_RETURN,
    HARM_DRIFT,
    LAYER_SIM_STAGES,
    LENS,
    OWN_PLANS,
    OWN_STEPS,
    PARAM_DELTA,
    PATCHING,
    TRAJECTORY,
    grad_stem,
    teacher_file,
)
from nca_interp.paper.settings import Preset
from nca_interp.regimes import regime
from nca_interp.tasks import make_task, merged_task_options
from train import distill, sft
from train.common import DISK_REMEDY, disk_needed, weight_bytes

__all__ = ["PLANS", "Job", "Manifest", "Pipeline", "add_plan", "check_manifest", "default_plan",
           "main", "plan_of", "record_training_time", "run_parallel", "stage"]

FIGURES = Path(__file__).resolve().parents[2] / "figures"  # the published settings' folders
def teacher_folder(preset: Preset, runs: Path, task: str) -> Path:
    """Where the teacher lives: the fetched model's cache folder (used as it is), or
    RUNS/<task>_base."""
    if preset.fetched_as_is:
        from nca_interp.fetch import fetch

        return fetch(preset.fetched)
    return runs / f"{task}_base"


ESTIMATOR_FLAGS = ("kl", "kl_k", "kl_support", "kl_tail", "kl_form", "nca_kl")


def estimator_args(cfg) -> list[str]:
    """`--kl ...` flags of `cfg` that differ from train.distill's defaults."""
    default = distill.DistillConfig()
    return [a for name in ESTIMATOR_FLAGS if getattr(cfg, name) != getattr(default, name)
            for a in (f"--{name.replace('_', '-')}", str(getattr(cfg, name)))]


# every published setting was trained in fp32: on a CPU with native bf16 (or a GPU),
# `--precision auto` would pick bf16, and a rebuilt setting would not be the published one
PRECISION = ("--precision", "fp32")

class Manifest:
    def __init__(self, path: Path, cfg: ReproduceConfig):
        self.path, self.cfg = path, cfg
        self.data = read_json(path) if path.exists() else {"files": {}}
        check_manifest(self.data, path)
        self.ran = 0  # stages that did work in this invocation
        self.skipped: list[str] = []  # stages whose outputs this invocation found up to date
        self.resumed: list[str] = []  # training stages it resumed from an earlier checkpoint

    def record(self, files: list[str], command: list[str], seconds: float,
               seconds_from: str | None = None, inputs: dict | None = None) -> None:
        """Record how each of `files` was made; `inputs`: the content digest of each input it
        was computed from (`digests`), by which a later invocation tells whether it is stale."""
        for f in files:
            self.data["files"][str(f)] = {"command": " ".join(command), "commit": git_commit(),
                                          "seeds": self.cfg.seeds, "seconds": round(seconds, 1),
                                          "date": time.strftime("%Y-%m-%d %H:%M:%S")}
            if seconds_from:
                self.data["files"][str(f)]["seconds_from"] = seconds_from
            if inputs is not None:
                self.data["files"][str(f)]["inputs"] = inputs
            if Path(f).suffix in FIGURE_SUFFIXES and Path(f).is_file():  # what prune may delete
                self.data["files"][str(f)]["sha256"] = content_digest(f)
        self.data["config"] = to_dict(self.cfg)
        self.save()

    def save(self) -> None:
        write_text(self.path, json.dumps(self.data, indent=1))


def check_manifest(data, path: Path) -> None:
    """One InputError naming the manifest unless it is what `Manifest.record` writes: "files",
    a mapping of file to a mapping whose "command" (if any) is a string. A hand-edited or
    damaged entry is refused where it is read, not hours later at the stage that reads it."""
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        raise InputError(f"manifest {path} has no \"files\" mapping: restore it, or delete it "
                         "to run every stage again")
    for key, item in files.items():
        if not isinstance(item, dict) or not isinstance(item.get("command", ""), str):
            raise InputError(f"manifest {path}: the entry of {key} is not a mapping with a "
                             "string \"command\": restore the manifest, or delete the entry "
                             "to make that file again")


def done(run_dir: Path, steps: int) -> bool:
    last = latest_step_checkpoint(run_dir)
    return last is not None and last.name == f"step_{steps:06d}"


def digests(inputs: list[Path]) -> dict[str, str | None]:
    """The digest of what each input holds: a checkpoint's weights, config and tokenizer
    (`checkpoint.weights_digest`: not its optimizer moments, which a kept copy drops), a file's
    own sha256 (`checkpoint.content_digest`); None where it does not exist."""
    def one(p: Path) -> str | None:
        p = Path(p)
        if not p.exists():
            return None
        return weights_digest(p) if (p / MANIFEST).is_file() else content_digest(p)

    return {str(p): one(p) for p in inputs}


def up_to_date(entry: dict, outputs: list[Path], inputs: list[Path]) -> bool:
    """Whether outputs computed from `inputs` still stand: by content where the manifest entry
    recorded its inputs' digests (a checkout or a copy renews every file's time, never its
    content), else (entries written before digests were kept) by time: no input newer than an
    output."""
    if not inputs:
        return True
    if "inputs" in entry:
        return entry["inputs"] == digests(inputs)
    return min(mtime(p) for p in outputs) >= max(mtime(p) for p in inputs)


def distilled_from(run: Path, init: Path, teacher_final: Path) -> bool:
    """Whether student `run` started from `init` as it is now: by the content digest the run
    recorded for its --student (a copy or checkout of both stays a match), else (runs from
    before digests were kept) by time: its final checkpoint newer than the teacher's."""
    recorded = (read_run_config(run).get("inputs") or {}).get("--student")
    if isinstance(recorded, dict) and recorded.get("sha256"):
        return recorded["sha256"] == content_digest(init)
    final = latest_step_checkpoint(run)
    return final is not None and mtime(final) >= mtime(teacher_final)


def mtime(path: Path) -> float:
    """When a checkpoint (its manifest, written last) or a file was last written."""
    marker = path / "nca_checkpoint.json" if path.is_dir() else path
    return marker.stat().st_mtime if marker.exists() else float("inf")


def stage(name: str, manifest: Manifest, outputs: list[Path], fn, cfg,
          inputs: list[Path] = (), positional: str | None = "ckpt") -> None:
    """Run `fn(cfg)` (a command's `execute` on its config object) unless every output exists,
    was made by the same config and from the same inputs (`up_to_date`: a retrained checkpoint
    makes what was computed from it stale); record the command line that runs that config
    (`python -m <fn's module> ...`) and the inputs' digests, so each output names how to make
    it again and from what."""
    # a package's command body (nca_interp.patching.command) runs as the package, as users type it
    module = fn.__module__.removesuffix(".command")
    argv = argv_of(cfg, positional)
    if outputs and all(p.exists() for p in outputs):
        entry = manifest.data["files"].get(str(outputs[0]), {})
        before = entry.get("command")
        if before is not None and not recorded_as(before, module, cfg, positional):
            print(f"[changed] {name}: its command changed (e.g. other seeds)")
        elif up_to_date(entry, outputs, inputs):
            print(f"[skip] {name}: outputs exist and are up to date")
            manifest.skipped.append(name)
            if entry and "inputs" not in entry and inputs:  # judged by time: from now on
                entry["inputs"] = digests(inputs)           # by content
                manifest.save()
            return
        else:
            print(f"[stale] {name}: an input checkpoint changed since its outputs were made")
    print(f"[run] {name}: python -m {module} {' '.join(argv)}")
    t0 = time.time()
    fn(cfg)
    manifest.ran += 1
    manifest.record([str(p) for p in outputs], ["python", "-m", module, *argv], time.time() - t0,
                    inputs=digests(inputs))


def recorded_as(command: str, module: str, cfg, positional: str | None) -> bool:
    """Whether a recorded command line ran `module` with `cfg` (its thread count and PNG export
    aside, which do not change what it computes; flag order and spelled-out defaults aside
    too)."""
    parts = shlex.split(command)
    return parts[:3] == ["python", "-m", module] and same_config(cfg, parts[3:], positional)


def run_parallel(pending: list, jobs: int, manifest: Manifest) -> None:
    """Distillation runs as subprocesses, `jobs` at a time; each logs to OUT.log."""
    import subprocess

    running: list = []
    while pending or running:
        while pending and len(running) < jobs:
            name, final, out, args = pending.pop(0)
            out.parent.mkdir(parents=True, exist_ok=True)
            log = open_log(Path(f"{out}.log"))
            resumed = latest_step_checkpoint(out) is not None  # train.distill resumes from it
            print(f"[run] {name}: python -m train.distill {' '.join(args)}"
                  + (" (resumes)" if resumed else ""))
            proc = subprocess.Popen([sys.executable, "-m", "train.distill", *args], stdout=log,
                                    stderr=subprocess.STDOUT)
            running.append((name, final, out, args, proc, time.time(), resumed))
        time.sleep(2)
        for item in list(running):
            name, final, out, args, proc, t0, resumed = item
            if proc.poll() is not None:
                running.remove(item)
                if proc.returncode != 0:
                    raise RunError(f"{name} failed (exit {proc.returncode}); see its .log")
                manifest.ran += 1
                seconds, how = time.time() - t0, None
                if resumed:  # this launch ran only the steps after the checkpoint
                    manifest.resumed.append(name)
                    if (whole := run_seconds(out)) is not None:
                        seconds, how = whole[0], whole[1] + " (resumed: the whole run)"
                manifest.record([str(final)], ["python", "-m", "train.distill", *args],
                                seconds, how)


def aligned_runs(seeds: list[int], grad_seeds: int) -> list[tuple[str, int, str]]:
    """(method, seed, file suffix) of the runs whose gradients are aligned: the first seed of
    both methods as grad_align_<method>, each further one of the first `grad_seeds` as
    grad_align_<method>_s<seed> (the orthogonality and new-direction verdicts over seeds)."""
    return [("opd", seeds[0], ""), ("nca", seeds[0], ""),
            *((m, s, f"_s{s}") for m in ("opd", "nca") for s in seeds[1:grad_seeds])]


def grad_checkpoints(run: Path, every: int) -> list[str]:
    """A run's saved checkpoints to align, every `every`-th counted back from the final one
    (always aligned: the verdicts read the trained model)."""
    steps = sorted(str(p) for p in (run / "checkpoints").glob("step_*"))
    return steps[::-1][::every][::-1]


SUMMARY_KEYS = ["correct_no_c", "correct_c", "harm", "help", "harm_joint", "help_joint", "both",
                "rel_len_both", "rel_len"]


def derive_context_return(figs: Path) -> None:
    """A setting's context_return.md and context_return_summary.json, from its
    context_return.json (again after a rule they print changes: `python -c "from
    nca_interp.paper.reproduce import derive_context_return as d; d(Path('figures/X'))"`)."""
    report = analysis.load(figs / CONTEXT_RETURN)
    write_text((figs / "context_return.md"), evaluate.format_markdown(report.results) + "\n")
    write_json(figs / "context_return_summary.json", summarise(report))


def summarise(report: dict) -> dict[str, dict]:
    """Mean over seeds and the seed range, per method, of a context-return report. `base` is
    the students' step 0, the first checkpoint evaluated that is not a student (the teacher in
    self-distillation); a cross-model teacher evaluated after it is `teacher`."""
    out = {}
    who = roster(report)
    others = [r for k, r in report.results.items() if not who[k].of_method()]
    for method in ("base", "teacher", "opd", "nca"):
        runs = others[:1] if method == "base" else others[1:2] if method == "teacher" else \
            [r for _, r in students(report, method)]
        if not runs:
            continue
        out[method] = {}
        for k in SUMMARY_KEYS:
            vals = [r[k] for r in runs if r.get(k) is not None]  # harm: None without cases
            out[method][k] = {"mean": float(np.mean(vals)), "min": float(np.min(vals)),
                              "max": float(np.max(vals)), "n": len(vals)} if vals else None
        out[method]["regimes"] = [regime(r) for r in runs]  # the few-clusters rule's, as every page
    return out


FIGURE_SUFFIXES = (".html", ".png")


def prune_figures(figs: Path, written: list[str], manifest: Manifest) -> list[str]:
    """Delete the figures an earlier invocation drew that this one's JSON no longer asks for
    (e.g. the teacher's patching panels once a retrained teacher has no harm case), with their
    manifest entries, so no figure outlives its data. Only files the manifest records as drawn
    by the pipeline are touched, and a figure drawn now in either format keeps both. A name
    is not enough: a file is deleted only while it holds the bytes whose sha256 the manifest
    recorded when the pipeline drew it; any other (a user's figure at that name, an entry
    written before digests were kept, a handed manifest) is left where it is and named."""
    drawn = {Path(w).with_suffix("") for w in written}
    gone = []
    for key, made in list(manifest.data["files"].items()):
        path = Path(key)
        if (path.parent == figs and path.suffix in FIGURE_SUFFIXES
                and made["command"].startswith("python -m nca_interp.paper.reproduce")
                and path.with_suffix("") not in drawn):
            del manifest.data["files"][key]
            ours = path.is_file() and not path.is_symlink() and made.get("sha256") \
                and made["sha256"] == content_digest(path)
            if path.exists() and not ours:
                print(f"[kept] {key}: the manifest named it as an earlier invocation's figure, "
                      "but it is not the file that invocation drew (no digest recorded, or its "
                      "content changed since); delete it yourself if it is stale")
                continue
            path.unlink(missing_ok=True)
            gone.append(key)
            print(f"[removed] {key}: drawn by an earlier invocation, not from this one's JSON")
    return gone


def apply_preset(cfg: ReproduceConfig) -> Preset:
    """Fill the flags left unset from the task's preset (and --quick's shortcuts)."""
    if cfg.task not in presets():
        raise UsageError(f"--task {cfg.task!r}: choose one of {', '.join(presets())}")
    p = presets()[cfg.task]
    for key in ("distill_steps", "batch", "lr", "save_every", "n_levels", "grad_batch",
                "teacher_steps"):
        if getattr(cfg, key) is None:
            setattr(cfg, key, getattr(p, key))
    cfg.context = cfg.context or p.context or make_task(p.task).default_context
    if cfg.dose is None:
        cfg.dose = p.dose
    if cfg.trajectory_every is None:
        cfg.trajectory_every = 1 if cfg.dose else 2
    if cfg.quick:
        cfg.seeds, cfg.distill_steps = cfg.seeds[:1], min(cfg.distill_steps, 40)
        cfg.n_levels, cfg.grad_batch = min(cfg.n_levels, 300), min(cfg.grad_batch, 256)
    if cfg.grad_seeds is None:
        cfg.grad_seeds = min(p.grad_seeds, len(cfg.seeds))
    elif cfg.grad_seeds > len(cfg.seeds):
        raise UsageError(f"--grad-seeds {cfg.grad_seeds}: only {len(cfg.seeds)} seeds are "
                         f"trained (--seeds, one with --quick); pass at most that many")
    return p


@dataclass(frozen=True)
class Job:
    """One stage the paper pipeline runs for an analysis: `config()` (built when the stage runs,
    so planning reads nothing from disk) is executed unless `out`.json is up to date with the
    final checkpoints of `students` (keys such as "opd_s0"). `positional` is the config field the
    recorded command gives as bare arguments.

    A plan receives the pipeline `p` (`Pipeline`): `p.figs` (the
    setting's figures folder), `p.students` ({"opd_s0": run folder, ...}), `p.base` (the
    teacher), `p.ckpts()` (step 0, then every student), `p.cfg` (its `ReproduceConfig`: seeds,
    context, n_levels, ...), `p.preset`, `p.threads` and `p.ckpt_kw` (fields to pass on)."""

    label: str
    out: Path
    config: Callable[[], Any]
    students: tuple[str, ...]
    positional: str = "ckpt"

    @property
    def json(self) -> Path:
        return analysis.json_of(analysis.figure_stem(self.out, ""))


@dataclass
class Pipeline:
    """What every step of one pipeline invocation shares."""

    cfg: ReproduceConfig
    preset: Preset
    argv: list[str]
    name: str
    runs: Path
    figs: Path
    manifest: Manifest
    task_flags: list[str]  # train.distill's task flags (a fetched teacher names no task)
    task_kw: dict  # the teacher evaluation's task fields
    ckpt_kw: dict  # every later analysis's task options
    teacher_tag: str = ""  # a teacher of other --teacher-steps than the published setting's
    base: Path = Path()
    teacher_final: Path = Path()
    student_init: Path = Path()
    students: dict[str, Path] = field(default_factory=dict)  # "opd_s0" -> run folder
    student_args: dict[str, list[str]] = field(default_factory=dict)

    @property
    def threads(self) -> dict:
        return {"threads": self.cfg.threads}

    def final_of(self, *runs) -> list[Path]:
        """The inputs of a stage over `runs`: it reruns only when one of them changes."""
        return [self.teacher_final] + [Path(r) / "checkpoints" /
                                       f"step_{self.cfg.distill_steps:06d}" for r in runs]

    def ckpts(self) -> list[str]:
        """The students' step 0 first (claims and the summary read it as the null), then a
        cross-model teacher, then the students."""
        return [str(self.student_init), *([str(self.base)] if self.cfg.student_from else []),
                *(str(p) for p in self.students.values())]

    def command(self) -> list[str]:
        return ["python", "-m", "nca_interp.paper.reproduce", *self.argv]

    def kept(self, step: str) -> bool:
        """Whether --keep leaves `step` (a step, or an analysis within `analyses`) as it is."""
        keep = set(self.cfg.keep or ())
        return step in keep or (step in planned() and "analyses" in keep)

    def needed(self) -> set[str]:
        """The students ("opd_s0", ...) the steps left to run read: all of them unless --keep
        leaves the context return as it is; then those of the trajectory and of each analysis's
        stages (`Job.students`, from its plan: nothing is read from disk)."""
        cfg, every = self.cfg, set(self.students)
        if not self.kept("context_return"):
            return every
        need = set()
        if not self.kept("over_training"):
            need |= {k for k in every if trajectory_run(cfg, k)}
        for name in planned() if cfg.analyses else ():
            jobs = plan_of(name)(self) if not self.kept(name) else []
            need |= {k for job in ([] if isinstance(jobs, str) else jobs) for k in job.students}
        return need


def trajectory_run(cfg: ReproduceConfig, key: str) -> bool:
    """Whether the trajectory follows student `key` ("opd_s0"): every run of the first seed,
    every seed with one method or with --dose."""
    return cfg.dose or len(cfg.methods) == 1 or key.endswith(f"_s{cfg.seeds[0]}")


def plan(cfg: ReproduceConfig, argv: list[str]) -> Pipeline:
    preset = apply_preset(cfg)
    if cfg.analyses and set(cfg.methods) != {"opd", "nca"}:
        raise UsageError("the analyses compare OPD with NCA: pass --methods opd,nca, or "
                         "--analyses false for a sweep row")
    idle = [k for k in cfg.keep or () if k in keepable()[2:] and not cfg.analyses]
    if idle:
        raise UsageError(f"--keep {','.join(idle)}: --analyses false runs no analysis to keep; "
                         "drop it from --keep")
    unknown = set(dict(preset.patching_kw)) - {f.name for f in fields(patching.PatchingConfig)}
    if unknown:
        raise UsageError(f"preset {cfg.task}: patching_kw names {', '.join(sorted(unknown))}, "
                         f"not an option of nca_interp.patching; fix "
                         f"nca_interp/paper/settings.toml")
    name = cfg.name or cfg.task
    runs, figs = Path(cfg.runs), Path(cfg.figures) / name
    changes, setting = published_changes(cfg, name), name
    teacher_tag = ""
    if changes and not cfg.publish:
        tag = "quick" if cfg.quick else "custom_" + hashlib.sha1(
            json.dumps(changes, sort_keys=True, default=str).encode()).hexdigest()[:6]
        name = f"{name}_{tag}"
        figs = runs / "figures" / name
        if "teacher_steps" in changes:  # never train the published setting's teacher further
            teacher_tag = f"_{tag}"
        print(f"[own folder] this command differs from the published setting {setting} "
              f"({describe(changes)}): its figures go to {figs}, its students to "
              f"{runs}/{name}_*; the published files are left as they are (--publish "
              "replaces them)", flush=True)
    elif changes:
        print(f"[publish] replacing the published files of {figs} with a run that differs "
              f"from its setting: {describe(changes)}", flush=True)
    figs.mkdir(parents=True, exist_ok=True)
    # a fetched teacher has no run config naming its task: its evaluation and the students'
    # training are told; --task-options reach those and every analysis (after the preset's)
    as_is = preset.fetched_as_is
    options = merged_task_options(preset.task_options if as_is else (), cfg.task_options)
    return Pipeline(
        cfg, preset, argv, name, runs, figs, Manifest(figs / "manifest.json", cfg),
        task_flags=[*(["--task", preset.task] if as_is else []),
                    *(["--task-options", ",".join(options)] if options else [])],
        task_kw={**({"task": preset.task} if as_is else {}),
                 **({"task_options": options} if options else {})},
        ckpt_kw={"task_options": cfg.task_options} if cfg.task_options else {},
        teacher_tag=teacher_tag)


# Flags that change how a pipeline runs or where, not what it publishes.
_NOT_PUBLISHED = ("threads", "jobs", "png", "keep", "runs", "figures", "publish",
                  "teacher_only")


def published_changes(cfg: ReproduceConfig, name: str) -> dict[str, tuple]:
    """What this pipeline's config changes of the published setting `name` (field -> (the
    setting's value, this one's)) when it would write into the repository's figures/NAME;
    empty when it is the setting's own command, no published setting, or another --figures."""
    setting = settings().get(name)
    if setting is None or Path(cfg.figures).resolve() != FIGURES.resolve():
        return {}
    published = parse_config(ReproduceConfig, shlex.split(setting.command(name))[3:])
    apply_preset(published)
    old, new = to_dict(published), to_dict(cfg)
    return {k: (old[k], new[k]) for k in new if k not in _NOT_PUBLISHED and old[k] != new[k]}


def describe(changes: dict[str, tuple]) -> str:
    return "; ".join(f"--{k.replace('_', '-')} {a} -> {b}" for k, (a, b) in changes.items())


def make_teacher(p: Pipeline) -> None:
    """Train the teacher (a fetched one without `sft_args` is used as it is; with them it is
    fine-tuned from the fetched weights) and evaluate it in each context."""
    cfg, preset = p.cfg, p.preset
    p.base = teacher_folder(preset, p.runs, cfg.task + p.teacher_tag)
    if preset.fetched_as_is:
        p.teacher_final = p.base  # the registry weights, as fetched
    else:
        base_args = ["--out", str(p.base), *preset.sft_args, "--steps", str(cfg.teacher_steps),
                     *PRECISION, "--threads", str(cfg.threads)]
        for run in ([p.runs / f"{preset.teacher_init}_base"] if preset.teacher_init else []) \
                + [p.base]:
            if kept.restore(run):
                print(f"[kept] {run}: the teacher kept in git, copied from "
                      f"{kept.KEPT / run.name} (python -m nca_interp.paper.kept)")
        if preset.teacher_init:
            init = p.runs / f"{preset.teacher_init}_base"
            if latest_step_checkpoint(init) is None:
                raise RunError(f"--task {cfg.task}: its teacher starts from {init}, which is "
                               f"not trained; run python -m nca_interp.paper.reproduce --task "
                               f"{preset.teacher_init} first")
            base_args += ["--init", str(init)]
        elif preset.fetched:
            from nca_interp.fetch import fetch

            base_args += ["--init", str(fetch(preset.fetched))]
        p.teacher_final = p.base / "checkpoints" / f"step_{cfg.teacher_steps:06d}"
        stage("teacher", p.manifest, [p.teacher_final], sft.execute,
              parse_config(sft.SFTConfig, base_args), positional=None)
        record_training_time(p.manifest, p.base, p.teacher_final, base_args, "train.sft")
    for kind in preset.teacher_contexts:
        out = p.figs / teacher_file(kind)
        stage(f"teacher evaluation ({kind})", p.manifest, [out], evaluate.execute,
              evaluate.EvalConfig(ckpt=[str(p.base)], **p.task_kw, context=kind,
                                  n_levels=cfg.n_levels, out=str(out), **p.threads),
              inputs=[p.teacher_final])


def train_students(p: Pipeline) -> None:
    """Every (seed, method) student, `jobs` at a time; the disk checked for all first."""
    cfg, preset = p.cfg, p.preset
    p.student_init = p.base
    if cfg.student_from:
        p.student_init = p.runs / f"{cfg.student_from}_base"
        if latest_step_checkpoint(p.student_init) is None:
            raise RunError(f"--student-from {cfg.student_from}: {p.student_init} is not "
                           f"trained; run python -m nca_interp.paper.reproduce --task "
                           f"{cfg.student_from} "
                           "--teacher-only first")
    cross = ["--teacher", str(p.base)] if cfg.student_from else []
    pending = []
    for seed in cfg.seeds:
        for method in cfg.methods:
            out = p.runs / f"{p.name}_{method}_s{seed}"
            p.students[f"{method}_s{seed}"] = out
            args = ["--method", method, "--student", str(p.student_init), *cross,
                    *p.task_flags, "--out", str(out), "--context", cfg.context, "--steps",
                    str(cfg.distill_steps), "--batch", str(cfg.batch), "--lr", str(cfg.lr),
                    *(["--warmup", str(preset.warmup)] if preset.warmup != 10 else []),
                    "--beta", str(cfg.beta), *estimator_args(cfg),
                    "--save-every", str(cfg.save_every), "--seed", str(seed),
                    *PRECISION, "--threads", str(max(1, cfg.threads // cfg.jobs))]
            p.student_args[f"{method}_s{seed}"] = args
            final = out / "checkpoints" / f"step_{cfg.distill_steps:06d}"
            if final.exists() and not distilled_from(out, p.student_init, p.teacher_final):
                raise RunError(f"{out} was distilled from another {p.student_init} than the "
                               f"one there now; delete {out} to rebuild it")
            if final.exists():
                print(f"[skip] {method} seed {seed}: outputs exist")
                p.manifest.skipped.append(f"{method} seed {seed}")
            else:
                pending.append((f"{method} seed {seed}", final, out, args))
    needed = p.needed()
    for item in list(pending):
        if item[2] not in {p.students[k] for k in needed}:
            print(f"[keep] {item[0]}: not trained, every step that reads it is kept (--keep)")
            p.manifest.skipped.append(f"{item[0]} (not needed: --keep)")
            pending.remove(item)
    if pending:  # all of them, before the first: a full disk kills a run at a save
        weights = weight_bytes(p.student_init)
        needs = [disk_needed(weights, cfg.distill_steps, cfg.save_every,
                             int(last.name[5:]) if (last := latest_step_checkpoint(out)) else 0)
                 for _, _, out, _ in pending]  # kept by each; held at a save by `jobs` at once
        check_disk(p.runs, sum(k for k, _ in needs) + min(cfg.jobs, len(needs)) * 3 * weights,
                   f"distilling {len(pending)} students of {p.student_init}", DISK_REMEDY)
    run_parallel(pending, cfg.jobs, p.manifest)
    for key, run in p.students.items():
        final = run / "checkpoints" / f"step_{cfg.distill_steps:06d}"
        record_training_time(p.manifest, run, final, p.student_args[key], "train.distill")
    for c in [p.student_init, *(p.students[k] for k in needed)]:
        verify_folder(c)


def context_return(p: Pipeline) -> None:
    """Every checkpoint with and without c, the summary over seeds, and again with a control
    context of c's form that is wrong (robust or blind)."""
    cfg, figs, finals = p.cfg, p.figs, p.final_of(*p.students.values())
    ev_json = figs / CONTEXT_RETURN
    stage("context-return evaluation", p.manifest, [ev_json], evaluate.execute,
          evaluate.EvalConfig(ckpt=p.ckpts(), **p.ckpt_kw, context=cfg.context,
                              n_levels=cfg.n_levels, out=str(ev_json), **p.threads),
          inputs=finals)
    derive_context_return(figs)
    p.manifest.record([str(figs / "context_return.md"),
                       str(figs / "context_return_summary.json")], p.command(), 0.0)
    ctrl_json = figs / CONTEXT_CONTROL
    stage("context control", p.manifest, [ctrl_json], evaluate.execute,
          evaluate.EvalConfig(ckpt=p.ckpts(), **p.ckpt_kw, context=cfg.context,
                              n_levels=cfg.n_levels, control=True, out=str(ctrl_json),
                              **p.threads), inputs=finals)


def over_training(p: Pipeline) -> None:
    """Context return over training: every run of the first seed (every seed with one method,
    or with --dose), then harm against drift."""
    cfg, figs = p.cfg, p.figs
    traj_runs = [str(r) for k, r in p.students.items() if trajectory_run(cfg, k)]
    stage("trajectory", p.manifest, [figs / TRAJECTORY], trajectory.execute,
          trajectory.TrajectoryConfig(
              runs=traj_runs, context=cfg.context, n_levels=min(cfg.n_levels, 500),
              drift_levels=min(cfg.n_levels, 256), every=cfg.trajectory_every,
              control=cfg.dose, out=str(figs / "trajectory"), png=cfg.png, **p.threads),
          inputs=p.final_of(*traj_runs), positional="runs")
    if cfg.dose:
        stage("harm against drift", p.manifest, [figs / HARM_DRIFT], dose.execute,
              dose.DoseConfig(trajectory=[str(figs / TRAJECTORY)],
                              out=str(figs / "harm_drift"), png=cfg.png),
              inputs=[figs / TRAJECTORY], positional="trajectory")


def analyses(p: Pipeline) -> None:
    """Each registered analysis but those run by a step of their own (`OWN_STEPS`), in the
    registry's order, by its plan (`plan_of`: the built-in ones' below, the default for any
    other); one that --keep names is left as it is, one whose plan says why it does not apply
    is skipped."""
    for name in planned():
        spec = analysis.spec(name)
        if p.kept(spec.name):
            print(f"[keep] {spec.name}: its outputs are kept as they are (--keep)")
            p.manifest.skipped.append(f"{spec.name} (kept by --keep)")
            continue
        jobs = plan_of(spec.name)(p)
        if isinstance(jobs, str):
            p.manifest.data[spec.name] = jobs
            print(f"[skip] {spec.name}: {jobs}")
            continue
        execute = spec.load().execute
        for job in jobs:
            stage(job.label, p.manifest, [job.json], execute, job.config(),
                  inputs=p.final_of(*(p.students[k] for k in job.students)),
                  positional=job.positional)


def plan_layer_sim(p: Pipeline) -> list[Job]:
    """layer_sim at each position set, over every checkpoint (PNGs: rendered at the end)."""
    return [Job(
        f"layer_sim at {at} positions", p.figs / stem,
        lambda at=at, stem=stem: layer_sim.LayerSimConfig(
            ckpt=p.ckpts(), **p.ckpt_kw, context=p.cfg.context, at=at, out=str(p.figs / stem),
            **p.threads), tuple(p.students)) for at, stem in LAYER_SIM_STAGES.items()]


def plan_grad_align(p: Pipeline) -> list[Job]:
    """grad_align over the saved checkpoints of each aligned run (`aligned_runs`)."""
    cfg, preset = p.cfg, p.preset

    def config(key: str, stem: str):
        return grad_align.GradAlignConfig(
            ckpt=grad_checkpoints(p.students[key], cfg.grad_every), teacher=str(p.base),
            **p.ckpt_kw, context=cfg.context, batch=cfg.grad_batch,
            micro_batch=min(preset.grad_micro_batch, max(1, cfg.grad_batch // 2)),
            parts=preset.grad_parts, out=str(p.figs / stem), **p.threads)

    jobs = []
    for method, seed, suffix in aligned_runs(cfg.seeds, cfg.grad_seeds):
        key, stem = f"{method}_s{seed}", grad_stem(method, seed if suffix else None)
        jobs.append(Job(f"grad_align {method} seed {seed}", p.figs / stem,
                                 lambda key=key, stem=stem: config(key, stem), (key,)))
    return jobs


def plan_param_delta(p: Pipeline) -> list[Job]:
    """param_delta of every student from the common start, the same-method control pair (OPD
    seeds 0 and 1) and the cross-method pair of the first seed."""
    cfg, students, s0 = p.cfg, p.students, p.cfg.seeds[0]
    keys = tuple(f"{m}_s{s}" for s in cfg.seeds for m in ("opd", "nca"))

    def config():
        runs = [str(students[k]) for k in keys]
        return param_delta.ParamDeltaConfig(
            ckpt=runs, init=str(p.base), control=[runs[0], runs[2]] if len(cfg.seeds) > 1
            else [], pair=[str(students[f"opd_s{s0}"]), str(students[f"nca_s{s0}"])],
            out=str(p.figs / "param_delta"), **p.threads)

    return [Job("param_delta", p.figs / PARAM_DELTA, config, keys)]


def plan_patching(p: Pipeline) -> list[Job] | str:
    """Patching of the first seed's OPD and NCA students (and the teacher when the preset says
    so), or the preset's reason to skip it."""
    if p.preset.patching:
        return p.preset.patching
    s0 = p.cfg.seeds[0]
    keys = (f"opd_s{s0}", f"nca_s{s0}")
    return [Job("patching", p.figs / PATCHING, lambda: patching.PatchingConfig(
        ckpt=[*(str(p.students[k]) for k in keys),
              *([str(p.base)] if p.preset.patching_base else [])],
        context=p.cfg.context, out=str(p.figs / "patching"), **patching_fields(p),
        **p.threads), keys)]


# the lens reads each run at these saved steps (0: the teacher, shared), on at most this many
# held-out items (enough for a few harm cases where OPD breaks: its forks are swapped)
LENS_STEPS = ("0", "mid", "final")
LENS_ITEMS = 64


def plan_lens(p: Pipeline) -> list[Job]:
    """The two-view lens of the first seed's OPD and NCA students over training (step 0, the
    middle and the final checkpoint): where in the response the returning c still acts, against
    a wrong c' and the floor, and the forks of the harm and help cases."""
    s0 = p.cfg.seeds[0]
    keys = (f"opd_s{s0}", f"nca_s{s0}")
    return [Job("lens", p.figs / LENS, lambda: lens.LensConfig(
        ckpt=[str(p.students[k]) for k in keys], **p.ckpt_kw, context=p.cfg.context,
        n_levels=min(p.cfg.n_levels, LENS_ITEMS), over_training=list(LENS_STEPS),
        out=str(p.figs / "lens"), **p.threads), keys)]


def default_plan(name: str):
    """The plan of an analysis the pipeline has none of its own for: one stage over every
    student's final folder, its report `<figures>/<name>.json`, with the pipeline's context
    and threads where its config (`AnalysisSpec.config_class`) takes them."""
    def plan(p: Pipeline) -> list[Job] | str:
        spec = analysis.spec(name)
        cls = spec.config_class()
        if cls is None:
            return (f"{spec.module} defines no config dataclass (<Name>Config), so the default "
                    "plan cannot build its stage: give it one, or its own plan (add_plan)")
        names = {f.name for f in fields(cls)}
        where = next((f for f in analysis.PATH_FIELDS if f in names), None)
        if where is None or "out" not in names:
            return (f"{cls.__name__} takes no checkpoint list ({' or '.join(analysis.PATH_FIELDS)}"
                    ") and out, so the default plan cannot build its stage: add_plan gives it "
                    "its own")
        keys = tuple(sorted(p.students))
        extra = {k: getattr(p.cfg, k) for k in ("context", "threads") if k in names}
        return [Job(f"{name} over every student", p.figs / name,
                    lambda: cls(**{where: [str(p.students[k]) for k in keys],
                                   "out": str(p.figs / name)}, **extra), keys, where)]
    plan.__qualname__ = f"default_plan({name!r})"
    return plan


PLANS: dict = {name: globals()[f"plan_{name}"] for name in OWN_PLANS}  # the built-in plans


def add_plan(name: str, plan) -> None:
    """Give analysis `name` a plan of its own in the `analyses` step (`plan(p) -> [Job, ...]`
    or a string saying why it is skipped), in place of `default_plan`."""
    if name in OWN_STEPS:
        raise UsageError(f"{name} runs in the pipeline's {OWN_STEPS[name]} step, not by a plan")
    PLANS[name] = plan


def plan_of(name: str):
    """The plan the `analyses` step runs analysis `name` by: its own (`PLANS`) or the
    default (`default_plan`)."""
    return PLANS.get(name) or default_plan(name)


def patching_fields(p: Pipeline) -> dict:
    """The patching stage's task and scope: the pipeline's task options and held-out levels,
    then the preset's `patching_kw` (its levels replace the evaluation's; its task options
    come after the pipeline's, e.g. a wider pool of questions to find enough cases in)."""
    kw = dict(p.preset.patching_kw)
    options = merged_task_options(p.ckpt_kw.get("task_options"), kw.pop("task_options", []))
    return {"n_levels": p.cfg.n_levels, **kw, **({"task_options": options} if options else {})}


def publish(p: Pipeline, t_start: float) -> float:
    """Every figure drawn from the JSON (stale ones removed), the manifest closed, the
    folder's README generated; the pipeline's seconds."""
    from nca_interp.paper import report

    written = render_figures(p.figs, p.cfg.png)
    prune_figures(p.figs, written, p.manifest)
    p.manifest.record(written, p.command(), 0.0)
    total = finish(p.manifest, t_start, p.cfg)  # before the README, which shows the time
    report.write_page(p.figs, report.render(p.figs))
    return total


def open_log(path: Path):
    """`path` opened for a stage's log, never through a link planted at its name."""
    import stat

    from nca_interp.fsio import UnsafePathError, check_target

    fd = os.open(check_target(path), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:  # a hard link: another file's data
        os.close(fd)
        raise UnsafePathError(f"{path} is not a plain file of its own (a hard link to another "
                              "file, a pipe or a device); remove it")
    os.ftruncate(fd, 0)  # only once it is known to be the log's own file
    return os.fdopen(fd, "w")




def runs_home(runs: str) -> None:
    """Keep the default `runs/` outside the work tree: a fresh checkout has lost every run kept
    inside it (twice, hours of a teacher each time). When `runs` is the default and absent, it
    becomes a link to $NCA_INTERP_RUNS (`fsio.link_runs_home`), so the runs outlive the
    checkout while every recorded path (`runs/<name>`) stays as it was. An existing folder or
    link is used as it is; any other --runs is the user's choice."""
    link = Path(runs)
    if runs != "runs" or link.is_dir():
        return
    if link.exists() and not link.is_symlink():
        raise UsageError(f"{link.resolve()} is a file, not the folder runs go to; move it away "
                         "or pass --runs DIR")
    link_runs_home(Path(runs) / "x")


def main(argv: list[str] | ReproduceConfig | None = None) -> None:
    # the manifest records the command line as typed: a config `parse_early` read came from
    # this process's own
    typed = own_flags(sys.argv[1:])[0] if isinstance(argv, ReproduceConfig) else list(argv or [])
    cfg = parse_config(ReproduceConfig, argv, __doc__)
    t_start = time.time()
    runs_home(cfg.runs)
    p = plan(cfg, typed)
    make_teacher(p)
    if cfg.teacher_only:
        print(f"teacher {p.base} evaluated; --teacher-only: stopping")
        return
    train_students(p)
    for step in (context_return, over_training, *([analyses] if cfg.analyses else [])):
        if step.__name__ in (cfg.keep or ()):
            print(f"[keep] {step.__name__}: its outputs are kept as they are (--keep)")
            p.manifest.skipped.append(f"{step.__name__} (kept by --keep)")
        else:
            step(p)
    total = publish(p, t_start)
    print(f"reproduce {p.name}: " + (f"done in {total / 60:.1f} min" if cfg.analyses else
                                     "sweep row done (--analyses false)")
          + f"; figures in {p.figs}")


def finish(manifest: Manifest, t_start: float, cfg: ReproduceConfig) -> float:
    """Record the pipeline's wall time: summed over invocations while earlier ones made some of
    what is published (a resumed pipeline adds up), this invocation's alone once it made all of
    the setting's own outputs (only the teacher's stages, shared with other settings, may have
    been up to date); then an earlier invocation's note on how it ran no longer applies, and
    the new note names the teacher's stages it found made (the time is not "all stages").
    An earlier total is summed only when recorded (`pipeline_until`) after the students on disk
    existed; otherwise this invocation's time stands alone with a note of what it found made
    (an invocation that failed before this point records no time)."""
    total = time.time() - t_start
    if manifest.ran:  # render-only: 0
        before = [n for n in manifest.skipped if not n.startswith("teacher")]
        fresh = not before and not manifest.resumed
        # an earlier total counts only if the students on disk existed when it was recorded
        # (one recorded before they were trained, e.g. for students since retrained on another
        # machine, or by an older manifest without the time, is another run's)
        until = manifest.data.get("pipeline_until")
        first = first_student_checkpoint(cfg)
        counted = until is not None and (first <= until or first == float("inf"))
        earlier = 0 if fresh or not counted else manifest.data.get("pipeline_seconds", 0)
        manifest.data["pipeline_seconds"] = round(earlier + total, 1)
        manifest.data["pipeline_until"] = round(time.time(), 1)
        shared = [n for n in manifest.skipped if n.startswith("teacher")]
        if fresh and shared:  # never "all stages" when the teacher was made before
            manifest.data["note"] = (f"all stages but the teacher's, up to date before it "
                                     f"({', '.join(shared)}; their times are in manifest.json)")
        elif fresh:
            manifest.data.pop("note", None)
        elif not earlier:  # made partly outside any recorded invocation: say so, not "all"
            manifest.data["note"] = "this invocation only; " + "; ".join(
                [*([f"made before it: {', '.join(before)}"] if before else []),
                 *([f"resumed from a checkpoint made before it: "
                    f"{', '.join(manifest.resumed)}"] if manifest.resumed else []),
                 "each run's own training time is in manifest.json"])
    write_text(manifest.path, json.dumps(manifest.data, indent=1))
    return total


def first_student_checkpoint(cfg: ReproduceConfig) -> float:
    """When the setting's first student checkpoint was written (inf before any)."""
    runs = [Path(cfg.runs) / f"{cfg.name or cfg.task}_{m}_s{s}" for m in cfg.methods
            for s in cfg.seeds]
    return min((mtime(p) for r in runs for p in (r / "checkpoints").glob("step_*")),
               default=float("inf"))


def running_seconds(times: list[float], pause: float = 60.0) -> tuple[float, list[float]]:
    """Seconds a run was running, from the times of its step records: the gaps between
    records, except a gap over `pause` seconds and over 10x the median gap (the run was killed
    and resumed later), which counts as one median step. Returns (seconds, the pauses)."""
    gaps = np.diff(np.asarray(times, dtype=float))
    if not len(gaps):
        return 0.0, []
    median = float(np.median(gaps))
    paused = (gaps > pause) & (gaps > 10 * median)
    return float(gaps[~paused].sum() + median * paused.sum()), [float(g) for g in gaps[paused]]


def recorded_after(manifest: Manifest, path: Path) -> bool:
    """Whether the manifest's entry for `path` was recorded once it existed as it is now (a
    run retrained since, e.g. after its checkpoints were lost, needs a new entry)."""
    entry = manifest.data["files"].get(str(path))
    if entry is None:
        return False
    recorded = time.mktime(time.strptime(entry["date"], "%Y-%m-%d %H:%M:%S"))
    return recorded >= mtime(path) - 1.0  # dates are kept to the second


def run_seconds(run: Path) -> tuple[float, str] | None:
    """A run's training time read from its metrics.jsonl, and how: the wall clock between its
    first and last record less the pauses of a kill and resume (records carry `time`), or for
    runs logged before that, the sum of per-step times; None without either."""
    records = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines() if ln] \
        if (run / "metrics.jsonl").exists() else []
    if records and "time" in records[0] and "time" in records[-1]:
        seconds, pauses = running_seconds([r["time"] for r in records if "time" in r])
        return seconds + records[0].get("step_s", 0.0), "wall clock of metrics.jsonl records" + (
            f" less {len(pauses)} pause(s) of {', '.join(f'{p:.0f}' for p in pauses)} s (a "
            "killed run resumed later)" if pauses else "")
    if records and all("step_s" in r for r in records):
        return (sum(r["step_s"] for r in records),
                "sum of step_s in metrics.jsonl (evaluations and saves excluded)")
    return None


def record_training_time(manifest: Manifest, run: Path, final: Path, args: list[str],
                         module: str) -> None:
    """A training stage that ran outside this pipeline (an earlier invocation, or a job queue
    running runs side by side) still gets its time in the manifest, read from the run's own
    metrics.jsonl: wall clock between its first and last record (records carry `time`), or
    for runs logged before that, the sum of per-step times (distillation: excludes evals and
    saves), or else the checkpoint file times extrapolated over the steps before the first
    checkpoint. `seconds_from` says which."""
    if not final.exists() or recorded_after(manifest, final):
        return
    if (logged := run_seconds(run)) is not None:
        seconds, how = logged
    else:
        ckpts = sorted((run / "checkpoints").glob("step_*"))
        s0, s1 = int(ckpts[0].name[5:]), int(final.name[5:])
        if len(ckpts) < 2 or s1 <= s0:
            return
        seconds = (mtime(final) - mtime(ckpts[0])) * s1 / (s1 - s0)
        how = "checkpoint file times, extrapolated to the steps before the first checkpoint"
    manifest.data["files"][str(final)] = {
        "command": " ".join(["python", "-m", module, *args]),
        "commit": read_run_config(run).get("git_commit") or git_commit(),  # what trained it
        "seeds": manifest.cfg.seeds, "seconds": round(seconds, 1),
        "seconds_from": f"{how} (trained outside this invocation)",
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime(final)))}
    write_text(manifest.path, json.dumps(manifest.data, indent=1))


if __name__ == "__main__":
    sys.exit(entry(main, parsed=PARSED))
