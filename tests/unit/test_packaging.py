"""What the wheel is made of, read from pyproject.toml without building it (the build itself:
tests/integration/test_wheel.py, `make test-pipeline`): every folder of nca_interp/ is a listed
package, train/ goes in as nca_interp.train and never as a top-level `train`, and importing
the library changes nothing in the process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def folders(root: Path, prefix: str) -> set[str]:
    """Dotted names of `root` and every folder below it (data folders too: setuptools treats
    a folder Python can import as a package, and warns when one is left out)."""
    return {".".join([prefix, *d.relative_to(root).parts]) for d in [root, *root.rglob("*")]
            if d.is_dir() and d.name != "__pycache__"}


def test_every_folder_is_a_listed_package_and_train_is_inside_the_library():
    """... and the paper's pipeline is not: it runs from a clone (#72)."""
    listed = set(SETUPTOOLS["packages"])
    assert SETUPTOOLS["package-dir"] == {"nca_interp.train": "train"}
    paper = folders(ROOT / "nca_interp" / "paper", "nca_interp.paper")
    assert listed == (folders(ROOT / "nca_interp", "nca_interp") - paper) | \
        folders(ROOT / "train", "nca_interp.train"), "add the folder to pyproject's packages"
    assert not any("paper" in d for d in SETUPTOOLS["package-data"]["nca_interp"])
    assert not any(p == "train" or p.startswith("train.") for p in listed)
    assert "py.typed" in SETUPTOOLS["package-data"]["nca_interp"]
    assert (ROOT / "nca_interp" / "py.typed").is_file()


def test_train_imports_itself_relatively_so_it_runs_under_either_name():
    """`python -m train.sft` from a clone and `python -m nca_interp.train.sft` from the wheel
    are the same files: an absolute `from train.x import` would fail in the wheel."""
    for f in sorted((ROOT / "train").glob("*.py")):
        assert "from train." not in f.read_text() and "import train." not in f.read_text(), f


def test_importing_the_library_changes_no_environment_variable():
    """HF_HUB_OFFLINE and the rest are no business of an import (a notebook that then loads
    a model from the hub would find itself offline); the package's own loads pass
    local_files_only=True instead."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    code = ("import os; before = dict(os.environ); import nca_interp, nca_interp.analysis; "
            "print(sorted(set(os.environ.items()) ^ set(before.items())))")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "[]"


def test_an_interrupted_training_command_says_it_resumes_under_either_name():
    from nca_interp.cli import interrupted_note

    def main(argv):
        pass

    for name in ("train.distill", "nca_interp.train.distill"):
        main.__module__ = name
        assert interrupted_note(main, []) == "the same command resumes the run from its last " \
            "checkpoint", name
