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

Estimators (`Estimator`; what trainers at scale use instead of the full-vocabulary sum):
  full     the exact sum over V
  topk     the sum over k tokens: `support` p (the first argument's top-k: the student's in OPD,
           OPCD's choice) or q (the second's: the teacher's in OPD, verl's top-k forward KL);
           `tail` renorm (both distributions renormalised on the support), bucket (the
           remaining mass as one more category, exact when k = |V| - 1), or none (the raw
           partial sum); k = |V| equals the full KL
  sampled  the sampled response token alone (the batch's y, drawn from p for OPD and for the NCA
           anchor): `form` k1 = log p(y) - log q(y), whose loss adds the score-function term
           sg[k1] grad log p(y), so its gradient is an unbiased estimate of grad KL(p || q) (for
           NCA, where p is a stop-gradient anchor, it is the NLL of y under the context view);
           k3 = r - 1 - log r with r = q(y) / p(y), verl's low-variance form, whose gradient through
           p is that of the *forward* KL(q || p) (a different objective for OPD; unbiased for
           NCA's anchor)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from nca_interp.errors import UsageError
from nca_interp.forward import response_logits
from nca_interp.prefix import PrefixCache, view_logits
from nca_interp.rollout import Batch, model_device

__all__ = ["TERMS", "Estimator", "combine", "estimated_kl", "loss_terms", "loss_views",
           "position_kl", "terms_of"]

TERMS = ("opd", "nca", "ctx")


KINDS = ("full", "topk", "sampled")


@dataclass(frozen=True)
class Estimator:
    """How KL(p || q) per position is estimated (see the module docstring)."""

    kind: str = "full"
    k: int = 256
    support: str = "p"  # topk: p | q
    tail: str = "renorm"  # topk: renorm | bucket | none
    form: str = "k1"  # sampled: k1 | k3

    def __post_init__(self):
        ok = {"kind": KINDS, "support": ("p", "q"), "tail": ("renorm", "bucket", "none"),
              "form": ("k1", "k3")}
        for name, allowed in ok.items():
            if getattr(self, name) not in allowed:
                raise UsageError(f"estimator {name} must be one of {', '.join(allowed)}, not "
                                 f"{getattr(self, name)!r}")
        if self.k < 1:
            raise UsageError(f"estimator k must be >= 1, not {self.k}")

    @property
    def label(self) -> str:
        if self.kind == "full":
            return "full"
        if self.kind == "topk":
            return f"top-{self.k} of {self.support}, {self.tail}"
        return f"sampled {self.form}"

    def teacher_floats_per_token(self, vocab: int) -> float:
        """What the teacher (q in OPD) must hand over per position: |V| logits (full), k
        log-probabilities at the student's top-k (plus its log-normaliser for a tail bucket),
        k values and k indices at its own top-k, or one log-probability (sampled)."""
        if self.kind == "full":
            return float(vocab)
        if self.kind == "sampled":
            return 1.0
        return (2.0 * self.k if self.support == "q" else float(self.k)) + \
            (1.0 if self.tail == "bucket" else 0.0)

    def per_position(self, p_logits_B_N_V: torch.Tensor, q_logits_B_N_V: torch.Tensor,
                     tokens_B_N: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss_B_N, value_B_N): the surrogate to differentiate and the estimate of KL(p || q)
        at each position, equal in value (the sampled k1 surrogate adds a term that is zero
        in value and carries the score-function gradient)."""
        logp = F.log_softmax(p_logits_B_N_V.float(), dim=-1)
        logq = F.log_softmax(q_logits_B_N_V.float(), dim=-1)
        if self.kind == "full":
            kl = (logp.exp() * (logp - logq)).sum(-1)
            return kl, kl
        if self.kind == "topk":
            if self.k >= logp.shape[-1]:
                kl = (logp.exp() * (logp - logq)).sum(-1)
                return kl, kl
            idx = (logp if self.support == "p" else logq).topk(self.k, dim=-1).indices
            lp, lq = logp.gather(-1, idx), logq.gather(-1, idx)
            if self.tail == "renorm":
                lp = lp - lp.logsumexp(-1, keepdim=True)
                lq = lq - lq.logsumexp(-1, keepdim=True)
            kl = (lp.exp() * (lp - lq)).sum(-1)
            if self.tail == "bucket":
                rest = lambda lx: torch.log1p(-lx.exp().sum(-1).clamp(max=1 - 1e-7))  # noqa: E731
                rp, rq = rest(lp), rest(lq)
                kl = kl + rp.exp() * (rp - rq)
            return kl, kl
        if tokens_B_N is None:
            raise UsageError("the sampled estimator reads the response tokens: pass tokens_B_N")
        lp = logp.gather(-1, tokens_B_N[..., None])[..., 0]
        lq = logq.gather(-1, tokens_B_N[..., None])[..., 0]
        if self.form == "k1":
            v = lp - lq
            return v + v.detach() * (lp - lp.detach()), v
        log_r = lq - lp
        k3 = log_r.exp() - 1 - log_r
        return k3, k3


def position_kl(p_logits_B_N_V: torch.Tensor, q_logits_B_N_V: torch.Tensor,
                estimator: Estimator | None = None) -> torch.Tensor:
    """KL(p || q) at every position, in nats (float32): `estimator`'s value (default the exact
    full-vocabulary sum; a sampled estimator needs the tokens, so it is not taken here)."""
    est = estimator or Estimator()
    if est.kind == "sampled":
        raise UsageError("position_kl takes a full or topk estimator; the sampled one needs the "
                         "response tokens: use estimated_kl")
    return est.per_position(p_logits_B_N_V, q_logits_B_N_V, None)[1]


def estimated_kl(estimator: Estimator, p_logits_B_N_V: torch.Tensor,
                 q_logits_B_N_V: torch.Tensor, tokens_B_N: torch.Tensor, mask_B_N: torch.Tensor,
                 denom: torch.Tensor | float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, value): the token mean (or sum / `denom`) of `estimator`'s surrogate and of its
    estimate of KL(p || q)."""
    loss_B_N, value_B_N = estimator.per_position(p_logits_B_N_V, q_logits_B_N_V, tokens_B_N)
    mask = mask_B_N.to(loss_B_N.dtype)
    d = mask.sum().clamp(min=1) if denom is None else denom
    return (loss_B_N * mask).sum() / d, (value_B_N.detach() * mask).sum() / d


def loss_views(student, teacher, batch: Batch, terms: tuple[str, ...] = ("opd", "nca"),
               temperature: float = 1.0, prefix_cache: PrefixCache | None = None,
               share_prefix: bool = True) -> dict[str, torch.Tensor]:
    """The logits (B N V, over the response tokens, divided by `temperature`) that `terms`
    need: `g` the student without c, `g_c` the student with c, `f_c` the teacher with c (no
    gradient). Arguments as `loss_terms`'s."""
    unknown = set(terms) - set(TERMS)
    if unknown:
        raise UsageError(f"unknown loss terms {sorted(unknown)}; choose from {TERMS}")
    if not temperature > 0 or temperature != temperature or temperature == float("inf"):
        raise UsageError(f"temperature must be a positive finite number, not {temperature}; "
                         "greedy (0) rollouts are not on-policy samples")
    b, views = batch, {}
    # the student's views run their shared prompt prefix once per call (nca_interp.prefix);
    # not through DDP (two forwards before one backward) or activation checkpointing (which
    # turns the KV cache off)
    shared = share_prefix and not isinstance(student, DistributedDataParallel) and \
        not getattr(student, "is_activation_checkpointing", False)
    student_view = view_logits if shared else response_logits
    if "opd" in terms or "nca" in terms:
        views["g"] = student_view(student, b.x_ids, b.x_mask, b.resp, b.resp_mask)
    if "nca" in terms or "ctx" in terms:
        views["g_c"] = student_view(student, b.cx_ids, b.cx_mask, b.resp, b.resp_mask)
    if "opd" in terms or "ctx" in terms:
        dev = model_device(teacher)
        args = (b.cx_ids.to(dev), b.cx_mask.to(dev), b.resp.to(dev), b.resp_mask.to(dev))
        with torch.no_grad():
            views["f_c"] = (view_logits(teacher, *args, cache=prefix_cache) if share_prefix
                            else response_logits(teacher, *args)).to(b.resp.device)
    if temperature != 1.0:
        views = {k: v / temperature for k, v in views.items()}
    return views


def terms_of(views: dict[str, torch.Tensor], batch: Batch, terms: tuple[str, ...],
             denom: torch.Tensor | float | None = None, estimator: Estimator | None = None,
             nca_estimator: Estimator | None = None) -> dict[str, torch.Tensor]:
    """The named loss terms from `loss_views`'s logits (`views` is only read)."""
    est, out = estimator or Estimator(), {}
    kl = (batch.resp, batch.resp_mask, denom)  # tokens_B_N, mask_B_N, denom
    if "opd" in terms:
        out["opd"] = estimated_kl(est, views["g"], views["f_c"], *kl)[0]
    if "ctx" in terms:
        out["ctx"] = estimated_kl(est, views["g_c"], views["f_c"], *kl)[0]
    if "nca" in terms:
        out["nca"] = estimated_kl(nca_estimator or est, views["g"].detach(), views["g_c"],
                                  *kl)[0]
    return out


def loss_terms(student, teacher, batch: Batch, terms: tuple[str, ...] = ("opd", "nca"),
               denom: torch.Tensor | float | None = None, temperature: float = 1.0,
               estimator: Estimator | None = None, nca_estimator: Estimator | None = None,
               prefix_cache: PrefixCache | None = None, share_prefix: bool = True
               ) -> dict[str, torch.Tensor]:
    """The named loss terms on one batch (combine them afterwards: L = opd + beta * nca), at
    the sampling `temperature` (every view's logits divided by it), each the token mean (or
    sum / `denom`) of `estimator`'s surrogate (default: the exact full KL; the NCA term uses
    `nca_estimator`, default the same).
    Only the views a requested term needs are computed. The teacher may live on another device
    (its inputs go there, its logits come back); its full-vocabulary logits are dropped as soon
    as the terms that need them are computed.
    `share_prefix`: run the prompts' shared prefix once (exact; nca_interp.prefix), the
    teacher's from `prefix_cache` across calls when one is given; False runs every prompt
    whole."""
    views = loss_views(student, teacher, batch, terms, temperature, prefix_cache, share_prefix)
    out = terms_of(views, batch, tuple(t for t in terms if t != "nca"), denom, estimator)
    views.pop("f_c", None)  # the teacher's full-vocabulary logits: the NCA term reads none
    out.update(terms_of(views, batch, tuple(t for t in terms if t == "nca"), denom, estimator,
                        nca_estimator))
    return out


def combine(terms: dict[str, torch.Tensor], beta: float) -> torch.Tensor:
    total = terms["opd"]
    if beta:
        total = total + beta * terms["nca"]
    return total
