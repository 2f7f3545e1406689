"""Kill -9 trials of training: in each trial a tiny distillation is started, killed with SIGKILL
at a random moment (or at one of the named fault points of `nca_interp.faults`), and run again
with the same command until it finishes. A trial passes when the finished run's weights equal a
clean run's bit for bit, every step checkpoint matches its manifest, the metrics log holds each
step once, and no temporary of this package is left behind.

    python -m tests.faults --trials 8
    python -m tests.faults --trials 20 --seed 3 --keep /tmp/fault_trials   # keep the folders

Everything is written under one temporary folder (or --keep); nothing else is touched.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POINTS = ("save", "step-renamed", "publish", "metrics-rewrite")  # nca_interp.faults
TASK = {"name": "sokoban", "fmt": "compact", "dim_room": [6, 6], "num_boxes": 1}


def make_base(folder: Path) -> Path:
    """A tiny random-init student (2 layers, d_model 32) with its task recorded."""
    from nca_interp.checkpoint import save_checkpoint
    from nca_interp.models import ModelConfig, build_model
    from nca_interp.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    model = build_model(ModelConfig("qwen3", 2, 32, 4, 2, 64, 256), tok, 0)
    return save_checkpoint(folder, model, tok, {"task": TASK})


def command(base: Path, out: Path, steps: int) -> list[str]:
    return [sys.executable, "-m", "train.distill", "--student", str(base), "--out", str(out),
            "--method", "nca", "--batch", "4", "--steps", str(steps), "--save-every", "1",
            "--eval-every", "1000", "--eval-levels", "2", "--threads", "1", "--lr", "1e-3"]


def run(cmd: list[str], fault: str | None = None, kill_after: float | None = None) -> int:
    env = {**os.environ, "NCA_INTERP_FAULT": fault or "", "NCA_INTERP_QUIET": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    if kill_after is not None:
        try:
            proc.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=600)
    if proc.returncode not in (0, -signal.SIGKILL):
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err.strip()[-500:]}")
    return proc.returncode


def check(out: Path, reference: Path, steps: int) -> list[str]:
    """What is wrong with finished run `out` against the clean run `reference` (empty: pass)."""
    from safetensors.torch import load_file

    from nca_interp.checkpoint import verify_folder
    from nca_interp.fsio import is_temporary

    problems = []
    a, b = load_file(out / "model.safetensors"), load_file(reference / "model.safetensors")
    if a.keys() != b.keys() or any(not (a[k] == b[k]).all() for k in a):
        problems.append("final weights differ from the clean run's")
    for folder in [out, *sorted((out / "checkpoints").glob("step_*"))]:
        try:
            verify_folder(folder)
        except Exception as e:  # noqa: BLE001 - reported, not raised
            problems.append(f"{folder.name}: {e}")
    logged = [json.loads(ln).get("step") for ln in (out / "metrics.jsonl").read_text()
              .splitlines() if ln.strip()]
    if logged != list(range(1, steps + 1)):
        problems.append(f"metrics.jsonl holds steps {logged}")
    left = [str(p.relative_to(out)) for p in out.rglob("*") if is_temporary(p.name)]
    if left:
        problems.append(f"temporaries left: {left}")
    return problems


def trials(n: int, seed: int, workdir: Path, steps: int = 4) -> list[tuple[str, list[str]]]:
    """(what was done, problems) of each trial; the first is the clean reference run."""
    rng = random.Random(seed)
    base = make_base(workdir / "base")
    reference = workdir / "clean"
    t0 = time.time()
    run(command(base, reference, steps))
    clean_s = time.time() - t0
    results = []
    for i in range(n):
        out = workdir / f"trial_{i}"
        if rng.random() < 0.5:
            point = rng.choice(POINTS)
            how = f"killed at fault point {point!r}"
            rc = run(command(base, out, steps), fault=f"{point}:kill")
        else:
            delay = rng.uniform(0.5, clean_s)
            how = f"killed after {delay:.1f} s"
            rc = run(command(base, out, steps), kill_after=delay)
        rerun = 0
        while not (out / "checkpoints" / f"step_{steps:06d}").exists():
            run(command(base, out, steps))
            rerun += 1
            if rerun > 3:
                break
        how += " (finished before the kill)" if rc == 0 else f", rerun {rerun}x"
        results.append((how, check(out, reference, steps)))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", default=None, help="a new folder to keep the trials in")
    args = parser.parse_args(argv)
    if args.trials < 1:
        parser.error("--trials must be >= 1")
    if args.keep and Path(args.keep).exists():
        parser.error(f"--keep {args.keep} exists; name a new folder")
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="nca_interp_faults_"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        results = trials(args.trials, args.seed, workdir)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    failed = 0
    for i, (how, problems) in enumerate(results):
        print(f"trial {i}: {how}: " + ("ok" if not problems else "; ".join(problems)))
        failed += bool(problems)
    print(f"{len(results) - failed} of {len(results)} trials equal the clean run")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
