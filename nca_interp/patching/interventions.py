"""The interventions, each a batched forward of the bridge over all cases with hooks.

  resid     the residual stream after each layer (`blocks.{li}.hook_resid_post`), patched at the
            aligned positions of a group (all, x, response prefix, the deciding position) and,
            in the full scope, at every single aligned position (the layer x position heatmap)
  head      (full scope) each head's output (`blocks.{li}.attn.hook_z`) at all aligned positions
  mlp       each MLP's output (`blocks.{li}.hook_mlp_out`) at all aligned positions
  ablate    attention *to* the context tokens removed for some heads (the pattern's context
            columns zeroed and each row renormalised)
  lens      per layer, final norm + unembedding of the residual at the deciding position in both
            views
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from einops import reduce

from nca_interp.hooks import attached
from nca_interp.names import EMBED_HOOK, head_z_hook, mlp_out_hook, pattern_hook, resid_hook
from nca_interp.patching.cases import Cases
from nca_interp.patching.rerun import Rerun, cache_reaches_attention, window
from nca_interp.progress import bar

__all__ = ["GROUPS", "SCOPES", "ablate_context_hook", "ablation", "ablation_effect",
           "ablation_first", "ablation_hooks", "cache_of", "greedy", "last_logits", "logit_diff",
           "logit_lens", "normalised", "patch_hook", "pattern_edits_reach_logits",
           "row_ablation_hooks", "sweep", "view_lds"]

GROUPS = ("all", "x", "response", "decide")
SCOPES = ("full", "groups")


@torch.no_grad()
def last_logits(bridge, ids, mask, hooks=()) -> torch.Tensor:
    with attached(bridge):
        return bridge.run_with_hooks(ids, attention_mask=mask, fwd_hooks=list(hooks))[:, -1]


@torch.no_grad()
def greedy(bridge, ids: torch.Tensor, mask: torch.Tensor, max_new: int, stop: list[int],
           pad: int, hooks: list | None = None, tol: float = 1e-4, kv_cache: bool = True
           ) -> list[list[int]]:
    """Greedy responses through the bridge (with `hooks` active at every step), eos included.

    Decodes with a KV cache: each step runs the new token alone, attending to the kept keys and
    values. That equals rerunning the whole sequence where a hook changes a position only from
    the columns at or before it (the attention-pattern ablations: a query row, its key columns
    counted from the left). The first step is checked against the full forward of the same
    sequence with the same hooks; where it differs by more than `tol` of the largest logit or
    fails (a hook indexing columns from the right, an attention the cache does not reach),
    every step reruns the whole sequence (as `kv_cache=False` does throughout). The last
    cached step is checked the same way, so a hook whose cached effect shows only later (one
    that edits earlier positions once the sequence has grown) is decoded again without the
    cache: one more full forward per call, the answers always the plain loop's. So does a
    sliding-window model whose prompt and response may outgrow its window: its cache then
    keeps only the window's keys, the pattern's columns no longer count from the left, and
    the first step, still inside the window, cannot show it."""
    from transformers import DynamicCache

    hooks = list(hooks or [])
    start = ids, mask
    out: list[list[int]] = [[] for _ in range(len(ids))]
    done = torch.zeros(len(ids), dtype=torch.bool)
    stops = torch.tensor(stop)
    with attached(bridge), cache_reaches_attention(bridge):
        def run(seq, **kw):
            return bridge.run_with_hooks(seq, attention_mask=mask, fwd_hooks=hooks, **kw)[:, -1]

        config = getattr(getattr(bridge, "original_model", None), "config", None)
        cache = DynamicCache(config=config) if config is not None else DynamicCache()
        cached = kv_cache and ids.shape[1] + max_new <= window(config)
        logits = run(ids, cache=cache, use_cache=True) if cached else run(ids)
        unchecked = False  # whether `logits` came from a cached step no full forward checked
        for step in range(max_new):
            tok = logits.argmax(-1)
            for i in range(len(ids)):
                if not done[i]:
                    out[i].append(int(tok[i]))
            done |= torch.isin(tok, stops)
            if bool(done.all()) or step == max_new - 1:
                break
            nxt = torch.where(done, torch.full_like(tok, pad), tok)[:, None]
            ids = torch.cat([ids, nxt], 1)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            if not cached:
                logits = run(ids)
                continue
            if step > 0:
                logits, unchecked = run(nxt, cache=cache, use_cache=True), True
                continue
            full = run(ids)
            try:
                logits = run(nxt, cache=cache, use_cache=True)
            except RuntimeError:  # a hook that cannot take one column (shapes from the right)
                cached, logits = False, full
                continue
            if _differ(logits, full, tol):
                cached, logits = False, full
        redo = cached and unchecked and _differ(logits, run(ids), tol)
    if redo:  # the cache drifted after the first step: decode again the plain way
        return greedy(bridge, *start, max_new, stop, pad, hooks, tol, kv_cache=False)
    return out


def _differ(logits: torch.Tensor, full: torch.Tensor, tol: float) -> bool:
    """Whether cached-step logits differ from the full forward's by more than `tol` of its
    largest logit."""
    return bool((logits - full).abs().max() > tol * max(1.0, float(full.abs().max())))


@torch.no_grad()
def pattern_edits_reach_logits(bridge) -> bool:
    """Does editing `attn.hook_pattern` change the model's output? Every layer's pattern zeroed
    on a short sequence: a model whose attention reads the hooked pattern changes its logits;
    one whose attention computes its own (OPT through TransformerLens 4.3's bridge) does not,
    and there an ablation of heads' attention would measure exactly nothing."""
    L = bridge.cfg.n_layers
    ids = (torch.arange(1, 9) % bridge.cfg.d_vocab)[None]
    mask = torch.ones_like(ids)
    zero = [(pattern_hook(li), lambda p, hook: torch.zeros_like(p)) for li in range(L)]
    return not torch.equal(last_logits(bridge, ids, mask), last_logits(bridge, ids, mask, zero))


def logit_diff(logits_B_V: torch.Tensor, cases: Cases) -> torch.Tensor:
    return logits_B_V.gather(1, cases.good[:, None])[:, 0] - \
        logits_B_V.gather(1, cases.bad[:, None])[:, 0]


def patch_hook(source: torch.Tensor, where_B_W: torch.Tensor, head: int | None = None):
    """A hook that writes `source` (activations of the other view, width W) into the last W
    columns of the running view where `where_B_W` is set (optionally one head of hook_z)."""
    def hook(act, hook):
        W = min(source.shape[1], act.shape[1])  # a rerun of the last columns alone is narrower
        tail = act[:, -W:] if head is None else act[:, -W:, head]
        src = source[:, -W:] if head is None else source[:, -W:, head]
        where = where_B_W[:, -W:]
        m = where.reshape(*where.shape, *([1] * (src.dim() - 2)))
        tail.copy_(torch.where(m, src, tail))
        return act

    return hook


def ablate_context_hook(ctx_B_K: torch.Tensor, heads: list[int] | torch.Tensor):
    """Remove attention to the context columns for `heads`, renormalising each query's row
    (rows that only see context keep their pattern). `heads`: head indices, or a B H mask of
    each row's own heads (several head sets stacked along the batch, `row_ablation_hooks`)."""
    def hook(pattern, hook):
        K = pattern.shape[-1]
        ctx = torch.nn.functional.pad(ctx_B_K, (0, K - ctx_B_K.shape[1]))[:, None, None, :]
        if torch.is_tensor(heads):
            on = heads[:, :, None, None]
        else:
            on = torch.zeros(pattern.shape[1], dtype=torch.bool)
            on[list(heads)] = True
            on = on[None, :, None, None]
        kept = pattern * ~ctx
        total = kept.sum(-1, keepdim=True)
        return torch.where(on & (total > 0), kept / total.clamp(min=1e-12), pattern)

    return hook


def ablation_hooks(ctx_B_K: torch.Tensor, heads: list[tuple[int, int]]) -> list:
    """One pattern hook per layer that removes the context reading of `heads` (layer, head)."""
    by_layer: dict[int, list[int]] = {}
    for li, h in heads:
        by_layer.setdefault(li, []).append(h)
    return [(pattern_hook(li), ablate_context_hook(ctx_B_K, hs)) for li, hs in by_layer.items()]


def row_ablation_hooks(ctx_R_K: torch.Tensor, heads_R: list[list[tuple[int, int]]],
                       n_heads: int) -> list:
    """`ablation_hooks` with a head set per row: row r removes the context reading of
    `heads_R[r]` alone (random-head draws stacked along the batch, one forward for all)."""
    by_layer: dict[int, torch.Tensor] = {}
    for r, heads in enumerate(heads_R):
        for li, h in heads:
            by_layer.setdefault(li, torch.zeros(len(heads_R), n_heads, dtype=torch.bool))[r, h] \
                = True
    return [(pattern_hook(li), ablate_context_hook(ctx_R_K, m))
            for li, m in sorted(by_layer.items())]


def normalised(patched: torch.Tensor, start: torch.Tensor, end: torch.Tensor) -> np.ndarray:
    """(patched - start) / (end - start) per case; NaN where the two runs barely differ."""
    den = end - start
    out = (patched - start) / den
    return torch.where(den.abs() > 1e-2, out, torch.nan).numpy()


@torch.no_grad()
def cache_of(bridge, ids, mask, names: list[str]) -> dict[str, torch.Tensor]:
    with attached(bridge):
        _, cache = bridge.run_with_cache(ids, attention_mask=mask, names_filter=names)
    return {n: cache[n].detach().clone() for n in names}


def view_lds(bridge, cases: Cases) -> tuple[torch.Tensor, torch.Tensor]:
    """LD of the no-context (source) and the context (destination) view, unpatched."""
    return (logit_diff(last_logits(bridge, cases.src_ids, cases.src_mask), cases),
            logit_diff(last_logits(bridge, cases.dst_ids, cases.dst_mask), cases))


def sweep(bridge, cases: Cases, direction: str, stats: dict, scope: str = "full",
          only: dict[str, list[int]] | None = None) -> dict:
    """Patch resid (per layer x group, and x offset in the full scope), heads (full scope) and
    MLPs in one direction: forward = no-context activations into the context run. `only`:
    for a family of `CONFIRMED` (resid_offsets, heads), the nodes (flat indices, layer first)
    patched; the others are NaN (attribution patching's candidates, `patching.attribution`)."""
    L, H = bridge.cfg.n_layers, bridge.cfg.n_heads
    full = scope == "full"
    names = [resid_hook(li) for li in range(L)] + [mlp_out_hook(li)
                                                   for li in range(L)]
    if full:
        names += [head_z_hook(li) for li in range(L)]
    fwd = direction == "forward"
    src, dst = (cases.src_ids, cases.src_mask), (cases.dst_ids, cases.dst_mask)
    run = Rerun(bridge, *(dst if fwd else src))
    other = cache_of(bridge, *(src if fwd else dst), names)
    ld_src, ld_dst = view_lds(bridge, cases)
    start, end = (ld_dst, ld_src) if fwd else (ld_src, ld_dst)
    W0 = cases.src_ids.shape[1]
    # the aligned columns: the last A of both runs (all of x's run when [c, x] is the longer;
    # a chat model's default system message replaced by a shorter c makes x's the longer)
    A = min(W0, cases.dst_ids.shape[1])

    K = min(W0, 32)  # the full scope's last K aligned columns (offsets from the deciding one)

    def column(k):
        where = torch.zeros_like(cases.groups["all"])
        where[:, W0 - k] = cases.groups["all"][:, W0 - k]
        return where

    # the nodes of each family, layer first: (hook name, aligned columns patched, head)
    nodes: dict[str, list[tuple[str, int, int | None]]] = {
        "resid_offsets": [(resid_hook(li), k, None) for li in range(L)
                          for k in range(1, K + 1)],
        "heads": [(head_z_hook(li), 0, h) for li in range(L) for h in range(H)]} \
        if full else {}
    picked = {fam: sorted((only or {}).get(fam, range(len(ns)))) for fam, ns in nodes.items()}
    total = L * (len(GROUPS) + 1) + sum(map(len, picked.values()))
    # minutes at 30 layers: what it does and the time left, on stderr (progress.bar)
    ticks = bar(None, f"patching: {direction} sweep ({scope}, {len(cases)} cases)", total,
                unit="fwd")

    Wr = run.ids.shape[1]

    def effect(name, where, head=None):
        src, at = other[name][:, -A:], where[:, -A:]
        stats["forwards"] += 1
        cols = torch.nonzero(at.any(0))
        first = Wr - A + int(cols[0]) if len(cols) else None  # nothing left of it changes
        ld = logit_diff(run.logits([(name, patch_hook(src, at, head))], first), cases)
        ticks.update(1)
        return normalised(ld, start, end)

    out: dict[str, Any] = {"ld_src": ld_src.tolist(), "ld_dst": ld_dst.tolist()}
    out["resid_groups"] = {g: np.stack([effect(resid_hook(li), cases.groups[g])
                                        for li in range(L)], 1) for g in GROUPS}
    out["mlp"] = np.stack([effect(mlp_out_hook(li), cases.groups["all"])
                           for li in range(L)], 1)
    for fam, ns in nodes.items():
        got = np.full((len(cases), len(ns)), np.nan)
        for i in picked[fam]:
            name, k, head = ns[i]
            got[:, i] = effect(name, column(k) if k else cases.groups["all"], head)
        out[fam] = got.reshape(len(cases), L, -1)  # N L K, N L H
    ticks.close()
    return out


def ablation_first(ctx_B_K: torch.Tensor, mask_B_K: torch.Tensor) -> int | None:
    """The leftmost column whose attention removing the reading of `ctx_B_K` can change (its
    query row sees a context column and another real one: `ablate_context_hook` leaves a row
    that sees only context as it was); None where no row can change. The columns left of it
    need no rerun (`Rerun.logits(hooks, first)`)."""
    real = mask_B_K.bool()
    ctx = torch.nn.functional.pad(ctx_B_K, (0, real.shape[1] - ctx_B_K.shape[1])).bool() & real
    both = (ctx.cumsum(1) > 0) & ((real & ~ctx).cumsum(1) > 0)
    cols = torch.nonzero(both.any(0))
    return int(cols[0]) if len(cols) else None


def ablation_effect(bridge, cases: Cases, heads: list[tuple[int, int]],
                    lds: tuple[torch.Tensor, torch.Tensor] | None = None,
                    dst: Rerun | None = None) -> np.ndarray:
    """Per case: the normalised effect of removing the context reading of `heads` together
    (0 = the context run unchanged, 1 = the no-context run's LD). `dst`: the context view's
    kept run, where many calls share it."""
    ld_src, ld_dst = lds if lds is not None else view_lds(bridge, cases)
    hooks = ablation_hooks(cases.ctx_B_W1, heads)
    first = ablation_first(cases.ctx_B_W1, cases.dst_mask)
    logits = dst.logits(hooks, first) if dst is not None else last_logits(
        bridge, cases.dst_ids, cases.dst_mask, hooks)
    return normalised(logit_diff(logits, cases), ld_dst, ld_src)


def ablation(bridge, cases: Cases, heads: list[tuple[int, int]] | None = None,
             stats: dict | None = None) -> np.ndarray:
    """N L H: normalised effect of removing each head's attention to the context; only of
    `heads` where given (the others NaN: attribution patching's candidates)."""
    L, H = bridge.cfg.n_layers, bridge.cfg.n_heads
    lds = view_lds(bridge, cases)
    dst = Rerun(bridge, cases.dst_ids, cases.dst_mask)
    out = np.full((len(cases), L, H), np.nan)
    heads = [(li, h) for li in range(L) for h in range(H)] if heads is None else heads
    if stats is not None:
        stats["ablation_forwards"] = stats.get("ablation_forwards", 0) + len(heads)
    for li, h in bar(heads,
                     f"patching: each head's reading of c removed ({len(cases)} cases)",
                     unit="head"):
        out[:, li, h] = ablation_effect(bridge, cases, [(li, h)], lds, dst)
    return out


def logit_lens(bridge, cases: Cases) -> dict:
    """Per layer (embedding first), decoded distributions of both views at the deciding
    position: KL(no-context || context) and the rank of the right answer token."""
    L = bridge.cfg.n_layers
    names = [EMBED_HOOK] + [resid_hook(li) for li in range(L)]
    views = []
    for ids, mask in ((cases.src_ids, cases.src_mask), (cases.dst_ids, cases.dst_mask)):
        c = cache_of(bridge, ids, mask, names)
        resid_L_B_D = torch.stack([c[n][:, -1] for n in names])
        with torch.no_grad():
            views.append(torch.log_softmax(bridge.unembed(bridge.ln_final(resid_L_B_D)), -1))
    p, q = views  # L B V log-probabilities
    kl = reduce(p.exp() * (p - q), "l b v -> b l", "sum")
    good = cases.good[None, :, None]

    def rank(lp):
        above = lp > lp.gather(-1, good.expand(lp.shape[0], -1, 1))
        return reduce(above.long(), "l b v -> b l", "sum")

    return {"kl": kl.numpy(), "rank_no_c": rank(p).numpy(), "rank_c": rank(q).numpy()}
