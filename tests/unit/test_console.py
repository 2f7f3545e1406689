"""The library's messages are `logging` records: a notebook importing it sees warnings only
(Python's default for a library), a command shows INFO on stdout and warnings on stderr (#72)."""

import logging
import subprocess
import sys
from pathlib import Path

from nca_interp import console

ROOT = Path(__file__).resolve().parents[2]


def test_a_library_import_shows_warnings_only_and_a_command_every_message(tmp_path):
    code = """
import logging, sys
from nca_interp import evaluate, analysis  # the modules that log
from nca_interp.console import to_console
log = logging.getLogger("nca_interp.evaluate")
log.info("INFO-BEFORE"); log.warning("WARN-BEFORE")
to_console()
log.info("INFO-AFTER"); log.warning("WARN-AFTER")
"""
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["INFO-AFTER"]  # INFO is silent until a command shows it
    assert got.stderr.split() == ["WARN-BEFORE", "WARN-AFTER"]  # the message alone


def test_a_module_run_as_a_command_logs_under_its_own_name(tmp_path):
    """`python -m nca_interp.evaluate` runs the module as __main__: its messages still carry
    its name (so the command shows them), as the demo's response budget line does."""
    got = subprocess.run([sys.executable, "-m", "nca_interp.evaluate", "--n-levels", "2",
                          "--threads", "1", "--out", str(tmp_path / "e")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert got.returncode == 0, got.stderr
    assert "response budget:" in got.stdout and "wrote" in got.stdout


def test_to_console_is_idempotent_and_sends_by_level(capsys):
    console.to_console()
    console.to_console()
    logger = logging.getLogger("nca_interp")
    assert sum(isinstance(h, console._Console) for h in logger.handlers) == 1
    logging.getLogger("train.common").info("resumed")
    logging.getLogger("nca_interp.x").warning("note: careful")
    out, err = capsys.readouterr()
    assert out == "resumed\n" and err == "note: careful\n"
