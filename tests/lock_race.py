"""Race harness for a run directory's lock: in each trial several processes, released at the
same moment, try to take the lock of one folder, and each one that gets it holds it until every
contender has tried. A trial passes when exactly one process holds the lock. `stale` trials
begin with a lock left by a writer killed with SIGKILL while holding it.

    python -m tests.lock_race --trials 1000 [--contenders 4]
    python -m tests.lock_race --trials 1000 --lock train.common:RunLock   # another lock class

Children are forked (cheap) and use only the lock class; nothing but the trial folder is
written.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import tempfile
import time
from pathlib import Path


def _child(lock_cls, folder: Path, go_at: float, hold_s: float, report: int) -> None:
    """Try the lock; a holder marks its holding with a file only one process can create, so
    two processes holding at once are seen however late one of them started (a contender
    that takes the lock after the first holder released it is not a double)."""
    while time.time() < go_at:  # spin: all contenders start within microseconds
        pass
    try:
        lock = lock_cls(folder)
    except Exception:  # noqa: BLE001 - any refusal is "not held"
        os.write(report, b"0")
        return
    try:
        fd = os.open(folder / "holding", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        os.write(report, b"2")  # someone else holds it right now
        time.sleep(hold_s)
        lock.release()
        return
    os.write(report, b"1")
    time.sleep(hold_s)  # a holder keeps the lock while the others try
    os.close(fd)
    os.unlink(folder / "holding")
    lock.release()


def _kill_while_holding(lock_cls, folder: Path) -> None:
    pid = os.fork()
    if pid == 0:
        try:
            lock_cls(folder)
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)


def trial(lock_cls, folder: Path, contenders: int, stale: bool) -> int:
    """0 when no contender got the lock, 1 when holders never overlapped, 2 when two held it
    at once."""
    if stale:
        _kill_while_holding(lock_cls, folder)
    r, w = os.pipe()
    go_at = time.time() + 0.02
    pids = []
    for _ in range(contenders):
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                _child(lock_cls, folder, go_at, 0.03, w)
            finally:
                os._exit(0)
        pids.append(pid)
    os.close(w)
    for pid in pids:
        os.waitpid(pid, 0)
    with os.fdopen(r, "rb") as f:
        got = f.read()
    return 2 if b"2" in got else 1 if b"1" in got else 0


def race(lock_cls, trials: int, contenders: int = 4) -> dict[str, list[int]]:
    """Per trial (fresh and stale, `trials` of each): 0 none held, 1 one at a time, 2 two at
    once."""
    out: dict[str, list[int]] = {"fresh": [], "stale": []}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in out:
            for i in range(trials):
                folder = Path(tmp) / f"{kind}{i}"
                folder.mkdir()
                out[kind].append(trial(lock_cls, folder, contenders, kind == "stale"))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--contenders", type=int, default=4)
    ap.add_argument("--lock", default="nca_interp.runlock:RunLock")
    args = ap.parse_args(argv)
    mod, name = args.lock.split(":")
    held = race(getattr(importlib.import_module(mod), name), args.trials, args.contenders)
    for kind, counts in held.items():
        doubles = sum(c > 1 for c in counts)
        none = sum(c == 0 for c in counts)
        print(f"{kind}: {len(counts)} trials, {args.contenders} contenders: {doubles} with two "
              f"holders at once, {none} with none")


if __name__ == "__main__":
    main()
