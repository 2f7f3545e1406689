"""A new analysis is one module and one registration: registered, a toy analysis is run by the
paper pipeline's `analyses` step, listed by the folder layout, accepted and shown by `--keep`,
and drawn in the generated architecture page, with no other file touched."""

import json
import re
import sys
import types
from pathlib import Path

import pytest

from nca_interp import analysis

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "analysis"


@pytest.fixture
def toy(monkeypatch):
    """docs/examples/analysis/toy_analysis.py, found as a user's would be: on the path and
    named by NCA_INTERP_ANALYSES (its import registers it)."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setenv(analysis.PLUGINS_ENV, "toy_analysis")
    monkeypatch.setattr(analysis, "_DISCOVERED", [])
    assert "toy" in analysis.names()
    yield analysis.spec("toy")
    analysis.REGISTRY.pop("toy")
    sys.modules.pop("toy_analysis", None)


def test_a_registered_analysis_runs_in_the_pipeline_and_is_listed_everywhere(toy, tmp_path,
                                                                             capsys):
    from nca_interp.assets import embedded
    from nca_interp.cli import parse_config
    from nca_interp.paper import architecture, layout, reproduce

    runs = {"opd_s0": embedded("sokoban_opd"), "nca_s0": embedded("sokoban_nca")}
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
    assert set(report["results"]) == {"sokoban_nca", "sokoban_opd"}
    assert report["results"]["sokoban_nca"]["files"] == len(list(runs["nca_s0"].iterdir()))
    recorded = p.manifest.data["files"][str(figs / "toy.json")]["command"]
    assert recorded.startswith("python -m toy_analysis")
    # which students the steps left to run read comes from the toy's (default) plan
    assert reproduce.Pipeline.needed(p) == {"nca_s0", "opd_s0"}
    # the layout finds its report; --keep accepts it and its help names it
    assert ("toy", figs / "toy.json") in layout.analysis_files(figs)
    assert "toy" in reproduce.keepable()
    assert parse_config(reproduce.ReproduceConfig, ["--keep", "toy"]).keep == ["toy"]
    with pytest.raises(SystemExit):
        parse_config(reproduce.ReproduceConfig, ["--help-all"])
    shown = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert "patching, lens, toy)" in shown
    # the generated architecture page has its row, with its file, config, command and plan
    row = next(r for r in architecture.analysis_table() if r.startswith("| toy |"))
    assert "toy_analysis.py`" in row and "`python -m toy_analysis`" in row
    assert "`ToyConfig`" in row and "`toy.json`" in row and "the default plan" in row
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
        with pytest.raises(ValueError, match="registered twice .*another name"):
            analysis.register(analysis.AnalysisSpec("toy2", "m2", "y"))
    finally:
        analysis.REGISTRY.pop("toy2")
    with pytest.raises(ValueError, match="would write param_delta.json, which 'param_delta'"):
        analysis.register(analysis.AnalysisSpec("toy3", "m", "x",
                                                files={"d": "param_delta.json"}))
    ghost = analysis.AnalysisSpec("ghost", "no_such_module_xyz", "x")
    with pytest.raises(ValueError, match="'ghost': its module no_such_module_xyz cannot be"):
        ghost.load()


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



def test_the_registry_knows_analyses_only_and_the_pipeline_plans_from_it():
    """#72: a registration holds the analysis (name, module, what, files, report), nothing of
    the pipeline; the pipeline's own plans are for the analyses its layout names, and every
    other registered analysis but those run in a step of their own is planned by default."""
    import dataclasses

    from nca_interp.paper import layout, reproduce

    assert [f.name for f in dataclasses.fields(analysis.AnalysisSpec)] == \
        ["name", "module", "what", "files", "report"]
    assert set(reproduce.PLANS) == set(layout.OWN_PLANS)
    assert all(fn.__name__ == f"plan_{name}" for name, fn in reproduce.PLANS.items())
    assert set(reproduce.planned()) == set(analysis.names()) - set(layout.OWN_STEPS)
    assert reproduce.plan_of("layer_sim") is reproduce.plan_layer_sim
    assert "default_plan('toy')" in reproduce.plan_of("toy").__qualname__
    with pytest.raises(ValueError, match="context_return step"):
        reproduce.add_plan("evaluate", reproduce.plan_lens)
