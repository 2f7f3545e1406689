"""Data parallelism on torch.distributed: two gloo CPU processes under torchrun must train the
same weights as one process with the same global batch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from nca_interp.checkpoint import save_checkpoint
from tests.conftest import tiny
from train import distill

TASK = {"name": "sokoban", "fmt": "compact", "dim_room": [6, 6], "num_boxes": 1}
ROOT = Path(__file__).resolve().parents[2]


def args(base, out, *extra):
    return ["--student", str(base), "--out", str(out), "--batch", "8", "--steps", "3",
            "--save-every", "2", "--eval-every", "3", "--eval-levels", "8", "--threads", "1",
            "--lr", "1e-3", "--device", "cpu", *extra]


def torchrun(argv: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", "-m", "train.distill", *argv]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def metrics(run: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("method", ["opd", "nca"])
def test_two_gloo_ranks_equal_one_process(tok, tmp_path, method):
    base = save_checkpoint(tmp_path / "base", tiny(tok), tok, {"task": TASK})
    distill.main(args(base, tmp_path / "single", "--method", method))
    # two ranks, micro-batches of 2 prompts: sharding AND accumulation must not change the update
    torchrun(args(base, tmp_path / "ddp", "--method", method, "--micro-batch", "2"), tmp_path)
    a = load_file(tmp_path / "single" / "model.safetensors")
    b = load_file(tmp_path / "ddp" / "model.safetensors")
    init = load_file(base / "model.safetensors")
    moved = max((a[k] - init[k]).abs().max().item() for k in a)
    assert moved > 1e-4  # the runs trained
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-5, msg=k)
    one, two = metrics(tmp_path / "single"), metrics(tmp_path / "ddp")
    assert [r["step"] for r in two] == [1, 2, 3]  # rank 0 alone writes the log
    for r1, r2 in zip(one, two):
        for key in ("opd", "sample_win", "response_len", "eval_win_no_c"):
            if key in r1:
                assert r2[key] == pytest.approx(r1[key], rel=1e-4, abs=1e-6), key


def test_ddp_resume_and_uneven_batch(tok, tmp_path):
    base = save_checkpoint(tmp_path / "base", tiny(tok), tok, {"task": TASK})
    run = tmp_path / "ddp"
    torchrun(args(base, run, "--steps", "2"), tmp_path)
    torchrun(args(base, run), tmp_path)  # same run, more steps: resumes from step 2
    assert [r["step"] for r in metrics(run)] == [1, 2, 3]
    distill.main(args(base, tmp_path / "single"))
    a = load_file(tmp_path / "single" / "model.safetensors")
    b = load_file(run / "model.safetensors")
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-5, msg=k)
    with pytest.raises(AssertionError, match="does not split evenly"):
        torchrun(args(base, tmp_path / "odd", "--batch", "7"), tmp_path)


def test_a_stalled_teardown_fails_visibly(tmp_path):
    """A process group whose destruction never returns (pytorch#75097) must not hang the
    launcher: the watchdog dumps the stacks and exits 1."""
    script = tmp_path / "stall.py"
    script.write_text(
        "import time, torch\n"
        "from train import common\n"
        "common.TEARDOWN_TIMEOUT_S = 1\n"
        "torch.distributed.is_initialized = lambda: True\n"
        "torch.distributed.barrier = lambda: None\n"
        "torch.distributed.destroy_process_group = lambda: time.sleep(60)\n"
        "common.close_distributed(common.Dist(rank=1, world=2))\n"
        "print('returned')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=50)
    assert proc.returncode == 1 and "returned" not in proc.stdout
    assert "Timeout" in proc.stderr and "close_distributed" in proc.stderr
