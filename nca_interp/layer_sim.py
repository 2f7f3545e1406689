"""Layerwise similarity of hidden states with vs without the privileged context.

    python -m nca_interp.layer_sim                       # embedded Sokoban base / OPD / NCA
    python -m nca_interp.layer_sim runs/base runs/opd runs/nca --context plan --out figures/x
    python -m nca_interp.layer_sim runs/mine --beside figures/facts/layer_sim.json --out x

`--beside REPORT` places checkpoints beside a report already written (a published setting's,
whose students are not on this machine): only they and the random-init null are computed, on
the report's items, positions and responses; its first checkpoint (the base) is recomputed and
must agree within 1e-3 at every layer before the report's other entries are carried into the
new report unchanged (as the file holds them: the check shows the items and code agree, and the
new report records the file's sha256). The random-init null is always recomputed, and the new
report names the layers where the report's differs (a null written by older code).

Every model, the baselines included, is teacher-forced on the *same* responses y (default
`--responses reference`: the task's own answers, the solver's plan or the correct option; `base`:
the first checkpoint's greedy responses; `own`: each model its own greedy responses, which makes
models incomparable) under both prompts, x and [c, x], and the residual streams are compared
layer by layer (`hook_embed`, then `blocks.{i}.hook_resid_post`) at one set of positions:
  --at response    y's tokens
  --at generating  the positions that produce y (the last prompt token, then y_1..y_{N-1}):
                   what the distillation losses train. NCA minimises the divergence of the two
                   views' outputs here, so similarity at these positions is expected of it, not
                   a finding
  --at prompt      x's tokens, which both views share (left padding aligns them) and which no
                   loss touches directly: similarity here is the control
Reported per layer:
  cos          mean over examples of the mean token cosine (and its std over examples;
               cos_se its standard error with the examples clustered by the task's unit, so
               a fact asked in several phrasings counts once)
  cos_centred  the same after subtracting the layer's mean hidden state (pooled over views),
               so the large shared direction that makes raw cosines ~1 does not count
  cos_centred_view  each view centred on its own mean: whether the token-to-token variation
               is shared, with a constant between-view offset removed as well
  offset_share the between-view offset's share of the pooled-centred variance,
               (||m0 - m1||^2 / 4) / (that + mean within-view variance). Near 1, the pooled
               centred cosine goes to -1 whatever the tokens do: each view's vectors sit on
               its own side of the pooled mean. A random-init model shows exactly this
               (near-uniform attention gives every position of a view about the same average
               of its prefix's values, so a long prompt that differs between the views becomes
               a per-view offset that grows layer by layer, while its tiny random embeddings
               carry little token-to-token variation); a pretrained model's views differ
               mostly token by token (offset_share near 0). Both are in every report
  cos_other    the anisotropy floor of `cos`: the same statistic between the no-context view
               of one item and the context view of *another* (the next item of its batch, token
               k against token k). Hidden states share a large common direction, so raw cosines
               are high between any two inputs; a similarity claim ("cos >= 0.997") is read
               against this floor, not against 0
  cka          linear CKA between the two views' token matrices
  cka_debiased the same with the unbiased HSIC estimator (Song et al. 2012; Kornblith et al.'s
               debiased CKA): linear CKA is biased upwards for few tokens in many dimensions
               (two independent random matrices score well above 0), the debiased one is ~0
               there
  ctx_attn     attention mass on the context tokens in the [c, x] view, mean over heads
  ctx_attn_ratio  per layer x head: that mass divided by the context's share of the keys each
               query sees (1 = uniform attention; a random-init model sits near 1), the
               number that says which heads *read* the context
A random-init model of the same config and the base/teacher are added as baselines.
"""

from __future__ import annotations

import logging
import math
import sys

from nca_interp.cli import parse_early
from nca_interp.configs import LayerSimConfig

if __name__ == "__main__":  # --help and a bad flag answered before torch is imported
    PARSED = parse_early(LayerSimConfig, __doc__, positional="ckpt")

import dataclasses
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nca_interp import analysis
from nca_interp.bootstrap import n_units
from nca_interp.checkpoint import load_checkpoint, save_checkpoint, verify_folder
from nca_interp.cli import (
    entry,
    parse_config,
    validate,
)
from nca_interp.errors import UsageError
from nca_interp.evaluate import max_response_tokens
from nca_interp.fsio import WriteFault
from nca_interp.hooks import as_bridge, boot_bridge, capture
from nca_interp.labelled import Arrays, Labelled, as_float, stack
from nca_interp.masks import context_token_mask, shared_suffix_mask
from nca_interp.models import context_limit, resolve_device
from nca_interp.progress import bar
from nca_interp.reports import LayerSim, LayerSimReport, as_report, null_role
from nca_interp.rollout import encode, pad_id, sample, stop_ids, target_batch
from nca_interp.runs import (
    check_same_tokenizers,
    resolve_task_and_context,
    with_initial_checkpoints,
)
from nca_interp.similarity import (  # noqa: F401 - the statistics, read as layer_sim.X too
    OTHER_NEXT,
    OTHER_UNIT,
    STATS,
    StreamedSimilarity,
    clustered_se,
    context_attention,
    debiased_cka,
    linear_cka,
    other_partner,
    similarity_by_layer,
)
from nca_interp.tasks import Task, make_task
from nca_interp.tokenizer import check_tokenizer

__all__ = ["DEMO", "compare", "entry_of", "execute", "figures", "format_heads",
           "format_table", "layer_labels", "main", "null_line", "report_arrays", "run", "show",
           "similarity", "task_and_items"]

log = logging.getLogger(__spec__.name if __spec__ else __name__)  # python -m too


def reference_responses(tok, task: Task, levels: list) -> tuple[torch.Tensor, torch.Tensor]:
    """The task's own answers (the solver's plan, the correct option), eos included."""
    return target_batch(tok, [task.target(lv) for lv in levels])


def greedy_responses(path: str | Path, task: Task, levels: list, batch: int, device: str
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """A checkpoint's greedy no-context responses (right-padded, eos included)."""
    model, tok = load_checkpoint(path, device=device)
    task = task.for_tokenizer(tok)
    max_new = max_response_tokens(task)
    rows, masks = [], []
    for i in range(0, len(levels), batch):
        chunk = levels[i: i + batch]
        x_ids, x_mask = encode(tok, [task.prompt(lv) for lv in chunk], context_limit(model),
                               max_new)
        r, m = sample(model, x_ids.to(device), x_mask.to(device), max_new,
                      stop_ids(tok, model), pad_id(tok), temperature=0.0)
        rows += list(r.cpu())
        masks += list(m.cpu())
    N = max(len(r) for r in rows)
    resp = torch.stack([torch.nn.functional.pad(r, (0, N - len(r)), value=pad_id(tok))
                        for r in rows])
    mask = torch.stack([torch.nn.functional.pad(m, (0, N - len(m))) for m in masks])
    del model
    return resp, mask


def report_arrays(report: LayerSimReport | dict) -> Arrays:
    """A layer_sim report as the labelled arrays `compare` returns (less `cos_item`, which no
    report keeps): its entries stacked on `checkpoint` (the results' keys) with the report's
    layer labels; NaN where an entry lacks a statistic (a report written before it existed,
    or a carried entry). `report_arrays(analysis.load("figures/x/layer_sim.json")).to_frame()`
    is the report's tidy table, every field with its labels."""
    report = as_report(report, LayerSimReport)
    layers = list(report.layers)
    entries = {name: e.to_json() for name, e in report.results.items()}
    heads = max((len(row) for e in entries.values() for row in e.get("ctx_attn_ratio") or []),
                default=0)

    def values(e: dict, key: str, shape: tuple[int, ...]) -> np.ndarray:
        v = e.get(key)
        return np.full(shape, np.nan) if v is None else as_float(v)

    parts = {}
    for name, e in entries.items():
        by_layer, blocks = {"layer": layers}, {"layer": layers[1:]}
        arrays = {k: Labelled(values(e, k, (len(layers),)), ("layer",), by_layer, k)
                  for k in STATS}
        for k in ("ctx_attn", "ctx_attn_ratio_layer"):
            arrays[k] = Labelled(values(e, k, (len(layers) - 1,)), ("layer",), blocks, k)
        arrays["ctx_attn_ratio"] = Labelled(values(e, "ctx_attn_ratio", (len(layers) - 1, heads)),
                                            ("layer", "head"), blocks, "ctx_attn_ratio")
        arrays |= {k: Labelled(as_float(e.get(k)), (), {}, k)
                   for k in (*ENTRY_INTS, "mean_response_tokens")}
        parts[name] = Arrays(arrays, {"responses": e.get("responses")})
    return stack(parts, "checkpoint")


POSITIONS = ("response", "generating", "prompt")


def layer_labels(n_layers: int) -> list[str]:
    """The labels of the per-layer lists, in every report, figure and labelled array: the
    embeddings, then each block's output."""
    return ["embed"] + [str(i) for i in range(n_layers)]


def task_and_items(task: Task | str, levels: list | int, split: str = "test", seed: int = 0
                   ) -> tuple[Task, list]:
    """A task name builds the task (`make_task`, its defaults); a count draws that many
    items of its `split` with `seed`, as the commands' --n-levels and --seed do. Items that are
    neither (0, -3, 2.5, "8", an empty list) are refused in one line."""
    if isinstance(levels, bool) or not isinstance(levels, (int, list, tuple)) or \
            (isinstance(levels, int) and levels < 1) or (not isinstance(levels, int)
                                                         and not levels):
        raise UsageError(f"levels is how many items to draw (a positive int, as --n-levels) "
                         f"or a non-empty list of the task's items, not {levels!r}")
    task = make_task(task) if isinstance(task, str) else task
    return task, task.levels(split, levels, seed) if isinstance(levels, int) else list(levels)


def similarity(model, task: Task | str, levels: list | int, context: str, tok=None,
               at: str = "response",
               responses: tuple[torch.Tensor, torch.Tensor] | None = None, batch: int = 100,
               other: str = OTHER_UNIT) -> Arrays:
    """The core: one model's two views x and [c, x] compared layer by layer, both teacher-forced
    on the same `responses` (default: the task's own answers), as labelled arrays.

    `model`: a transformers causal LM (with its `tok`; wrapped on a copy) or a TransformerBridge;
    `task` a Task or its name, `levels` its items or how many (`task_and_items`).
    Positions compared (`at`): `response` (y's tokens), `generating` (the last prompt token and
    y_1..y_{N-1}: the positions whose outputs are y, which the distillation losses train) or
    `prompt` (the tokens of x, which both views share and no loss touches directly). The
    statistics of `STATS` and `ctx_attn`, `ctx_attn_ratio_layer` are labelled (layer,),
    `ctx_attn_ratio` (layer, head), `cos_item` (layer, item: each item's mean token cosine,
    which `cos`, `cos_std` and `cos_se` summarise); counts are 0-d; `attrs` holds the
    responses as text and the items' units. Hooked passes on the model's device; statistics
    on the CPU."""
    if at not in POSITIONS:
        raise UsageError(f"at must be one of {POSITIONS}, not {at!r}")
    task, levels = task_and_items(task, levels)
    if tok is not None:
        check_tokenizer(tok)
    bridge = as_bridge(model, tok)
    tok = tok if tok is not None else bridge.tokenizer
    task = task.for_tokenizer(tok)
    if responses is None:
        responses = reference_responses(tok, task, levels)
    limit = int(bridge.cfg.n_ctx or 0) or None
    spill = tempfile.TemporaryDirectory(prefix="layer_sim_")
    stats = StreamedSimilarity(Path(spill.name))
    n_positions = 0
    attn: dict[str, Any] = {"mass_L_H": 0.0, "ratio_L_H": 0.0, "n": 0.0}  # tensors once added
    for i in range(0, len(levels), batch):
        chunk = levels[i: i + batch]
        resp_all, rmask_all = responses[0][i: i + batch], responses[1][i: i + batch]
        N = int(rmask_all.sum(1).max())
        resp, rmask = resp_all[:, :N], rmask_all[:, :N]
        x_ids, x_mask = encode(tok, [task.prompt(lv) for lv in chunk], limit, N)
        contexts = [task.context(lv, context) for lv in chunk]
        cx_text = [task.prompt(lv, c) for lv, c in zip(chunk, contexts)]
        cx_ids, cx_mask = encode(tok, cx_text, limit, N)
        P, Pc = x_ids.shape[1], cx_ids.shape[1]
        if at == "response":
            sel0, sel1, m = slice(P, P + N), slice(Pc, Pc + N), rmask
        elif at == "generating":
            sel0, sel1, m = slice(P - 1, P - 1 + N), slice(Pc - 1, Pc - 1 + N), rmask
        else:
            K = min(P, Pc)  # x may be the longer prompt (c replaced a default system message)
            sel0, sel1 = slice(P - K, P), slice(Pc - K, Pc)
            m = shared_suffix_mask(x_ids, x_mask, cx_ids)[:, P - K:]
        a = capture(bridge, torch.cat([x_ids, resp], 1), torch.cat([x_mask, rmask], 1))
        b = capture(bridge, torch.cat([cx_ids, resp], 1), torch.cat([cx_mask, rmask], 1),
                    patterns=True)
        stats.add(a["resid"][:, :, sel0], b["resid"][:, :, sel1], m)
        n_positions += int(m.sum())
        key_ctx = torch.zeros(len(chunk), Pc + N)
        for j, (text, c) in enumerate(zip(cx_text, contexts)):
            is_ctx = context_token_mask(tok, text, c)
            key_ctx[j, Pc - len(is_ctx): Pc] = torch.tensor(is_ctx, dtype=key_ctx.dtype)
        qpos = torch.arange(sel1.start, sel1.stop)[None].expand(len(chunk), -1)
        part = context_attention(b["pattern"], key_ctx, torch.cat([cx_mask, rmask], 1), qpos, m)
        for k in attn:
            attn[k] = attn[k] + part[k]
    units = [task.unit(lv) for lv in levels]
    out = stats.result(units, other)
    spill.cleanup()
    n = max(attn["n"], 1.0)
    ratio_L_H = attn["ratio_L_H"] / n
    layers = layer_labels(len(out["cos"]) - 1)
    by_layer = {"layer": layers}
    arrays = {k: Labelled(as_float(out[k]), ("layer",), by_layer, k) for k in STATS}
    arrays["cos_item"] = Labelled(as_float(out["cos_item"]), ("layer", "item"), by_layer,
                                  "cos_item")
    blocks = {"layer": layers[1:]}
    arrays["ctx_attn"] = Labelled((attn["mass_L_H"] / n).mean(1).double().numpy(), ("layer",),
                                  blocks, "ctx_attn")
    arrays["ctx_attn_ratio"] = Labelled(ratio_L_H.double().numpy(), ("layer", "head"), blocks,
                                        "ctx_attn_ratio")
    arrays["ctx_attn_ratio_layer"] = Labelled(ratio_L_H.mean(1).double().numpy(), ("layer",),
                                              blocks, "ctx_attn_ratio_layer")
    counts = {"n_examples": len(levels), "n_units": n_units(units), "n_positions": n_positions,
              "mean_response_tokens": float(responses[1].float().sum(1).mean())}
    arrays |= {k: Labelled(as_float(v), (), {}, k) for k, v in counts.items()}
    return Arrays(arrays, {"responses": analysis.decoded(tok, responses[0], responses[1]),
                           "units": units, "at": at, "context": context, "other_pairs": other})


def compare(models, task: Task | str, levels: list | int, context: str, tok=None,
            at: str = "response",
            responses: tuple[torch.Tensor, torch.Tensor] | None = None, batch: int = 100
            ) -> Arrays:
    """`similarity` of several models on the same items and responses (default: the task's
    answers), stacked on a leading `checkpoint` dimension labelled by the keys of `models`
    ({name: transformers model or TransformerBridge}; one model alone is named "model")."""
    if not isinstance(models, Mapping):
        models = {"model": models}
    if not models:
        raise UsageError("compare takes at least one model: {name: model}")
    task, levels = task_and_items(task, levels)
    if tok is None:
        tok = as_bridge(next(iter(models.values()))).tokenizer
    check_tokenizer(tok)
    if responses is None:
        responses = reference_responses(tok, task.for_tokenizer(tok), levels)
    return stack({name: similarity(m, task, levels, context, tok, at, responses, batch)
                  for name, m in models.items()}, "checkpoint")


# a report's per-checkpoint entry: the arrays as lists, the counts as numbers
ENTRY_ARRAYS = (*STATS, "ctx_attn", "ctx_attn_ratio", "ctx_attn_ratio_layer")
ENTRY_INTS = ("n_examples", "n_units", "n_positions")


def entry_of(arrays: Arrays) -> dict:
    """One model's `similarity` as its report entry (`reports.LayerSim`): lists per layer,
    counts, the responses as text."""
    out: dict = {k: arrays[k].values.tolist() for k in ENTRY_ARRAYS}
    out |= {k: int(arrays[k].values) for k in ENTRY_INTS}
    out["mean_response_tokens"] = float(arrays["mean_response_tokens"].values)
    out["responses"] = arrays.attrs["responses"]
    return out


def layer_similarity(path: str | Path, task: Task, context: str, levels: list,
                     batch: int = 100, device: str = "cpu", at: str = "response",
                     responses: tuple[torch.Tensor, torch.Tensor] | None = None,
                     other: str = OTHER_UNIT) -> dict:
    """`similarity` of one checkpoint folder as its report entry, both views teacher-forced on
    the same `responses` (default: the checkpoint's own greedy ones)."""
    if at not in POSITIONS:
        raise UsageError(f"at must be one of {POSITIONS}, not {at!r}")
    bridge = boot_bridge(path, device, "stored")
    if responses is None:
        responses = greedy_responses(path, task.for_tokenizer(bridge.tokenizer), levels, batch,
                                     device)
    return entry_of(similarity(bridge, task, levels, context, None, at, responses, batch,
                               other))


def shared_responses(kind: str, first: str | Path, task: Task, levels: list, batch: int,
                     device: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    """What every model is teacher-forced on: `reference` the task's answers, `base` the first
    checkpoint's greedy responses, `own` None (each model its own)."""
    if kind == "reference":
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(verify_folder(first), local_files_only=True)
        return reference_responses(tok, task.for_tokenizer(tok), levels)
    if kind == "base":
        return greedy_responses(first, task, levels, batch, device)
    return None


def random_init_copy(path: str | Path, folder: Path) -> Path:
    """A random-init model with `path`'s config and tokenizer, saved to `folder`, built in the
    config's stored dtype (no float32 copy of a big model it does not need)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    cfg = AutoConfig.from_pretrained(path, local_files_only=True)
    dtype = getattr(cfg, "dtype", None) or getattr(cfg, "torch_dtype", None) or torch.float32
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    try:
        return save_checkpoint(folder, model, tok)
    except WriteFault as e:  # not --out: the system's temporary folder, which TMPDIR moves
        raise WriteFault(f"cannot write the random-init null's temporary copy of {path} under "
                         f"{folder.parent}: {e.remedy}; set TMPDIR to a folder with room (or "
                         "pass --baselines false)", e.errno, e.path) from None




DEMO = ("sokoban_base", "sokoban_opd", "sokoban_nca")  # what the bare command line compares


LEGEND = """Rows: checkpoints (random_init: the same architecture untrained, a reference for what
structure alone gives: not a floor, it can sit above a trained model's values); columns: the
embeddings, then each layer's output. Every value compares
a position's hidden state without c with the same position's with c, averaged over positions:
  cos               cosine (1 = the two views identical)
  cos_se            standard error of cos, items clustered by the task's unit (a level, a fact,
                    a group of your data): their noise
  cos_other         cosine between views of *different* items (of another unit): the
                    anisotropy null, a floor only where it sits below cos (a line under
                    its table names the checkpoints where it does not)
  cos_centred       cosine after removing the mean over both views
  cos_centred_view  cosine after removing each view's own mean (no constant offset)
  offset_share      share of the centred variance that is a constant offset between the views
  cka / cka_debiased  linear CKA across positions (debiased: unbiased HSIC, for few examples)
  ctx_attn_ratio_layer  attention mass on c / c's share of the visible keys (1 = uniform)
"""


def format_table(results: dict[str, dict], metric: str, layers: list[str]) -> str:
    if all(r.get(metric) is None for r in results.values()):
        return (f"{metric}: not in this report (written before the statistic existed; rerun "
                f"layer_sim to have it)")
    w = max(12, *(len(n) for n in results))
    lines = [f"{metric:<{w}} " + " ".join(f"{lab:>8}" for lab in layers)]
    for name, r in results.items():
        values = r.get(metric)  # None: a report written before the statistic existed
        lines.append(f"{name:<{w}} " + " ".join("       -" if v is None else f"{v:>8.4f}"
                                                for v in values or [None] * len(layers)))
    return "\n".join(lines)


def null_line(results: Mapping[str, LayerSim]) -> str:
    """Where the different-item null (`cos_other`) is a floor: the checkpoints whose cosine it
    reaches at some block are named, a reference there (`reports.null_role`; the embedding,
    where the views share their tokens, left out as the claims leave it out)."""
    above = [name for name, r in results.items() if r.cos_other is not None
             and null_role(zip(r.cos_other[1:], r.cos[1:])) == "reference"]
    if not above:
        return "cos_other sits below cos at every block of every checkpoint: a floor\n"
    return (f"cos_other sits at or above cos at some block of {', '.join(above)}: there it is a "
            "reference, not a floor\n")


def format_heads(results: Mapping[str, LayerSim], top: int = 6) -> str:
    """The heads that read the context most, relative to uniform attention (1.0)."""
    lines = ["context reading per head (attention mass on c / c's share of the visible keys; "
             "1 = uniform):"]
    for name, r in results.items():
        R = np.array(r.ctx_attn_ratio)
        order = np.argsort(-R, axis=None)[:top]
        cells = [f"L{i // R.shape[1]}H{i % R.shape[1]} {R.flat[i]:.2f}" for i in order]
        lines.append(f"  {name:<14} max {R.max():.2f}  median {np.median(R):.2f}  top: " +
                     ", ".join(cells))
    return "\n".join(lines)


def check_same_depth(paths: Sequence[str | Path]) -> None:
    """One layer_sim compares checkpoints of one depth: its report names one set of layers,
    and its random-init reference is the first checkpoint's architecture (a 3-layer model
    beside a 2-layer one had a value without a name, against a 2-layer null)."""
    from nca_interp.checkpoint import check_architecture, n_layers_of

    depths = {p: n_layers_of(check_architecture(verify_folder(p))) for p in paths}
    known = {p: n for p, n in depths.items() if n is not None}
    if len(set(known.values())) > 1:
        (a, n), (b, m) = next(iter(known.items())), next(
            (p, n2) for p, n2 in known.items() if n2 != next(iter(known.values())))
        raise UsageError(f"layer_sim compares checkpoints of one depth: {b} has {m} layers, "
                         f"{a} {n}; run it on each architecture's checkpoints apart")


def run(cfg: LayerSimConfig | None = None, /, **fields) -> LayerSimReport:
    """The layer-similarity report (an `analysis` report, results keyed by checkpoint name,
    random_init first): what `execute` prints and writes. `run(LayerSimConfig(...))` or
    `run(ckpt=[...], task=..., ...)`."""
    cfg = analysis.config(LayerSimConfig, cfg, fields)
    validate(cfg)
    if cfg.beside:
        return run_beside(cfg)
    paths = with_initial_checkpoints(analysis.checkpoint_paths(cfg))
    found, ctx = resolve_task_and_context(paths, cfg.task, cfg.context, cfg.task_options)
    check_same_tokenizers(paths)
    check_same_depth(paths)
    levels = found.levels("test", cfg.n_levels, cfg.seed)
    device, at, batch = str(resolve_device(cfg.device)), cfg.at, cfg.batch
    shared = shared_responses(cfg.responses, paths[0], found, levels, batch, device)
    results: dict[str, dict] = {}
    folders: dict[str, str | None] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if cfg.baselines:
            rnd = random_init_copy(paths[0], Path(tmp) / "random_init")
            results["random_init"] = layer_similarity(rnd, found, ctx, levels, batch, device,
                                                      at, shared)
            folders["random_init"] = None
        for p in bar(paths, "layer_sim", unit="ckpt"):
            name = analysis.label_of(p, results)
            folders[name] = p
            results[name] = layer_similarity(p, found, ctx, levels, batch, device, at, shared)
    n_layers = len(next(iter(results.values()))["cos"]) - 1
    return analysis.make_report(
        cfg, task=found.name, context=ctx, paths=folders, results=results, at=at,
        responses=cfg.responses,
        responses_from={"reference": f"the task's answers ({found.name} target)",
                        "base": f"greedy responses of {paths[0]}",
                        "own": "each model's own greedy responses"}[cfg.responses],
        layers=layer_labels(n_layers), checkpoints=paths,
        data=analysis.data_record(found, levels), other_pairs=OTHER_UNIT)


# --beside: the settings a report fixes, and how close a recomputed entry must come to it
BESIDE_FIELDS = ("task", "task_options", "context", "n_levels", "seed", "at", "responses")
BESIDE_ATOL = 1e-3  # threads, batch and device change float sums by ~1e-6; other items by >0.01
# the range each statistic a report carries beside can hold (`check_entries`): cosines and CKA
# by their definitions, shares and attention mass as fractions; the rest only finite
BESIDE_RANGE = {**{k: (-1.0, 1.0) for k in ("cos", "cos_other", "cos_centred",
                                            "cos_centred_view")},
                "cka": (0.0, 1.0), "cos_std": (0.0, 2.0), "offset_share": (0.0, 1.0),
                "ctx_attn": (0.0, 1.0), "ctx_attn_ratio_layer": (0.0, math.inf)}
BESIDE_COMPARED = ("cos", "cos_other", "cos_centred", "cos_centred_view", "cka",
                   "cka_debiased", "ctx_attn", "ctx_attn_ratio_layer")  # a report lacking one
# of the optional ones (older reports have no cos_other or cka_debiased) is compared without it


def beside_settings(cfg: LayerSimConfig, published: LayerSimReport) -> dict:
    """The report's values of the settings that decide its items and positions. A flag given
    with another value is refused: the new entries must stand on the report's items."""
    recorded = published.config
    defaults = LayerSimConfig()
    out = {}
    for name in BESIDE_FIELDS:
        theirs = recorded.get(name, getattr(defaults, name))
        if name == "task":
            theirs = published.task
        elif name == "context":
            theirs = published.context
        elif name == "responses":
            theirs = published.responses
        elif name == "at":
            theirs = published.at
        mine = getattr(cfg, name)
        if name == "task_options" and theirs is None and mine is not None and not (
                published.data or {}).get("task_options"):
            theirs = mine  # an older report that took its options from the runs' configs:
            # the user says them, and the base's recomputed entry checks that they were these
        named = code_named(mine, published) if name == "task_options" else {}
        if named and named == _parsed(mine, published):
            mine = theirs  # only the report's own scorer, which a report cannot name itself
        elif name == "task_options" and _only_its_code(mine, theirs, str(published.task)):
            mine = theirs  # the same, for an older report's config (no data record)
        if mine != getattr(defaults, name) and mine != theirs:
            raise UsageError(f"--{name.replace('_', '-')} {mine} differs from the report's "
                             f"{theirs} ({cfg.beside}); --beside measures on the report's "
                             f"settings: drop --{name.replace('_', '-')}")
        out[name] = theirs
    if not cfg.baselines:
        raise UsageError("--baselines false with --beside: the report's random-init null is "
                         "always recomputed (a carried one may predate this code); drop it")
    return out


def _parsed(options: list[str] | None, published: LayerSimReport) -> dict:
    """`--task-options` as typed values of the report's recorded task ({} without a record)."""
    from nca_interp.tasks import parse_task_options

    record = (published.data or {}).get("task_options")
    if not options or not isinstance(record, dict) or not record.get("name"):
        return {}
    return parse_task_options(record["name"], options)


def code_named(options: list[str] | None, published: LayerSimReport) -> dict:
    """The options of `options` that name code (a `FILE.py:fn` scorer) and equal what the
    report's task record holds: what this command lets the recorded task run."""
    from nca_interp.tasks import names_code

    record = (published.data or {}).get("task_options") or {}
    return {k: v for k, v in _parsed(options, published).items()
            if names_code(k, v) and record.get(k) == v}


def check_code(published: LayerSimReport, named: dict, where: str) -> None:
    """A report's task record naming code (its scorer) is refused unless this command names
    the same code: a report is data, never code."""
    from nca_interp.tasks import names_code

    record = (published.data or {}).get("task_options") or {}
    for key, value in record.items():
        if names_code(key, value) and key not in named:
            said = str(value).replace(",", "\\,")
            raise UsageError(f"{where} records the task's {key} {value!r}: code, which this "
                             "package runs only when this command names it (a report is data, "
                             f"never code). To run it, add --task-options {key}={said} (the "
                             f"report's own {key}; no other option may differ)")


def _only_its_code(mine: list[str] | None, theirs: list[str] | None, task: str) -> bool:
    """Whether `mine` names only code (a scorer) and each as `theirs` does."""
    from nca_interp.tasks import names_code, parse_task_options

    if not mine or not theirs:
        return False
    given, recorded = parse_task_options(task, mine), parse_task_options(task, theirs)
    return all(names_code(k, v) and recorded.get(k) == v for k, v in given.items())


def check_config_code(fixed: dict, given: list[str] | None, where: str) -> None:
    """The report's config.task_options are data too: one naming code (a scorer) is refused
    unless this command's --task-options names the same (without a data.task_options record,
    an older report's, they were passed on as if given here: the eighth probe's S2)."""
    from nca_interp.tasks import parse_task_options, refuse_recorded_code

    if not fixed["task_options"]:
        return
    theirs = parse_task_options(fixed["task"], fixed["task_options"])
    mine = parse_task_options(fixed["task"], given)
    refuse_recorded_code(theirs, {k: v for k, v in mine.items() if theirs.get(k) == v},
                         f"{where}'s config")


def _texts(v) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, str) for x in v)


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _text_or_none(v) -> bool:
    return v is None or isinstance(v, str)


def _dict_or_none(v) -> bool:
    return v is None or isinstance(v, dict)


# what --beside reads of a report besides its per-layer lists (`check_entries`), and its type
BESIDE_SHAPE = (
    ("config", lambda r: r.config, lambda v: isinstance(v, dict), "a mapping"),
    ("config.task_options", lambda r: r.config.get("task_options"),
     lambda v: v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v)),
     "a list of KEY=VALUE texts or null"),
    ("config.n_levels", lambda r: r.config.get("n_levels", 1),
     lambda v: _count(v) and v > 0, "a whole number above 0"),
    ("config.seed", lambda r: r.config.get("seed", 0), _count, "a whole number"),
    *((k, lambda r, k=k: getattr(r, k), lambda v: isinstance(v, str), "a text")
      for k in ("task", "context", "at", "responses", "responses_from")),
    ("layers", lambda r: r.layers, _texts, "a non-empty list of layer names (embed, 0, ...)"),
    ("checkpoints", lambda r: r.checkpoints, _texts, "a non-empty list of checkpoint folders"),
    ("other_pairs", lambda r: r.other_pairs, _text_or_none, "a text or null"),
    ("data", lambda r: r.data, _dict_or_none, "a mapping or null"),
    ("data.task_options", lambda r: (r.data or {}).get("task_options"), _dict_or_none,
     "a mapping or null"),
    ("data.prompts_sha256", lambda r: (r.data or {}).get("prompts_sha256"), _text_or_none,
     "a text or null"),
)


def check_shape(published: LayerSimReport, where: str) -> None:
    """Every field `--beside` reads holds the type layer_sim writes (a hand-edited report's
    `"layers": 999` failed deep inside as `object of type 'int' has no len()`): refused in one
    line naming the field and the file, before any work."""
    def damaged(name: str, value, want: str) -> UsageError:
        return UsageError(f"{where} is damaged: its {name} is {type(value).__name__} "
                          f"{str(value)[:40]!r}, not {want}; restore the report (git checkout, "
                          "or its own command) before placing anything beside it")

    for name, read, ok, want in BESIDE_SHAPE:
        value = read(published)
        if not ok(value):
            raise damaged(name, value, want)
    for key, run in published.runs.items():
        if not _text_or_none(run.path):
            raise damaged(f"runs[{key!r}].path", run.path, "a folder's path")
    for key, stats in published.results.items():
        for stat in ("n_examples", "n_positions"):
            if not _count(stats.get(stat)):
                raise damaged(f"results[{key!r}].{stat}", stats.get(stat), "a whole number")


def check_entries(published: LayerSimReport, where: str) -> None:
    """Every entry to be carried holds, for each compared statistic, a list of numbers (null
    where a value is undefined) as long as the report's other entries' lists: refused in one
    line naming the entry before any model pass, not after."""
    lengths: dict[str, int] = {}
    for name in published.results:
        if name != "random_init" and name not in published.runs:  # the null is recomputed
            raise UsageError(f"{where} is damaged: results entry {name!r} has no runs entry; "
                             "restore it (git checkout, or its own command)")
    for name, stats in published.results.items():
        for stat in ("cos", "cos_std", *BESIDE_COMPARED, "offset_share"):
            values = stats.get(stat)
            if values is None and stat in ("cos_other", "cka_debiased"):
                continue
            ok = isinstance(values, list) and all(
                v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))
                for v in values)
            if not ok or len(values) != lengths.setdefault(stat, len(values) if ok else -1):
                raise UsageError(f"{where}: results[{name!r}].{stat} is not a list of numbers "
                                 f"as long as the other entries'; restore the report (git "
                                 "checkout, or its own command) before placing anything beside "
                                 "it")
            lo, hi = BESIDE_RANGE.get(stat, (-math.inf, math.inf))
            bad = next((v for v in values if v is not None and not (
                math.isfinite(v) and lo - 1e-6 <= v <= hi + 1e-6)), None)
            if bad is not None:
                raise UsageError(f"{where}: results[{name!r}].{stat} holds {bad!r}, which "
                                 f"layer_sim never writes (a finite number in [{lo}, {hi}]); "
                                 "restore the report (git checkout, or its own command) before "
                                 "placing anything beside it")
        n, positions = stats.get("n_examples"), stats.get("n_positions")
        if isinstance(n, int) and isinstance(positions, int) and not (
                0 < n <= positions < 2 ** 53):
            raise UsageError(f"{where}: results[{name!r}] counts {n} examples over {positions} "
                             "positions, which layer_sim never writes (each example has a "
                             "position); restore the report (git checkout, or its own "
                             "command) before placing anything beside it")


def reference_of(published: LayerSimReport, where: str) -> tuple[str, Path]:
    """The report's first checkpoint (its base): its results key and a folder holding it, as
    recorded, in this machine's model cache by name, or embedded by name. Refused in one line
    when none is here."""
    from nca_interp.assets import ROOT as ASSETS
    from nca_interp.fsio import default_cache

    first = str(published.checkpoints[0])
    key = next((k for k, r in published.runs.items() if r.path == first), None)
    if key is not None and key not in published.results:
        raise UsageError(f"{where} is damaged: runs entry {key!r} (its first checkpoint) has "
                         "no results entry; restore it (git checkout, or its own command)")
    if key is None:
        raise UsageError(f"{where} has no results entry for its first checkpoint {first}; "
                         "it is not a layer_sim report this command can extend")
    name = Path(first).name
    for candidate in (Path(first).expanduser(), default_cache() / "models" / name,
                      ASSETS / name):
        if (candidate / "config.json").is_file():
            return key, candidate
    from nca_interp.fetch import registered

    how = (f"python -m nca_interp.fetch {name}" if name in registered() else
           "put that folder there (or rebuild it with the command in the report's manifest)")
    raise UsageError(f"{where}'s first checkpoint {first} is not here (nor {name} in the model "
                     "cache or among the embedded checkpoints); --beside recomputes it to check "
                     f"the report before carrying its entries: {how}")


def differences(new: dict, old) -> dict[str, np.ndarray | None]:
    """Per compared statistic both entries hold: |new - old| layer by layer (None where the
    lengths differ; NaN where a value is undefined in both, inf where in one only: a number
    against an undefined value is a disagreement, not a value to skip)."""
    out: dict[str, np.ndarray | None] = {}
    for stat in BESIDE_COMPARED:
        if new.get(stat) is None or old.get(stat) is None:
            continue
        a = np.asarray([np.nan if v is None else v for v in new[stat]], dtype=float)
        b = np.asarray([np.nan if v is None else v for v in old[stat]], dtype=float)
        if a.shape != b.shape:
            out[stat] = None
            continue
        d = np.abs(a - b)
        d[np.isnan(a) != np.isnan(b)] = np.inf
        out[stat] = d
    return out


def worst(new: dict, old, layers: list[str]) -> str:
    """Where a recomputed entry differs most from the report's ("cos at embed"), for the
    refusal."""
    found = (-1.0, "", "")
    for stat, d in differences(new, old).items():
        if d is None:
            return f"{stat}: another number of layers"
        labels = layers if len(d) == len(layers) else layers[1:]
        for lab, x in zip(labels, d):
            if not np.isnan(x) and x > found[0]:
                found = (float(x), stat, lab)
    x, stat, lab = found
    return f"{stat} at {lab}" + (": a number on one side, undefined on the other"
                                 if x == np.inf else "")


def disagreement(new: dict, old) -> float:
    """The largest absolute difference between a recomputed entry and the report's, over the
    statistics both hold (inf where the lengths differ)."""
    diffs = list(differences(new, old).values())
    known = [d for d in diffs if d is not None]
    if len(known) < len(diffs):
        return float("inf")
    return max((float(np.nanmax(d)) for d in known if d.size and not np.isnan(d).all()),
               default=0.0)


def changed_layers(new: dict, old, layers: list[str]) -> dict[str, list[str]]:
    """Per statistic, the layers where a recomputed baseline differs from the report's."""
    out = {}
    for stat, d in differences(new, old).items():
        labels = layers if d is None or len(d) == len(layers) else layers[1:]
        hit = ["all"] if d is None else [lab for lab, x in zip(labels, d) if x > BESIDE_ATOL]
        if hit:
            out[stat] = hit
    return out


def run_beside(cfg: LayerSimConfig) -> LayerSimReport:
    """`--beside REPORT`: the given checkpoints (none: only the check and the baselines)
    measured on the report's items and settings, with the report's entries carried in.

    Before anything is carried, the report's first checkpoint is recomputed here: its entry
    must agree within BESIDE_ATOL on every layer of every compared statistic (and in its item
    and position counts), which shows that this code, these items and these positions are the
    report's. The baselines (random_init) are recomputed, never carried: they depend on the
    code alone, and a report written before a fix keeps a stale null; where a recomputed one
    differs from the report's, the new report names the layers (`beside.recomputed`)."""
    import hashlib

    from nca_interp.checkpoint import check_architecture, n_layers_of, verify_folder
    from nca_interp.cli import as_paths
    from nca_interp.runs import check_trained_on, task_for_checkpoints
    from nca_interp.tasks import task_from_record

    assert cfg.beside is not None  # `run` calls it with --beside only
    where = str(cfg.beside)
    published = analysis.load(cfg.beside)
    if not isinstance(published, LayerSimReport):
        raise UsageError(f"{where} is a report of {published.analysis or 'another analysis'}, "
                         "not of layer_sim; --beside takes the JSON python -m "
                         "nca_interp.layer_sim wrote")
    check_shape(published, where)
    named = code_named(cfg.task_options, published)  # before the settings replace them
    fixed = beside_settings(cfg, published)
    check_code(published, named, where)
    check_config_code(fixed, cfg.task_options, where)
    check_entries(published, where)
    log.info(f"--beside {where}: measured at the report's settings, "
             + ", ".join(f"{k}={v}" for k, v in fixed.items()))
    cfg = dataclasses.replace(cfg, **fixed)  # the config written is what was measured
    ref_key, ref = reference_of(published, where)
    mine = as_paths(cfg.ckpt, "ckpt") or []
    configs = [check_architecture(verify_folder(p)) for p in mine]
    for p in mine:  # the report's task, whatever the checkpoint was trained on (the probe)
        check_trained_on(p, str(published.task), "--beside: the checkpoint")
    check_same_tokenizers([ref, *mine])
    depth = len(published.layers) - 1
    for p, config in zip(mine, configs):
        n = n_layers_of(config)
        if n not in (None, depth):
            raise UsageError(f"{p} has {n} layers, {where}'s models {depth}; a "
                             "report's per-layer lists share one set of layers: place it beside "
                             "a report of its own architecture")
    record = (published.data or {}).get("task_options")
    if record:
        found = task_from_record(record, options=[f"{k}={v}" for k, v in named.items()])
    else:
        found = task_for_checkpoints([str(ref)], fixed["task"], None, fixed["task_options"])
    ctx = fixed["context"]
    levels = found.levels("test", fixed["n_levels"], fixed["seed"])
    if published.data and published.data.get("prompts_sha256"):
        now = analysis.data_record(found, levels)["prompts_sha256"]
        if now != published.data["prompts_sha256"]:
            raise UsageError(f"the items rendered here are not {where}'s (their prompts' "
                             "sha256 differs): the task's data or code changed since; rerun "
                             "the report's own command instead")
    device, at, batch = str(resolve_device(cfg.device)), fixed["at"], cfg.batch
    other = published.other_pairs or OTHER_NEXT  # the report's own rule for cos_other
    shared = shared_responses(fixed["responses"], ref, found, levels, batch, device)
    checked = layer_similarity(ref, found, ctx, levels, batch, device, at, shared, other)
    old = published.results[ref_key]
    counts = [(k, checked[k], old[k]) for k in ("n_examples", "n_positions")
              if checked[k] != old[k]]
    gap = disagreement(checked, old)
    if counts or not gap <= BESIDE_ATOL:
        said = ", ".join(f"{k} {a} here, {b} there" for k, a, b in counts) or \
            f"largest difference {gap:.3g} > {BESIDE_ATOL}, {worst(checked, old, published.layers)}"
        raise UsageError(f"{ref_key} recomputed here does not match {where} ({said}): the "
                         "report was made on other items, positions or code, so its entries "
                         "would not compare with new ones; rerun the report's own command")
    results: dict[str, dict] = {}
    folders: dict[str, str | None] = {}
    recomputed = {}
    with tempfile.TemporaryDirectory() as tmp:
        rnd = random_init_copy(ref, Path(tmp) / "random_init")
        results["random_init"] = layer_similarity(rnd, found, ctx, levels, batch, device,
                                                  at, shared, other)
        folders["random_init"] = None
        if "random_init" in published.results:  # the null is always recomputed
            recomputed["random_init"] = changed_layers(
                results["random_init"], published.results["random_init"], published.layers)
        carried = [k for k in published.results if k not in results]
        for k in carried:
            results[k] = published.results[k].to_json()
            folders[k] = published.runs[k].path
        for p in bar(mine, "layer_sim", unit="ckpt"):
            name = analysis.label_of(p, results)
            folders[name] = p
            results[name] = layer_similarity(p, found, ctx, levels, batch, device, at, shared,
                                             other)
    digest = hashlib.sha256(Path(where).expanduser().read_bytes()).hexdigest()
    report = analysis.make_report(
        cfg, task=found.name, context=ctx, paths=folders, results=results, at=at,
        responses=fixed["responses"], responses_from=published.responses_from,
        layers=list(published.layers),
        checkpoints=[*published.checkpoints, *mine],
        data=analysis.data_record(found, levels), other_pairs=other,
        beside={"report": where, "sha256": digest, "carried": carried,
                "checked": {"entry": ref_key, "folder": str(ref), "max_abs_diff": gap,
                            "atol": BESIDE_ATOL},
                "recomputed": recomputed})
    for k in carried:  # carried entries keep who they belong to
        report.runs[k] = published.runs[k]
    return report


def show(report: LayerSimReport | dict) -> None:
    """The similarity tables, one per statistic, and the context reading per head."""
    report = as_report(report, LayerSimReport)
    results, layers = report.results, report.layers
    n = next(iter(results.values())).n_examples
    print(f"task={report.task} context={report.context} levels={n} "
          f"positions={report.at} responses={report.responses_from}")
    if report.beside:
        b, check = report.beside, report.beside["checked"]
        print(f"beside {b['report']}: its {check['entry']} recomputed here to check it, "
              f"largest difference {check['max_abs_diff']:.2g} (<= {check['atol']}); carried "
              "as the report holds them (their checkpoints are not recomputed): "
              f"{', '.join(b['carried']) or 'none'}")
        for name, changed in b["recomputed"].items():
            said = "; ".join(f"{stat} at {', '.join(labs)}" for stat, labs in changed.items())
            print(f"  {name} recomputed: " + (f"differs from the report's at {said} (older code "
                                                "wrote it, or it was edited)" if said else
                                                "as the report had it"))
    print(LEGEND)
    first = next(iter(results.values()))
    if first.n_units is not None:
        print(f"{n} items in {first.n_units} independent units: cos_se clusters by them")
    for metric in ("cos", "cos_se", "cos_other", "cos_centred", "cos_centred_view",
                   "offset_share", "cka", "cka_debiased"):
        print(format_table(results, metric, layers) + "\n")
        if metric == "cos_other":
            print(null_line(results))
    print(format_table(results, "ctx_attn_ratio_layer", layers[1:]))
    print(format_heads(results))


def figures(report: LayerSimReport | dict) -> dict:
    """{"": similarity per layer, "heads": context reading per head}."""
    report = as_report(report, LayerSimReport)
    from nca_interp.plots import head_heatmaps, layer_sim_figure

    out = {"": layer_sim_figure(report)}
    if next(iter(report.results.values())).ctx_attn_ratio is not None:
        out["heads"] = head_heatmaps(report)
    return out


def main(argv: list[str] | LayerSimConfig | None = None) -> dict:
    cfg = parse_config(LayerSimConfig, argv, __doc__, positional="ckpt")
    return execute(analysis.command_defaults(sys.modules[__name__], cfg))


def execute(cfg: LayerSimConfig) -> dict:
    """The command on a config object (what `nca_interp.paper.reproduce` calls; `main` parses the
    command line into one): see `analysis.execute`."""
    return analysis.execute(sys.modules[__name__], cfg)


if __name__ == "__main__":
    sys.exit(entry(main, parsed=PARSED))
