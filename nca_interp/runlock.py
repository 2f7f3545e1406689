"""One writer per run directory.

The lock is the kernel's: an exclusive `flock` on `OUT/.lock`, held for as long as the writer's
file descriptor is open. The kernel drops it when the process ends however it ends (kill -9
included), so a lock is never stale, a dead writer's pid being reused by another process
changes nothing, and taking it is one atomic call with no window between "is it free?" and
"it is mine". The file's content is only a note for people: the holder's pid and command line,
written after the lock is taken; a refused writer reads it (retrying briefly while it is being
written) to say who holds the directory and how to clear it.

A pid file alone (create with O_EXCL, then write the pid; a dead pid means stale) cannot be
made race-free: between reading a stale pid and deleting the file another process may take it,
and an empty file reads as stale while its writer is still writing (train/common.py's earlier
lock failed both ways in tests/integration/test_faults.py's race harness).
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import time
from pathlib import Path

from nca_interp.errors import RunError
from nca_interp.fsio import UnsafePathError

__all__ = ["RunLock", "holder"]

# What a lock file of ours holds: nothing (released) or the holder's note, `PID\nCOMMAND\n`
OURS = re.compile(rb"(?:\d+\n[^\n]*\n)?")
MAX_NOTE = 1 << 21  # a longer file is not a note of ours (ARG_MAX is 2 MiB on Linux)


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    # one line: an argument holding newlines (`python -c "..."`) split the refusal over several
    return " ".join(" ".join(a.decode(errors="replace").split()) for a in raw.split(b"\0")
                    if a.strip()) or "?"


class RunLock:
    """Hold `folder/.lock` exclusively, or raise RunError naming the holder."""

    def __init__(self, folder: str | Path, name: str = ".lock", label: str | None = None):
        """Lock `folder/name` (`name`: a run directory's `.lock`, or an analysis's
        `.STEM.nca-lock` beside its report; `label`: what a refusal calls it)."""
        self.path = Path(folder) / name
        try:  # never through a link planted at the name: O_NOFOLLOW refuses it
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UnsafePathError(f"{self.path} is a symbolic link, which this package did "
                                      "not make; remove it (it never writes through a link)"
                                      ) from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:  # a hard link shares a victim's data
            os.close(fd)
            raise UnsafePathError(f"{self.path} is not a plain file of its own (a device, a pipe "
                                  "or a hard link to another file); remove it")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunError(self._refusal(label or folder)) from None
        if not OURS.fullmatch(os.pread(fd, MAX_NOTE + 1, 0)):  # a user's `.lock`, kept
            os.close(fd)
            raise UnsafePathError(f"{self.path} holds something other than this package's lock "
                                  "note (a pid and a command line, or nothing): a file of "
                                  "yours or another tool's, left as it is; move it away, or "
                                  "choose another --out")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n{_cmdline(os.getpid())}\n".encode(), 0)
        self._fd: int | None = fd

    def _refusal(self, folder) -> str:
        note = ""
        for _ in range(20):  # the holder writes its note just after taking the lock
            try:
                note = self.path.read_text()
            except OSError:
                break
            if note.strip():
                break
            time.sleep(0.01)
        pid, _, cmd = note.strip().partition("\n")
        who = f"pid {pid} ({cmd.strip() or '?'})" if pid else "another process"
        return (f"{folder} is being written by {who}; wait for it to finish, stop it "
                f"(kill {pid or 'PID'}), or choose another --out. The lock is released when "
                "that process ends, however it ends")

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Give the lock up (also done by the kernel when this process ends). The file stays:
        deleting it could let two later writers lock two different files."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def holder(folder: str | Path, name: str = ".lock") -> str | None:
    """Who holds `folder/name` now ("pid N (command)"), or None: read only, never created,
    never through a link (a reader's shared lock is refused while a writer holds it)."""
    try:
        fd = os.open(Path(folder) / name,  # O_NONBLOCK: a FIFO planted there never blocks
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, _, cmd = os.pread(fd, 4096, 0).decode(errors="replace").partition("\n")
            return f"pid {pid.strip() or '?'} ({cmd.strip() or '?'})"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
