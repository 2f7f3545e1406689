"""Every figure of a pipeline folder, drawn from its JSON (`python -m nca_interp.paper.report
--task <setting> --html`, and the pipeline's last stage), and the sha256 of each in the folder's
manifest, which the pipeline's pruning compares before it deletes a figure:

    python -m nca_interp.paper.figures --record-digests figures/sokoban figures/facts ...
"""

from __future__ import annotations

if __name__ == "__main__":  # Ctrl-C while the imports below run: one line, not a traceback
    from nca_interp.cli import quiet_interrupt

    quiet_interrupt()

import argparse
import hashlib
import json
import stat
import sys
from pathlib import Path

from nca_interp import analysis
from nca_interp.cli import entry
from nca_interp.errors import InputError, MissingInputError, UsageError
from nca_interp.paper import dose
from nca_interp.paper.layout import CONTEXT_RETURN, HARM_DRIFT, analysis_files
from nca_interp.reports import Report, read_derived

__all__ = ["FIGURE_SUFFIXES", "load_reports", "main", "record_digests", "render_figures"]

FIGURE_SUFFIXES = (".html", ".png")  # the figure files a manifest records a sha256 for


def render_figures(figs: Path, png: bool) -> list[str]:
    """Every figure of a pipeline folder, drawn from its JSON (so figures never drift from
    data): each analysis report through its module's `figures` and the one writer's file
    names (`analysis.figure_stem`), then the pipeline's own: the context return over seeds
    (`context_return_seeds`) and harm against drift. A figure whose JSON is absent (a sweep
    row, a stage not run) is skipped."""
    from nca_interp import evaluate, plots

    written = []
    for name, path, report in load_reports(figs):  # each checked before any is drawn
        written += analysis.redraw(path, analysis.module(name).figures(report), png)
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


def load_reports(figs: Path) -> list[tuple[str, Path, Report]]:
    """(analysis, JSON, report) of every analysis report in a pipeline folder, each whole or
    refused in one line naming its file (`analysis.load(..., complete=True)`): what
    `render_figures` draws, all read before any figure is written, so a damaged report
    (a hand edit that dropped `layers`) stops the redraw before it writes, not halfway."""
    return [(name, path, analysis.load(path, complete=True))
            for name, path in analysis_files(figs)]


def record_digests(figs: Path) -> dict[str, list[str]]:
    """Record in `figs/manifest.json` the sha256 of each figure (.html, .png) it names in
    `figs`, as `Manifest.record` does (its entry's "sha256", which `reproduce.prune_figures`
    compares before it deletes a file), for the files that are what the writers draw now: a
    page where redrawing the folder from its JSON in a copy (`render_figures`) gives its
    bytes; a PNG (no browser here to redraw it) as it is, where its page is current and it
    has no digest yet. A page that differs, or that no JSON draws now, keeps its entry as it
    is: deleting it is for its owner to decide. Returns the manifest's keys by outcome:
    "recorded", "unchanged", "stale" (not what its JSON draws now, or a PNG that changed
    since its digest), "undrawn" (no JSON of the folder draws it), "missing" (no such file).
    Re-run it after a page is redrawn (`paper.report --html` leaves the manifest alone)."""
    import shutil
    import tempfile

    from nca_interp.fsio import read_json, write_text
    from nca_interp.plots import BUNDLE

    figs = Path(figs).absolute()
    if not figs.is_dir():
        raise MissingInputError(f"{figs} is not a folder: give a pipeline's figures folder "
                                "(figures/<setting>)")
    manifest = figs / "manifest.json"
    data = read_json(manifest, "figures manifest")
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict) or not all(isinstance(e, dict) for e in files.values()):
        raise InputError(f"figures manifest {manifest} has no \"files\" mapping of file to "
                         "entry: it is not a pipeline's manifest, or is damaged; restore it or "
                         "rerun the setting's pipeline")
    with tempfile.TemporaryDirectory(prefix="nca_interp-digests-") as tmp:
        copy = Path(tmp) / figs.parent.name / figs.name  # the pages' ../plotly.min.js kept
        # without its figures (a page changed by hand is not the redraw's to refuse), nor a
        # pipe or device (copying one blocks, or fails): no writer reads them
        shutil.copytree(figs, copy, ignore=_not_copied, symlinks=True)
        if (figs.parent / BUNDLE).is_file():
            shutil.copyfile(figs.parent / BUNDLE, copy.parent / BUNDLE)
        try:
            drawn = {Path(w).name: _sha256(Path(w)) for w in render_figures(copy, False)
                     if Path(w).suffix == ".html"}
        except (UsageError, OSError) as e:  # named in the user's folder, not the copy
            raise InputError(str(e).replace(str(copy), str(figs))) from None
    found: dict[str, list[str]] = {k: [] for k in ("recorded", "unchanged", "stale", "undrawn",
                                                   "missing")}
    for key, item in files.items():
        path = _in_folder(key, figs)
        if path is None or path.suffix not in FIGURE_SUFFIXES:
            continue
        if not path.is_file() or path.is_symlink():
            found["missing"].append(key)
            continue
        sha, html = _sha256(path), figs / path.with_suffix(".html").name
        page = drawn.get(html.name)  # what its JSON draws now
        if page is None:
            outcome = "undrawn"
        elif path.suffix == ".html":
            outcome = "stale" if sha != page else \
                "unchanged" if item.get("sha256") == sha else "recorded"
        elif not html.is_file() or _sha256(html) != page:
            outcome = "stale"  # a PNG whose page is not current: nor is it, likely
        else:  # a PNG of a current page, as committed; an earlier digest is never replaced
            outcome = "recorded" if not item.get("sha256") else \
                "unchanged" if item["sha256"] == sha else "stale"
        if outcome == "recorded":
            item["sha256"] = sha
        found[outcome].append(key)
    if found["recorded"]:
        write_text(manifest, json.dumps(data, indent=1))  # as `Manifest.save` writes it
    return found


def _not_copied(folder: str, names: list[str]) -> list[str]:
    """`shutil.copytree`'s ignore: figures, and anything but a file, folder or link."""
    def special(name: str) -> bool:
        mode = (Path(folder) / name).lstat().st_mode
        return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode))

    return [n for n in names if n.endswith(FIGURE_SUFFIXES) or special(n)]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _in_folder(key: str, figs: Path) -> Path | None:
    """The file in `figs` a manifest key names (absolute, or relative to where the pipeline
    ran: `figures/sokoban/harm.html`), or None for a file elsewhere."""
    path = Path(key)
    if path.is_absolute():
        return path if path.parent == figs else None
    parts = path.parent.parts
    return figs / path.name if parts and figs.parts[-len(parts):] == parts else None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m nca_interp.paper.figures",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record-digests", nargs="+", metavar="FOLDER", required=True,
                    help="pipeline folders (figures/<setting>) whose manifest.json gets the "
                         "sha256 of each figure that is what its JSON draws now")
    for folder in ap.parse_args(argv).record_digests:
        found = record_digests(Path(folder))
        print(f"{folder}: " + ", ".join(f"{len(v)} {k}" for k, v in found.items()))
        for outcome in ("stale", "undrawn", "missing"):
            for key in found[outcome]:
                print(f"  [{outcome}] {key}: no digest recorded")


if __name__ == "__main__":
    sys.exit(entry(main))
