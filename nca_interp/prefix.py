"""Shared-prefix caching: run the tokens every prompt of a batch begins with once, not per row.

In self-distillation the context c (a system message, the rules) is the same for every prompt,
so the [c, x] view of a batch is one shared prefix followed by a short per-row suffix; the
no-context view often shares a template prefix too (a chat template's default system message).
`view_logits` runs the prefix once (batch 1), expands its keys and values over the batch, and
runs each row's suffix and response on top of them. The result equals the full pass
(`rollout.response_logits`) to fp32 rounding, gradients included: the expand is differentiable,
so the prefix's backward also runs once, with the rows' gradients summed.

    prefix    ids[first real token : + L]   the same L tokens in every row (L < every row)
    suffix    each row's remaining prompt tokens, left-padded to S columns
    positions 0..L-1 for the prefix, then counted on through the suffix's real tokens, exactly
              what the left-padded full prompt gets (`rollout.positions`)

`PrefixCache` keeps a frozen model's prefix keys and values across calls (the teacher's, once
per run). An entry is keyed by the model and the prefix tokens, and remembers the version
counters of the model's parameters: an in-place update (an optimizer step) makes it stale and it
is recomputed, so a cache can never serve a model's old weights. A prefix that changes per item
(Sokoban's plans) finds no shared tokens and takes the full pass, losing nothing.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from transformers import DynamicCache

from nca_interp.forward import is_hf, positions, response_logits

__all__ = ["PrefixCache", "prefill", "view_logits"]

MIN_PREFIX = 8  # shorter shared prefixes are not worth a second model call


def shared_prefix_len(ids_B_T: torch.Tensor, mask_B_T: torch.Tensor) -> int:
    """Tokens every left-padded row begins with, leaving at least one token of each row's own
    (a row's first response logit comes from its last prompt position)."""
    lengths = mask_B_T.sum(1)
    n = int(lengths.min()) - 1
    if n <= 0 or ids_B_T.shape[0] == 0:
        return 0
    starts = ids_B_T.shape[1] - lengths
    aligned = ids_B_T.gather(1, starts[:, None] + torch.arange(n, device=ids_B_T.device))
    same = (aligned == aligned[:1]).all(0)
    return n if bool(same.all()) else int((~same).long().argmax())


def split_prefix(ids_B_T: torch.Tensor, mask_B_T: torch.Tensor, L: int
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(prefix_1_L, suffix_ids_B_S, suffix_mask_B_S): the shared L tokens and each row's rest,
    left-padded (pad columns masked; their ids are the row's own and never attended)."""
    T = ids_B_T.shape[1]
    lengths = mask_B_T.sum(1)
    S = int(lengths.max()) - L
    first = T - int(lengths[0])
    prefix = ids_B_T[:1, first: first + L]
    suffix_ids = ids_B_T[:, T - S:]
    col = torch.arange(T - S, T, device=ids_B_T.device)
    suffix_mask = (col[None, :] >= (T - lengths + L)[:, None]).to(mask_B_T.dtype)
    return prefix, suffix_ids, suffix_mask


def prefix_kv(model, prefix_1_L: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Keys and values (1 H L D per layer) of the prefix at positions 0..L-1; differentiable
    when grad is enabled."""
    L = prefix_1_L.shape[1]
    pos = torch.arange(L, device=prefix_1_L.device)[None]
    out = model(input_ids=prefix_1_L, attention_mask=torch.ones_like(prefix_1_L),
                position_ids=pos, use_cache=True, logits_to_keep=1)
    return [(layer.keys, layer.values) for layer in out.cache.layers]


class PrefixCache:
    """A frozen model's prefix keys and values across calls (see the module docstring). Holds
    `size` prefixes, least recently used dropped first. Not for a model under training: its
    entries go stale at every optimizer step and are recomputed, which saves nothing."""

    def __init__(self, size: int = 4):
        self.size = size
        self._entries: OrderedDict = OrderedDict()
        self.hits = self.misses = 0

    @staticmethod
    def _versions(model) -> tuple[int, ...]:
        return tuple(p._version for p in model.parameters())

    def get(self, model, prefix_1_L: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        key = (id(model), tuple(prefix_1_L[0].tolist()))
        versions = self._versions(model)
        hit = self._entries.get(key)
        if hit is not None and hit[0] == versions:
            self._entries.move_to_end(key)
            self.hits += 1
            return hit[1]
        self.misses += 1
        with torch.no_grad():
            kv = prefix_kv(model, prefix_1_L)
        self._entries[key] = (versions, kv)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return kv


def prefill(model, prompt_ids_B_P: torch.Tensor, prompt_mask_B_P: torch.Tensor):
    """The prompts run for decoding, their shared prefix once: (last-position logits_B_V,
    the HF cache over L + S columns, its mask_B_(L+S), positions_B_1 of the next token). Without
    a shared prefix, the plain left-padded forward (its columns are the prompt's)."""
    L = shared_prefix_len(prompt_ids_B_P, prompt_mask_B_P)
    B = prompt_ids_B_P.shape[0]
    if L < MIN_PREFIX:
        ids, mask, past, cols = prompt_ids_B_P, prompt_mask_B_P, None, slice(None)
    else:
        prefix, ids, smask = split_prefix(prompt_ids_B_P, prompt_mask_B_P, L)
        past = DynamicCache([(k.expand(B, -1, -1, -1), v.expand(B, -1, -1, -1))
                             for k, v in prefix_kv(model, prefix)], config=model.config)
        mask = torch.cat([torch.ones(B, L, dtype=smask.dtype, device=ids.device), smask], 1)
        cols = slice(L, None)
    pos = positions(mask)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos[:, cols], cache=past,
                use_cache=True, logits_to_keep=1)
    return out.logits[:, -1], out.cache, mask, pos[:, -1:] + 1


def view_logits(model, prompt_ids_B_P: torch.Tensor, prompt_mask_B_P: torch.Tensor,
                resp_B_N: torch.Tensor, resp_mask_B_N: torch.Tensor,
                cache: PrefixCache | None = None) -> torch.Tensor:
    """Teacher-forced logits_B_N_V of `resp` after the prompt, as `rollout.response_logits`,
    with the prompts' shared prefix run once (from `cache` when given: frozen models only)."""
    L = shared_prefix_len(prompt_ids_B_P, prompt_mask_B_P) if is_hf(model) else 0
    if L < MIN_PREFIX:
        return response_logits(model, prompt_ids_B_P, prompt_mask_B_P, resp_B_N, resp_mask_B_N)
    prefix, suffix_ids, suffix_mask = split_prefix(prompt_ids_B_P, prompt_mask_B_P, L)
    kv = cache.get(model, prefix) if cache is not None else prefix_kv(model, prefix)
    B, N = resp_B_N.shape
    past = DynamicCache([(k.expand(B, -1, -1, -1), v.expand(B, -1, -1, -1)) for k, v in kv],
                        config=model.config)
    ids = torch.cat([suffix_ids, resp_B_N], dim=1)
    mask = torch.cat([torch.ones(B, L, dtype=suffix_mask.dtype, device=ids.device),
                      suffix_mask, resp_mask_B_N.to(suffix_mask.dtype)], dim=1)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask)[:, L:],
                cache=past, use_cache=True, logits_to_keep=N + 1)
    return out.logits[:, :N]
