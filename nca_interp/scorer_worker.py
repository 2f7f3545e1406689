"""Your own scorer (`scorer=path/file.py:fn` or `module:fn`) run in a worker process, under a
contract. The worker is started by `ScorerWorker` and answers on pipes:

    python -m nca_interp.scorer_worker path/file.py:fn    # JSON lines in, JSON lines out

The contract: `fn(item: dict, response: str)` returns a bool, or a finite number in [0, 1]
(right when >= 0.5), within `timeout` seconds per item. Anything else (NaN, inf, a number out
of range, another type, an exception, `sys.exit`, a crash, a hang) is one `UsageError` naming
the item and the scorer. A worker of its own keeps all of that out of the command: a hang is
cut at its time limit, `sys.exit` or `os._exit` ends the worker, not `evaluate`.

No process outlives the command: the worker is a small supervisor (on Linux a child
subreaper, so every orphaned descendant becomes its child) with the scorer in a process of its
own below it. Whatever the scorer starts, in a new session or daemonised, is killed with the
worker's whole tree (found through /proc) and process group after a timeout, a fault,
`close()`, the end of a `with` block, garbage collection, interpreter exit, the command's own
death, or the end of the scorer's process (`os._exit`). One call costs about 0.3 ms of pipe
traffic.

Only the supervisor, which runs no code of yours, holds the command's pipes. It hands each
request to the scorer's process over a pipe pair of their own with a fresh random nonce, and
forwards to the command one reply per request: the first line back, if it echoes that nonce
with one known key; any other line (one your code wrote to a file descriptor it holds) is
refused in one line, never counted. Your code never sees the nonce (it is taken out of the
request before your function is called); code that set out to dig it out of its own process's
memory runs as you and could as well return the value it wants, which the contract allows.

The worker imports no torch (only this module and `nca_interp.errors`), so it starts in about
50 ms plus your module's own import. Your prints go to stderr (fd 1 is a copy of it), and
stdin is /dev/null to your code.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import json
import math
import numbers
import os
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

from nca_interp.errors import UsageError
from nca_interp.faults import fault_point

__all__ = ["DEFAULT_TIMEOUT", "IMPORT_TIMEOUT", "MAX_TIMEOUT", "ScorerWorker", "check_timeout",
           "judge", "kill_tree", "load_function"]

DEFAULT_TIMEOUT = 10.0  # seconds per item (task option scorer_timeout=)
MAX_TIMEOUT = 3600.0  # an hour per item: more is a typo (and inf overflows select's time_t)
IMPORT_TIMEOUT = 60.0  # seconds for the worker to start and import the scorer's module
PATH_ENV = "NCA_INTERP_SCORER_PATH"  # the command's sys.path: `module:fn` resolves as it would
# The scorer's process exits with these when its protocol pipes fail (the scorer closed or
# replaced a file descriptor it did not open): its next request unreadable, so the item before
# broke it; or the reply to the current item unsendable.
REQUEST_LOST, REPLY_LOST = 86, 87
REPLY_KEYS = ("value", "other", "raised", "exit")  # one per reply to an item (`_answer`)
FORGED = "forged"  # the supervisor's reply where the scorer's process sent another line
MAX_LINE = 1 << 20  # a reply is under a kilobyte; a longer line is none of the worker's
RELAY_DRAIN = 10.0  # seconds the worker waits, once its scorer ended, for the relay to pass on
# what the scorer wrote before it ended
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36  # linux/prctl.h


def check_timeout(seconds: float, name: str = "scorer_timeout") -> float:
    """`seconds` as a float if it is a finite number in (0, MAX_TIMEOUT]; else a UsageError."""
    if not (isinstance(seconds, (int, float)) and 0 < seconds <= MAX_TIMEOUT):
        raise UsageError(f"{name} must be a number of seconds above 0 and at most "
                         f"{MAX_TIMEOUT:g} (an hour), not {seconds}")
    return float(seconds)


def load_function(spec: str):
    """`path/to/file.py:fn` or `module:fn`, imported; a UsageError names what is missing."""
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise UsageError(f"scorer={spec!r}: give your function as path/to/file.py:fn or "
                         "module:fn")
    if where.endswith(".py"):
        path = Path(where).expanduser()
        if not path.exists():
            raise UsageError(f"scorer file {path} not found (scorer={spec})")
        if not path.is_file():  # a FIFO would block the import; a folder cannot be one
            raise UsageError(f"scorer file {path} is not a regular file (a folder, pipe or "
                             f"device); name a .py file (scorer={spec})")
        module_spec = importlib.util.spec_from_file_location(f"nca_user_scorer_{path.stem}",
                                                             path)
        if module_spec is None or module_spec.loader is None:
            raise UsageError(f"scorer file {path} cannot be imported as a module (scorer={spec})")
        module = importlib.util.module_from_spec(module_spec)
        try:
            module_spec.loader.exec_module(module)
        except BaseException as e:  # noqa: BLE001 - the user's code (sys.exit too): named
            raise UsageError(f"scorer file {path} failed to import: {type(e).__name__}: "
                             f"{e}") from None
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as e:
            raise UsageError(f"scorer module {where!r} cannot be imported ({e})") from None
        except BaseException as e:  # noqa: BLE001 - the user's code: its error, named
            raise UsageError(f"scorer module {where!r} failed to import: "
                             f"{type(e).__name__}: {e}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UsageError(f"scorer {spec}: {where} has no function {name!r}")
    return fn


def judge(value, spec: str, label: str) -> bool:
    """Whether a scorer's return `value` says right; a UsageError for one outside the
    contract (a bool, or a finite number in [0, 1])."""
    if isinstance(value, bool) or _numpy_bool(value):
        return bool(value)
    if isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value <= 1:
        return value >= 0.5
    shown = repr(value) if isinstance(value, (int, float)) else _described(value)
    raise _broken(spec, shown, label)


def _numpy_bool(value) -> bool:
    """Whether `value` is a numpy bool (`np.bool_`, a 0-d bool array), without importing
    numpy: a comparison of numpy values returns one, and it means what a bool means."""
    return (type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0
            and getattr(getattr(value, "dtype", None), "kind", None) == "b")


def _described(value) -> str:
    return f"{type(value).__name__} {value!r}"[:120]


def _broken(spec: str, shown: str, label: str) -> UsageError:
    return UsageError(f"scorer {spec} returned {shown} on {label}; a scorer returns a bool or "
                      "a finite number in [0, 1] (right when >= 0.5)")


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _proc_stats():
    """(pid, the fields after "(comm)": state ppid pgrp session ...) of every process, from
    /proc (comm may hold spaces and parentheses; a process that ended meanwhile is left out)."""
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        yield pid, stat[stat.rindex(b")") + 2:].split()


def _session(sid: int) -> set[int]:
    """The processes of session `sid`: a worker's session outlives the worker, so what a
    scorer left after killing its own supervisor is still found by it."""
    return {pid for pid, fields in _proc_stats() if int(fields[3]) == sid and pid != os.getpid()}


def _children() -> dict[int, list[int]]:
    """Parent pid -> its children's pids (empty where there is none)."""
    out: dict[int, list[int]] = {}
    for pid, fields in _proc_stats():
        out.setdefault(int(fields[1]), []).append(pid)
    return out


def _descendants(root: int) -> set[int]:
    tree, found, todo = _children(), set(), [root]
    while todo:
        for child in tree.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _signal(pids, sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(root: int, session: int | None = None) -> None:
    """SIGKILL every descendant of process `root` (not `root`), in any session or group, and
    with `session` every process left in that session and their descendants (a scorer that
    killed its supervisor orphans its processes to init, out of `root`'s tree). They are
    stopped first, and looked for again until no new one appears, so none forks past the
    kill; while `root` lives (a subreaper), an orphaned descendant is still found below it."""
    stopped: set[int] = set()
    while True:
        roots = {root} | (_session(session) if session is not None else set())
        found = (roots - {root}) | set().union(*(_descendants(r) for r in roots))
        new = found - stopped
        if not new:
            break
        _signal(new, signal.SIGSTOP)
        stopped |= new
    _signal(stopped, signal.SIGKILL)


def _reap(proc: subprocess.Popen) -> None:
    """Kill `proc`'s whole tree and process group and wait for it. While `proc` is unreaped its
    pid is ours (a zombie keeps it), so the group cannot be someone else's."""
    if proc.returncode is None:
        _signal([proc.pid], signal.SIGSTOP)  # it kills and reaps its own tree no more
        # its session too: the worker led it (start_new_session), and until it is reaped its
        # pid, and so that session id, cannot be another's
        kill_tree(proc.pid, session=proc.pid)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass


class ScorerWorker:
    """One user scorer in a worker process, started at the first `start()` or `score()` and
    started again after `close()`. `pid` is the process id of the worker last started (None
    before the first)."""

    def __init__(self, spec: str, timeout: float = DEFAULT_TIMEOUT):
        self.spec, self.timeout = spec, check_timeout(timeout, "timeout")
        self._proc: subprocess.Popen | None = None
        self._last = ""  # the label of the last item scored, for a channel it broke
        self._sent = 0  # requests sent to the worker started last; each reply echoes its number
        self._buffer = b""
        self._finalizer: weakref.finalize | None = None
        self.pid: int | None = None

    def __enter__(self) -> ScorerWorker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def __call__(self, item: dict, response: str) -> bool:
        return self.score(item, response, f"item {item.get('id')!r}")

    def start(self) -> ScorerWorker:
        """The worker running with the scorer imported; its import error as a UsageError."""
        if self._proc is not None:
            return self
        env = dict(os.environ, **{PATH_ENV: os.pathsep.join(p for p in sys.path if p)})
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "nca_interp.scorer_worker", self.spec],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True, env=env)
        self._buffer, self.pid, self._last, self._sent = b"", self._proc.pid, "", 0
        self._finalizer = weakref.finalize(self, _reap, self._proc)  # runs at exit too
        reply = self._reply(max(IMPORT_TIMEOUT, self.timeout), "its import", ("ready", "error"))
        if "error" in reply:
            self.close()
            raise UsageError(reply["error"])
        return self

    def close(self) -> None:
        """The worker's process group killed and reaped (nothing when none runs)."""
        if self._finalizer is not None:
            self._finalizer()
        self._proc, self._finalizer = None, None

    def score(self, item: dict, response: str, label: str) -> bool:
        """Whether the scorer calls `response` right for `item`; `label` names the item in
        errors (`item 'q3' (data.jsonl:4)`)."""
        self.start()
        self._sent += 1
        line = json.dumps({"n": self._sent, "item": item, "response": response}).encode() + b"\n"
        proc = self._proc
        assert proc is not None and proc.stdin is not None  # started, with its pipes
        try:
            proc.stdin.write(line)
            proc.stdin.flush()
        except OSError:  # a broken pipe: the worker is gone
            pass
        reply = self._reply(self.timeout, label, REPLY_KEYS)
        if "raised" in reply:
            self.close()
            raise UsageError(f"scorer {self.spec} raised {reply['raised']} on {label}")
        if "exit" in reply:
            self.close()
            raise UsageError(f"scorer {self.spec} called sys.exit({reply['exit']}) on {label}; "
                             "a scorer returns a bool or a number, it never exits")
        try:
            if "other" in reply:
                raise _broken(self.spec, reply["other"], label)
            right = judge(reply["value"], self.spec, label)
        except UsageError:
            self.close()
            raise
        self._last = label
        return right

    def _reply(self, timeout: float, label: str, kinds: tuple[str, ...]) -> dict:
        """The worker's next JSON line within `timeout` s, checked: a mapping holding this
        request's number `n` and one key of `kinds`. A timeout, the worker's end or any other
        line (a scorer that wrote `{}` to the protocol's pipe) closes it and raises a
        UsageError naming the scorer and the item."""
        deadline = time.monotonic() + timeout
        assert self._proc is not None and self._proc.stdout is not None  # started
        fd = self._proc.stdout.fileno()
        try:
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    raise UsageError(
                        f"scorer {self.spec} took longer than {timeout:g} s on {label}; "
                        "make it faster, or give it more time with "
                        "the task option scorer_timeout=SECONDS")
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise self._ended(self._exit_code(), label)
                self._buffer += chunk
        except BaseException:  # a timeout, a dead worker, ^C: nothing may outlive the command
            self.close()
            raise
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            reply = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            reply = None
        mine = [k for k in (*kinds, FORGED) if k in reply] if isinstance(reply, dict) else []
        if len(mine) != 1 or len(reply) != 2 or reply.get("n") != self._sent or self._buffer \
                or mine == [FORGED]:
            self.close()
            shown = reply[FORGED] if mine == [FORGED] else line.decode("utf-8", "replace")[:80]
            raise UsageError(f"scorer {self.spec} wrote to its worker's reply channel on {label} "
                             f"(a line the worker did not send, {shown!r}): a scorer returns its "
                             "value and never writes to a file descriptor it did not open")
        return reply

    def _exit_code(self) -> int:
        """The ended worker's exit status (negative: the signal that killed it), left unreaped
        where the OS can (`os.waitid` with WNOWAIT): its pid, and so its session, stays ours
        until `close()` has killed what is left in them (a scorer that killed its supervisor
        leaves its own process running)."""
        proc = self._proc
        assert proc is not None  # started
        if not hasattr(os, "waitid"):
            return proc.wait()
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        assert info is not None  # without WNOHANG it waits for the exit
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

    def _ended(self, code: int, label: str) -> UsageError:
        """The error for a worker that ended with exit status `code` while `label` ran."""
        if code in (REQUEST_LOST, REPLY_LOST):
            on = self._last if code == REQUEST_LOST and self._last else label
            after = f" (the item before {label})" if on != label else ""
            return UsageError(f"scorer {self.spec} broke its worker's channel to the command on "
                              f"{on}{after}: it closed or replaced a file descriptor it did not "
                              "open (stdin, stdout or an inherited pipe); leave those alone")
        return UsageError(f"scorer {self.spec} ended its process ({_exit_text(code)}) on "
                          f"{label}; a scorer returns a bool or a number, it never exits (its "
                          "stderr above may say why)")


# -- the worker side -------------------------------------------------------------------------

def _answer(fn, request: dict) -> dict:
    try:
        value = fn(request["item"], request["response"])
    except SystemExit as e:
        return {"exit": e.code if isinstance(e.code, (int, type(None))) else repr(e.code)}
    except BaseException as e:  # noqa: BLE001 - the user's code: its error, named by item
        return {"raised": f"{type(e).__name__}: {e}"[:500]}
    if isinstance(value, bool) or _numpy_bool(value):
        return {"value": bool(value)}
    if isinstance(value, numbers.Real):
        try:
            return {"value": float(value)}
        except (TypeError, ValueError, OverflowError):
            pass
    return {"other": _described(value)}


def _watch(parent: int) -> None:
    """Kill this worker's whole tree and group once the command that started it is gone
    (killed before it could close the worker), even while the scorer hangs."""
    while os.getppid() == parent:
        time.sleep(0.5)
    kill_tree(os.getpid())
    os.killpg(0, signal.SIGKILL)


def _prctl(option: int, value: int) -> None:
    """Linux's prctl(option, value) on this process; nothing elsewhere."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
        except (OSError, AttributeError):
            pass


def _become_subreaper() -> None:
    """On Linux, make orphaned descendants this process's children (not init's), so that a
    process the scorer started in a session of its own, or daemonised, is still found."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


class _Lines:
    """The lines arriving on file descriptor `fd`: `next()` waits for one (None at the end; a
    line longer than `limit` is cut there)."""

    def __init__(self, fd: int, limit: float = math.inf):
        self.fd, self.limit, self.buffer, self.ended = fd, limit, b"", False

    def _read(self) -> None:
        chunk = os.read(self.fd, 1 << 16)
        self.buffer += chunk
        self.ended = not chunk

    def next(self) -> bytes | None:
        while b"\n" not in self.buffer and not self.ended and len(self.buffer) <= self.limit:
            self._read()
        if b"\n" not in self.buffer:
            return self.buffer or None  # an unended or overlong line: never a reply
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line


def _checked(line: bytes, nonce: str, kinds: tuple[str, ...]) -> dict:
    """The scorer process's reply `line` as {kind: value} when it echoes `nonce` and holds one
    of `kinds`; else {FORGED: what it was} (a line the scorer's code wrote)."""
    try:
        reply = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, an int of >4300 digits, or
        reply = None  # nested past the parser's depth: none is a reply
    if isinstance(reply, dict) and len(reply) == 2 and reply.get("nonce") == nonce:
        kind = next((k for k in kinds if k in reply), None)
        if kind is not None:
            return {kind: reply[kind]}
    return {FORGED: line.decode("utf-8", "replace")[:80]}


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def _relay(to_scorer: int, from_scorer: int, nonce: str, idle: threading.Event) -> None:
    """The supervisor's side of the protocol: each request from the command (stdin) goes to the
    scorer's process with a fresh nonce in place of its number, and the first line back goes
    to the command (stdout) under its number if it is the reply that echoes that nonce; any
    other line (one the scorer's code wrote, before or after a reply) is forwarded as
    {FORGED: ...} in its place, and the relay ends (the command closes the worker). `idle` is
    set while it waits for the command's next request: nothing the scorer wrote is then on its
    way to the command."""
    requests, replies = _Lines(0), _Lines(from_scorer, MAX_LINE)
    n = 0
    kinds: tuple[str, ...] = ("ready", "error")  # then REPLY_KEYS
    try:
        while True:
            line = replies.next()
            if line is None:  # the scorer's process ended: `supervise` ends as it did
                return
            reply = _checked(line, nonce, kinds)
            fault_point("scorer-relay")
            _write_all(1, json.dumps({"n": n, **reply}).encode() + b"\n")
            if FORGED in reply or "error" in reply:
                return
            idle.set()
            line = requests.next()
            idle.clear()
            if line is None:  # the command closed the worker: so does the scorer's process
                return
            request = json.loads(line)
            n, nonce, kinds = request.pop("n"), secrets.token_hex(16), REPLY_KEYS
            # a line the scorer wrote before (after the last reply) comes first: without
            # this nonce, it is refused
            _write_all(to_scorer, json.dumps({**request, "nonce": nonce}).encode() + b"\n")
    except OSError:  # the scorer's process closed its pipes (it exits), or the command died
        return
    finally:
        os.close(to_scorer)


def supervise(scorer: int, to_scorer: int, from_scorer: int, nonce: str) -> None:
    """The worker's top process: keep the command's pipes and relay between them and the
    scorer's process `scorer` (`_relay`), wait for that process (reaping orphans meanwhile),
    kill what it left behind, and end as it ended."""
    # the worker runs in a session of its own (no terminal's Ctrl-C reaches it; the command
    # kills it): a SIGINT here is the scorer's, which ends the scorer, not this relay
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _prctl(PR_SET_DUMPABLE, 0)  # the scorer's process (unless root) cannot open
    # /proc/<this>/fd/1, a way to the command's pipe around the relay
    threading.Thread(target=_watch, args=(os.getppid(),), daemon=True).start()
    idle = threading.Event()
    relay = threading.Thread(target=_relay, args=(to_scorer, from_scorer, nonce, idle),
                             daemon=True)
    relay.start()
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:  # cannot happen while `scorer` is unreaped; be safe
            os._exit(1)
        if pid == scorer:
            break
    kill_tree(os.getpid())
    # what the scorer's process wrote before it ended (an import's error, then exit 0) reaches
    # the command before this process ends: its pipe's end (every writer is dead now) ends the
    # relay, unless it already waits for the command; bounded, should the command not read
    deadline = time.monotonic() + RELAY_DRAIN
    while relay.is_alive() and not idle.is_set() and time.monotonic() < deadline:
        relay.join(0.01)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # killed by a signal: end the same way, so the command names the signal
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def serve(spec: str) -> None:
    """Import `spec` and answer one JSON line per request until the requests end, in a
    process of its own below a supervisor that keeps the command's pipes (`supervise`)."""
    _become_subreaper()
    (requests_fd, to_scorer), (from_scorer, replies_fd) = os.pipe(), os.pipe()
    nonce = secrets.token_hex(16)  # the first reply's (ready, or the import's error)
    scorer = os.fork()
    if scorer:
        os.close(requests_fd)
        os.close(replies_fd)
        supervise(scorer, to_scorer, from_scorer, nonce)
    os.close(to_scorer)
    os.close(from_scorer)
    os.dup2(2, 1)  # the user's prints (fd 1 and sys.stdout) go to stderr: no command pipe
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # is left here, and the user's reads of stdin see nothing
    os.close(null)
    out = os.fdopen(replies_fd, "w", encoding="utf-8")
    requests = os.fdopen(requests_fd, "r", encoding="utf-8")
    for p in reversed(os.environ.get(PATH_ENV, "").split(os.pathsep)):
        if p and p not in sys.path:
            sys.path.insert(0, p)

    def send(reply: dict) -> None:
        out.write(json.dumps(reply) + "\n")
        out.flush()

    try:
        fn = load_function(spec)
    except UsageError as e:
        send({"nonce": nonce, "error": str(e)})
        return
    send({"nonce": nonce, "ready": True})
    while True:
        try:
            line = requests.readline()
        except (OSError, ValueError):  # the scorer closed or replaced its request pipe
            os._exit(REQUEST_LOST)
        if not line:
            return
        request = json.loads(line)
        nonce = request.pop("nonce")  # out of what the user's function is given
        reply = {"nonce": nonce, **_answer(fn, request)}
        try:
            send(reply)
        except (OSError, ValueError):
            os._exit(REPLY_LOST)


if __name__ == "__main__":
    serve(sys.argv[1])
