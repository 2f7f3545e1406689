"""Progress bars for long commands: tqdm on stderr, silent under `--quiet` (any command) or
NCA_INTERP_QUIET=1 (the tests set it)."""

from __future__ import annotations

import os
import sys

__all__ = ["bar"]


def quiet() -> bool:
    return os.environ.get("NCA_INTERP_QUIET") == "1"


def bar(iterable, desc: str, total: int | None = None, unit: str = "it"):
    """`iterable` with a progress bar on stderr (plain tqdm, not the notebook widget: no
    TqdmWarning in notebooks), removed when done."""
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, leave=False,
                disable=quiet(), dynamic_ncols=True)
