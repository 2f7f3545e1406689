"""Causal localisation of context-induced degradation: activation patching, head ablation of
context reading, and the logit lens of both views.

    python -m nca_interp.patching                                # embedded Sokoban OPD
    python -m nca_interp.patching runs/sysprompt_opd_s0 --out figures/sysprompt/patching_opd

Cases come from a paired greedy evaluation of the checkpoint: harm cases (right without the
context c, wrong with it) and, as controls, cases right both ways. For a harm case the source
run is the no-context prompt x and the destination run the context prompt [c, x], both
teacher-forced on the no-context response up to the first token where the two greedy responses
part (t*). That position decides the answer; the metric there is the logit difference
LD = logit(no-context answer token) - logit(context answer token), normalised per case so that
0 = the destination run unchanged and 1 = the source run's value. x and the response prefix are
a common suffix of both prompts: left padding lines them up column by column ("aligned
positions"); the context tokens have no counterpart.

Interventions (every one a batched forward over all cases, reusing cached activations):
  resid     the residual stream after each layer (`blocks.{li}.hook_resid_post`), patched at the
            aligned positions of a group (all, x, response prefix, the deciding position) and at
            every single aligned position (the layer x position heatmap)
  head      each head's output (`blocks.{li}.attn.hook_z`) at all aligned positions
  mlp       each MLP's output (`blocks.{li}.hook_mlp_out`) at all aligned positions
  reverse   the same three, context -> no-context (0 = the no-context run unchanged, 1 = the
            context run's value): what the context view injects
  ablate    per head, attention *to* the context tokens removed (the pattern's context columns
            zeroed and each row renormalised): which heads' reading of c causes the harm. The
            top heads together (and as many random heads, the null) are then ablated while the
            answer is generated: the recovered-harm rate (harm cases that become right) beside
            the broken-control rate (controls that become wrong)
  lens      per layer, final norm + unembedding of the residual at the deciding position in both
            views: KL(no-context || context) and the rank of the right answer token
Intervals: 95% bootstrap over cases. TransformerLens 4's `transformer_lens.patching` helpers run
clean and corrupted prompts of one length without attention masks; our two views differ by the
context prefix and are batched with left padding, which needs masks, so the sweeps below are
our own loops over hooks (`bridge.run_with_hooks` with `attention_mask`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from einops import rearrange, reduce

from nca_interp.bootstrap import iid_indices, percentile_ci
from nca_interp.checkpoint import verify_folder
from nca_interp.cli import check_writable, entry, parse_config, to_dict, write_json
from nca_interp.evaluate import TASK_OPTIONS_HELP, max_response_tokens
from nca_interp.hooks import attached, attached_hooks, boot_bridge
from nca_interp.layer_sim import context_token_mask, shared_suffix_mask
from nca_interp.rollout import encode, pad_id
from nca_interp.runs import resolve_task_and_context
from nca_interp.tasks import Task

GROUPS = ("all", "x", "response", "decide")


@dataclass
class Cases:
    """Harm (and control) cases as two left-padded batches that end on the deciding position."""

    src_ids: torch.Tensor  # B W0   x + y0[:t*]
    src_mask: torch.Tensor
    dst_ids: torch.Tensor  # B W1   [c, x] + y0[:t*]
    dst_mask: torch.Tensor
    good: torch.Tensor  # B      the no-context answer token y0[t*]
    bad: torch.Tensor  # B      the context answer token y1[t*]
    groups: dict[str, torch.Tensor]  # name -> B W0 mask over source columns (aligned only)
    ctx_B_W1: torch.Tensor  # context tokens of the destination prompt
    dst_prompt: tuple[torch.Tensor, torch.Tensor]  # [c, x] alone, to generate from
    levels: list
    t_star: list[int]

    def __len__(self) -> int:
        return len(self.levels)


@torch.no_grad()
def greedy(bridge, ids: torch.Tensor, mask: torch.Tensor, max_new: int, stop: list[int],
           pad: int, hooks: list | None = None) -> list[list[int]]:
    """Greedy responses through the bridge (with `hooks` active at every step), eos included."""
    out = [[] for _ in range(len(ids))]
    done = torch.zeros(len(ids), dtype=torch.bool)
    stops = torch.tensor(stop)
    with attached(bridge):
        for _ in range(max_new):
            logits = bridge.run_with_hooks(ids, attention_mask=mask, fwd_hooks=hooks or [])
            tok = logits[:, -1].argmax(-1)
            for i in range(len(ids)):
                if not done[i]:
                    out[i].append(int(tok[i]))
            done |= torch.isin(tok, stops)
            if bool(done.all()):
                break
            ids = torch.cat([ids, torch.where(done, torch.full_like(tok, pad), tok)[:, None]], 1)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
    return out


def score(task: Task, tok, level, tokens: list[int]) -> bool:
    body = [t for t in tokens if t != tok.eos_token_id]
    return task.score(level, tok.decode(body, skip_special_tokens=True)).won


def find_cases(bridge, task: Task, context: str, levels: list, max_cases: int,
               batch: int = 100) -> tuple[Cases | None, Cases | None, dict]:
    """Greedy both views over `levels`; build the harm cases and the both-right controls."""
    tok = bridge.tokenizer
    limit = int(bridge.cfg.n_ctx or 0) or None
    max_new = max_response_tokens(task)
    stop = [tok.eos_token_id]
    harm, control = [], []
    counts = {"levels": len(levels), "right_no_c": 0, "harm": 0, "both": 0}
    for i in range(0, len(levels), batch):
        chunk = levels[i: i + batch]
        x = encode(tok, [task.prompt(lv) for lv in chunk], limit, max_new)
        cx = encode(tok, [task.prompt(lv, task.context(lv, context)) for lv in chunk], limit,
                    max_new)
        y0 = greedy(bridge, *x, max_new, stop, pad_id(tok))
        y1 = greedy(bridge, *cx, max_new, stop, pad_id(tok))
        for lv, a, b in zip(chunk, y0, y1):
            r0, r1 = score(task, tok, lv, a), score(task, tok, lv, b)
            counts["right_no_c"] += r0
            if r0 and not r1:
                counts["harm"] += 1
                t = next((j for j, (u, v) in enumerate(zip(a, b)) if u != v), min(len(a),
                                                                                  len(b)) - 1)
                harm.append((lv, a, b, t))
            elif r0 and r1:
                counts["both"] += 1
                t = next((j for j, (u, v) in enumerate(zip(a, b)) if u != v), 0)
                control.append((lv, a, b, t))
    build = lambda rows: build_cases(tok, task, context, rows[:max_cases], limit) \
        if rows else None  # noqa: E731
    return build(harm), build(control), counts


def build_cases(tok, task: Task, context: str, rows: list, limit: int | None) -> Cases:
    pad = pad_id(tok)
    src_text, dst_text, contexts, prefixes = [], [], [], []
    for lv, a, _b, t in rows:
        contexts.append(task.context(lv, context))
        src_text.append(task.prompt(lv))
        dst_text.append(task.prompt(lv, contexts[-1]))
        prefixes.append(a[:t])
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
        is_ctx = torch.tensor(context_token_mask(tok, text, c))
        end = W1 - int(t)
        ctx[i, end - len(is_ctx): end] = is_ctx
    return Cases(src_ids, src_mask, dst_ids, dst_mask,
                 torch.tensor([a[t] for _, a, _, t in rows]),
                 torch.tensor([b[t] if t < len(b) else tok.eos_token_id for _, _, b, t in rows]),
                 groups, ctx, (dst_p, dst_pm), [r[0] for r in rows], t_star.tolist())


@torch.no_grad()
def last_logits(bridge, ids, mask, hooks=()) -> torch.Tensor:
    with attached(bridge):
        return bridge.run_with_hooks(ids, attention_mask=mask, fwd_hooks=list(hooks))[:, -1]


def logit_diff(logits_B_V: torch.Tensor, cases: Cases) -> torch.Tensor:
    return logits_B_V.gather(1, cases.good[:, None])[:, 0] - \
        logits_B_V.gather(1, cases.bad[:, None])[:, 0]


def patch_hook(source: torch.Tensor, where_B_W: torch.Tensor, head: int | None = None):
    """A hook that writes `source` (activations of the other view, width W) into the last W
    columns of the running view where `where_B_W` is set (optionally one head of hook_z)."""
    W = source.shape[1]

    def hook(act, hook):
        tail = act[:, -W:] if head is None else act[:, -W:, head]
        src = source if head is None else source[:, :, head]
        m = where_B_W.reshape(*where_B_W.shape, *([1] * (src.dim() - 2)))
        tail.copy_(torch.where(m, src, tail))
        return act

    return hook


def ablate_context_hook(ctx_B_K: torch.Tensor, heads: list[int]):
    """Remove attention to the context columns for `heads`, renormalising each query's row
    (rows that only see context keep their pattern)."""
    def hook(pattern, hook):
        K = pattern.shape[-1]
        ctx = torch.nn.functional.pad(ctx_B_K, (0, K - ctx_B_K.shape[1]))[:, None, None, :]
        for h in heads:
            p = pattern[:, h: h + 1]
            kept = p * ~ctx
            total = kept.sum(-1, keepdim=True)
            pattern[:, h: h + 1] = torch.where(total > 0, kept / total.clamp(min=1e-12), p)
        return pattern

    return hook


def normalised(patched: torch.Tensor, start: torch.Tensor, end: torch.Tensor) -> np.ndarray:
    """(patched - start) / (end - start) per case; NaN where the two runs barely differ."""
    den = end - start
    out = (patched - start) / den
    return torch.where(den.abs() > 1e-2, out, torch.nan).numpy()


def bootstrap(per_case_N_C: np.ndarray, n_boot: int = 2000, seed: int = 0) -> dict:
    """Mean over cases per cell and its 95% bootstrap interval (cases resampled)."""
    x = np.asarray(per_case_N_C, float)
    boots = np.nanmean(x[iid_indices(len(x), n_boot, seed)], axis=1)
    lo, hi = percentile_ci(boots, axis=0, nan=True)
    return {"mean": np.nanmean(x, 0).tolist(), "lo": lo.tolist(), "hi": hi.tolist()}


@torch.no_grad()
def cache_of(bridge, ids, mask, names: list[str]) -> dict[str, torch.Tensor]:
    with attached(bridge):
        _, cache = bridge.run_with_cache(ids, attention_mask=mask, names_filter=names)
    return {n: cache[n].detach().clone() for n in names}


def sweep(bridge, cases: Cases, direction: str, stats: dict) -> dict:
    """Patch resid (per layer x group and x offset), heads and MLPs in one direction."""
    L, H = bridge.cfg.n_layers, bridge.cfg.n_heads
    names = [f"blocks.{li}.hook_resid_post" for li in range(L)] + \
        [f"blocks.{li}.attn.hook_z" for li in range(L)] + [f"blocks.{li}.hook_mlp_out"
                                                          for li in range(L)]
    fwd = direction == "forward"
    run_ids, run_mask = (cases.dst_ids, cases.dst_mask) if fwd else (cases.src_ids,
                                                                     cases.src_mask)
    other = cache_of(bridge, *((cases.src_ids, cases.src_mask) if fwd else
                               (cases.dst_ids, cases.dst_mask)), names)
    ld_src = logit_diff(last_logits(bridge, cases.src_ids, cases.src_mask), cases)
    ld_dst = logit_diff(last_logits(bridge, cases.dst_ids, cases.dst_mask), cases)
    start, end = (ld_dst, ld_src) if fwd else (ld_src, ld_dst)
    W0 = cases.src_ids.shape[1]

    def effect(name, where, head=None):
        src = other[name][:, -W0:]  # the aligned columns: all of x's run, [c, x]'s last W0
        stats["forwards"] += 1
        ld = logit_diff(last_logits(bridge, run_ids, run_mask,
                                    [(name, patch_hook(src, where, head))]), cases)
        return normalised(ld, start, end)

    out = {"ld_src": ld_src.tolist(), "ld_dst": ld_dst.tolist()}
    out["resid_groups"] = {g: np.stack([effect(f"blocks.{li}.hook_resid_post", cases.groups[g])
                                        for li in range(L)], 1) for g in GROUPS}
    K = min(W0, 32)  # the last K aligned columns (offsets from the deciding position)
    offs = []
    for li in range(L):
        row = []
        for k in range(1, K + 1):
            where = torch.zeros_like(cases.groups["all"])
            where[:, W0 - k] = cases.groups["all"][:, W0 - k]
            row.append(effect(f"blocks.{li}.hook_resid_post", where))
        offs.append(np.stack(row, 1))
    out["resid_offsets"] = rearrange(np.stack(offs), "l n k -> n l k")
    heads = [effect(f"blocks.{li}.attn.hook_z", cases.groups["all"], h)
             for li in range(L) for h in range(H)]
    out["heads"] = rearrange(np.stack(heads), "(layer h) n -> n layer h", layer=L)
    out["mlp"] = np.stack([effect(f"blocks.{li}.hook_mlp_out", cases.groups["all"])
                           for li in range(L)], 1)
    return out


def ablation(bridge, cases: Cases) -> np.ndarray:
    """N L H: normalised effect of removing each head's attention to the context."""
    L, H = bridge.cfg.n_layers, bridge.cfg.n_heads
    ld_src = logit_diff(last_logits(bridge, cases.src_ids, cases.src_mask), cases)
    ld_dst = logit_diff(last_logits(bridge, cases.dst_ids, cases.dst_mask), cases)
    out = np.zeros((len(cases), L, H))
    for li in range(L):
        for h in range(H):
            ld = logit_diff(last_logits(bridge, cases.dst_ids, cases.dst_mask,
                                        [(f"blocks.{li}.attn.hook_pattern",
                                          ablate_context_hook(cases.ctx_B_W1, [h]))]), cases)
            out[:, li, h] = normalised(ld, ld_dst, ld_src)
    return out


def generate_with_ablation(bridge, task: Task, cases: Cases, heads: list[tuple[int, int]]
                           ) -> float:
    """Fraction of cases answered right (greedy, [c, x] view) with the context reading of
    `heads` removed."""
    tok = bridge.tokenizer
    ids, mask = cases.dst_prompt
    W = ids.shape[1]
    # context columns of the bare prompt: the cases' columns shifted by their prefix length
    ctx = torch.stack([torch.roll(r, int(t))[-W:] if t else r[-W:]
                       for r, t in zip(cases.ctx_B_W1, cases.t_star)])
    by_layer: dict[int, list[int]] = {}
    for li, h in heads:
        by_layer.setdefault(li, []).append(h)
    hooks = [(f"blocks.{li}.attn.hook_pattern", ablate_context_hook(ctx, hs))
             for li, hs in by_layer.items()]
    outs = greedy(bridge, ids, mask, max_response_tokens(task), [tok.eos_token_id],
                  pad_id(tok), hooks)
    return float(np.mean([score(task, tok, lv, o) for lv, o in zip(cases.levels, outs)]))


def logit_lens(bridge, cases: Cases) -> dict:
    """Per layer (embedding first), decoded distributions of both views at the deciding
    position: KL(no-context || context) and the rank of the right answer token."""
    L = bridge.cfg.n_layers
    names = ["hook_embed"] + [f"blocks.{li}.hook_resid_post" for li in range(L)]
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


@dataclass
class PatchingConfig:
    ckpt: list[str] = field(default_factory=list, metadata={
        "help": "checkpoint folders, each patched on its own harm cases; default: the "
                "embedded Sokoban OPD"})
    task: str | None = field(default=None, metadata={"help": "default: from the run config"})
    task_options: list[str] | None = field(default=None, metadata={"help": TASK_OPTIONS_HELP})
    context: str | None = field(default=None, metadata={"help": "default: the run's context"})
    n_levels: int = field(default=1000, metadata={"help": "held-out levels searched for cases"})
    max_cases: int = field(default=64, metadata={"help": "harm (and control) cases patched",
                                                 "check": ">=1"})
    top_heads: int = field(default=4, metadata={"help": "most harmful heads ablated together"})
    seed: int = field(default=0, metadata={"help": "held-out set and random-head seed"})
    out: str = field(default="runs/demo/patching", metadata={"help": "output stem"})
    png: bool = field(default=False, metadata={"help": "also write PNGs (needs kaleido)"})
    threads: int = field(default=2, metadata={"help": "torch threads"})


def summarise(arr: np.ndarray) -> dict:
    return {"per_case": np.asarray(arr).tolist(), **bootstrap(arr)}


def run(ckpt: str | None = None, *, task: str | None = None, task_options=None,
        context: str | None = None, n_levels: int = 1000, max_cases: int = 64,
        top_heads: int = 4, seed: int = 0) -> dict:
    """The patching report of one checkpoint as a Python value (what `main` prints)."""
    from nca_interp.assets import embedded

    path = str(verify_folder(ckpt or embedded("sokoban_opd")))
    found, ctx = resolve_task_and_context([path], task, context, task_options)
    bridge = boot_bridge(path)
    found = found.for_tokenizer(bridge.tokenizer)
    levels = found.levels("test", n_levels, seed)
    t0 = time.time()
    harm, control, counts = find_cases(bridge, found, ctx, levels, max_cases)
    report = {"checkpoint": path, "task": found.name, "context": ctx, "counts": counts,
              "n_layers": bridge.cfg.n_layers, "n_heads": bridge.cfg.n_heads}
    if control is not None:
        report["control"] = {"n": len(control), "lens": {
            k: summarise(v) for k, v in logit_lens(bridge, control).items()}}
    if harm is None:
        report["note"] = "no harm case (right without c, wrong with c) among these levels"
        return report
    stats = {"forwards": 0}
    t1 = time.time()
    fwd, rev = sweep(bridge, harm, "forward", stats), sweep(bridge, harm, "reverse", stats)
    sweep_s = time.time() - t1
    abl = ablation(bridge, harm)
    report["harm"] = {"n": len(harm), "t_star": harm.t_star,
                      "ld_no_c": fwd["ld_src"], "ld_c": fwd["ld_dst"]}
    for tag, res in (("forward", fwd), ("reverse", rev)):
        report[tag] = {"resid_groups": {g: summarise(v) for g, v in
                                        res["resid_groups"].items()},
                       "resid_offsets": summarise(res["resid_offsets"]),
                       "heads": summarise(res["heads"]),
                       "mlp": summarise(res["mlp"])}
    report["ablation"] = summarise(abl)
    mean_abl = np.nanmean(abl, 0)  # L H
    order = np.argsort(-mean_abl, axis=None)
    H = bridge.cfg.n_heads
    ranked = [(int(i // H), int(i % H)) for i in order]
    rng = np.random.default_rng(seed)
    rows = []
    for k in sorted({1, 2, min(top_heads, len(ranked)), len(ranked)}):
        rand = [ranked[j] for j in rng.choice(len(ranked), k, replace=False)]
        rows.append({"k": k, "heads": [f"L{li}H{h}" for li, h in ranked[:k]],
                     "recovered_harm": generate_with_ablation(bridge, found, harm, ranked[:k]),
                     "recovered_harm_random": generate_with_ablation(bridge, found, harm, rand),
                     "broken_control": None if control is None else
                     1 - generate_with_ablation(bridge, found, control, ranked[:k])})
    report["top_heads"] = rows
    report["lens"] = {k: summarise(v) for k, v in logit_lens(bridge, harm).items()}
    L = bridge.cfg.n_layers
    report["cost"] = {"cases": len(harm), "patched_forwards": stats["forwards"],
                      "layer_head_sweep_forwards": 2 * L * H + 4, "sweep_s": sweep_s,
                      "total_s": time.time() - t0}
    assert attached_hooks(bridge) == 0
    return report


def fmt(v) -> str:
    return "  -  " if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:5.2f}"


def format_report(r: dict) -> str:
    c = r["counts"]
    lines = [f"{Path(r['checkpoint']).name}: task={r['task']} context={r['context']}  levels "
             f"{c['levels']}, right without c {c['right_no_c']}, harm cases {c['harm']}, "
             f"both right {c['both']}"]
    if "harm" not in r:
        return "\n".join(lines + [r.get("note", "")])
    L, H = r["n_layers"], r["n_heads"]
    lines.append(f"patched {r['harm']['n']} harm cases (0 = run unchanged, 1 = the other view's "
                 "value; mean [95% bootstrap])")
    for tag, what in (("forward", "no-context -> context (restores the right answer)"),
                      ("reverse", "context -> no-context (injects the harm)")):
        lines.append(f"  residual stream, {what}:")
        lines.append("    layer " + " ".join(f"{g:>18}" for g in GROUPS))
        rg = r[tag]["resid_groups"]
        for layer in range(L):
            cells = [f"{fmt(rg[g]['mean'][layer])} [{fmt(rg[g]['lo'][layer])},"
                     f"{fmt(rg[g]['hi'][layer])}]" for g in GROUPS]
            lines.append(f"    {layer:>5} " + " ".join(f"{x:>18}" for x in cells))
        mlp = r[tag]["mlp"]
        lines.append("    mlp out: " + "  ".join(f"L{i} {fmt(mlp['mean'][i])}"
                                                 for i in range(L)))
        hd = np.array(r[tag]["heads"]["mean"])
        top = np.argsort(-np.nan_to_num(hd, nan=-9), axis=None)[:4]
        lines.append("    heads (hook_z): " + ", ".join(f"L{i // H}H{i % H} {hd.flat[i]:.2f}"
                                                        for i in top))
    ab = np.array(r["ablation"]["mean"])
    top = np.argsort(-np.nan_to_num(ab, nan=-9), axis=None)[:6]
    lines.append("  removing a head's attention to c (1 = the no-context value): " +
                 ", ".join(f"L{i // H}H{i % H} {ab.flat[i]:.2f}" for i in top))
    lines.append("  ablating the top heads' context reading while answering:")
    lines.append(f"    {'k':>3} {'heads':<28} {'recovered harm':>15} {'random heads':>13} "
                 f"{'broken controls':>16}")
    for row in r["top_heads"]:
        lines.append(f"    {row['k']:>3} {','.join(row['heads'])[:28]:<28} "
                     f"{row['recovered_harm']:>15.2f} {row['recovered_harm_random']:>13.2f} "
                     f"{fmt(row['broken_control']):>16}")
    kl = r["lens"]["kl"]["mean"]
    lines.append("  logit lens at the deciding position, KL(no c || c) per layer (embed first): "
                 + " ".join(f"{v:.2f}" for v in kl))
    if "control" in r:
        ckl = r["control"]["lens"]["kl"]["mean"]
        lines.append("    controls (both right):                                 " +
                     " ".join(f"{v:.2f}" for v in ckl))
    rk = r["lens"]["rank_c"]["mean"]
    lines.append("  rank of the right answer in the context view per layer: " +
                 " ".join(f"{v:.1f}" for v in rk))
    cost = r["cost"]
    lines.append(f"  cost: {cost['patched_forwards']} batched patched forwards over "
                 f"{cost['cases']} cases in {cost['sweep_s']:.1f} s (sweeps), "
                 f"{cost['total_s']:.1f} s in all")
    return "\n".join(lines)


def figures(report: dict) -> dict:
    """{"positions", "heads", "lens"} of one checkpoint's `run` report (none without harm
    cases)."""
    from nca_interp.plots import patching_figures

    return patching_figures(report)


def main(argv: list[str] | None = None) -> dict:
    from nca_interp.plots import write_figure

    cfg = parse_config(PatchingConfig, argv, __doc__, positional="ckpt")
    check_writable(cfg.out)
    torch.set_num_threads(cfg.threads)
    for p in cfg.ckpt:
        verify_folder(p)
    results, written = {}, []
    for p in cfg.ckpt or [None]:
        r = run(p, task=cfg.task, task_options=cfg.task_options, context=cfg.context,
                n_levels=cfg.n_levels, max_cases=cfg.max_cases, top_heads=cfg.top_heads,
                seed=cfg.seed)
        name = Path(r["checkpoint"]).name
        results[name] = r
        print(format_report(r) + "\n")
        for suffix, fig in figures(r).items():
            written += write_figure(fig, f"{cfg.out}_{name}_{suffix}", png=cfg.png)
    report = {"config": to_dict(cfg), "results": results}
    write_json(Path(cfg.out).with_suffix(".json"), report)
    print("wrote", Path(cfg.out).with_suffix(".json"), *written)
    return report


if __name__ == "__main__":
    sys.exit(entry(main))
