"""Progress bars for long commands: tqdm on stderr, silent under `--quiet` (any command) or
NCA_INTERP_QUIET=1 (the tests set it)."""

from __future__ import annotations

import os
import sys

__all__ = ["bar"]


def quiet() -> bool:
    return os.environ.get("NCA_INTERP_QUIET") == "1"


def bar(iterable, desc: str, total: int | None = None, unit: str = "it", initial: int = 0,
        show: bool = True, leave: bool = False):
    """`iterable` with a progress bar on stderr (plain tqdm, not the notebook widget: no
    TqdmWarning in notebooks), removed when done unless `leave`; `initial` counts steps done
    before (a resumed run); `show=False` (another process's bar) or quiet: none."""
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, leave=leave,
                initial=initial, disable=quiet() or not show, dynamic_ncols=True)
