"""The two-view lens: where, token by token and layer by layer, the returning context c still
acts on a model, and which tokens carry its harm.

    python -m nca_interp.lens                           # the embedded Sokoban base / OPD / NCA
    python -m nca_interp.lens runs/opd runs/nca --context plan --out figures/x/lens
    python -m nca_interp.lens runs/mine --task jsonl --task-options data=d.jsonl,scorer=exact

The core takes a model in memory and the two views' token batches and returns numpy arrays
whose dimensions are named (`two_views` -> `TwoViews`); the command samples each checkpoint's
own responses y ~ g(.|x) (`rollout.onpolicy_batch`), builds the views and summarises them.

Per response position t (the distribution for token t of y; left padding ends every prompt of
P columns at column P - 1 in either view, so t is read at column P - 1 + t in both, as
`forward.response_logits` reads it):
  kl          KL(q_x || q_c), q_x = g(.|x, y_<t), q_c = g(.|c, x, y_<t), full vocabulary, nats
  flip        the top token of q_c is not q_x's: a fork
  kl_control  KL(q_x || q_c') with c' the task's control context (same form, wrong for the item,
              `Task.control_context`, as `evaluate --control`): what any context of c's shape
              does. kl above it is c's content acting. The report's `control` says what c'
              was (the task's draw, or your own field or file with its sha256, and the first
              items' c'); the lens generates no answers with c' (it reads the samples under
              [c', x]), so there are none to keep
  kl_floor    KL(q_x || q_x~), q_x~ the no-c view laid out with FLOOR_PAD more masked padding
              columns: the same function of the same tokens, so what arithmetic alone gives
              (kernels, batch layout, dtype). With y fixed a model has no sampling noise to
              give a floor; a kl at this level is no effect at all
Where: the thirds of each response (first / middle / last by t / its length), its parts (the
first token; the answer tokens, those whose text lies in the span the task's scorer reads,
`Task.answer_span`: the moves, the <answer> tag, the value named, the whole text for a rule or
a scorer of your own; the end, the last token: eos where it stopped) and by position.

Layer by layer (Hugging Face models): each layer's residual (`hidden_states`, embedding first)
at the same aligned positions, through the final norm and the unembedding (the logit lens):
  settle_x, settle_c  the first layer from which the view's lens top-1 is its final top-1 at
                      every later layer
  part                at forks, the first layer from which the two views' lens top-1s differ
                      at every later layer (the depth at which the views' predictions part)
  lens_kl(_control)   per layer, KL between the views' lens distributions (with c; with c')

Forks and harm (greedy, as `evaluate`; at most --max-cases of each):
  harm case  right without c, wrong with c. On the c view's response y_c, the first fork t*
             (the no-c view's top token differs). Continuing from t* under the no-c view gives
             the no-c response back by construction under greedy decoding (both views wrote
             y_c[:t*]); it is recorded as a check (`other_view_right`). The causal test swaps the
             one token instead: y_c[:t*], the no-c view's token, then the c view continues
             greedily. `restored`: that is right; `forks_to_restore`: how many successive forks
             must be swapped so (at most --max-forks; None: not within them). The null:
             --null-swaps tokens of the same response drawn where the views agree, each
             swapped for the c view's own runner-up and continued (`restored_null`: the
             share made right); a fork that carries the harm restores far above it
  help case  wrong without c, right with c: the converse (the c view's token at the first fork
             of the no-c response, the no-c view continues)
"""

from __future__ import annotations

import sys

from nca_interp.cli import parse_early
from nca_interp.configs import LensConfig

if __name__ == "__main__":  # --help and a bad flag answered before torch is imported
    PARSED = parse_early(LensConfig, __doc__, positional="ckpt")

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from nca_interp import analysis, reports
from nca_interp.bootstrap import cluster_indices, n_units, percentile_ci
from nca_interp.checkpoint import load_checkpoint, verify_folder
from nca_interp.cli import entry, parse_config, validate
from nca_interp.errors import UsageError
from nca_interp.evaluate import (
    control_record,
    format_c_prime,
    max_response_tokens,
    play_levels,
)
from nca_interp.forward import is_hf, positions
from nca_interp.labelled import Arrays, Labelled, as_float, stack_ragged
from nca_interp.layer_sim import task_and_items
from nca_interp.losses import position_kl
from nca_interp.models import context_limit, resolve_device
from nca_interp.progress import bar
from nca_interp.rollout import (
    Batch,
    decode_responses,
    encode,
    model_device,
    onpolicy_batch,
    pad_id,
    sample,
    stop_ids,
)
from nca_interp.runs import (
    check_same_tokenizers,
    resolve_task_and_context,
    with_initial_checkpoints,
)
from nca_interp.tasks import Task
from nca_interp.tokenizer import check_tokenizer
from nca_interp.trajectory import checkpoints_of

__all__ = ["DEMO", "FLOOR_PAD", "PARTS", "REGIONS", "SERIES", "TwoViews", "ViewPass",
           "answer_tokens", "arrays_of", "compare", "effect", "effect_summary", "effect_views",
           "effects", "execute", "figures",
           "floor_batch", "fork_cases", "generating_rows", "lens_checkpoint", "main", "monitor",
           "over_training", "parting", "parts_of", "pick_steps", "report_arrays", "run",
           "settling", "show",
           "swap_forks", "two_views", "view_pass", "views", "with_prompts"]

FLOOR_PAD = 3  # masked padding columns added to the no-c view for the arithmetic floor


# --- the core: a model in memory, token batches in, named numpy arrays out ---------------------

def generating_rows(t_B_T: torch.Tensor, P: int, N: int) -> torch.Tensor:
    """Columns P - 1 .. P + N - 2 of a left-padded [prompt (P columns), response] sequence: the
    positions whose outputs are response tokens 0 .. N - 1. The one place both views are
    aligned: every prompt ends at column P - 1 of its own view."""
    return t_B_T[:, P - 1: P - 1 + N]


def final_norm(model):
    """The norm before the unembedding (Llama / Qwen `norm`, GPT-2 `ln_f`, ...)."""
    for name in ("norm", "ln_f", "final_layernorm", "final_layer_norm"):
        found = getattr(model.base_model, name, None)
        if found is not None:
            return found
    raise UsageError(f"{type(model).__name__}: no final norm found (norm, ln_f, ...); the logit "
                     "lens needs it: pass layers=False (--layers false)")


def unembed(model, h_B_N_D: torch.Tensor, normed: bool = False) -> torch.Tensor:
    """Logits_B_N_V of residuals (`normed`: already through the final norm, as HF's last
    hidden state is), with the final softcap where the architecture has one."""
    h = h_B_N_D if normed else final_norm(model)(h_B_N_D)
    logits = model.get_output_embeddings()(h).float()
    cap = getattr(model.config, "final_logit_softcapping", None)
    return cap * torch.tanh(logits / cap) if cap else logits


@dataclass(frozen=True)
class ViewPass:
    """One view of a response: log-probabilities logp_B_N_V at its N positions and, for the
    lens, the residuals hidden_L_B_N_D before the last layer (embedding, blocks 0..L-2)."""

    logp: torch.Tensor
    hidden: torch.Tensor | None = None


@torch.no_grad()
def view_pass(model, prompt_ids_B_P: torch.Tensor, prompt_mask_B_P: torch.Tensor,
              resp_B_N: torch.Tensor, resp_mask_B_N: torch.Tensor, layers: bool = True
              ) -> ViewPass:
    """The response teacher-forced after one prompt view (`generating_rows`); residuals only
    for a Hugging Face model and `layers`."""
    ids = torch.cat([prompt_ids_B_P, resp_B_N], 1)
    mask = torch.cat([prompt_mask_B_P, resp_mask_B_N.to(prompt_mask_B_P.dtype)], 1)
    P, N = prompt_ids_B_P.shape[1], resp_B_N.shape[1]
    if not is_hf(model):  # a stand-in module: logits at every position
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask)).logits
        return ViewPass(generating_rows(logits, P, N).float().log_softmax(-1))
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask),
                output_hidden_states=True, logits_to_keep=1)
    hs = [generating_rows(h, P, N) for h in out.hidden_states]  # HF's last is after the norm
    logp = unembed(model, hs[-1], normed=True).log_softmax(-1)
    return ViewPass(logp, torch.stack(hs[:-1]) if layers else None)


def settling(top_L_B_N: np.ndarray) -> np.ndarray:
    """B N: the first layer from which the lens top-1 equals the last layer's at every later
    layer (the last layer's index when only it does)."""
    same = top_L_B_N == top_L_B_N[-1:]
    from_here = np.flip(np.cumprod(np.flip(same, 0), 0), 0)  # equal here and at every later
    return len(top_L_B_N) - from_here.sum(0)


def parting(top_x_L_B_N: np.ndarray, top_c_L_B_N: np.ndarray) -> np.ndarray:
    """B N: the first layer from which the two views' lens top-1s differ at every later layer;
    NaN where they agree at the last layer (no fork)."""
    differ = top_x_L_B_N != top_c_L_B_N
    from_here = np.flip(np.cumprod(np.flip(differ, 0), 0), 0)
    out = (len(differ) - from_here.sum(0)).astype(float)
    out[~differ[-1]] = np.nan
    return out


@dataclass(frozen=True)
class TwoViews:
    """Two views of the same responses compared position by position (numpy, on the CPU); the
    dimensions of each array are `DIMS[name]` (`dims(name)`). Lens arrays are None where no
    residuals were given (a stand-in model, or layers=False)."""

    kl: np.ndarray
    top_x: np.ndarray
    top_c: np.ndarray
    mask: np.ndarray
    lens_kl: np.ndarray | None = None
    lens_top_x: np.ndarray | None = None
    lens_top_c: np.ndarray | None = None

    DIMS: ClassVar[dict[str, tuple[str, ...]]] = {
        "kl": ("item", "position"), "top_x": ("item", "position"),
        "top_c": ("item", "position"), "mask": ("item", "position"),
        "flip": ("item", "position"), "lens_kl": ("layer", "item", "position"),
        "lens_top_x": ("layer", "item", "position"), "lens_top_c": ("layer", "item", "position"),
        "settle_x": ("item", "position"), "settle_c": ("item", "position"),
        "part": ("item", "position")}

    def dims(self, name: str) -> tuple[str, ...]:
        return self.DIMS[name]

    @property
    def flip(self) -> np.ndarray:
        """item position: the views' top tokens differ (a fork), at real response tokens."""
        return (self.top_x != self.top_c) & self.mask

    # the lens's own: read only where the passes carried residuals
    @property
    def settle_x(self) -> np.ndarray:
        assert self.lens_top_x is not None
        return settling(self.lens_top_x)

    @property
    def settle_c(self) -> np.ndarray:
        assert self.lens_top_c is not None
        return settling(self.lens_top_c)

    @property
    def part(self) -> np.ndarray:
        """item position: `parting` at forks, NaN elsewhere (padding included)."""
        assert self.lens_top_x is not None and self.lens_top_c is not None
        out = parting(self.lens_top_x, self.lens_top_c)
        out[~self.mask] = np.nan
        return out


@torch.no_grad()
def compare(model, a: ViewPass, b: ViewPass, mask_B_N: torch.Tensor) -> TwoViews:
    """Two passes of the same responses compared: KL(a || b) and top tokens per position, and
    per layer through the logit lens when both carry residuals (the last layer: the outputs)."""
    m = mask_B_N.bool().cpu().numpy()
    kl = (position_kl(a.logp, b.logp) * mask_B_N).cpu().numpy()
    top_x, top_c = a.logp.argmax(-1).cpu().numpy(), b.logp.argmax(-1).cpu().numpy()
    if a.hidden is None or b.hidden is None:
        return TwoViews(kl, top_x, top_c, m)
    kls, tx, tc = [], [], []
    for ha, hb in zip(a.hidden, b.hidden):  # one layer's B N V at a time
        pa, pb = unembed(model, ha), unembed(model, hb)
        kls.append((position_kl(pa, pb) * mask_B_N).cpu().numpy())
        tx.append(pa.argmax(-1).cpu().numpy())
        tc.append(pb.argmax(-1).cpu().numpy())
    return TwoViews(kl, top_x, top_c, m, np.stack([*kls, kl]), np.stack([*tx, top_x]),
                    np.stack([*tc, top_c]))


def two_views(model, batch: Batch, layers: bool = True) -> TwoViews:
    """The no-c view x against the c view [c, x] of `batch`'s responses, per position (and per
    layer with `layers` on a Hugging Face model)."""
    if not isinstance(batch, Batch) or not callable(model):
        raise UsageError(f"two_views takes a model and a rollout.Batch (`onpolicy_batch` or "
                         f"`views`), not {type(model).__name__} and {type(batch).__name__}")
    x = view_pass(model, batch.x_ids, batch.x_mask, batch.resp, batch.resp_mask, layers)
    c = view_pass(model, batch.cx_ids, batch.cx_mask, batch.resp, batch.resp_mask, layers)
    return compare(model, x, c, batch.resp_mask)


def views(tok, x_texts: list[str], cx_texts: list[str], resp_B_N: torch.Tensor,
          resp_mask_B_N: torch.Tensor, limit: int | None = None) -> Batch:
    """Both prompt views of given responses (left-padded, as `rollout.encode`)."""
    N = resp_B_N.shape[1]
    x_ids, x_mask = encode(tok, x_texts, limit, N)
    cx_ids, cx_mask = encode(tok, cx_texts, limit, N)
    dev = resp_B_N.device
    return Batch(x_ids.to(dev), x_mask.to(dev), cx_ids.to(dev), cx_mask.to(dev), resp_B_N,
                 resp_mask_B_N)


def with_prompts(batch: Batch, tok, cx_texts: list[str], limit: int | None = None) -> Batch:
    """`batch` with another second view (the control's [c', x]), the same x and responses."""
    ids, mask = encode(tok, cx_texts, limit, batch.resp.shape[1])
    return dataclasses.replace(batch, cx_ids=ids.to(batch.resp.device),
                               cx_mask=mask.to(batch.resp.device))


def floor_batch(batch: Batch, pad: int = FLOOR_PAD) -> Batch:
    """`batch` whose second view is x again with `pad` more masked columns on the left: the
    same tokens at the same position ids, so the two views differ by arithmetic alone."""
    B = batch.x_ids.shape[0]
    ids = torch.cat([batch.x_ids[:, :1].expand(B, pad), batch.x_ids], 1)
    mask = torch.cat([torch.zeros_like(batch.x_mask[:, :1]).expand(B, pad), batch.x_mask], 1)
    return dataclasses.replace(batch, cx_ids=ids, cx_mask=mask)


# --- forks and harm: the tokens that carry a wrong answer -------------------------------------

def _tops(model, tok, prompts: list[str], y: list[int], limit: int | None) -> np.ndarray:
    """2 N: the top token of each prompt view at every position of response y."""
    dev = model_device(model)
    resp = torch.tensor([y], device=dev)
    b = views(tok, prompts[:1], prompts[1:], resp, torch.ones_like(resp), limit)
    got = two_views(model, b, layers=False)
    return np.stack([got.top_x[0], got.top_c[0]])


def _runner_up(model, tok, prompt: str, y: list[int], limit: int | None) -> np.ndarray:
    """N: the second most likely token of view `prompt` at every position of response y."""
    dev = model_device(model)
    resp = torch.tensor([y], device=dev)
    ids, mask = encode(tok, [prompt], limit, len(y))
    got = view_pass(model, ids.to(dev), mask.to(dev), resp, torch.ones_like(resp), False)
    return got.logp[0].topk(2, dim=-1).indices[:, 1].cpu().numpy()


def _continue(model, tok, prompt: str, prefix: list[int], max_new: int,
              limit: int | None) -> list[int]:
    """`prefix`, then the greedy continuation of the view `prompt` (up to max_new in all)."""
    stops = stop_ids(tok, model)
    if len(prefix) >= max_new or (prefix and prefix[-1] in stops):
        return prefix[:max_new]
    dev = model_device(model)
    ids, mask = encode(tok, [prompt], limit, max_new)
    ids = torch.cat([ids, torch.tensor([prefix], dtype=torch.long)], 1).to(dev)
    mask = torch.ones_like(ids)
    more, m = sample(model, ids, mask, max_new - len(prefix), stops, pad_id(tok), 0.0)
    return prefix + more[0][m[0].bool()].tolist()


def _text(tok, y: list[int]) -> str:
    """A response's text as `evaluate` scores it (eos and padding stripped)."""
    ids = torch.tensor(y, dtype=torch.long).reshape(1, -1)
    return decode_responses(tok, ids, torch.ones_like(ids))[0][0]


def swap_forks(model, tok, task: Task, level, writer: str, donor: str, y: list[int],
               max_new: int, max_forks: int, limit: int | None, null_swaps: int = 0,
               rng: np.random.Generator | None = None) -> dict:
    """The response y that view `writer` (a prompt) wrote greedily, against view `donor`: its
    forks, and whether swapping the first fork's token for the donor's (then the next fork's,
    up to `max_forks`) and letting the writer continue makes it right. The null of that
    (`null_right`, `restored_null` its share): `null_swaps` positions drawn by `rng` among the
    response's non-fork tokens, each token swapped for the writer's own runner-up there and
    the writer continuing: how often one token changed anywhere else makes it right."""
    tops = _tops(model, tok, [writer, donor], y, limit)
    forks = np.flatnonzero(tops[0] != tops[1]).tolist()
    case: dict[str, Any] = {"n_forks": len(forks), "first_fork": forks[0] if forks else None,
            "forks": forks, "n_tokens": len(y), "response": _text(tok, y),
            "other_view_right": None, "restored": False, "forks_to_restore": None,
            "swaps": [], "null_at": [], "null_right": [], "restored_null": None}
    elsewhere = [t for t in range(len(y)) if t not in set(forks)]
    if null_swaps and elsewhere:
        rng = rng if rng is not None else np.random.default_rng(0)
        at = sorted(rng.choice(elsewhere, min(null_swaps, len(elsewhere)), replace=False)
                    .tolist())
        second = _runner_up(model, tok, writer, y, limit)
        for t in at:
            z = _continue(model, tok, writer, y[:t] + [int(second[t])], max_new, limit)
            case["null_at"].append(int(t))
            case["null_right"].append(bool(task.score(level, _text(tok, z)).won))
        case["restored_null"] = float(np.mean(case["null_right"]))
    if not forks:
        return case
    t = forks[0]
    case["before_fork"] = _text(tok, y[:t])
    case["writer_token"], case["donor_token"] = tok.decode([int(tops[0][t])]), \
        tok.decode([int(tops[1][t])])
    other = _continue(model, tok, donor, y[:t], max_new, limit)
    case["other_view_right"] = bool(task.score(level, _text(tok, other)).won)
    start = 0
    for k in range(1, max_forks + 1):
        tops = _tops(model, tok, [writer, donor], y, limit)
        later = [s for s in np.flatnonzero(tops[0] != tops[1]).tolist() if s >= start]
        if not later:
            break
        t = later[0]
        y = _continue(model, tok, writer, y[:t] + [int(tops[1][t])], max_new, limit)
        case["swaps"].append(t)
        if task.score(level, _text(tok, y)).won:
            case["restored"], case["forks_to_restore"] = k == 1, k
            break
        start = t + 1
    case["response_swapped"] = _text(tok, y)
    return case


def fork_cases(model, tok, task: Task, levels: list, context: str, max_cases: int = 16,
               max_forks: int = 4, seed: int = 0, null_swaps: int = 4) -> dict:
    """Greedy responses with and without c (`evaluate.play_levels`), scored by the task; for
    the first `max_cases` harm cases (right without c, wrong with c) and help cases, the forks,
    the swap test and its null of `null_swaps` random non-fork swaps a case (`swap_forks`;
    `<kind>_restored_null`: the share of those swaps that made a case right, case by case
    then averaged, beside `<kind>_restored`)."""
    task = task.for_tokenizer(tok)
    no_c = play_levels(model, tok, task, levels, None, 0.0, seed)
    with_c = play_levels(model, tok, task, levels, context, 0.0, seed)
    w0, w1 = no_c["won"].astype(bool), with_c["won"].astype(bool)
    max_new, limit = max_response_tokens(task), context_limit(model)
    out: dict[str, Any] = {"correct_no_c": float(w0.mean()), "correct_c": float(w1.mean()),
                           "n_harm": int((w0 & ~w1).sum()), "n_help": int((~w0 & w1).sum())}
    for kind, where, src in (("harm", w0 & ~w1, with_c), ("help", ~w0 & w1, no_c)):
        cases = []
        for i in np.flatnonzero(where)[:max_cases]:
            lv = levels[i]
            x, cx = task.prompt(lv), task.prompt(lv, task.context(lv, context))
            writer, donor = (cx, x) if kind == "harm" else (x, cx)
            case = swap_forks(model, tok, task, lv, writer, donor, src["ids"][i], max_new,
                              max_forks, limit, null_swaps,
                              np.random.default_rng([seed, int(i), int(kind == "help")]))
            cases.append({"item": int(i), "unit": task.unit(lv), **case})
        out[kind] = cases
        done = [c["forks_to_restore"] is not None for c in cases]
        out[f"{kind}_restored"] = float(np.mean([c["restored"] for c in cases])) \
            if cases else None
        out[f"{kind}_restored_within"] = float(np.mean(done)) if cases else None
        nulls = [c["restored_null"] for c in cases if c["restored_null"] is not None]
        out[f"{kind}_restored_null"] = float(np.mean(nulls)) if nulls else None
    return out


# --- the command: checkpoints, samples, summaries --------------------------------------------

THIRDS = ("first", "middle", "last")


def thirds_of(mask_B_N: np.ndarray) -> np.ndarray:
    """B N: 0, 1, 2 for the first, middle and last third of each response (t / its length)."""
    n = mask_B_N.sum(1, keepdims=True).clip(min=1)
    return np.minimum(3 * np.arange(mask_B_N.shape[1])[None] // n, 2)


PARTS = ("first token", "answer", "end")  # `parts_of`: where in a response, by what it is


def answer_tokens(tok, task: Task, levels: list, resp_B_N: torch.Tensor,
                  mask_B_N: np.ndarray) -> np.ndarray | None:
    """B N: the response tokens whose text lies in the span the task's scorer reads
    (`Task.answer_span` of the response as `evaluate` scores it: eos and padding stripped); a
    token counts where its characters overlap the span (eos and special tokens have none).
    None where the task names no span for any response."""
    out = np.zeros(mask_B_N.shape, bool)
    named = False
    for i, (lv, row) in enumerate(zip(levels, resp_B_N.tolist())):
        body = [t for t, m in zip(row, mask_B_N[i]) if m]
        text = _text(tok, body)
        span = task.answer_span(lv, text)
        if span is None:
            continue
        named = True
        ends = [len(_text(tok, body[:t + 1])) for t in range(len(body))]
        for t, (a, b) in enumerate(zip([0, *ends[:-1]], ends)):
            out[i, t] = b > a and a < span[1] and b > span[0]
    return out if named else None


def parts_of(mask_B_N: np.ndarray, answer_B_N: np.ndarray | None) -> list[np.ndarray | None]:
    """B N masks of `PARTS`: each response's first token, its answer tokens (`answer_tokens`;
    None where the task names none) and its last token (eos where it stopped)."""
    n = mask_B_N.sum(1)
    t = np.arange(mask_B_N.shape[1])[None]
    first = mask_B_N & (t == 0)
    end = mask_B_N & (t == (n[:, None] - 1))
    return [first, None if answer_B_N is None else answer_B_N & mask_B_N, end]


def _means(values_B_N: np.ndarray, keep_B_N: np.ndarray, units: list, n_boot: int = 1000
           ) -> tuple[float | None, list]:
    """Token mean of `values` over `keep`, with its 95% cluster-bootstrap interval by unit."""
    s, k = (values_B_N * keep_B_N).sum(1), keep_B_N.sum(1)
    if k.sum() == 0:
        return None, [None, None]
    if not n_boot:  # a monitor's mean while training: the interval is the command's
        return float(s.sum() / k.sum()), [None, None]
    boots = [s[i].sum() / max(k[i].sum(), 1) for i in cluster_indices(units, n_boot, 0)]
    return float(s.sum() / k.sum()), [float(v) for v in percentile_ci(np.array(boots))]


def summarise(c: TwoViews, ctrl: TwoViews, floor: TwoViews, units: list, n_boot: int = 1000,
              answer_B_N: np.ndarray | None = None) -> dict:
    """Token means of the effect, its control and its floor overall, per third, per part
    (`PARTS`: first token, answer tokens `answer_B_N`, end) and by position (with `n_boot`
    cluster-bootstrap resamples for the intervals; 0: none); per layer through the lens."""
    m, third = c.mask, thirds_of(c.mask)
    parts = parts_of(m, answer_B_N)
    series = {"kl": c.kl, "kl_control": ctrl.kl, "kl_floor": floor.kl,
              "flip": c.flip.astype(float), "flip_control": ctrl.flip.astype(float)}
    out: dict[str, Any] = {"overall": {}, "thirds": {}, "parts": {}, "ci95": {},
                           "by_position": {}}
    for name, v in series.items():
        out["overall"][name], out["ci95"][name] = _means(v, m, units, n_boot)
        per = [_means(v, m & (third == k), units, n_boot) for k in range(3)]
        out["thirds"][name] = [p[0] for p in per]
        out["ci95"][f"{name}_thirds"] = [p[1] for p in per]
        per = [(None, [None, None]) if keep is None else _means(v, keep, units, n_boot)
               for keep in parts]
        out["parts"][name] = [p[0] for p in per]
        out["ci95"][f"{name}_parts"] = [p[1] for p in per]
        n = m.sum(0)
        out["by_position"][name] = [float(x) for x in (v * m).sum(0) / n.clip(min=1)]
    out["parts"]["n_tokens"] = [None if keep is None else int(keep.sum()) for keep in parts]
    out["by_position"]["n"] = m.sum(0).tolist()
    if c.lens_kl is not None:
        # the lens arrays come together, in both comparisons (`compare`)
        assert ctrl.lens_kl is not None and c.lens_top_x is not None \
            and c.lens_top_c is not None
        forks = c.flip
        part = c.part
        out["depth"] = {
            "lens_kl": [float((k * m).sum() / m.sum()) for k in c.lens_kl],
            "lens_kl_control": [float((k * m).sum() / m.sum()) for k in ctrl.lens_kl],
            "lens_flip": [float(((a != b) & m).sum() / m.sum())
                          for a, b in zip(c.lens_top_x, c.lens_top_c)],
            "settle_x": float(c.settle_x[m].mean()), "settle_c": float(c.settle_c[m].mean()),
            "part": float(np.nanmean(part[forks])) if forks.any() else None,
            "part_counts": [int((part[forks] == k).sum()) for k in range(len(c.lens_kl))]}
    return out


def example(tok, c: TwoViews, ctrl: TwoViews, resp_B_N: torch.Tensor, units: list) -> dict:
    """The response with the largest summed effect, token by token (the heat map's row)."""
    i = int(c.kl.sum(1).argmax())
    n = int(c.mask[i].sum())
    word = lambda ids: [tok.decode([int(t)]) for t in ids[:n]]  # noqa: E731
    out = {"item": i, "unit": units[i], "tokens": word(resp_B_N[i].tolist()),
           "kl": c.kl[i, :n].tolist(), "kl_control": ctrl.kl[i, :n].tolist(),
           "flip": c.flip[i, :n].tolist(), "top_x": word(c.top_x[i]), "top_c": word(c.top_c[i])}
    if c.lens_kl is not None:
        out["part"] = [None if np.isnan(v) else int(v) for v in c.part[i, :n]]
        out["lens_kl"] = c.lens_kl[:, i, :n].tolist()
    return out


def _joined(parts: list[TwoViews]) -> TwoViews:
    """Chunks of items as one, positions padded to the longest (mask False there)."""
    N = max(p.kl.shape[-1] for p in parts)

    def cat(name):
        arrays = [getattr(p, name) for p in parts]
        if arrays[0] is None:
            return None
        widths = [(0, 0)] * (arrays[0].ndim - 1)
        return np.concatenate([np.pad(a, [*widths, (0, N - a.shape[-1])]) for a in arrays],
                              axis=-2)

    return TwoViews(**{f.name: cat(f.name) for f in dataclasses.fields(TwoViews)})


def effect_views(model, tok, task: Task, levels: list, context: str, seed: int = 0,
                 temperature: float = 1.0, batch: int = 16, layers: bool = False
                 ) -> tuple[TwoViews, TwoViews, TwoViews, torch.Tensor, list[str]]:
    """The model's own samples y ~ g(.|x) (a generator seeded `seed`, `batch` items at a time)
    through the no-c view against the c view, the control's view [c', x] and the floor's
    layout: (c, control, floor, resp_B_N, texts). The same arguments give the same samples, so
    two checkpoints (or two steps of one run) are read on the same items under one policy."""
    task = task.for_tokenizer(tok)
    gen = torch.Generator(model_device(model)).manual_seed(seed)
    max_new, limit = max_response_tokens(task), context_limit(model)
    parts: dict[str, list[TwoViews]] = {"c": [], "control": [], "floor": []}
    resp_rows, texts = [], []
    for s in bar(range(0, len(levels), batch), "lens", unit="batch"):
        chunk = levels[s: s + batch]
        b, said, _ = onpolicy_batch(model, tok, task, chunk, context, max_new, temperature,
                                    gen, limit)
        wrong = [task.prompt(lv, task.control_context(levels, s + j, context))
                 for j, lv in enumerate(chunk)]
        x = view_pass(model, b.x_ids, b.x_mask, b.resp, b.resp_mask, layers)
        for name, other in (("c", b), ("control", with_prompts(b, tok, wrong, limit)),
                            ("floor", floor_batch(b))):
            y = view_pass(model, other.cx_ids, other.cx_mask, b.resp, b.resp_mask,
                          layers and name != "floor")
            parts[name].append(compare(model, x, y, b.resp_mask))
        resp_rows += list(b.resp.cpu())
        texts += said
    c, ctrl, floor = (_joined(parts[k]) for k in ("c", "control", "floor"))
    N = c.kl.shape[1]
    resp = torch.stack([torch.nn.functional.pad(r, (0, N - len(r))) for r in resp_rows])
    return c, ctrl, floor, resp, texts


def lens_checkpoint(model, tok, task: Task, levels: list, context: str, cfg: LensConfig
                    ) -> dict:
    """One checkpoint's entry: its own samples y ~ g(.|x) through both views, the control
    and the floor (`summarise`), the example response, and the forks of its harm cases."""
    c, ctrl, floor, resp, texts = effect_views(model, tok, task, levels, context, cfg.seed,
                                               cfg.temperature, cfg.batch, cfg.layers)
    task = task.for_tokenizer(tok)
    units = [task.unit(lv) for lv in levels]
    answer = answer_tokens(tok, task, levels, resp, c.mask)
    return {"n_items": len(levels), "n_units": n_units(units), "n_tokens": int(c.mask.sum()),
            **summarise(c, ctrl, floor, units, answer_B_N=answer),
            "example": example(tok, c, ctrl, resp, units),
            "forks": fork_cases(model, tok, task, levels, context, cfg.max_cases,
                                cfg.max_forks, cfg.seed, cfg.null_swaps),
            "responses": texts}


REGIONS = ("all", *THIRDS)  # a summary's columns: every response token, then each third
SERIES = ("kl", "kl_control", "kl_floor", "flip", "flip_control")
DEPTH_LISTS = ("lens_kl", "lens_kl_control", "lens_flip", "part_counts")  # per layer
DEPTH_NUMBERS = ("settle_x", "settle_c", "part")


def arrays_of(entry: dict, layers: list[str] | None = None) -> Arrays:
    """One checkpoint's lens entry (as `lens_checkpoint` gives it, or as a report holds it)
    as labelled arrays: each series of `SERIES` by region (`REGIONS`: all, then each third),
    its interval `<series>_ci95` (region, bound), by part (`<series>_parts`, part: `PARTS`,
    with `<series>_parts_ci95`) and by position (`<series>_by_position`, with
    `n_by_position`); through the logit lens (`layers`, the report's labels) `lens_kl`,
    `lens_kl_control`, `lens_flip` and `part_counts` on (layer,), `settle_x`, `settle_c` and
    `part` as numbers; the counts as numbers. `attrs`: the example, the forks and the
    responses. A report's null (a part no response has) is NaN."""
    regions, bound = {"region": REGIONS}, ("lo", "hi")
    out: dict[str, Labelled] = {}

    def put(name, values, dims, coords=None):
        out[name] = Labelled(as_float(values), dims, coords or {}, name)

    positions = {"position": tuple(range(len(entry["by_position"]["n"])))}
    for name in SERIES:
        put(name, [entry["overall"][name], *entry["thirds"][name]], ("region",), regions)
        put(f"{name}_ci95", [entry["ci95"][name], *entry["ci95"][f"{name}_thirds"]],
            ("region", "bound"), {**regions, "bound": bound})
        if "parts" in entry:  # older reports lack the parts
            put(f"{name}_parts", entry["parts"][name], ("part",), {"part": PARTS})
            put(f"{name}_parts_ci95", entry["ci95"][f"{name}_parts"], ("part", "bound"),
                {"part": PARTS, "bound": bound})
        put(f"{name}_by_position", entry["by_position"][name], ("position",), positions)
    put("n_by_position", entry["by_position"]["n"], ("position",), positions)
    if "parts" in entry:
        put("n_tokens_parts", entry["parts"]["n_tokens"], ("part",), {"part": PARTS})
    depth = entry.get("depth")
    if depth:
        labels = list(layers or [])[:len(depth["lens_kl"])]  # a shallower one's: a prefix
        if len(labels) != len(depth["lens_kl"]):
            raise UsageError(f"the lens entry reads {len(depth['lens_kl'])} layers and "
                             f"{len(labels)} labels were given for them: pass the report's "
                             "`layers`")
        for name in DEPTH_LISTS:
            put(name, depth[name], ("layer",), {"layer": labels})
        for name in DEPTH_NUMBERS:
            put(name, depth[name], ())
    for name in ("n_items", "n_units", "n_tokens"):
        put(name, entry[name], ())
    return Arrays(out, {k: entry.get(k) for k in ("example", "forks", "responses")})


def _padded(parts: dict[str, Arrays]) -> Arrays:
    """Checkpoints' `arrays_of` stacked on `checkpoint`, the per-position arrays padded with
    NaN to the longest response (positions past a checkpoint's longest: no token) and a
    shallower model's layers to the deepest's (a field an entry lacks: NaN)."""
    return stack_ragged(parts, "checkpoint", ("position", "layer"))


def effect(model, tok, task: Task | str, levels: list | int, context: str, **options
           ) -> Arrays:
    """The core, on a model in memory (a transformers causal LM and its `tok`): its own
    samples y ~ g(.|x) read through both views, the wrong-c control and the floor, summarised
    as the command summarises a checkpoint (`lens_checkpoint`), as labelled arrays
    (`arrays_of`). `task` a Task or its name (its defaults); `levels` its items or how many
    (its test split, drawn with `seed`); `options` the command's (`LensConfig`: seed,
    temperature, layers, max_cases, max_forks, null_swaps, batch)."""
    allowed = {"seed", "temperature", "layers", "max_cases", "max_forks", "null_swaps",
               "batch"}
    if set(options) - allowed:
        raise UsageError(f"lens.effect takes the options {sorted(allowed)}, not "
                         f"{sorted(set(options) - allowed)}")
    cfg = LensConfig(**options)
    validate(cfg)
    task, levels = task_and_items(task, levels, "test", cfg.seed)
    check_tokenizer(tok)
    entry = lens_checkpoint(model, tok, task, levels, context, cfg)
    n = model.config.num_hidden_layers if cfg.layers else 0
    return arrays_of(entry, ["embed", *map(str, range(n))] if cfg.layers else None)


def effects(models: Mapping[str, Any], tok, task: Task | str, levels: list | int,
            context: str, **options) -> Arrays:
    """`effect` of several models ({name: model}) on the same items, samples seed and c',
    stacked on a leading `checkpoint` dimension (per-position arrays padded with NaN to the
    longest response)."""
    if not models:
        raise UsageError("lens.effects takes at least one model: {name: model}")
    return _padded({name: effect(m, tok, task, levels, context, **options)
                    for name, m in models.items()})


def report_arrays(report: reports.LensReport | dict) -> Arrays:
    """A lens report's entries as the core's labelled arrays (`arrays_of`), stacked on
    `checkpoint` (the report's result keys), labelled by the report's `layers`."""
    report = reports.as_report(report, reports.LensReport)
    return _padded({name: arrays_of(e.to_json(), list(report.layers))
                    for name, e in report.results.items()})


def effect_summary(model, tok, task: Task, levels: list, context: str, seed: int = 0,
                   temperature: float = 1.0, batch: int = 16) -> dict[str, float | None]:
    """The lens's headline in one flat dict, cheap enough to log while training: per series
    (`SERIES`) its token mean over all response tokens (`kl`) and per third (`kl_first`,
    `kl_middle`, `kl_last`), exactly the `overall` and `thirds` the command reports for the
    same model, items, seed, temperature and batch (no logit lens, no forks, no intervals)."""
    c, ctrl, floor, _, _ = effect_views(model, tok, task, levels, context, seed, temperature,
                                        batch, layers=False)
    task = task.for_tokenizer(tok)
    units = [task.unit(lv) for lv in levels]
    s = summarise(c, ctrl, floor, units, n_boot=0)
    return {f"{name}{'' if r == 'all' else '_' + r}": v for name in SERIES
            for r, v in zip(REGIONS, [s["overall"][name], *s["thirds"][name]])}


def monitor(model, tok, task: Task, context: str | None = None, n_items: int = 8,
            seed: int = 0) -> dict[str, float | None]:
    """`effect_summary` of a model being trained, in eval mode (its mode restored), on the
    first `n_items` held-out items (`task.levels("test", n_items, seed)`, as the command's
    --n-levels and --seed pick them), with the command's temperature and batch: what
    `python -m nca_interp.lens CKPT --n-levels n_items --seed seed` reports as `overall` and
    `thirds` for the same weights. What the training loops log (`train.distill --lens-every`,
    `ContextReturnCallback(lens_every=...)`)."""
    task = task.for_tokenizer(tok)
    context = context or task.default_context
    defaults: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(LensConfig)}
    was_training = model.training
    model.eval()
    try:
        return effect_summary(model, tok, task, task.levels("test", n_items, seed), context,
                              seed, defaults["temperature"], defaults["batch"])
    finally:
        model.train(was_training)




DEMO = ("sokoban_base", "sokoban_opd", "sokoban_nca")  # what the bare command line reads


def pick_steps(run_dir: str, picks: list[str]) -> list[tuple[int, str]]:
    """(step, folder) of a distillation run at `picks` (`trajectory.checkpoints_of`'s steps:
    0 is the checkpoint the run started from): step numbers, `mid` (the saved step nearest
    half the last, the earlier on a tie), `final`, or `all`; in step order, each once."""
    ckpts = checkpoints_of(run_dir)
    saved = dict(ckpts)
    final = ckpts[-1][0]
    chosen = set()
    for pick in picks:
        if pick == "all":
            chosen |= set(saved)
        elif pick == "final":
            chosen.add(final)
        elif pick == "mid":
            later = [st for st in saved if st > 0] or [0]
            chosen.add(min(later, key=lambda st: (abs(st - final / 2), st)))
        elif pick.isdigit() and int(pick) in saved:
            chosen.add(int(pick))
        else:
            raise UsageError(f"--over-training {pick!r} is not a step of {run_dir} (its steps: "
                             f"{', '.join(map(str, saved))}); name steps, mid, final or all")
    return [(st, saved[st]) for st in sorted(chosen)]


def over_training(entries: list[tuple[int, str, dict]]) -> dict:
    """One run's summary against step: each series' token means as step x region arrays
    (`REGIONS`), their intervals (step x region x bound), the per-position means (step x
    position, None past a step's longest response) and the greedy correct rates, from the
    (step, label, entry) of each of its checkpoints in step order."""
    out: dict[str, Any] = {
        "step": [st for st, _, _ in entries], "checkpoint": [lb for _, lb, _ in entries],
           "region": list(REGIONS), "ci95": {}, "by_position": {},
           "dims": {"<series>": ["step", "region"], "ci95": ["step", "region", "bound"],
                    "by_position": ["step", "position"], "forks": ["step"]}}
    es = [e for _, _, e in entries]
    N = max(len(e["by_position"]["kl"]) for e in es)
    for name in SERIES:
        out[name] = [[e["overall"][name], *e["thirds"][name]] for e in es]
        out["ci95"][name] = [[e["ci95"][name], *e["ci95"][f"{name}_thirds"]] for e in es]
        rows = [e["by_position"][name] for e in es]
        out["by_position"][name] = [row + [None] * (N - len(row)) for row in rows]
    out["forks"] = {k: [e["forks"][k] for e in es]
                    for k in ("correct_no_c", "correct_c", "n_harm", "n_help")}
    return out


def _plan(cfg: LensConfig) -> tuple[list[tuple[str | None, int | None, str]], list[str]]:
    """What to read, before any work: (run name or None, step or None, folder) per checkpoint,
    and the folders the task and context are read from."""
    if cfg.over_training is not None and not any(cfg.over_training):
        raise UsageError("--over-training names steps: 0, mid, final, all or step numbers "
                         "(e.g. 0,mid,final); leave it out for the lens of each folder")
    if not cfg.over_training:
        paths = with_initial_checkpoints(analysis.checkpoint_paths(cfg))
        return [(None, None, p) for p in paths], paths
    runs = analysis.checkpoint_paths(cfg)
    names = [Path(r).name for r in runs]
    if len(set(names)) < len(names):
        raise UsageError(f"two runs named {names} share a folder name; --over-training labels "
                         "its lines by run folder name: rename one")
    plan = [(r, st, p) for r in runs for st, p in pick_steps(r, cfg.over_training)]
    for r, st, p in plan:  # a moved start or step is named before any checkpoint is read
        if st == 0 and not Path(p).is_dir():
            raise UsageError(f"{r}'s run_config.json records {p} as the model it started from "
                             "(its step 0), which is not there: restore it there, or drop 0 "
                             "from --over-training")
        verify_folder(p)
    named: list[tuple[str | None, int | None, str]] = [(Path(r).name, st, p)
                                                        for r, st, p in plan]
    return named, runs


def run(cfg: LensConfig | None = None, /, **fields) -> reports.LensReport:
    """The lens report (nothing written), results keyed by checkpoint: `run(LensConfig(...))`
    or `run(ckpt=[...], task=..., ...)`. With `over_training`, each folder is a run read at
    those steps (results keyed `<run> step <n>`) and `over_training[run]` holds the summary
    against step (`over_training`)."""
    cfg = analysis.config(LensConfig, cfg, fields)
    validate(cfg)
    plan, sources = _plan(cfg)
    folders_read = list(dict.fromkeys(p for _, _, p in plan))
    found, ctx = resolve_task_and_context(sources, cfg.task, cfg.context, cfg.task_options)
    check_same_tokenizers(folders_read)
    levels = found.levels("test", cfg.n_levels, cfg.seed)
    # what c' is, before any checkpoint is read (a c' the task refuses stops the command here)
    control = control_record(found, levels, ctx, [found.control_context(levels, i, ctx)
                                                  for i in range(len(levels))])
    device = str(resolve_device(cfg.device))
    results: dict[str, dict] = {}
    folders: dict[str, str] = {}
    done: dict[str, dict] = {}
    depth: int | None = None
    steps: dict[str, list] = {}
    for run_name, st, p in bar(plan, "lens", unit="ckpt"):
        name = analysis.label_of(p, results) if run_name is None else f"{run_name} step {st}"
        key = str(Path(p).resolve())
        if key not in done:  # runs from one base share its step 0: read once
            model, tok = load_checkpoint(p, device=device)
            done[key] = lens_checkpoint(model, tok, found, levels, ctx, cfg)
            depth = max(depth or 0, model.config.num_hidden_layers)  # the deepest's names:
            del model  # each shallower one's layers are a prefix of them
        folders[name], results[name] = p, done[key]
        if run_name is not None:
            steps.setdefault(run_name, []).append((st, name, done[key]))
    layers = ["embed", *map(str, range(depth or 0))] if cfg.layers else []
    extra = {"over_training": {r: over_training(es) for r, es in steps.items()}} \
        if steps else {}
    return analysis.make_report(cfg, task=found.name, context=ctx, paths=folders,
                                results=results, layers=layers, checkpoints=folders_read,
                                data=analysis.data_record(found, levels), control=control,
                                **extra)


def _cell(v) -> str:
    if v is None:
        return "       -"
    return f"{v:>8.1e}" if abs(v) < 1e-4 else f"{v:>8.4f}"  # a floor is ~1e-8, not -0.0000


def show(report: reports.LensReport | dict) -> None:
    """Where c acts (thirds, against its control and floor), the lens summary and the forks."""
    report = reports.as_report(report, reports.LensReport)
    cfg = report.config
    print(f"task={report.task} context={report.context} items={cfg['n_levels']} "
          f"samples at temperature {cfg['temperature']}; KL(q_x || q_c) per response token, "
          "nats; control: a wrong c' of c's form; floor: the no-c view in another layout")
    if report.control:
        print(format_c_prime(report.control))
    w = max(12, *(len(n) for n in report.results))
    head = " ".join(f"{h:>8}" for h in ("all", *THIRDS))
    print(f"{'checkpoint':<{w}} {'series':<13} {head}")
    for name, e in report.results.items():
        for key in ("kl", "kl_control", "kl_floor", "flip", "flip_control"):
            cells = [e.overall[key], *e.thirds[key]]
            print(f"{name:<{w}} {key:<13} " + " ".join(_cell(v) for v in cells))
    if any(getattr(e, "parts", None) for e in report.results.values()):
        print(f"by part ({' / '.join(PARTS)}; the answer: the tokens the task's scorer reads):")
        for name, e in report.results.items():
            if e.parts:
                for key in ("kl", "kl_control", "kl_floor"):
                    print(f"{name:<{w}} {key:<13} " + " ".join(_cell(v)
                                                               for v in e.parts[key]))
    above = [name for name, e in report.results.items() if reports.null_role(
        zip([e.overall["kl_floor"], *e.thirds["kl_floor"]],
            [e.overall["kl"], *e.thirds["kl"]])) == "reference"]
    if above:  # a null at or above the measured value bounds nothing from below
        print(f"kl_floor sits at or above kl for {', '.join(above)}: there it is a reference, "
              "not a floor (c acts no more than arithmetic does)")
    if report.layers:
        print("logit lens (layer indices into: " + " ".join(report.layers) + "):")
        for name, e in report.results.items():
            d = e.depth
            print(f"  {name:<{w}} settles x {d['settle_x']:.2f}, c {d['settle_c']:.2f}; views "
                  f"part at {'-' if d['part'] is None else format(d['part'], '.2f')} (forks); "
                  "lens KL by layer " + " ".join(f"{v:.3f}" for v in d["lens_kl"]))
    for run_name, ot in (report.over_training or {}).items():
        print(f"over training, {run_name} (KL with c / with c' / floor; thirds of KL with c):")
        for i, st in enumerate(ot["step"]):
            cells = [ot["kl"][i][0], ot["kl_control"][i][0], ot["kl_floor"][i][0],
                     *ot["kl"][i][1:]]
            print(f"  step {st:>6} " + " ".join(_cell(v) for v in cells))
    print("forks (greedy): harm = right without c, wrong with c; restored = swapping the first "
          "fork's token for the other view's makes it right; null = one token swapped where "
          "the views agree (the writer's runner-up) makes it right")
    for name, e in report.results.items():
        f = e.forks
        print(f"  {name:<{w}} correct_no_c {f['correct_no_c']:.3f} correct_c "
              f"{f['correct_c']:.3f} harm cases {f['n_harm']} help cases {f['n_help']}")
        for kind in ("harm", "help"):
            if f.get(f"{kind}_restored") is not None:
                null = f.get(f"{kind}_restored_null")
                print(f"    {kind}: restored {f[f'{kind}_restored']:.2f} by the first fork, "
                      f"null {'-' if null is None else format(null, '.2f')}")
        for kind in ("harm", "help"):
            for case in f[kind]:
                print(f"    {kind} item {case['item']}: first fork at {case['first_fork']} "
                      f"({case.get('writer_token', '')!r} -> {case.get('donor_token', '')!r}), "
                      f"restored {case['restored']}, forks to restore "
                      f"{case['forks_to_restore']}")


def figures(report: reports.LensReport | dict) -> dict:
    """{"": effect against position per checkpoint with the control band, "tokens": the
    example response's token heat map per checkpoint, and with --over-training
    "over_training": the effect by region against step, a line per run}."""
    from nca_interp.lens_plots import over_training_figure, position_figure, token_figure

    report = reports.as_report(report, reports.LensReport)
    out = {"": position_figure(report), "tokens": token_figure(report)}
    if report.over_training:
        out["over_training"] = over_training_figure(report)
    return out


def main(argv: list[str] | LensConfig | None = None) -> dict:
    cfg = parse_config(LensConfig, argv, __doc__, positional="ckpt")
    return execute(analysis.command_defaults(sys.modules[__name__], cfg))


def execute(cfg: LensConfig) -> dict:
    """The command on a config object: see `analysis.execute`."""
    return analysis.execute(sys.modules[__name__], cfg)


if __name__ == "__main__":
    sys.exit(entry(main, parsed=PARSED))
