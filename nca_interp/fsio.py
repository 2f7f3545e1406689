"""The one reader and the one writer of every file the package reads or publishes.

Reading: a path is checked to be a regular file of sane size before it is opened (a FIFO named
`config.json` would block for ever, a folder in its place would raise an OSError naming no
file), decoded as UTF-8 and parsed; every failure is one `InputError` line that names the file
and says what to do. Append-only logs (`metrics.jsonl`) are read up to their last whole line:
a kill mid-append leaves a half line, which is not data.

Writing: every file goes to a temporary beside its target, named `.NAME.nca-tmp-PID` (a prefix
and pid this package alone uses: nothing a user made is ever taken for one), then is renamed
over the target, so a reader or a kill sees the old file or the new one, never a part.
`clear_temporaries` removes the temporaries of processes that are gone, and only those.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path

from nca_interp.errors import InputError, MissingInputError

__all__ = ["MAX_JSON_BYTES", "MAX_TEXT_BYTES", "clear_temporaries", "is_temporary", "old_path",
           "parse_json", "pid_alive", "read_bytes", "read_json", "read_jsonl", "read_text",
           "regular_file", "replace_folder", "spill_folder", "temp_path", "write_bytes",
           "write_text"]

MAX_JSON_BYTES = 1 << 30  # a report of a 1.7B model's per-module table is tens of MB
MAX_TEXT_BYTES = 64 << 20  # prompts, system prompts, data files of questions

_TEMP = re.compile(r"^\..+\.nca-(?:tmp|old)-(\d+)$")


def regular_file(path: str | Path, what: str = "file", limit: int | None = None) -> Path:
    """`path` if it is a regular file (symbolic links followed) no larger than `limit`; else
    an InputError naming it. Never opens it (a FIFO would block the open)."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise MissingInputError(f"{what} {p} does not exist; check the path") from None
    except OSError as e:
        raise InputError(f"{what} {p} cannot be read ({e.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{what} {p} is a folder, not a file; pass the file itself")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{what} {p} is not a regular file (a pipe, socket or device); "
                         "replace it with the file it stands for")
    if limit is not None and st.st_size > limit:
        raise InputError(f"{what} {p} holds {st.st_size / 2**20:.0f} MiB, more than the "
                         f"{limit / 2**20:.0f} MiB such a file can be; is it the right file?")
    return p


def read_bytes(path: str | Path, what: str = "file", limit: int | None = MAX_TEXT_BYTES) -> bytes:
    p = regular_file(path, what, limit)
    try:
        return p.read_bytes()
    except OSError as e:
        raise InputError(f"{what} {p} cannot be read ({e.strerror})") from None


def read_text(path: str | Path, what: str = "file", limit: int | None = MAX_TEXT_BYTES) -> str:
    """A UTF-8 text file's text; an InputError names the file and the first bad byte."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputError(f"{what} {path} is not UTF-8 text (byte {e.start}, line {line}); save "
                         "it as UTF-8") from None


def parse_json(text: str, where: str):
    """JSON text from `where` (a file, or file:line), parsed; an InputError names it."""
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply to read (no file the package "
                         "reads nests so); restore the file") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{where}: not valid JSON (line {e.lineno}, column {e.colno}: "
                         f"{e.msg}); restore or fix the file") from None


def read_json(path: str | Path, what: str = "file", limit: int | None = MAX_JSON_BYTES):
    """A JSON file, parsed (see `parse_json`)."""
    return parse_json(read_text(path, what, limit), str(path))


def read_jsonl(path: str | Path, what: str = "file", log: bool = False
               ) -> list[tuple[int, object]]:
    """(line number, value) of each non-blank line of a JSON-lines file. `log=True` (an
    append-only log such as metrics.jsonl): a last line without its newline that does not
    parse is a kill mid-append and is dropped; anywhere else a bad line is an InputError
    naming file and line."""
    text = read_text(path, what, MAX_JSON_BYTES)
    lines = text.split("\n")
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append((n, parse_json(line, f"{path}:{n}")))
        except InputError:
            if log and n == len(lines):  # no newline after it: the append never finished
                break
            raise
    return out


# -- writing -----------------------------------------------------------------------------------

def temp_path(path: str | Path) -> Path:
    """This process's temporary for `path` (beside it, hidden, tagged with the pid)."""
    path = Path(path)
    return path.with_name(f".{path.name}.nca-tmp-{os.getpid()}")


def old_path(path: str | Path) -> Path:
    """Where `path` is moved aside while its replacement is renamed in."""
    path = Path(path)
    return path.with_name(f".{path.name}.nca-old-{os.getpid()}")


def is_temporary(name: str) -> bool:
    """Whether a file name is one of this package's temporaries (any pid)."""
    return bool(_TEMP.match(name))


def pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clear_temporaries(folder: str | Path) -> list[Path]:
    """Remove the temporaries in `folder` left by processes that are gone (a live writer's
    are kept); the paths removed. Nothing else is touched."""
    folder = Path(folder)
    removed = []
    for p in folder.iterdir() if folder.is_dir() else []:
        m = _TEMP.match(p.name)
        if m and not pid_alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() and not p.is_symlink() \
                else p.unlink(missing_ok=True)
            removed.append(p)
    return removed


SPILL_PREFIX = "nca_interp-spill-"


@contextmanager
def spill_folder(what: str):
    """A temporary folder for tensors spilled to disk (grad_align's gradients: gigabytes at
    1.7B), named `nca_interp-spill-WHAT-PID-*` in the system's temporary folder and removed on
    exit. A process killed with SIGKILL cannot remove its own: the next spill removes every
    spill folder whose process is gone."""
    import tempfile

    base = Path(tempfile.gettempdir())
    for p in base.glob(f"{SPILL_PREFIX}*"):
        m = re.match(rf"^{SPILL_PREFIX}[A-Za-z_]+-(\d+)-", p.name)
        if m and p.is_dir() and not p.is_symlink() and not pid_alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=f"{SPILL_PREFIX}{what}-{os.getpid()}-") as tmp:
        yield Path(tmp)


def replace_folder(fresh: Path, path: Path) -> Path:
    """Put the complete folder `fresh` at `path`: an existing one is moved aside first and
    removed once the new one is in place (a reader sees the old folder or the new one)."""
    if path.exists():
        aside = old_path(path)
        os.rename(path, aside)
        os.rename(fresh, path)
        shutil.rmtree(aside)
    else:
        os.rename(fresh, path)
    return path


def write_bytes(path: str | Path, data: bytes, fault: str | None = None) -> Path:
    """`data` to `path` atomically (temporary, fsync, rename). `fault` names the moment for
    the fault-injection tests (nca_interp.faults)."""
    from nca_interp.faults import fault_point

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if fault:
            fault_point(fault)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_text(path: str | Path, text: str, fault: str | None = None) -> Path:
    return write_bytes(path, text.encode("utf-8"), fault)
