"""Where the two views of a prompt line up: which tokens are the context, and which tokens of
x the [c, x] prompt repeats at the same offset from the end (left padding puts them in the same
columns). layer_sim and patching both read positions through these two functions."""

from __future__ import annotations

import torch

from nca_interp.errors import UsageError

__all__ = ["context_token_mask", "shared_suffix_mask"]


def context_token_mask(tokenizer, text: str, context: str) -> list[bool]:
    """Which tokens of `text` (tokenized as `encode` does) overlap the context string; found
    by character offsets, so it works wherever a chat template puts the context."""
    start = text.find(context)
    if start < 0:
        raise UsageError(f"the context {context[:40]!r} is not in the prompt built with it: the "
                         "model's chat template drops or rewrites it (a template without a "
                         "system turn drops a system message); put c in the user turn "
                         "(--task jsonl: --task-options context_as=user) or use a model whose "
                         "template keeps it")
    end = start + len(context)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return [a < end and b > start for a, b in enc["offset_mapping"]]


def shared_suffix_mask(x_ids: torch.Tensor, x_mask: torch.Tensor, cx_ids: torch.Tensor
                       ) -> torch.Tensor:
    """B P mask of the prompt x's tokens that the [c, x] prompt repeats at the same offset from
    the end (left padding aligns them): x itself when x is a token-level suffix of [c, x]; with
    a chat template only the common tail. x may be the longer prompt (a chat model's default
    system message replaced by a shorter c): then at most its last Q positions can match."""
    P, Q = x_ids.shape[1], cx_ids.shape[1]
    K = min(P, Q)
    same = torch.zeros_like(x_ids, dtype=torch.bool)
    same[:, P - K:] = (x_ids[:, P - K:] == cx_ids[:, Q - K:]) & x_mask[:, P - K:].bool()
    # keep a position only if every later position also matches (a contiguous common suffix)
    return same.flip(1).long().cumprod(1).flip(1)
