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

__all__ = ["ADAPTER_DIR", "TARGETS", "check_adapter", "exact_delta", "load_adapter", "merged",
           "restore", "save_adapter", "wrap"]

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
    as a plain Hugging Face model on a copy: `peft_model` keeps training with its adapter.

    The sum is computed so that every machine gets the same bits (`exact_delta`), not by peft's
    merge (a float32 matmul, whose rounding depends on the CPU's kernels): a teacher kept as its
    adapter restores to the weights digest its run published, on any machine."""
    full = copy.deepcopy(peft_model)
    with torch.no_grad():
        for module in full.modules():
            if not (hasattr(module, "base_layer") and "default" in getattr(module, "lora_A", {})):
                continue
            weight = module.get_base_layer().weight
            delta = exact_delta(module.lora_B["default"].weight, module.lora_A["default"].weight,
                                module.scaling["default"])
            weight.copy_((weight.double() + delta).to(weight.dtype))
    full = full.unload()  # the base model, its adapted layers replaced by their base layers
    full.train(peft_model.training)
    return full


def exact_delta(b: torch.Tensor, a: torch.Tensor, scale: float) -> torch.Tensor:
    """scale * B @ A in float64, summed over the rank one outer product at a time in a fixed
    order: each product of two float32 numbers is exact in float64, and each sum and the scale
    are single IEEE operations, so the result does not depend on the machine (a matmul's blocking
    and fused multiply-adds do)."""
    b, a = b.detach().double().cpu(), a.detach().double().cpu()
    acc = torch.zeros(b.shape[0], a.shape[1], dtype=torch.float64)
    for k in range(a.shape[0]):
        acc.add_(b[:, k:k + 1] * a[k:k + 1, :])
    return acc.mul_(scale)


def save_adapter(peft_model, folder: str | Path) -> None:
    """peft's `adapter_config.json` and `adapter_model.safetensors` (fp32) into `folder`."""
    peft_model.save_pretrained(str(folder), safe_serialization=True)
    (Path(folder) / "README.md").unlink(missing_ok=True)  # peft's blank model card


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
    `adapter_folder`, merged as a run merges it (`merged`): what a LoRA run's checkpoint
    holds, rebuilt from the adapter alone, to the same bits."""
    from nca_interp.checkpoint import CheckpointError
    from nca_interp.fsio import read_json

    config = read_json(Path(adapter_folder) / "adapter_config.json", "adapter config")
    try:
        rank, alpha = int(config["r"]), float(config["lora_alpha"])
        dropout = float(config.get("lora_dropout") or 0.0)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{adapter_folder}/adapter_config.json lacks the adapter's rank or "
                              f"alpha ({e}); restore it from where the adapter came from") from e
    check_adapter(Path(adapter_folder), config)
    adapted = wrap(base, rank, alpha, dropout)
    load_adapter(adapted, adapter_folder)
    adapted.eval()
    return merged(adapted)


def check_adapter(folder: Path, config: dict) -> None:
    """An adapter's config is the adapter its weights file holds, before anything is built: a
    rank that is a whole number >= 1 and the row count of every `lora_A` tensor, a finite alpha,
    a dropout in [0, 1) (a config edited to r 10^12 tried to allocate 128 TB: a traceback, the
    sixth probe; r -1 and a NaN alpha were peft's message or "other bits")."""
    import math

    from safetensors import safe_open

    from nca_interp.checkpoint import CheckpointError

    where = f"{folder}/adapter_config.json"
    rank, alpha, dropout = config.get("r"), config.get("lora_alpha"), \
        config.get("lora_dropout") or 0.0
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise CheckpointError(f"{where}: r is {rank!r}, not a rank (a whole number >= 1); "
                              "restore it from where the adapter came from")
    for name, value, ok in (("lora_alpha", alpha, lambda v: math.isfinite(v) and v > 0),
                            ("lora_dropout", dropout, lambda v: 0 <= v < 1)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
            raise CheckpointError(f"{where}: {name} is {value!r}, which no adapter has; "
                                  "restore it from where the adapter came from")
    weights = folder / "adapter_model.safetensors"
    try:
        with safe_open(str(weights), framework="pt") as f:
            rows = {f.get_slice(k).get_shape()[0] for k in f.keys() if "lora_A" in k}
    except Exception as e:  # noqa: BLE001 - safetensors/OS errors of any kind
        raise CheckpointError(f"{weights} is not a readable safetensors file ({e}); restore it "
                              "from where the adapter came from") from e
    if rows != {rank}:
        raise CheckpointError(f"{where} says rank {rank}, but {weights.name} holds adapters of "
                              f"rank {sorted(rows)[:3] or 'none'}; the two files belong to "
                              "different adapters: restore them together")
