"""train.sft --lora-rank: only the adapter trains, checkpoints hold the merged weights (what
distillation and the analyses load) and the adapter in adapter/ (what a resume continues)."""

import pytest
import torch
from safetensors.torch import load_file

from nca_interp.checkpoint import load_checkpoint
from nca_interp.errors import UsageError
from train import sft

pytest.importorskip("peft")

TINY = ["--arch", "llama", "--n-layers", "2", "--d-model", "32", "--d-mlp", "64",
        "--n-heads", "4", "--threads", "1", "--eval-levels", "4"]
LORA = ["--lora-rank", "4", "--lr", "1e-2", "--batch", "8", "--steps", "4", "--save-every", "2",
        "--eval-every", "2", "--warmup", "1", "--threads", "1", "--eval-levels", "4"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny Llama checkpoint to adapt (one full fine-tuning step from a random init)."""
    out = tmp_path_factory.mktemp("base") / "base"
    sft.main(["--out", str(out), *TINY, "--steps", "1", "--batch", "4"])
    return out


def test_lora_resumes_to_identical_weights(base, tmp_path, monkeypatch):
    """A run killed after step 3 and resumed from step 2's checkpoint ends bit-identical to an
    uninterrupted one: the adapter and its Adam moments continue, not the merged weights."""
    sft.main(["--out", str(tmp_path / "full"), "--init", str(base), *LORA])
    real_log = sft.Run.log

    def killed(self, record):
        real_log(self, record)
        if record["step"] == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(sft.Run, "log", killed)
    with pytest.raises(KeyboardInterrupt):
        sft.main(["--out", str(tmp_path / "resumed"), "--init", str(base), *LORA])
    monkeypatch.undo()
    sft.main(["--out", str(tmp_path / "resumed"), "--init", str(base), *LORA])
    for f in ("model.safetensors", "adapter/adapter_model.safetensors"):
        a, b = (load_file(tmp_path / run / f) for run in ("full", "resumed"))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), f
    merged, start = (load_file(p / "model.safetensors") for p in (tmp_path / "full", base))
    assert merged.keys() == start.keys()
    adapted = [k for k in merged if k.split(".")[-2] in sft.lora.TARGETS]
    assert len(adapted) == 2 * 7 and all(not torch.equal(merged[k], start[k]) for k in adapted)
    assert all(torch.equal(merged[k], start[k]) for k in merged if k not in adapted)
    steps = sorted(p.name for p in (tmp_path / "full" / "checkpoints").iterdir())
    assert steps == ["step_000002", "step_000004"]
    assert all((tmp_path / "full" / "checkpoints" / s / "adapter" / "adapter_config.json")
               .exists() for s in steps)


def test_merged_checkpoint_is_base_plus_adapter(base, tmp_path):
    """The saved merged weights compute what base + adapter computes (logits to 1e-5), and
    restoring from the base and the adapter alone gives exactly the saved weights."""
    from peft import PeftModel

    from nca_interp import lora

    out = tmp_path / "run"
    sft.main(["--out", str(out), "--init", str(base), *LORA[:-8], "--steps", "2",
              "--save-every", "2", "--eval-every", "2", "--eval-levels", "4"])
    saved, tok = load_checkpoint(out)
    adapted = PeftModel.from_pretrained(load_checkpoint(base)[0], str(out / "adapter"))
    ids = torch.randint(3, tok.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got = adapted(input_ids=ids).logits, saved(input_ids=ids).logits
    assert torch.allclose(want, got, atol=1e-5)
    restored = lora.restore(load_checkpoint(base)[0], out / "adapter").state_dict()
    on_disk = load_file(out / "model.safetensors")
    assert all(torch.equal(restored[k], v) for k, v in on_disk.items())
    assert sorted(p.name for p in (out / "adapter").iterdir()) == list(lora.ADAPTER_FILES)


def test_full_fine_tuning_records_no_lora_fields(base, tmp_path):
    """--lora-rank 0 records the run config of before LoRA existed (old runs resume, digests
    stay), and a LoRA run is not resumed as full fine-tuning (nor the reverse)."""
    import json

    sft.main(["--out", str(tmp_path / "ft"), *TINY, "--steps", "1", "--batch", "4"])
    recorded = json.loads((tmp_path / "ft" / "run_config.json").read_text())
    assert not {"lora_rank", "lora_alpha", "lora_dropout"} & recorded.keys()
    lora_run = ["--init", str(base), *LORA[:-8], "--steps", "1", "--eval-levels", "4"]
    sft.main(["--out", str(tmp_path / "lora"), *lora_run])
    recorded = json.loads((tmp_path / "lora" / "run_config.json").read_text())
    assert recorded["lora_rank"] == 4 and recorded["lora_alpha"] == 8.0
    i = lora_run.index("--lora-rank")
    with pytest.raises(UsageError, match="lora-rank 4"):
        sft.main(["--out", str(tmp_path / "lora"), *lora_run[:i], *lora_run[i + 2:],
                  "--steps", "2"])
    with pytest.raises(UsageError):
        sft.main(["--out", str(tmp_path / "ft"), *TINY, "--steps", "2", "--batch", "4",
                  "--lora-rank", "4"])
