"""What SFT and distillation share: run directories, resume, optimizer state without pickle,
learning-rate schedule, metrics log, CPU speed settings, devices, precision and the
torch.distributed process group."""

from __future__ import annotations

import errno
import faulthandler
import json
import logging
import math
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from nca_interp import checkpoint as ckpt
from nca_interp.cli import check_writable, finite_json, write_atomic
from nca_interp.errors import RunError, UsageError
from nca_interp.evaluate import play_levels
from nca_interp.faults import fault_point
from nca_interp.fsio import (
    WriteFault,
    check_owned,
    clear_temporaries,
    is_own_temporary,
    is_write_fault,
    read_json,
    read_jsonl,
)
from nca_interp.models import resolve_device
from nca_interp.runlock import RunLock

__all__ = ["DISK_REMEDY", "Dist", "Run", "all_finite", "check_out", "check_warmup",
           "close_distributed", "current_flags", "data_inputs", "disk_needed", "eval_wins",
           "exit_worker", "init_distributed", "setup_torch", "weight_bytes"]

log = logging.getLogger(__spec__.name if __spec__ else __name__)  # python -m too


def setup_torch(threads: int) -> None:
    torch.set_num_threads(threads)
    # Denormal floats made the early steps of tiny random-init models an order of magnitude slower.
    torch.set_flush_denormal(True)


@dataclass(frozen=True)
class Dist:
    """This process's place in a torchrun job (rank 0 of 1 without torchrun)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """Sum of `values` over ranks (fp64, so counts and sums stay exact)."""
        values = values.double()
        if self.world > 1:
            torch.distributed.all_reduce(values)
        return values


def init_distributed(device_name: str) -> tuple[Dist, torch.device]:
    """Join the torchrun process group if launched by torchrun (NCCL for GPUs, gloo for CPUs);
    returns where this process stands and its device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(device_name, local_rank)
    if world == 1:
        return Dist(), device
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Dist(torch.distributed.get_rank(), world, local_rank), device


# Seconds destroying a finished process group may take before the worker gives up on it.
TEARDOWN_TIMEOUT_S = 120


def close_distributed(dist: Dist) -> None:
    """Leave the process group once every rank has finished. Gloo's teardown can stall at
    random (pytorch/pytorch#75097; CI once saw rank 0 finish and the launcher wait for ever):
    a watchdog that needs no GIL dumps every thread's stack to stderr and exits 1 if the
    teardown takes over TEARDOWN_TIMEOUT_S, so a stall is a visible failure, not a hang."""
    if dist.world > 1 and torch.distributed.is_initialized():
        torch.distributed.barrier()
        faulthandler.dump_traceback_later(TEARDOWN_TIMEOUT_S, exit=True)
        torch.distributed.destroy_process_group()
        faulthandler.cancel_dump_traceback_later()


def exit_worker(dist: Dist) -> None:
    """End a data-parallel worker once its work is written: flush and leave without the
    interpreter's finalization, where gloo's threads can still hold tensors and deadlock
    (pytorch/pytorch#179291). One process (world 1) returns normally."""
    if dist.world > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def eval_wins(model, tok, task, levels: list, kinds: list[str]) -> dict[str, float]:
    """Greedy held-out win rate without context (`none`) and with each context kind."""
    was_training = model.training
    model.eval()
    out = {k: float(play_levels(model, tok, task, levels, None if k == "none" else k)["won"]
                    .mean()) for k in ["none", *kinds]}
    model.train(was_training)
    return out


def optimizer_state(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """AdamW state as flat tensors + JSON metadata (no pickle)."""
    sd = opt.state_dict()
    tensors = {f"{i}.{k}": (v if torch.is_tensor(v) else torch.tensor(v))
               for i, st in sd["state"].items() for k, v in st.items()}
    return tensors, {"param_groups": sd["param_groups"]}


def load_optimizer_state(opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor],
                         meta: dict) -> None:
    state: dict[int, dict] = {}
    for key, v in tensors.items():
        i, k = key.split(".", 1)
        state.setdefault(int(i), {})[k] = v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def all_finite(model) -> bool:
    """Every parameter finite (one reduction per tensor, one host sync)."""
    return bool(torch.stack([p.detach().isfinite().all() for p in model.parameters()]).all())


def weight_bytes(folder: str | Path) -> int:
    """Bytes of a checkpoint's weights as training holds and saves them (float32), read from
    its safetensors headers (optimizer moments aside)."""
    from nca_interp.tensorfiles import read_header

    files = [f for f in Path(folder).glob("*.safetensors") if f.name != "trainer_state.safetensors"]
    return 4 * sum(math.prod(shape) for f in files for _, shape, _, _ in read_header(f).values())


def disk_needed(weights: int, steps: int, save_every: int, start: int = 0) -> tuple[int, int]:
    """(bytes a run from step `start` to `steps` keeps, bytes it holds besides for a moment at
    a save). Kept: a weights copy per step checkpoint still to save and, for a run not started,
    the copy published at its root and Adam's two moments (twice the weights) on the newest
    checkpoint. Briefly: the moments of the checkpoint before (dropped once the new one is
    written) and the published copy's temporary."""
    # counted, not looped: --steps 10^12 spent hours in a loop before any refusal
    saves = steps // save_every - start // save_every + (steps % save_every != 0) \
        if steps > start else 0
    if not saves:
        return 0, 0
    return weights * (saves + (3 if start == 0 else 0)), 3 * weights


DISK_REMEDY = ("free space outside this run's folder (files of your own you no longer need), or "
               "raise --save-every")


def _write_fault(e: BaseException) -> WriteFault | None:
    """A write the user's disk or limits refused (full, quota, file size, read-only,
    permission), as the package's WriteFault, an OSError, or safetensors' own error for one (a
    SafetensorError, not OSError); None for any other error."""
    from nca_interp.fsio import write_error

    if not is_write_fault(e):
        return None
    fault = write_error(e, getattr(e, "filename", None) or "?")
    return fault if isinstance(fault, WriteFault) else None


# Flags that do not change a run's result: they may differ when a run is resumed.
FREE_FLAGS = ("out", "steps", "threads", "eval_every", "eval_levels", "save_every", "device",
              "teacher_device", "micro_batch", "grad_checkpointing", "git_commit", "lens_every",
              "lens_items")


# Entries of a run config compared on resume by checks of their own (with their own message).
CHECKED_APART = ("inputs", "resume_from",
                 "task_options")  # as written; the task they make is compared (`task`)

# Flags added after runs were recorded: a saved config without one ran with this value.
ADDED_FLAGS = {"kl": "full", "kl_k": 256, "kl_support": "p", "kl_tail": "renorm",
               "kl_form": "k1", "nca_kl": "same", "role": None}


def current_flags(saved: dict) -> dict:
    """A run config recorded before the one KL path, in today's flags: `--top-k K` (with
    `--renormalize false`) trained what `--kl topk --kl-k K --kl-support p --kl-tail renorm`
    (`none`) trains, and `--precision auto` what auto meant then, so such a run resumes with
    today's flags and never silently with another loss or precision."""
    saved = dict(saved)
    if saved.get("precision") == "auto":
        # recorded before runs wrote what auto meant: then bf16 on a GPU, fp32 on the CPU
        gpu = saved.get("device") == "cuda" or (saved.get("device") == "auto"
                                                and torch.cuda.is_available())
        saved["precision"] = "bf16" if gpu else "fp32"
    k, renorm = saved.pop("top_k", None), saved.pop("renormalize", True)
    if k is not None:
        saved.update(kl="topk", kl_k=k, kl_support="p", kl_tail="renorm" if renorm else "none")
    return saved


def check_out(out: str | Path, inputs: Mapping[str, str | Path | None]) -> None:
    """Refuse an --out that someone else could change (`check_owned`: they could swap the
    weights a resume reads), or that is, sits inside or contains one of the run's input
    checkpoints (`inputs`: flag -> folder): a run writes its weights and config at its root."""
    check_owned(out)
    o = Path(out).expanduser().resolve()
    for flag, folder in inputs.items():
        if folder is None:
            continue
        q = Path(folder).expanduser().resolve()
        how = "is" if o == q else "is inside" if q in o.parents else \
            "contains" if o in q.parents else None
        if how:
            raise UsageError(f"--out {out} {how} {flag} {folder}; a run never writes where "
                             "its input checkpoints live: choose a new --out")
    for parent in o.parents:  # a folder of its own inside a run's is no step_N of that run
        if any((parent / name).is_file() for name in (ckpt.RUN_CONFIG, ckpt.MANIFEST)):
            what = "run" if (parent / ckpt.RUN_CONFIG).is_file() and not \
                (parent / ckpt.MANIFEST).is_file() else "checkpoint folder"
            raise UsageError(f"--out {out} lies inside the {what} {parent}, which this run "
                             "would change; choose an --out outside it")


# What this package leaves in a run directory besides a run's files: its lock, and the stage of
# a write killed half-way (`.nca-tmp-PID-XXXXXXXX` holding the package's marker,
# nca_interp.fsio; earlier versions' `.name.nca-tmp-PID` are tolerated, never removed). Any
# other entry, hidden ones included (a `.git`, a user's `notes.tmp`, `.draft.tmp-4242`), is
# something the run did not make: the run refuses the folder, and never deletes it.
def _leftover_name(p: Path) -> bool:
    return (p.name == ".lock" and p.is_file() and not p.is_symlink()) or is_own_temporary(p)


def check_no_links(folder: Path) -> None:
    """Refuse a run folder holding a symbolic link where the run reads or writes (its root's
    entries, `checkpoints/`, each step folder and `checkpoints/discarded`): a run never writes
    through a link it did not make. Before any work: one line naming the link."""
    places = [folder]
    ck = folder / "checkpoints"
    if ck.is_dir() and not ck.is_symlink():
        places += [ck, *(p for p in ck.iterdir() if p.is_dir() and not p.is_symlink())]
    for place in places:
        for p in place.iterdir():
            if p.is_symlink():
                raise UsageError(f"{p} is a symbolic link, which this run did not make; a run "
                                 "never reads or writes through a link: replace it with what "
                                 "it points to, or choose a new --out")


def check_own(folder: Path, run_config: dict) -> bool:
    """Whether `folder` may be written by a run of `run_config`: it does not exist, is empty,
    or is this run's own (its run_config.json is this command's, and anything beyond it is
    what the run wrote: step checkpoints to resume from). Returns whether it holds steps to
    resume from; raises UsageError naming what is there otherwise."""
    if not folder.exists():
        return False
    if not folder.is_dir():
        raise UsageError(f"--out {folder} is a file; choose a folder for the run")
    check_no_links(folder)
    for name, kind in ((".lock", "a file"), ("checkpoints", "a folder"),
                       ("checkpoints/discarded", "a folder"), ("metrics.jsonl", "a file")):
        p = folder / name
        if p.exists() and (p.is_dir() if kind == "a file" else not p.is_dir()):
            raise UsageError(f"{p} is not {kind}, as a run keeps it; move it away, or choose a "
                             "new --out")

    def leftover(p: Path) -> bool:  # run state, temporaries, a first save killed half-way
        return _leftover_name(p) or (
            p.name == "checkpoints" and p.is_dir() and not p.is_symlink()
            and all(_leftover_name(c) for c in p.iterdir()))

    entries = sorted(p.name for p in folder.iterdir() if not leftover(p))
    if not entries:
        return False
    if entries == [ckpt.RUN_CONFIG]:
        return False  # a start that failed before any work: a corrected one may replace it
    saved = folder / ckpt.RUN_CONFIG
    refuse = (f"--out {folder} already holds {', '.join(entries[:4])}"
              f"{' ...' if len(entries) > 4 else ''}, which this run did not make; ")
    if not saved.exists():
        raise UsageError(refuse + "choose a new --out (a run writes only into a new folder or "
                         "its own)")
    try:
        old = current_flags(read_json(saved, "run config"))
    except (OSError, ValueError) as e:
        raise UsageError(refuse + f"its {ckpt.RUN_CONFIG} is unreadable ({e}); choose a new "
                         "--out") from None
    diff = sorted(k for k in run_config if k not in FREE_FLAGS and k not in CHECKED_APART
                  and old.get(k, ADDED_FLAGS.get(k)) != run_config[k])
    if diff:
        raise UsageError(f"--out {folder} holds a run with a different config ({diff[:6]}); "
                         "resume it with its own arguments or choose a new --out")
    steps = ckpt.latest_step_checkpoint(folder) is not None
    weights = [n for n in entries if n.endswith(".safetensors") or n == "config.json"]
    if weights and not steps:
        raise UsageError(refuse + "it holds a model but no step checkpoint to resume from "
                         "(a finished run's copy, or one whose checkpoints were deleted); "
                         "choose a new --out")
    return steps


def _intact(folder: Path) -> bool:
    try:
        ckpt.verify_folder(folder)
        return True
    except (ckpt.CheckpointError, OSError, ValueError):
        return False


def data_inputs(task_record: dict) -> dict[str, str]:
    """The data files a task reads (OPCD's questions, a system-prompt file), by option: inputs
    of a run like its checkpoints."""
    from nca_interp.tasks import option_file

    return {f"task option {k}": str(option_file(v)) for k, v in task_record.items()
            if option_file(v) is not None}  # a regex of 256 bytes is no file name; @FILE: FILE


def check_inputs_unchanged(run_dir: Path, recorded: dict | None, now: dict) -> None:
    """Refuse a resume whose inputs (by flag) hold other content than when the run started
    (a teacher retrained in place); runs recorded before digests were kept are not checked."""
    for flag, was in (recorded or {}).items():
        cur = now.get(flag)
        if cur is None or not isinstance(was, dict):
            continue
        if cur["sha256"] != was.get("sha256"):
            raise UsageError(f"{flag} {cur['path']} has changed since {run_dir} started (its "
                             "content digest differs from the one the run recorded); resuming "
                             "would train against other weights or data. Restore it, or start "
                             "a new --out")


def check_step_record(step_dir: Path) -> None:
    """The step a checkpoint's trainer state records is the one its folder is named for
    (`nca_interp.checkpoint.check_step_record`; a resume needs the state)."""
    if not (step_dir / "trainer_state.json").exists():
        raise ckpt.CheckpointError(f"{step_dir} holds no trainer_state.json; resume from an "
                                   "earlier checkpoint with --resume-from")
    ckpt.check_step_record(step_dir)


def check_warmup(cfg) -> str | None:
    """--warmup longer than --steps leaves the learning rate below its peak for the whole run
    (a run of 10 steps with --warmup 1000 trained at 1% of --lr without a word): refused when
    the command named it; when it is the default (a short trial run's), the note to print as
    training starts (after every refusal)."""
    import dataclasses

    if cfg.warmup <= cfg.steps:
        return None
    default = next(f.default for f in dataclasses.fields(cfg) if f.name == "warmup")
    reach = f"the learning rate reaches only {cfg.steps / cfg.warmup:.0%} of --lr {cfg.lr:g}"
    if cfg.warmup != default:
        raise UsageError(f"--warmup {cfg.warmup} is longer than --steps {cfg.steps}: {reach}; "
                         f"give a --warmup of at most {cfg.steps}")
    return (f"note: the default --warmup {cfg.warmup} is longer than --steps {cfg.steps}: "
            f"{reach} (give --warmup to choose)")


def check_schedule_steps(run_dir: Path, old: dict, new: dict) -> None:
    """Under a cosine schedule every step's learning rate depends on --steps: a run trained to
    20 of 20 and extended to 30 jumped from the schedule's end back up, and was no 30-step run
    (the fourth probe). Refused; a constant schedule extends exactly."""
    if old.get("schedule") == "cosine" and new.get("steps") is not None and \
            old.get("steps") is not None and new["steps"] != old["steps"]:
        raise UsageError(f"--steps {new['steps']}: {run_dir} follows a cosine schedule over "
                         f"{old['steps']} steps, whose learning rates depend on that total; "
                         f"resume it with --steps {old['steps']}, or start a new --out for "
                         f"{new['steps']} steps")


def check_steps(run_dir: Path, steps: int | None, last: Path | None) -> None:
    """Refuse --steps below what the run already holds (its folder would keep later weights
    than the command asks for)."""
    held = ckpt.step_number(last) if last is not None else None
    if steps is not None and held is not None and steps < held:
        raise UsageError(f"--steps {steps} is fewer than the {held} steps {run_dir} already "
                         f"holds; load {run_dir}/checkpoints/step_{steps:06d} if it was saved, "
                         "or start a new --out")


class Run:
    """A run directory: `run_config.json`, `metrics.jsonl`, `checkpoints/step_*`, and the
    latest weights published at its root. Construct it once the run can start (arguments
    checked, models loaded): it checks the directory is new or this run's own (never
    another run's or a model's), takes its lock, clears temporaries of killed saves, and
    writes the config (with a content digest of every input). Resuming, it refuses before any
    step: a newest checkpoint that does not match its manifest (`resume_from` names an earlier
    one to fall back to), inputs whose content changed, and fewer --steps than the run holds;
    then it republishes the newest checkpoint at the root if a kill left the root behind it."""

    def __init__(self, out: str | Path, run_config: dict, writer: bool = True,
                 inputs: dict[str, str | Path | None] | None = None,
                 resume_from: str | Path | None = None):
        """`writer=False` (data-parallel ranks other than 0) reads the directory, never writes.
        `inputs`: the run's input checkpoints and data files by flag, which --out must keep
        clear of and whose content a resume must find unchanged. `resume_from`: a step
        checkpoint of this run to go on from instead of the newest (the later ones are moved
        to `checkpoints/discarded/`)."""
        if writer:  # a default runs/... output lands outside the work tree
            from nca_interp.fsio import link_runs_home

            link_runs_home(out)
        self.dir = Path(out).resolve()
        self.writer = writer
        self.config = {**run_config, "git_commit": ckpt.git_commit()}
        self._t0 = time.time()
        self._fresh_optimizer = False
        if not writer:
            return
        given: dict[str, str | Path] = {k: v for k, v in (inputs or {}).items()
                                        if v is not None}
        from nca_interp.fsio import default_cache

        check_out(self.dir, {**given, "the model cache": default_cache() / "models"})
        check_own(self.dir, run_config)  # before the lock file is written into it
        check_writable(self.dir, "run")
        digests = {flag: {"path": str(Path(p).expanduser().resolve()),
                          "sha256": ckpt.content_digest(p)} for flag, p in given.items()}
        # what this Run makes, so that a refusal before training removes it and nothing else
        self._made_dirs = [p for p in (self.dir, *self.dir.parents) if not p.exists()]
        self._made_config = False
        self.dir.mkdir(parents=True, exist_ok=True)
        self._made_lock = not os.path.lexists(self.dir / ".lock")
        self.lock = RunLock(self.dir)
        try:
            self._open(run_config, digests, resume_from)
        except BaseException:
            self._release()  # a refused resume leaves the folder as it found it
            raise

    def _open(self, run_config: dict, digests: dict, resume_from: str | Path | None) -> None:
        started = check_own(self.dir, run_config)  # again, now that no one else writes
        self._clear_temporaries()
        if resume_from is not None and not started:
            raise UsageError(f"--resume-from {resume_from}: {self.dir} holds no step "
                             "checkpoint to resume from; drop --resume-from")
        if started:
            old = read_json(self.dir / ckpt.RUN_CONFIG, "run config")
            check_inputs_unchanged(self.dir, old.get("inputs"), digests)
            self._verify_resume_point(resume_from)
            check_steps(self.dir, run_config.get("steps"), self.resume_point())
            check_schedule_steps(self.dir, old, run_config)
            self.config = {**old, **{k: v for k, v in self.config.items() if k in FREE_FLAGS}}
            point = self.resume_point()  # there is one: the run has started
            if point is not None and not ckpt.same_weights(point, self.dir):
                ckpt.publish(point, self.dir)  # killed before publishing
        else:  # nothing saved yet: a failed start leaves nothing that blocks a corrected one
            self.config["inputs"] = digests
            write_atomic(self.dir / ckpt.RUN_CONFIG, json.dumps(self.config, indent=1))
            self._made_config = True

    def _verify_resume_point(self, resume_from: str | Path | None) -> None:
        """The checkpoint to resume from matches its manifest (weights, optimizer and trainer
        state), or the run stops here naming the damaged file and the intact one to fall back
        to; with `resume_from`, that one is checked and every later step moved aside."""
        every = sorted(p for p in (self.dir / "checkpoints").glob("step_*") if p.is_dir())
        steps = [p for p in every if (p / ckpt.MANIFEST).exists()]
        if resume_from is not None:
            target = Path(resume_from).expanduser().resolve()
            if target not in steps:
                raise UsageError(f"--resume-from {resume_from} is not a step checkpoint of "
                                 f"{self.dir} (those are {', '.join(p.name for p in steps)})")
            ckpt.verify_folder(target)
            later = [p for p in every if p.name > target.name]  # with a manifest or not
            if later:
                aside = self.dir / "checkpoints" / "discarded"
                aside.mkdir(exist_ok=True)
                for p in later:
                    os.replace(p, aside / f"{p.name}-{int(time.time())}")
                log.info(f"resuming from {target.name}; moved "
                         f"{', '.join(p.name for p in later)} to {aside}")
            self._fresh_optimizer = not (target / "trainer_state.safetensors").exists()
            return
        if not every:
            return
        try:
            # a step folder is renamed into place only once complete: a visible one without
            # its manifest is damage, not a save in progress
            if not (every[-1] / ckpt.MANIFEST).exists():
                raise ckpt.CheckpointError(f"{every[-1]} has lost its {ckpt.MANIFEST}")
            ckpt.verify_folder(every[-1])
            if not (every[-1] / "trainer_state.safetensors").exists():
                raise ckpt.CheckpointError(f"{every[-1]} holds no optimizer state to resume "
                                           "with")
            check_step_record(every[-1])
        except (ckpt.CheckpointError, OSError, ValueError) as e:
            intact = next((p for p in reversed(every[:-1]) if _intact(p)), None)
            how = (f"to go on from the last intact one, rerun with --resume-from {intact} "
                   "(its optimizer moments start afresh where it no longer holds them)"
                   if intact else "no earlier intact checkpoint exists: choose a new --out")
            raise RunError(f"the run's newest checkpoint is damaged: {e}. Nothing was trained "
                           f"on it; {how}") from None

    def close(self) -> None:
        """Release the directory's lock (also done at exit if a run dies). A run that ends
        before it logged or saved anything (refused for want of disk, interrupted before its
        first step) removes what it made, so a folder it created is gone again."""
        if self.writer:
            self._release()

    def _release(self) -> None:
        """Release the lock; where the folder holds nothing but what this Run made (its
        run_config.json, its .lock, no step, no log), remove those and the folders it
        created. Anything else there, or a file it did not make, is left as it is."""
        ours = {".lock"} if self._made_lock else set()
        if self._made_config:
            ours.add(ckpt.RUN_CONFIG)
        try:
            names = {p.name for p in self.dir.iterdir()}
        except OSError:
            names = {""}
        if not names - ours <= {".lock"}:  # (a lock file of an earlier start is no work)
            self.lock.release()
            return
        if ckpt.RUN_CONFIG in ours:
            (self.dir / ckpt.RUN_CONFIG).unlink(missing_ok=True)
        if self._made_lock:
            (self.dir / ".lock").unlink(missing_ok=True)  # before it is given up
        self.lock.release()
        for d in self._made_dirs:  # deepest first; a folder someone filled meanwhile stays
            try:
                d.rmdir()
            except OSError:
                break

    def _clear_temporaries(self) -> None:
        """The stages of saves that were killed half-way (never loaded: no manifest) of
        processes that are gone, each known by the package's marker inside it
        (`fsio.clear_temporaries`); nothing else."""
        for folder in (self.dir, self.dir / "checkpoints"):
            clear_temporaries(folder)

    def resume_point(self) -> Path | None:
        return ckpt.latest_step_checkpoint(self.dir)

    def resume(self, model, opt: torch.optim.Optimizer) -> int:
        """Load weights and optimizer state of the last step checkpoint (verified when the run
        was opened); the step to start at."""
        last = self.resume_point()
        if last is None:
            if self.writer:
                self.truncate_log(0)  # a start killed before its first checkpoint
            return 0
        device = next(model.parameters()).device
        ckpt.load_weights_into(model, last)
        if self._fresh_optimizer:  # asked for with --resume-from: its moments were dropped
            meta = read_json(last / "trainer_state.json", "trainer state")
            log.warning(f"{last} no longer holds its optimizer moments; Adam starts afresh from "
                        "it (the run will not equal an uninterrupted one)")
        else:
            state = ckpt.load_trainer_state(last)
            if state is None:
                raise ckpt.CheckpointError(f"{last} holds no trainer_state.json; resume from "
                                           "an earlier checkpoint with --resume-from")
            tensors, meta = state
            load_optimizer_state(opt, {k: v.to(device) if v.dim() else v
                                       for k, v in tensors.items()}, meta)
        if self.writer:
            self.truncate_log(meta["step"])
            if self._fresh_optimizer:
                self.log({"step": meta["step"], "event": f"resumed from {last.name} with "
                          "fresh optimizer moments"})
            log.info(f"resumed from {last} at step {meta['step']}")
        return meta["step"]

    def log(self, record: dict) -> None:
        if not self.writer:
            return
        record = {**record, "time": round(time.time(), 3)}  # wall clock: stage durations
        # O_NOFOLLOW: a link at the log's name is never written through
        fd = os.open(self.dir / "metrics.jsonl",
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "a") as f:
            f.write(json.dumps(finite_json(record)) + "\n")

    def truncate_log(self, step: int) -> None:
        """Drop records after `step` (written before a kill, then redone after resume); the
        rewrite is atomic, so a kill during it keeps every earlier line."""
        f = self.dir / "metrics.jsonl"
        if f.exists():  # a line half-written by a kill is not a record (read_jsonl drops it)
            keep = [json.dumps(rec) for _, rec in read_jsonl(f, "metrics log", log=True)
                    if isinstance(rec, dict) and rec.get("step", 0) <= step]
            write_atomic(f, "".join(ln + "\n" for ln in keep), fault="metrics-rewrite")

    def save(self, step: int, model, tokenizer, opt: torch.optim.Optimizer,
             extra: dict | None = None) -> Path:
        if not all_finite(model):
            raise FloatingPointError(f"weights are not finite at step {step}; not saving. The "
                                     f"last good checkpoint is {self.resume_point()}")
        tensors, meta = optimizer_state(opt)
        meta = {**meta, "step": step, **(extra or {})}
        kept = self.resume_point()
        try:
            path = ckpt.save_checkpoint(self.dir / "checkpoints" / f"step_{step:06d}", model,
                                        tokenizer, self.config, (tensors, meta))
            fault_point("step-renamed")
            ckpt.publish(path, self.dir)
        except Exception as e:
            fault = _write_fault(e)
            if fault is None:
                raise
            kept_msg = (f"the last complete checkpoint, {kept}, is kept (the same command "
                        "resumes from it)") if kept else \
                ("no checkpoint was saved yet (the same command starts the run over)")
            if fault.errno == errno.ENOSPC:
                raise RunError(f"the disk filled while saving step {step} of {self.dir}; the "
                               f"partial save was removed and {kept_msg}. To go on: "
                               f"{DISK_REMEDY}") from None
            raise RunError(f"cannot write step {step} of {self.dir} ({fault.path}): "
                           f"{fault.remedy}; the partial save was removed and {kept_msg}"
                           ) from None
        for older in sorted((self.dir / "checkpoints").glob("step_*")):
            if older.name < path.name and (older / "trainer_state.safetensors").exists():
                ckpt.drop_optimizer_state(older)  # only the newest is resumed from
        return path
