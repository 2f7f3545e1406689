"""Every figure of a pipeline folder, drawn from its JSON (`python -m nca_interp.paper.report
--task <setting> --html`, and the pipeline's last stage)."""

from __future__ import annotations

from pathlib import Path

from nca_interp import analysis
from nca_interp.paper import dose
from nca_interp.paper.layout import CONTEXT_RETURN, HARM_DRIFT, analysis_files
from nca_interp.reports import read_derived

__all__ = ["render_figures"]


def render_figures(figs: Path, png: bool) -> list[str]:
    """Every figure of a pipeline folder, drawn from its JSON (so figures never drift from
    data): each analysis report through its module's `figures` and the one writer's file
    names (`analysis.figure_stem`), then the pipeline's own: the context return over seeds
    (`context_return_seeds`) and harm against drift. A figure whose JSON is absent (a sweep
    row, a stage not run) is skipped."""
    from nca_interp import evaluate, plots

    written = []
    for name, path in analysis_files(figs):
        written += analysis.redraw(path, analysis.module(name).figures(analysis.load(path)),
                                   png)
    summary = figs / "context_return_summary.json"
    if (figs / CONTEXT_RETURN).exists() and summary.exists():
        rep = analysis.load(figs / CONTEXT_RETURN)
        written += plots.write_figure(
            plots.context_return_figure(read_derived(summary), figs.name,
                                        rep.context, evaluate.metric_of(rep.results)),
            figs / "context_return_seeds", png)
    if (hd := figs / HARM_DRIFT).exists():
        written += plots.write_figure(dose.figure(read_derived(hd)["rows"],
                                                  f"harm against drift: {figs.name}"),
                                      figs / "harm_drift", png)
    return written
