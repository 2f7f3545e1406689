"""ruff and mypy in the fast tier (#72, part 4): the repository's ruff configuration over the
code, and mypy over the library and train/ as pyproject.toml's [tool.mypy] says; any finding
fails with the tool's own lines. What mypy checks and why: docs/architecture.md, "Lint and
types"."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINTED = ["nca_interp", "train", "tests", "bench"]


def run(tool: str, *args: str) -> subprocess.CompletedProcess:
    """`python -m tool args` in the repository (its configuration), from this environment; a
    tool not installed is a failure that says how to get it, never a skip."""
    if importlib.util.find_spec(tool) is None:
        pytest.fail(f"{tool} is not installed in {sys.prefix}: `make test` installs it (the dev "
                    "extra: pip install -e '.[dev]')")
    return subprocess.run([sys.executable, "-m", tool, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=1200)


def test_ruff_finds_nothing():
    out = run("ruff", "check", *LINTED)
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_finds_nothing_in_the_library():
    out = run("mypy")  # files, exclusions and options: pyproject.toml's [tool.mypy]
    assert out.returncode == 0 and "Success: no issues found" in out.stdout, \
        out.stdout + out.stderr
