"""The two-view lens's figures (nca_interp.lens): a report in, a plotly figure out; nothing here
loads a checkpoint or computes a metric."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from nca_interp import reports
from nca_interp.identity import roster
from nca_interp.plots import PALETTE

__all__ = ["over_training_figure", "position_figure", "token_figure"]


def _colour(rid, i: int) -> str:
    """The package's colour of a method (base / opd / nca), else the next of plotly's."""
    role = "opd" if rid.method == "opdsized" else rid.method or (
        "base" if "base" in rid.name.lower() else None)
    return PALETTE.get(role or "") or qualitative.Plotly[i % len(qualitative.Plotly)]


def position_figure(report: reports.LensReport) -> go.Figure:
    """KL(q_x || q_c) against response position, a line per checkpoint, with its wrong-c'
    control as a band of the same colour (mean over the items that reach each position) and
    the arithmetic floor dotted."""
    fig = go.Figure()
    ids = roster(report)
    for i, (name, e) in enumerate(report.results.items()):
        line = {"color": _colour(ids[name], i)}
        pos = e.by_position
        x = list(range(len(pos["kl"])))
        fig.add_trace(go.Scatter(x=x + x[::-1], y=pos["kl_control"] + [0.0] * len(x),
                                 fill="toself", line=dict(width=0), opacity=0.2,
                                 fillcolor=line["color"], name=f"{name} control c'",
                                 hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=x, y=pos["kl"], name=name, line=line))
        fig.add_trace(go.Scatter(x=x, y=pos["kl_floor"], name=f"{name} floor",
                                 line=dict(color=line["color"], dash="dot", width=1)))
    fig.update_layout(title=f"Where c acts in the response ({report.task}; context "
                            f"'{report.context}'; band: a wrong c' of the same form)",
                      xaxis_title="response position", yaxis_title="KL(q_x || q_c), nats",
                      height=450, width=900)
    return fig


def token_figure(report: reports.LensReport) -> go.Figure:
    """Per checkpoint, its example response as a token heat map: rows KL with c and with c'
    (and, with the lens, the layer the views part at), the tokens' text on the x axis."""
    names = list(report.results)
    fig = make_subplots(rows=len(names), cols=1, subplot_titles=names, vertical_spacing=0.12)
    for r, name in enumerate(names, 1):
        ex = report.results[name].example
        cols = [f"{t}:{repr(w)[1:-1]}" for t, w in enumerate(ex["tokens"])]
        rows, z = ["KL with c", "KL with c'"], [ex["kl"], ex["kl_control"]]
        hover = [[f"x: {a!r} c: {b!r}" for a, b in zip(ex["top_x"], ex["top_c"])]] * 2
        fig.add_trace(go.Heatmap(z=z, x=cols, y=rows, colorscale="Viridis", text=hover,
                                 showscale=r == 1, hovertemplate="%{x} %{y}: %{z:.4f} "
                                 "(top tokens %{text})<extra></extra>"), row=r, col=1)
    fig.update_layout(title=f"Token by token, the response of largest effect "
                            f"({report.task}, context '{report.context}')",
                      height=150 + 180 * len(names), width=1100)
    return fig


def over_training_figure(report: reports.LensReport) -> go.Figure:
    """KL(q_x || q_c) against step, a panel per region (all tokens, first / middle / last
    third), a line per run with its 95% interval, the wrong-c' control's interval as a band of
    the same colour and the arithmetic floor dotted."""
    ot = report.over_training
    assert ot is not None  # drawn for a report read --over-training
    regions = next(iter(ot.values()))["region"]
    fig = make_subplots(rows=1, cols=len(regions), shared_yaxes=True,
                        subplot_titles=[f"{r} tokens" if r == "all" else f"{r} third"
                                        for r in regions])
    ids = roster(report)
    for i, (run, o) in enumerate(ot.items()):
        colour = _colour(ids[o["checkpoint"][-1]], i)
        for j in range(len(regions)):
            col, first = j + 1, j == 0
            x = o["step"]
            lo, hi = ([b[j][k] for b in o["ci95"]["kl_control"]] for k in (0, 1))
            if None not in lo + hi:
                fig.add_trace(go.Scatter(x=x + x[::-1], y=hi + lo[::-1], fill="toself",
                                         line=dict(width=0), opacity=0.2, fillcolor=colour,
                                         name=f"{run} control c'", legendgroup=run,
                                         showlegend=first, hoverinfo="skip"), row=1, col=col)
            y = [v[j] for v in o["kl"]]
            err = [[v[j][k] for v in o["ci95"]["kl"]] for k in (0, 1)]
            bars = None if None in err[0] + err[1] else dict(
                type="data", symmetric=False, array=[h - m for h, m in zip(err[1], y)],
                arrayminus=[m - lo_ for m, lo_ in zip(y, err[0])])
            fig.add_trace(go.Scatter(x=x, y=y, name=run, legendgroup=run, showlegend=first,
                                     line=dict(color=colour), error_y=bars), row=1, col=col)
            fig.add_trace(go.Scatter(x=x, y=[v[j] for v in o["kl_floor"]], name=f"{run} floor",
                                     legendgroup=run, showlegend=first,
                                     line=dict(color=colour, dash="dot", width=1)),
                          row=1, col=col)
    fig.update_xaxes(title_text="step (0: the model the run started from)")
    fig.update_yaxes(title_text="KL(q_x || q_c), nats per token", row=1, col=1)
    fig.update_layout(title=f"Where c acts in the response, over training ({report.task}; "
                            f"context '{report.context}'; band: a wrong c' of the same form)",
                      height=420, width=1300)
    return fig
