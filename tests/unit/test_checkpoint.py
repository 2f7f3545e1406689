import json
import os

import pytest
import torch

from nca_interp import checkpoint as ck
from tests.conftest import tiny


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_round_trip_identical_logits(tok, tiny_model, tmp_path):
    path = ck.save_checkpoint(tmp_path / "c", tiny_model, tok, {"seed": 0})
    model, tok2 = ck.load_checkpoint(path)
    ids = torch.tensor([tok("P__\n>UD")["input_ids"]])
    assert torch.equal(logits(model, ids), logits(tiny_model, ids))
    assert tok2.eos_token_id == tok.eos_token_id
    assert json.loads((path / "run_config.json").read_text())["seed"] == 0


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_other_architectures_load(tok, tmp_path, arch):
    m = tiny(tok, arch)
    m.save_pretrained(tmp_path)  # a plain HF folder, not written by us
    tok.save_pretrained(tmp_path)
    model, _ = ck.load_checkpoint(tmp_path)
    ids = torch.tensor([[5, 6, 7]])
    assert torch.allclose(logits(model, ids), logits(m, ids))


def test_atomic_save_under_crash(tok, tiny_model, tmp_path, monkeypatch):
    good = ck.save_checkpoint(tmp_path / "c", tiny_model, tok)
    before = (good / "model.safetensors").read_bytes()

    def boom(folder):
        raise RuntimeError("simulated crash while writing")

    monkeypatch.setattr(ck, "write_manifest", boom)
    other = tiny(tok, seed=1)
    with pytest.raises(RuntimeError, match="simulated"):
        ck.save_checkpoint(tmp_path / "c", other, tok)
    with pytest.raises(RuntimeError):
        ck.save_checkpoint(tmp_path / "d", other, tok)
    monkeypatch.undo()
    assert (good / "model.safetensors").read_bytes() == before  # old checkpoint intact
    assert not (tmp_path / "d").exists()  # nothing that looks complete
    ck.load_checkpoint(good)


def test_interrupted_publish_is_reported(tok, tiny_model, tmp_path):
    step = ck.save_checkpoint(tmp_path / "run" / "checkpoints" / "step_000001", tiny_model, tok,
                              {"seed": 0})
    ck.publish(step, tmp_path / "run")
    ck.load_checkpoint(tmp_path / "run")
    (tmp_path / "run" / ck.MANIFEST).unlink()  # as if killed between files
    with pytest.raises(ck.CheckpointError, match="interrupted save"):
        ck.load_checkpoint(tmp_path / "run")
    assert ck.latest_step_checkpoint(tmp_path / "run") == step


def test_bad_inputs_have_clear_errors(tok, tiny_model, tmp_path):
    with pytest.raises(ck.CheckpointError, match="no checkpoint at"):
        ck.load_checkpoint(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ck.CheckpointError, match="not a checkpoint folder"):
        ck.load_checkpoint(tmp_path / "empty")
    path = ck.save_checkpoint(tmp_path / "c", tiny_model, tok)
    with pytest.raises(ck.CheckpointError, match="checkpoint \\*folder\\*"):
        ck.load_checkpoint(path / "model.safetensors")
    # truncated weights, caught by the manifest
    w = path / "model.safetensors"
    data = w.read_bytes()
    w.write_bytes(data[: len(data) // 2])
    with pytest.raises(ck.CheckpointError, match="truncated or corrupt"):
        ck.load_checkpoint(path)
    # truncated weights in a foreign folder (no manifest), caught by safetensors' header check
    (path / ck.MANIFEST).unlink()
    with pytest.raises(ck.CheckpointError, match="not a valid safetensors"):
        ck.load_checkpoint(path)
    # pickled weights are refused, never loaded
    pk = tmp_path / "pickled"
    pk.mkdir()
    tiny_model.config.save_pretrained(pk)
    torch.save({}, pk / "pytorch_model.bin")
    with pytest.raises(ck.CheckpointError, match="never unpickles"):
        ck.load_checkpoint(pk)


def test_a_command_hashes_each_checkpoint_once(tok, tiny_model, tmp_path, monkeypatch):
    """Inside hash_once (every command's entry) repeated opens of an unchanged folder hash it
    once; a file changed meanwhile is hashed again and caught; outside, every open hashes."""
    path = ck.save_checkpoint(tmp_path / "c", tiny_model, tok, {"seed": 0})
    n_files = len(json.loads((path / ck.MANIFEST).read_text())["files"])
    calls = []
    real = ck._sha256
    monkeypatch.setattr(ck, "_sha256", lambda f: calls.append(f) or real(f))
    for _ in range(3):
        ck.verify_folder(path)
    assert len(calls) == 3 * n_files
    calls.clear()
    with ck.hash_once():
        ck.verify_folder(path)
        ck.load_checkpoint(path)
        ck.verify_folder(path)
        assert len(calls) == n_files
        weights = path / "model.safetensors"  # one weight byte flipped: still valid
        data = bytearray(weights.read_bytes())  # safetensors, same size, a later mtime
        data[-3] ^= 0xFF
        mtime = weights.stat().st_mtime_ns
        weights.write_bytes(bytes(data))
        os.utime(weights, ns=(mtime + 10**7, mtime + 10**7))
        with pytest.raises(ck.CheckpointError, match="does not match"):
            ck.verify_folder(path)
    assert ck._HASHED is None


def test_git_commit_says_when_the_tree_was_edited(tmp_path):
    """A run's recorded commit carries +dirty when tracked files differ from it (untracked
    files, e.g. run outputs, do not count)."""
    import subprocess

    def git(*a):
        subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *a], cwd=tmp_path,
                       check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", "code.py")
    git("commit", "-qm", "c")
    clean = ck.git_commit(tmp_path)
    assert len(clean) == 40 and not clean.endswith("+dirty")
    (tmp_path / "out.json").write_text("{}")
    assert ck.git_commit(tmp_path) == clean
    (tmp_path / "code.py").write_text("x = 2\n")
    assert ck.git_commit(tmp_path) == clean + "+dirty"


def test_a_saved_checkpoints_files_are_as_readable_as_the_umask_allows(tok, tmp_path):
    """Step checkpoints' weights were mode 0600 (a private temporary's), the root's 0644: a
    colleague could not read a shared run's steps (the fourth probe)."""
    import os

    from nca_interp.checkpoint import save_checkpoint
    from tests.conftest import tiny

    old = os.umask(0o022)
    try:
        folder = save_checkpoint(tmp_path / "c", tiny(tok), tok, {"task": {"name": "sokoban"}},
                                 ({}, {"step": 1}))
    finally:
        os.umask(old)
    modes = {f.name: f.stat().st_mode & 0o777 for f in folder.iterdir() if f.is_file()}
    assert modes and set(modes.values()) == {0o644}, modes
