"""A new analysis is one module and one registration: registered, a toy analysis is run by the
paper pipeline's `analyses` step, listed by the folder layout, accepted and shown by `--keep`,
and drawn in the generated architecture page, with no other file touched."""

import json
import re
import sys
import types

import pytest

from nca_interp import analysis

TOY = '''
"""A toy analysis: the number of files in each checkpoint folder."""
from dataclasses import dataclass, field
from pathlib import Path

import plotly.graph_objects as go

from nca_interp import analysis


@dataclass
class ToyConfig:
    ckpt: list[str] = field(default_factory=list, metadata={"help": "checkpoint folders"})
    out: str | None = field(default=None, metadata={"help": "where the report goes"})


def run(cfg=None, /, **fields):
    cfg = analysis.config(ToyConfig, cfg, fields)
    results = {Path(p).name: {"files": len(list(Path(p).iterdir()))} for p in cfg.ckpt}
    return analysis.make_report(cfg, task="toy", context=None,
                                paths={Path(p).name: p for p in cfg.ckpt}, results=results)


def show(report):
    print("toy:", {k: v["files"] for k, v in report["results"].items()})


def figures(report):
    return {"": go.Figure(go.Bar(y=[v["files"] for v in report["results"].values()]))}


def execute(cfg):
    return analysis.execute(__import__(__name__), cfg)


def main(argv=None):
    from nca_interp.cli import parse_config
    return execute(parse_config(ToyConfig, argv, __doc__, positional="ckpt"))


def plan(p):
    keys = tuple(sorted(p.students))
    return [analysis.Job("toy over every student", p.figs / "toy",
                         lambda: ToyConfig(ckpt=[str(p.students[k]) for k in keys],
                                           out=str(p.figs / "toy")), keys[:1])]
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    (tmp_path / "toy_analysis.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = analysis.register(analysis.AnalysisSpec(
        "toy", "toy_analysis", "files per checkpoint folder", files={"toy": "toy.json"},
        pipeline="toy_analysis:plan"))
    yield entry
    analysis.REGISTRY.pop("toy")
    sys.modules.pop("toy_analysis", None)


def test_a_registered_analysis_runs_in_the_pipeline_and_is_listed_everywhere(toy, tmp_path,
                                                                             capsys):
    from nca_interp.cli import parse_config
    from nca_interp.paper import architecture, layout, reproduce

    runs = {}
    for key in ("opd_s0", "nca_s0"):
        runs[key] = tmp_path / key
        runs[key].mkdir()
        (runs[key] / "config.json").write_text("{}")
    figs = tmp_path / "figs"
    figs.mkdir()
    cfg = reproduce.ReproduceConfig(keep=["toy"])
    p = types.SimpleNamespace(
        cfg=cfg, figs=figs, students=runs, kept=lambda name: name != "toy",
        manifest=reproduce.Manifest(figs / "manifest.json", cfg),
        final_of=lambda *r: [tmp_path / "missing"])
    # the pipeline: the built-in analyses are kept (as --keep would), the toy's stage runs
    reproduce.analyses(p)
    out = capsys.readouterr().out
    assert "[run] toy over every student: python -m toy_analysis" in out
    assert "[keep] layer_sim" in out and "[keep] patching" in out
    report = json.loads((figs / "toy.json").read_text())
    assert report["results"] == {"nca_s0": {"files": 1}, "opd_s0": {"files": 1}}
    recorded = p.manifest.data["files"][str(figs / "toy.json")]["command"]
    assert recorded.startswith("python -m toy_analysis")
    # which students the steps left to run read comes from the toy's plan
    assert reproduce.Pipeline.needed(p) == {"nca_s0"}
    # the layout finds its report; --keep accepts it and its help names it
    assert ("toy", figs / "toy.json") in layout.analysis_files(figs)
    assert "toy" in reproduce.keepable()
    assert parse_config(reproduce.ReproduceConfig, ["--keep", "toy"]).keep == ["toy"]
    with pytest.raises(SystemExit):
        parse_config(reproduce.ReproduceConfig, ["--help-all"])
    shown = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert "patching, toy)" in shown
    # the generated architecture page has its row, with its file, command and pipeline hook
    row = next(r for r in architecture.analysis_table() if r.startswith("| toy |"))
    assert "`toy_analysis.py`" in row and "`python -m toy_analysis`" in row
    assert "`toy.json`" in row and "`toy_analysis:plan`" in row
    assert analysis.module("toy").figures(report)
    # the folder's generated page lists its report and figure without an edit of its own
    from nca_interp.paper import report as page

    assert "| toy | files per checkpoint folder | [toy.json](toy.json) | [toy.html](toy.html) |" \
        in page.other_analyses(figs)


def test_an_unknown_or_incomplete_analysis_is_refused_in_one_line(tmp_path, monkeypatch):
    from nca_interp.cli import parse_config
    from nca_interp.paper import reproduce

    with pytest.raises(ValueError, match="'nope' is not an analysis; one of evaluate"):
        analysis.module("nope")
    with pytest.raises(ValueError, match="--keep must be one of"):
        parse_config(reproduce.ReproduceConfig, ["--keep", "nope"])
    (tmp_path / "half_analysis.py").write_text("def run(cfg=None):\n    return {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    half = analysis.AnalysisSpec("half", "half_analysis", "incomplete")
    with pytest.raises(ValueError, match="lacks show, figures, execute, main"):
        half.load()
    analysis.register(analysis.AnalysisSpec("toy2", "m", "x"))
    try:
        with pytest.raises(ValueError, match="registered twice"):
            analysis.register(analysis.AnalysisSpec("toy2", "m", "y"))
    finally:
        analysis.REGISTRY.pop("toy2")


def test_the_built_in_analyses_keep_the_contract_and_own_the_layout_names():
    from nca_interp.paper import layout

    assert analysis.names()[:6] == ("evaluate", "trajectory", "layer_sim", "grad_align",
                                    "param_delta", "patching")
    for entry in analysis.specs():
        assert isinstance(entry.load(), analysis.Analysis)
    assert layout.CONTEXT_RETURN == "context_return.json"
    assert layout.LAYER_SIM_STAGES == {"response": "layer_sim", "generating":
                                       "layer_sim_generating", "prompt": "layer_sim_prompt"}
    assert layout.grad_stem("nca", 2) == "grad_align_nca_s2"
    assert layout.teacher_file("plan") == "teacher_plan.json"
