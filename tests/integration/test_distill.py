import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from nca_interp.checkpoint import save_checkpoint
from nca_interp.rollout import ContextOverflowError
from tests.conftest import tiny
from train import distill

TASK = {"name": "sokoban", "fmt": "compact", "dim_room": [6, 6], "num_boxes": 1}


@pytest.fixture
def base(tok, tmp_path):
    return save_checkpoint(tmp_path / "base", tiny(tok), tok, {"task": TASK})


def args(base, out, *extra):
    return ["--student", str(base), "--out", str(out), "--batch", "8", "--steps", "4",
            "--save-every", "2", "--eval-every", "100", "--eval-levels", "8", "--threads", "1",
            "--lr", "1e-3", *extra]


def full_and_resumed(base, tmp_path, monkeypatch, method):
    """Train `method` uninterrupted into full/, and again into resumed/ killed after step 3's
    update (before its checkpoint) then resumed; return both final weights."""
    distill.main(args(base, tmp_path / "full", "--method", method))
    real_log = distill.Run.log

    def killed(self, record):
        real_log(self, record)
        if record["step"] == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(distill.Run, "log", killed)
    with pytest.raises(KeyboardInterrupt):
        distill.main(args(base, tmp_path / "resumed", "--method", method))
    monkeypatch.undo()
    distill.main(args(base, tmp_path / "resumed", "--method", method))
    return (load_file(tmp_path / "full" / "model.safetensors"),
            load_file(tmp_path / "resumed" / "model.safetensors"))


@pytest.mark.parametrize("method", ["opd", "nca"])
def test_resume_is_bit_identical(base, tmp_path, monkeypatch, method):
    a, b = full_and_resumed(base, tmp_path, monkeypatch, method)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    steps = [json.loads(ln)["step"] for ln in
             (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    assert (tmp_path / "full" / "checkpoints" / "step_000002").is_dir()
    # only the newest step checkpoint keeps the optimizer moments (resumed from above); the
    # older one still loads, and names the newest if asked to resume
    from nca_interp.checkpoint import CheckpointError, load_checkpoint, load_trainer_state

    old, new = (tmp_path / "full" / "checkpoints" / f"step_00000{i}" for i in (2, 4))
    assert not (old / "trainer_state.safetensors").exists()
    assert (new / "trainer_state.safetensors").exists()
    assert load_trainer_state(new)[1]["step"] == 4
    load_checkpoint(old)  # its manifest was rewritten without the dropped file
    with pytest.raises(CheckpointError, match="resume from the newest"):
        load_trainer_state(old)
    record = json.loads((tmp_path / "full" / "metrics.jsonl").read_text().splitlines()[-1])
    assert {"opd", "sample_win", "response_len", "eval_win_c"} <= record.keys()
    assert ("nca" in record) == (method == "nca")


def test_different_tokenizer_refused(base, tok, tmp_path):
    from nca_interp.tokenizer import CHARS, build_char_tokenizer

    other = build_char_tokenizer(CHARS[::-1])  # same size, ids permuted
    teacher = save_checkpoint(tmp_path / "t", tiny(other), other, {"task": TASK})
    with pytest.raises(ValueError, match="different tokenizers"):
        distill.main(args(base, tmp_path / "o", "--teacher", str(teacher)))


def test_context_overflow_is_an_error(tok, tmp_path):
    from nca_interp.models import ModelConfig, build_model

    small = build_model(ModelConfig("qwen3", 2, 32, 4, 2, 64, max_len=64), tok)
    base = save_checkpoint(tmp_path / "small", small, tok, {"task": TASK})
    with pytest.raises(ContextOverflowError, match="never truncated"):
        distill.main(args(base, tmp_path / "o", "--context", "rules"))


def test_nan_stops_with_step_and_term(base, tmp_path, monkeypatch):
    real = distill.loss_terms
    calls = {"n": 0}

    def poisoned(*a, **k):
        calls["n"] += 1
        terms = real(*a, **k)
        if calls["n"] == 3:
            terms["nca"] = terms["nca"] * float("nan")
        return terms

    monkeypatch.setattr(distill, "loss_terms", poisoned)
    with pytest.raises(FloatingPointError, match="'nca' is nan at step 3.*step_000002"):
        distill.main(args(base, tmp_path / "o", "--method", "nca"))
    from nca_interp.checkpoint import load_checkpoint

    load_checkpoint(tmp_path / "o")  # the last good checkpoint is intact and published


def test_devices_and_precision_are_checked(base, tmp_path):
    from nca_interp.models import autocast, resolve_device

    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="--device must be"):
        resolve_device("tpu")
    with pytest.raises(ValueError, match="--precision must be"):
        autocast(torch.device("cpu"), "fp8")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="sees no GPU"):
            distill.main(args(base, tmp_path / "o", "--device", "cuda"))


def test_micro_batches_and_checkpointing_give_the_same_update(base, tmp_path):
    distill.main(args(base, tmp_path / "whole", "--method", "nca", "--steps", "2"))
    distill.main(args(base, tmp_path / "micro", "--method", "nca", "--steps", "2",
                      "--micro-batch", "3", "--grad-checkpointing"))
    a = load_file(tmp_path / "whole" / "model.safetensors")
    b = load_file(tmp_path / "micro" / "model.safetensors")
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-6, msg=k)


def test_estimators_train_and_resume_old_runs(base, tmp_path):
    """--kl sampled / topk run and are recorded; the replaced --top-k is refused with what to
    pass; a run recorded before the estimator flags existed resumes (its missing flags mean
    the full KL), and one recorded with --top-k resumes only as --kl topk with its k."""
    import json

    from nca_interp.errors import UsageError

    distill.main(args(base, tmp_path / "s", "--method", "nca", "--steps", "2", "--kl",
                      "sampled", "--kl-form", "k3"))
    cfg = json.loads((tmp_path / "s" / "run_config.json").read_text())
    assert cfg["kl"] == "sampled" and cfg["kl_form"] == "k3" and cfg["nca_kl"] == "same"
    with pytest.raises(UsageError, match="--top-k was replaced .* pass --kl topk --kl-k K"):
        distill.main(args(base, tmp_path / "t", "--top-k", "3"))
    assert not (tmp_path / "t").exists()
    distill.main(args(base, tmp_path / "old", "--steps", "2"))
    saved = tmp_path / "old" / "run_config.json"
    old = {k: v for k, v in json.loads(saved.read_text()).items() if not k.startswith(
        ("kl", "nca_kl"))}
    saved.write_text(json.dumps(old))
    distill.main(args(base, tmp_path / "old", "--steps", "3"))  # resumes: same config
    with pytest.raises(UsageError, match="different config"):
        distill.main(args(base, tmp_path / "old", "--steps", "4", "--kl", "sampled"))
    old_topk = {**old, "top_k": 3, "renormalize": True}  # recorded by a --top-k 3 run
    saved.write_text(json.dumps(old_topk))
    with pytest.raises(UsageError, match="different config"):  # never silently the full KL
        distill.main(args(base, tmp_path / "old", "--steps", "4"))
    distill.main(args(base, tmp_path / "old", "--steps", "4", "--kl", "topk", "--kl-k", "3"))


def test_a_tied_embedding_student_resumes(tok, tmp_path, monkeypatch):
    """A student whose lm_head is tied to its embeddings (SmolLM2) is saved without lm_head;
    resuming it loads the rest and keeps the tie, bit-identical to an uninterrupted run. A
    checkpoint of another shape is refused, not half-loaded."""
    from nca_interp.checkpoint import CheckpointError, load_weights_into

    model = tiny(tok, arch="llama")
    model.config.tie_word_embeddings = True
    model.tie_weights()
    base = save_checkpoint(tmp_path / "base", model, tok, {"task": TASK})
    a, b = full_and_resumed(base, tmp_path, monkeypatch, "nca")
    assert "lm_head.weight" not in a and a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    step = tmp_path / "full" / "checkpoints" / "step_000002"
    with pytest.raises(CheckpointError, match="shapes differ"):
        load_weights_into(tiny(tok, arch="llama", d_model=64), step)
    untied = tiny(tok, arch="llama")  # its own lm_head, which the tied file does not hold
    with pytest.raises(CheckpointError, match=r"missing \['lm_head.weight'\]"):
        load_weights_into(untied, step)


def data_bytes(run) -> int:
    """Tensor bytes of every safetensors file under a run directory (headers aside)."""
    from nca_interp.tensorfiles import read_header

    return sum(b - a for f in run.rglob("*.safetensors") for _, _, a, b in read_header(f).values())


def test_the_disk_a_run_needs_is_what_it_writes_and_a_full_disk_is_refused(base, tmp_path,
                                                                           monkeypatch):
    """train.common.disk_needed against a real run's files: at the end it holds what the
    estimate says it keeps (4 steps, a checkpoint every 2: two weight copies, the published
    one, Adam's moments on the newest); at the fullest moment of a save (just before the older
    checkpoint's moments are dropped) it holds more, within kept + brief. A disk without that
    room is refused with one line before the first step, and nothing is saved."""
    from collections import namedtuple

    from nca_interp.errors import RunError
    from train import common

    at_drop, drop = [], common.ckpt.drop_optimizer_state

    def measured(folder):
        at_drop.append(data_bytes(tmp_path / "r"))
        drop(folder)

    monkeypatch.setattr(common.ckpt, "drop_optimizer_state", measured)
    distill.main(args(base, tmp_path / "r"))
    kept, brief = common.disk_needed(common.weight_bytes(base), 4, 2)
    assert data_bytes(tmp_path / "r") == pytest.approx(kept, rel=0.01)
    assert at_drop and kept < max(at_drop) <= kept + brief
    assert common.disk_needed(common.weight_bytes(base), 4, 2, start=4) == (0, 0)  # done

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**12, 0, kept))
    with pytest.raises(RunError, match=r"GB free, training .* needs about .*--save-every"):
        distill.main(args(base, tmp_path / "full"))
    assert not (tmp_path / "full" / "checkpoints").exists()
