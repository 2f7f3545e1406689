"""The depth sweep: sokoban_remap's recipe at 2, 4, 8 and 12 layers (same width, data and steps;
seeds 0, 1, 2 of each method), one figure per claim against depth, from the rows' own JSON.

    python -m nca_interp.paper.depth                 # print the table
    python -m nca_interp.paper.depth --write --png   # figures/sokoban_depth/: README, figures

Each row is a `nca_interp.paper.reproduce` pipeline folder (figures/<preset>/, the presets of
`depth_rows` in nca_interp/paper/settings.toml). Three questions, each with its null beside it:

- context return: does OPD break when c returns (regime A) at every depth, and does NCA keep
  what c gives? Null: step 0 (the teacher the students start from, self-distilled) on the same
  levels; how well that teacher reads c differs with depth, a confound said beside it. OPD's
  harm stands beside step 0's and the independence baseline (1 - accuracy with c), the length
  change beside step 0's, and each model's reads_c (with c - with a wrong c of c's form)
  beside step 0's: a break without reading c, or robustness that is blindness, shows there.
- views: does OPD leave a gap between the two views' hidden states in the later half of the
  layers, and what share of step 0's gap does NCA close (`rules.closed_share`)? Nulls: step 0,
  a random-init model of the same shape, and the cosine between *different* items (a floor
  only where it sits below the measured cosines, else called a reference).
- updates: do the updates concentrate in the first third of the layers (Adam-normalised size,
  shallow / deep; 1 = uniform) and in q_proj / k_proj (their share of the seven matrix types;
  2/7 = uniform)?

Last, each claim's verdict by depth, as each row's own page judges it by the rule book. A row
whose folder lacks a report shows "not run" with the command that makes it. Numbers are seed
means with the seed range (a spread, not an interval).
"""

from __future__ import annotations

if __name__ == "__main__":  # Ctrl-C while the imports below run: one line, not a traceback
    from nca_interp.cli import quiet_interrupt

    quiet_interrupt()

import argparse
import dataclasses
from pathlib import Path

import numpy as np

from nca_interp import analysis
from nca_interp.errors import UsageError
from nca_interp.fsio import write_text
from nca_interp.identity import others, roster, students
from nca_interp.paper import rules
from nca_interp.paper.claims.harm import reads_ratio
from nca_interp.paper.layout import (
    CONTEXT_CONTROL,
    CONTEXT_RETURN,
    LAYER_SIM,
    PARAM_DELTA,
    TEACHER_GLOB,
    teacher_file,
)
from nca_interp.paper.settings import load
from nca_interp.regimes import regime
from nca_interp.reports import null_role

__all__ = ["MATRICES", "depth_of", "figures", "main", "row", "rows", "table"]

SEEDS = (0, 1, 2)  # the seeds every depth has (the 4-layer setting has 5: the first 3 are used)
MATRICES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
OUT = "sokoban_depth"


def depth_of(preset: str) -> int:
    """The layers of a preset's models: its teacher's `--n-layers`, through `teacher_init`
    (the students are distilled from the teacher's weights), else train.sft's default."""
    from nca_interp.train.sft import SFTConfig

    presets = load().presets
    name = preset
    while name is not None:
        args = list(presets[name].sft_args)
        if "--n-layers" in args:
            return int(args[args.index("--n-layers") + 1])
        name = presets[name].teacher_init
    return next(f.default for f in dataclasses.fields(SFTConfig) if f.name == "n_layers")


def _seeded(report: dict, method: str, seeds) -> list[dict]:
    who = roster(report)
    return [e for k, e in students(report, method) if who[k].seed in seeds]


def _spread(vals: list[float]) -> dict | None:
    vals = [float(v) for v in vals if v is not None]
    return {"mean": float(np.mean(vals)), "lo": min(vals), "hi": max(vals), "n": len(vals),
            "each": vals} if vals else None


def _context_return(figs: Path, seeds) -> dict | None:
    """Per method, the seeds' accuracies, harm and length change with c; beside OPD's harm
    its nulls: step 0's harm and the independence baseline (1 - accuracy with c, per seed),
    and how many seeds' harm intervals clear both (`rules.beyond_chance`)."""
    if not (figs / CONTEXT_RETURN).exists():
        return None
    rep = analysis.load(figs / CONTEXT_RETURN)
    base = next(e for _, e in others(rep))
    out = {"n": base["n"], "step0": {k: base.get(k) for k in ("correct_no_c", "correct_c",
                                                               "harm", "rel_len_both")}}
    for m in ("opd", "nca"):
        runs = _seeded(rep, m, seeds)
        out[m] = {k: _spread([r.get(k) for r in runs])
                  for k in ("correct_no_c", "correct_c", "harm", "rel_len_both")}
        out[m]["regimes"] = "".join(regime(r) for r in runs)  # the few-clusters rule's
        out[m]["baseline"] = _spread([rules.independence_harm(r["correct_c"]) for r in runs])
        clear = [rules.beyond_chance(r["ci95"]["harm"][0], r["ci95"]["harm"][1], base["harm"],
                                     r["correct_c"])[0] for r in runs
                 if r.get("harm") is not None and r["ci95"]["harm"][0] is not None]
        out[m]["beyond"] = f"{sum(clear)} of {len(clear)}"
    return out


def _reading(figs: Path, seeds) -> dict | None:
    """reads_c (accuracy with c - with a wrong c of c's form, `evaluate --control`) of step 0
    and of each method's seeds: whether a model uses what c says."""
    if not (figs / CONTEXT_CONTROL).exists():
        return None
    rep = analysis.load(figs / CONTEXT_CONTROL)
    base = next(e for _, e in others(rep))
    out = {"step0": base.control["reads_c"]}
    for m in ("opd", "nca"):
        out[m] = _spread([r.control["reads_c"] for r in _seeded(rep, m, seeds)])
    nca = _seeded(rep, "nca", seeds)
    # NCA's share of step 0's: a ratio, by the percentile bootstrap over units (or not
    # measurable where step 0's reads_c can be 0)
    point, ci = reads_ratio([r.control for r in nca], base.control,
                            [r.items_ for r in nca], base.items_) if nca else (None, None)
    out["share"] = "-" if not nca else "not measurable" if point is None else \
        f"{point:.0%}" if ci is None else f"{point:.0%} [{ci[0]:.0%}, {ci[1]:.0%}]"
    return out


def _views(figs: Path, seeds) -> dict | None:
    """Mean cosine over the layers (the embedding excluded) and over their later half, per run;
    the closed share of step 0's gap (on the mean over layers)."""
    if not (figs / LAYER_SIM).exists():
        return None
    rep = analysis.load(figs / LAYER_SIM)
    rows = dict(others(rep))
    base = next(e for k, e in rows.items() if k != "random_init")
    n = len(base.cos) - 1
    half = n // 2

    def means(e: dict) -> tuple[float, float]:
        cos = e.cos[1:]
        return float(np.mean(cos)), float(np.mean(cos[half:]))

    b_all, b_late = means(base)
    out = {"layers": n, "half": half, "n_examples": base.n_examples,
           "responses_from": rep.responses_from, "step0": {"all": b_all, "late": b_late},
           "random_init": dict(zip(("all", "late"), means(rows["random_init"])))
           if "random_init" in rows else None}
    for m in ("opd", "nca"):
        runs = _seeded(rep, m, seeds)
        out[m] = {"all": _spread([means(r)[0] for r in runs]),
                  "late": _spread([means(r)[1] for r in runs]),
                  "closed": _spread([rules.closed_share(means(r)[0], b_all) for r in runs]),
                  "floor": _spread([max(r.cos_other[1:][half:]) for r in runs
                                    if r.cos_other is not None]),
                  # a floor only where it sits below the run's cosine at every later block
                  "floor_role": null_role((o, c) for r in runs if r.cos_other is not None
                                          for o, c in zip(r.cos_other[1:][half:],
                                                          r.cos[1:][half:]))}
    return out


def _updates(figs: Path, seeds) -> dict | None:
    """Per run: Adam-normalised update size of the first third of the layers over the last
    third (`rules.DEPTH_THIRDS`), and q_proj + k_proj's share of the seven matrix types."""
    if not (figs / PARAM_DELTA).exists():
        return None
    rep = analysis.load(figs / PARAM_DELTA)
    n = rep.n_layers
    third = max(1, n // rules.DEPTH_THIRDS)
    out = {"layers": n, "third": third}
    for m in ("opd", "nca"):
        ratio, qk, top = [], [], []
        for r in _seeded(rep, m, seeds):
            lay, mod = r.per_layer_adam, r.per_module_adam
            if lay.get("0") is None:
                continue  # no learning-rate record: not measurable
            shallow = np.mean([lay[str(i)] for i in range(third)])
            deep = np.mean([lay[str(i)] for i in range(n - third, n)])
            ratio.append(float(shallow / deep))
            sizes = {k: mod.get(k) or 0.0 for k in MATRICES}
            qk.append((sizes["q_proj"] + sizes["k_proj"]) / sum(sizes.values()))
            top.append(set(sorted(MATRICES, key=lambda k: -sizes[k])[:2]) ==
                       {"q_proj", "k_proj"})
        out[m] = {"shallow_deep": _spread(ratio), "qk_share": _spread(qk),
                  "qk_top": f"{sum(top)} of {len(top)}"}
    return out


def _teacher(figs: Path, preset: str) -> dict | None:
    """The row's teacher evaluated in the distilled context (its `teacher_<context>.json`),
    for a row whose students are not yet evaluated: step 0 without c / with c."""
    presets = load().presets
    ctx = presets[preset].context if preset in presets else None
    found = sorted(figs.glob(TEACHER_GLOB))
    path = figs / teacher_file(ctx) if ctx else (found[0] if len(found) == 1 else None)
    if path is None or not path.exists():
        return None
    base = next(iter(analysis.load(path).results.values()))
    return {"correct_no_c": base["correct_no_c"], "correct_c": base["correct_c"]}


def row(preset: str, figures: Path = Path("figures"), seeds=SEEDS) -> dict:
    """Everything the depth sweep reads of one row's folder (None where a report is missing)."""
    figs = figures / preset
    return {"preset": preset, "depth": depth_of(preset),
            "context_return": _context_return(figs, seeds), "reading": _reading(figs, seeds),
            "views": _views(figs, seeds), "updates": _updates(figs, seeds),
            "teacher": _teacher(figs, preset)}


def rows(figures: Path = Path("figures")) -> list[dict]:
    names = load().depth_rows
    if not names:
        raise UsageError("nca_interp/paper/settings.toml lists no depth_rows")
    return [row(n, figures) for n in names]


def command(preset: str) -> str:
    seeds = ",".join(map(str, SEEDS))
    return f"python -m nca_interp.paper.reproduce --task {preset} --seeds {seeds} --threads 1"


def _fmt(s: dict | None, pct: bool = False) -> str:
    if s is None:
        return "-"
    f = (lambda v: f"{100 * v:+.1f}%") if pct else (lambda v: f"{v:.3f}")
    return f(s["mean"]) if s["n"] == 1 else f"{f(s['mean'])} ({f(s['lo'])} to {f(s['hi'])})"


def _span(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _not_run(r: dict, cols: int) -> str:
    return f"| {r['depth']} | not run: `{command(r['preset'])}` |" + " |" * (cols - 2)


def _rows(rs: list[dict], key: str, cols: int, cells) -> list[str]:
    """A table's body: per depth, `cells(r[key])` (the cells after the depth), or "not run"
    with the command where the row lacks that report."""
    return [_not_run(r, cols) if r[key] is None else
            f"| {r['depth']} | " + " | ".join(cells(r[key])) + " |" for r in rs]


def verdicts(figures: Path = Path("figures")) -> list[tuple[str, dict[int, str]]]:
    """Each claim of the rule book as each row's own page judges it (all of that row's
    seeds): [(claim, {depth: verdict word, then the other thresholds' words in brackets})],
    claims matched across rows by their rule-book type; "not run" for a row without its
    evaluation, "-" where a row's design has no such run (the size-matched OPD)."""
    from nca_interp.paper import claims

    names: dict[str, str] = {}
    words: dict[str, dict[int, str]] = {}
    missing = []
    for preset in load().depth_rows:
        figs, depth = figures / preset, depth_of(preset)
        if not (figs / CONTEXT_RETURN).exists():
            missing.append(depth)
            continue
        for c in claims.claims(figs):
            key = c.spec or c.name
            if key not in names or c.verdict != "not run":
                names[key] = c.name
            word = c.verdict if not c.also else \
                f"{c.verdict} ({'; '.join(w for _, w, _ in c.also)})"
            words.setdefault(key, {})[depth] = word if c.coverage is None else \
                f"{word}, n={c.coverage[1]}"
    for by_depth in words.values():
        by_depth.update({d: "not run" for d in missing})
    return [(names[k], words[k]) for k in words]


def table(figures: Path = Path("figures")) -> str:
    """The sweep's tables, a row per depth: context return, harm and length with their nulls,
    reading c, the views, the updates, and every claim's verdict by depth."""
    rs = rows(figures)
    ns = sorted({r["context_return"]["n"] for r in rs if r["context_return"]})
    out = [f"Context return ({' or '.join(map(str, ns)) or 'the'} held-out levels; mean (min "
           f"to max) over seeds {', '.join(map(str, SEEDS))}, a "
           "spread, not an interval; regimes per seed in seed order: A = c hurts, B = c still "
           "needed, C = c irrelevant, by the seed's 95% interval of with c - without c; step 0 "
           "is the null):", "",
           "| layers | step 0 without c / with c | OPD without c | OPD with c | OPD regimes "
           "| NCA without c | NCA with c | NCA regimes |", "|---|---|---|---|---|---|---|---|"]
    first = _rows(rs, "context_return", 8, lambda cr: (
        f"{cr['step0']['correct_no_c']:.3f} / {cr['step0']['correct_c']:.3f}",
        _fmt(cr["opd"]["correct_no_c"]), _fmt(cr["opd"]["correct_c"]), cr["opd"]["regimes"],
        _fmt(cr["nca"]["correct_no_c"]), _fmt(cr["nca"]["correct_c"]), cr["nca"]["regimes"]))
    # a row whose teacher is evaluated but whose students are not shows its step 0 already
    out += [f"| {r['depth']} | {r['teacher']['correct_no_c']:.3f} / "
            f"{r['teacher']['correct_c']:.3f} (teacher alone) | students not run: "
            f"`{command(r['preset'])}` |" + " |" * 5
            if r["context_return"] is None and r["teacher"] else line
            for r, line in zip(rs, first)]
    out += ["", "OPD's harm (P(wrong with c | right without c)) beside its two nulls: step 0's "
            "harm and the independence baseline 1 - accuracy with c (the harm of a model whose "
            "being right with c does not depend on being right without it); 'beyond both' "
            "counts the seeds whose 95% harm interval clears both (the rule book's *harm "
            "beyond chance*). Length: the relative change of the answer's length with c on the "
            "levels right both ways, beside step 0's:", "",
            "| layers | OPD harm | step 0 harm | independence baseline | OPD seeds beyond both "
            "| NCA harm | OPD length change with c | step 0 length change |",
            "|---|---|---|---|---|---|---|---|"]
    out += _rows(rs, "context_return", 8, lambda cr: (
        _fmt(cr["opd"]["harm"]), f"{cr['step0']['harm']:.3f}", _fmt(cr["opd"]["baseline"]),
        cr["opd"]["beyond"], _fmt(cr["nca"]["harm"]), _fmt(cr["opd"]["rel_len_both"], pct=True),
        "-" if cr["step0"]["rel_len_both"] is None
        else f"{100 * cr['step0']['rel_len_both']:+.1f}%"))
    out += ["", "Reading c (`evaluate --control`): reads_c = accuracy with c - with a wrong c "
            "of c's form. A model that breaks when c returns without reading it (reads_c near "
            "0) is hurt by any text in c's place, not by what c says; a model that keeps its "
            "accuracy with c but reads_c near 0 is blind to c, not robust to it. Step 0 (the "
            "teacher) is the reference:", "",
            "| layers | step 0 reads_c | OPD reads_c | NCA reads_c | NCA's share of step 0's |",
            "|---|---|---|---|---|"]
    out += _rows(rs, "reading", 5, lambda rd: (
        f"{rd['step0']:.3f}", _fmt(rd["opd"]), _fmt(rd["nca"]),
        rd.get("share", "-")))
    sample = next((r["views"] for r in rs if r["views"] is not None), None)
    levels = "held-out levels" if sample is None else \
        f"{sample['n_examples']} held-out levels, teacher-forced on {sample['responses_from']}"
    out += ["", f"Views (layer_sim at the response positions, {levels}: cosine of the hidden "
            "states with and without c, the embedding excluded; later half = the blocks "
            "listed, the deeper half; closed = share of step 0's distance to 1 closed, on the "
            "mean over *all* blocks (this project's own description, compared with nothing "
            "of the paper's); different-item null = the "
            "same cosine between views of different items, its highest block in the later "
            "half, to be read against the later-half cosines: a floor where it sits below the "
            "NCA runs' cosine at every later block, else marked a reference, not a floor):", "",
            "| layers | later half | step 0 later half | random init later half | OPD later "
            "half | NCA later half | different-item null (NCA) | OPD closed | NCA closed |",
            "|---|---|---|---|---|---|---|---|---|"]
    out += _rows(rs, "views", 9, lambda v: (
        _span(v["half"], v["layers"] - 1), f"{v['step0']['late']:.3f}",
        f"{v['random_init']['late']:.3f}" if v["random_init"] else "-",
        _fmt(v["opd"]["late"]), _fmt(v["nca"]["late"]),
        _fmt(v["nca"]["floor"]) + {"floor": " (a floor)", "reference": " (a reference)"}.get(
            v["nca"].get("floor_role"), "") if v["nca"]["floor"] else "-",
        _fmt(v["opd"]["closed"]), _fmt(v["nca"]["closed"])))
    out += ["", "The paper (its Sokoban case): under NCA the hidden-state cosine stays >= "
            f"{rules.PAPER_COS_THRESHOLD:g} across all layers; under OPD a noticeable gap "
            "remains in middle and late layers. It gives no cosine for its base model or its "
            "OPD student, so the closed shares here are this project's own description, "
            "compared with nothing of the paper's.", "",
            "Updates (param_delta, Adam-normalised update size; shallow / deep = the first "
            "third of the blocks over the last third, floor(layers / 3) blocks each and at "
            "least one, listed per row: 1 = uniform over depth, below 1 = the deep blocks move "
            "more; q+k share = q_proj and k_proj's share of the seven matrix types, 2/7 = "
            "0.286 = uniform):", "",
            "| layers | shallow / deep blocks | OPD shallow / deep | NCA shallow / deep | OPD q+k "
            "share | NCA q+k share | q, k the top two (OPD; NCA) |",
            "|---|---|---|---|---|---|---|"]
    out += _rows(rs, "updates", 7, lambda u: (
        f"{_span(0, u['third'] - 1)} / {_span(u['layers'] - u['third'], u['layers'] - 1)}",
        _fmt(u["opd"]["shallow_deep"]), _fmt(u["nca"]["shallow_deep"]),
        _fmt(u["opd"]["qk_share"]), _fmt(u["nca"]["qk_share"]),
        f"{u['opd']['qk_top']}; {u['nca']['qk_top']}"))
    judged = verdicts(figures)
    depths = [r["depth"] for r in rs]
    out += ["", "Verdicts by depth: each claim as its row's own page judges it by the rule book "
            "(docs/method.md), on all of that row's seeds (the 4-layer row has five, so its "
            "numbers differ slightly from the tables above, which use seeds 0, 1, 2); words "
            "in brackets are the verdicts under the claim's other thresholds; n = the units its "
            "rule counts (seeds, or runs for the updates; the rule book asks for 3 to "
            "generalise); - where a row's design has no such run:", "",
            "| claim | " + " | ".join(f"{d} layers" for d in depths) + " |",
            "|---|" + "---|" * len(depths)]
    for name, by_depth in judged:
        out.append(f"| {name} | " + " | ".join(by_depth.get(d, "-") for d in depths)
                   + " |")
    return "\n".join(out)


COLOURS = {"opd": "#d62728", "nca": "#2ca02c", "step0": "#1f77b4", "null": "#bbbbbb"}


def _seed_traces(fig, rs, get, method: str, name: str, col: int = 1, dash=None,
                 showlegend=True) -> None:
    """Each seed as a point and the seed mean as a line, against depth."""
    import plotly.graph_objects as go

    pts = [(r["depth"], get(r)) for r in rs if get(r) is not None]
    if not pts:
        return
    fig.add_trace(go.Scatter(
        x=[d for d, s in pts for _ in s["each"]], y=[v for _, s in pts for v in s["each"]],
        mode="markers", marker={"color": COLOURS[method], "size": 6, "opacity": 0.5},
        name=f"{name} (each seed)", legendgroup=name, showlegend=False), row=1, col=col)
    fig.add_trace(go.Scatter(x=[d for d, _ in pts], y=[s["mean"] for _, s in pts],
                             mode="lines+markers", name=name, legendgroup=name,
                             showlegend=showlegend,
                             line={"color": COLOURS[method], "dash": dash}), row=1, col=col)


def _null_trace(fig, rs, get, name: str, colour: str, col: int = 1, dash="dot",
                showlegend=True) -> None:
    import plotly.graph_objects as go

    pts = [(r["depth"], get(r)) for r in rs if get(r) is not None]
    if pts:
        fig.add_trace(go.Scatter(x=[d for d, _ in pts], y=[v for _, v in pts],
                                 mode="lines+markers", name=name, legendgroup=name,
                                 showlegend=showlegend,
                                 line={"color": colour, "dash": dash},
                                 marker={"symbol": "star"}), row=1, col=col)


def _axes(fig, rs, titles: list[str]) -> None:
    depths = [r["depth"] for r in rs]
    for col, title in enumerate(titles, 1):
        fig.update_xaxes(title_text="layers", type="log", tickvals=depths,
                         ticktext=[str(d) for d in depths], row=1, col=col)
        fig.update_yaxes(title_text=title, row=1, col=col)


def _pair(titles: tuple[str, str]):
    from plotly.subplots import make_subplots

    return make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=titles)


def _finish(fig, title: str, note: str, rs: list[dict], ytitles: list[str]) -> None:
    fig.update_layout(title=f"{title}<br><sup>points: seeds; lines: seed means{note}</sup>",
                      height=480, margin={"t": 100}, legend={"orientation": "h", "y": -0.25})
    _axes(fig, rs, ytitles)


def figures(rs: list[dict]) -> dict:
    """One figure per question against depth: {stem: figure}."""
    cr = lambda m, k: lambda r: (r["context_return"] or {}).get(m, {}).get(k)  # noqa: E731
    fig_cr = _pair(("right without c", "right with c"))
    for col, key in ((1, "correct_no_c"), (2, "correct_c")):
        for m in ("opd", "nca"):
            _seed_traces(fig_cr, rs, cr(m, key), m, m.upper(), col, showlegend=col == 1)
        _null_trace(fig_cr, rs, lambda r, k=key: (r["context_return"] or {}).get(
            "step0", {}).get(k), "step 0 (the null)", COLOURS["step0"], col,
            showlegend=col == 1)
    _finish(fig_cr, "Context return against depth (sokoban_remap's recipe)",
            "; 1000 held-out levels", rs, ["right without c", "right with c"])

    vw = lambda m, k: lambda r: (r["views"] or {}).get(m, {}).get(k)  # noqa: E731
    fig_v = _pair(("cosine of the views, later half of layers", "share of step 0's gap closed"))
    for m in ("opd", "nca"):
        _seed_traces(fig_v, rs, vw(m, "late"), m, m.upper(), 1)
        _seed_traces(fig_v, rs, vw(m, "closed"), m, m.upper(), 2, showlegend=False)
    _null_trace(fig_v, rs, lambda r: r["views"] and r["views"]["step0"]["late"],
                "step 0 (the null)", COLOURS["step0"], 1)
    _null_trace(fig_v, rs, lambda r: r["views"] and r["views"]["random_init"] and
                r["views"]["random_init"]["late"], "random init", COLOURS["null"], 1)
    _null_trace(fig_v, rs, lambda r: r["views"] and r["views"]["nca"]["floor"] and
                r["views"]["nca"]["floor"]["mean"], "different-item null", COLOURS["null"], 1,
                dash="dashdot")
    _finish(fig_v, "The two views against depth", "; step 0's closed share is 0 by definition",
            rs, ["cosine", "closed share"])

    up = lambda m, k: lambda r: (r["updates"] or {}).get(m, {}).get(k)  # noqa: E731
    fig_u = _pair(("first / last floor(layers / 3) blocks (at least 1)",
                   "q_proj + k_proj share of 7 types"))
    for m in ("opd", "nca"):
        _seed_traces(fig_u, rs, up(m, "shallow_deep"), m, m.upper(), 1)
        _seed_traces(fig_u, rs, up(m, "qk_share"), m, m.upper(), 2, showlegend=False)
    fig_u.add_hline(y=1.0, line_dash="dot", line_color="#444", annotation_text="uniform",
                    row=1, col=1)
    fig_u.add_hline(y=2 / 7, line_dash="dot", line_color="#444", annotation_text="uniform 2/7",
                    row=1, col=2)
    _finish(fig_u, "Where the update goes, against depth (Adam-normalised)", "", rs,
            ["shallow / deep update size", "share"])
    return {"depth_context_return": fig_cr, "depth_views": fig_v, "depth_updates": fig_u}


def page(figures_dir: Path, text: str, png: bool) -> str:
    names = load().depth_rows
    cmds = "\n".join(f"    {command(n)}" for n in names)
    pages = ", ".join(f"{depth_of(n)} layers: `figures/{n}/`" for n in names
                      if (figures_dir.parent / n / "README.md").exists())
    links = []
    for stem, what in (("depth_context_return", "context return"),
                       ("depth_views", "the two views"), ("depth_updates", "the updates")):
        image = f"\n\n![{what} against depth]({stem}.png)" \
            if png or (figures_dir / f"{stem}.png").exists() else ""
        links.append(f"[{what} against depth (interactive)]({stem}.html){image}\n")
    return (f"# Sokoban depth sweep\n\nGenerated by `python -m nca_interp.paper.depth --write "
            f"--png` from each row's figures/<row>/ JSON (seeds {', '.join(map(str, SEEDS))} "
            f"of each method). sokoban_remap's recipe at each depth: the same width, data, "
            f"distillation steps and learning rate, so the parameter count grows with depth "
            f"and nothing is retuned for it; each remap teacher is fine-tuned from the plain "
            f"game's teacher of its depth. How well that teacher reads c differs with depth "
            f"(step 0 with c in the first table, its reads_c in the third): read each row "
            f"against its own step 0. Each row's own page has every claim judged by the rule "
            f"book, with its intervals ({pages}; in the docs, the results pages of the same "
            f"names).\n\nRows:\n\n{cmds}\n\n{text}\n\n" + "\n".join(links))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m nca_interp.paper.depth", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--figures", default="figures", help="where the rows' folders are")
    ap.add_argument("--write", action="store_true",
                    help=f"write FIGURES/{OUT}/README.md and its figures")
    ap.add_argument("--png", action="store_true", help="also write PNGs (needs kaleido)")
    args = ap.parse_args(argv)
    figures_dir = Path(args.figures)
    text = table(figures_dir)
    print(text)
    if args.write:
        from nca_interp.plots import write_figure

        out = figures_dir / OUT
        out.mkdir(parents=True, exist_ok=True)
        for stem, fig in figures(rows(figures_dir)).items():
            write_figure(fig, out / stem, png=args.png)
        write_text(out / "README.md", page(out, text, args.png))
        print("wrote", out / "README.md")


if __name__ == "__main__":
    from nca_interp.cli import started

    started()
    main()

