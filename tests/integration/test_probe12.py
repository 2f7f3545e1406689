"""The twelfth probe's findings (#71, /work/notes/probe12.md): L-A (an --out with a suffix
other than .json locked one name and wrote another), T-A (the pipeline outside a clone),
T-B (Ctrl-C while a command imports), T-C (the in-memory cores' items and tokenizer), T-D (a
tokenizer's model_max_length that is not a number)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nca_interp.assets import embedded
from nca_interp.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]


def run(args: list[str], cwd: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600, **kw)


# -- L-A: one stem for the report, its figures and its lock ----------------------------------

def test_an_out_with_any_suffix_keeps_it_for_the_report_figures_and_lock(tmp_path):
    """`--out e.txt` wrote e.json (another stem's: `--out e`'s) beside e.txt.html, under the
    lock .e.txt.nca-lock, so a second analysis at `--out e` was not refused and one report
    replaced the other without a word; a user's x.json was replaced by `--out x.txt`. Every
    name now comes from the one stem: e.txt.json, e.txt.html, .e.txt.nca-lock."""
    (tmp_path / "x.json").write_text('{"mine": 1}')
    for out in ("e.txt", "x.txt", "m.v2"):
        got = run(["nca_interp.evaluate", str(embedded("sokoban_base")), "--n-levels", "2",
                   "--threads", "1", "--out", out], tmp_path)
        assert got.returncode == 0, got.stderr
        assert (tmp_path / f"{out}.json").is_file() and (tmp_path / f"{out}.html").is_file()
    assert not (tmp_path / "e.json").exists() and not (tmp_path / "m.json").exists()
    assert (tmp_path / "x.json").read_text() == '{"mine": 1}'  # the user's, untouched
    assert json.loads((tmp_path / "e.txt.json").read_text())["analysis"] == "evaluate"
