"""The library as a user gets it: loads that ask no network without HF_HUB_OFFLINE, and the
wheel built from the repository's files, installed into a fresh environment and used from
outside the repository (`make test-pipeline`: a build and a venv take a minute or two)."""

import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

NO_NETWORK = """
import socket
tried = []
def refuse(*args, **kwargs):
    tried.append(repr(args[1:] if args and isinstance(args[0], socket.socket) else args)[:80])
    raise OSError("no network in this test")
socket.socket.connect = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
"""


def without_hub_settings() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}


def test_a_checkpoint_and_its_bridge_load_without_asking_the_network():
    """With HF_HUB_OFFLINE unset (the import no longer sets it), loading a checkpoint and
    booting its TransformerLens bridge opens no connection: every load passes
    local_files_only=True, and the bridge is handed the loaded model and tokenizer."""
    code = NO_NETWORK + """
from nca_interp.assets import embedded
from nca_interp.hooks import boot_bridge
bridge = boot_bridge(embedded("sokoban_opd"))
print("tried", tried, bridge.cfg.n_layers)
"""
    done = subprocess.run([sys.executable, "-c", code], env={**without_hub_settings(),
                          "OMP_NUM_THREADS": "1"}, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2].startswith("tried [] "), done.stdout


def sources(dest: Path) -> Path:
    """What a fresh clone holds of the package (tracked files, and new ones not ignored),
    copied to `dest`: the wheel is built from there, so the checkout gets no build/."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard", "pyproject.toml", "README.md",
                             "nca_interp", "train"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes((ROOT / name).read_bytes())
    return dest


@pytest.mark.pipeline
def test_the_wheel_installs_the_library_alone_and_works_from_outside_the_repository(
        tmp_path):
    had_build = (ROOT / "build").exists()
    src = sources(tmp_path / "src")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp_path / "dist"), str(src)],
                   check=True, capture_output=True, timeout=600)
    wheel, = (tmp_path / "dist").glob("nca_interp-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"nca_interp", wheel.name.split("-py")[0] + ".dist-info"}, tops
    assert {"nca_interp/train/sft.py", "nca_interp/train/distill.py", "nca_interp/py.typed",
            "nca_interp/assets/sokoban_opd/model.safetensors"} <= set(names)
    # the paper's pipeline runs from a clone, not from the library (#72; probe 12 T-A: it
    # imported the clone's `train` and ended in a traceback outside it)
    assert not [n for n in names if n.startswith("nca_interp/paper")]
    assert (ROOT / "build").exists() == had_build

    # a fresh environment with the wheel alone; its dependencies are this one's, on the path
    # by a .pth (so this environment's editable install of the repository is not)
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"], capture_output=True,
                             text=True, check=True).stdout.strip()
    Path(purelib, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", str(wheel)], check=True, capture_output=True, timeout=600)
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {**without_hub_settings(), "OMP_NUM_THREADS": "1"}

    def run(*argv: str) -> str:
        done = subprocess.run([str(python), *argv], cwd=away, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    out = run("-c", "import importlib.util, os; before = dict(os.environ); import nca_interp; "
              "print(nca_interp.__file__); print(dict(os.environ) == before); "
              "print(importlib.util.find_spec('train'))")
    where, env_same, train = out.split("\n")[:3]
    assert Path(where).is_relative_to(env_dir), where  # the wheel's copy, not the checkout
    assert env_same == "True"  # the import set nothing (HF_HUB_OFFLINE included)
    assert train == "None"  # no top-level `train` to shadow a user's own train.py
    # the README's Python as a user copies it, after installing the wheel alone (#72)
    snippets = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert snippets
    for code in snippets:
        run("-c", code)
    assert run("-m", "nca_interp.layer_sim", "--help").startswith(
        "usage: python -m nca_interp.layer_sim ")
    assert run("-m", "nca_interp.train.sft", "--help").startswith(
        "usage: python -m nca_interp.train.sft ")
    gone = subprocess.run([str(python), "-m", "nca_interp.paper.reproduce", "--help"],
                          cwd=away, env=env, capture_output=True, text=True, timeout=600)
    assert gone.returncode != 0 and "Traceback" not in gone.stderr
    assert "No module named 'nca_interp.paper'" in gone.stderr
