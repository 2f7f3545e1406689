"""Named fault points for the fault-injection tests (tests/integration/test_faults.py).

`NCA_INTERP_FAULT=<point>:<action>` makes the process meet its fault at that point: `kill`
(SIGKILL itself, as a kill -9 or a lost machine would), `term` (SIGTERM itself, as a
scheduler's stop would), `enospc` (raise the OSError a full disk raises) or `delay` (sleep a
second, as a loaded machine may stall a thread). Unset, a point costs one dictionary lookup.
Points: `step-renamed` (a step checkpoint is in place, the run root not yet republished),
`publish` (half-way through copying it to the root), `metrics-rewrite` (the new metrics file
written, not yet renamed), `fetch-download` (a fetch's temporary folder written, not yet moved
into the cache), `save` (a checkpoint's files being written), `scorer-relay` (a scorer worker's
relay about to pass a reply on to the command).
"""

from __future__ import annotations

import errno
import os
import signal
import time

from nca_interp.errors import UsageError

__all__ = ["fault_point"]


def fault_point(name: str) -> None:
    spec = os.environ.get("NCA_INTERP_FAULT")
    if not spec:
        return
    point, _, action = spec.partition(":")
    if point != name:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "term":
        os.kill(os.getpid(), signal.SIGTERM)
        return
    if action == "delay":
        time.sleep(1.0)
        return
    if action == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"(injected at {name})")
    raise UsageError(f"NCA_INTERP_FAULT={spec}: the action must be kill, term, enospc or delay")
