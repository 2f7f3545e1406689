"""The one naming scheme: HF parameter paths key modules; bridge hook names key activations.

`model.layers.3.self_attn.k_proj.weight` -> (3, "k_proj"); `model.embed_tokens.weight` ->
(None, "embed"); activations of layer 3 are `blocks.3.hook_resid_post`.
"""

from __future__ import annotations

import re

__all__ = ["EMBED_HOOK", "MODULES", "head_z_hook", "hf_name", "mlp_out_hook", "module_of",
           "pattern_hook", "resid_hook"]

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
           "q_norm", "k_norm", "input_layernorm", "post_attention_layernorm")
GLOBAL_MODULES = ("embed", "final_norm", "lm_head")
# a block's parameters: `model.layers.3.` (Llama, Qwen, Mistral, Gemma, OLMo, Phi-3),
# `gpt_neox.layers.3.`, `transformer.h.3.` (GPT-2)
_LAYER = re.compile(r"(?:^|\.)(?:layers|h)\.(\d+)\.(.+)$")


def hf_name(name: str) -> str:
    """Parameter name as HF writes it (the bridge inserts `._original_component`)."""
    return name.replace("._original_component", "")


def module_of(param_name: str) -> tuple[int | None, str]:
    """(layer, module) of an HF parameter name; unknown names keep their last module part."""
    name = hf_name(param_name).removesuffix(".weight").removesuffix(".bias")
    m = _LAYER.search(name)
    if m:
        return int(m.group(1)), m.group(2).split(".")[-1]
    last = name.split(".")[-1]
    if "embed_tokens" in name or last in ("wte", "embed_in"):
        return None, "embed"
    if last == "wpe":
        return None, "pos_embed"
    if name.endswith("lm_head") or last == "embed_out":
        return None, "lm_head"
    if name.endswith("norm") or last == "ln_f":
        return None, "final_norm"
    return None, name.split(".")[-1]


def resid_hook(layer: int) -> str:
    return f"blocks.{layer}.hook_resid_post"


def mlp_out_hook(layer: int) -> str:
    return f"blocks.{layer}.hook_mlp_out"


def head_z_hook(layer: int) -> str:
    """Every head's output before the output projection (B T heads d_head)."""
    return f"blocks.{layer}.attn.hook_z"


def pattern_hook(layer: int) -> str:
    return f"blocks.{layer}.attn.hook_pattern"


EMBED_HOOK = "hook_embed"
