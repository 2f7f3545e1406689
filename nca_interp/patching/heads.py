"""Which heads' reading of the context causes the effect, chosen and judged on different cases.

The cases are split in two halves at random, by their independent unit (a fact asked in
several phrasings lands in one half, so heads are never chosen on a rewording of a case they
are judged on). Heads are ranked by the effect of removing their
attention to c on one half; the top k are then removed together on the *other* half (and the
reverse), so every case is scored with heads chosen without it. Beside each held-out effect:
  percentile  where the chosen heads' single-head effect on the held-out half ranks among all
              heads (100 = the largest)
  null        the same intervention with k random heads drawn from the heads that neither half
              chose, over many draws: its mean, its central 95% and the one-sided p-value
              (1 + draws >= observed) / (1 + draws); drawing stops early once `stop` draws
              of either null reach the observed value (Besag and Clifford's sequential test,
              1991: p = stop / draws, a valid p that only stops where it is large), so an
              unremarkable k does not pay for every draw
Two metrics: the teacher-forced normalised LD at the deciding position and the outcome of
greedy answering with the heads removed (flipped: a harm case answered right, a help case
answered wrong); controls (right both ways) give the broken-control rate. A random draw gives
both from one teacher-forced run, several draws stacked in one forward (`Outcomes.many`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from nca_interp.bootstrap import cluster_indices, iid_indices, n_units, percentile_ci
from nca_interp.hooks import attached
from nca_interp.patching.cases import Cases, score
from nca_interp.patching.interventions import (
    ablation_effect,
    ablation_first,
    ablation_hooks,
    greedy,
    logit_diff,
    normalised,
    row_ablation_hooks,
    view_lds,
)
from nca_interp.patching.rerun import Rerun, cache_reaches_attention, window
from nca_interp.progress import bar
from nca_interp.rollout import pad_id

__all__ = ["Outcomes", "answered_right", "halves", "held_out_heads", "interval", "prompt_context"]


def own_units(units: list | None, n: int) -> bool:
    """Is every case its own unit (no units given, or all different)? Then cases are resampled
    and split as independent, exactly as before units were read."""
    return units is None or n_units(units) == n


def interval(per_case: np.ndarray, n_boot: int = 2000, seed: int = 0,
             units: list | None = None) -> dict:
    """Mean over cases per cell and its 95% bootstrap interval: the cases resampled, or, where
    several share a unit (`units`, one label per case), their units with all their cases."""
    x = np.asarray(per_case, float)
    if units is None or own_units(units, len(x)):
        boots = np.nanmean(x[iid_indices(len(x), n_boot, seed)], axis=1)
    else:
        boots = np.stack([np.nanmean(x[idx], 0) for idx in cluster_indices(units, n_boot, seed)])
    lo, hi = percentile_ci(boots, axis=0, nan=True)
    return {"mean": np.nanmean(x, 0).tolist(), "lo": lo.tolist(), "hi": hi.tolist()}


def null_summary(draws: list[float], observed: float, stop: int = 0) -> dict:
    """The null's mean, central 95% and one-sided p: (1 + hits) / (1 + draws), or, where the
    draws reached `stop` hits (draws >= observed; `exceeded`), Besag and Clifford's
    sequential p, stop / (the draws up to the stop-th hit). A null whose draws ended because
    the other null's reached `stop` keeps the first form: that row's test (both p's <= alpha,
    `paper.claims.heads`) fails on the other's p >= stop / draws anyway."""
    d = np.asarray(draws, float)
    d = d[np.isfinite(d)]
    if not len(d):
        return {"n": 0}
    hit = d >= observed
    stopped = bool(stop) and int(hit.sum()) >= stop
    # stopped: the draws up to the `stop`-th hit (a block may draw a few beyond it)
    p = (stop / (int(np.flatnonzero(hit)[stop - 1]) + 1) if stopped
         else (1 + int(hit.sum())) / (1 + len(d)))
    return {"n": int(len(d)), "mean": float(d.mean()), "lo": float(np.percentile(d, 2.5)),
            "hi": float(np.percentile(d, 97.5)), "p": float(p),
            **({"stopped_at": stop} if stopped else {})}


def exceeded(draws: list[float], observed: float, stop: int) -> bool:
    """Have `stop` of the draws reached the observed value (the sequential test's stop)?"""
    d = np.asarray(draws, float)
    return bool(stop) and int((d[np.isfinite(d)] >= observed).sum()) >= stop


def halves(n: int, seed: int, units: list | None = None) -> tuple[list[int], list[int]]:
    """Two halves of the cases, drawn at random by unit: a unit's cases stay together."""
    if units is None or own_units(units, n):
        perm = np.random.default_rng(seed).permutation(n).tolist()
        return sorted(perm[: n // 2]), sorted(perm[n // 2:])
    order = list(dict.fromkeys(units))
    perm = np.random.default_rng(seed).permutation(len(order)).tolist()
    first = {order[j] for j in perm[: len(order) // 2]}
    return ([i for i in range(n) if units[i] in first],
            [i for i in range(n) if units[i] not in first])


def ranked(abl_N_L_H: np.ndarray, idx: list[int], among: list | None = None
           ) -> list[tuple[int, int]]:
    """Heads by their mean single-head effect over the cases `idx`, largest first; only the
    heads `among` (layer, head) where given, the others last."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a head never patched: all NaN
        m = np.nan_to_num(np.nanmean(abl_N_L_H[idx], 0), nan=-np.inf)
    H = m.shape[1]
    if among is not None:
        keep = np.zeros(m.shape, bool)
        keep[tuple(np.array(among, int).reshape(-1, 2).T)] = True
        m = np.where(keep, m, -np.inf)
    return [(int(i // H), int(i % H)) for i in np.argsort(-m, axis=None, kind="stable")]


def percentile(abl_N_L_H: np.ndarray, idx: list[int], heads: list[tuple[int, int]],
               among: list | None = None) -> float:
    """Mean percentile (0-100) of `heads`' single-head effect over `idx` among all heads, or
    among the heads `among` (those patched exactly, where attribution chose them)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        m = np.nan_to_num(np.nanmean(abl_N_L_H[idx], 0), nan=-np.inf).ravel()
    H = abl_N_L_H.shape[2]
    pool = np.arange(len(m)) if among is None else np.array([li * H + h for li, h in among])
    return float(np.mean([100.0 * (m[pool] < m[li * H + h]).sum() / max(len(pool) - 1, 1)
                          for li, h in heads]))


def prompt_context(cases: Cases) -> torch.Tensor:
    """B W: the context columns of the bare [c, x] prompts (`cases.dst_prompt`), the cases'
    columns shifted by their response prefix length."""
    W = cases.dst_prompt[0].shape[1]
    return torch.stack([torch.roll(r, int(t))[-W:] if t else r[-W:]
                        for r, t in zip(cases.ctx_B_W1, cases.t_star)])


def answered_right(bridge, task, cases: Cases, heads: list[tuple[int, int]], stops: list[int]
                   ) -> np.ndarray:
    """Per case: is the greedy answer from [c, x] right with the context reading of `heads`
    removed?"""
    tok = bridge.tokenizer
    ids, mask = cases.dst_prompt
    ctx = prompt_context(cases)
    outs = greedy(bridge, ids, mask, task.max_response_tokens(), stops, pad_id(tok),
                  ablation_hooks(ctx, heads))
    return np.array([score(task, tok, lv, o) for lv, o in zip(cases.levels, outs)])


@dataclass
class _Moved:
    """A case a head set moved, to be decoded on from its teacher-forced run: the set's index
    and heads, the case, the first answer position `j` the run does not confirm, the run's
    logits there (V) and its keys and values of the case's row up to j (a block each)."""

    set: int
    heads: list
    case: int
    j: int
    logits: torch.Tensor
    kv: list


class Outcomes:
    """`answered_right` for many head sets on one case set, decoding only where it can differ.

    The unablated greedy answers are decoded once. For a head set, one teacher-forced run of
    [c, x] + that answer (blocks rerun from the first ablated layer, `Rerun`) gives the
    ablated model's next-token choice at every answer position: where each is the answer's
    own token, by a margin over the runner-up above `tol` of the largest logit, greedy
    decoding with those heads removed would write the same answer token by token, so its
    outcome is the unablated one; only the other cases are decoded. The margin keeps a
    near-tie (where the cached decoding and the full forward may round differently) on the
    decoded path, so the outcome is `answered_right`'s up to the tolerance `greedy` accepts.
    A random head set rarely moves a greedy answer: one run instead of a decoding of every
    case (`bench/patching_cost.py` measures both).

    Many head sets (`many`) share their runs: up to `rows` rows a forward, each set's copy of
    the cases ablating its own heads (`row_ablation_hooks`; sets with the same lowest ablated
    layer together). A moved case then decodes on from its run rather than from its prompt
    (`_go_on`): its answer up to the first position j the run does not confirm is the
    unablated one, and the run's keys and values up to j seed the KV cache, so only the
    tokens from j are decoded, the moved cases of many sets in one batch."""

    def __init__(self, bridge, task, cases: Cases, stops: list[int], tol: float = 1e-4,
                 rows: int = 64):
        self.bridge, self.task, self.cases, self.stops, self.tol = bridge, task, cases, stops, tol
        self.rows = rows
        tok = bridge.tokenizer
        self.pad = pad_id(tok)
        ids, mask = cases.dst_prompt
        self.ctx = prompt_context(cases)
        self.answers = greedy(bridge, ids, mask, task.max_response_tokens(), stops, self.pad)
        self.right = np.array([score(task, tok, lv, o)
                               for lv, o in zip(cases.levels, self.answers)])
        B, W, T = len(ids), ids.shape[1], max(map(len, self.answers))
        ans = torch.full((B, T), self.pad, dtype=ids.dtype)
        self.valid = torch.zeros((B, T), dtype=torch.bool)
        for i, a in enumerate(self.answers):
            ans[i, :len(a)] = torch.tensor(a, dtype=ids.dtype)
            self.valid[i, :len(a)] = True
        self.target = ans
        # the answer's tokens after the prompt (right-padded: a padded column comes after
        # every real one, so it changes none of them); column W - 1 + j predicts token j
        self.run = Rerun(bridge, torch.cat([ids, ans], 1),
                         torch.cat([mask, self.valid.to(mask.dtype)], 1))
        self.first = ablation_first(self.ctx, self.run.mask)  # columns an ablation can change
        self.at = (W - 1 + torch.arange(T))[None].expand(B, -1)
        self.decoded = 0  # cases decoded (the rest confirmed by one run)
        self.from_prompt = 0  # of them, decoded from the prompt (`answered_right`)
        config = getattr(getattr(bridge, "original_model", None), "config", None)
        # whether decoding goes on from a run's keys and values: checked on first use against
        # the full forward (`_go_on`); never for a window the answer may outgrow (`greedy`)
        self.go_on = None if W + task.max_response_tokens() <= window(config) else False
        # the deciding position lies on the answer where the case's response prefix is the
        # unablated answer's (it is, but for a tie the bridge breaks otherwise than the model
        # that found the cases): then one run gives a draw's teacher-forced effect too
        t = cases.t_star
        self.shares_prefix = all(
            list(map(int, a[:ti])) == cases.dst_ids[i, cases.dst_ids.shape[1] - ti:].tolist()
            and len(a) > ti for i, (a, ti) in enumerate(zip(self.answers, t)))
        self.decide = torch.tensor([[W - 1 + ti] for ti in t])
        self.ld_clean = self._ld(self.run.logits_at(self.decide)) if self.shares_prefix else None

    def _ld(self, logits_B_1_V: torch.Tensor) -> torch.Tensor:
        return logit_diff(logits_B_1_V[:, 0], self.cases)

    def unmoved(self, heads: list[tuple[int, int]]) -> np.ndarray:
        """Per case: does greedy decoding with `heads`' context reading removed certainly
        write the unablated answer?"""
        return self._sure(self.run.logits_at(self.at, ablation_hooks(self.ctx, heads),
                                             self.first)).all(1).numpy()

    def _sure(self, logits_B_T_V: torch.Tensor) -> torch.Tensor:
        """B T: is each answer token the run's choice by the margin (padding counts as so)?"""
        top2 = logits_B_T_V.topk(2, dim=-1)
        scale = logits_B_T_V.abs().amax(dim=(1, 2), keepdim=True).clamp(min=1.0)[..., 0]
        same = (top2.indices[..., 0] == self.target) & \
            (top2.values[..., 0] - top2.values[..., 1] > self.tol * scale)
        return same | ~self.valid

    def measure(self, heads: list[tuple[int, int]], ld_src: torch.Tensor
                ) -> tuple[np.ndarray, np.ndarray]:
        """Per case, from one teacher-forced run with `heads`' context reading removed: the
        normalised effect at the deciding position (`ablation_effect`'s: 0 = the context run
        unchanged, 1 = `ld_src`, the no-context run's LD) and `answered_right`. Needs
        `shares_prefix`."""
        effect, right = self.many([heads], ld_src)[0]
        assert effect is not None  # measured against ld_src
        return effect, right

    def answered_right(self, heads: list[tuple[int, int]]) -> np.ndarray:
        """Per case: is the greedy answer right with the context reading of `heads` removed
        (`answered_right`'s value)?"""
        return self.many([heads])[0][1]

    def many(self, head_sets: list[list[tuple[int, int]]], ld_src: torch.Tensor | None = None,
             done=None) -> list[tuple[np.ndarray | None, np.ndarray]]:
        """`measure` of each head set (its effect None without `ld_src`), the sets stacked
        along the batch `rows` rows a run; `done(n)` is told as n more sets are measured."""
        if ld_src is not None and not self.shares_prefix:
            raise RuntimeError("these cases' response prefixes are not the unablated answers")
        B, W = len(self.cases), self.cases.dst_prompt[0].shape[1]
        lowest = [min((li for li, _ in hs), default=0) for hs in head_sets]
        order = sorted(range(len(head_sets)), key=lambda s: lowest[s])
        per = max(1, self.rows // B)
        effects: list = [None] * len(head_sets)
        right = [self.right.copy() for _ in head_sets]
        pending: list[_Moved] = []
        for at in range(0, len(order), per):
            stack = order[at:at + per]
            logits, kv = self._stacked([head_sets[s] for s in stack])
            for i, s in enumerate(stack):
                lg = logits[i * B:(i + 1) * B]
                if ld_src is not None:
                    assert self.ld_clean is not None  # `many` needs `shares_prefix`
                    ld = self._ld(lg.gather(1, (self.decide - self.at[:, :1])[..., None].expand(
                        -1, -1, lg.shape[-1])))
                    effects[s] = normalised(ld, self.ld_clean, ld_src)
                sure = self._sure(lg)
                moved = torch.nonzero(~sure.all(1))[:, 0].tolist()
                self.decoded += len(moved)
                if kv is None or self.go_on is False:
                    self._from_prompt(right[s], moved, head_sets[s])
                    continue
                for c in moved:  # its row's keys and values up to j, the stack's freed
                    j, r = int(torch.nonzero(~sure[c])[0]), i * B + c
                    end = W + j
                    pending.append(_Moved(s, head_sets[s], c, j, lg[c, j].clone(), [
                        (k[r:r + 1, :, :end].clone(), v[r:r + 1, :, :end].clone())
                        for k, v in kv]))
            if len(pending) >= self.rows or (pending and at + per >= len(order)):
                self._settle(pending, right, head_sets)
                pending = []
            if done is not None:
                done(len(stack))
        return list(zip(effects, right))

    def _stacked(self, sets: list) -> tuple[torch.Tensor, list | None]:
        """The teacher-forced runs of `sets` (len(sets) * B rows, each set's cases in turn)
        and their keys and values; one run a set, and no keys, where they cannot stack."""
        B = len(self.cases)
        rows = torch.arange(B).repeat(len(sets))
        hooks = row_ablation_hooks(self.ctx[rows], [hs for hs in sets for _ in range(B)],
                                   self.bridge.cfg.n_heads)
        got = self.run.stacked(rows, self.at[rows], hooks, self.first)
        if got is not None:
            return got
        return torch.cat([self.run.logits_at(self.at, ablation_hooks(self.ctx, hs), self.first)
                          for hs in sets]), None

    def _from_prompt(self, right: np.ndarray, moved: list[int], heads) -> None:
        if moved:
            self.from_prompt += len(moved)
            right[moved] = answered_right(self.bridge, self.task, self.cases.subset(moved),
                                          heads, self.stops)

    def _settle(self, pending: list[_Moved], right: list, head_sets: list) -> None:
        """The moved cases' outcomes: decoded on from their runs (`_go_on`), or, where that
        is not sure, from the prompt."""
        tok = self.bridge.tokenizer
        answers = self._go_on(pending) if self.go_on is not False else [None] * len(pending)
        again: dict[int, list[int]] = {}
        for p, a in zip(pending, answers):
            if a is None:
                again.setdefault(p.set, []).append(p.case)
            else:
                right[p.set][p.case] = score(self.task, tok, self.cases.levels[p.case], a)
        for s, moved in again.items():
            self._from_prompt(right[s], moved, head_sets[s])

    @torch.no_grad()
    def _go_on(self, pending: list[_Moved]) -> list[list[int] | None]:
        """Greedy answers of the moved cases, their heads' reading of c removed, decoded in one
        batch from their runs: a case's tokens before its j are the unablated answer's (the
        run confirmed each by the margin), its token at j the run's choice, the later ones
        decoded with the run's keys and values as the cache (a case whose j lies past the
        batch's first is fed its answer's tokens up to j). None for a case where a choice is
        a near-tie (within `tol` of the largest logit, as `_sure`). The first call is checked
        against the full forward of every answer it decoded: where a token differs, this
        path is off and every case is None (decoded from the prompt)."""
        from transformers import DynamicCache

        b = self.bridge
        config = getattr(getattr(b, "original_model", None), "config", None)
        ids_p, mask_p = self.cases.dst_prompt
        R, W = len(pending), ids_p.shape[1]
        cs = torch.tensor([p.case for p in pending])
        js = torch.tensor([p.j for p in pending])
        j0 = int(js.min())
        cache = DynamicCache(config=config) if config is not None else DynamicCache()
        for li in range(len(pending[0].kv)):
            cache.update(torch.cat([p.kv[li][0][..., :W + j0, :] for p in pending]),
                         torch.cat([p.kv[li][1][..., :W + j0, :] for p in pending]), li)
        ids = torch.cat([ids_p[cs], self.target[cs, :j0]], 1)
        mask = torch.cat([mask_p[cs], torch.ones((R, j0), dtype=mask_p.dtype)], 1)
        hooks = row_ablation_hooks(self.ctx[cs], [p.heads for p in pending], b.cfg.n_heads)
        out = [self.target[c, :j0].tolist() for c in cs.tolist()]
        sure, done = torch.ones(R, dtype=torch.bool), torch.zeros(R, dtype=torch.bool)
        stops, max_new = torch.tensor(self.stops), self.task.max_response_tokens()
        logits = torch.stack([p.logits for p in pending])  # each case's run at its j
        with attached(b), cache_reaches_attention(b):
            for step in range(j0, max_new):
                free = step >= js
                top2 = logits.topk(2, dim=-1)
                margin = top2.values[:, 0] - top2.values[:, 1]
                sure &= ~free | done | (margin > self.tol * logits.abs().amax(-1).clamp(min=1.0))
                forced = self.target[cs, min(step, self.target.shape[1] - 1)]
                tok = torch.where(free, top2.indices[:, 0], forced)
                for i in range(R):
                    if not done[i]:
                        out[i].append(int(tok[i]))
                done |= torch.isin(tok, stops)
                if bool(done.all()) or step == max_new - 1:
                    break
                nxt = torch.where(done, torch.full_like(tok, self.pad), tok)[:, None]
                ids = torch.cat([ids, nxt], 1)
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
                logits = b.run_with_hooks(nxt, attention_mask=mask, fwd_hooks=hooks,
                                          cache=cache, use_cache=True)[:, -1]
        if self.go_on is None:
            self.go_on = self._agrees(pending, ids, mask, out, sure)
            if not self.go_on:
                return [None] * R
        return [a if ok else None for a, ok in zip(out, sure.tolist())]

    def _agrees(self, pending: list[_Moved], ids: torch.Tensor, mask: torch.Tensor,
                out: list[list[int]], sure: torch.Tensor, chunk: int = 8) -> bool:
        """Is every token `_go_on` chose (from each case's j on, where sure) the full
        forward's choice over the decoded sequence? A few rows a forward: its logits are
        every position's."""
        W = self.cases.dst_prompt[0].shape[1]
        for lo in range(0, len(out), chunk):
            part = pending[lo:lo + chunk]
            hooks = row_ablation_hooks(self.ctx[[p.case for p in part]], [p.heads for p in part],
                                       self.bridge.cfg.n_heads)
            with attached(self.bridge):
                full = self.bridge.run_with_hooks(ids[lo:lo + chunk],
                                                  attention_mask=mask[lo:lo + chunk],
                                                  fwd_hooks=hooks)
            for i, p in enumerate(part):
                a = out[lo + i]
                chose = full[i, W - 1 + p.j:W - 1 + len(a)].argmax(-1).tolist()
                if sure[lo + i] and a[p.j:] != chose:
                    return False
        return True


def held_out_heads(bridge, task, cases: Cases, controls: Cases | None, abl_N_L_H: np.ndarray,
                   kind: str, ks: list[int], stops: list[int], n_random: int = 100,
                   n_random_generate: int = 100, seed: int = 0, stats: dict | None = None,
                   units: list | None = None, control_units: list | None = None,
                   eligible: dict | None = None, stop: int = 10) -> dict:
    """The held-out head table (see the module docstring) for each k in `ks` and all heads;
    `units` (one per case) keep a unit's cases in one half and resample them together, as
    `control_units` do the controls'. `eligible` {"A": heads, "B": heads}: the heads each
    half may choose among (attribution's candidates on that half and the random check, all
    patched exactly; `abl_N_L_H` is NaN elsewhere); percentiles are then among the heads
    patched exactly. `stop` (0: never): a k's random draws end once `stop` of either
    null's draws reach the observed value (the module docstring)."""
    N = len(cases)
    if N < 4:
        return {"note": f"{N} cases: too few to choose heads on one half and judge on the other"}
    if units is not None and n_units(units) < 2:
        return {"note": f"{N} cases of one unit: no half can be held out from the other"}
    L, H = abl_N_L_H.shape[1:]
    every = [(li, h) for li in range(L) for h in range(H)]
    A, B = halves(N, seed, units)
    eligible = eligible or {}
    order = {"A": ranked(abl_N_L_H, A, eligible.get("A")),
             "B": ranked(abl_N_L_H, B, eligible.get("B"))}
    measured = sorted(set(eligible["A"]) | set(eligible["B"])) if eligible else None
    sub = {"A": cases.subset(A), "B": cases.subset(B)}
    rng = np.random.default_rng(seed + 1)
    stats = stats if stats is not None else {}
    # both views' LDs once per case set: every draw below changes only the ablated heads
    sets = {"A": sub["A"], "B": sub["B"], "all": cases}
    lds = {k: view_lds(bridge, c) for k, c in sets.items()}
    dst = {k: Rerun(bridge, c.dst_ids, c.dst_mask) for k, c in sets.items()
           if k != "all" or n_random}  # "all" serves only the random-head draws

    # greedy outcomes decoded only where a head set can move them (`Outcomes`)
    outcomes: dict[str, Outcomes] = {}

    def outcome(c: str) -> Outcomes:
        if c not in outcomes:
            outcomes[c] = Outcomes(bridge, task, sets[c], stops)
        return outcomes[c]

    def flipped(c: str, heads) -> np.ndarray:
        right = outcome(c).answered_right(heads)
        stats["generations"] = stats.get("generations", 0) + 1
        return right if kind == "harm" else ~right

    def random_draws(draws: list, n_effect: int, n_flip: int, k: int, observed: tuple
                     ) -> tuple[list[float], list[float]]:
        """The random-head nulls: the mean effect of up to `n_effect` draws and the flipped
        rate of up to `n_flip`, both ended once `stop` draws of either reach `observed`
        (effect, flipped); one teacher-forced run a draw gives both where the cases'
        response prefixes are the unablated answers, and the draws share their runs
        (`Outcomes.many`), a block of them at a time so that the stop is checked between."""
        effects: list[float] = []
        flips: list[float] = []

        def done() -> bool:
            return exceeded(effects, observed[0], stop) or exceeded(flips, observed[1], stop)

        def flip_rate(right: np.ndarray) -> float:
            return float((right if kind == "harm" else ~right).mean())

        both = min(n_effect, n_flip) if n_flip and outcome("all").shares_prefix else 0
        ticks = bar(None, f"patching: random-head nulls, k={k} ({n_effect} draws of the "
                    f"effect, {n_flip} of the flipped rate"
                    f"{f', or until {stop} reach the observed' if stop else ''})",
                    n_effect + n_flip - both, unit="draw")
        block = max(1, outcome("all").rows // len(cases)) * 2 if stop else max(n_effect, n_flip)
        at = 0
        while at < both and not done():
            for effect, right in outcome("all").many(draws[at:min(at + block, both)],
                                                     lds["all"][0], ticks.update):
                effects.append(float(np.nanmean(np.asarray(effect, float))))
                flips.append(flip_rate(right))
            at = min(at + block, both)
        for d in draws[both:n_effect]:
            if done():
                break
            effects.append(float(np.nanmean(ablation_effect(bridge, cases, d, lds["all"],
                                                            dst["all"]))))
            ticks.update(1)
        at = both
        while at < n_flip and not done():
            for _, right in outcome("all").many(draws[at:min(at + block, n_flip)], None,
                                                ticks.update):
                flips.append(flip_rate(right))
            at = min(at + block, n_flip)
        stats["generations"] = stats.get("generations", 0) + len(flips)
        ticks.close()
        return effects, flips

    rows = []
    for k in sorted({min(k, L * H) for k in ks} | {L * H}):
        chosen = {"A": order["A"][:k], "B": order["B"][:k]}  # chosen on A, judged on B, ...
        tf, flip = np.full(N, np.nan), np.zeros(N, bool)
        tf[B] = ablation_effect(bridge, sub["B"], chosen["A"], lds["B"], dst["B"])
        tf[A] = ablation_effect(bridge, sub["A"], chosen["B"], lds["A"], dst["A"])
        flip[B], flip[A] = flipped("B", chosen["A"]), flipped("A", chosen["B"])
        row = {"k": k, "chosen_on_a": [f"L{li}H{h}" for li, h in chosen["A"][:8]],
               "chosen_on_b": [f"L{li}H{h}" for li, h in chosen["B"][:8]],
               "percentile": float(np.mean([percentile(abl_N_L_H, B, chosen["A"], measured),
                                            percentile(abl_N_L_H, A, chosen["B"], measured)])),
               "effect": interval(tf, units=units),
               "flipped": interval(flip.astype(float), units=units),
               "per_case_flipped": flip.astype(int).tolist()}
        if k < L * H:
            pool = [x for x in every if x not in set(chosen["A"]) | set(chosen["B"])]
            draws = [[pool[j] for j in rng.choice(len(pool), min(k, len(pool)), replace=False)]
                     for _ in range(max(n_random, n_random_generate))]
            observed = (row["effect"]["mean"], row["flipped"]["mean"])
            effects, flips = random_draws(draws, n_random, n_random_generate, k, observed)
            row["effect_null"] = null_summary(effects, observed[0], stop)
            row["flipped_null"] = null_summary(flips, observed[1], stop)
        if controls is not None:
            top = ranked(abl_N_L_H, list(range(N)))[:k]
            row["broken_control"] = interval(
                (~answered_right(bridge, task, controls, top, stops)).astype(float),
                units=control_units)
        rows.append(row)
    stats["decoded_cases"] = stats.get("decoded_cases", 0) + sum(
        o.decoded for o in outcomes.values())
    return {"halves": [A, B], "n_random": n_random, "n_random_generate": n_random_generate,
            "null_stop": stop, "rows": rows}
