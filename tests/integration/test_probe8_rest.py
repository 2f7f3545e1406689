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
