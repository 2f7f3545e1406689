"""Every published HTML figure is what its JSON draws now (`make test-pages`): a copy of
figures/ is redrawn by the package's own writers, each page with the writer that made it, and
compared byte for byte, the link to the one shared plotly.min.js included."""

import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def redraw_every_figure(root: Path) -> set[Path]:
    """Redraw every figure under `root` (a figures/ folder) in place; the HTML pages written.
    Reports redraw through `analysis.redraw` (their sha256 records checked and kept), the
    pipeline's own figures through `render_figures`, the sweeps' through their modules."""
    from nca_interp import analysis
    from nca_interp.paper import depth, sweep
    from nca_interp.paper.figures import render_figures
    from nca_interp.plots import write_figure

    written: set[Path] = set()
    for folder in sorted({p.parent for p in root.rglob("*.json")}):
        written |= set(map(Path, render_figures(folder, False)))
    # reports whose names no pipeline pattern matches: the size controls' rounds, persona's
    for j in sorted(root.rglob("*.json")):
        name = ("param_delta" if j.name.startswith("param_delta") else
                "evaluate" if j.name == "evaluate.json" else
                "grad_align" if j.name == "grad_align.json" else None)
        if name is None or j.with_suffix(".html") in written:
            continue
        figs = analysis.module(name).figures(analysis.load(j, name))
        if "results" in json.loads(j.read_text()):
            written |= set(map(Path, analysis.redraw(j, figs)))
        else:  # the size controls' older format: figures, no record
            for suffix, fig in figs.items():
                written |= set(map(Path, write_figure(fig, analysis.figure_stem(j, suffix))))
    for base in sweep.beta_sweeps():
        if (out := root / f"{base}_beta_sweep").is_dir():
            written |= set(map(Path, write_figure(sweep.beta_figure(base, root),
                                                  out / "harm_vs_help")))
    if (out := root / depth.OUT).is_dir():
        for stem, fig in depth.figures(depth.rows(root)).items():
            written |= set(map(Path, write_figure(fig, out / stem)))
    return {p for p in written if p.suffix == ".html"}


@pytest.mark.pages
def test_every_published_figure_is_what_its_json_draws_now(tmp_path):
    copy = tmp_path / "figures"
    shutil.copytree(ROOT / "figures", copy, ignore=shutil.ignore_patterns("*.png"))
    pages = {p.relative_to(copy) for p in copy.rglob("*.html")}
    drawn = {p.relative_to(copy) for p in redraw_every_figure(copy)}
    assert pages <= drawn, f"no writer draws {sorted(pages - drawn)[:5]}"
    assert drawn <= pages, f"figures the repository lacks: {sorted(drawn - pages)[:5]}"
    stale = [str(p) for p in sorted(pages) if (copy / p).read_bytes() !=
             (ROOT / "figures" / p).read_bytes()]
    assert not stale, (f"{len(stale)} published figures are not what their JSON draws now, "
                       f"e.g. {stale[:5]}: redraw them (python -m nca_interp.paper.report "
                       "--task <setting> --html; the sweeps: nca_interp.paper.sweep / depth "
                       "--write)")
