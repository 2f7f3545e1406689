"""Context-return evaluation: play the same held-out levels with and without the privileged
context and compare, level by level.

    python -m nca_interp.evaluate --ckpt runs/sokoban_base --task sokoban --context state
    python -m nca_interp.evaluate --ckpt base opd nca --context state --out report.json

Metrics (paired over levels, greedy unless --temperature > 0; an item is correct when the task's
scorer says so: a level won, a question answered; tables head `correct_*` as `win_*` for games
and `acc_*` for questions; every field: `nca_interp.reports.ContextReturn`):
  correct_no_c, correct_c   share of items correct without / with the context
  harm                P(wrong with c | correct without c)   the paper's harm rate
  help                P(correct with c | wrong without c)
  harm_joint          P(correct without c AND wrong with c) (fraction of all items)
  help_joint          P(wrong without c AND correct with c)
  both                P(correct both ways)
  delta_c             correct_c - correct_no_c (= help_joint - harm_joint)
  len_no_c, len_c     mean response length in tokens (end-of-response included)
  rel_len_both        len_c / len_no_c - 1 on the items correct both ways (the headline: the
                      all-items rel_len mixes in failures, whose lengths differ for other reasons)
Intervals: 95% paired cluster bootstrap over the task's independent unit (a level for games, a
fact for sysprompt, whose questions ask each fact in many ways), printed beside the interval.
Regime: A (context hurts) if the interval of delta_c lies below 0 (this needs levels won
without c, where harm is measured), B (context still needed) if it lies above 0, C otherwise;
under 30 units that interval is the cluster-robust t interval of the per-item outcomes (the
few-clusters rule, `nca_interp.regimes.regime`: the regime the claims read, one function).
"""

from __future__ import annotations

import logging
import sys

from nca_interp.cli import parse_early
from nca_interp.configs import (  # noqa: F401 - TASK_OPTIONS_HELP: read here as before
    TASK_OPTIONS_HELP,
    EvalConfig,
)

if __name__ == "__main__":  # --help and a bad flag answered before torch is imported
    PARSED = parse_early(EvalConfig, __doc__, positional="ckpt")

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from nca_interp import analysis, reports
from nca_interp.bootstrap import FEW_CLUSTERS, cluster_indices, mean_ci, n_units, percentile_ci
from nca_interp.checkpoint import load_checkpoint, verify_folder
from nca_interp.cli import entry, parse_config, validate
from nca_interp.errors import UsageError
from nca_interp.models import autocast, context_limit, resolve_device
from nca_interp.progress import bar
from nca_interp.regimes import regime
from nca_interp.reports import ContextReturn, ContextReturnReport, as_report, typed
from nca_interp.rollout import (
    decode_responses,
    encode,
    model_device,
    pad_id,
    sample,
    stop_ids,
)
from nca_interp.runs import (
    resolve_task_and_context,
)
from nca_interp.tasks import Task

__all__ = ["C_PRIME_EXAMPLES", "DEMO", "control_record", "control_report", "evaluate_checkpoint",
           "execute", "figures", "format_c_prime", "format_control", "format_markdown", "label",
           "main", "max_response_tokens", "metric_of", "paired_report", "play_levels",
           "reads_c_interval", "run", "show", "unscored_report", "views_kl"]

log = logging.getLogger(__spec__.name if __spec__ else __name__)  # python -m too

_SAID: set = set()


def max_response_tokens(task: Task) -> int:
    """The task's response budget in tokens, said once per process and task config (every
    command prints it among its first lines: a budget too small cuts answers, one too large
    costs minutes)."""
    n = task.max_response_tokens()
    key = (task.name, repr(task.config), task.fmt)
    if key not in _SAID:
        _SAID.add(key)
        how = "; task option max_new= sets it" if hasattr(task.config, "max_new") else ""
        log.info(f"response budget: {n} tokens ({task.name}{how})")
    return n


@torch.no_grad()
def play_levels(model, tokenizer, task: Task, levels: list, context: str | list[str] | None,
                temperature: float = 0.0, seed: int = 0, batch: int = 250) -> dict[str, Any]:
    """Roll out one response per level; returns arrays `won`, `length`, `parsed` and the
    response texts `texts`. `context`: None (the student view), a context kind, or one context
    text per level (controls)."""
    dev = model_device(model)
    gen = torch.Generator(dev).manual_seed(seed)
    won, length, parsed, responses, resp_ids, hit = [], [], [], [], [], []
    max_new = max_response_tokens(task)
    for i in bar(range(0, len(levels), batch), "evaluate", unit="batch"):
        chunk = levels[i: i + batch]
        if isinstance(context, list):
            texts = [task.prompt(lv, c) for lv, c in zip(chunk, context[i: i + batch])]
        else:
            texts = [task.prompt(lv, None if context is None else task.context(lv, context))
                     for lv in chunk]
        ids, mask = encode(tokenizer, texts, context_limit(model), reserve=max_new)
        resp, rmask = sample(model, ids.to(dev), mask.to(dev), max_new,
                             stop_ids(tokenizer, model), pad_id(tokenizer), temperature, gen)
        outs, lens = decode_responses(tokenizer, resp.cpu(), rmask.cpu())
        eos = tokenizer.eos_token_id
        for lv, text, n, row in zip(chunk, outs, lens, resp.cpu().tolist()):
            s = task.score(lv, text)
            won.append(s.won)
            parsed.append(s.parsed)
            length.append(n)
            responses.append(text)
            resp_ids.append(row[:n])
            hit.append(n >= max_new and (not row[:n] or row[n - 1] != eos))
    return {"won": np.array(won), "length": np.array(length, float), "parsed": np.array(parsed),
            "texts": responses, "ids": resp_ids, "hit_budget": np.array(hit, bool)}


@torch.no_grad()
def views_kl(model, tokenizer, task: Task, levels: list, context: str | list[str],
             responses: list[list[int]], units: list[str], batch: int = 64, n_boot: int = 2000,
             seed: int = 0) -> dict:
    """Mean token KL(g(.|x) || g(.|x,c)) over `responses` (the greedy no-context ones), in
    nats per response token, with its 95% cluster-bootstrap interval over `units`: how far the
    two views are apart, measurable with no scorer. `context`: a context kind, or one context
    text per level (the wrong-c control: its KL is the null the views' KL is read against)."""
    texts = context if isinstance(context, list) else \
        [task.context(lv, context) for lv in levels]
    from nca_interp.forward import response_logits
    from nca_interp.losses import position_kl
    from nca_interp.rollout import encode

    dev = model_device(model)
    limit = context_limit(model)
    sums, toks = [], []
    for i in range(0, len(levels), batch):
        chunk, rows, cs = levels[i: i + batch], responses[i: i + batch], texts[i: i + batch]
        n = max(1, max(len(r) for r in rows))
        resp = torch.full((len(rows), n), pad_id(tokenizer), dtype=torch.long)
        mask = torch.zeros((len(rows), n), dtype=torch.long)
        for j, r in enumerate(rows):
            resp[j, :len(r)], mask[j, :len(r)] = torch.tensor(r, dtype=torch.long), 1
        x_ids, x_mask = encode(tokenizer, [task.prompt(lv) for lv in chunk], limit, n)
        c_ids, c_mask = encode(tokenizer, [task.prompt(lv, c) for lv, c in zip(chunk, cs)],
                               limit, n)
        resp, mask = resp.to(dev), mask.to(dev)
        g = response_logits(model, x_ids.to(dev), x_mask.to(dev), resp, mask)
        g_c = response_logits(model, c_ids.to(dev), c_mask.to(dev), resp, mask)
        sums.append((position_kl(g, g_c) * mask).sum(1).double().cpu().numpy())
        toks.append(mask.sum(1).double().cpu().numpy())
    s, t = np.concatenate(sums), np.concatenate(toks)
    boots = [s[idx].sum() / max(t[idx].sum(), 1) for idx in cluster_indices(units, n_boot, seed)]
    return {"kl_views": float(s.sum() / max(t.sum(), 1)),
            "kl_views_ci95": [float(v) for v in percentile_ci(np.array(boots))]}


def unscored_report(no_c: dict, with_c: dict, units: list[str], unit_name: str,
                    n_boot: int = 2000, seed: int = 0) -> dict:
    """What a context return shows without a scorer: the response lengths both ways and their
    relative change, with 95% cluster-bootstrap intervals."""
    l0, l1 = no_c["length"].astype(float), with_c["length"].astype(float)
    point = {"len_no_c": l0.mean(), "len_c": l1.mean(), "rel_len": l1.mean() / l0.mean() - 1}
    idx = cluster_indices(units, n_boot, seed)
    boots = {"len_no_c": [l0[i].mean() for i in idx], "len_c": [l1[i].mean() for i in idx],
             "rel_len": [l1[i].mean() / l0[i].mean() - 1 for i in idx]}
    return {"n": len(l0), "unit": unit_name, "n_units": n_units(units), "scored": False,
            **{k: float(v) for k, v in point.items()},
            "ci95": {k: [float(v) for v in percentile_ci(np.array(b))]
                     for k, b in boots.items()},
            "note": "accuracy, harm, help and the regime need a scorer: pass scorer= (or "
                    "answers in the data) in --task-options"}


def _cond(num: np.ndarray, den: np.ndarray) -> float:
    """num.sum() / den.sum(), NaN when the condition never holds (a rate with no cases)."""
    d = den.sum()
    return float(num.sum() / d) if d else float("nan")


def context_return_stats(w0: np.ndarray, w1: np.ndarray, l0: np.ndarray, l1: np.ndarray
                         ) -> dict[str, float]:
    """Paired metrics of one set of items (0/1 wins without / with c, lengths in tokens)."""
    both = w0 * w1
    b = both.astype(bool)
    return {
        "correct_no_c": w0.mean(), "correct_c": w1.mean(),
        "harm": _cond(w0 * (1 - w1), w0), "help": _cond((1 - w0) * w1, 1 - w0),
        "harm_joint": (w0 * (1 - w1)).mean(), "help_joint": ((1 - w0) * w1).mean(),
        "both": both.mean(), "delta_c": w1.mean() - w0.mean(),
        "len_no_c": l0.mean(), "len_c": l1.mean(), "rel_len": l1.mean() / l0.mean() - 1,
        "rel_len_both": (l1[b].mean() / l0[b].mean() - 1) if b.any() else float("nan"),
    }


def paired_report(no_c: dict[str, np.ndarray], with_c: dict[str, np.ndarray],
                  units: list[str] | None = None, unit_name: str = "level",
                  n_boot: int = 2000, seed: int = 0) -> dict:
    """Paired context-return metrics with 95% cluster-bootstrap intervals: `units[i]` is the
    independent unit item i belongs to (a level; a fact asked in many ways), and the bootstrap
    resamples units with replacement, keeping all of a unit's items together."""
    w0, w1 = no_c["won"].astype(float), with_c["won"].astype(float)
    l0, l1 = no_c["length"].astype(float), with_c["length"].astype(float)
    n = len(w0)
    units = [str(i) for i in range(n)] if units is None else list(units)
    if len(units) != n:
        raise UsageError(f"{len(units)} unit labels for {n} items")
    point = context_return_stats(w0, w1, l0, l1)
    boots = [context_return_stats(w0[idx], w1[idx], l0[idx], l1[idx])
             for idx in cluster_indices(units, n_boot, seed)]
    ci = {}
    for k in point:
        vals = np.array([bt[k] for bt in boots], float)
        vals = vals[np.isfinite(vals)]
        ci[k] = [float(v) for v in percentile_ci(vals)] if len(vals) else [None, None]
    out = {"n": n, "unit": unit_name, "n_units": n_units(units),
           "n_correct_no_c": int(w0.sum()),
           **{k: (float(v) if np.isfinite(v) else None) for k, v in point.items()},
           "ci95": ci}
    # the regime by the few-clusters rule, from the per-item outcomes as a reader recomputes it
    out["regime"] = regime({**out, "items": {"unit": units, "correct_no_c": w0,
                                             "correct_c": w1}})
    return {**out, "parse_fail_no_c": float(1 - no_c["parsed"].mean()),
            "parse_fail_c": float(1 - with_c["parsed"].mean())}


def item_ids(task: Task, levels: list) -> dict:
    """Own data's item ids (its units may be groups of items); nothing for the built-in tasks,
    whose unit is the item."""
    return {"id": [lv.id for lv in levels]} if getattr(task, "name", None) == "jsonl" else {}


def lengths(view: dict) -> list[int]:
    """A view's response lengths per item (tokens): kept so that a length change pairs per
    item, as accuracy does."""
    return [int(n) for n in view["length"]]


def evaluate_checkpoint(model, tokenizer, task: Task, context: str, n_levels: int = 1000,
                        seed: int = 0, temperature: float = 0.0, control: bool = False) -> dict:
    task = task.for_tokenizer(tokenizer)  # chat checkpoints: their own template
    levels = task.levels("test", n_levels, seed)
    units = [task.unit(lv) for lv in levels]
    own_data = getattr(task, "name", None) == "jsonl"
    # the control contexts before any response: a c' refused (the item's own c, a missing
    # control_file) stops the command before minutes of generation
    wrong = [task.control_context(levels, i, context) for i in range(len(levels))] \
        if control else None
    no_c = play_levels(model, tokenizer, task, levels, None, temperature, seed)
    with_c = play_levels(model, tokenizer, task, levels, context, temperature, seed)
    ctrl = play_levels(model, tokenizer, task, levels, wrong, temperature, seed) \
        if control else None
    budget = {"hit_budget_no_c": float(no_c["hit_budget"].mean()),
              "hit_budget_c": float(with_c["hit_budget"].mean()),
              "max_new": max_response_tokens(task)}
    items = {"unit": units, **item_ids(task, levels), "length_no_c": lengths(no_c),
             "length_c": lengths(with_c)}
    if ctrl is not None and wrong is not None:
        items["length_control"] = lengths(ctrl)
    if not getattr(task, "scored", True):  # own data without a scorer
        report = {**unscored_report(no_c, with_c, units, task.unit_name), **budget,
                  **views_kl(model, tokenizer, task, levels, context, no_c["ids"], units),
                  "metric": task.success,
                  "items": {**items, "response_no_c": no_c["texts"],
                            "response_c": with_c["texts"]}}
        if ctrl is not None and wrong is not None:
            null = views_kl(model, tokenizer, task, levels, wrong, no_c["ids"], units)
            report["control"] = {"len": float(ctrl["length"].mean()),
                                 "kl_views": null["kl_views"],
                                 "kl_views_ci95": null["kl_views_ci95"],
                                 **control_record(task, levels, context, wrong),
                                 "note": "reads_c needs a scorer"}
            report["kl_views_control"] = null["kl_views"]
            report["items"].update(context_control=wrong, response_control=ctrl["texts"])
        return report
    report = {**paired_report(no_c, with_c, units, task.unit_name), "metric": task.success,
              **budget,
              "items": {**items, "correct_no_c": no_c["won"].astype(int).tolist(),
                        "correct_c": with_c["won"].astype(int).tolist()}}
    if own_data:  # own data: what was fed in and answered
        report["items"].update(response_no_c=no_c["texts"], response_c=with_c["texts"])
    if ctrl is not None and wrong is not None:
        report["control"] = {**control_report(no_c, with_c, ctrl, units, task.unit_name),
                             **control_record(task, levels, context, wrong)}
        # per item, so that reads_c pools over seeds by the same cluster bootstrap as accuracy
        report["items"]["correct_control"] = ctrl["won"].astype(int).tolist()
        if own_data:  # what c' was and what the model answered with it
            report["items"].update(context_control=wrong, response_control=ctrl["texts"])
    return report


C_PRIME_EXAMPLES = 3  # the first items' c' a report keeps where it keeps not every item's


def control_record(task: Task, levels: list, kind: str, wrong: list[str]) -> dict:
    """What the control context c' was, for a report's `control`: `c_prime` (the task's line on
    where it came from, `Task.control_note`), `c_prime_source` (default: the task's own draw;
    field: your per-item "control"; file: your control_file; joined by "+" where items
    differ), with a file `c_prime_file` (its path and sha256: the very text), and
    `c_prime_examples`, the first `C_PRIME_EXAMPLES` items' c' (`wrong[i]` for item i)."""
    import hashlib
    from pathlib import Path

    origins = [task.control_origin(lv) for lv in levels]
    out: dict[str, Any] = {"c_prime": task.control_note(levels, kind),
           "c_prime_source": "+".join(dict.fromkeys(src for src, _ in origins)),
           "c_prime_examples": [{"item": i, "unit": task.unit(lv), "c_prime": wrong[i]}
                                for i, lv in enumerate(levels[:C_PRIME_EXAMPLES])]}
    files = list(dict.fromkeys(f for _, f in origins if f))
    if files:
        path = Path(files[0]).expanduser()
        out["c_prime_file"] = {"path": files[0],
                               "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    return out


def format_c_prime(control: Mapping) -> str:
    """The line a command prints under its control numbers: what c' was, and for your own
    file its path and digest (`control_record`'s fields; a report written before keeps only
    `c_prime`)."""
    line = f"c' (the control context): {control.get('c_prime') or 'not recorded'}"
    if control.get("c_prime_source"):
        line += f" [source: {control['c_prime_source']}"
        f = control.get("c_prime_file")
        line += (f"; {f['path']} sha256 {f['sha256'][:12]}]" if f else "]")
    examples = control.get("c_prime_examples") or []
    if examples:
        first = " ".join(str(examples[0]["c_prime"]).split())
        line += f"; item 0's c': {first[:60]!r}" + ("..." if len(first) > 60 else "")
    return line


def control_report(no_c: dict, with_c: dict, ctrl: dict, units: list[str],
                   unit_name: str) -> dict:
    """The same items with a control context c' (same kind and form, wrong for the item; see
    `Task.control_context`): `vs_no_c` is the paired report of x against [c', x] (its `harm`:
    what merely having a context of this form costs), `reads_c` the paired report of [c', x]
    against [c, x] (its `delta_c` = correct_c - correct_c' with its interval: how much the
    checkpoint uses what c says; 0 = blind to c's content)."""
    vs = paired_report(no_c, ctrl, units, unit_name)
    reads = paired_report(ctrl, with_c, units, unit_name)
    return {"correct": vs["correct_c"], "harm": vs["harm"],
            "ci95": {"correct": vs["ci95"]["correct_c"], "harm": vs["ci95"]["harm"]},
            "reads_c": reads["delta_c"],
            "reads_c_ci95": reads_c_interval(with_c["won"], ctrl["won"], units,
                                             reads["ci95"]["delta_c"]),
            "len": vs["len_c"]}


def reads_c_interval(won_c: np.ndarray, won_control: np.ndarray, units: list[str],
                     boot: list) -> list:
    """reads_c's 95% interval (the mean of won with c - won with c', per item) by the
    few-clusters rule (`bootstrap.mean_ci`): `boot`, the percentile cluster bootstrap, from
    `FEW_CLUSTERS` units up; under it the cluster-robust t interval."""
    return mean_ci(np.asarray(won_c, float) - np.asarray(won_control, float), units, boot)


label = reports.label  # a key as its column is headed (win_c for a game, acc_c for questions)


COLUMNS = ["correct_no_c", "correct_c", "harm", "help", "harm_joint", "help_joint", "both",
           "len_no_c", "len_c", "rel_len_both", "rel_len", "regime"]


def _value(r: ContextReturn, column: str):
    """A table cell's value: the regime by the few-clusters rule (`regime`: a report written
    before evaluate did so is re-read), every other column as the report holds it."""
    return regime(r) if column == "regime" else r.get(column)


def metric_of(entries: Mapping[str, ContextReturn | dict]) -> str:
    """What being correct is called in these entries: 'win' (games) or 'accuracy'."""
    first = next(iter(typed(entries, ContextReturn).values()), None)
    return (first.metric if first is not None else None) or "win"


FEW_UNITS = 10  # below it, a percentile bootstrap over units is flagged as narrow

REGIMES = ("regime: A = context hurts (95% interval of correct_c - correct_no_c below 0), "
           "B = context still needed (above 0), C = context irrelevant (interval spans 0); the "
           f"interval under {FEW_CLUSTERS} units is the cluster-robust t interval (the "
           "few-clusters rule, as the claims read it); parse_fail: share of responses the "
           "scorer could not read")


def format_table(reports: Mapping[str, ContextReturn | dict],
                 columns: list[str] = COLUMNS) -> str:
    reports = typed(reports, ContextReturn)
    name_w = max(12, *(len(n) for n in reports))
    metric = metric_of(reports)
    w = max(9, *(len(label(c, metric)) for c in columns))
    lines = [f"{'checkpoint':<{name_w}} " + " ".join(f"{label(c, metric):>{w}}" for c in columns)]
    for name, row in reports.items():
        values = [_value(row, c) for c in columns]
        cells = [f"{v:>{w}.3f}" if isinstance(v, float) else
                 f"{'-' if v is None else v!s:>{w}}" for v in values]
        lines.append(f"{name:<{name_w}} " + " ".join(cells))
    r = next(iter(reports.values()), None)
    if r is not None and r.unit is not None and r.scored is not False:
        lines.append(f"(intervals resample {r.n_units} {r.unit}s over {r.n} items; "
                     "harm = P(lost with c | won without c); regime from the interval of "
                     "correct_c - correct_no_c)")
        if r.n_units < FEW_UNITS:
            lines.append(f"(only {r.n_units} {r.unit}s: a percentile bootstrap over fewer than "
                         f"{FEW_UNITS} units covers less than 95%; add {r.unit}s)")
    return "\n".join(lines)


def format_control(reports: Mapping[str, ContextReturn | dict]) -> str:
    """The control-context rows: accuracy with c and with c', the harm of c', reads_c."""
    reports = typed(reports, ContextReturn)
    metric = metric_of(reports)
    ci = lambda v, c: "-" if v is None else (  # noqa: E731
        f"{v:.3f}" if not c or c[0] is None else f"{v:.3f} [{c[0]:.3f}, {c[1]:.3f}]")
    lines = ["| checkpoint | " + label("correct_c", metric) + " | " + label("correct", metric) +
             " with control c' | harm of c' | reads_c = " + label("correct_c", metric) +
             " - with c' |", "|---|---|---|---|---|"]
    for name, r in reports.items():
        if r.control is None:
            continue
        k = r.control
        lines.append(f"| {name} | {ci(r.correct_c, r.ci95['correct_c'])} | "
                     f"{ci(k['correct'], k['ci95']['correct'])} | "
                     f"{ci(k['harm'], k['ci95']['harm'])} | "
                     f"{ci(k['reads_c'], k['reads_c_ci95'])} |")
    return "\n".join(lines)


def format_markdown(reports: Mapping[str, ContextReturn | dict],
                    columns: list[str] = COLUMNS) -> str:
    reports = typed(reports, ContextReturn)
    head = "| checkpoint | " + " | ".join(label(c, metric_of(reports)) for c in columns) + " |"
    rows = [head, "|" + "---|" * (len(columns) + 1)]
    for name, r in reports.items():
        cells = []
        for c in columns:
            if isinstance(r[c], float) and c in r.ci95 and r.ci95[c][0] is not None:
                lo, hi = r.ci95[c]
                cells.append(f"{r[c]:.3f} [{lo:.3f}, {hi:.3f}]")
            else:
                cells.append(str(_value(r, c)))
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)




DEMO = ("sokoban_base",)  # what the bare command line evaluates


def run(cfg: EvalConfig | None = None, /, **fields) -> dict:
    """Paired context-return reports of each checkpoint on the same held-out items (see the
    module docstring for the fields): an `analysis` report whose results are keyed by
    checkpoint name. `run(EvalConfig(...))` or `run(ckpt=[...], task=..., ...)`."""
    cfg = analysis.config(EvalConfig, cfg, fields)
    validate(cfg)
    paths = analysis.checkpoint_paths(cfg)
    for p in paths:
        verify_folder(p)
    found, context = resolve_task_and_context(paths, cfg.task, cfg.context, cfg.task_options,
                                              cfg.fmt)
    dev = resolve_device(cfg.device)
    reports: dict[str, dict] = {}
    folders: dict[str, str] = {}
    for p in paths:
        model, tok = load_checkpoint(p, device=str(dev))
        name = analysis.label_of(p, reports)
        folders[name] = p
        with autocast(dev, cfg.precision):
            reports[name] = evaluate_checkpoint(model, tok, found, context, cfg.n_levels,
                                                cfg.seed, cfg.temperature, cfg.control)
    return analysis.make_report(cfg, task=found.name, context=context, paths=folders,
                                results=reports, data=analysis.data_record(
                                    found, found.levels("test", cfg.n_levels, cfg.seed)))


UNSCORED = ["len_no_c", "len_c", "rel_len", "kl_views", "kl_views_control"]


def show(report: ContextReturnReport | dict) -> None:
    """The paired table (and the control's, when measured); without a scorer, what can be
    measured and what cannot."""
    report = as_report(report, ContextReturnReport)
    reports, cfg = report.results, report.config
    first = next(iter(reports.values()))
    print(f"task={report.task} context={report.context} levels={first.n} "
          f"seed={cfg['seed']} temperature={cfg['temperature']} "
          f"response budget={first.max_new or '-'} tokens")
    if first.scored is False:
        print(format_table(reports, UNSCORED))
        print(f"(kl_views = mean token KL(g(.|x) || g(.|x,c)) on the no-context responses; "
              f"kl_views_control: the same with a wrong c', the null it is read against "
              f"(--control); {first.note})")
    else:
        print(format_table(reports, [*COLUMNS, "parse_fail_no_c", "parse_fail_c"]))
        print(REGIMES)
        if cfg.get("control"):
            print(format_control(reports))
    lines = {format_c_prime(r.control) for r in reports.values()
             if r.control is not None and r.control.get("c_prime")}
    for line in sorted(lines):
        print(line)
    for name, r in reports.items():
        hit = max(r.hit_budget_no_c or 0, r.hit_budget_c or 0)
        if hit > 0.5:
            print(f"note: {name}: {hit:.0%} of responses stopped at the response budget of "
                  f"{r.max_new} tokens; {budget_advice(report.task)}")


def budget_advice(task: str | None) -> str:
    """How a user raises task `task`'s response budget: its `max_new` option where it has one
    (a game's budget follows from its levels, and the game refuses the option)."""
    import dataclasses

    from nca_interp.tasks import REGISTRY

    spec = REGISTRY.get(task) if task else None
    names = {f.name for f in dataclasses.fields(spec.config)} if spec else {"max_new"}
    if "max_new" in names:
        return "raise it with --task-options max_new=N"
    if "max_solution" in names:
        return (f"{task}'s budget follows its longest solution (--task-options "
                "max_solution=N): an answer this long is one that does not stop")
    return f"{task} fixes its budget: an answer this long is one that does not stop"


def figures(report: ContextReturnReport | dict) -> dict:
    """{"": Figure}: per checkpoint, the paired rates with 95% intervals."""
    report = as_report(report, ContextReturnReport)
    from nca_interp.plots import evaluate_figure, unscored_figure

    if next(iter(report.results.values())).scored is False:
        return {"": unscored_figure(report)}
    return {"": evaluate_figure(report)}


def main(argv: list[str] | EvalConfig | None = None) -> dict:
    cfg = parse_config(EvalConfig, argv, __doc__, positional="ckpt")
    return execute(analysis.command_defaults(sys.modules[__name__], cfg))


def execute(cfg: EvalConfig) -> dict:
    """The command on a config object (what `nca_interp.paper.reproduce` calls; `main` parses the
    command line into one): see `analysis.execute`."""
    return analysis.execute(sys.modules[__name__], cfg)


if __name__ == "__main__":
    sys.exit(entry(main, parsed=PARSED))
