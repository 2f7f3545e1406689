import json

import pytest
import torch
from safetensors.torch import load_file

from nca_interp.checkpoint import load_checkpoint
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
