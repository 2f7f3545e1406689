"""Result -> `plotly.graph_objects.Figure`. Nothing here loads checkpoints or computes metrics.

PNG export uses kaleido, which drives a Chromium: install Debian's `chromium` once
(`apt-get install -y chromium`) and set `BROWSER_PATH=/usr/bin/chromium` (write_figure sets it
when that file exists). Nothing is downloaded at run time; HTML needs none of this.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from nca_interp.errors import RunError
from nca_interp.identity import RunId, roster
from nca_interp.regimes import regime
from nca_interp.reports import (
    ContextReturnReport,
    GradAlignReport,
    LayerSimReport,
    Patching,
    ReportError,
    TrajectoryReport,
    as_report,
    label,
    layer_head_shape,
    null_role,
)

__all__ = ["BUNDLE", "PALETTE", "bundle_folder", "bundle_src", "check_bundle",
           "context_return_figure", "evaluate_figure", "grad_align_figure",
           "grad_align_over_steps", "grad_x", "head_heatmaps", "heatmap",
           "layer_sim_figure", "notebook_renderer", "patching_figures", "trajectory_figure",
           "unscored_figure", "write_figure", "figure_files", "figure_path", "div_id", "png_bytes",
           "write_files"]

PALETTE = {"random_init": "#9e9e9e", "base": "#1f77b4", "opd": "#d62728", "nca": "#2ca02c"}


DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def _line(rid: RunId, i: int) -> dict:
    """One colour per method (base/opd/nca/random; the size-matched OPD as OPD), a dash style
    per seed (six styles, so up to six seeds of one method stay distinguishable)."""
    role = "opd" if rid.method == "opdsized" else rid.method or next(
        (k for k in ("random_init", "base") if k in rid.name.lower()), None)
    color = PALETTE.get(role or "") or qualitative.Plotly[i % len(qualitative.Plotly)]
    dash = DASHES[rid.seed % len(DASHES)] if rid.seed is not None else "solid"
    return {"color": color, "dash": dash}


def runs_label(report: Mapping) -> str:
    """Which setting and seeds a figure's runs are: `sokoban_long_opd_s0 ... _nca_s4` ->
    'sokoban_long, seeds 0-4' (titles name them; a folder's figures are otherwise alike)."""
    found = [i for i in roster(report).values() if i.of_method()]
    settings = sorted({i.setting for i in found if i.setting})
    seeds = sorted({i.seed for i in found if i.seed is not None})
    if not settings:
        return ", ".join(report["results"])
    span = f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) \
        and len(seeds) > 2 else ", ".join(map(str, seeds))
    return f"{', '.join(settings)}, seed{'s' if len(seeds) > 1 else ''} {span}"


def _ci_bars(values: list, cis: list) -> dict:
    """Asymmetric error bars from 95% intervals (None where undefined)."""
    up = [None if v is None or c is None or c[1] is None else c[1] - v
          for v, c in zip(values, cis)]
    down = [None if v is None or c is None or c[0] is None else v - c[0]
            for v, c in zip(values, cis)]
    return {"type": "data", "symmetric": False, "array": up, "arrayminus": down}


def layer_sim_figure(report: LayerSimReport) -> go.Figure:
    """Line per checkpoint over layers: raw cosine (± std), centred cosine, CKA, ctx attention."""
    report = as_report(report, LayerSimReport)
    layers = report.layers
    titles = ["cosine with vs without c<br>(whiskers: std over items; faint: different items)",
              "mean-centred cosine (pooled mean)", "linear CKA (faint: debiased)",
              "context reading: attention on c / c's share of keys (1 = uniform)"]
    fig = make_subplots(rows=2, cols=2, subplot_titles=titles)
    who = roster(report)
    for i, (name, r) in enumerate(report.results.items()):
        kw = {"name": name, "legendgroup": name, "line": _line(who[name], i),
              "mode": "lines+markers"}
        fig.add_trace(go.Scatter(x=layers, y=r.cos, error_y={"array": r.cos_std}, **kw),
                      1, 1)
        dotted = {**kw, "line": {**kw["line"], "width": 1.5}, "opacity": 0.4, "mode": "lines",
                  "showlegend": False}
        if r.cos_other is not None:  # the anisotropy floor: views of different items
            fig.add_trace(go.Scatter(x=layers, y=r.cos_other,
                                     hovertemplate="different items: %{y:.4f}<extra></extra>",
                                     **dotted), 1, 1)
        fig.add_trace(go.Scatter(x=layers, y=r.cos_centred, showlegend=False, **kw), 1, 2)
        fig.add_trace(go.Scatter(x=layers, y=r.cka, showlegend=False, **kw), 2, 1)
        if r.cka_debiased is not None:
            fig.add_trace(go.Scatter(x=layers, y=r.cka_debiased,
                                     hovertemplate="debiased: %{y:.4f}<extra></extra>",
                                     **dotted), 2, 1)
        attn = r.ctx_attn if r.ctx_attn_ratio_layer is None else r.ctx_attn_ratio_layer
        fig.add_trace(go.Scatter(x=layers[1:], y=attn,
                                 showlegend=False, **kw), 2, 2)
    fig.add_hline(y=0.997, line_dash="dot", line_color="#555", row=1, col=1,
                  annotation_text="0.997 (the paper's NCA claim)",
                  annotation_position="bottom left")
    fig.add_hline(y=1.0, line_dash="dot", line_color="#555", row=2, col=2,
                  annotation_text="uniform attention", annotation_position="top left")
    fig.update_xaxes(title_text="layer")
    for row, col, what in ((1, 1, "cosine"), (1, 2, "centred cosine"), (2, 1, "CKA"),
                           (2, 2, "ratio")):
        fig.update_yaxes(title_text=what, row=row, col=col)
    where = {"generating": "positions generating the response (trained)",
             "prompt": "prompt x positions (untouched by the loss)"}.get(
        report.at, "response positions")
    fig.update_layout(title=f"{report.task} ({runs_label(report)}): hidden "
                            f"states with vs without context '{report.context}'<br><sup>"
                            f"{where}; responses: {report.responses or 'own'}</sup>",
                      height=720, width=1000, margin={"t": 130})
    return fig


def head_heatmaps(report: LayerSimReport) -> go.Figure:
    """Per checkpoint, layer x head context reading (1 = uniform; random-init is the null)."""
    report = as_report(report, LayerSimReport)
    names = list(report.results)
    cols = min(4, len(names))
    rows = -(-len(names) // cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=names, vertical_spacing=0.08)
    zmax = max(max(map(max, r.ctx_attn_ratio)) for r in report.results.values())
    for i, name in enumerate(names):
        R = report.results[name].ctx_attn_ratio
        fig.add_trace(go.Heatmap(z=R, x=[f"H{h}" for h in range(len(R[0]))],
                                 y=[f"L{i}" for i in range(len(R))], zmin=0, zmax=zmax,
                                 colorscale="Viridis", showscale=i == 0,
                                 colorbar={"title": {"text": "attention on c /<br>c's share "
                                                             "(1 = uniform)"}},
                                 hovertemplate="%{y}%{x}: %{z:.2f}<extra></extra>"),
                      i // cols + 1, i % cols + 1)
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title=f"{report.task} ({runs_label(report)}): context reading per "
                            "head (context "
                            f"'{report.context}'; random_init is the null)",
                      height=120 + 300 * rows, width=260 * cols + 160)
    return fig


def heatmap(values: list[list[float | None]], rows: list[str], cols: list[str], title: str,
            signed: bool = False, zmax: float | None = None) -> go.Figure:
    """Layer x module heatmap; a diverging scale centred on 0 for signed values."""
    kw = dict(colorscale="RdBu", zmid=0, zmin=-(zmax or 1), zmax=zmax or 1) if signed else \
        dict(colorscale="Viridis")
    fig = go.Figure(go.Heatmap(z=values, x=cols, y=rows, **kw,
                               hovertemplate="%{y} %{x}: %{z:.4f}<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="module", yaxis_title="layer",
                      yaxis=dict(autorange="reversed"), height=450, width=800)
    return fig


def grad_x(report: GradAlignReport) -> tuple[list, bool]:
    """The x of a grad_align report's checkpoints and whether they are one run's course over
    training (distinct recorded steps, one run folder): steps, joined by lines; else the
    checkpoints' names as categories, never joined (different runs have no course)."""
    report = as_report(report, GradAlignReport)
    names = list(report.results)
    steps = report.steps
    ckpts = (report.config or {}).get("ckpt") or []
    runs = {Path(str(c)).parent.parent for c in ckpts}
    if steps and len(set(steps)) == len(names) and len(runs) <= 1:
        return list(steps), True
    return [Path(str(n)).name for n in names], False


def _grad_run(report: GradAlignReport) -> str:
    report = as_report(report, GradAlignReport)
    first = (report.get("config") or {}).get("ckpt") or \
        [r.get("path") for r in report.get("runs", {}).values()] or [None]
    return Path(str(first[0])).parent.parent.name if first[0] else ""


def grad_align_figure(report: GradAlignReport) -> go.Figure:
    """One panel per pair of loss terms: their cross-fitted angle at each checkpoint (solid)
    beside the self-angles of the two terms it joins (dotted: the angle between each term's
    two half-batch gradients; an angle is only read where it stands clear of both), each named
    a floor or a reference by whether the angles it is read against all sit above it
    (`reports.null_role`)."""
    report = as_report(report, GradAlignReport)
    names = list(report.results)
    steps, over_training = grad_x(report)
    first = report.results[names[0]].global_
    pairs = list(first["angle_xfit_deg"])
    line = "lines+markers" if over_training else "markers"
    fig = make_subplots(rows=1, cols=len(pairs), shared_yaxes=True,
                        subplot_titles=[p.replace("~", " vs ") for p in pairs])
    colours = {"opd": PALETTE["opd"], "nca": PALETTE["nca"], "ctx": PALETTE["base"]}
    for col, pair in enumerate(pairs, 1):
        val = lambda n, k, key: report.results[n].global_[key].get(k)  # noqa: E731
        fig.add_trace(go.Scatter(x=steps, y=[val(n, pair, "angle_xfit_deg") for n in names],
                                 name="cross-fitted angle (two halves)", legendgroup="angle",
                                 showlegend=col == 1, mode=line,
                                 line={"color": "#222"}), 1, col)
        cells = [report.results[n].global_.get("parts", {}).get("pairs", {}).get(pair)
                 for n in names]
        if any(cells):
            y = [c["angle_corrected_deg"] if c else None for c in cells]
            ci = [tuple(c["angle_ci95_deg"]) if c and c.get("angle_ci95_deg") else None
                  for c in cells]
            fig.add_trace(go.Scatter(x=steps, y=y, error_y=_ci_bars(y, ci),
                                     name="noise-corrected angle (95% jackknife)",
                                     legendgroup="corrected", showlegend=col == 1,
                                     mode="markers", marker={"color": "#9467bd", "size": 8}),
                          1, col)
        for term in pair.split("~"):
            fig.add_trace(go.Scatter(x=steps, y=[val(n, term, "self_angle_deg") for n in names],
                                     name=f"self-angle of {term} ({_self_role(report, term)})",
                                     legendgroup=term,
                                     showlegend=term not in {t for p in pairs[:col - 1]
                                                             for t in p.split("~")},
                                     mode="lines" if over_training else "markers",
                                     marker={"symbol": "line-ew-open", "size": 14,
                                             "color": colours.get(term, "#888")},
                                     line={"dash": "dot", "color": colours.get(term, "#888")}),
                          1, col)
        fig.add_hline(y=90, line_dash="dash", line_color="#aaa", row=1, col=col,
                      annotation_text="90 deg: orthogonal", annotation_position="top left")
    fig.update_xaxes(title_text="distillation step" if over_training else "checkpoint")
    fig.update_yaxes(title_text="degrees", range=[0, 180], col=1)
    run = _grad_run(report) if over_training else f"{len(names)} checkpoints"
    fig.update_layout(title=f"{report.task or ''} {run}: angles between loss-term "
                            "gradients<br><sup>dotted"
                            + ("" if over_training else " (a dash per checkpoint)")
                            + ": each term's self-angle (its two half batches' angle), a "
                            "floor only where every angle of that term sits above it, else a "
                            "reference;<br>a missing point: the term is within its own noise "
                            "there</sup>",
                      margin={"t": 150},
                      height=470, autosize=True)
    return fig


def _self_role(report: GradAlignReport, term: str) -> str:
    """A term's self-angle against the cross-fitted angles of the pairs it joins, at every
    checkpoint of `report`: "floor" where they all sit above it, else "reference"."""
    return null_role((g["self_angle_deg"].get(term), a) for g in
                     (r.global_ for r in report.results.values())
                     for pair, a in g["angle_xfit_deg"].items() if term in pair.split("~"))


def grad_align_over_steps(report: GradAlignReport) -> go.Figure:
    """Angles between the loss terms' gradients over training (solid): the noise-corrected
    angle with its 95% jackknife interval where grad_align ran with --parts (what the claims
    judge), else the cross-fitted angle; each term's self-angle dotted, named a floor or a
    reference by comparison with the cross-fitted angles (`_self_role`)."""
    report = as_report(report, GradAlignReport)
    steps = report.steps or list(range(len(report.results)))
    fig = go.Figure()
    names = list(report.results)
    cells = [report.results[n].global_ for n in names]
    corrected = all(c.get("parts") for c in cells)
    for p in cells[0]["angle_xfit_deg"]:
        if corrected:
            part = [c["parts"]["pairs"][p] for c in cells]
            y = [q["angle_corrected_deg"] for q in part]
            ci = [q.get("angle_ci95_deg") or [None, None] for q in part]
            err = {"type": "data", "symmetric": False,
                   "array": [None if a is None or hi is None else hi - a
                             for a, (_, hi) in zip(y, ci)],
                   "arrayminus": [None if a is None or lo is None else a - lo
                                  for a, (lo, _) in zip(y, ci)]}
            fig.add_trace(go.Scatter(x=steps, y=y, error_y=err, name=p, mode="lines+markers"))
        else:
            fig.add_trace(go.Scatter(x=steps, y=[c["angle_xfit_deg"][p] for c in cells], name=p,
                                     mode="lines+markers"))
    for t in cells[0]["self_angle_deg"]:
        fig.add_trace(go.Scatter(x=steps, y=[c["self_angle_deg"][t] for c in cells],
                                 name=f"self-angle {t} ({_self_role(report, t)})",
                                 mode="lines", line={"dash": "dot"}))
    fig.add_hline(y=90, line_dash="dot", annotation_text="orthogonal (90 deg)")
    run = Path(str(report["config"]["ckpt"][0])).parent.parent.name if report.get("config") \
        else ""
    what = ("noise-corrected angles (whiskers: 95% jackknife intervals over random half "
            "splits)" if corrected else "cross-fitted angles (no --parts: uncorrected)")
    fig.update_layout(title=f"{report.task or ''} {run}: gradient angles over training"
                            f"<br><sup>solid: {what};<br>dotted: each term's self-angle (its "
                            "two half batches' angle; a floor only where every cross-fitted "
                            "angle of that term sits above it, else a reference)</sup>",
                      margin={"t": 130},
                      xaxis_title="distillation step", yaxis_title="degrees",
                      yaxis=dict(range=[0, 180]), height=450, autosize=True)
    return fig


def patching_figures(report: Patching) -> dict[str, go.Figure]:
    """Causal patching of one checkpoint's cases (harm or help): layer x position or layer x
    position group (residual stream), layer x head (output patching in the full scope; removal
    of attention to c always), the held-out head table against its random-head null, and the
    logit lens of both views."""
    report = as_report(report, Patching)
    kind = report.kind or "harm"
    if kind not in report:
        return {}
    name = Path(report.checkpoint).name
    L, H, n = report.n_layers, report.n_heads, report[kind]["n"]
    assert L is not None and H is not None and report.forward is not None \
        and report.lens is not None  # an entry with cases has them
    held = layer_head_shape(report)  # drawn over what its arrays hold, not what it says
    if (held[0] is not None and held[0] != L) or (held[1] is not None and held[1] != H):
        raise ReportError(f"the patching entry of {report.checkpoint} says {L} layers x {H} "
                          f"heads, but its arrays hold {held[0]} x {held[1]}; restore it (git "
                          "checkout, or its own command)")
    who = f"{report.task} {name} ({n} {kind} cases)"
    undo = {"harm": "1 = harm undone", "help": "1 = help removed"}[kind]
    layers = [f"L{i}" for i in range(L)]
    figs = {}
    if "resid_offsets" in report.forward:
        off = report["forward"]["resid_offsets"]["mean"]  # L K
        K = len(off[0])
        x, z = [f"-{k}" for k in range(1, K + 1)], off
        xtitle = "aligned position: offset from the deciding position (-1), back through " \
                 "the response prefix into x"
    else:
        rg = report.forward["resid_groups"]
        x = ["all aligned", "x", "response prefix", "deciding position"]
        z = [[rg[g]["mean"][i] for g in ("all", "x", "response", "decide")] for i in range(L)]
        xtitle = "aligned positions patched"
    figs["positions"] = go.Figure(go.Heatmap(
        z=z, x=x, y=layers, colorscale="RdBu", zmid=0, zmin=-1, zmax=1,
        colorbar={"title": "normalised<br>effect"},
        hovertemplate="%{y} %{x}: %{z:.2f}<extra></extra>"))
    figs["positions"].update_layout(
        title=f"{who}: residual stream, no-context run patched into the context run<br>"
              f"<sup>0 = unchanged, {undo}; mean over cases</sup>",
        xaxis_title=xtitle, yaxis_title="layer", yaxis=dict(autorange="reversed"),
        height=max(380, 16 * L + 160), autosize=True)
    panels = [("ablation", report.ablation["mean"], "attention to c removed")] \
        if report.ablation is not None else []  # None: the bridge ignores pattern edits
    if "heads" in report.forward:
        panels = [("forward", report["forward"]["heads"]["mean"], "output no-c -> c"),
                  ("reverse", report["reverse"]["heads"]["mean"], "output c -> no-c")] + panels
    if panels:
        heads = make_subplots(rows=1, cols=len(panels), subplot_titles=[p[2] for p in panels])
        for col, (_, zz, _) in enumerate(panels):
            heads.add_trace(go.Heatmap(z=zz, x=[f"H{h}" for h in range(H)], y=layers,
                                       colorscale="RdBu", zmid=0, zmin=-1, zmax=1,
                                       showscale=col == len(panels) - 1,
                                       colorbar={"title": "normalised<br>effect"}), 1, col + 1)
        heads.update_xaxes(title_text="head")
        heads.update_yaxes(autorange="reversed")  # layer 0 on top in every panel
        heads.update_yaxes(title_text="layer", col=1)
        heads.update_layout(title=f"{who}: per head<br><sup>0 = unchanged, 1 = the other view's "
                                  f"logit difference at the deciding position</sup>",
                            height=max(380, 16 * L + 160), autosize=True)
        figs["heads"] = heads
    rows = (report.heads or {}).get("rows")
    if rows:
        hd = report["heads"]
        sel = make_subplots(rows=1, cols=2, horizontal_spacing=0.14, subplot_titles=[
            "teacher-forced effect", "answers flipped" + (
                "" if hd["n_random_generate"] else "<br><sup>no random-head null: 0 draws</sup>")])
        ks = [str(r["k"]) for r in rows]
        for col, (key, null) in enumerate((("effect", "effect_null"),
                                           ("flipped", "flipped_null")), 1):
            mean = [r[key]["mean"] for r in rows]
            sel.add_trace(go.Bar(x=ks, y=mean, name="heads chosen on the other half",
                                 marker_color=PALETTE["opd"], showlegend=col == 1,
                                 error_y=_ci_bars(mean, [(r[key]["lo"], r[key]["hi"])
                                                         for r in rows])), 1, col)
            nm = [r.get(null, {}).get("mean") for r in rows]
            sel.add_trace(go.Scatter(
                x=ks, y=nm, mode="markers", name="random heads (95% of draws)",
                marker={"color": "#555", "symbol": "diamond", "size": 9}, showlegend=col == 1,
                error_y=_ci_bars(nm, [(r.get(null, {}).get("lo"), r.get(null, {}).get("hi"))
                                      for r in rows])), 1, col)
        sel.update_xaxes(title_text="k heads' context reading removed", type="category")
        sel.update_yaxes(title_text="normalised effect", col=1)
        sel.update_yaxes(title_text=f"fraction of {kind} cases flipped", col=2)
        sel.update_layout(title=f"{who}:<br>heads chosen on one half, judged on the other"
                                "<br><sup>bars: 95% bootstrap over cases (a unit's cases "
                                f"together); null: "
                                f"{hd['n_random']} / {hd['n_random_generate']} draws of k random "
                                "heads the selection did not pick</sup>",
                          height=480, autosize=True, margin={"t": 120},
                          legend={"orientation": "h", "y": -0.25})
        figs["head_selection"] = sel
    lens = make_subplots(rows=1, cols=2, subplot_titles=["KL(no c || c) of the decoded layer",
                                                         "rank of the right answer"])
    xl = ["embed"] + [str(i) for i in range(L)]
    lens.add_trace(go.Scatter(x=xl, y=report.lens["kl"]["mean"], name=f"{kind} cases",
                              line={"color": PALETTE["opd"]}), 1, 1)
    if report.control is not None:
        lens.add_trace(go.Scatter(x=xl, y=report.control["lens"]["kl"]["mean"],
                                  name="controls (both right)", line={"color": "#7f7f7f"}), 1, 1)
    lens.add_trace(go.Scatter(x=xl, y=report.lens["rank_no_c"]["mean"],
                              name="no-context view", line={"dash": "dot"}), 1, 2)
    lens.add_trace(go.Scatter(x=xl, y=report.lens["rank_c"]["mean"], name="context view"),
                   1, 2)
    lens.update_xaxes(title_text="layer")
    lens.update_yaxes(title_text="KL (nats)", col=1)
    lens.update_yaxes(title_text="rank (0 = top)", col=2)
    lens.update_layout(title=f"{who}: logit lens at the deciding position", height=400,
                       autosize=True)
    figs["lens"] = lens
    return figs


def context_return_figure(summary: dict, task: str, context: str,
                          success: str = "win") -> go.Figure:
    """Bars per metric and method: mean over seeds, error bars spanning min..max. `success`:
    `win` (games) or `accuracy` (QA) names the first two bars."""
    metrics = ["correct_no_c", "correct_c", "harm", "harm_joint", "help_joint", "both"]
    names = [label(m, success) for m in metrics]
    fig = go.Figure()
    for method, r in summary.items():
        # harm is P(lost with c | won without c): undefined (None, no bar) with no win without c
        cell = {m: r[m] or {"mean": None, "min": None, "max": None} for m in metrics}
        mean = [cell[m]["mean"] for m in metrics]
        gap = lambda a, b: None if a is None or b is None else a - b  # noqa: E731
        fig.add_trace(go.Bar(
            name=f"{method} ({'/'.join(r['regimes'])})", x=names, y=mean,
            marker_color=PALETTE.get(method),
            error_y={"type": "data", "symmetric": False,
                     "array": [gap(cell[m]["max"], cell[m]["mean"]) for m in metrics],
                     "arrayminus": [gap(cell[m]["mean"], cell[m]["min"]) for m in metrics]}))
    fig.update_layout(title=f"{task}: context return (context '{context}'; bars: mean over "
                            "seeds, whiskers: min-max; legend: regime per seed)",
                      barmode="group", yaxis=dict(range=[0, 1]), height=450, width=900)
    return fig


def evaluate_figure(report: ContextReturnReport) -> go.Figure:
    """Per checkpoint: right without c, with c, harm, help, both-right, with 95% intervals."""
    report = as_report(report, ContextReturnReport)
    metrics = ["correct_no_c", "correct_c", "harm", "help", "both"]
    unit = next(iter(report.results.values()))
    # a QA task's success is accuracy: its bars say so, as its tables do
    names = [label(m, unit.metric or "win") for m in metrics]
    fig = go.Figure()
    who = roster(report)
    for i, (name, r) in enumerate(report.results.items()):
        vals = [r.get(m) for m in metrics]
        fig.add_trace(go.Bar(name=f"{name} ({regime(r)})", x=names, y=vals,
                             marker_color=_line(who[name], i)["color"],
                             error_y=_ci_bars(vals, [r.ci95.get(m) for m in metrics])))
    task = f"{report.task}: " if report.task else ""
    # items cluster into units (a fact's questions, a level's seeds); where each item is its
    # own unit, say the count once
    count = f"{unit.n} items" if unit.unit == "item" and unit.n_units == unit.n \
        else f"{unit.n} items, {unit.n_units} {unit.unit}s"
    fig.update_layout(title=f"{task}context return per checkpoint (context "
                            f"'{report.context}'; {count})<br><sup>whiskers: 95% "
                            "cluster-bootstrap "
                            "intervals; legend: regime</sup>",
                      barmode="group", yaxis=dict(range=[0, 1], title="rate"), height=450,
                      width=900, showlegend=True)  # plotly hides a lone trace's legend, and
    # with it the regime the subtitle points to
    return fig


def trajectory_figure(report: TrajectoryReport) -> go.Figure:
    """Per run, over distillation steps: win rates without / with c, harm, and the three KLs
    (step 0, the initial checkpoint, is the null)."""
    report = as_report(report, TrajectoryReport)
    titles = ["win rate without c (solid) / with c (dot)", "harm = P(lost with c | won without)",
              "KL(g(.|x) || f(.|x,c)): the gap OPD closes",
              "KL(g(.|x,c) || f(.|x,c)): context-view drift"]
    fig = make_subplots(rows=2, cols=2, subplot_titles=titles)
    who = roster(report)
    for i, (name, r) in enumerate(report.results.items()):
        steps = [row["step"] for row in r.steps]
        line = _line(who[name], i)
        col = lambda k, rows=r.steps: [row[k] for row in rows]  # noqa: E731
        kw = {"legendgroup": name, "mode": "lines+markers"}
        ci = lambda k, rows=r.steps: [row["ci95"].get(k) for row in rows]  # noqa: E731
        fig.add_trace(go.Scatter(x=steps, y=col("correct_no_c"), name=name, line=line,
                                 error_y=_ci_bars(col("correct_no_c"), ci("correct_no_c")),
                                 **kw), 1, 1)
        fig.add_trace(go.Scatter(x=steps, y=col("correct_c"), name=f"{name} with c",
                                 line={**line, "dash": "dot"}, showlegend=False,
                                 error_y=_ci_bars(col("correct_c"), ci("correct_c")), **kw), 1, 1)
        fig.add_trace(go.Scatter(x=steps, y=col("harm"), line=line, showlegend=False,
                                 error_y=_ci_bars(col("harm"), ci("harm")), **kw), 1, 2)
        for j, k in enumerate(("kl_opd", "kl_ctx")):
            bounds = [row["ci95"][k] for row in r.steps]
            fig.add_trace(go.Scatter(
                x=steps, y=col(k), line=line, showlegend=False,
                error_y={"type": "data", "symmetric": False,
                         "array": [c[1] - v for c, v in zip(bounds, col(k))],
                         "arrayminus": [v - c[0] for c, v in zip(bounds, col(k))]}, **kw),
                2, 1 + j)
    fig.update_xaxes(title_text="distillation step")
    for at_row, at_col, what in ((1, 1, "rate"), (1, 2, "harm"), (2, 1, "KL (nats/token)"),
                                 (2, 2, "KL (nats/token)")):
        fig.update_yaxes(title_text=what, row=at_row, col=at_col)
    if all(row.get("harm") is None for r in report.results.values() for row in r.steps):
        # an empty panel on plotly's default -1..4 axis reads as a plotting bug; say why
        fig.update_yaxes(range=[0, 1], row=1, col=2)
        fig.add_annotation(text="harm undefined at every step:<br>no item right without c",
                           x=0.5, y=0.5, xref="x2 domain", yref="y2 domain", showarrow=False)
    first = next(iter(report.results.values()))
    fig.update_layout(title=f"{first.task} ({runs_label(report)}): context "
                            f"return over training<br><sup>runs {', '.join(report.results)}; "
                            f"context '{first.context}'; step 0 = the initial checkpoint, "
                            "the null; whiskers: 95% intervals</sup>", height=700, width=1000)
    return fig


def notebook_renderer() -> None:
    """Notebooks: figures carry plotly.js inline (the first one) so they render offline and
    survive an HTML export (`jupyter nbconvert --to html`); JupyterLab uses the mimetype."""
    import plotly.io as pio

    pio.renderers.default = "plotly_mimetype+notebook"


def unscored_figure(report: ContextReturnReport) -> go.Figure:
    """Own data without a scorer: per checkpoint, the mean response length without and with c
    and the views' token KL, with 95% intervals."""
    report = as_report(report, ContextReturnReport)
    from plotly.subplots import make_subplots

    reps = report.results
    names = list(reps)
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "response length (tokens)", "KL(g(.|x) || g(.|x,c)) per token"))
    for key, colour in (("len_no_c", "#4c78a8"), ("len_c", "#f58518")):
        fig.add_bar(x=names, y=[reps[n][key] for n in names], name=key, marker_color=colour,
                    error_y=_interval([reps[n][key] for n in names],
                                      [reps[n].ci95[key] for n in names]), row=1, col=1)
    fig.add_bar(x=names, y=[reps[n].kl_views for n in names], name="kl_views",
                marker_color="#54a24b", error_y=_interval(
                    [reps[n].kl_views for n in names],
                    [reps[n].kl_views_ci95 for n in names]), row=1, col=2)
    if all("kl_views" in (reps[n].control or {}) for n in names):  # the wrong-c null
        ctrl = [reps[n].control for n in names]
        fig.add_bar(x=names, y=[c["kl_views"] for c in ctrl], name="kl_views with wrong c'",
                    marker_color="#bab0ac", error_y=_interval(
                        [c["kl_views"] for c in ctrl], [c["kl_views_ci95"] for c in ctrl]),
                    row=1, col=2)
    fig.update_layout(title=f"{report.task}: context return without a scorer", width=900,
                      height=420, barmode="group")
    return fig


def _interval(values: list[float], cis: list) -> dict:
    """plotly error bars from (lo, hi) intervals around `values`."""
    return {"type": "data", "symmetric": False,
            "array": [hi - v for v, (lo, hi) in zip(values, cis)],
            "arrayminus": [v - lo for v, (lo, hi) in zip(values, cis)]}


BUNDLE = "plotly.min.js"  # the one file of plotly.js that every page of a folder tree loads


def bundle_state(folder: Path) -> str:
    """What `folder/plotly.min.js` is: "ok" (plotly's own, checked by size and sha256, and
    no one but this user can change it), "unsafe" (plotly's own, but another user owns it or
    a folder above it, or others may write one of them: never loaded from above, replaced by
    this user's copy in an output folder), "missing", "partial" (a prefix of it: a write
    killed half-way, e.g. plotly's own writer's 0-byte file) or "foreign" (a file of that
    name that is not plotly's: someone else's)."""
    import hashlib

    from plotly.offline import get_plotlyjs

    from nca_interp.fsio import others_can_change

    target = Path(folder) / BUNDLE
    if not target.exists() and not target.is_symlink():
        return "missing"
    if not target.is_file() or target.is_symlink():
        return "foreign"
    want = get_plotlyjs().encode("utf-8")
    size = target.stat().st_size
    if size == len(want):
        same = hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(want).digest()
        # whoever else can change it or a folder above it (`others_can_change`, the check
        # of every --out too) could put their script where the pages load plotly.js
        return ("unsafe" if others_can_change(target) else "ok") if same else "foreign"
    if size < len(want) and target.read_bytes() == want[:size]:
        return "partial"
    return "foreign"


def bundle_folder(folder: str | Path) -> Path:
    """The folder whose plotly.min.js a page written in `folder` loads, so a tree of pages
    holds one copy of plotly.js (4.6 MB), not one per folder: `folder` itself where it holds a
    file of that name (plotly's; or one to repair, replace or refuse, `ensure_plotly_bundle`),
    else the nearest folder above holding plotly's own bundle that only this user can change
    (the repository's figures/plotly.min.js for every setting's folder; never one another
    user could swap for a script), else `folder`, where a copy is written beside the page: a
    fresh output folder is whole by itself, offline, and can be moved or sent as it is."""
    folder = Path(folder).absolute()  # lexical, as a browser resolves a relative src
    if bundle_state(folder) != "missing":
        return folder
    for up in folder.parents:
        try:
            if bundle_state(up) == "ok":
                return up
        except OSError:  # an unreadable folder above is no bundle of ours
            continue
    return folder


def bundle_src(folder: str | Path) -> str:
    """The `src` a page in `folder` loads plotly.js from (`bundle_folder`), relative to it:
    "plotly.min.js" beside it, "../plotly.min.js" one folder up."""
    here = Path(folder).absolute()
    return Path(os.path.relpath(bundle_folder(here) / BUNDLE, here)).as_posix()


def check_bundle(folder: Path) -> None:
    """Refuse, before any work, a folder whose plotly.min.js is not plotly's (it would be
    replaced: it is someone's file)."""
    if bundle_state(folder) == "foreign":
        raise RunError(f"{Path(folder) / BUNDLE} is not plotly's bundle and the "
                       "figures would replace it; move it away or write the figures to "
                       "another folder")


def ensure_plotly_bundle(folder: Path) -> Path:
    """`folder/plotly.min.js`, the bundle the pages load, checked by size and sha256 against
    plotly's own and written atomically when missing or cut short (plotly's writer keeps any
    file of that name: a kill while it wrote one left a 0-byte bundle for every later page);
    a file of that name that is not plotly's is never replaced (`check_bundle`)."""
    from plotly.offline import get_plotlyjs

    from nca_interp.fsio import write_bytes

    state = bundle_state(folder)
    target = Path(folder) / BUNDLE
    if state == "ok":
        return target
    check_bundle(folder)
    return write_bytes(target, get_plotlyjs().encode("utf-8"))


PNG_TRIES = 3  # a PNG export's attempts where the browser tab was not ready


def figure_files(fig: go.Figure, stem: str | Path, png: bool = False) -> dict[Path, bytes]:
    """The bytes of `stem.html` (and `stem.png` when asked, `png_bytes`), rendered but not
    written, so a writer can record their sha256 before any lands (`nca_interp.analysis.write`).

    The HTML renders offline: it loads plotly.js by a relative link, never a CDN, from the
    one bundle of its folder tree (`bundle_folder`: figures/plotly.min.js for the published
    pages, a copy beside the page in a fresh output folder; `write_files` writes it there),
    and the page takes the browser's width (the layout's fixed width is kept for the PNG
    only). Its div id is the stem's name, not a random one: a redraw of the same data in the
    same place gives the same bytes."""
    stem = Path(stem)
    page = go.Figure(fig)
    page.update_layout(width=None, autosize=True)
    files = {figure_path(stem, ".html"): page.to_html(
        include_plotlyjs=bundle_src(stem.parent), config={"responsive": True},
        default_width="100%", div_id=div_id(stem.name)).encode("utf-8")}
    if png:
        files[figure_path(stem, ".png")] = png_bytes(fig)
    return files


def figure_path(stem: str | Path, ext: str) -> Path:
    """`stem` + `ext` with the whole name kept: a checkpoint's folder `m.v1` gives `m.v1.html`
    (`with_suffix` cut it to `m.html`, where `m.v2`'s page silently replaced it)."""
    stem = Path(stem)
    return stem.parent / f"{stem.name}{ext}"


def div_id(name: str) -> str:
    """A page's div id from a figure's file name (a checkpoint folder's name, any text): plotly
    pastes it unescaped into `<div id="...">` and into its inline script's JS strings, so
    every character but [A-Za-z0-9_-] is written as `.HEX.` (a `"` in a folder name ended the
    string and ran script in whoever opened the page)."""
    return "fig-" + "".join(c if c.isascii() and (c.isalnum() or c in "_-") else f".{ord(c):x}."
                            for c in name)


def png_bytes(fig: go.Figure) -> bytes:
    """The figure as a PNG (kaleido and chromium); a missing install is one RunError."""
    if "BROWSER_PATH" not in os.environ and Path("/usr/bin/chromium").exists():
        os.environ["BROWSER_PATH"] = "/usr/bin/chromium"
    for attempt in range(PNG_TRIES):
        try:
            return fig.to_image(format="png", scale=1.5)
        except Exception as e:  # noqa: BLE001 - kaleido/chromium missing shows up many ways
            # a loaded machine can outrun the browser tab's own script ("kaleido_scopes
            # is not defined"): a fresh tab succeeds; a missing install fails every time
            if attempt + 1 == PNG_TRIES or "kaleido_scopes" not in str(e):
                raise RunError(f"PNG export failed ({e}). Install kaleido (`pip install "
                               "kaleido`) and Debian chromium (`apt-get install -y "
                               "chromium`), or drop --png.") from e
    raise AssertionError("unreachable")


def write_files(files: dict[Path, bytes]) -> list[str]:
    """Write rendered figure files (`figure_files`), each atomically, with the plotly bundle
    their pages load (`bundle_folder`: beside them unless a folder above holds plotly's own);
    return the paths written."""
    from nca_interp.fsio import write_bytes

    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".html":
            ensure_plotly_bundle(bundle_folder(path.parent))
        write_bytes(path, data)
    return [str(p) for p in files]


def write_figure(fig: go.Figure, stem: str | Path, png: bool = False) -> list[str]:
    """Write `stem.html` (and `stem.png` when asked; a failed PNG export is one RunError,
    the HTML written); return the paths written."""
    written = write_files(figure_files(fig, stem))
    if png:
        try:
            written += write_files({figure_path(stem, ".png"): png_bytes(fig)})
        except RunError as e:
            raise RunError(f"{e} The HTML was written.") from e
    return written
