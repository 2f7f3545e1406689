"""The one reader and the one writer of every file the package reads or publishes.

Reading: a path is checked to be a regular file of sane size before it is opened (a FIFO named
`config.json` would block for ever, a folder in its place would raise an OSError naming no
file), decoded as UTF-8 and parsed; every failure is one `InputError` line that names the file
and says what to do. Append-only logs (`metrics.jsonl`) are read up to their last whole line:
a kill mid-append leaves a half line, which is not data.

Writing: every file goes to a fresh private folder beside its target (a *stage*, created with
O_EXCL semantics so no name the package writes can have been planted as a link), then is renamed
over the target, so a reader or a kill sees the old file or the new one, never a part; a link at
the target is refused. `clear_temporaries` removes the stages of processes that are gone, and
only stages that carry the package's marker (see "writing" below).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path

from nca_interp.errors import InputError, MissingInputError, RunError, UsageError

__all__ = ["MAX_JSON_BYTES", "MAX_TEXT_BYTES", "RUNS_ENV", "STAGE_MARK", "UnsafePathError",
           "WriteFault", "check_owned", "check_target", "clear_temporaries", "default_cache",
           "is_own_temporary", "is_temporary", "is_write_fault", "link_runs_home", "new_stage",
           "others_can_change", "parse_json", "pid_alive", "read_bytes", "read_json",
           "read_jsonl", "read_text", "regular_file", "replace_folder", "spill_folder", "staged",
           "write_bytes", "write_error", "write_text"]

log = logging.getLogger(__spec__.name if __spec__ else __name__)  # python -m too

MAX_JSON_BYTES = 1 << 30  # a report of a 1.7B model's per-module table is tens of MB
MAX_TEXT_BYTES = 64 << 20  # prompts, system prompts, data files of questions

def default_cache() -> Path:
    """The package's cache folder (fetched models): $NCA_INTERP_CACHE or ~/.cache/nca_interp."""
    return Path(os.environ.get("NCA_INTERP_CACHE") or Path.home() / ".cache" / "nca_interp")


RUNS_ENV = "NCA_INTERP_RUNS"  # where runs/ points: runs outlive the checkout


def link_runs_home(out: str | Path) -> None:
    """Keep a command's output under the default `runs/` outside the work tree: when `out` is
    a relative path under `runs/` and no `runs` exists here, `runs` is made a link to
    $NCA_INTERP_RUNS (default: the cache folder's `runs/`) first, so a demo's or a run's
    default output never makes `runs/` a folder of the checkout (which a fresh checkout loses,
    and which then kept the pipeline from linking it). A `runs` folder or link already there is
    used as it is; a dangling link's folder is made again only where it is the runs folder
    this function would link (a link planted elsewhere is refused, not followed); any other
    path is the user's choice."""
    parts = Path(out).parts
    if Path(out).is_absolute() or not parts or parts[0] != "runs":
        return
    link = Path("runs")
    home = Path(os.environ.get(RUNS_ENV) or default_cache() / "runs").expanduser()
    if link.is_symlink():
        if not link.exists():  # a link whose folder went (a cleared cache): make the folder
            target = Path(os.path.abspath(Path(os.readlink(link)).expanduser()))
            ours = {Path(os.path.abspath(h)) for h in (home, default_cache() / "runs")}
            ours |= {h.resolve() for h in ours}
            if target not in ours:
                raise UsageError(f"runs is a link to {target}, which does not exist and is not "
                                 f"the runs folder (${RUNS_ENV}: {home}); this package remakes "
                                 "only that one: make the folder yourself if it is yours, or "
                                 "remove the link")
            target.mkdir(parents=True, exist_ok=True)
        return
    if link.exists():
        return
    home.mkdir(parents=True, exist_ok=True)
    link.symlink_to(home.resolve(), target_is_directory=True)
    log.warning(f"runs/ -> {home.resolve()} (outside the work tree, so the runs outlive the "
                f"checkout; ${RUNS_ENV} moves it)")


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
    except ValueError as e:  # an integer of more digits than Python converts (4300)
        raise InputError(f"{where}: holds a number too long to read ({str(e).split(':')[0]}; "
                         "no file the package reads holds one); restore the file") from None


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
#
# Every temporary lives in a *stage*: a folder `.nca-tmp-PID-XXXXXXXX` that `tempfile.mkdtemp`
# creates inside the target's folder (O_EXCL: it cannot already exist, so no name the package
# writes can have been planted as a link to somewhere else; mode 0700) and that holds a marker
# file `.nca-temporary` whose content is the stage's own name: the record that this package made
# it. A file or folder is written inside the stage and renamed out over its target (same file
# system: atomic). Only stages are ever removed as leftovers, and only when the name matches,
# the writer's pid is gone and the marker holds the name: a user's `.draft.tmp-4242` or
# `.backup.old-2020/` is never taken for one.

STAGE_MARK = ".nca-temporary"
_STAGE = re.compile(r"^\.nca-tmp-(\d+)-[a-z0-9_]{8}$")
# earlier versions' temporaries (`.NAME.nca-tmp-PID`, `.NAME.nca-old-PID`): skipped when a folder
# is listed, never removed (no record says the package made them)
_LEGACY = re.compile(r"^\..+\.nca-(?:tmp|old)-(\d+)$")


class UnsafePathError(UsageError):
    """A name the package would write over that is a link (or a file with other hard links):
    writing there would damage what it points to."""


def is_temporary(name: str) -> bool:
    """Whether a file name is one of this package's temporaries (a stage, or an earlier
    version's temporary): what a listing of a folder's contents skips."""
    return bool(_STAGE.match(name) or _LEGACY.match(name))


def is_own_temporary(p: Path) -> bool:
    """Whether `p` is a temporary this package made: a stage carrying its marker, or an
    earlier version's `.NAME.nca-tmp-PID` (a file or folder, never a link). A folder named
    like a stage without the marker is not."""
    if p.is_symlink():
        return False
    return _is_own_stage(p) or bool(_LEGACY.match(p.name))


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


def _is_own_stage(p: Path) -> bool:
    """`p` is a stage this package made (by name, kind and marker), whatever its pid."""
    if not _STAGE.match(p.name) or p.is_symlink() or not p.is_dir():
        return False
    mark = p / STAGE_MARK
    try:
        if mark.is_symlink() or not mark.is_file() or mark.stat().st_size > 256:
            return False
        return mark.read_text() == p.name
    except (OSError, UnicodeDecodeError):
        return False


def clear_temporaries(folder: str | Path) -> list[Path]:
    """Remove the stages in `folder` of processes that are gone (a live writer's are kept);
    the paths removed. Nothing without the package's record is touched."""
    folder = Path(folder)
    removed = []
    for p in folder.iterdir() if folder.is_dir() and not folder.is_symlink() else []:
        m = _STAGE.match(p.name)
        if m and not pid_alive(int(m.group(1))) and _is_own_stage(p):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def new_stage(folder: str | Path) -> Path:
    """A fresh stage inside `folder` (created if missing) with its marker written."""
    import tempfile

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".nca-tmp-{os.getpid()}-", dir=folder))
    try:
        fd = os.open(stage / STAGE_MARK, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                     0o600)
        try:
            if os.write(fd, stage.name.encode()) != len(stage.name.encode()):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(stage / STAGE_MARK))
        finally:
            os.close(fd)
    except OSError:  # a full disk left an unmarked (so never removed) stage behind it
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return stage


@contextmanager
def staged(folder: str | Path):
    """A stage inside `folder` for the duration of the block, removed with what is left in
    it (a file renamed out of it is gone from it already)."""
    stage = new_stage(folder)
    try:
        yield stage
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def check_target(path: str | Path) -> Path:
    """`path` if the package may put a file or folder there: absent, or not a symbolic link.
    Renaming over a link replaces the link, not what it points to, but a link at a name the
    package writes is not the package's: it is refused, never replaced."""
    path = Path(path)
    if path.is_symlink():
        raise UnsafePathError(f"{path} is a symbolic link, which this package did not make; "
                              "it never writes over a link: remove it or choose another "
                              "output")
    return path


def others_can_change(path: str | Path) -> str | None:
    """Why someone other than this user (and root) could change what `path` holds, replace it
    or rename it away, or None when no one can: `path` (resolved) or a folder above it is
    another user's, or others may write it (a folder: without the sticky bit, which keeps
    them from renaming what is not theirs). Group write counts unless the group is this
    user's own (named as the user, no other member: the user-private group that a umask of
    002 writes with)."""
    mine = (os.getuid(), 0)
    p = Path(path).resolve()
    for q in (p, *p.parents):
        st = os.lstat(q)
        if st.st_uid not in mine:
            return f"{q} belongs to another user (uid {st.st_uid})"
        if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX:
            continue  # others may add entries here, never rename or remove this user's
        if st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP
                                         and not _own_group(st.st_gid)):
            return f"{q} may be written by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _own_group(gid: int) -> bool:
    import grp
    import pwd

    try:
        me, group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(gid)
    except KeyError:  # a group or user without a name: not known to be this user's alone
        return False
    return gid == os.getgid() and group.gr_name == me and set(group.gr_mem) <= {me}


def check_owned(path: str | Path, what: str = "--out") -> None:
    """Refuse, before any work, an output whose folder (`path` itself, or the nearest folder
    above it that exists) someone other than this user could change (`others_can_change`):
    they could swap the weights, a page or its plotly.min.js after the command wrote them."""
    folder = Path(path).expanduser().absolute()
    while not folder.exists() and folder != folder.parent:  # what the command would create in
        folder = folder.parent
    why = others_can_change(folder)
    if why:
        raise UsageError(f"{what} {path}: {why}, so others could change what this command "
                         "writes there; choose a folder you own that only you can write")


SPILL_PREFIX = "nca_interp-spill-"


@contextmanager
def spill_folder(what: str):
    """A temporary folder for tensors spilled to disk (grad_align's gradients: gigabytes at
    1.7B), a stage named `nca_interp-spill-WHAT-PID-*` in the system's temporary folder and
    removed on exit. A process killed with SIGKILL cannot remove its own: the next spill
    removes every spill folder whose process is gone and whose marker says it is a spill."""
    import tempfile

    base = Path(tempfile.gettempdir())
    for p in base.glob(f"{SPILL_PREFIX}*"):
        m = re.match(rf"^{SPILL_PREFIX}[A-Za-z_]+-(\d+)-", p.name)
        if m and p.is_dir() and not p.is_symlink() and not pid_alive(int(m.group(1))):
            try:
                ours = (p / STAGE_MARK).read_text() == p.name
            except (OSError, UnicodeDecodeError):
                ours = False
            if ours:
                shutil.rmtree(p, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=f"{SPILL_PREFIX}{what}-{os.getpid()}-") as tmp:
        fd = os.open(Path(tmp) / STAGE_MARK, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, Path(tmp).name.encode())
        os.close(fd)
        yield Path(tmp)


def replace_folder(fresh: Path, path: Path) -> Path:
    """Put the complete folder `fresh` (inside a stage beside `path`) at `path`: an existing
    one is moved aside into that stage first and removed once the new one is in place (a
    reader sees the old folder or the new one)."""
    check_target(path)
    if path.exists():
        aside = fresh.parent / f"{fresh.name}.old"
        os.rename(path, aside)
        os.rename(fresh, path)
        shutil.rmtree(aside)
    else:
        os.rename(fresh, path)
    return path


def write_bytes(path: str | Path, data: bytes, fault: str | None = None) -> Path:
    """`data` to `path` atomically (a file in a fresh stage, fsync, rename). `fault` names the
    moment for the fault-injection tests (nca_interp.faults). A link at `path` is refused; a
    write the OS refuses is one line naming the file (`write_error`)."""
    from nca_interp.faults import fault_point

    path = check_target(path)
    try:
        with staged(path.parent) as stage:
            tmp = stage / path.name
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if fault:
                fault_point(fault)
            os.replace(tmp, path)
    except OSError as e:
        raise write_error(e, path) from None
    return path


def write_text(path: str | Path, text: str, fault: str | None = None) -> Path:
    return write_bytes(path, text.encode("utf-8"), fault)


# errno -> what the user can do about it
_WRITE_REMEDIES = {
    errno.ENOSPC: "the disk is full: free space or write elsewhere",
    errno.EDQUOT: "the disk quota is used up: free space in your quota or write elsewhere",
    errno.EFBIG: "the file is larger than this process may write (a file-size limit, "
                 "`ulimit -f`): raise the limit or write elsewhere",
    errno.EROFS: "the file system is read-only: write elsewhere",
    errno.EACCES: "permission denied: write elsewhere or fix the folder's permissions",
    errno.EPERM: "not permitted: write elsewhere or fix the folder's permissions",
}


def is_write_fault(e: BaseException) -> bool:
    """An error a user's disk or limits cause on write (full, quota, file size, read-only,
    permission), as an OSError or as safetensors' own error that wraps one."""
    if isinstance(e, WriteFault) or isinstance(e, OSError) and e.errno in _WRITE_REMEDIES:
        return True
    text = str(e)
    return any(os.strerror(n) in text for n in _WRITE_REMEDIES) or "No space left" in text


class WriteFault(RunError):
    """A write the OS refused for a reason the user can fix (`errno`, at `path`)."""

    def __init__(self, message: str, errno_: int, path: Path):
        super().__init__(message)
        self.errno, self.path = errno_, path

    @property
    def remedy(self) -> str:
        return _WRITE_REMEDIES[self.errno]


def write_error(e: BaseException, path: str | Path):
    """The user error for OSError `e` met writing `path`: a `WriteFault`, one line naming the
    file and what to do (nothing half-written is left: the stage goes with it); another error
    as it is."""
    if isinstance(e, WriteFault):
        return e
    code = getattr(e, "errno", None)
    if code not in _WRITE_REMEDIES:
        code = next((n for n in _WRITE_REMEDIES if os.strerror(n) in str(e)), None)
    if code is None:
        return e
    return WriteFault(f"cannot write {path}: {_WRITE_REMEDIES[code]} (nothing half-written was "
                      "left)", code, Path(path))
