"""Every figure of a pipeline folder, drawn from its JSON (python -m train.report --task <setting>
--html, and the pipeline's last stage)."""

from __future__ import annotations

import json
from pathlib import Path

from nca_interp import evaluate, grad_align, param_delta
from train import dose
from train.layout import LAYER_SIM_STAGES, grad_files


def render_figures(figs: Path, png: bool) -> list[str]:
    """Every figure of a pipeline folder, drawn from its JSON (so figures never drift from
    data); a figure whose JSON is absent (a sweep row, a stage not run) is skipped."""
    from nca_interp import plots

    written = []

    def load(name: str) -> dict | None:
        f = figs / name
        return json.loads(f.read_text()) if f.exists() else None

    rep, summary = load("context_return.json"), load("context_return_summary.json")
    if rep and summary:
        ctx = rep["config"]["context"]
        success = evaluate.metric_of(rep["reports"])
        written += plots.write_figure(plots.context_return_figure(summary, figs.name, ctx,
                                                                  success),
                                      figs / "context_return", png)
    if (hd := load("harm_drift.json")) is not None:
        written += plots.write_figure(dose.figure(hd["rows"], f"harm against drift: {figs.name}"),
                                      figs / "harm_drift", png)
    for stem in ("trajectory", "trajectory_1000steps"):
        if (tr := load(f"{stem}.json")) is not None:
            written += plots.write_figure(plots.trajectory_figure(tr), figs / stem, png)
    for name in LAYER_SIM_STAGES.values():
        if (ls := load(f"{name}.json")) is not None:
            written += plots.write_figure(plots.layer_sim_figure(ls), figs / name, png)
            if "ctx_attn_ratio" in next(iter(ls["results"].values())):
                written += plots.write_figure(plots.head_heatmaps(ls), figs / f"{name}_heads",
                                              png)
    for _, path in grad_files(figs):
        for name, fig in grad_align.figures(json.loads(path.read_text())).items():
            stem = path.stem + ("_steps" if name.endswith("_steps") else "")
            written += plots.write_figure(fig, figs / stem, png)
    if (pd := load("param_delta.json")) is not None:
        for name, fig in param_delta.figures(pd).items():
            stem = "param_delta_" + (name[len("delta_"):] if name.startswith("delta_") else name)
            written += plots.write_figure(fig, figs / stem, png)
    if (pt := load("patching.json")) is not None:
        for name, r in pt["results"].items():
            for suffix, fig in plots.patching_figures(r).items():
                written += plots.write_figure(fig, figs / f"patching_{name}_{suffix}", png)
    return written
