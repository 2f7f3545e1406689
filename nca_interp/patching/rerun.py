"""Rerun only the blocks an intervention can change.

A hook at layer l (its residual stream, MLP, head outputs or attention pattern) changes
nothing in blocks 0..l-1, and the patching metric reads only the last position's logits. So
`Rerun` keeps one clean forward of a batch block by block (each block's inputs: residual,
mask, position embeddings) and answers a hooked run by running blocks l.. from the kept
residual, then the final norm and unembedding of the last position alone. On a 30-layer model a
layer sweep costs about 0.4 of full forwards (half the blocks on average, and no unembedding
of every position, a fifth of SmolLM2's forward).

TransformerLens 4.3's `run_with_hooks(..., start_at_layer=k)` is not this: by its docstring
blocks 0..k-1 "still execute internally", so it saves nothing.

Where the rerun may not equal the full forward, every call runs the full forward instead: a
model whose rerun from block 0 differs from its clean forward, or whose logits differ once
pushed to a large scale (a transform after the unembedding: Gemma 2's soft-capping, Cohere's
logit scale, which small logits hide), or that has no final norm and unembedding to rerun (OPT);
and a call whose hooks TransformerLens gates behind a flag (`attn.hook_result` and the like:
the full forward refuses them, which says what to set) or names no block (`hook_embed`, a
filter function). The kept inputs are copied for every call, so an in-place hook (on the
rotary `hook_cos`, say) cannot reach a later call.
"""

from __future__ import annotations

import re

import torch

from nca_interp.hooks import attached

__all__ = ["Rerun", "first_layer"]

_BLOCK = re.compile(r"^blocks\.(\d+)\.")


def first_layer(hooks) -> int | None:
    """The lowest block a list of (hook name, fn) touches; None where one is outside the
    blocks (the embedding: only the full forward runs it) or is a filter, not a name."""
    found = [_BLOCK.match(name) if isinstance(name, str) else None for name, _ in hooks]
    if not found or not all(found):
        return None
    return min(int(m.group(1)) for m in found)


def _fresh(kwargs: dict) -> dict:
    """A block's kept keyword inputs for a rerun: no KV cache to append to."""
    out = {k: None if type(v).__name__.endswith("Cache") else v for k, v in kwargs.items()}
    if "use_cache" in out:
        out["use_cache"] = False
    return out


def _copied(value, memo: dict):
    """`value` with every tensor in it cloned (a tensor shared by several blocks, once)."""
    if torch.is_tensor(value):
        if id(value) not in memo:
            memo[id(value)] = value.clone()
        return memo[id(value)]
    if isinstance(value, (tuple, list)):
        return type(value)(_copied(v, memo) for v in value)
    if isinstance(value, dict):
        return {k: _copied(v, memo) for k, v in value.items()}
    return value


def _gather(x_B_T_D: torch.Tensor, at_B_P: torch.Tensor) -> torch.Tensor:
    """B P D: the rows of `x_B_T_D` at the columns `at_B_P`."""
    return x_B_T_D.gather(1, at_B_P[..., None].expand(-1, -1, x_B_T_D.shape[-1]))


class Rerun:
    """The clean run of one batch (`ids`, `mask`: B T) kept block by block; `logits(hooks)`
    is the last position's logits (B V) of the run with `hooks`, rerunning only the blocks
    from the first one a hook touches."""

    @torch.no_grad()
    def __init__(self, bridge, ids: torch.Tensor, mask: torch.Tensor, tol: float = 1e-5):
        self.bridge, self.ids, self.mask = bridge, ids, mask
        self.inputs: list[tuple[tuple, dict]] = []

        def keep(module, args, kwargs):
            self.inputs.append((args, _fresh(kwargs)))

        handles = [b.register_forward_pre_hook(keep, with_kwargs=True) for b in bridge.blocks]
        try:
            self.clean = self._full(())
        finally:
            for h in handles:
                h.remove()
        self.exact = self._check(tol)

    def _check(self, tol: float) -> bool:
        b = self.bridge
        if len(self.inputs) != len(b.blocks) or not all(
                hasattr(b, m) and f"{m}.hook_in" in b.hook_dict for m in ("ln_final", "unembed")):
            return False

        def close(a, want):
            return bool((a - want).abs().max() <= tol * max(1.0, float(want.abs().max())))

        if not close(self._from(0, ()), self.clean):
            return False
        # logits pushed to |200|: a transform after the unembedding shows there
        k = 200.0 / max(float(self.clean.abs().max()), 1e-6)
        big = [("unembed.hook_in", lambda act, hook: act * k)]
        return close(self._from(len(b.blocks) - 1, big), self._full(big))

    def _full(self, hooks, at: torch.Tensor | None = None) -> torch.Tensor:
        with attached(self.bridge):
            out = self.bridge.run_with_hooks(self.ids, attention_mask=self.mask,
                                             fwd_hooks=list(hooks))
        return out[:, -1] if at is None else _gather(out, at)

    def _from(self, start: int, hooks, at: torch.Tensor | None = None) -> torch.Tensor:
        b, memo = self.bridge, {}
        with attached(b):
            for name, fn in hooks:
                b.hook_dict[name].add_hook(fn, dir="fwd")
            args, kwargs = self.inputs[start]
            resid = (args[0] if args else kwargs["hidden_states"]).clone()
            for li in range(start, len(b.blocks)):
                args, kwargs = self.inputs[li]
                kwargs = {k: _copied(v, memo) for k, v in kwargs.items() if k != "hidden_states"}
                out = b.blocks[li](resid, *_copied(args[1:], memo), **kwargs)
                resid = out[0] if isinstance(out, tuple) else out
            if at is None:
                return b.unembed(b.ln_final(resid[:, -1:]))[:, -1]
            return b.unembed(b.ln_final(_gather(resid, at)))

    def _gated(self, hooks) -> bool:
        """A hook the full forward would refuse or resolve by alias: leave it to that path."""
        b = self.bridge
        reason = getattr(b, "_gated_hook_reason", lambda name: None)
        return any(name not in b.hook_dict or reason(b.hook_dict[name].name or name) is not None
                   for name, _ in hooks)

    @torch.no_grad()
    def logits(self, hooks=()) -> torch.Tensor:
        """B V: the last position's logits with `hooks` ((name, fn) pairs) attached."""
        if not hooks:
            return self.clean.clone()
        start = first_layer(hooks)
        if not self.exact or start is None or self._gated(hooks):
            return self._full(hooks)
        return self._from(start, hooks)

    @torch.no_grad()
    def logits_at(self, at_B_P: torch.Tensor, hooks=()) -> torch.Tensor:
        """B P V: the logits at positions `at_B_P` (column indices, per row) with `hooks`
        attached; only the blocks from the first hooked one rerun, as for `logits`."""
        start = first_layer(hooks) if hooks else len(self.inputs)
        if not self.exact or start is None or self._gated(hooks):
            return self._full(hooks, at_B_P)
        if start == len(self.inputs):  # no hook: the kept output of the last block
            start = len(self.inputs) - 1
        return self._from(start, hooks, at_B_P)
