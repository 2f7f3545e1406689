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

`stacked` reruns rows of the kept batch, a row as often as asked (several random head sets,
each ablating on its own copy of the cases, in one forward), and hands back the run's keys
and values for decoding to go on from. Checked once with the column cut: the rows reversed and
one repeated must give the rerun of the batch's rows in that order, or each set runs alone.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Any

import torch

from nca_interp.hooks import attached

__all__ = ["Rerun", "cache_reaches_attention", "first_layer", "window"]

_BLOCK = re.compile(r"^blocks\.(\d+)\.")


def first_layer(hooks) -> int | None:
    """The lowest block a list of (hook name, fn) touches; None where one is outside the
    blocks (the embedding: only the full forward runs it) or is a filter, not a name."""
    found = [_BLOCK.match(name) if isinstance(name, str) else None for name, _ in hooks]
    matches = [m for m in found if m is not None]
    if not found or len(matches) < len(found):
        return None
    return min(int(m.group(1)) for m in matches)


def _fresh(kwargs: dict) -> dict:
    """A block's kept keyword inputs for a rerun: no KV cache to append to."""
    out = {k: None if type(v).__name__.endswith("Cache") else v for k, v in kwargs.items()}
    if "use_cache" in out:
        out["use_cache"] = False
    return out


def _copied(value, memo: dict, rows: torch.Tensor | None = None, B: int = 0):
    """`value` with every tensor in it cloned (a tensor shared by several blocks, once); with
    `rows`, a tensor whose first axis is the batch's (`B` long, and more axes after it) is
    replaced by those rows instead (`Rerun.stacked`; checked once, `Rerun._keep_kv`)."""
    if torch.is_tensor(value):
        if id(value) not in memo:
            batch = rows is not None and value.dim() > 1 and value.shape[0] == B
            memo[id(value)] = value.index_select(0, rows) if batch and rows is not None \
                else value.clone()
        return memo[id(value)]
    if isinstance(value, (tuple, list)):
        return type(value)(_copied(v, memo, rows, B) for v in value)
    if isinstance(value, dict):
        return {k: _copied(v, memo, rows, B) for k, v in value.items()}
    return value


def window(config) -> float:
    """The fewest keys any layer of the model attends to (sliding-window or chunked attention;
    infinite where every layer sees the whole sequence)."""
    if config is None:
        return float("inf")
    config = getattr(config, "get_text_config", lambda: config)()
    named = [getattr(config, "attention_chunk_size", None)]
    if getattr(config, "use_sliding_window", True) is not False:  # Qwen2 names one unused
        named.append(getattr(config, "sliding_window", None))
    spans = [s for s in named if isinstance(s, int) and s > 0]
    return float(min(spans)) if spans else float("inf")


@contextmanager
def cache_reaches_attention(bridge):
    """transformers 5 hands each attention layer its KV cache as `cache`; TransformerLens 4.3's
    attention bridges look for `past_key_values` (or `layer_past`) and, finding neither, leave
    the cache empty, so a cached step would attend to itself alone. Name it both ways while
    the block runs (a hook on the modules, removed on exit)."""
    def alias(module, args, kwargs):
        if kwargs.get("cache") is not None and kwargs.get("past_key_values") is None:
            kwargs["past_key_values"] = kwargs["cache"]
        return args, kwargs

    handles = [m.register_forward_pre_hook(alias, with_kwargs=True)
               for m in bridge.modules() if hasattr(m, "_update_kv_cache")]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


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
        self.tol = tol
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # keys, values a block
        # whether a rerun of the columns from the first hooked one is exact (None: not tried)
        self.suffix: bool | None = None
        self.rows_ok = False  # whether it is exact on rows of the batch picked and repeated

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
        b = self.bridge
        memo: dict[int, Any] = {}
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

    # block keyword inputs with a column axis, and where it is (sliced for a suffix rerun)
    _COLUMNS = {"attention_mask": -2, "position_ids": -1, "cache_position": -1}

    @torch.no_grad()
    def _keep_kv(self) -> bool:
        """The clean run's keys and values of every block, kept once (one more forward, with
        a KV cache), and whether a rerun of a suffix of the columns from them equals the
        rerun of every column: checked here on the clean run from block 0 at half the width,
        so an architecture the suffix rerun does not fit runs every column instead."""
        from transformers import DynamicCache

        b = self.bridge
        config = getattr(getattr(b, "original_model", None), "config", None)
        T = self.ids.shape[1]
        if not self.exact or T < 2 or T > window(config):
            return False
        known = set(self._COLUMNS) | {"position_embeddings", "cache", "past_key_values",
                                      "use_cache"}
        args, kw = self.inputs[0]
        if len(args) > 1:  # positional inputs past the residual (GPT-2's cache): unknown
            return False
        if any(torch.is_tensor(v) and k not in known for k, v in kw.items()):
            return False  # a column-shaped input this rerun would not know to slice
        mask = kw.get("attention_mask")
        if mask is not None and (mask.dim() != 4 or mask.shape[-2] != T):
            return False  # a mask of keys alone: its rows are not the queries to cut
        cache = DynamicCache(config=config) if config is not None else DynamicCache()
        try:
            with attached(b), cache_reaches_attention(b):
                b.run_with_hooks(self.ids, attention_mask=self.mask, cache=cache, use_cache=True)
            layers: list[Any] = list(cache.layers)  # a layer without keys: AttributeError
            self.kv = [(layer.keys, layer.values) for layer in layers]
        except (AttributeError, RuntimeError, TypeError):  # a cache of another shape
            return False
        if len(self.kv) != len(b.blocks) or any(
                k is None or k.shape[-2] != T for k, _ in self.kv):
            return False
        want = self._from(0, ())
        # the rows reversed and one repeated: a rerun on rows of the batch (`stacked`) that
        # took an input's axis for the batch's, or mixed rows, differs here
        B = self.ids.shape[0]
        rows = torch.cat([torch.arange(B).flip(0), torch.zeros(1, dtype=torch.long)])
        for picked in (rows, None):
            try:
                got = self._tail(0, (), T // 2, rows=picked)
            except (AttributeError, IndexError, RuntimeError, TypeError, ValueError):
                continue  # a block that takes no cache so, or an input not picked by rows
            ref = want if picked is None else want[picked]
            if bool((got - ref).abs().max() <= self.tol * max(1.0, float(ref.abs().max()))):
                self.rows_ok = picked is not None
                return True
        return False

    def _tail(self, start: int, hooks, first: int, at: torch.Tensor | None = None,
              rows: torch.Tensor | None = None, kv_out: list | None = None) -> torch.Tensor:
        """`_from`, running only the columns from `first` on: the earlier columns' keys and
        values are the clean run's (a causal model's columns left of every change are
        unchanged in every block). `rows`: the run is of those rows of the batch (a row may
        repeat). `kv_out`: filled with every block's keys and values of every column of the
        run (blocks below `start`, the clean run's), for decoding to go on from it."""
        from transformers import DynamicCache

        b, kv = self.bridge, self.kv
        assert kv is not None  # kept by `_keep_kv` before a tail is run
        memo: dict[int, Any] = {}
        B = self.ids.shape[0]
        config = getattr(getattr(b, "original_model", None), "config", None)
        cache = DynamicCache(config=config) if config is not None else DynamicCache()

        def pick(x):
            return x if rows is None else x.index_select(0, rows)

        for li in range(start, len(b.blocks)):
            k, v = kv[li]
            cache.update(pick(k[..., :first, :]), pick(v[..., :first, :]), li)

        def cut(key, value):
            if key in self._COLUMNS and torch.is_tensor(value):
                ax = self._COLUMNS[key]
                return value.narrow(ax, first, value.shape[ax] - first)
            if key == "position_embeddings":
                return tuple(x[:, first:] for x in value)
            return value

        with attached(b), cache_reaches_attention(b):
            for name, fn in hooks:
                b.hook_dict[name].add_hook(fn, dir="fwd")
            args, kwargs = self.inputs[start]
            resid = pick((args[0] if args else kwargs["hidden_states"])[:, first:]).clone()
            for li in range(start, len(b.blocks)):
                args, kwargs = self.inputs[li]
                kwargs = {k: cut(k, _copied(v, memo, rows, B)) for k, v in kwargs.items()
                          if k != "hidden_states"}
                kwargs.update(cache=cache, use_cache=True)
                out = b.blocks[li](resid, *_copied(args[1:], memo, rows, B), **kwargs)
                resid = out[0] if isinstance(out, tuple) else out
            if kv_out is not None:
                layers: list[Any] = list(cache.layers)
                kv_out.extend([tuple(map(pick, kv[li])) for li in range(start)]
                              + [(layers[li].keys, layers[li].values)
                                 for li in range(start, len(b.blocks))])
            if at is None:
                return b.unembed(b.ln_final(resid[:, -1:]))[:, -1]
            return b.unembed(b.ln_final(_gather(resid, at - first)))

    def _gated(self, hooks) -> bool:
        """A hook the full forward would refuse or resolve by alias: leave it to that path."""
        b = self.bridge
        reason = getattr(b, "_gated_hook_reason", lambda name: None)
        return any(name not in b.hook_dict or reason(b.hook_dict[name].name or name) is not None
                   for name, _ in hooks)

    @torch.no_grad()
    def logits(self, hooks=(), first: int | None = None) -> torch.Tensor:
        """B V: the last position's logits with `hooks` ((name, fn) pairs) attached. `first`:
        the leftmost column any hook changes (a hook must then see, and change, only the
        columns from it on, counted from the right): the columns left of it are not rerun."""
        if not hooks:
            return self.clean.clone()
        start = first_layer(hooks)
        if not self.exact or start is None or self._gated(hooks):
            return self._full(hooks)
        if first and self._suffix_ok():
            return self._tail(start, hooks, first)
        return self._from(start, hooks)

    def _suffix_ok(self) -> bool:
        if self.suffix is None:
            self.suffix = self._keep_kv()
        return self.suffix

    @torch.no_grad()
    def logits_at(self, at_B_P: torch.Tensor, hooks=(), first: int | None = None
                  ) -> torch.Tensor:
        """B P V: the logits at positions `at_B_P` (column indices, per row) with `hooks`
        attached; only the blocks from the first hooked one rerun, and with `first` only the
        columns from it (every position in `at_B_P` at or right of it), as for `logits`."""
        start = first_layer(hooks) if hooks else len(self.inputs)
        if not self.exact or start is None or self._gated(hooks):
            return self._full(hooks, at_B_P)
        if start == len(self.inputs):  # no hook: the kept output of the last block
            start = len(self.inputs) - 1
        if first and int(at_B_P.min()) >= first and self._suffix_ok():
            return self._tail(start, hooks, first, at_B_P)
        return self._from(start, hooks, at_B_P)

    @torch.no_grad()
    def stacked(self, rows: torch.Tensor, at_R_P: torch.Tensor, hooks, first: int | None
                ) -> tuple[torch.Tensor, list] | None:
        """`logits_at` of a run over the rows `rows` of the batch (R: a row may repeat, so
        several head sets, each acting on its own rows, share one forward): R P V logits at
        `at_R_P`, and every block's keys and values of the run (R kvH T dh), from which greedy
        decoding can go on. None where the column cut does not fit (the caller runs one head
        set at a time)."""
        start = first_layer(hooks) if hooks else len(self.inputs) - 1
        if (not self.exact or start is None or not first or self._gated(hooks)
                or int(at_R_P.min()) < first or not self._suffix_ok() or not self.rows_ok):
            return None
        kv: list = []
        return self._tail(start, hooks, first, at_R_P, rows, kv), kv
