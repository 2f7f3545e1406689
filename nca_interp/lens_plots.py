"""The two-view lens's figures (nca_interp.lens): a report in, a plotly figure out; nothing here
loads a checkpoint or computes a metric."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from nca_interp import reports
from nca_interp.identity import roster
from nca_interp.plots import PALETTE

__all__ = ["position_figure", "token_figure"]


def _colour(rid, i: int) -> str:
    """The package's colour of a method (base / opd / nca), else the next of plotly's."""
    role = "opd" if rid.method == "opdsized" else rid.method or (
        "base" if "base" in rid.name.lower() else None)
    return PALETTE.get(role) or qualitative.Plotly[i % len(qualitative.Plotly)]


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
