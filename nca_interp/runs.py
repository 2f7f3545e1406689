"""What the analyses read from run directories: the task a checkpoint was trained on, its
context kind, its teacher and its initial checkpoint. Shared plumbing, one floor below the
analyses (which never import each other for it)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from nca_interp.assets import resolve
from nca_interp.checkpoint import content_digest, read_run_config
from nca_interp.errors import UsageError
from nca_interp.tasks import Task, option_file, parse_task_options, task_from_record

__all__ = ["anchored", "check_context", "check_data_unchanged", "check_same_tokenizers",
           "check_trained_on", "in_progress", "initial_of", "lr_at", "recorded_digest",
           "resolve_task_and_context", "step_of", "task_for_checkpoints", "teacher_of",
           "with_initial_checkpoints"]


def check_trained_on(path: str | Path | None, task: str, what: str) -> None:
    """Refuse checkpoint `path` (a teacher, or one placed beside a report) whose run config
    records another task than `task` (a frozenlake teacher gave sokoban students, angles and KLs
    without a word: the fourth and fifth probes). One that records none (a fetched or foreign
    model) is taken as given."""
    if not path:
        return
    recorded = read_run_config(path).get("task")
    name = recorded.get("name") if isinstance(recorded, dict) else recorded
    if isinstance(name, str) and name != task:
        raise UsageError(f"{what} {path} was trained on {name}, not on {task} (its "
                         f"run_config.json): use a {task} checkpoint, or pass --task {name} "
                         "if that is the task meant")


def task_for_checkpoints(paths: list[str], name: str | None = None,
                         fmt: str | None = None, options: list[str] | None = None) -> Task:
    """The task recorded in the first of `paths` whose run_config.json names one (a foreign
    checkpoint has none: then `name` with that task's defaults, and without `name` a refusal
    that lists the tasks and their contexts), with
    KEY=VALUE `options` applied (e.g. `opcd`'s data files). Checkpoints whose recorded tasks
    still differ once `options` are applied (students of another knowledge base than the
    first path's) are refused: their questions would silently be the first one's."""
    from nca_interp.checkpoint import verify_folder

    for p in paths:
        verify_folder(p)  # a missing folder is named as such, not as one that records no task
    records = [(p, read_run_config(p).get("task")) for p in paths]
    bad = next(((p, r) for p, r in records if r is not None and not isinstance(r, dict)), None)
    if bad is not None:
        raise UsageError(f"{bad[0]}'s run config records its task as {type(bad[1]).__name__} "
                         f"{str(bad[1])[:40]!r}, not the mapping of the task's fields; the file "
                         "is damaged: restore it, or pass --task and --context")
    recorded = [(p, r) for p, r in records if isinstance(r, dict)]
    if not recorded and name is None:
        raise UsageError(f"{paths[0]} records no task (its run_config.json is missing: a "
                         f"checkpoint not trained by this package); pass --task and --context. "
                         f"{task_menu()}")
    recorded = [(p, anchored(p, r)) for p, r in recorded]
    task = task_from_record(recorded[0][1] if recorded else None, name, fmt, options)
    for path, record in recorded[1:]:
        theirs = name or record.get("name") or "sokoban"  # as task_from_record names it
        if theirs != task.name:  # before its options are read as this task's
            raise UsageError(f"these checkpoints were trained on different tasks ({task.name} "
                             f"in {recorded[0][0]}, {theirs} in {path}); compare checkpoints "
                             "of one task")
        other = task_from_record(record, name, fmt, options)
        if other.config != task.config:
            diff = ", ".join(f"{k}: {getattr(task.config, k)!r} in {recorded[0][0]}, "
                             f"{getattr(other.config, k)!r} in {path}"
                             for k in vars(task.config)
                             if getattr(task.config, k) != getattr(other.config, k))
            raise UsageError(f"these checkpoints were trained on different task configs "
                             f"({diff}); compare runs of one config, or pass --task-options "
                             "KEY=VALUE to evaluate all of them on one")
    given = set(parse_task_options(task.name, options)) if options else set()
    for path, _ in recorded:
        check_data_unchanged(path, task, given)
    return task


def anchored(path: str | Path, record: dict) -> dict:
    """Task record `record` of run `path` with each relative file option (`data=S/d.jsonl`,
    as the training command gave it) read where the run read it: the absolute path its
    `inputs["task option K"]` records, while a file is there. Read against the folder a later
    command runs in, it named another file (probe 10 Q-I)."""
    inputs = read_run_config(path).get("inputs")
    inputs = inputs if isinstance(inputs, dict) else {}
    out = dict(record)
    for key, value in record.items():
        was = inputs.get(f"task option {key}")
        where = was.get("path") if isinstance(was, dict) else None
        at = "@" if isinstance(value, str) and value.startswith("@") else ""  # pattern=@FILE
        if isinstance(value, str) and value.removeprefix(at) \
                and not Path(value.removeprefix(at)).expanduser().is_absolute() \
                and isinstance(where, str) and Path(where).is_absolute() \
                and option_file(where) is not None:
            out[key] = at + where
    return out


def check_data_unchanged(path: str | Path, task: Task, given: set[str] | None = None) -> None:
    """Refuse a task that reads, for a data file run `path` recorded (`inputs["task option
    K"]`), content other than the digest the run recorded: its seeded held-out split would be
    drawn anew, and could hold training items (probe 9 Q-C), or its c would be another (probe
    10 Q-I: the run config's relative path read from another folder). Only another file named
    on purpose (K among `given`, this command's options), or a run recorded before digests
    were kept, is not checked."""
    inputs = read_run_config(path).get("inputs")
    for flag, was in (inputs if isinstance(inputs, dict) else {}).items():
        key = flag.removeprefix("task option ")
        if key == flag or not isinstance(was, dict) or not isinstance(was.get("path"), str):
            continue
        file = option_file(getattr(task.config, key, None))
        if file is None:
            continue
        file = file.resolve()
        same = file == Path(was["path"])
        if key in (given or set()) and not same:
            continue
        digest = content_digest(file)
        if digest == was.get("sha256"):
            continue
        if same and key in ("context_file", "control_file", "pattern"):  # no split drawn
            what = {"context_file": "c", "control_file": "the control's c'",
                    "pattern": "the scorer's pattern"}[key]
            raise UsageError(f"{file} ({key}) has changed since {path} trained on it (sha256 "
                             f"{digest} now, {was.get('sha256')} recorded): {what} is no longer "
                             "the one the run was trained with; restore the file, or name the "
                             f"file meant with --task-options {key}=FILE")
        if same:
            raise UsageError(f"{file} ({key}) has changed since {path} trained on it (sha256 "
                             f"{digest} now, {was.get('sha256')} recorded); its held-out split "
                             "may now hold training items: point at the data the run was "
                             "trained on (restore the file), or pass split=train/test in it")
        raise UsageError(f"{key} {getattr(task.config, key)} is read as {file} here, not as "
                         f"the file {path} trained on ({was['path']}): sha256 {digest} now, "
                         f"{was.get('sha256')} recorded; restore that file, or name the file "
                         f"meant with --task-options {key}=FILE")


def task_menu() -> str:
    """The tasks and the context kinds of each, for an error message."""
    from nca_interp.tasks import TASKS, make_task

    parts = []
    for name in TASKS:
        try:
            parts.append(f"{name} ({', '.join(make_task(name).context_kinds)})")
        except (ValueError, OSError):  # a task whose defaults need data files
            parts.append(name)
    return "Tasks (their contexts): " + "; ".join(parts)


def check_context(task: Task, context: str) -> None:
    """Refuse an unknown context kind, and read the context once (a system-prompt file that
    is missing fails here, before any model pass)."""
    kinds = task.context_kinds
    if context not in kinds:
        raise UsageError(f"--context {context!r} is not a context kind of {task.name}; choose "
                         f"one of {', '.join(kinds)}")
    task.context(task.levels("test", 1)[0], context)


def resolve_task_and_context(paths: list[str], task: str | None, context: str | None,
                             options: list[str] | None = None, fmt: str | None = None
                             ) -> tuple[Task, str]:
    """The task and context kind of a list of checkpoints, checked (see `check_context`): the
    one context resolver of every analysis. Default: the context the first run that records
    one was trained with, else the task's."""
    runs = [read_run_config(p) for p in paths]
    found = task_for_checkpoints(paths, task, fmt, options)
    recorded = next(((p, r["context"]) for p, r in zip(paths, runs) if r.get("context")),
                    None)
    ctx = context or (recorded[1] if recorded else None) or found.default_context
    if context is None and recorded and ctx not in found.context_kinds:
        raise UsageError(f"{recorded[0]}'s run config records the context {ctx!r}, which is "
                         f"not a context kind of {found.name}; pass --context (one of "
                         f"{', '.join(found.context_kinds)})")
    check_context(found, ctx)
    return found, ctx


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model",
                   "vocab.txt")


def tokenizer_files(folder: Path) -> tuple[tuple[str, bytes], ...]:
    """The bytes of a folder's tokenizer files, by name (the files present)."""
    return tuple((n, (folder / n).read_bytes()) for n in TOKENIZER_FILES
                 if (folder / n).is_file())


def check_same_tokenizers(paths: Sequence[str | Path]) -> None:
    """Every checkpoint of a comparison reads the same token ids (responses and positions are
    shared between them)."""
    from nca_interp.checkpoint import CheckpointError, check_same_tokenizer, verify_folder

    folders = [verify_folder(p) for p in paths]
    files = {tokenizer_files(f) for f in folders}
    if len(files) == 1 and next(iter(files)):
        return  # byte-identical tokenizer files read the same ids (no transformers import)
    from transformers import AutoTokenizer

    toks = []
    for folder in folders:
        try:
            toks.append(AutoTokenizer.from_pretrained(folder, local_files_only=True))
        except Exception as e:  # noqa: BLE001 - transformers raises many types here
            raise CheckpointError(f"{folder}: tokenizer could not be loaded ({e}); a checkpoint "
                                  "folder must hold its tokenizer files") from e
    for p, t in zip(paths[1:], toks[1:]):
        check_same_tokenizer(toks[0], t, str(paths[0]), str(p))


def teacher_of(path: str, override: str | None) -> str:
    """The teacher run `path` was distilled against: `override` (--teacher) where given, else
    the one its run config records (in self-distillation its start, the student). A recorded
    one whose content differs from the digest the run recorded for it (retrained in place) is
    refused: its KLs and angles would be against another model (probe 10 Q-F)."""
    from nca_interp.checkpoint import verify_folder

    verify_folder(path)  # a missing folder is named as such, not as a missing teacher
    run = read_run_config(path)
    if override:
        return override
    teacher = resolve(_recorded_path(path, run, "teacher"))
    t = teacher or resolve(_recorded_path(path, run, "student"))
    if not t:
        raise UsageError(f"{path} does not name its teacher in run_config.json; pass --teacher")
    was = recorded_digest(run, "--teacher" if teacher else "--student")
    now = content_digest(t) if was and _is_checkpoint(t) else was
    if now != was:
        raise UsageError(f"{path} was distilled against the teacher {t} as it was (sha256 "
                         f"{was}); {t} has changed since (sha256 {now}), so it is not this "
                         "run's teacher: restore the model the run was trained against there, "
                         "or pass --teacher to name a teacher on purpose")
    return t


def recorded_digest(run: dict, flag: str) -> str | None:
    """The sha256 run config `run` records for its input `flag` (`--student`, `--teacher`,
    `task option K`), or None (a run recorded before digests were kept)."""
    inputs = run.get("inputs")
    was = inputs.get(flag) if isinstance(inputs, dict) else None
    digest = was.get("sha256") if isinstance(was, dict) else None
    return digest if isinstance(digest, str) else None


def _is_checkpoint(folder: str) -> bool:
    return Path(folder).is_dir() and (Path(folder) / "config.json").exists()


def _recorded_path(path, run: dict, key: str) -> str | None:
    """The checkpoint a run config records under `key` (teacher, student), or None; anything
    but a path is named as damage (a teacher of 5 was an AttributeError: the sixth probe)."""
    value = run.get(key)
    if value is not None and not isinstance(value, str):
        raise UsageError(f"{Path(path) / 'run_config.json'} records its {key} as "
                         f"{type(value).__name__} {str(value)[:40]!r}, not a checkpoint path; "
                         "the file is damaged: restore it from the run")
    return value


def initial_of(path: str) -> str | None:
    """The checkpoint a distilled run started from (its --student), if recorded; one whose
    content differs from the digest the run recorded for it (retrained in place) is refused:
    it would be read as the run's step 0 and base (probe 9 Q-D)."""
    run = read_run_config(path)
    init = resolve(_recorded_path(path, run, "student"))
    was = recorded_digest(run, "--student")
    if init and was and _is_checkpoint(init):
        now = content_digest(init)
        if now != was:
            raise UsageError(f"{path} started from {init} as it was (sha256 {was}); "
                             f"{init} has changed since (sha256 {now}), so it is not this run's "
                             "step 0 or base: restore the model the run started from there")
    return init


def with_initial_checkpoints(paths: list[str]) -> list[str]:
    """Add the checkpoint each distilled run started from (the base), once, in front."""
    seen = {str(Path(p).resolve()) for p in paths}
    bases = []
    for p in paths:
        init = initial_of(p)
        if init and Path(init).exists() and not (Path(init) / "config.json").exists():
            raise UsageError(f"{p}'s run_config.json records the checkpoint it started from "
                             f"(its student) as {init}, which is no checkpoint folder (no "
                             "config.json); restore that checkpoint there, or the run config "
                             "from the run")
        if init and Path(init).exists() and str(Path(init).resolve()) not in seen:
            seen.add(str(Path(init).resolve()))
            bases.append(init)
    return bases + list(paths)


def step_of(path: str) -> int | None:
    """N of a `step_N` checkpoint, checked against its trainer state (`check_step_record`);
    None for any other folder."""
    from nca_interp.checkpoint import check_step_record, step_number

    return check_step_record(path) if step_number(path) is not None else None


def lr_at(step: int, lr: float, warmup: int, total: int, schedule: str) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    if schedule == "cosine":
        frac = (step - warmup) / max(1, total - warmup)
        return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
    return lr


def in_progress(path: str | Path) -> str | None:
    """What a reader of a run folder's numbers must know when its training is not finished
    (None when it is, or the folder is no run): a live process training it now, or its newest
    saved step short of the steps its run config asks for (a run killed part way: its root
    holds that step, and the same train command resumes it)."""
    from nca_interp.checkpoint import step_number
    from nca_interp.runlock import holder

    run = Path(path)
    if not (run / "run_config.json").is_file() or not (run / "checkpoints").is_dir():
        return None
    who = holder(run)
    if who is not None:
        return (f"{run} is being trained now by {who}: its root holds the newest saved step, "
                "which the next save replaces")
    steps = read_run_config(run).get("steps")
    saved = [n for p in (run / "checkpoints").glob("step_*")
             if (n := step_number(p)) is not None]
    if isinstance(steps, int) and not isinstance(steps, bool) and saved and max(saved) < steps:
        newest = max(saved)
        return (f"{run} is an unfinished run (step {newest} of {steps}): its numbers are step "
                f"{newest}'s; the same train command resumes it")
    return None
