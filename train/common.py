"""What SFT and distillation share: run directories, resume, optimizer state without pickle,
learning-rate schedule, metrics log, CPU speed settings, devices, precision and the
torch.distributed process group."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from nca_interp import checkpoint as ckpt
from nca_interp.evaluate import play_levels
from nca_interp.models import resolve_device
from nca_interp.runs import lr_at  # noqa: F401 - the schedule lives with the run readers


def setup_torch(threads: int) -> None:
    torch.set_num_threads(threads)
    # Denormals made early steps of tiny models ~10x slower on this CPU (MACHINE_FACTS.md).
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


def close_distributed(dist: Dist) -> None:
    if dist.world > 1 and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


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


class Run:
    """A run directory: `run_config.json`, `metrics.jsonl`, `checkpoints/step_*`, and the
    latest weights published at its root."""

    def __init__(self, out: str | Path, run_config: dict, writer: bool = True):
        """`writer=False` (data-parallel ranks other than 0) reads the directory, never writes."""
        self.dir = Path(out).resolve()
        self.writer = writer
        self.config = {**run_config, "git_commit": ckpt.git_commit()}
        self._t0 = time.time()
        if not writer:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        saved = self.dir / ckpt.RUN_CONFIG
        if saved.exists():
            old = json.loads(saved.read_text())
            free = ("out", "steps", "threads", "eval_every", "eval_levels", "save_every",
                    "device", "teacher_device", "micro_batch", "grad_checkpointing")
            diff = {k for k in run_config if k not in free and old.get(k) != run_config[k]}
            if diff:
                raise ValueError(f"{self.dir} holds a run with a different config ({sorted(diff)}"
                                 "); resume with the same arguments or choose another --out")
        (self.dir / ckpt.RUN_CONFIG).write_text(json.dumps(self.config, indent=1))

    def resume_point(self) -> Path | None:
        return ckpt.latest_step_checkpoint(self.dir)

    def resume(self, model, opt: torch.optim.Optimizer) -> int:
        """Load weights and optimizer state of the last step checkpoint; the step to start at."""
        last = self.resume_point()
        if last is None:
            return 0
        device = next(model.parameters()).device
        model.load_state_dict(load_file(last / "model.safetensors", device=str(device)))
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
        with open(self.dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")

    def truncate_log(self, step: int) -> None:
        """Drop records after `step` (written before a kill, then redone after resume)."""
        f = self.dir / "metrics.jsonl"
        if f.exists():
            keep = [ln for ln in f.read_text().splitlines()
                    if ln and json.loads(ln).get("step", 0) <= step]
            f.write_text("".join(ln + "\n" for ln in keep))

    def save(self, step: int, model, tokenizer, opt: torch.optim.Optimizer,
             extra: dict | None = None) -> Path:
        tensors, meta = optimizer_state(opt)
        meta = {**meta, "step": step, **(extra or {})}
        path = ckpt.save_checkpoint(self.dir / "checkpoints" / f"step_{step:06d}", model,
                                    tokenizer, self.config, (tensors, meta))
        ckpt.publish(path, self.dir)
        return path
