"""A command's default output under runs/ never makes runs/ a folder of the checkout: the
param_delta demo once did (runs/param_delta_demo), after which the pipeline, which links runs/
outside the work tree, found a folder and kept its runs in the checkout."""

import os
from pathlib import Path

import pytest

from nca_interp.fsio import link_runs_home


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    work, home = tmp_path / "checkout", tmp_path / "cache" / "runs"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("NCA_INTERP_RUNS", str(home))
    return work, home


def test_a_default_output_under_runs_is_linked_outside_the_checkout(checkout, capsys):
    work, home = checkout
    link_runs_home("runs/demo/out")
    assert (work / "runs").is_symlink() and (work / "runs").resolve() == home.resolve()
    assert "NCA_INTERP_RUNS" in capsys.readouterr().err


@pytest.mark.parametrize("out", ["elsewhere/runs/x", "/abs/runs/x", "runsx/y", "x"])
def test_any_other_output_is_the_users_choice(checkout, out):
    work, home = checkout
    link_runs_home(out)
    assert not os.path.lexists(work / "runs") and not home.exists()


def test_a_runs_folder_or_link_already_there_is_used_as_it_is(checkout, tmp_path):
    work, home = checkout
    (work / "runs").mkdir()
    link_runs_home("runs/x")
    assert (work / "runs").is_dir() and not (work / "runs").is_symlink()
    (work / "runs").rmdir()
    assert not home.exists()
    (work / "runs").symlink_to(home, target_is_directory=True)
    link_runs_home("runs/x")  # a cleared cache: the folder the link names is made again
    assert home.is_dir() and os.readlink(work / "runs") == str(home)
    (work / "runs").unlink()
    gone = tmp_path / "gone"
    (work / "runs").symlink_to(gone, target_is_directory=True)
    from nca_interp.errors import UsageError

    with pytest.raises(UsageError, match="not the runs folder"):  # planted (probe 8, S4)
        link_runs_home("runs/x")
    assert not gone.exists()


def test_an_analysis_demo_and_a_training_run_write_outside_the_checkout(checkout):
    """The real commands, at their default-style runs/ outputs."""
    from nca_interp import param_delta
    from nca_interp.assets import embedded

    work, home = checkout
    param_delta.main([str(embedded("sokoban_opd")), str(embedded("sokoban_nca")),
                      "--init", str(embedded("sokoban_base")), "--out",
                      "runs/param_delta_demo/param_delta", "--threads", "1"])
    assert (work / "runs").is_symlink()
    assert (home / "param_delta_demo" / "param_delta.json").is_file()
    assert not any(p.is_dir() and not p.is_symlink() for p in work.iterdir())
    from train.common import Run

    Path(work / "runs").unlink()  # the training side on its own
    run = Run("runs/r", {"kind": "sft"})
    assert (work / "runs").is_symlink() and (home / "r").is_dir()
    run.close()


@pytest.mark.parametrize("flag", ["ckpt", "--init"])
def test_a_missing_checkpoint_is_said_before_runs_is_linked(checkout, capsys, flag):
    """Bad input gets its one-line error before any work: no runs/ link, no note about one."""
    from nca_interp import param_delta
    from nca_interp.assets import embedded
    from nca_interp.checkpoint import CheckpointError

    work, home = checkout
    real = str(embedded("sokoban_opd"))
    args = {"ckpt": ["missing", "--init", real], "--init": [real, "--init", "missing"]}[flag]
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        param_delta.main([*args, "--out", "runs/demo/param_delta", "--threads", "1"])
    assert not os.path.lexists(work / "runs") and not home.exists()
    assert "runs/ ->" not in capsys.readouterr().err
