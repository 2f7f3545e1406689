import json

import pytest
import torch
from safetensors.torch import load_file

from nca_interp.checkpoint import load_checkpoint
from nca_interp.rollout import segment_batch
from train import sft

ARGS = ["--n-layers", "2", "--d-model", "32", "--d-mlp", "64", "--batch", "8", "--steps", "4",
        "--save-every", "2", "--eval-every", "2", "--eval-levels", "6", "--threads", "1",
        "--warmup", "1"]


def test_sft_resumes_to_identical_weights(tmp_path, monkeypatch):
    sft.main(["--out", str(tmp_path / "full"), *ARGS])
    real_log = sft.Run.log

    def killed(self, record):
        real_log(self, record)
        if record["step"] == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(sft.Run, "log", killed)
    with pytest.raises(KeyboardInterrupt):
        sft.main(["--out", str(tmp_path / "resumed"), *ARGS])
    monkeypatch.undo()
    sft.main(["--out", str(tmp_path / "resumed"), *ARGS])
    a = load_file(tmp_path / "full" / "model.safetensors")
    b = load_file(tmp_path / "resumed" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    log = (tmp_path / "full" / "metrics.jsonl").read_text()
    records = [json.loads(x) for x in log.splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert {"win_none", "win_state", "win_plan"} <= records[1].keys()
    run = json.loads((tmp_path / "full" / "run_config.json").read_text())
    assert run["task"]["name"] == "sokoban" and run["git_commit"]
    load_checkpoint(tmp_path / "full")


def test_changed_config_refused(tmp_path):
    sft.main(["--out", str(tmp_path / "r"), *ARGS[:-8], "--steps", "1", "--eval-levels", "4",
              "--threads", "1"])
    with pytest.raises(ValueError, match="different config"):
        sft.main(["--out", str(tmp_path / "r"), *ARGS[:-8], "--steps", "1", "--lr", "0.1"])


def test_detours_are_seen_but_not_trained():
    """A detour is part of the response the model attends to (the plan after it is only right
    given the detour) but carries no loss; an earlier version masked it out of attention."""
    from nca_interp.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    cfg = sft.parse_config(sft.SFTConfig, ["--p-detour", "1", "--p-no-context", "0",
                                           "--batch", "16"])
    task = sft.task_of(cfg)[1]
    prompts, responses = sft.batch_for_step(task, cfg, 0, set())
    resp, attn, loss = segment_batch(tok, responses)
    detoured = [i for i, segs in enumerate(responses) if segs[0][0]]
    assert detoured
    for i in detoured:
        n = len(responses[i][0][0])
        assert attn[i, :n].all() and not loss[i, :n].any() and loss[i, n]
    assert all((attn.sum(1) - loss.sum(1))[i] == len(responses[i][0][0]) for i in range(16))


@pytest.mark.parametrize("follow_ups", ["full", "open"])
def test_packed_questions_train_every_answer(follow_ups):
    from nca_interp.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    cfg = sft.parse_config(sft.SFTConfig, ["--task", "sysprompt", "--pack", "4", "--batch", "8",
                                           "--p-no-context", "0", "--follow-ups", follow_ups])
    task = sft.task_of(cfg)[1]
    prompts, responses = sft.batch_for_step(task, cfg, 0, set())
    assert len(prompts) == 2  # 8 questions, 4 per knowledge base
    resp, attn, loss = segment_batch(tok, responses)
    assert (loss.sum(1) == 8).all()  # 4 answer letters + 4 end-of-response tokens
    answers = resp[loss.bool()].view(2, 8)[:, 1::2]
    assert (answers == tok.eos_token_id).all()
    text = tok.decode(resp[0][attn[0].bool()], skip_special_tokens=True)
    assert text.count(" of ") == 3  # three follow-up questions, seen by the model
    assert text.count(":A") == (3 if follow_ups == "full" else 0)  # open: no options
    with pytest.raises(ValueError, match="follow-ups"):
        sft.batch_for_step(task, sft.parse_config(sft.SFTConfig, [
            "--task", "sysprompt", "--pack", "2", "--follow-ups", "some"]), 0, set())


def test_init_starts_from_the_checkpoint(tmp_path):
    """--init: the run starts from the checkpoint's weights (one step at a tiny lr stays next
    to them, far from a fresh init of the same seed); a missing checkpoint is refused before
    the run directory exists."""
    from nca_interp.checkpoint import CheckpointError

    sft.main(["--out", str(tmp_path / "a"), *ARGS[:-8], "--steps", "2", "--eval-levels", "4",
              "--seed", "1"])
    common = [*ARGS[:-8], "--steps", "1", "--eval-levels", "4", "--lr", "1e-9"]
    sft.main(["--out", str(tmp_path / "b"), *common, "--init", str(tmp_path / "a"),
              "--task-options", "remap=LRUD", "--contexts", "remap"])
    sft.main(["--out", str(tmp_path / "c"), *common])
    a, b, c = (load_file(tmp_path / x / "model.safetensors") for x in "abc")
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert not all(torch.allclose(a[k], c[k], atol=1e-3) for k in a)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        sft.main(["--out", str(tmp_path / "d"), *common, "--init", str(tmp_path / "nothing")])
    assert not (tmp_path / "d").exists()


def test_extending_a_cosine_run_is_refused(tmp_path, capsys):
    """A cosine run of 4 steps resumed with --steps 6 jumped from the schedule's end back up
    and was no 6-step run (SILENT in #71's fourth probe); a constant schedule extends."""
    from nca_interp.cli import entry

    sft.main(["--out", str(tmp_path / "c"), *ARGS])
    assert entry(sft.main, ["--out", str(tmp_path / "c"), *ARGS, "--steps", "6"]) == 2
    assert "follows a cosine schedule over 4 steps" in capsys.readouterr().err
    flat = [*ARGS, "--schedule", "constant"]
    sft.main(["--out", str(tmp_path / "k"), *flat])
    sft.main(["--out", str(tmp_path / "k"), *flat, "--steps", "6"])
