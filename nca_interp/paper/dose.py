r"""Harm against drift: is the harm of c specific to OPD, or does any drift from step 0 make it?

    python -m nca_interp.paper.dose figures/facts_rule/trajectory.json \
        --out figures/facts_rule/harm_drift

Reads a trajectory report over every checkpoint of every seed (`nca_interp.trajectory
--control`, which records each run's method, seed and beta from its run config), and writes:

- the course: per method and step, the mean over seeds (seed range in brackets) of drift (mean
  token KL of the no-context view from step 0's), accuracy without / with c, harm beside its
  independence baseline 1 - accuracy with c, help, rel_len_both and reads_c;
- the methods at matched drift: for every checkpoint of an NCA run, OPD's value at the same
  drift, interpolated along the OPD run of the same seed (only inside the drift range that run
  covers), and NCA - OPD averaged per seed; the seeds' spread and how many seeds fall below 0
  are the null (the same student, the same prompts, only the loss differs). Each seed's mean
  carries a conservative 95% half-width: at each checkpoint the two runs' bootstrap half-widths
  combined in quadrature (they answer the same items, so their errors correlate and the true
  paired one is smaller), averaged over the checkpoints (which share their items, so averaging
  does not narrow it); the seeds' means a t interval. `nca_interp.paper.claims` judges the harm row;
- a figure of harm and help against drift, one line per run.

A harm is undefined at a checkpoint with nothing right without c (it is printed as "-").
"""

from __future__ import annotations

if __name__ == "__main__":  # Ctrl-C while the imports below run: one line, not a traceback
    from nca_interp.cli import quiet_interrupt

    quiet_interrupt()

import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nca_interp.cli import entry, parse_config, write_json
from nca_interp.errors import UsageError
from nca_interp.fsio import read_json, write_text
from nca_interp.reports import label as column
from nca_interp.reports import vocabulary

__all__ = ["DoseConfig", "clear_seeds", "execute", "figure", "main", "markdown", "run",
           "t_interval"]

QUANTITIES = ("drift", "correct_no_c", "correct_c", "harm", "baseline", "help", "rel_len_both",
              "reads_c")
MATCHED = ("harm", "help", "correct_no_c")


def label(run: dict) -> str:
    """`opd`, `nca` or `nca beta 0.3` (a beta other than 1) from a run's recorded identity."""
    ident = run["identity"]
    if ident["method"] == "nca" and ident.get("beta") not in (None, 1.0):
        return f"nca beta {ident['beta']:g}"
    return ident["method"]


def rows_of(report: dict) -> list[dict]:
    """One row per (run, checkpoint): identity, step and the quantities (baseline = the
    independence harm 1 - correct_c)."""
    out = []
    for name, run in report["results"].items():
        if "identity" not in run or run["identity"].get("method") is None:
            raise UsageError(f"{name}: the trajectory does not record its run's method and "
                             "seed; rerun python -m nca_interp.trajectory on it")
        for r in run["steps"]:
            if "drift" not in r:
                raise UsageError(f"{name}: the trajectory has no drift column; rerun python -m "
                                 "nca_interp.trajectory on it")
            out.append({"run": name, "method": label(run), "seed": run["identity"]["seed"],
                        "step": r["step"], "drift": r["drift"],
                        "correct_no_c": r["correct_no_c"], "correct_c": r["correct_c"],
                        "harm": r["harm"], "baseline": 1.0 - r["correct_c"],
                        "help": r["help"], "rel_len_both": r.get("rel_len_both"),
                        "reads_c": r.get("reads_c"), "n_correct_no_c": r["n_correct_no_c"],
                        "half": {q: half_width(r, q) for q in MATCHED}})
    return out


def half_width(step: dict, q: str) -> float | None:
    """Half the width of a checkpoint's 95% interval of `q` (None where it has none)."""
    ci = step.get("ci95", {}).get(q)
    return None if step.get(q) is None or ci is None else (ci[1] - ci[0]) / 2


# the 0.975 quantile of Student's t with df = 1..10 degrees of freedom (the seeds' mean)
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def t_interval(vals: list[float]) -> tuple[float, float] | None:
    """The 95% t interval of the mean of `vals` (None under two values; beyond 11 values the
    normal quantile's 1.96 is close enough)."""
    if len(vals) < 2:
        return None
    t = T975[len(vals) - 2] if len(vals) - 1 <= len(T975) else 1.96
    m, se = float(np.mean(vals)), float(np.std(vals, ddof=1) / np.sqrt(len(vals)))
    return m - t * se, m + t * se


def stat(vals: list) -> dict | None:
    vals = [v for v in vals if v is not None and np.isfinite(v)]
    if not vals:
        return None
    return {"mean": float(np.mean(vals)), "min": float(np.min(vals)),
            "max": float(np.max(vals)), "n": len(vals)}


def course(rows: list[dict]) -> dict:
    """{method: {step: {quantity: stat over seeds}}}."""
    groups = defaultdict(list)
    for r in rows:
        groups[(r["method"], r["step"])].append(r)
    out: dict = defaultdict(dict)
    for (method, step), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        out[method][step] = {q: stat([r[q] for r in rs]) for q in QUANTITIES}
        out[method][step]["n_seeds"] = len(rs)
    return dict(out)


def interpolate(curve: list[tuple[float, float]], x: float) -> float | None:
    """The value of a run's (drift, value) curve at drift x, linear between its checkpoints
    (sorted by drift); None outside the drift range the run covers."""
    if len(curve) < 2:
        return None
    xs, ys = map(np.array, zip(*sorted(curve)))
    if not xs[0] <= x <= xs[-1]:
        return None
    return float(np.interp(x, xs, ys))


def matched(rows: list[dict], method: str = "nca", reference: str = "opd") -> dict:
    """`method` - `reference` at matched drift, per quantity: per seed the mean difference
    over `method`'s checkpoints (after step 0) that fall inside the reference run's drift range
    where both values are defined; then the mean over seeds, the seed range and the seeds
    below 0. Each seed's `half` is its conservative 95% half-width (module docstring), `t95`
    the t interval of the seeds' means, `seeds` the seeds `method` ran."""
    by_run = defaultdict(list)
    for r in rows:
        by_run[(r["method"], r["seed"])].append(r)
    out = {}
    for q in MATCHED:
        per_seed, half, pairs = {}, {}, 0
        for (m, seed), rs in sorted(by_run.items(), key=lambda kv: str(kv[0])):
            ref = by_run.get((reference, seed))
            if m != method or not ref:
                continue
            defined = [r for r in ref if r[q] is not None]
            curve = [(r["drift"], r[q]) for r in defined]
            widths = [(r["drift"], r["half"][q]) for r in defined
                      if r.get("half", {}).get(q) is not None]
            diffs, halves = [], []
            for r in rs:
                if r["step"] == 0 or r[q] is None:
                    continue
                at = interpolate(curve, r["drift"])
                if at is None:
                    continue
                diffs.append(r[q] - at)
                h_ref = interpolate(widths, r["drift"]) if len(widths) == len(curve) else None
                h = r.get("half", {}).get(q)
                halves.append(None if h is None or h_ref is None else float(np.hypot(h, h_ref)))
            if diffs:
                per_seed[seed] = float(np.mean(diffs))
                pairs += len(diffs)
                if None not in halves:
                    half[seed] = float(np.mean(halves))
        vals = list(per_seed.values())
        out[q] = {"per_seed": per_seed, "half": half, "pairs": pairs,
                  **(stat(vals) or {"n": 0}), "below_0": sum(v < 0 for v in vals),
                  "t95": t_interval(vals),
                  "seeds": sorted({s for m, s in by_run if m == method}, key=str)}
    return out


def clear_seeds(s: dict) -> tuple[int, int]:
    """How many seeds' matched differences lie clear below 0 and clear above it (mean and its
    conservative half-width, `matched`)."""
    pairs = [(v, s.get("half", {}).get(k)) for k, v in s["per_seed"].items()]
    return (sum(h is not None and v + h < 0 for v, h in pairs),
            sum(h is not None and v - h > 0 for v, h in pairs))


def fmt(s: dict | None, digits: int = 3, sign: bool = False) -> str:
    if not s:
        return "-"
    f = f"{{:{'+' if sign else ''}.{digits}f}}"
    if s["n"] == 1:
        return f.format(s["mean"])
    return f"{f.format(s['mean'])} ({f.format(s['min'])} to {f.format(s['max'])})"


def markdown(result: dict) -> str:
    heads = ["method", "step", "seeds", "drift (nats/token)", "right without c",
             "right with c", "harm", "independence baseline", "help", "rel_len_both",
             "reads_c"]
    lines = ["Per method and step: mean over seeds (seed range). Harm is P(wrong with c | right "
             "without c); its independence baseline 1 - right with c is the harm of a student "
             "whose two answers are unrelated.", "",
             "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for method, steps in result["course"].items():
        for step, c in steps.items():
            lines.append(
                f"| {method} | {step} | {c['n_seeds']} | {fmt(c['drift'], 4)} | "
                f"{fmt(c['correct_no_c'])} | {fmt(c['correct_c'])} | {fmt(c['harm'])} | "
                f"{fmt(c['baseline'])} | {fmt(c['help'])} | {fmt(c['rel_len_both'], sign=True)}"
                f" | {fmt(c['reads_c'], sign=True)} |")
    for name, m in result["matched"].items():
        lines += ["", f"{name} at matched drift: for each of its checkpoints, the reference "
                  "run of the same seed interpolated at the same drift; mean over seeds (seed "
                  "range); its 95% t interval over seeds; the seeds whose mean lies below 0 "
                  "and those clear of 0 (mean + its conservative half-width below 0, or mean - "
                  "half-width above it).", "",
                  "| quantity | difference | t interval over seeds | seeds below 0 | "
                  "seeds clear below / above 0 | checkpoints matched |",
                  "|---|---|---|---|---|---|"]
        for q, s in m.items():
            t95 = "-" if not s.get("t95") else f"[{s['t95'][0]:+.3f}, {s['t95'][1]:+.3f}]"
            below, above = clear_seeds(s)
            lines.append(f"| {column(q)} | {fmt(s if s['n'] else None, sign=True)} | {t95} | "
                         f"{s['below_0']} of {s['n']} | {below} / {above} of {s['n']} | "
                         f"{s['pairs']} |")
    return "\n".join(lines)


def figure(rows: list[dict], title: str):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from nca_interp.plots import PALETTE

    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "harm (filled) and its independence baseline (open)", "help"))
    shown = set()
    by_run = defaultdict(list)
    for r in rows:
        by_run[r["run"]].append(r)
    for run, rs in by_run.items():
        rs = sorted(rs, key=lambda r: r["step"])
        method = rs[0]["method"]
        color = PALETTE.get(method, "#9467bd")  # an NCA beta other than 1: purple
        first = method not in shown
        shown.add(method)
        for col, q in ((1, "harm"), (2, "help")):
            pts = [r for r in rs if r[q] is not None]
            fig.add_trace(go.Scatter(
                x=[r["drift"] for r in pts], y=[r[q] for r in pts], mode="lines+markers",
                line={"color": color, "width": 1}, opacity=0.35, name=f"{method} (a seed)",
                legendgroup=method, showlegend=first and col == 1,
                text=[f"{run} step {r['step']}" for r in pts]), row=1, col=col)
        pts = [r for r in rs if r["harm"] is not None]
        fig.add_trace(go.Scatter(
            x=[r["drift"] for r in pts], y=[r["baseline"] for r in pts], mode="markers",
            marker={"color": color, "symbol": "circle-open"}, name=f"{method} baseline",
            legendgroup=method, showlegend=False,
            text=[f"{run} step {r['step']}: 1 - acc with c" for r in pts]), row=1, col=1)
    by_method = defaultdict(lambda: defaultdict(list))  # the mean over seeds at each step
    for r in rows:
        by_method[r["method"]][r["step"]].append(r)
    for method, steps in by_method.items():
        color = PALETTE.get(method, "#9467bd")
        for col, q in ((1, "harm"), (2, "help")):
            pts = [(st, [r for r in rs if r[q] is not None]) for st, rs in sorted(steps.items())]
            pts = [(st, rs) for st, rs in pts if rs]
            fig.add_trace(go.Scatter(
                x=[np.mean([r["drift"] for r in rs]) for _, rs in pts],
                y=[np.mean([r[q] for r in rs]) for _, rs in pts], mode="lines+markers+text",
                text=[str(st) for st, _ in pts], textposition="top center",
                line={"color": color, "width": 3}, name=f"{method}: mean over seeds (step)",
                legendgroup=f"{method} mean", showlegend=col == 1), row=1, col=col)
    for col in (1, 2):
        fig.update_xaxes(title_text="drift from step 0 (nats per token, no-context view)",
                         row=1, col=col)
        fig.update_yaxes(range=[0, 1], row=1, col=col)
    fig.update_layout(title=title, width=1100, height=450)
    return fig


def run(report: dict) -> dict:
    rows = rows_of(report)
    methods = {r["method"] for r in rows}
    result = {"rows": rows, "course": course(rows), "matched": {}}
    for m in sorted(methods - {"opd"}):
        if "opd" in methods:
            result["matched"][f"{m} - opd"] = matched(rows, m, "opd")
    return result


@dataclass
class DoseConfig:
    trajectory: list[str] = field(default_factory=list, metadata={
        "help": "trajectory JSONs over the runs' checkpoints (nca_interp.trajectory "
                "--control); several are read as one"})
    out: str | None = field(default=None, metadata={
        "help": "OUT.json, OUT.md and OUT.html (default: print only)"})
    png: bool = field(default=False, metadata={"help": "also write OUT.png (needs kaleido)"})


def execute(cfg: DoseConfig) -> dict:
    if not cfg.trajectory:
        raise UsageError("name a trajectory JSON (python -m nca_interp.trajectory RUN... "
                         "--control --out STEM makes one)")
    merged: dict = {"results": {}}
    for path in map(Path, cfg.trajectory):
        if not path.is_file():
            raise UsageError(f"{path}: no such trajectory JSON; make one with python -m "
                             "nca_interp.trajectory RUN... --control --out STEM")
        merged["results"].update(vocabulary(read_json(path))["results"])
    result = run(merged)
    text = markdown(result)
    print(text)
    if cfg.out:
        from nca_interp import plots

        write_json(f"{cfg.out}.json", {"config": {"trajectory": cfg.trajectory}, **result})
        write_text(Path(f"{cfg.out}.md"),
            f"<!-- python -m nca_interp.paper.dose {' '.join(cfg.trajectory)} --out {cfg.out} -->\n"
            f"{text}\n")
        name = Path(cfg.out).parent.name
        plots.write_figure(figure(result["rows"], f"harm against drift: {name}"), cfg.out,
                           cfg.png)
    return result


def main(argv: list[str] | None = None) -> dict:
    return execute(parse_config(DoseConfig, argv, __doc__, positional="trajectory"))


if __name__ == "__main__":
    sys.exit(entry(main))
