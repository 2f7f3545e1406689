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
                  "--steps", "1"])
    with pytest.raises(UsageError, match="different config|lora-rank 0"):
        sft.main(["--out", str(tmp_path / "ft"), *TINY, "--steps", "1", "--batch", "4",
                  "--lora-rank", "4", "--init", str(base)])


def test_exact_merge_does_not_depend_on_threads_or_layout():
    """The merge a kept adapter is restored with gives the same bits wherever it runs: each
    rank's outer product is exact in float64 and summed in a fixed order, so neither the thread
    count nor the operands' memory layout (what a matmul's blocking depends on) changes a bit;
    it equals the float64 matmul to rounding."""
    from nca_interp import lora

    gen = torch.Generator().manual_seed(0)
    b, a = torch.randn(96, 16, generator=gen), torch.randn(16, 200, generator=gen)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = lora.exact_delta(b, a, 2.0)
        torch.set_num_threads(2)
        two = lora.exact_delta(b.t().contiguous().t(), a.t().contiguous().t(), 2.0)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)
    assert torch.allclose(one, 2.0 * (b.double() @ a.double()), rtol=0, atol=1e-12)


def test_a_kept_lora_teacher_is_its_adapter_and_restores_to_the_same_weights(
        base, tmp_path, monkeypatch):
    """A LoRA teacher is kept as its adapter and a record of its base (no merged weights: 540 MB
    at 30 layers); restoring merges it into the cached base again, to the run's weights digest,
    and refuses a base of other content."""
    import shutil

    from nca_interp.checkpoint import latest_step_checkpoint, weights_digest
    from nca_interp.paper import kept

    cache = tmp_path / "cache"
    shutil.copytree(base, cache / "models" / "tinybase")
    monkeypatch.setenv("NCA_INTERP_CACHE", str(cache))
    run = tmp_path / "runs" / "lora_base"
    sft.main(["--out", str(run), "--init", str(cache / "models" / "tinybase"), *LORA])
    store = tmp_path / "kept"
    dest = kept.save(run, store)
    assert not list(dest.rglob("model.safetensors")) and (dest / kept.RECORD).is_file()
    assert (dest / "adapter" / "adapter_model.safetensors").is_file()
    fresh = tmp_path / "clone" / run.name
    assert kept.restore(fresh, store)
    assert weights_digest(fresh) == weights_digest(run)
    assert weights_digest(latest_step_checkpoint(fresh)) == \
        weights_digest(latest_step_checkpoint(run))
    assert not (fresh / kept.RECORD).exists()
    other = load_file(cache / "models" / "tinybase" / "model.safetensors")
    from safetensors.torch import save_file

    save_file({k: v + 1e-3 for k, v in other.items()}, str(cache / "models" / "tinybase" /
                                                          "model.safetensors"),
              metadata={"format": "pt"})
    from nca_interp.checkpoint import write_manifest

    write_manifest(cache / "models" / "tinybase")
    with pytest.raises(UsageError, match="not the tinybase the kept teacher"):
        kept.restore(tmp_path / "clone2" / run.name, store)


def test_the_adapter_is_part_of_the_checkpoint_it_belongs_to(base, tmp_path):
    """adapter/ is listed in the manifest (a damaged adapter is found, as a damaged weight file
    is) and published with the weights; an adapter/ that is a link is refused."""
    import json

    from nca_interp.checkpoint import CheckpointError, verify_folder

    out = tmp_path / "run"
    sft.main(["--out", str(out), "--init", str(base), *LORA[:-8], "--steps", "2",
              "--save-every", "2", "--eval-every", "2", "--eval-levels", "4"])
    for folder in (out, out / "checkpoints" / "step_000002"):
        files = json.loads((folder / "nca_checkpoint.json").read_text())["files"]
        assert {"adapter/adapter_config.json", "adapter/adapter_model.safetensors"} <= set(files)
    f = out / "adapter" / "adapter_model.safetensors"
    f.write_bytes(f.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(CheckpointError, match="adapter_model.safetensors is missing, truncated"):
        verify_folder(out)
    step = out / "checkpoints" / "step_000002"
    (step / "adapter").rename(tmp_path / "elsewhere")
    (step / "adapter").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(CheckpointError, match="not a file of the folder itself"):
        verify_folder(step)


def test_a_teacher_merged_by_peft_is_kept_as_its_exact_merge_only_when_asked(
        base, tmp_path, monkeypatch):
    """A run saved before the exact merge holds peft's float32 merge: kept only with --remerge,
    as the exact merge of its adapter, and only when the two differ by rounding."""
    import shutil

    from safetensors.torch import save_file

    from nca_interp.checkpoint import latest_step_checkpoint, weights_digest, write_manifest
    from nca_interp.paper import kept

    cache = tmp_path / "cache"
    shutil.copytree(base, cache / "models" / "tinybase")
    monkeypatch.setenv("NCA_INTERP_CACHE", str(cache))
    run = tmp_path / "runs" / "old_base"
    sft.main(["--out", str(run), "--init", str(cache / "models" / "tinybase"), *LORA])

    def resave(shift):  # what peft's merge (or another model) left in the run's files
        for folder in (run, latest_step_checkpoint(run)):
            w = load_file(folder / "model.safetensors")
            k = next(n for n in w if n.endswith("q_proj.weight"))
            w[k] = w[k] + shift
            save_file(w, str(folder / "model.safetensors"), metadata={"format": "pt"})
            write_manifest(folder, skip=("metrics.jsonl",) if folder == run else ())

    resave(1e-7)
    with pytest.raises(UsageError, match="keep it with --remerge"):
        kept.save(run, tmp_path / "kept")
    dest = kept.save(run, tmp_path / "kept", remerge=True)
    import json

    record = json.loads((dest / kept.RECORD).read_text())
    assert 0 < max(record["remerged_max_abs_difference"].values()) < 1e-6
    fresh = tmp_path / "clone" / run.name
    assert kept.restore(fresh, tmp_path / "kept")
    assert weights_digest(fresh) != weights_digest(run)  # the exact merge, not peft's bits
    resave(1e-2)
    with pytest.raises(UsageError, match="more than rounding"):
        kept.save(run, tmp_path / "kept2", remerge=True)


def test_a_student_lost_with_its_machine_is_retrained_from_the_kept_teacher_to_its_bits(
        base, tmp_path, monkeypatch):
    """#68's runs that outlive the checkout: a student is never kept in git (540 MB at 30
    layers); a machine lost takes it, and it is retrained from the teacher kept as its adapter.
    The teacher restored on a fresh clone has the run's content digest (what a student records
    of its --student, so the pipeline keeps a student distilled from either), and the same
    distillation command from it ends in the same weights, bit for bit."""
    import shutil

    from nca_interp.checkpoint import content_digest, latest_step_checkpoint
    from nca_interp.paper import kept
    from train import distill

    cache = tmp_path / "cache"
    shutil.copytree(base, cache / "models" / "tinybase")
    monkeypatch.setenv("NCA_INTERP_CACHE", str(cache))
    run = tmp_path / "machine" / "lora_base"
    sft.main(["--out", str(run), "--init", str(cache / "models" / "tinybase"), *LORA])

    def student(teacher, out):
        distill.main(["--method", "nca", "--student", str(teacher), "--out", str(out),
                      "--context", "plan", "--steps", "2", "--batch", "4", "--save-every", "2",
                      "--lr", "1e-3", "--warmup", "1", "--seed", "3", "--threads", "1",
                      "--eval-every", "50", "--precision", "fp32"])
        return latest_step_checkpoint(out)

    first = student(run, tmp_path / "machine" / "nca_s3")
    lost = {"student": weights(first), "teacher": content_digest(run)}
    store = tmp_path / "git" / "checkpoints"
    kept.save(run, store)
    shutil.rmtree(tmp_path / "machine")  # the machine is gone; git keeps the adapter
    fresh = tmp_path / "clone" / "runs" / "lora_base"
    assert kept.restore(fresh, store)
    assert content_digest(fresh) == lost["teacher"]
    again = student(fresh, tmp_path / "clone" / "runs" / "nca_s3")
    assert again.name == "step_000002"
    assert weights(again) == lost["student"]


def weights(checkpoint):
    """The sha256 of every file a checkpoint computes with (weights, config, tokenizer), from its
    manifest: not its run config, which names where its --student lived."""
    import json

    files = json.loads((checkpoint / "nca_checkpoint.json").read_text())["files"]
    return {name: meta["sha256"] for name, meta in files.items()
            if not name.startswith("trainer_state") and name != "run_config.json"}
