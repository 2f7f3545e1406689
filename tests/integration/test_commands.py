"""What only a process of its own can show: a command run as `python -m`, an import seen from a
fresh interpreter, an open that would block. The unit tier renders the same commands'
help in-process (tests/unit/test_cli.py); the first test here pins that the two agree."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nca_interp import analysis
from tests.conftest import command_help, tiny
from tests.integration.test_faults import TASK

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "analysis"


@pytest.mark.parametrize("module, flag", [("nca_interp.layer_sim", "--help"),
                                          ("train.distill", "--help-all")])
def test_a_commands_help_in_its_own_process_is_the_one_rendered_in_process(module, flag):
    out = subprocess.run([sys.executable, "-m", module, flag], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    assert out.startswith(f"usage: python -m {module} ")
    assert out == command_help(module, flag)


def test_the_example_analysis_runs_as_a_command_and_a_fresh_pipeline_sees_it(tmp_path):
    """What a user does: the example's command on the embedded checkpoints, and a fresh
    `reproduce --help-all` that finds it through NCA_INTERP_ANALYSES."""
    import os
    import subprocess

    from nca_interp.assets import embedded

    env = {**os.environ, "PYTHONPATH": str(EXAMPLE), analysis.PLUGINS_ENV: "toy_analysis"}
    out = subprocess.run([sys.executable, "-m", "toy_analysis", str(embedded("sokoban_opd")),
                          "--out", str(tmp_path / "toy")], env=env, capture_output=True,
                         text=True, check=True)
    assert "files" in out.stdout and (tmp_path / "toy.json").exists()
    assert (tmp_path / "toy.html").exists()
    shown = subprocess.run([sys.executable, "-m", "nca_interp.paper.reproduce", "--help-all"],
                           env=env, capture_output=True, text=True, check=True).stdout
    assert "patching, lens, toy)" in re.sub(r"\s+", " ", shown)
    bad = subprocess.run([sys.executable, "-m", "nca_interp.paper.reproduce", "--help"],
                         env={**env, analysis.PLUGINS_ENV: "no_such_module"},
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "NCA_INTERP_ANALYSES names the analysis module " \
        "no_such_module, which cannot be imported" in bad.stderr
    assert "Traceback" not in bad.stderr, bad.stderr


@pytest.fixture
def base(tok, tmp_path):
    from nca_interp.checkpoint import save_checkpoint

    return save_checkpoint(tmp_path / "base", tiny(tok), tok, {"task": TASK})


def test_a_fifo_named_config_json_is_refused_without_blocking(base, tmp_path):
    """Run as a command in a process of its own: a blocked open would hang it (timeout)."""
    (base / "config.json").unlink()
    os.mkfifo(base / "config.json")
    done = subprocess.run([sys.executable, "-m", "nca_interp.evaluate", str(base), "--out",
                           str(tmp_path / "rep")], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "NCA_INTERP_QUIET": "1"})
    assert done.returncode == 2, done.stderr
    assert "not a regular file" in done.stderr and "Traceback" not in done.stderr


def test_the_pipeline_parses_nothing_at_import():
    """nca_interp/paper/settings.toml is read when a command asks, never when a module of the
    pipeline is imported (importing `nca_interp.paper.<module>` costs no file read)."""
    code = ("import importlib, pkgutil\n"
            "import nca_interp.paper as p, nca_interp.paper.settings as s\n"
            "def boom(*a, **k): raise SystemExit('settings read at import')\n"
            "s.load = s.parse = boom\n"
            "for m in pkgutil.walk_packages(p.__path__, 'nca_interp.paper.'):\n"
            "    if not m.name.endswith('__main__'):\n"
            "        importlib.import_module(m.name)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]


def test_a_task_named_by_nca_interp_tasks_is_in_every_commands_help():
    """The import-time discovery (nca_interp.tasks): a fresh command process sees the
    example task of docs/examples/task, with its context kinds."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "docs" / "examples" / "task"),
           "NCA_INTERP_TASKS": "toy_task"}
    out = subprocess.run([sys.executable, "-m", "nca_interp.evaluate", "--help"], env=env,
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    shown = re.sub(r"\s+", " ", out)
    assert "--task TASK corridor|facts|" in shown and "state|plan (corridor)" in shown
