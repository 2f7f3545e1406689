"""What the probe tests plant: a setting whose manifest records a training command of the
attacker's choosing (size_control reads and reruns it), and a scorer that writes to every pipe
open for writing (the worker's reply channel among them)."""

import json
import shutil
from pathlib import Path

# a scorer module's head: `out(line)` writes `line` to every pipe the scorer's process may write
PIPE_WRITER = """import fcntl, os, stat
def out(line):  # to every pipe open for writing: the worker's reply channel among them
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode) and \\
                    fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
                os.write(fd, line)
        except OSError:
            pass
"""


def forged_refusal(tmp_path: Path, scorer: str, fn: str) -> str:
    """The one-line refusal a ScorerWorker gives when the scorer `fn` of module text `scorer`
    writes to its reply channel, scoring three items (the test fails if none is refused);
    the line names the scorer, the first item and the reply channel."""
    import pytest

    from nca_interp import scorer_worker
    from nca_interp.errors import UsageError

    path = tmp_path / "inject.py"
    path.write_text(scorer)
    w = scorer_worker.ScorerWorker(f"{path}:{fn}", 10)
    try:
        w.start()
        with pytest.raises(UsageError) as e:
            for i in range(3):
                w.score({"id": f"q{i}"}, "x", f"item 'q{i}'")
    finally:
        w.close()
    msg = str(e.value)
    assert "\n" not in msg and f"{path}:{fn}" in msg and "item 'q0'" in msg, msg
    assert "reply channel" in msg, msg
    return msg


def planted_setting(tmp_path: Path, flags: str) -> tuple[Path, Path, list[str]]:
    """Setting `myset` under tmp_path/figs whose manifest records `python -m train.distill
    --student BASE FLAGS` for OPD seed 0 (`{out}` in FLAGS: the run's recorded folder), BASE a
    copy of the embedded Sokoban OPD student: (runs, figs, size_control's argv)."""
    from nca_interp.assets import embedded

    runs, figs, base = tmp_path / "runs", tmp_path / "figs", tmp_path / "base"
    shutil.copytree(embedded("sokoban_opd"), base)
    (figs / "myset").mkdir(parents=True)
    final = runs / "myset_opd_s0" / "checkpoints" / "step_000004"
    command = f"python -m train.distill --student {base} " + \
        flags.format(out=runs / "myset_opd_s0")
    (figs / "myset" / "manifest.json").write_text(json.dumps(
        {"files": {str(final): {"command": command}}}))
    return runs, figs, ["--setting", "myset", "--seeds", "0", "--runs", str(runs),
                        "--figures", str(figs), "--rounds", "1", "--jobs", "1", "--threads", "1"]
