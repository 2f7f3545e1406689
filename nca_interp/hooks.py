"""Hidden states through TransformerLens 4 (`TransformerBridge`), booted offline from a folder.

Pitfalls of TransformerLens 4 handled here: absolute paths only; the tokenizer is
loaded from the folder at boot; masks are always passed (left padding without one is wrong);
hooks are removed in `finally`, so none outlives a call.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch

from nca_interp.checkpoint import load_checkpoint
from nca_interp.errors import UsageError
from nca_interp.names import EMBED_HOOK, pattern_hook, resid_hook
from nca_interp.tokenizer import check_tokenizer

__all__ = ["as_bridge", "attached", "attached_hooks", "boot_bridge", "capture"]


def boot_bridge(path: str | Path, device: str = "cpu", dtype=None, loaded=None):
    """A TransformerBridge over the checkpoint at `path`, loaded once and strictly by
    `load_checkpoint` (verified, every tensor present and finite) and wrapped in place: the
    bridge never re-reads the folder, so nothing is hashed or loaded twice. `loaded`: the
    (model, tokenizer) `load_checkpoint(path)` already returned (wrapped in place: use the
    plain model before, the bridge after)."""
    from transformer_lens import TransformerBridge

    model, tok = loaded if loaded is not None else load_checkpoint(path, device=device,
                                                                   dtype=dtype)
    tok.init_kwargs.setdefault("name_or_path", str(Path(path).resolve()))
    bridge = TransformerBridge.boot_transformers(str(Path(path).resolve()), hf_model=model,
                                                 tokenizer=tok, device=device)
    bridge.eval()
    return bridge


def as_bridge(model, tok=None):
    """A TransformerBridge over `model`: a bridge as it is; a transformers causal LM wrapped on
    a copy (wrapping rewrites a model in place: its parameter names, its attention), with a
    copy of `tok`."""
    import copy

    from transformer_lens import TransformerBridge
    from transformers import PreTrainedModel

    if isinstance(model, TransformerBridge):
        return model
    if not isinstance(model, PreTrainedModel):
        raise UsageError(f"an analysis on a model in memory takes a transformers causal LM or a "
                         f"TransformerBridge, not {type(model).__name__}")
    if tok is None:
        raise UsageError("an analysis on a transformers model needs its tokenizer: pass tok=")
    check_tokenizer(tok)
    tok = copy.deepcopy(tok)
    # TransformerLens reloads a tokenizer without a BOS from its name_or_path (the hub, from
    # memory); ours encode with add_special_tokens=False, so the flag changes no id here
    tok.init_kwargs.setdefault("name_or_path", "in-memory")
    tok.init_kwargs["add_bos_token"] = True
    device = next(model.parameters()).device
    bridge = TransformerBridge.boot_transformers("in-memory", hf_model=copy.deepcopy(model),
                                                 tokenizer=tok, device=str(device))
    bridge.eval()
    return bridge


@contextmanager
def attached(bridge):
    """The one place hooks are cleaned up: whatever a block attaches to `bridge` (hooks passed
    to `run_with_hooks` / `run_with_cache`, or added by hand) is removed when it exits, also
    on an exception, so no hook outlives the block."""
    try:
        yield bridge
    finally:
        bridge.reset_hooks()


def n_layers(bridge) -> int:
    return int(bridge.cfg.n_layers)


def attached_hooks(bridge) -> int:
    """Number of forward/backward hooks currently attached to the bridge's hook points."""
    return sum(len(hp._forward_hooks) + len(hp._backward_hooks)
               for hp in bridge.hook_dict.values())


@torch.no_grad()
def capture(bridge, ids_B_T: torch.Tensor, mask_B_T: torch.Tensor,
            patterns: bool = False) -> dict[str, torch.Tensor]:
    """`resid`: (layer+1) B T d_model, the embedding then every `blocks.{i}.hook_resid_post`
    (layer-first, as TransformerLens stacks them); `pattern`: layer B head T T if asked."""
    L = n_layers(bridge)
    names = [EMBED_HOOK] + [resid_hook(i) for i in range(L)]
    if patterns:
        names += [pattern_hook(i) for i in range(L)]
    with attached(bridge):
        dev = next(bridge.parameters()).device
        _, cache = bridge.run_with_cache(ids_B_T.to(dev), attention_mask=mask_B_T.to(dev),
                                         names_filter=names)
    out = {"resid": torch.stack([cache[n].float().cpu() for n in names[: L + 1]])}
    if patterns:
        out["pattern"] = torch.stack([cache[pattern_hook(i)].float().cpu() for i in range(L)])
    return out
