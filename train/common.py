"""What SFT and distillation share: run directories, resume, optimizer state without pickle,
learning-rate schedule, metrics log, CPU speed settings, devices, precision and the
torch.distributed process group."""

from __future__ import annotations

import faulthandler
import json
import math
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from nca_interp import checkpoint as ckpt
from nca_interp.cli import check_writable, finite_json, write_atomic
from nca_interp.errors import RunError, UsageError
from nca_interp.evaluate import play_levels
from nca_interp.faults import fault_point
from nca_interp.models import resolve_device
from nca_interp.runlock import RunLock
from nca_interp.runs import lr_at  # noqa: F401 - the schedule lives with the run readers


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
    saves = sum(1 for s in range(start + 1, steps + 1) if s % save_every == 0 or s == steps)
    if not saves:
        return 0, 0
    return weights * (saves + (3 if start == 0 else 0)), 3 * weights


DISK_REMEDY = ("free space outside this run's folder (files of your own you no longer need), or "
               "raise --save-every")


def _disk_full(e: BaseException) -> bool:
    """An OSError ENOSPC, or safetensors' own error for it (a SafetensorError, not OSError)."""
    import errno

    return getattr(e, "errno", None) == errno.ENOSPC or "No space left on device" in str(e)


# Flags that do not change a run's result: they may differ when a run is resumed.
FREE_FLAGS = ("out", "steps", "threads", "eval_every", "eval_levels", "save_every", "device",
              "teacher_device", "micro_batch", "grad_checkpointing", "git_commit")


# Flags added after runs were recorded: a saved config without one ran with this value.
ADDED_FLAGS = {"kl": "full", "kl_k": 256, "kl_support": "p", "kl_tail": "renorm",
               "kl_form": "k1", "nca_kl": "same", "role": None}


def check_out(out: str | Path, inputs: dict[str, str | Path | None]) -> None:
    """Refuse an --out that is, sits inside or contains one of the run's input checkpoints
    (`inputs`: flag -> folder): a run writes its weights and config at its root."""
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


# What this package leaves in a run directory besides a run's files: its lock, and the
# temporaries of a write killed half-way (`.name.tmp-PID`, `.name.old-PID`, `name.tmp`). Any
# other entry, hidden ones included (a `.git`), is something the run did not make.
_LEFTOVER = re.compile(r"^(?:\.lock|\..+\.(?:tmp|old)-\d+|[^.].*\.tmp)$")


def check_own(folder: Path, run_config: dict) -> bool:
    """Whether `folder` may be written by a run of `run_config`: it does not exist, is empty,
    or is this run's own (its run_config.json is this command's, and anything beyond it is
    what the run wrote: step checkpoints to resume from). Returns whether it holds steps to
    resume from; raises UsageError naming what is there otherwise."""
    if not folder.exists():
        return False
    if not folder.is_dir():
        raise UsageError(f"--out {folder} is a file; choose a folder for the run")

    def leftover(p: Path) -> bool:  # run state, temporaries, a first save killed half-way
        return bool(_LEFTOVER.match(p.name)) or (
            p.name == "checkpoints" and p.is_dir()
            and all(_LEFTOVER.match(c.name) for c in p.iterdir()))

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
        old = json.loads(saved.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(refuse + f"its {ckpt.RUN_CONFIG} is unreadable ({e}); choose a new "
                         "--out") from None
    diff = sorted(k for k in run_config if k not in FREE_FLAGS
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


class Run:
    """A run directory: `run_config.json`, `metrics.jsonl`, `checkpoints/step_*`, and the
    latest weights published at its root. Construct it once the run can start (arguments
    checked, models loaded): it checks the directory is new or this run's own (never
    another run's or a model's), takes its lock, clears temporaries of killed saves,
    republishes the newest checkpoint at the root if a kill left the root behind it, and
    writes the config."""

    def __init__(self, out: str | Path, run_config: dict, writer: bool = True,
                 inputs: dict[str, str | Path | None] | None = None):
        """`writer=False` (data-parallel ranks other than 0) reads the directory, never writes.
        `inputs`: the run's input checkpoints by flag, which --out must keep clear of."""
        self.dir = Path(out).resolve()
        self.writer = writer
        self.config = {**run_config, "git_commit": ckpt.git_commit()}
        self._t0 = time.time()
        if not writer:
            return
        check_out(self.dir, inputs or {})
        check_own(self.dir, run_config)  # before the lock file is written into it
        check_writable(self.dir, "run")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.lock = RunLock(self.dir)
        started = check_own(self.dir, run_config)  # again, now that no one else writes
        self._clear_temporaries()
        if started:
            old = json.loads((self.dir / ckpt.RUN_CONFIG).read_text())
            self.config = {**old, **{k: v for k, v in self.config.items() if k in FREE_FLAGS}}
            if not ckpt.same_weights(self.resume_point(), self.dir):  # killed before publishing
                ckpt.publish(self.resume_point(), self.dir)
        else:  # nothing saved yet: a failed start leaves nothing that blocks a corrected one
            write_atomic(self.dir / ckpt.RUN_CONFIG, json.dumps(self.config, indent=1))

    def close(self) -> None:
        """Release the directory's lock (also done at exit if a run dies)."""
        if self.writer:
            self.lock.release()

    def _clear_temporaries(self) -> None:
        """Folders and files of saves that were killed half-way (never loaded: no manifest)."""
        for p in [*(self.dir / "checkpoints").glob(".step_*"), *self.dir.glob(".*.tmp-*"),
                  *self.dir.glob("*.tmp")]:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)

    def resume_point(self) -> Path | None:
        return ckpt.latest_step_checkpoint(self.dir)

    def resume(self, model, opt: torch.optim.Optimizer) -> int:
        """Load weights and optimizer state of the last step checkpoint; the step to start at."""
        last = self.resume_point()
        if last is None:
            if self.writer:
                self.truncate_log(0)  # a start killed before its first checkpoint
            return 0
        device = next(model.parameters()).device
        ckpt.load_weights_into(model, last)
        tensors, meta = ckpt.load_trainer_state(last)
        load_optimizer_state(opt, {k: v.to(device) if v.dim() else v
                                   for k, v in tensors.items()}, meta)
        if self.writer:
            self.truncate_log(meta["step"])
            print(f"resumed from {last} at step {meta['step']}")
        return meta["step"]

    def log(self, record: dict) -> None:
        if not self.writer:
            return
        record = {**record, "time": round(time.time(), 3)}  # wall clock: stage durations
        with open(self.dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(finite_json(record)) + "\n")

    def truncate_log(self, step: int) -> None:
        """Drop records after `step` (written before a kill, then redone after resume); the
        rewrite is atomic, so a kill during it keeps every earlier line."""
        f = self.dir / "metrics.jsonl"
        if f.exists():
            keep = [ln for ln in f.read_text().splitlines()
                    if ln and json.loads(ln).get("step", 0) <= step]
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
            if not _disk_full(e):
                raise
            kept_msg = f"the last complete checkpoint, {kept}," if kept else "no checkpoint"
            raise RunError(f"the disk filled while saving step {step} of {self.dir}; the "
                           f"partial save was removed and {kept_msg} is kept (the same "
                           f"command resumes from it). To go on: {DISK_REMEDY}") from None
        for older in sorted((self.dir / "checkpoints").glob("step_*")):
            if older.name < path.name and (older / "trainer_state.safetensors").exists():
                ckpt.drop_optimizer_state(older)  # only the newest is resumed from
        return path
