"""Attribution patching: a first-order estimate of every node's patching effect at once.

For a node with activation a (a layer's residual stream at some aligned positions, one head's
output `hook_z`, an MLP's output) patching the other view's a_source into the running view
changes the logit difference LD by about

    (a_source - a_target) . dLD/da        (the gradient taken on the target run)

(Nanda 2023, "Attribution patching"; AtP in Kramar et al. 2024). Every node of a direction
costs one forward of the source view (its activations), one forward and one backward of the
target view, where the exact sweep runs one patched forward per node. The estimate is the
exact effect's first-order Taylor term: exact for a metric linear in the node, close where the
patched difference is small, and it can miss where the metric saturates or where paths from
the node cancel. So it only ranks: `sweep` exact-patches the top candidates and a random
sample of the rest (a miss shows as a sampled node that beats a candidate), and every verdict
and head table reads exact effects only.

Heads' reading of c (the head ablation: a head's attention to the context columns removed and
its rows renormalised, `interventions.ablate_context_hook`) is not estimated through the
softmax: as AtP* does for attention saturation, the edited pattern is computed exactly (the
renormalised rows of every head) and only the step from pattern to LD is linear:
(pattern_ablated - pattern) . dLD/dpattern.

AtP*'s second remedy, GradDrop (one more backward per layer with that layer's gradient to the
residual stream dropped, to expose paths whose contributions cancel), is not run: it costs L
backwards per direction and the random sample of exact patches beside the candidates already
shows a node the estimate ranked too low, whatever the cause, in the report's `agreement`.

Positions and columns are the exact sweep's: the aligned columns of `cases.groups` in the last
A columns of both views (`interventions.sweep`), so the two methods patch the same nodes.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from nca_interp.hooks import attached
from nca_interp.names import head_z_hook, mlp_out_hook, pattern_hook, resid_hook
from nca_interp.patching.cases import Cases
from nca_interp.patching.interventions import (
    GROUPS,
    ablate_context_hook,
    cache_of,
    logit_diff,
    normalised,
    sweep,
    view_lds,
)

__all__ = ["BY", "CONFIRMED", "METHODS", "agreement", "attribute", "choose", "confirmed_sweep",
           "gradients", "head_candidates", "means", "spearman"]

METHODS = ("attribution", "exact")
# the families attribution ranks and exact patching confirms on its candidates; the residual
# stream by position group and the MLPs (L forwards each) are always patched in full
CONFIRMED = ("resid_offsets", "heads")
BY = {"exact": "exact patching of every node",
      "attribution": "exact patching of attribution's top candidates and a random check of the "
                     "rest (NaN: not patched)"}

OFFSETS = 32  # the full scope's last aligned columns, as `interventions.sweep` patches them


def gradients(bridge, ids, mask, names: list[str], cases: Cases
              ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The activations at `names` of one run and dLD/d(each), LD summed over the batch (cases
    are independent rows, so each row's gradient is its own case's): one forward, one backward.
    A name the LD does not reach (a pattern the attention does not read) gets zeros."""
    acts: dict[str, torch.Tensor] = {}

    def keep(name):
        def hook(act, hook):
            acts[name] = act
            return act
        return hook

    with torch.enable_grad(), attached(bridge):
        logits = bridge.run_with_hooks(ids, attention_mask=mask,
                                       fwd_hooks=[(n, keep(n)) for n in names])[:, -1]
        got = torch.autograd.grad(logit_diff(logits, cases).sum(), [acts[n] for n in names],
                                  allow_unused=True)
    grads = {n: torch.zeros_like(acts[n]) if g is None else g.detach()
             for n, g in zip(names, got)}
    return {n: a.detach() for n, a in acts.items()}, grads


def attribute(bridge, cases: Cases, direction: str, stats: dict, scope: str = "full",
              ablation: bool = True) -> dict:
    """Per case, the attribution estimate of each node `interventions.sweep` patches, in its
    normalised units (0 = the running view unchanged, 1 = the other view's LD) and shapes:
    resid_groups {group: N L}, mlp N L, and in the full scope resid_offsets N L K and heads
    N L H. In the forward direction (the context run is the target) with `ablation`, also
    `ablation` N L H: each head's reading of c removed (the pattern edited exactly, linear
    after it). Counts its forwards and backwards in `stats`."""
    L, H = bridge.cfg.n_layers, bridge.cfg.n_heads
    full = scope == "full"
    names = [resid_hook(li) for li in range(L)] + [mlp_out_hook(li) for li in range(L)]
    if full:
        names += [head_z_hook(li) for li in range(L)]
    fwd = direction == "forward"
    src, dst = (cases.src_ids, cases.src_mask), (cases.dst_ids, cases.dst_mask)
    patterns = [pattern_hook(li) for li in range(L)] if fwd and ablation else []
    other = cache_of(bridge, *(src if fwd else dst), names)
    acts, grads = gradients(bridge, *(dst if fwd else src), names + patterns, cases)
    ld_src, ld_dst = view_lds(bridge, cases)
    stats["attribution_forwards"] = stats.get("attribution_forwards", 0) + 4
    stats["attribution_backwards"] = stats.get("attribution_backwards", 0) + 1
    start, end = (ld_dst, ld_src) if fwd else (ld_src, ld_dst)
    W0 = cases.src_ids.shape[1]
    A = min(W0, cases.dst_ids.shape[1])  # the aligned columns: the last A of both runs

    def per_column(name):  # B A (B A H for hook_z): the estimate of patching each column
        d = (other[name][:, -A:] - acts[name][:, -A:]) * grads[name][:, -A:]
        return d.sum(-1)

    def norm(delta_B):
        return normalised(start + delta_B, start, end)

    def over(cols, where_B_W):  # the columns `where` sets, summed
        m = where_B_W[:, -A:].to(cols.dtype)
        return (cols * m.reshape(*m.shape, *([1] * (cols.dim() - 2)))).sum(1)

    resid = [per_column(resid_hook(li)) for li in range(L)]
    out = {"resid_groups": {g: np.stack([norm(over(c, cases.groups[g])) for c in resid], 1)
                            for g in GROUPS},
           "mlp": np.stack([norm(over(per_column(mlp_out_hook(li)), cases.groups["all"]))
                            for li in range(L)], 1)}
    if full:
        K = min(W0, OFFSETS)
        offs = []
        for c in resid:
            row = []
            for k in range(1, K + 1):
                where = torch.zeros_like(cases.groups["all"])
                where[:, W0 - k] = cases.groups["all"][:, W0 - k]
                row.append(norm(over(c, where)))
            offs.append(np.stack(row, 1))
        out["resid_offsets"] = np.stack(offs, 1)  # N L K
        out["heads"] = np.stack([np.stack([norm(h) for h in over(
            per_column(head_z_hook(li)), cases.groups["all"]).unbind(-1)], 1)
            for li in range(L)], 1)  # N L H
    if patterns:
        ablate = ablate_context_hook(cases.ctx_B_W1, list(range(H)))
        out["ablation"] = np.stack([np.stack([
            normalised(ld_dst + d, ld_dst, ld_src) for d in
            ((ablate(acts[p].clone(), None) - acts[p]) * grads[p]).sum((-2, -1)).unbind(-1)],
            1) for p in patterns], 1)  # N L H
    return out


def means(x_N_M: np.ndarray) -> np.ndarray:
    """M: each node's mean over cases, NaN where none has a value (a node not patched)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(np.asarray(x_N_M, float).reshape(len(x_N_M), -1), 0)


def choose(attr_N_M: np.ndarray, top_k: int, n_check: int, rng: np.random.Generator,
           idx: list[int] | None = None) -> tuple[list[int], list[int]]:
    """Nodes (flat indices) to patch exactly: the `top_k` with the largest mean attribution
    over the cases `idx` (all by default; largest first, signed, as heads are ranked), and a
    random sample of `n_check` of the rest (a node the estimate ranked too low shows there)."""
    m = np.nan_to_num(means(attr_N_M if idx is None else attr_N_M[idx]), nan=-np.inf)
    order = np.argsort(-m, kind="stable")
    top = order[:top_k].tolist()
    rest = order[top_k:]
    check = sorted(rng.choice(rest, min(n_check, len(rest)), replace=False).tolist()) \
        if len(rest) else []
    return top, check


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation of two vectors (ties at their mean rank); NaN for fewer than
    three pairs or a constant vector."""
    def ranks(v):
        order = np.argsort(v, kind="stable")
        r = np.empty(len(v))
        r[order] = np.arange(len(v))
        for u in np.unique(v):  # ties share their mean rank
            r[v == u] = r[v == u].mean()
        return r

    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 3 or a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def agreement(attr_N_M: np.ndarray, exact_N_M: np.ndarray, k: int,
              checked: list[int] | None = None) -> dict:
    """How the attribution's ranking of nodes agrees with the exact effects (means over cases;
    nodes not patched exactly, NaN in `exact`, left out): Spearman's rank correlation, the
    share of the exact top k among the attribution's top k (largest signed effect first), and
    the misses: `checked` nodes (the random sample beyond the candidates) in the exact top k,
    which ranking by attribution alone would have left unpatched."""
    a, e = (means(x) for x in (attr_N_M, exact_N_M))
    have = np.flatnonzero(np.isfinite(e) & np.isfinite(a))
    kk = min(k, len(have))
    by_attr = have[np.argsort(-a[have], kind="stable")][:kk]
    by_exact = have[np.argsort(-e[have], kind="stable")][:kk]
    misses = sorted(int(i) for i in set(checked or []) & (set(by_exact) - set(by_attr)))
    return {"n_nodes": int(a.size), "n_exact": int(len(have)), "k": int(kk),
            "spearman": spearman(a[have], e[have]),
            "top_k_overlap": float(len(set(by_attr) & set(by_exact)) / kk) if kk else None,
            "misses": misses}


def confirmed_sweep(bridge, cases: Cases, direction: str, stats: dict, scope: str,
                    attr: dict, top_k: int, n_check: int, rng: np.random.Generator) -> dict:
    """`interventions.sweep` patching, of each `CONFIRMED` family, only the `top_k` nodes
    attribution (`attr`, from `attribute`) ranks first and `n_check` others drawn at random;
    `candidates` records both lists (flat indices, layer first)."""
    picks = {fam: choose(attr[fam], top_k, n_check, rng) for fam in CONFIRMED if fam in attr}
    out = sweep(bridge, cases, direction, stats, scope,
                only={fam: top + check for fam, (top, check) in picks.items()})
    out["candidates"] = {fam: {"top": top, "check": check} for fam, (top, check) in picks.items()}
    return out


def head_candidates(attr_N_L_H: np.ndarray, halves: tuple[list[int], list[int]] | None,
                    top_k: int, n_check: int, rng: np.random.Generator) -> dict:
    """The heads whose reading of c is removed exactly: each half's `top_k` by attribution on
    that half alone (so the held-out table never chooses on A a head put forward by B's
    cases) and `n_check` of the rest at random. {"A", "B"}: the heads each half may choose
    among; "top_a", "top_b", "check": the lists; "all": every head patched."""
    N, L, H = attr_N_L_H.shape
    A, B = halves if halves is not None else (list(range(N)), list(range(N)))
    top_a, _ = choose(attr_N_L_H, top_k, 0, rng, A)
    top_b, _ = choose(attr_N_L_H, top_k, 0, rng, B)
    rest = [i for i in range(L * H) if i not in set(top_a) | set(top_b)]
    check = sorted(rng.choice(rest, min(n_check, len(rest)), replace=False).tolist()) \
        if rest else []
    pair = lambda ids: [(i // H, i % H) for i in ids]  # noqa: E731
    return {"A": pair(top_a + check), "B": pair(top_b + check), "top_a": top_a,
            "top_b": top_b, "check": check, "all": pair(sorted(set(top_a + top_b + check)))}
