"""A decoding step for Llama / Qwen2 / Qwen3 checkpoints without the per-token overhead of the
HF forward: preallocated key/value buffers (no cache growth by concatenation), one attention
mask written in place, rotary tables computed once per step, the LM head on the last position.

The prompt is prefilled by the HF model itself (its keys and values copied into the buffers);
each new token then runs the model's own modules (norms, projections, MLP, LM head) in the HF
order, with the attention of `transformers`' SDPA path, so tokens equal HF `generate`'s
(tested: identical greedy tokens on every architecture and on SmolLM2). At batch 8 a decoding
step is bound by reading the weights (bench/results/profile_step.txt); what this removes is
everything else (HF's cache `cat`, mask building, module dispatch).

`Decoder.supports(model)` says whether a model has this path (plain HF Llama / Qwen2 / Qwen3
without sliding windows); `rollout.sample` falls back to the HF forward otherwise.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["Decoder"]

ARCHS = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Decoder:
    """Key/value buffers for a batch of sequences of up to `capacity` tokens: the prompt's,
    filled when the decoder is made (`prefix.prefill`), then one token per `step`."""

    @staticmethod
    def supports(model) -> bool:
        cfg = getattr(model, "config", None)
        if type(model).__name__ not in ARCHS or cfg is None:
            return False
        if getattr(cfg, "use_sliding_window", False) or any(
                t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
            return False
        return getattr(cfg, "_attn_implementation", "sdpa") in ("sdpa", "eager")

    def __init__(self, model, prompt_ids_B_P: torch.Tensor, prompt_mask_B_P: torch.Tensor,
                 capacity: int):
        """Prefill the prompt with the HF forward (its shared prefix once); `capacity` is the
        prompt's length plus the tokens to come. See `logits`."""
        from nca_interp.prefix import prefill

        self.model = model
        self.body = model.model
        B = prompt_ids_B_P.shape[0]
        self.logits, cache, mask, self.next_pos = prefill(model, prompt_ids_B_P, prompt_mask_B_P)
        P = mask.shape[1]
        first = cache.layers[0].keys
        H, D = first.shape[1], first.shape[3]
        self.k = [first.new_empty(B, H, capacity, D) for _ in cache.layers]
        self.v = [first.new_empty(B, H, capacity, D) for _ in cache.layers]
        for i, layer in enumerate(cache.layers):
            self.k[i][:, :, :P] = layer.keys
            self.v[i][:, :, :P] = layer.values
        self.mask = torch.zeros(B, 1, 1, capacity, dtype=torch.bool, device=first.device)
        self.mask[:, 0, 0, :P] = mask.bool()
        self.length = P

    @torch.no_grad()
    def step(self, tok_B: torch.Tensor) -> torch.Tensor:
        """Append one token per row; the next-token logits_B_V."""
        t = self.length
        self.mask[:, 0, 0, t] = True
        h = self.body.embed_tokens(tok_B[:, None])
        cos, sin = self.body.rotary_emb(h, self.next_pos)
        cos, sin = cos[:, None], sin[:, None]
        mask = self.mask[..., : t + 1]
        for i, layer in enumerate(self.body.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            shape = (x.shape[0], 1, -1, attn.head_dim)
            q, k, v = (attn.q_proj(x).view(shape), attn.k_proj(x).view(shape),
                       attn.v_proj(x).view(shape))
            if hasattr(attn, "q_norm"):
                q, k = attn.q_norm(q), attn.k_norm(k)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            self.k[i][:, :, t: t + 1] = k
            self.v[i][:, :, t: t + 1] = v
            o = F.scaled_dot_product_attention(
                q, self.k[i][:, :, : t + 1], self.v[i][:, :, : t + 1], attn_mask=mask,
                scale=attn.scaling, enable_gqa=q.shape[1] != k.shape[1])
            h = h + attn.o_proj(o.transpose(1, 2).reshape(x.shape[0], 1, -1))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        self.length = t + 1
        self.next_pos = self.next_pos + 1
        self.logits = self.model.lm_head(self.body.norm(h))[:, -1]
        return self.logits
