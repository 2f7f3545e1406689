"""Your own scorer (`scorer=path/file.py:fn` or `module:fn`) run in a worker process, under a
contract. The worker is started by `ScorerWorker` and answers on pipes:

    python -m nca_interp.scorer_worker path/file.py:fn    # JSON lines in, JSON lines out

The contract: `fn(item: dict, response: str)` returns a bool, or a finite number in [0, 1]
(right when >= 0.5), within `timeout` seconds per item. Anything else (NaN, inf, a number out
of range, another type, an exception, `sys.exit`, a crash, a hang) is one `UsageError` naming
the item and the scorer. A worker of its own keeps all of that out of the command: a hang is
cut at its time limit, `sys.exit` or `os._exit` ends the worker, not `evaluate`.

No process outlives the command: the worker leads a process group of its own, killed whole
(with whatever the scorer started) after a timeout, a fault, `close()`, the end of a `with`
block, garbage collection or interpreter exit. One call costs about 0.1 ms of pipe traffic.

The worker imports no torch (only this module and `nca_interp.errors`), so it starts in about
50 ms plus your module's own import. Your prints go to stderr: the protocol keeps its own copy
of stdout, and stdin is /dev/null to your code.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import numbers
import os
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

from nca_interp.errors import UsageError

__all__ = ["DEFAULT_TIMEOUT", "IMPORT_TIMEOUT", "ScorerWorker", "judge", "load_function"]

DEFAULT_TIMEOUT = 10.0  # seconds per item (task option scorer_timeout=)
IMPORT_TIMEOUT = 60.0  # seconds for the worker to start and import the scorer's module
PATH_ENV = "NCA_INTERP_SCORER_PATH"  # the command's sys.path: `module:fn` resolves as it would


def load_function(spec: str):
    """`path/to/file.py:fn` or `module:fn`, imported; a UsageError names what is missing."""
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise UsageError(f"scorer={spec!r}: give your function as path/to/file.py:fn or "
                         "module:fn")
    if where.endswith(".py"):
        path = Path(where).expanduser()
        if not path.is_file():
            raise UsageError(f"scorer file {path} not found (scorer={spec})")
        module_spec = importlib.util.spec_from_file_location(f"nca_user_scorer_{path.stem}",
                                                             path)
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
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value <= 1:
        return value >= 0.5
    shown = repr(value) if isinstance(value, (int, float)) else _described(value)
    raise _broken(spec, shown, label)


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


def _reap(proc: subprocess.Popen) -> None:
    """Kill `proc`'s whole process group and wait for it. While `proc` is unreaped its pid is
    ours (a zombie keeps it), so the group cannot be someone else's."""
    if proc.returncode is None:
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
        self.spec, self.timeout = spec, timeout
        self._proc: subprocess.Popen | None = None
        self._buffer = b""
        self._finalizer = None
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
        self._buffer, self.pid = b"", self._proc.pid
        self._finalizer = weakref.finalize(self, _reap, self._proc)  # runs at exit too
        reply = self._reply(max(IMPORT_TIMEOUT, self.timeout), "its import")
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
        line = json.dumps({"item": item, "response": response}).encode() + b"\n"
        try:
            self._proc.stdin.write(line)
            self._proc.stdin.flush()
        except OSError:  # a broken pipe: the worker is gone
            pass
        reply = self._reply(self.timeout, label)
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
            return judge(reply["value"], self.spec, label)
        except UsageError:
            self.close()
            raise

    def _reply(self, timeout: float, label: str) -> dict:
        """The worker's next JSON line within `timeout` s; a timeout or the worker's end closes
        it and raises a UsageError."""
        deadline = time.monotonic() + timeout
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
                    code = self._proc.wait()
                    raise UsageError(f"scorer {self.spec} ended its process ({_exit_text(code)})"
                                     f" on {label}; a scorer returns a bool or a number, it "
                                     "never exits (its stderr above may say why)")
                self._buffer += chunk
        except BaseException:  # a timeout, a dead worker, ^C: nothing may outlive the command
            self.close()
            raise
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)


# -- the worker side -------------------------------------------------------------------------

def _answer(fn, request: dict) -> dict:
    try:
        value = fn(request["item"], request["response"])
    except SystemExit as e:
        return {"exit": e.code if isinstance(e.code, (int, type(None))) else repr(e.code)}
    except BaseException as e:  # noqa: BLE001 - the user's code: its error, named by item
        return {"raised": f"{type(e).__name__}: {e}"[:500]}
    if isinstance(value, bool):
        return {"value": value}
    if isinstance(value, numbers.Real):
        try:
            return {"value": float(value)}
        except (TypeError, ValueError, OverflowError):
            pass
    return {"other": _described(value)}


def _watch(parent: int) -> None:
    """Kill this worker's whole group once the command that started it is gone (killed before
    it could close the worker), even while the scorer hangs."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os.killpg(0, signal.SIGKILL)


def serve(spec: str) -> None:
    """Import `spec` and answer one JSON line per request line until stdin ends."""
    threading.Thread(target=_watch, args=(os.getppid(),), daemon=True).start()
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")  # the protocol's own copy of stdout
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    os.dup2(2, 1)  # the user's prints (fd 1 and sys.stdout) go to stderr
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # and the user's reads of stdin see nothing
    os.close(null)
    for p in reversed(os.environ.get(PATH_ENV, "").split(os.pathsep)):
        if p and p not in sys.path:
            sys.path.insert(0, p)

    def send(reply: dict) -> None:
        out.write(json.dumps(reply) + "\n")
        out.flush()

    try:
        fn = load_function(spec)
    except UsageError as e:
        send({"error": str(e)})
        return
    send({"ready": True})
    for line in requests:
        send(_answer(fn, json.loads(line)))


if __name__ == "__main__":
    serve(sys.argv[1])
