"""Typed reports (nca_interp.reports): a key no class declares is refused where a report is
made; versions; every field documented (the published files: tests/paper)."""

import dataclasses
import json

import pytest

from nca_interp import analysis, reports

BUILT_IN = {"evaluate": reports.ContextReturnReport, "trajectory": reports.TrajectoryReport,
            "layer_sim": reports.LayerSimReport, "grad_align": reports.GradAlignReport,
            "param_delta": reports.ParamDeltaReport, "patching": reports.PatchingReport}


def test_the_vocabulary_is_one_and_old_names_are_gone_from_what_is_written(tmp_path):
    """A report written now says correct_* (never win_* / won_* / n_right_no_c), its tables
    head them in the task's words, and an old file reads in the new names."""
    ev = analysis.load("figures/sokoban_remap_d2/context_control.json")
    text = json.dumps(ev.to_json())
    assert not any(f'"{k}"' in text for k in reports.VOCABULARY) and '"win":' not in text
    entry = next(iter(ev.results.values()))
    assert entry.correct_c == entry["correct_c"] and "correct" in entry.control
    assert entry.items_["correct_no_c"] == entry["items"]["correct_no_c"]
    assert "correct_c" in entry.ci95
    assert reports.label("correct_c", "win") == "win_c"
    assert reports.label("correct_no_c", "accuracy") == "acc_no_c"
    assert reports.label("correct", "accuracy") == "acc" and reports.label("harm") == "harm"


def test_entries_read_as_attributes_and_as_mappings():
    rep = analysis.load("figures/sokoban_remap_d2/layer_sim.json")
    entry = rep.results["sokoban_remap_d2_nca_s0"]
    assert entry.cos == entry["cos"] and len(entry.cos) == len(rep.layers) == 3
    assert rep.runs["sokoban_remap_d2_nca_s0"].method == "nca"
    grad = analysis.load("figures/sokoban_remap_d2/grad_align_opd.json")
    first = next(iter(grad.results.values()))
    assert first["global"] is first.global_ and "global" in first and "global_" not in first
    ev = next(iter(analysis.load("figures/sokoban_remap_d2/context_control.json")
                   .results.values()))
    assert "control" in ev and ev.control["reads_c"] == ev["control"]["reads_c"]
    assert "note" not in ev and ev.get("note") is None  # an optional field never written


def test_a_key_no_class_declares_is_refused_where_the_report_is_made():
    """The drift the typed reports close: an analysis writing a key its documentation does not
    name (grad_align once documented `per_module` and wrote `modules`) fails in one line."""
    from nca_interp.grad_align import GradAlignConfig

    entry = {"per_module": {}, "tokens": {}, "global": {}}
    with pytest.raises(reports.ReportError, match="'per_module' is not declared by GradAlign"):
        analysis.make_report(GradAlignConfig(), task="sokoban", context="plan",
                             paths={"a": None}, results={"a": entry}, batch=8)
    with pytest.raises(reports.ReportError, match="GradAlign needs modules"):
        analysis.make_report(GradAlignConfig(), task="sokoban", context="plan",
                             paths={"a": None}, results={"a": {"tokens": {}}}, batch=8)
    with pytest.raises(reports.ReportError, match="'layer' is not declared"):
        analysis.make_report(GradAlignConfig(), task="sokoban", context="plan",
                             paths={}, results={}, batch=8, layer=3)
    made = analysis.make_report(GradAlignConfig(), task="sokoban", context="plan",
                                paths={"a": None}, results={"a": {"modules": {}, "tokens": {}}},
                                batch=8)
    assert type(made) is reports.GradAlignReport and made.analysis == "grad_align"
    with pytest.raises(reports.ReportError, match="no field 'layer'"):
        made["layer"] = 3


def test_a_written_report_carries_its_version_and_reads_back_as_its_class(tmp_path):
    from nca_interp.grad_align import GradAlignConfig

    made = analysis.make_report(GradAlignConfig(), task="sokoban", context="plan",
                                paths={"a": None},
                                results={"a": {"modules": {}, "tokens": {}, "global": {"x": 1}}},
                                batch=8, steps=None)
    analysis.write(made, tmp_path / "g.json", {})
    raw = json.loads((tmp_path / "g.json").read_text())
    assert raw["version"] == reports.VERSION and raw["analysis"] == "grad_align"
    assert raw["results"]["a"]["global"] == {"x": 1} and raw["steps"] is None
    back = analysis.load(tmp_path / "g.json")  # a name no registry file matches: by `analysis`
    assert type(back) is reports.GradAlignReport and back.to_json() == raw


def test_a_newer_version_is_refused_and_an_unknown_analysis_reads_untyped(tmp_path):
    (tmp_path / "new.json").write_text(json.dumps({"version": reports.VERSION + 1,
                                                   "results": {}}))
    with pytest.raises(reports.ReportError, match="newer than this package reads"):
        analysis.load(tmp_path / "new.json")
    for bad in ("2", None, 1.5, -1, True):  # a damaged version: one line, no TypeError
        with pytest.raises(reports.ReportError, match="not a version this package wrote"):
            analysis.from_json({"version": bad, "results": {}})
    own = {"config": {}, "task": "t", "context": None, "runs": {}, "results": {"a": {"z": 1}},
           "my_field": [1]}
    rep = analysis.from_json(own)
    assert type(rep) is reports.Report and rep.extra == {"my_field": [1]}
    assert rep["my_field"] == [1] and rep.to_json()["my_field"] == [1]


def test_every_field_of_every_report_class_says_what_it_means():
    for name, cls in BUILT_IN.items():
        assert analysis.report_class(name) is cls
        for c in (cls, cls.ENTRY, reports.RunRecord):
            undocumented = [f.name for f in dataclasses.fields(c)
                            if f.name != "extra" and not f.metadata.get("doc")]
            assert not undocumented, (c.__name__, undocumented)
        assert "the training step of each checkpoint" in reports.describe(reports.GradAlignReport)


def test_a_report_records_the_precision_auto_resolved_to(monkeypatch):
    """`--precision auto` is bf16 on a CPU with native bf16 and fp32 elsewhere: the config's
    "auto" alone does not say which the numbers were computed in; the report's environment
    does (and an analysis without the option computes in fp32)."""
    from nca_interp import analysis
    from nca_interp.configs import EvalConfig, LayerSimConfig
    from nca_interp.models import native_bf16

    def precision(cfg, native: str) -> str:
        monkeypatch.setenv("NCA_INTERP_NATIVE_BF16", native)
        native_bf16.cache_clear()
        try:
            return analysis.environment(cfg)["precision"]
        finally:
            native_bf16.cache_clear()

    try:
        assert precision(EvalConfig(device="cpu"), "1") == "bf16"
        assert precision(EvalConfig(device="cpu"), "0") == "fp32"
        assert precision(EvalConfig(device="cpu", precision="bf16"), "0") == "bf16"
        assert precision(LayerSimConfig(device="cpu"), "1") == "fp32"
    finally:  # the suite's own setting back, and nothing cached from these (a cached "native"
        monkeypatch.undo()  # made a later in-process run bf16 beside a subprocess's fp32)
        native_bf16.cache_clear()
    env = analysis.environment(EvalConfig(device="cpu"))
    assert env["device"] == "cpu" and env["torch"] and env["nca_interp"] and env["threads"] >= 1
    assert env["cpu_native_bf16"] is False  # the suite's NCA_INTERP_NATIVE_BF16=0
