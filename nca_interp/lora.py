"""LoRA adapters (peft) for a teacher small enough to keep in git, used everywhere as its merged
full weights: `wrap` a checkpoint's model for training, `merged` gives the full model a run saves
(W + alpha/r * B @ A in every adapted projection, on a copy: training goes on with the adapter),
`save_adapter` / `load_adapter` write and read the adapter alone (`adapter/` of a checkpoint),
and `restore` rebuilds the merged model from the base checkpoint and an adapter.

peft is an optional dependency (`pip install nca_interp[real]`); only these functions import it.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

__all__ = ["ADAPTER_DIR", "TARGETS", "load_adapter", "merged", "publish_adapter", "restore",
           "save_adapter", "wrap"]

# Every attention and MLP projection of the Llama / Qwen families (HF module names).
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ADAPTER_DIR = "adapter"  # beside the merged weights in a checkpoint folder
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")  # peft's names


def _peft():
    from nca_interp.errors import UsageError

    try:
        import peft
    except ImportError:
        raise UsageError("--lora-rank needs peft: pip install 'nca_interp[real]' (peft==0.21.2)"
                         ) from None
    return peft


def wrap(model, rank: int, alpha: float, dropout: float = 0.0, seed: int = 0):
    """`model` (a Hugging Face causal LM) with a LoRA adapter of `rank` on every `TARGETS`
    projection, as a peft model: only the adapter requires grad. `model` itself is adapted in
    place (its projections become peft layers). The adapter's init (A random, B zero, so the
    wrapped model starts equal to `model`) is drawn from `seed`, so a resumed run rebuilds it
    identically before loading the saved adapter over it."""
    peft = _peft()
    config = peft.LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout,
                             target_modules=list(TARGETS), bias="none", task_type="CAUSAL_LM")
    with torch.random.fork_rng(devices=[]):  # the caller's random stream stays where it was
        torch.manual_seed(seed)
        return peft.get_peft_model(model, config)


def merged(peft_model):
    """The full model the adapter's weights stand for (each adapted weight W + scale * B @ A),
    as a plain Hugging Face model on a copy: `peft_model` keeps training with its adapter."""
    full = copy.deepcopy(peft_model).merge_and_unload()
    full.train(peft_model.training)
    return full


def save_adapter(peft_model, folder: str | Path) -> None:
    """peft's `adapter_config.json` and `adapter_model.safetensors` (fp32) into `folder`."""
    peft_model.save_pretrained(str(folder), safe_serialization=True)
    (Path(folder) / "README.md").unlink(missing_ok=True)  # peft's blank model card


def publish_adapter(src: str | Path, run_dir: str | Path) -> None:
    """Copy checkpoint `src`'s adapter to the run's root, beside the merged weights that
    `checkpoint.publish` copies there (it copies files, not folders); each file atomically."""
    from nca_interp.fsio import write_bytes

    dest = Path(run_dir) / ADAPTER_DIR
    dest.mkdir(exist_ok=True)
    for name in ADAPTER_FILES:
        write_bytes(dest / name, (Path(src) / ADAPTER_DIR / name).read_bytes())


def load_adapter(peft_model, folder: str | Path) -> None:
    """Set the adapter of `peft_model` (built by `wrap` with the same rank) to the one saved in
    `folder`, exactly; refuses a file that lacks any of its tensors."""
    from safetensors.torch import load_file

    from nca_interp.checkpoint import CheckpointError

    peft = _peft()
    device = str(next(peft_model.parameters()).device)
    state = load_file(Path(folder) / "adapter_model.safetensors", device=device)
    result = peft.set_peft_model_state_dict(peft_model, state)
    missing = [k for k in result.missing_keys if "lora_" in k]
    if missing or result.unexpected_keys:
        raise CheckpointError(f"{folder} does not fit this adapter (missing {missing[:3]}, "
                              f"unexpected {list(result.unexpected_keys)[:3]})")


def restore(base, adapter_folder: str | Path):
    """The merged model of `base` (a Hugging Face model, adapted in place) and the adapter in
    `adapter_folder`: what a LoRA run's checkpoint holds, rebuilt from the adapter alone."""
    peft = _peft()
    return peft.PeftModel.from_pretrained(base, str(adapter_folder)).merge_and_unload()
