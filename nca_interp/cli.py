"""One dataclass config per entry point: argparse from its fields, JSON round trip.

Field help lives in `field(metadata={"help": ...})`. Tuples are written `6,6`; lists `a,b,c`;
`X | None` fields accept `none`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
import types
import typing
from collections.abc import Mapping
from pathlib import Path

from nca_interp.errors import RunError, UsageError

__all__ = ["FALSE_WORDS", "REPLACED_FLAGS", "TRUE_WORDS", "argv_of", "as_paths",
           "check_arguments", "check_disk", "check_writable", "entry", "finite_json",
           "own_flags", "parse_config", "parse_early", "quiet_interrupt", "same_config",
           "started", "to_dict", "validate", "write_atomic", "write_json"]

if typing.TYPE_CHECKING:
    from _typeshed import DataclassInstance

C = typing.TypeVar("C", bound="DataclassInstance")  # a command's config class

# Ranges of the numeric flags every entry point shares, by field name (a field's own
# `metadata["check"]` overrides; a function returning the rule is read when checked, e.g. from a
# registry). ">0": positive; ">=0"; ">=1"; "choice:a|b|c".
CHECKS = {
    "lr": "lr", "warmup": ">=0", "weight_decay": ">=0",
    "clip": ">0", "beta": "beta", "temperature": "temperature",
    "save_every": ">=1", "eval_every": ">=1", "eval_levels": "levels", "n_levels": "levels",
    "drift_levels": "levels", "n_random": "draws", "n_random_generate": "draws",
    "steps": "steps", "batch": "batch",
    "threads": "threads", "seeds": "seeds",
    "micro_batch": ">=0", "teacher_steps": ">=1", "distill_steps": ">=1", "jobs": ">=1",
    "n_layers": ">=1", "d_model": ">=1", "n_heads": ">=1", "d_mlp": ">=1", "pack": ">=1",
    "p_no_context": "prob", "p_detour": "prob", "num_boxes": ">=1", "size": ">=2",
    "num_holes": ">=0", "n_entities": ">=2", "n_attributes": ">=1", "word_len": ">=1",
    "seed": "seed", "n_boot": ">=1", "n_cases": ">=1",
    "method": "choice:opd|nca", "schedule": "choice:constant|cosine",
    "precision": "choice:auto|fp32|bf16", "fmt": "choice:compact|textarena",
    "at": "choice:response|generating|prompt", "responses": "choice:reference|base|own",
    "rows": "choice:all|task", "arch": "choice:qwen3|qwen2|llama",
    "follow_ups": "choice:open|full", "layout": "choice:rows|facts|table",
    "dtype": "choice:float32|bfloat16|float16", "every": ">=1",
    "kind": "choice:harm|help", "scope": "choice:full|groups",
    "ks": ">=1",
}


# A sampling temperature below it makes softmax(z / T) one-hot for any logit gap of a few
# tenths, so the "sampled" rollouts are greedy ones; evaluation's temperature 0 (greedy on
# purpose) has its own check
MIN_TEMPERATURE = 0.05
# above it a logit gap of a few tens is under float32's resolution of the sampling weights
MAX_TEMPERATURE = 100.0

# the most held-out levels or items one command evaluates (about a day of greedy answers here)
MAX_LEVELS = 100_000
# bounds no real run reaches, so an absurd value is refused at once, not after hours
MAX_DRAWS, MAX_STEPS, MAX_BATCH = 100_000, 10_000_000, 1_000_000


def cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _check_value(flag: str, rule: str, value) -> None:
    if value is None:
        return
    if rule == "seeds":
        repeated = sorted({v for v in value if list(value).count(v) > 1})
        if repeated:
            raise UsageError(f"{flag} repeats {repeated}: each seed is one run; list each once")
        rule = ">=0"
    if isinstance(value, (list, tuple)):
        for v in value:
            _check_value(flag, rule, v)
        return
    if rule.startswith("choice:"):
        allowed = rule.split(":", 1)[1].split("|")
        if value not in allowed:
            raise UsageError(f"{flag} must be one of {', '.join(allowed)}, not {value!r}")
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if rule == "threads":
        if not 1 <= value <= cores():
            raise UsageError(f"{flag} must be between 1 and {cores()} (the cores this machine "
                             f"gives the process), not {value}")
        return
    bounds = {"draws": (0, MAX_DRAWS, "random draws (10^4 already put a p-value at 1e-4)"),
              "seed": (0, 2**31 - 1, "(a seed every generator here takes)"),
              "lr": (1e-30, 3e38, "(what Adam's float32 state can hold)"),
              "steps": (1, MAX_STEPS, "steps"),
              "beta": (0, 1000, "(the anchor's weight; 1e308 overflowed the loss)"),
              "batch": (1, MAX_BATCH, "examples a step (more than any machine here holds)")}
    if rule in bounds:  # 10^9 of any of them ran silent for hours or hung
        lo, hi, what = bounds[rule]
        if not lo <= value <= hi:
            raise UsageError(f"{flag} must be between {lo} and {hi} {what}, not {value}")
        return
    if rule == "levels":  # 10^9 levels ran a minute silent generating them, then hung
        if not 1 <= value <= MAX_LEVELS:
            raise UsageError(f"{flag} must be between 1 and {MAX_LEVELS} (1000 levels already "
                             f"give a rate within +-3 points), not {value}")
        return
    if rule == "temperature_or_greedy":  # 0: greedy on purpose (evaluate)
        if value == 0:
            return
        if not MIN_TEMPERATURE <= value <= MAX_TEMPERATURE:
            raise UsageError(f"{flag} must be 0 (greedy) or between {MIN_TEMPERATURE} and "
                             f"{MAX_TEMPERATURE} (sampling), not {value}")
        return
    if rule == "temperature":
        if not value >= MIN_TEMPERATURE:
            raise UsageError(f"{flag} must be >= {MIN_TEMPERATURE} (sampling needs a "
                             f"temperature; lower ones are greedy to float precision), not "
                             f"{value}")
        if value > MAX_TEMPERATURE:
            raise UsageError(f"{flag} must be at most {MAX_TEMPERATURE} (above it softmax(z / "
                             f"T) is uniform to float precision: the model is not read), not "
                             f"{value}")
        return
    ok = {">0": value > 0, ">=0": value >= 0, ">=1": value >= 1, ">=2": value >= 2,
          "prob": 0 <= value <= 1,
          "even>=4": 4 <= value <= MAX_BATCH and value % 2 == 0,
          "even>=2": value >= 2 and value % 2 == 0}[rule]
    if not ok:
        what = {">0": "> 0", ">=0": ">= 0", ">=1": ">= 1", ">=2": ">= 2",
                "prob": "between 0 and 1",
                "even>=4": f"an even number between 4 and {MAX_BATCH}",
                "even>=2": "an even number >= 2"}[rule]
        raise UsageError(f"{flag} must be {what}, not {value}")


def validate(cfg) -> None:
    """Every numeric flag finite and in range, every named choice known; raises UsageError
    naming the flag. Runs before any work or file is written."""
    check_arguments(type(cfg), **{f.name: getattr(cfg, f.name)
                                  for f in dataclasses.fields(cfg)})


def check_arguments(config_cls, **values) -> None:
    """The one set of rules for a command's values, applied to the command line (`validate`)
    and to the Python API alike: each analysis's `run(...)` checks its keyword arguments against
    its config dataclass (a field's `metadata["check"]`, else `CHECKS` by name), so a value the
    CLI refuses is refused by `run` with the same message."""
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    hints = typing.get_type_hints(config_cls)
    for name, value in values.items():
        f = fields[name]
        flag = "--" + name.replace("_", "-")
        _check_type(flag, hints[name], value)
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, float) and not math.isfinite(v):
                raise UsageError(f"{flag} must be a finite number, not {v}")
        rule = f.metadata.get("check", CHECKS.get(name))
        rule = rule() if callable(rule) else rule  # read when checked (e.g. a registry)
        if rule:
            _check_value(flag, rule, value)


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string",
            type(None): "None"}.get(tp, getattr(tp, "__name__", str(tp)))


def _fits(tp, value) -> bool:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(a, value) for a in typing.get_args(tp))
    if origin in (list, tuple):
        item = typing.get_args(tp)[0]
        return isinstance(value, (list, tuple)) and all(_fits(item, v) for v in value)
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp) if isinstance(tp, type) else True


def _check_type(flag: str, tp, value) -> None:
    """A value of the field's type, or a UsageError naming the flag (the Python API's
    `batch="16"` or `n_levels=4.5`)."""
    if not _fits(tp, value):
        raise UsageError(f"{flag.lstrip('-').replace('-', '_')} must be {_type_name(tp)}, not "
                         f"{type(value).__name__} {value!r}")


def as_paths(value, name: str = "ckpts") -> list[str] | None:
    """Checkpoint folders given to the Python API: one (str or Path) or a list of them; None
    stays None. Anything else is refused by name."""
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        return [os.fspath(value)]
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, os.PathLike))
                                                for v in value):
        return [os.fspath(v) for v in value]
    raise UsageError(f"{name} must be a checkpoint folder (str or Path) or a list of them, "
                     f"not {type(value).__name__} {value!r}")


def check_api(config_cls, **values) -> None:
    """`check_arguments` over the values of a Python API call that are fields of its command's
    config (call it first thing with `**locals()`): types and ranges as the CLI checks them."""
    names = {f.name for f in dataclasses.fields(config_cls)}
    check_arguments(config_cls, **{k: v for k, v in values.items()
                                   if k in names and v is not None})  # None: the default


def check_disk(folder: str | Path, needed: int, what: str, remedy: str) -> None:
    """Refuse, before the work, what the disk under `folder` cannot hold (a fetch, a training
    run: a full disk kills it half-way)."""
    import shutil

    probe = Path(folder).resolve()
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if needed > free:
        raise RunError(f"{folder}: {_size(free)} free, {what} needs about {_size(needed)}; "
                       f"{remedy}")


def _size(n: int) -> str:
    """Bytes in GB as a person reads them, to 3 significant digits under 10 GB: "0.00 GB free,
    needs about 0.00 GB" said nothing (the sixth probe)."""
    return f"{n / 1e9:.2f} GB" if n >= 10e9 else f"{n / 1e9:.3g} GB"


def check_writable(path: str | Path, what: str = "--out") -> Path:
    """Prove that `path` (a run directory for what="run", else a file) can be written, by
    writing a probe file in its nearest existing folder, before any compute whose result would
    otherwise be lost; and that no one else can change it there (`fsio.check_owned`). Nothing
    is left behind."""
    from nca_interp.fsio import check_owned

    given = Path(path).expanduser()
    for part in (given, *given.parents):  # probe 11 U-K: "[Errno 17] File exists" otherwise
        if part.is_symlink() and not part.exists():
            raise UsageError(f"{what} {path}: {part} is a link to {os.readlink(part)}, which "
                             "does not exist; make that folder, remove the link, or choose "
                             "another location")
    target = Path(path).resolve()
    folder = target if what == "run" else target.parent
    check_owned(folder, "--out" if what == "run" else what)
    while not folder.exists() and folder != folder.parent:  # create nothing yet
        folder = folder.parent
    try:
        if not folder.is_dir():
            raise NotADirectoryError(20, "Not a directory", str(folder))
        # mkstemp creates a new file (O_EXCL | O_NOFOLLOW): a link planted at a guessable name
        # would be written through, so the name is random and the open exclusive
        fd, probe = tempfile.mkstemp(prefix=".nca-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UsageError(f"{what} {path}: cannot write there ({e.strerror}); choose a writable "
                         "location") from e
    return target


def finite_json(obj):
    """`obj` with every NaN / Infinity float replaced by None (JSON has no such numbers)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if callable(getattr(obj, "to_json", None)):  # a typed report or entry (nca_interp.reports)
        obj = obj.to_json()
    if isinstance(obj, Mapping):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    return obj


def write_json(path: str | Path, obj, indent: int = 1) -> Path:
    """Strict JSON (no NaN or Infinity, which other readers reject), written atomically."""
    from nca_interp.fsio import write_text

    return write_text(path, json.dumps(finite_json(obj), indent=indent, allow_nan=False,
                                       default=str))


def write_atomic(path: str | Path, text: str, fault: str | None = None) -> Path:
    """Write `text` to a temporary file beside `path`, then rename it over `path`: a reader
    (or a kill) sees the old file or the new one, never a part (`nca_interp.fsio`). `fault`
    names the moment for fault-injection tests (nca_interp.faults)."""
    from nca_interp.fsio import write_text

    return write_text(path, text, fault)


def quiet_interrupt() -> None:
    """Ctrl-C (or SIGTERM) while a command is still importing (torch, transformers: seconds)
    ends it in one line, nothing done, not in a traceback from inside an import; `entry`
    takes the signals over once the command runs. Called by each command's `__main__` guard
    above its heavy imports (`parse_early` does), never by an import of the library."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def stop(signum, frame):
        how = "terminated" if signum == signal.SIGTERM else "interrupted"
        sys.stderr.write(f"{how} while starting; nothing was done\n")
        sys.stderr.flush()
        os._exit(143 if signum == signal.SIGTERM else 130)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def started() -> None:
    """The signals as Python has them (Ctrl-C is KeyboardInterrupt, SIGTERM ends the
    process): what a command's `__main__` guard calls once its imports are done, where it runs
    without `entry` (which takes them over itself), so that `quiet_interrupt`'s "nothing was
    done" is never said of work under way."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def parse_early(cls, description: str | None = None, positional: str | None = None,
                first=None):
    """A command's own command line parsed by its module's `if __name__ == "__main__":` guard,
    above its heavy imports, so `--help` (exit 0) and a bad flag (exit 2: argparse's usage
    line, or `error: ...` in one line) are answered before torch is imported: `cls` comes from
    a module without torch (`nca_interp.configs`). `first(argv)` checks the raw command line
    before it is parsed (train.sft's replaced flags). The config returned is what `main` runs:
    `entry(main, parsed=...)` hands it over, so the command line is parsed once."""
    quiet_interrupt()
    argv, debug = own_flags(sys.argv[1:])
    try:
        if first is not None:
            first(argv)
        return parse_config(cls, argv, description, positional)
    except (ValueError, OSError) as e:
        if debug or not _user_error(e):
            raise
        print(f"error: {str(e).strip() or type(e).__name__}", file=sys.stderr)
        raise SystemExit(2) from None


def own_flags(argv: list[str]) -> tuple[list[str], bool]:
    """`argv` less the flags every command takes (--debug, --quiet: set in the environment
    here), and whether errors keep their traceback (--debug or NCA_INTERP_DEBUG=1)."""
    debug = os.environ.get("NCA_INTERP_DEBUG") == "1" or "--debug" in argv
    if "--quiet" in argv:  # no progress bars (nca_interp.progress)
        os.environ["NCA_INTERP_QUIET"] = "1"
    return [a for a in argv if a not in ("--debug", "--quiet")], debug


def entry(main, argv: list[str] | None = None, parsed=None) -> int:
    """Run a command's `main` as `python -m` does: a user error (bad flag, unusable checkpoint,
    unwritable output, a failed run) prints `error: ...` in a line or two and exits non-zero
    with no traceback; NCA_INTERP_DEBUG=1 (or --debug) shows it. Bugs keep their traceback.
    `parsed`: the config `parse_early` already read from this command line, given to `main` in
    place of `argv`."""
    argv, debug = own_flags(list(sys.argv[1:] if argv is None else argv))
    from nca_interp.console import to_console

    to_console()  # the library's messages as the command's lines
    # a command owns its process (importing the library sets nothing): transformers' advice
    # lines ("set X to silence this") would interleave with the command's tables
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    if not debug:  # a Rust library's panic is one line below, not a Rust backtrace too
        os.environ["RUST_BACKTRACE"] = "0"
    from nca_interp.checkpoint import hash_once

    terminated = []

    def on_term(signum, frame):  # SIGTERM (a scheduler, `kill`) ends as Ctrl-C does: cleanly
        terminated.append(signum)
        raise KeyboardInterrupt

    import signal
    import threading

    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:  # Ctrl-C is KeyboardInterrupt again (`quiet_interrupt` held it)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    previous = signal.signal(signal.SIGTERM, on_term) if main_thread else None
    try:
        with hash_once():  # a checkpoint opened several times by one command is hashed once
            main(argv if parsed is None else parsed)
    except (ValueError, OSError, FloatingPointError, RuntimeError, KeyError) as e:
        if debug or not _user_error(e):
            raise
        msg = str(e).strip().strip('"') or type(e).__name__
        print(f"error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        how = "terminated" if terminated else "interrupted"
        print(f"{how}; {interrupted_note(main, argv)}", file=sys.stderr)
        return 143 if terminated else 130
    except BaseException as e:  # a Rust library's panic (pyo3's PanicException)
        if debug or type(e).__name__ != "PanicException":
            raise
        print(f"error: {panic_line(e)}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0


# what an interrupted command leaves, by the module of its `main`: only training resumes
# (`train.*` from a clone, `nca_interp.train.*` where the wheel installed it)
RESUMES = ("train.sft", "train.distill")
# training that saves only at its end (TRL's loop here keeps no checkpoint to resume from)
ENDS_ONLY = ("train.trl_distill",)
PIPELINES = ("nca_interp.paper.reproduce",)


def interrupted_note(main, argv: list[str] | None = None) -> str:
    """What the user is told after Ctrl-C: true of the command that was interrupted (a
    training run resumes only once it has saved a checkpoint)."""
    module = getattr(main, "__module__", "") or ""
    if module == "__main__":  # `python -m train.distill`: the module runs as __main__
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        module = getattr(spec, "name", "") or ""
    if module in RESUMES or module.removeprefix("nca_interp.") in RESUMES:
        from nca_interp.checkpoint import latest_step_checkpoint

        args = argv or []
        out = next((args[i + 1] for i, a in enumerate(args) if a == "--out"
                    and i + 1 < len(args)), None)
        if out is not None and latest_step_checkpoint(Path(out).expanduser()) is None:
            return ("no checkpoint was saved yet: the same command starts the run over "
                    "(--save-every sets how often one is saved)")
        return "the same command resumes the run from its last checkpoint"
    if module in ENDS_ONLY or module.removeprefix("nca_interp.") in ENDS_ONLY:
        return ("nothing was written (it saves its student only when it finishes, and keeps "
                "no checkpoint to resume from); the same command starts it over")
    if module in PIPELINES:
        return "stages that finished are kept; the same command skips them and goes on"
    return ("nothing was written (its files are written only when it finishes); the same "
            "command starts it again from the beginning")


def panic_line(e: BaseException) -> str:
    """A Rust library's panic (a tokenizer's regex search hitting its retry limit: probe 11
    T-F) as one line that names what the data did, not a Rust backtrace."""
    said = " ".join(str(e).split())[:200] or "a panic"
    if "Onig" in said or "regex" in said.lower():
        return (f"the tokenizer failed on this input ({said}): a regex in the model's "
                "tokenizer.json (its normalizer or pre-tokenizer) backtracks without end on "
                "these prompts; restore the tokenizer the model was trained with")
    return (f"a library the package calls ended with a panic ({said}); rerun with "
            "NCA_INTERP_DEBUG=1 for the trace")


def _user_error(e: BaseException) -> bool:
    """Errors raised on purpose with a message for the user (ours; bad values; the OS's disk
    and permission errors), as opposed to a bug deep inside a library (a RuntimeError from
    torch, a KeyError: those keep their traceback)."""
    mod = type(e).__module__
    if mod.startswith(("nca_interp", "train")):
        return True
    return isinstance(e, (ValueError, OSError, FloatingPointError))


TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes", "y", "on"), ("0", "false", "no", "n", "off")


def _parser_for(tp):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)][0]
        parse = _parser_for(inner)
        return lambda s: None if s.lower() == "none" else parse(s)
    if tp is bool:
        def boolean(s: str) -> bool:  # "on", "maybe", "flase" read False without a word
            if s.lower() in TRUE_WORDS + FALSE_WORDS:
                return s.lower() in TRUE_WORDS
            raise argparse.ArgumentTypeError(f"{s!r} is not true or false (write one of "
                                             f"{', '.join(TRUE_WORDS + FALSE_WORDS)})")
        return boolean
    if origin in (tuple, list):
        item = typing.get_args(tp)[0]

        def items(s: str):
            parts = s.split(",") if s else []
            if any(not p.strip() for p in parts):
                raise argparse.ArgumentTypeError(f"{s!r} has an empty item; separate values "
                                                 "with single commas (e.g. 0,1,2)")
            return origin(item(p) for p in parts)
        return items
    return tp


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """The description's line breaks kept; options on 100 columns."""

    def __init__(self, prog: str):
        super().__init__(prog, width=100, max_help_position=30)


def short_help(doc: str | None) -> str | None:
    """A module docstring cut for --help: its first paragraph and the indented example
    commands right after it (line breaks kept); the rest lives in the module and the docs."""
    if not doc:
        return doc
    paras = doc.strip("\n").split("\n\n")
    keep = [paras[0]]
    for para in paras[1:]:
        if not para.startswith("    "):
            break
        keep.append(para)
    more = "" if len(keep) == len(paras) else \
        "\n\nThe full explanation: docs/commands.md, and this module's docstring."
    return "\n\n".join(keep) + more


def command_name() -> str | None:
    """`python -m <module>` of the running command (a package's __main__ named by its
    package), for usage lines; None (argparse's own) when not run with -m."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is None or not spec.name:
        return None
    name = spec.name.removesuffix(".__main__")
    return f"python -m {name}"


def merge_repeated(cls, argv: list[str]) -> list[str]:
    """A list flag given twice has its values joined (`--ckpt a --ckpt b` is `--ckpt a,b`:
    argparse kept only the last list); a one-value flag given twice keeps the last, the
    override the pipeline and the tests extend commands with."""
    hints = typing.get_type_hints(cls)
    flags = {"--" + f.name.replace("_", "-"): f.name for f in dataclasses.fields(cls)}
    seen: dict[str, list[tuple[int, str | None]]] = {}
    for i, a in enumerate(argv):
        flag, eq, value = a.partition("=")
        if flag in flags:
            if eq:
                seen.setdefault(flag, []).append((i, value))
            else:
                nxt = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") \
                    else None
                seen.setdefault(flag, []).append((i, nxt))
    out = list(argv)
    drop: set[int] = set()
    for flag, uses in seen.items():
        if len(uses) < 2:
            continue
        tp = hints[flags[flag]]
        inner = [t for t in typing.get_args(tp) if t is not type(None)] or [tp]
        if typing.get_origin(tp) is not list and typing.get_origin(inner[0]) is not list:
            continue  # one value: the last one given overrides (how commands are extended)
        for i, token in uses:  # every use and its value token go; one joined use stays
            drop.add(i)
            if "=" not in argv[i] and token is not None:
                drop.add(i + 1)
        out[uses[0][0]] = f"{flag}={','.join(v for _, v in uses if v is not None)}"
        drop.discard(uses[0][0])
    return [a for i, a in enumerate(out) if i not in drop]


# Flags that were replaced: a command line that still passes one is told what to pass instead
REPLACED_FLAGS = {
    "--top-k": "--kl topk --kl-k K (the student's top-k, renormalised; --kl-tail none for the "
               "raw sum)",
    "--renormalize": "--kl-tail renorm|none with --kl topk",
    "--dtype": "--precision auto|fp32|bf16",
}


def field_groups(cls) -> list[tuple[str | None, list[dataclasses.Field]]]:
    """A config's fields as --help shows them: its own first (title None), then those of each
    dataclass it is composed of (train/options.py), in the order of its bases, under the first
    line of that class's docstring. A field a config declares again (another default) stays in
    the group of the class that first declares it."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    owner: dict[str, type] = {}
    for base in reversed(cls.__mro__):
        for name in base.__dict__.get("__annotations__", {}):
            if name in fields:
                owner.setdefault(name, base)
    parts = [b for b in cls.__mro__[1:] if dataclasses.is_dataclass(b)]
    groups: list[tuple[str | None, list[dataclasses.Field]]] = []
    for part in [cls, *parts]:
        mine = [f for n, f in fields.items() if owner.get(n) is part]
        if mine:
            doc = (part.__doc__ or part.__name__).strip().splitlines()[0]
            groups.append((None if part is cls else doc.rstrip("."), mine))
    return groups


def parse_config(cls: type[C], argv: list[str] | C | None, description: str | None = None,
                 positional: str | None = None) -> C:
    """Build `cls` from command-line `argv` (None: sys.argv). `positional` names a list field
    that may also be given as bare arguments. Fields named in `cls.EXPERT` are left out of
    `--help` (one line counts them) and listed by `--help-all`. An `argv` that is already a
    `cls` (what `parse_early` read, handed on by `entry`) is returned as it is."""
    if isinstance(argv, cls):
        return argv
    argv = typing.cast("list[str] | None", argv)  # else a command line
    hints = typing.get_type_hints(cls)
    expert = [f for f in dataclasses.fields(cls) if f.name in getattr(cls, "EXPERT", ())]
    show_all = "--help-all" in (sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog=command_name(), description=short_help(description), formatter_class=_Formatter,
        epilog=None if show_all or not expert else
        f"{len(expert)} options for experts (" + ", ".join(
            "--" + f.name.replace("_", "-") for f in expert[:4]) + ", ...): --help-all")
    if expert:
        parser.add_argument("--help-all", action="help",
                            help="show every option, with those for experts")
    for title, group in field_groups(cls):
        name, _, what = (title or "").partition(": ")  # "run: where it goes, ..."
        where = parser if title is None else \
            parser.add_argument_group(f"{name} ({what})" if what else name)
        shown_here = [f for f in group if show_all or f not in expert]
        if title is not None and not shown_here:
            where = parser  # a group of expert options only: no empty heading in --help
        for f in group:
            default = _default_of(f)
            shown = ",".join(map(str, default)) if isinstance(default, (tuple, list)) else \
                default
            optional_value: dict[str, typing.Any] = \
                {"nargs": "?", "const": True} if hints[f.name] is bool else {}
            text = f.metadata.get("help", "")
            text = text() if callable(text) else text  # read when asked (e.g. the task registry)
            if "default" not in text.lower() and default is not None:  # said once, if at all
                text = f"{text} (default: {shown})".strip()
            where.add_argument("--" + f.name.replace("_", "-"), dest=f.name,
                               type=_parser_for(hints[f.name]), default=default,
                               **optional_value,
                               help=text if f in shown_here else argparse.SUPPRESS)
    if positional:
        parser.add_argument("_positional", nargs="*", metavar=positional.upper(),
                            help=f"same as --{positional}")
    argv = merge_repeated(cls, sys.argv[1:] if argv is None else list(argv))
    names = {"--" + f.name.replace("_", "-") for f in dataclasses.fields(cls)}
    for a in argv:
        flag = str(a).split("=")[0]
        if flag in REPLACED_FLAGS and flag not in names:
            raise UsageError(f"{flag} was replaced (one KL path, one precision flag): pass "
                             f"{REPLACED_FLAGS[flag]}")
    ns = vars(parser.parse_args(argv))  # argparse prints its own usage error (exit 2)
    extra = ns.pop("_positional", None)
    if extra and positional:  # `--ckpt A B`: A by the flag, B as a bare argument; both kept
        given = ns.get(positional) or []
        pos_field = next(f for f in dataclasses.fields(cls) if f.name == positional)
        flagged = [] if given == _default_of(pos_field) else given
        ns[positional] = [*flagged, *extra]
    cfg = cls(**ns)
    validate(cfg)
    return cfg


def _default_of(f: dataclasses.Field) -> typing.Any:
    """A config field's default value (its factory's, made anew)."""
    return f.default_factory() if callable(f.default_factory) else f.default


def to_dict(cfg) -> dict:
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=list))


def _flag_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return "none" if value is None else str(value)


def argv_of(cfg, positional: str | None = None) -> list[str]:
    """The command line that `parse_config(type(cfg), ..., positional)` reads back as `cfg`:
    the positional field's values first, then every field that differs from its default, in
    field order. What a pipeline records for a stage it ran through the Python API."""
    out = list(getattr(cfg, positional) or []) if positional else []
    for f in dataclasses.fields(cfg):
        if f.name == positional:
            continue
        default = _default_of(f)
        value = getattr(cfg, f.name)
        if value != default and not (isinstance(default, (list, tuple)) and
                                     list(value or []) == list(default)):
            out += ["--" + f.name.replace("_", "-"), _flag_value(value)]
    return [str(a) for a in out]


def same_config(cfg, argv: list[str], positional: str | None = None,
                ignore: tuple[str, ...] = ("threads", "png")) -> bool:
    """Whether `argv` (a recorded command line) asks for what `cfg` does, fields in `ignore`
    aside (they change how fast a stage computes, or whether a PNG of its figure is also
    written: a pipeline draws every PNG from the JSON at its end)."""
    import contextlib
    import io

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # argparse's usage text: not an error
            old = to_dict(parse_config(type(cfg), argv, positional=positional))
    except (SystemExit, UsageError, ValueError):
        return False
    new = to_dict(cfg)
    return {k: v for k, v in old.items() if k not in ignore} == \
        {k: v for k, v in new.items() if k not in ignore}
