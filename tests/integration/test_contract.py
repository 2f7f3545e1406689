"""The one analysis contract (nca_interp.analysis): every analysis is run(config) -> a report
of the same shape, figures(report) -> {suffix: figure}, and the one writer's files; a report
file written before the contract reads back in the same shape."""

import json

import plotly.graph_objects as go
import pytest

from nca_interp import analysis, reports
from nca_interp.assets import embedded
from nca_interp.checkpoint import save_checkpoint
from tests.conftest import tiny
from train import distill

TASK = {"name": "sokoban", "fmt": "compact", "dim_room": [6, 6], "num_boxes": 1}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from nca_interp.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    d = tmp_path_factory.mktemp("contract")
    base = save_checkpoint(d / "base", tiny(tok), tok, {"task": TASK})
    distill.main(["--student", str(base), "--out", str(d / "t_opd_s3"), "--batch", "4",
                  "--steps", "2", "--save-every", "1", "--eval-every", "100", "--eval-levels",
                  "4", "--threads", "1", "--lr", "3e-3", "--context", "plan", "--seed", "3"])
    return d / "t_opd_s3"


def tiny_fields(name: str, run_dir) -> dict:
    opd, nca = str(embedded("sokoban_opd")), str(embedded("sokoban_nca"))
    return {"evaluate": {"ckpt": [opd, nca], "n_levels": 4, "control": True},
            "trajectory": {"runs": [str(run_dir)], "n_levels": 4, "drift_levels": 4},
            "layer_sim": {"ckpt": [opd], "n_levels": 4, "batch": 4},
            "grad_align": {"ckpt": [opd], "batch": 4, "micro_batch": 2, "parts": 2},
            "param_delta": {"ckpt": [opd, nca]},
            "lens": {"ckpt": [opd], "n_levels": 4, "batch": 4, "max_cases": 2, "max_forks": 2},
            "patching": {"ckpt": [opd], "scope": "groups", "n_levels": 60, "max_cases": 2,
                         "ks": [1], "n_random": 2, "n_random_generate": 0}}[name]


@pytest.mark.parametrize("name", analysis.names())
def test_every_analysis_keeps_the_contract(name, run_dir, tmp_path, capsys):
    mod = analysis.module(name)
    cfg_cls = mod.execute.__annotations__["cfg"]
    cfg_cls = getattr(mod, cfg_cls) if isinstance(cfg_cls, str) else cfg_cls
    fields = tiny_fields(name, run_dir)
    report = mod.run(cfg_cls(**fields))
    assert list(report)[:5] == ["config", "task", "context", "runs", "results"], list(report)
    assert report["config"] == {**report["config"], **fields} or name == "patching"
    assert isinstance(report["task"], str) and report["task"] == "sokoban"
    assert report["context"] in ("plan", "state")
    assert set(report["runs"]) == set(report["results"]) and report["results"]
    for rid in report["runs"].values():
        assert set(rid) == {"name", "setting", "method", "seed", "beta", "estimator", "step",
                            "path", "prompt_format"}
        assert rid["prompt_format"] in ("plain", None)  # the char-level tiny models
    if name == "trajectory":  # identity from the run config, not from the folder name
        rid = report["runs"]["t_opd_s3"]
        assert (rid["method"], rid["seed"], rid["beta"]) == ("opd", 3, 0.0)
    figs = mod.figures(report)
    assert all(isinstance(k, str) and isinstance(f, go.Figure) for k, f in figs.items())
    # the command writes what the one writer names: OUT.json, OUT.html, OUT_<suffix>.html
    out = tmp_path / "sub" / name
    written = mod.execute(cfg_cls(**fields, out=str(out)))
    assert json.loads((tmp_path / "sub" / f"{name}.json").read_text()) == json.loads(
        json.dumps(written.to_json()))
    assert isinstance(written, reports.Report) and written.analysis == name
    expect = {analysis.figure_stem(out, s).with_suffix(".html").name for s in mod.figures(written)}
    assert expect <= {p.name for p in (tmp_path / "sub").glob("*.html")}
    if name not in ("param_delta", "patching"):  # their figures are all per checkpoint
        assert (tmp_path / "sub" / f"{name}.html").exists()
    back = analysis.load(tmp_path / "sub" / f"{name}.json")
    assert type(back) is type(written) and back == json.loads(json.dumps(written.to_json()))
    # keyword fields build the same config; a positional folder stands for the checkpoint field
    assert analysis.config(cfg_cls, None, fields) == cfg_cls(**fields)
    path_field = next(f for f in analysis.PATH_FIELDS if f in fields)
    one = analysis.config(cfg_cls, fields[path_field][0], {})
    assert getattr(one, path_field) == [fields[path_field][0]]


def test_config_refuses_an_unknown_field_and_a_config_with_fields():
    from nca_interp.layer_sim import LayerSimConfig

    with pytest.raises(TypeError, match="no field n_level; its fields"):
        analysis.config(LayerSimConfig, None, {"n_level": 4})
    with pytest.raises(TypeError, match="not both"):
        analysis.config(LayerSimConfig, LayerSimConfig(), {"n_levels": 4})
    with pytest.raises(TypeError, match="not int"):
        analysis.config(LayerSimConfig, 5, {})


def test_an_old_report_file_reads_in_the_shared_shape(tmp_path):
    """`reports` (evaluate) and `per_checkpoint` (param_delta) become `results`; identity comes
    from each entry's run folder name, its own identity, or a checkpoint path's run; the
    numbers are untouched."""
    ev = {"config": {"context": "plan", "task": "sokoban"},
          "reports": {"s_opd_s2": {"correct_c": 0.5}, "s_base": {"correct_c": 0.9}}}
    (tmp_path / "ev.json").write_text(json.dumps(ev))
    r = analysis.load(tmp_path / "ev.json")
    assert list(r)[:5] == ["config", "task", "context", "runs", "results"]
    assert r["results"] == ev["reports"] and (r["task"], r["context"]) == ("sokoban", "plan")
    assert (r["runs"]["s_opd_s2"]["method"], r["runs"]["s_opd_s2"]["seed"]) == ("opd", 2)
    assert r["runs"]["s_base"]["method"] is None
    pd = {"config": {}, "per_checkpoint": {"runs/s_nca_s1/checkpoints/step_000008": {"x": 1}}}
    r = analysis.from_json(pd)
    rid = r["runs"]["runs/s_nca_s1/checkpoints/step_000008"]
    assert (rid["method"], rid["seed"], rid["step"]) == ("nca", 1, 8)
    tr = {"config": {}, "results": {"s_nca_s0": {"identity": {"method": "nca", "beta": 0.5},
                                                 "task": "facts", "context": "rule"}}}
    r = analysis.from_json(tr)
    assert r["runs"]["s_nca_s0"]["beta"] == 0.5 and r["task"] == "facts"
    assert analysis.from_json(r) is r  # a report in the shape is returned as it is


def test_the_committed_reports_are_in_the_shared_shape():
    """Every analysis JSON of every published folder was written (or migrated) in the shape."""
    from pathlib import Path

    from nca_interp.paper.layout import analysis_files

    n, shape = 0, ["config", "task", "context", "runs", "results"]
    for figs in Path("figures").iterdir():
        for _, f in analysis_files(figs) if figs.is_dir() else []:
            assert list(json.loads(f.read_text()))[:5] == shape, f
            n += 1
    assert n > 100
