"""What the eighth probe left open in #71 (/work/notes/probe8.md, /work/notes/h71c.md): an
--out another user can change (U4), a scorer forging its worker's reply (T1's rest), and the
published manifests' figure digests (L2's rest). Each failed before its fix."""

import os
from pathlib import Path

import pytest

from nca_interp.checkpoint import save_checkpoint
from nca_interp.errors import UsageError
from nca_interp.fsio import check_owned
from tests.conftest import tiny
from tests.integration.test_bad_input import TASK, refused

NOBODY = 65534
as_root = pytest.mark.skipif(os.getuid() != 0, reason="giving a folder to another user needs root")


def theirs(folder: Path, mode: int = 0o777) -> Path:
    """`folder` made and given to another user (nobody), with `mode`."""
    folder.mkdir(parents=True)
    os.chmod(folder, mode)
    os.chown(folder, NOBODY, -1)
    return folder


def no_work(*_, **__):
    raise AssertionError("the command began its work before refusing its --out")


@as_root
def test_an_out_folder_another_user_owns_is_refused_before_any_work(tok, tmp_path, capsys,
                                                                   monkeypatch):
    """U4: an --out folder another user made and owns (777, chown nobody) was taken by
    training and by the analyses; that user could later swap the weights a resume reads, a
    page or its plotly.min.js. One line saying what to do, before any work, nothing written."""
    from nca_interp import evaluate
    from train import distill, sft

    base = save_checkpoint(tmp_path / "base", tiny(tok), tok, {"task": TASK})
    shared = theirs(tmp_path / "shared")
    monkeypatch.setattr(sft, "build_model", no_work)
    monkeypatch.setattr(distill, "load_checkpoint", no_work)
    monkeypatch.setattr(evaluate, "run", no_work)
    cases = [(sft.main, ["--n-layers", "2", "--d-model", "32", "--steps", "2", "--batch", "4",
                         "--threads", "1", "--out", str(shared)]),
             (sft.main, ["--steps", "2", "--threads", "1", "--out", str(shared / "run")]),
             (distill.main, ["--student", str(base), "--steps", "2", "--threads", "1",
                             "--out", str(shared)]),
             (evaluate.main, [str(base), "--n-levels", "2", "--threads", "1",
                              "--out", str(shared / "r")])]
    for main, argv in cases:
        err = refused(main, argv, capsys)
        assert str(shared) in err and "another user" in err, err
        assert "choose a folder you own" in err, err
        assert not os.listdir(shared), os.listdir(shared)


@as_root
def test_a_folder_of_mine_inside_another_users_is_refused(tmp_path):
    """A folder I own, even 755, inside one another user owns: that user can rename it away
    and put theirs at its name."""
    mine = theirs(tmp_path / "theirs", 0o755) / "mine"
    mine.mkdir()
    with pytest.raises(UsageError, match="theirs belongs to another user"):
        check_owned(mine / "run")


def test_a_folder_others_may_write_is_refused_a_sticky_one_is_not(tmp_path):
    """A folder of mine that others may write (777, no sticky bit): they could rename a file
    over what the command wrote. A sticky one (1777, as /tmp) keeps them from that, and a
    group-writable one of my own private group (umask 002) is mine alone."""
    import grp
    import pwd

    open_ = tmp_path / "open"
    open_.mkdir()
    os.chmod(open_, 0o777)
    with pytest.raises(UsageError, match=r"may be written by other users \(mode 777\)") as e:
        check_owned(open_ / "new" / "run")
    assert "\n" not in str(e.value) and "choose a folder you own" in str(e.value)
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    check_owned(sticky / "run")
    me, group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid())
    if group.gr_name == me and set(group.gr_mem) <= {me}:
        private = tmp_path / "private"
        private.mkdir()
        os.chmod(private, 0o775)
        check_owned(private / "run")


FORGER = """import fcntl, json, os, sys, threading, time
CALLS = [0]
def writable():
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR):
                yield fd
        except OSError:
            pass
def forge(n, how=None):
    reply = {"nonce": "0" * 32, "value": True} if how == "nonce" else {"n": n, "value": True}
    return (json.dumps(reply) + "\\n").encode()
def to_every_fd(line):
    for fd in writable():
        try:
            os.write(fd, line)
        except OSError:
            pass
def call():
    CALLS[0] += 1
    return CALLS[0]
def stdout(item, r):
    print(forge(call()).decode(), end="", flush=True)
    time.sleep(0.3)  # the forged line alone in the pipe, read before the real reply
    return False
def fd1(item, r):
    os.write(1, forge(call()))
    time.sleep(0.3)
    return False
def every_fd(item, r):
    to_every_fd(forge(call()))
    time.sleep(0.3)
    return False
def nonce(item, r):
    to_every_fd(forge(call(), "nonce"))
    time.sleep(0.3)
    return False
def after_reply(item, r):  # the next request's reply, written before it is asked
    line = forge(call() + 1)
    threading.Thread(target=lambda: (time.sleep(0.2), to_every_fd(line))).start()
    return False
"""


@pytest.mark.parametrize("fn, refused_on", [("stdout", None), ("fd1", None),
                                            ("every_fd", "q0"), ("nonce", "q0"),
                                            ("after_reply", "q1")])
def test_a_reply_the_scorer_forges_is_never_counted(tmp_path, fn, refused_on):
    """T1's rest: the scorer's process held the worker's reply pipe (a copy of its stdout),
    so a scorer that wrote a well-formed reply with the right request number there had it
    counted (its function returned False). Now only the supervisor holds the command's pipe
    and forwards the one reply that echoes its per-request nonce: a line written to stdout or
    fd 1 goes to stderr (ignored), one written to any other fd the scorer holds is refused in
    one line naming scorer and item, before or after the real reply."""
    import time

    from nca_interp import scorer_worker

    path = tmp_path / "forger.py"
    path.write_text(FORGER)
    w = scorer_worker.ScorerWorker(f"{path}:{fn}", 10)
    try:
        if refused_on is None:
            assert [w.score({"id": f"q{i}"}, "x", f"item 'q{i}'") for i in range(2)] == \
                [False, False]
            return
        with pytest.raises(UsageError) as e:
            for i in range(2):
                assert w.score({"id": f"q{i}"}, "x", f"item 'q{i}'") is False, f"q{i} counted"
                time.sleep(0.5)
    finally:
        w.close()
    msg = str(e.value)
    assert "\n" not in msg and f"{path}:{fn}" in msg and f"item '{refused_on}'" in msg, msg
    assert "reply channel" in msg and "a line the worker did not send" in msg, msg
