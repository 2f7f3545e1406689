"""Which items to patch and how the two views of each line up.

Cases come from a paired greedy evaluation of the checkpoint (the same KV-cached sampler as
`evaluate`, so the counts equal its counts). A harm case is right without the context c and
wrong with it; a help case is wrong without c and right with it (the context's effect on correct
answers, for checkpoints that harm nothing); controls are right both ways. Each case is
teacher-forced, in both views, on the right view's response up to the first token where the two
greedy responses part (t*); that position decides the answer, and the metric there is the logit
difference LD = logit(right view's token) - logit(wrong view's token).

What "the context" is, for removing attention to it (ABLATE): `prefix` (the default) is every
token of [c, x] before the part it shares with x: c and the newline (or chat-template tokens)
that join it to x, so where x is a suffix of [c, x] (the games, compact sysprompt) removing
every head's attention to it in every layer turns [c, x] into x exactly (relative positions
make the shift of x's positions harmless); with a chat template whose no-context view has a
default system message of its own, that message is not restored. `context` is c's own
tokens only (what a report that records no `ablate` removed): the joining newline stays
readable, so there removing every head's reading of c is not the no-context run.

The source batch is always the no-context prompt x and the destination batch [c, x]. x and the
response prefix are a common suffix of both prompts: left padding lines them up column by
column ("aligned positions"); the context tokens have no counterpart.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nca_interp.errors import UsageError
from nca_interp.masks import context_token_mask, shared_suffix_mask
from nca_interp.models import context_limit
from nca_interp.progress import bar
from nca_interp.rollout import encode, pad_id, sample, stop_ids
from nca_interp.tasks import Task

__all__ = ["ABLATE", "KINDS", "Cases", "build_cases", "find_cases", "score"]

KINDS = ("harm", "help")
RIGHT_VIEW = {"harm": "no_c", "help": "c"}  # the view that answers right in a case
ABLATE = ("prefix", "context")  # what removing attention to the context removes (see above)


@dataclass
class Cases:
    """Cases as two left-padded batches that end on the deciding position."""

    src_ids: torch.Tensor  # B W0   x + y[:t*]
    src_mask: torch.Tensor
    dst_ids: torch.Tensor  # B W1   [c, x] + y[:t*]
    dst_mask: torch.Tensor
    good: torch.Tensor  # B      the right view's token y_right[t*]
    bad: torch.Tensor  # B      the wrong view's token y_wrong[t*]
    groups: dict[str, torch.Tensor]  # name -> B W0 mask over source columns (aligned only)
    ctx_B_W1: torch.Tensor  # context tokens of the destination prompt
    dst_prompt: tuple[torch.Tensor, torch.Tensor]  # [c, x] alone, to generate from
    levels: list
    t_star: list[int]

    def __len__(self) -> int:
        return len(self.levels)

    def subset(self, idx: list[int]) -> Cases:
        """The cases at `idx` (batches keep their width: left padding stays aligned)."""
        i = torch.tensor(idx, dtype=torch.long)
        return Cases(self.src_ids[i], self.src_mask[i], self.dst_ids[i], self.dst_mask[i],
                     self.good[i], self.bad[i], {k: v[i] for k, v in self.groups.items()},
                     self.ctx_B_W1[i], (self.dst_prompt[0][i], self.dst_prompt[1][i]),
                     [self.levels[j] for j in idx], [self.t_star[j] for j in idx])


def score(task: Task, tok, level, tokens: list[int]) -> bool:
    body = [t for t in tokens if t != tok.eos_token_id]
    return task.score(level, tok.decode(body, skip_special_tokens=True)).won


@torch.no_grad()
def greedy_tokens(model, tok, task: Task, levels: list, context: str | None,
                  batch: int = 100) -> list[list[int]]:
    """Greedy responses (eos included) with the KV-cached sampler `evaluate` uses."""
    out = []
    max_new = task.max_response_tokens()
    view = "without c" if context is None else "with c"
    for i in bar(range(0, len(levels), batch), f"patching: finding cases, greedy {view}",
                 unit="batch"):
        chunk = levels[i: i + batch]
        texts = [task.prompt(lv, None if context is None else task.context(lv, context))
                 for lv in chunk]
        ids, mask = encode(tok, texts, context_limit(model), max_new)
        resp, rmask = sample(model, ids, mask, max_new, stop_ids(tok, model), pad_id(tok), 0.0)
        out += [r[m.bool()].tolist() for r, m in zip(resp, rmask)]
    return out


def parting(a: list[int], b: list[int]) -> int:
    """The first position where two responses differ (the shorter one's end if one is a
    prefix of the other)."""
    return next((j for j, (u, v) in enumerate(zip(a, b)) if u != v), min(len(a), len(b)) - 1)


def find_cases(model, tok, task: Task, context: str, levels: list, kind: str = "harm"
               ) -> tuple[list, list, dict]:
    """Greedy both views over `levels`: rows (level, right response, wrong response, t*) of
    the `kind` cases and of the both-right controls, and the counts."""
    if kind not in KINDS:
        raise UsageError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    y0 = greedy_tokens(model, tok, task, levels, None)
    y1 = greedy_tokens(model, tok, task, levels, context)
    counts = {"levels": len(levels), "right_no_c": 0, "right_c": 0, "harm": 0, "help": 0,
              "both": 0}
    cases, controls = [], []
    for lv, a, b in zip(levels, y0, y1):
        r0, r1 = score(task, tok, lv, a), score(task, tok, lv, b)
        counts["right_no_c"] += r0
        counts["right_c"] += r1
        counts["harm"] += r0 and not r1
        counts["help"] += r1 and not r0
        counts["both"] += r0 and r1
        if kind == "harm" and r0 and not r1:
            cases.append((lv, a, b, parting(a, b)))
        elif kind == "help" and r1 and not r0:
            cases.append((lv, b, a, parting(a, b)))
        elif r0 and r1:
            controls.append((lv, a, b, next((j for j, (u, v) in enumerate(zip(a, b))
                                             if u != v), 0)))
    return cases, controls, counts


def build_cases(tok, task: Task, context: str, rows: list, limit: int | None,
                ablate: str = "prefix") -> Cases:
    """Rows (level, right response, wrong response, t*) as aligned teacher-forced batches;
    `ablate` picks the context columns (module docstring)."""
    if ablate not in ABLATE:
        raise UsageError(f"ablate must be one of {', '.join(ABLATE)}, not {ablate!r}")
    pad = pad_id(tok)
    src_text, dst_text, contexts, prefixes = [], [], [], []
    for lv, right, _wrong, t in rows:
        contexts.append(task.context(lv, context))
        src_text.append(task.prompt(lv))
        dst_text.append(task.prompt(lv, contexts[-1]))
        prefixes.append(right[:t])
    src_p, src_pm = encode(tok, src_text, limit)
    dst_p, dst_pm = encode(tok, dst_text, limit)
    aligned_prompt = shared_suffix_mask(src_p, src_pm, dst_p)

    def with_prefix(ids, mask):
        rows_ = [torch.cat([r[m.bool()], torch.tensor(p, dtype=torch.long)])
                 for r, m, p in zip(ids, mask, prefixes)]
        W = max(len(r) for r in rows_)
        out = torch.full((len(rows_), W), pad, dtype=torch.long)
        m = torch.zeros_like(out)
        for i, r in enumerate(rows_):
            out[i, W - len(r):], m[i, W - len(r):] = r, 1
        return out, m

    src_ids, src_mask = with_prefix(src_p, src_pm)
    dst_ids, dst_mask = with_prefix(dst_p, dst_pm)
    W0 = src_ids.shape[1]
    t_star = torch.tensor([len(p) for p in prefixes])
    col = torch.arange(W0)[None]
    response = col >= W0 - t_star[:, None]
    x_part = torch.nn.functional.pad(aligned_prompt, (W0 - aligned_prompt.shape[1], 0))
    # prompt columns sit left of the prefix: shift each row's prompt mask left by t*
    x_mask = torch.stack([torch.roll(r, -int(t)) if t else r for r, t in zip(x_part, t_star)])
    x_mask = x_mask.bool() & ~response
    groups = {"x": x_mask, "response": response & src_mask.bool(),
              "decide": (col == W0 - 1).expand(len(rows), -1)}
    groups["all"] = groups["x"] | groups["response"]
    W1 = dst_ids.shape[1]
    ctx = torch.zeros(len(rows), W1, dtype=torch.bool)
    for i, (text, c, t) in enumerate(zip(dst_text, contexts, t_star)):
        if ablate == "context":
            is_ctx = torch.tensor(context_token_mask(tok, text, c))
        else:  # every real prompt token left of the suffix shared with x
            real, shared = int(dst_pm[i].sum()), int(aligned_prompt[i].sum())
            is_ctx = torch.arange(real) < real - shared
        end = W1 - int(t)
        ctx[i, end - len(is_ctx): end] = is_ctx
    eos = tok.eos_token_id
    return Cases(src_ids, src_mask, dst_ids, dst_mask,
                 torch.tensor([r[t] for _, r, _, t in rows]),
                 torch.tensor([w[t] if t < len(w) else eos for _, _, w, t in rows]),
                 groups, ctx, (dst_p, dst_pm), [r[0] for r in rows], t_star.tolist())
