"""Teacher-forced forwards, the lowest layer every rollout, cache and loss builds on: position
ids from a padding mask, the logits of a given response under any prompt, and whether a model
is a Hugging Face causal LM (KV caches, `logits_to_keep`) or a stand-in module."""

from __future__ import annotations

import torch

__all__ = ["is_hf", "positions", "response_logits"]


def positions(mask_B_T: torch.Tensor) -> torch.Tensor:
    return (mask_B_T.cumsum(-1) - 1).clamp(min=0)


def response_logits(model, prompt_ids_B_P: torch.Tensor, prompt_mask_B_P: torch.Tensor,
                    resp_B_N: torch.Tensor, resp_mask_B_N: torch.Tensor) -> torch.Tensor:
    """Teacher-forced logits_B_N_V: entry t is the distribution for response token t given the
    prompt and response tokens < t. Same response, any prompt (with or without context)."""
    ids = torch.cat([prompt_ids_B_P, resp_B_N], dim=1)
    mask = torch.cat([prompt_mask_B_P, resp_mask_B_N], dim=1)
    P, N = prompt_ids_B_P.shape[1], resp_B_N.shape[1]
    if not is_hf(model):  # a stand-in module: every position's logits
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask)).logits
        return logits[:, P - 1: P - 1 + N]
    # the LM head runs on the N + 1 last positions only (the prompt's would be thrown away)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask),
                   logits_to_keep=N + 1).logits
    return logits[:, :N]


def is_hf(model) -> bool:
    """A Hugging Face causal LM (KV caches, `logits_to_keep`), not a stand-in module."""
    from transformers import PreTrainedModel

    return isinstance(model, PreTrainedModel)
