"""The statistics of two views' hidden states, layer by layer: pure tensor functions (no
model, no I/O beyond `StreamedSimilarity`'s spill files), what `nca_interp.layer_sim` computes
on the residual streams it captures. Each statistic is described in layer_sim's docstring.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from einops import reduce
from safetensors import safe_open
from safetensors.torch import save_file

from nca_interp.errors import UsageError

__all__ = ["OTHER_NEXT", "OTHER_UNIT", "STATS", "StreamedSimilarity", "clustered_se",
           "context_attention", "debiased_cka", "defined_cos", "linear_cka", "offset_share",
           "other_item_cos", "other_partner", "similarity_by_layer"]


def linear_cka(X_M_D: torch.Tensor, Y_M_D: torch.Tensor) -> float:
    """Linear CKA (Kornblith et al. 2019) between two sets of M token representations."""
    X = X_M_D.double() - X_M_D.double().mean(0)
    Y = Y_M_D.double() - Y_M_D.double().mean(0)
    num = (Y.T @ X).norm() ** 2
    den = (X.T @ X).norm() * (Y.T @ Y).norm()
    return float(num / den) if den > 0 else float("nan")


def debiased_cka(X_M_D: torch.Tensor, Y_M_D: torch.Tensor) -> float:
    """Debiased linear CKA from explicit M x M Gram matrices and the unbiased HSIC estimator
    (Song et al. 2012): the reference the streamed feature-space form is tested against."""
    def hsic(K, L):
        n = K.shape[0]
        K, L = K - torch.diag(torch.diag(K)), L - torch.diag(torch.diag(L))
        one = torch.ones(n, dtype=K.dtype)
        return float((torch.trace(K @ L) + (one @ K @ one) * (one @ L @ one) / ((n - 1) * (n - 2))
                      - 2 / (n - 2) * (one @ K @ L @ one)) / (n * (n - 3)))

    X, Y = X_M_D.double(), Y_M_D.double()
    K, L = X @ X.T, Y @ Y.T
    den = hsic(K, K) * hsic(L, L)
    return hsic(K, L) / den ** 0.5 if den > 0 else float("nan")


def _hsic_parts(sxx: float, dxx: float, sx: float, axa: float, n: int) -> float:
    """Unbiased HSIC from feature-space sums: sxx = ||X^T Y||_F^2, dxx = sum_i |x_i|^2 |y_i|^2,
    sx = (1^T K~ 1)(1^T L~ 1), axa = sum_i (K~ 1)_i (L~ 1)_i (K~: the Gram matrix with its
    diagonal zeroed)."""
    return ((sxx - dxx) + sx / ((n - 1) * (n - 2)) - 2 / (n - 2) * axa) / (n * (n - 3))


def defined_cos(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine over the last dim and where it is defined: a zero vector (a random init's
    zeroed padding-token embedding) has no direction, and torch's 0 for it would read as
    orthogonal views; those positions are left out (cosine 0, defined False)."""
    defined = (a.norm(dim=-1) > 0) & (b.norm(dim=-1) > 0)
    return torch.nn.functional.cosine_similarity(a, b, dim=-1) * defined, defined


# how `cos_other` pairs items (recorded in each report as `other_pairs`): the next item of
# another unit; reports written before session 35 paired the next item, whatever its unit, and
# --beside keeps a report's own rule so its entries stay comparable
OTHER_UNIT, OTHER_NEXT = "the next item of another unit", "the next item"


def other_partner(i: int, units: list | None, n: int) -> int:
    """The item `cos_other` pairs item i with: the next one (cyclically) of another unit, so a
    rewording of the same fact is never the different-item floor; the next one when every item
    shares one unit (or no units are given)."""
    if units is not None:
        for step in range(1, n):
            if units[(i + step) % n] != units[i]:
                return (i + step) % n
    return (i + 1) % n


def other_item_cos(rows0: list[torch.Tensor], rows1: list[torch.Tensor],
                   units: list | None = None) -> list[float]:
    """Per item i: the mean cosine of its no-context token k with token k of the *next* item's
    context view (cyclically; the next of another unit when `units` are given; the first
    min(length) tokens): the anisotropy floor."""
    out = []
    for i, a in enumerate(rows0):
        b = rows1[other_partner(i, units, len(rows1))]
        k = min(len(a), len(b))
        if not k:
            out.append(float("nan"))
            continue
        c, ok = defined_cos(a[:k], b[:k])
        out.append(float(c.sum() / ok.sum()) if ok.any() else float("nan"))
    return out


def clustered_se(values_n: torch.Tensor, units: list | None = None) -> float:
    """Standard error of the mean of per-item values, items clustered by their independent
    unit (the cluster-robust sandwich with the G / (G - 1) correction): the items of one unit
    (a fact asked in several phrasings) share their noise and count once. With every item its
    own unit (`units` None) it is the usual std / sqrt(n)."""
    x = values_n.double()
    n = len(x)
    if units is None:
        return float(x.std() / n ** 0.5) if n > 1 else 0.0
    if len(units) != n:
        raise UsageError(f"{len(units)} unit labels for {n} items: give one per item")
    _, inverse = np.unique(np.asarray(units), return_inverse=True)
    G = int(inverse.max()) + 1
    if G < 2:
        return float("nan")  # one unit: its noise cannot be told from the mean
    sums = torch.zeros(G, dtype=torch.float64).index_add_(0, torch.as_tensor(inverse),
                                                          x - x.mean())
    return float((sums.pow(2).sum() * G / (G - 1)) ** 0.5 / n)


def similarity_by_layer(h0_L_B_N_D: torch.Tensor, h1_L_B_N_D: torch.Tensor,
                        mask_B_N: torch.Tensor, batch: int | None = None,
                        units: list | None = None, other: str = OTHER_UNIT
                        ) -> dict[str, list[float]]:
    """Per-layer cosine (mean, std over examples, standard error with the examples clustered
    by `units`), centred cosine and CKA of two views; `cos_other` pairs each item with the
    next one of its `batch` (default: all items) of another unit (`other`: OTHER_NEXT, the
    next one)."""
    pairs = units if other == OTHER_UNIT else None
    m = mask_B_N.bool()
    B = m.shape[0]
    batch = batch or B
    per_ex = m.sum(1).clamp(min=1).double()
    out: dict[str, list[float]] = {k: [] for k in STATS}
    cos = torch.nn.functional.cosine_similarity
    for h0, h1 in zip(h0_L_B_N_D.double(), h1_L_B_N_D.double()):
        c, ok = defined_cos(h0, h1)
        ok = ok & m
        ex = (c * ok).sum(1) / ok.sum(1).clamp(min=1).double()
        m0, m1 = h0[m].mean(0), h1[m].mean(0)
        mu = (m0 + m1) / 2
        cc = cos(h0 - mu, h1 - mu, dim=-1)
        cv = cos(h0 - m0, h1 - m1, dim=-1)
        within = ((h0[m] - m0).pow(2).sum(1).mean() + (h1[m] - m1).pow(2).sum(1).mean()) / 2
        out["cos"].append(float(ex.mean()))
        out["cos_std"].append(float(ex.std()) if len(ex) > 1 else 0.0)
        out["cos_se"].append(clustered_se(ex, units))
        out["cos_centred"].append(float(((cc * m).sum(1) / per_ex).mean()))
        out["cos_centred_view"].append(float(((cv * m).sum(1) / per_ex).mean()))
        out["offset_share"].append(offset_share(m0, m1, within))
        out["cka"].append(linear_cka(h0[m], h1[m]))
        out["cka_debiased"].append(debiased_cka(h0[m], h1[m]))
        other_cos: list[float] = []
        for s in range(0, B, batch):
            rows = range(s, min(s + batch, B))
            other_cos += other_item_cos([h0[b][m[b]] for b in rows], [h1[b][m[b]] for b in rows],
                                    None if pairs is None else [pairs[b] for b in rows])
        out["cos_other"].append(float(np.nanmean(other_cos)))
    return out


STATS = ("cos", "cos_std", "cos_se", "cos_other", "cos_centred", "cos_centred_view", "offset_share",
         "cka", "cka_debiased")


def offset_share(m0_D: torch.Tensor, m1_D: torch.Tensor, within: torch.Tensor | float) -> float:
    """(||m0 - m1||^2 / 4) / (that + within): how much of the pooled-centred variance is the
    constant offset between the two views (see the module docstring)."""
    off = float((m0_D - m1_D).pow(2).sum() / 4)
    total = off + float(within)
    return off / total if total > 0 else 0.0


class StreamedSimilarity:
    """`similarity_by_layer` over batches without holding every hidden state: each batch's
    compared tokens are spilled to a safetensors file in `folder`, and the statistics are then
    reduced layer by layer (float64; one layer of one batch in memory at a time). The linear
    CKA uses the feature-space form ||C_yx||^2 / (||C_xx|| ||C_yy||) of accumulated, centred
    D x D moments, which equals the token-space one."""

    def __init__(self, folder: Path):
        self.folder, self.n_ex = Path(folder), 0
        self.files: list[Path] = []

    def add(self, h0_L_B_N_D: torch.Tensor, h1_L_B_N_D: torch.Tensor, mask_B_N: torch.Tensor
            ) -> None:
        m = mask_B_N.bool()
        B, N = m.shape
        ex = (torch.arange(B)[:, None].expand(B, N)[m] + self.n_ex).contiguous()
        f = self.folder / f"batch_{len(self.files):05d}.safetensors"
        save_file({"h0": h0_L_B_N_D[:, m].float().contiguous(),
                   "h1": h1_L_B_N_D[:, m].float().contiguous(), "ex": ex}, f)
        self.files.append(f)
        self.n_ex += B

    def _layers(self, layer: int):
        for f in self.files:
            with safe_open(str(f), framework="pt") as h:
                yield (h.get_slice("h0")[layer].double(), h.get_slice("h1")[layer].double(),
                       h.get_tensor("ex"))

    def result(self, units: list | None = None, other: str = OTHER_UNIT
               ) -> dict[str, list]:
        """Every statistic of `STATS`, per layer, and `cos_item`: per layer, each example's
        mean token cosine (what `cos`, `cos_std` and `cos_se` summarise); `units` (one label
        per example, in the order added) clusters the examples for `cos_se` and, with `other`
        OTHER_UNIT, keeps a unit's items out of each other's `cos_other`."""
        pairs = units if other == OTHER_UNIT else None
        with safe_open(str(self.files[0]), framework="pt") as h:
            L, _, D = h.get_slice("h0").get_shape()
        out: dict[str, list] = {k: [] for k in (*STATS, "cos_item")}
        cos = torch.nn.functional.cosine_similarity
        for layer in range(L):
            n, s0, s1 = 0, torch.zeros(D, dtype=torch.float64), torch.zeros(D, dtype=torch.float64)
            Sxx, Syy, Syx = (torch.zeros(D, D, dtype=torch.float64) for _ in range(3))
            per_ex = torch.zeros(self.n_ex, dtype=torch.float64)
            count = torch.zeros(self.n_ex, dtype=torch.float64)
            count_cos = torch.zeros(self.n_ex, dtype=torch.float64)  # positions with a cosine
            diag = torch.zeros(3, dtype=torch.float64)  # sum |x|^2|y|^2, |x|^4, |y|^4
            sq = torch.zeros(2, dtype=torch.float64)  # sum |x|^2, |y|^2
            other_cos: list[float] = []
            for h0, h1, ex in self._layers(layer):
                n += len(h0)
                s0 += h0.sum(0)
                s1 += h1.sum(0)
                Sxx += h0.T @ h0
                Syy += h1.T @ h1
                Syx += h1.T @ h0
                c, ok = defined_cos(h0, h1)
                per_ex.index_add_(0, ex, c)
                count_cos.index_add_(0, ex, ok.double())
                count.index_add_(0, ex, torch.ones(len(ex), dtype=torch.float64))
                n0, n1 = h0.pow(2).sum(1), h1.pow(2).sum(1)
                diag += torch.stack([(n0 * n1).sum(), (n0 * n0).sum(), (n1 * n1).sum()])
                sq += torch.stack([n0.sum(), n1.sum()])
                items = torch.unique_consecutive(ex)  # the batch's items, in order
                other_cos += other_item_cos([h0[ex == e] for e in items],
                                            [h1[ex == e] for e in items],
                                            None if pairs is None else [pairs[e] for e in items])
            m0, m1 = s0 / n, s1 / n
            Cxx = Sxx - n * torch.outer(m0, m0)
            Cyy = Syy - n * torch.outer(m1, m1)
            Cyx = Syx - n * torch.outer(m1, m0)
            den = Cxx.norm() * Cyy.norm()
            mu = (s0 + s1) / (2 * n)
            centred = torch.zeros(self.n_ex, dtype=torch.float64)
            centred_view = torch.zeros(self.n_ex, dtype=torch.float64)
            cross = torch.zeros(3, dtype=torch.float64)  # sum a_i b_i, a_i^2, b_i^2
            for h0, h1, ex in self._layers(layer):
                centred.index_add_(0, ex, cos(h0 - mu, h1 - mu, dim=-1))
                centred_view.index_add_(0, ex, cos(h0 - m0, h1 - m1, dim=-1))
                a = h0 @ s0 - h0.pow(2).sum(1)  # (K~ 1)_i
                b = h1 @ s1 - h1.pow(2).sum(1)
                cross += torch.stack([(a * b).sum(), (a * a).sum(), (b * b).sum()])
            ox, oy = float(s0 @ s0 - sq[0]), float(s1 @ s1 - sq[1])  # 1^T K~ 1, 1^T L~ 1
            hxy = _hsic_parts(float(Syx.norm() ** 2), float(diag[0]), ox * oy, float(cross[0]), n)
            hxx = _hsic_parts(float(Sxx.norm() ** 2), float(diag[1]), ox * ox, float(cross[1]), n)
            hyy = _hsic_parts(float(Syy.norm() ** 2), float(diag[2]), oy * oy, float(cross[2]), n)
            ex_cos = per_ex / count_cos.clamp(min=1)
            within = (Cxx.trace() + Cyy.trace()) / (2 * n)
            out["cos"].append(float(ex_cos.mean()))
            out["cos_std"].append(float(ex_cos.std()) if self.n_ex > 1 else 0.0)
            out["cos_se"].append(clustered_se(ex_cos, units))
            out["cos_centred"].append(float((centred / count.clamp(min=1)).mean()))
            out["cos_centred_view"].append(float((centred_view / count.clamp(min=1)).mean()))
            out["offset_share"].append(offset_share(m0, m1, within))
            out["cka"].append(float(Cyx.norm() ** 2 / den) if den > 0 else float("nan"))
            out["cka_debiased"].append(hxy / (hxx * hyy) ** 0.5 if hxx * hyy > 0
                                       else float("nan"))
            out["cos_other"].append(float(np.nanmean(other_cos)))
            out["cos_item"].append(ex_cos.tolist())
        return out


def context_attention(pattern_L_B_H_Q_K: torch.Tensor, key_is_ctx_B_K: torch.Tensor,
                      key_mask_B_K: torch.Tensor, query_pos_B_Q: torch.Tensor,
                      query_mask_B_Q: torch.Tensor) -> dict[str, Any]:
    """Attention to the context tokens at the queries `query_pos` of the [c, x] view.

    `mass_L_H`: summed over valid queries, the attention mass on context keys per head; `ratio_L_H`:
    summed over valid queries, that mass divided by the context's share of the keys the query can
    see (1 = attends to the context as much as uniform attention would); `n`: valid queries."""
    K = key_is_ctx_B_K.shape[1]
    causal_B_Q_K = torch.arange(K)[None, None, :] <= query_pos_B_Q[:, :, None]
    visible = causal_B_Q_K & key_mask_B_K.bool()[:, None, :]
    share_B_Q = (visible & key_is_ctx_B_K.bool()[:, None, :]).sum(-1) / visible.sum(-1).clamp(min=1)
    idx = query_pos_B_Q[None, :, None, :, None].expand(*pattern_L_B_H_Q_K.shape[:3], -1, K)
    pat = pattern_L_B_H_Q_K.gather(3, idx)  # L B H Q K at the selected queries
    mass = (pat * key_is_ctx_B_K[None, :, None, None, :]).sum(-1)  # L B H Q
    q = query_mask_B_Q.to(mass.dtype)[None, :, None, :]
    ratio = torch.where(share_B_Q[None, :, None, :] > 0,
                        mass / share_B_Q[None, :, None, :].clamp(min=1e-12), 0.0)
    return {"mass_L_H": reduce(mass * q, "l b h q -> l h", "sum"),
            "ratio_L_H": reduce(ratio * q, "l b h q -> l h", "sum"),
            "n": float(query_mask_B_Q.sum())}
