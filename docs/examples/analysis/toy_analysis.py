"""A toy analysis, the worked example of docs/architecture.md: the number of files in each
checkpoint folder. An analysis is this one module and the one `register` call at its end.

    PYTHONPATH=docs/examples/analysis python -m toy_analysis runs/opd runs/nca --out /tmp/toy

The pipeline (`nca_interp.paper.reproduce`: its default plan, one stage over every student's
final folder), its `--keep` and the pages see it once the module is imported: list it in
NCA_INTERP_ANALYSES (`NCA_INTERP_ANALYSES=toy_analysis`), or, from an installed package, in the
`nca_interp.analyses` entry-point group.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from nca_interp import analysis


@dataclass
class ToyConfig:
    ckpt: list[str] = field(default_factory=list, metadata={"help": "checkpoint folders"})
    out: str | None = field(default=None, metadata={
        "help": "write OUT.json and OUT.html (the report and its figure)"})


def run(cfg: ToyConfig | None = None, /, **fields) -> dict:
    """The report (nothing written): a ToyConfig, or its fields as keywords."""
    cfg = analysis.config(ToyConfig, cfg, fields)
    paths = {Path(p).name: p for p in analysis.checkpoint_paths(cfg)}  # checked folders
    results = {k: {"files": len(list(Path(p).iterdir()))} for k, p in paths.items()}
    return analysis.make_report(cfg, task="none", context=None, paths=paths, results=results)


def show(report: dict) -> None:
    for key, entry in report["results"].items():
        print(f"{key:<30} {entry['files']:>5} files")


def figures(report: dict) -> dict:
    """{suffix: plotly figure}: suffix "" is written to OUT.html, "x" to OUT_x.html."""
    import plotly.graph_objects as go

    results = report["results"]
    return {"": go.Figure(go.Bar(x=list(results), y=[e["files"] for e in results.values()]))}


def execute(cfg: ToyConfig) -> dict:
    """Checks (before any work), run, show, and write when the config has an `out`."""
    return analysis.execute(sys.modules[__name__], cfg)


def main(argv: list[str] | None = None) -> dict:
    from nca_interp.cli import parse_config

    return execute(parse_config(ToyConfig, argv, __doc__, positional="ckpt"))


MODULE = __spec__.name if __spec__ else __name__  # "toy_analysis", also under python -m
analysis.register(analysis.AnalysisSpec(
    "toy", MODULE, "files per checkpoint folder", files={"toy": "toy.json"}))

if __name__ == "__main__":
    from nca_interp.cli import entry

    sys.exit(entry(main))
