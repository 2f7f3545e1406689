r"""On-policy distillation (OPD) and No-Context Anchoring (NCA) losses.

Notation: student g, frozen teacher f, input x, privileged context c, response y sampled from
the student *without* context, y ~ g(. | x). For every response position t (up to and including
end-of-response) the views are distributions over the full vocabulary V:

    g_t   = g(. | x,    y_<t)     student, no context   (the view being distilled)
    g^c_t = g(. | x, c, y_<t)     student, with context (the view that must not break)
    f^c_t = f(. | x, c, y_<t)     teacher, with context

    L_OPD = mean_t KL(g_t || f^c_t)        = mean_t sum_v g_t(v) [log g_t(v) - log f^c_t(v)]
    L_NCA = mean_t KL(sg[g_t] || g^c_t)    = mean_t sum_v sg[g_t(v)] [log sg[g_t(v)] - log g^c_t(v)]
    L_CTX = mean_t KL(g^c_t || f^c_t)      (what distillation would pull the context view toward;
                                            used by the gradient-alignment analysis, not training)
    L     = L_OPD + beta * L_NCA           (beta = 0 is plain OPD)

L_OPD is a reverse KL (mode seeking) on the student's own tokens; L_NCA is a forward KL from a
stop-gradient anchor, so the no-context view gets gradient only from L_OPD and the context view
only from L_NCA. Means are over valid response tokens of the whole batch; with micro-batches or
data-parallel ranks, each piece divides its sum by the *global* token count (`denom`), so the
pieces add up to the same mean.

Temperature: the batch is sampled from softmax(z / T); so that it stays on-policy, every view's
logits are divided by the same T before the KL (as TRL's GKD does); T = 1 is the plain loss.

Top-k support (OPCD's option): restrict the sum to the student's top-k tokens at each position,
optionally renormalising both distributions on that support; k = |V| equals the full KL.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nca_interp.rollout import Batch, model_device, response_logits

TERMS = ("opd", "nca", "ctx")


def position_kl(p_logits_B_N_V: torch.Tensor, q_logits_B_N_V: torch.Tensor,
                 top_k: int | None = None, renormalize: bool = True) -> torch.Tensor:
    """KL(p || q) at every position, in nats, over the full vocabulary (float32). With
    `top_k`, the support is p's top-k tokens (renormalised on that support if `renormalize`)."""
    logp = F.log_softmax(p_logits_B_N_V.float(), dim=-1)
    logq = F.log_softmax(q_logits_B_N_V.float(), dim=-1)
    if top_k is not None and top_k < logp.shape[-1]:
        idx = logp.topk(top_k, dim=-1).indices
        logp, logq = logp.gather(-1, idx), logq.gather(-1, idx)
        if renormalize:
            logp = logp - logp.logsumexp(-1, keepdim=True)
            logq = logq - logq.logsumexp(-1, keepdim=True)
    return (logp.exp() * (logp - logq)).sum(-1)


def token_kl(p_logits_B_N_V: torch.Tensor, q_logits_B_N_V: torch.Tensor,
             mask_B_N: torch.Tensor, top_k: int | None = None,
             renormalize: bool = True, denom: torch.Tensor | float | None = None
             ) -> torch.Tensor:
    """mean over valid positions of KL(p || q), in nats (or the sum divided by `denom`); see
    `position_kl` for `top_k`."""
    kl_B_N = position_kl(p_logits_B_N_V, q_logits_B_N_V, top_k, renormalize)
    mask = mask_B_N.to(kl_B_N.dtype)
    return (kl_B_N * mask).sum() / (mask.sum().clamp(min=1) if denom is None else denom)


def loss_terms(student, teacher, batch: Batch, terms: tuple[str, ...] = ("opd", "nca"),
               top_k: int | None = None, renormalize: bool = True,
               denom: torch.Tensor | float | None = None, temperature: float = 1.0
               ) -> dict[str, torch.Tensor]:
    """The named loss terms on one batch (combine them afterwards: L = opd + beta * nca), at
    the sampling `temperature` (every view's logits divided by it).
    Only the views a requested term needs are computed. The teacher may live on another device
    (its inputs go there, its logits come back); its full-vocabulary logits are dropped as soon
    as the terms that need them are computed."""
    unknown = set(terms) - set(TERMS)
    if unknown:
        raise ValueError(f"unknown loss terms {sorted(unknown)}; choose from {TERMS}")
    if not temperature > 0 or temperature != temperature or temperature == float("inf"):
        raise ValueError(f"temperature must be a positive finite number, not {temperature}; "
                         "greedy (0) rollouts are not on-policy samples")
    b, out = batch, {}
    g = g_c = f_c = None
    if "opd" in terms or "nca" in terms:
        g = response_logits(student, b.x_ids, b.x_mask, b.resp, b.resp_mask)
    if "nca" in terms or "ctx" in terms:
        g_c = response_logits(student, b.cx_ids, b.cx_mask, b.resp, b.resp_mask)
    if "opd" in terms or "ctx" in terms:
        dev = model_device(teacher)
        with torch.no_grad():
            f_c = response_logits(teacher, b.cx_ids.to(dev), b.cx_mask.to(dev), b.resp.to(dev),
                                  b.resp_mask.to(dev)).to(b.resp.device)
    if temperature != 1.0:
        g, g_c, f_c = (None if v is None else v / temperature for v in (g, g_c, f_c))
    kl = dict(mask_B_N=b.resp_mask, top_k=top_k, renormalize=renormalize, denom=denom)
    if "opd" in terms:
        out["opd"] = token_kl(g, f_c, **kl)
    if "ctx" in terms:
        out["ctx"] = token_kl(g_c, f_c, **kl)
    del f_c
    if "nca" in terms:
        out["nca"] = token_kl(g.detach(), g_c, **kl)
    return out


def combine(terms: dict[str, torch.Tensor], beta: float) -> torch.Tensor:
    total = terms["opd"]
    if beta:
        total = total + beta * terms["nca"]
    return total
