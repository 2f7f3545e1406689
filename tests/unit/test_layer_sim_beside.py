"""`layer_sim --beside REPORT`: new checkpoints measured on a published report's items and
settings, its entries carried in only after its first checkpoint is recomputed and agrees."""

import hashlib
import json

import pytest

from nca_interp import layer_sim
from nca_interp.checkpoint import save_checkpoint
from nca_interp.errors import UsageError
from tests.conftest import tiny

SETTINGS = ["--task", "sokoban", "--context", "state", "--n-levels", "5", "--threads", "1"]


@pytest.fixture(scope="module")
def ckpts(tok, tmp_path_factory):
    root = tmp_path_factory.mktemp("beside")
    out = {name: save_checkpoint(root / name, tiny(tok, seed=seed), tok)
           for name, seed in (("base", 0), ("opd", 1), ("mine", 2))}
    out["deep"] = save_checkpoint(root / "deep", tiny(tok, seed=3, n_layers=3), tok)
    out["llama"] = save_checkpoint(root / "llama", tiny(tok, "llama", seed=4), tok)
    return out


@pytest.fixture(scope="module")
def published(ckpts, tmp_path_factory):
    """A report of base and opd, as the pipeline would publish it."""
    out = tmp_path_factory.mktemp("published") / "layer_sim"
    layer_sim.main([str(ckpts["base"]), str(ckpts["opd"]), *SETTINGS, "--out", str(out)])
    return out.with_suffix(".json")


def edited(published, tmp_path, edit) -> str:
    d = json.loads(published.read_text())
    edit(d)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(d))
    return str(path)


def test_beside_equals_measuring_everything_together(ckpts, published, tmp_path):
    """The merged report's every entry equals the one a single run over all the checkpoints
    gives (the ordinary command is the reference), and the report read is left as it was."""
    before = hashlib.sha256(published.read_bytes()).hexdigest()
    together = layer_sim.run(ckpt=[str(ckpts[n]) for n in ("base", "opd", "mine")],
                             task="sokoban", context="state", n_levels=5, threads=1)
    rep = layer_sim.main([str(ckpts["mine"]), "--beside", str(published), "--threads", "1",
                          "--out", str(tmp_path / "ls")])
    assert list(rep.results) == ["random_init", "base", "opd", "mine"]
    for name, entry in together.results.items():
        for stat in layer_sim.STATS:
            a, b = entry[stat], rep.results[name][stat]
            assert a == pytest.approx(b, abs=1e-6), (name, stat)
    assert rep.beside["carried"] == ["base", "opd"] and rep.beside["checked"]["entry"] == "base"
    assert rep.beside["recomputed"] == {"random_init": {}}
    assert rep.checkpoints[-1] == str(ckpts["mine"]) and rep.runs["mine"].path == str(ckpts["mine"])
    assert hashlib.sha256(published.read_bytes()).hexdigest() == before
    written = json.loads((tmp_path / "ls.json").read_text())
    assert written["beside"]["sha256"] == before


def test_carried_entries_are_the_reports_and_a_stale_baseline_is_recomputed(
        ckpts, published, tmp_path):
    def edit(d):
        d["results"]["opd"]["cos"][2] = 0.123           # carried as it stands
        d["results"]["random_init"]["cos"][0] = 0.5     # a null from older code: recomputed
        d["results"]["random_init"]["cos_other"][1] = 0.5
    path = edited(published, tmp_path, edit)
    rep = layer_sim.run(ckpt=[], beside=path, threads=1)
    assert rep.results["opd"].cos[2] == 0.123
    assert rep.config["at"] == "response" and rep.config["context"] == "state"
    assert rep.results["random_init"].cos[0] == pytest.approx(1.0)
    assert rep.beside["recomputed"] == {"random_init": {"cos": ["embed"], "cos_other": ["0"]}}
    from nca_interp.paper import report  # the page says what was recomputed and carried

    page_dir = tmp_path / "page"
    page_dir.mkdir()
    (page_dir / "layer_sim.json").write_text(json.dumps(rep.to_json()))
    assert ("its base recomputed agrees within" in report.layer_sim(page_dir)
            and "random_init differed at cos embed, cos_other 0 from the earlier report's"
            in report.layer_sim(page_dir))


def test_a_report_its_first_checkpoint_does_not_reproduce_is_refused(ckpts, published,
                                                                     tmp_path):
    def edit(d):
        d["results"]["base"]["cos"][1] += 0.01
    with pytest.raises(UsageError, match="base recomputed here does not match .*largest "
                                         "difference 0.01"):
        layer_sim.run(ckpt=[str(ckpts["mine"])], beside=edited(published, tmp_path, edit))

    def items(d):
        d["data"]["prompts_sha256"] = "0" * 64
    with pytest.raises(UsageError, match="items rendered here are not"):
        layer_sim.run(ckpt=[str(ckpts["mine"])], beside=edited(published, tmp_path, items))


def test_bad_input_is_refused_before_any_work(ckpts, published, tmp_path):
    with pytest.raises(UsageError, match="--at prompt differs from the report's response"):
        layer_sim.run(ckpt=[str(ckpts["mine"])], beside=str(published), at="prompt")
    with pytest.raises(UsageError, match="--n-levels 7 differs from the report's 5"):
        layer_sim.run(ckpt=[str(ckpts["mine"])], beside=str(published), n_levels=7)
    with pytest.raises(UsageError, match="has 3 layers, .* models 2"):
        layer_sim.run(ckpt=[str(ckpts["deep"])], beside=str(published))
    with pytest.raises(UsageError, match="would write over --beside"):
        layer_sim.main([str(ckpts["mine"]), "--beside", str(published),
                        "--out", str(published.with_suffix(""))])
    other = edited(published, tmp_path, lambda d: d.update(analysis="param_delta"))
    with pytest.raises(UsageError, match="edited.json: .* not declared by ParamDeltaReport"):
        layer_sim.run(ckpt=[str(ckpts["mine"])], beside=other)
    from nca_interp.checkpoint import load_checkpoint
    from nca_interp.tokenizer import CHARS, build_char_tokenizer

    model, _ = load_checkpoint(ckpts["mine"])
    permuted = save_checkpoint(tmp_path / "permuted", model, build_char_tokenizer(CHARS[::-1]))
    with pytest.raises(UsageError, match="different tokenizers"):
        layer_sim.run(ckpt=[str(permuted)], beside=str(published))
    gone = edited(published, tmp_path, lambda d: (
        d["checkpoints"].__setitem__(0, str(tmp_path / "gone" / "base")),
        d["runs"]["base"].__setitem__("path", str(tmp_path / "gone" / "base"))))
    with pytest.raises(UsageError, match="first checkpoint .*gone/base is not here"):
        layer_sim.run(ckpt=[str(ckpts["mine"])], beside=gone)


def test_undefined_values_are_carried_and_shown_malformed_ones_refused_first(
        ckpts, published, tmp_path, capsys):
    def undefined(d):
        d["results"]["opd"]["cka"][1] = None  # a NaN is written as null
    rep = layer_sim.run(ckpt=[], beside=edited(published, tmp_path, undefined), threads=1)
    assert rep.results["opd"].cka[1] is None
    layer_sim.show(rep)
    assert "       -" in capsys.readouterr().out

    def older(d):  # a report written before cos_other and cka_debiased existed
        for entry in d["results"].values():
            del entry["cos_other"], entry["cka_debiased"]
    rep = layer_sim.main(["--beside", edited(published, tmp_path, older), "--threads", "1",
                          "--out", str(tmp_path / "older_ls")])  # shown and written whole
    assert rep.results["opd"].cos_other is None and rep.results["random_init"].cos_other
    assert (tmp_path / "older_ls.json").exists()

    def text(d):
        d["results"]["opd"]["cos"][1] = "0.9"
    with pytest.raises(UsageError, match=r"results\['opd'\].cos is not a list of numbers"):
        layer_sim.run(ckpt=[str(ckpts["deep"])], beside=edited(published, tmp_path, text))

    def short(d):
        d["results"]["opd"]["cos"].pop()
    with pytest.raises(UsageError, match=r"results\['opd'\].cos is not a list"):
        layer_sim.run(ckpt=[], beside=edited(published, tmp_path, short))
    def unrecorded(d):  # an older report: its options came from the runs' configs
        d["config"]["task_options"] = None
        del d["data"]
    path = edited(published, tmp_path, unrecorded)
    assert layer_sim.run(ckpt=[], beside=path, task_options=["num_boxes=1"],
                         threads=1).config["task_options"] == ["num_boxes=1"]
    with pytest.raises(UsageError, match="does not match"):  # other options: other items
        layer_sim.run(ckpt=[], beside=path, task_options=["min_solution=5"], threads=1)
    with pytest.raises(UsageError, match="--baselines false with --beside"):
        layer_sim.run(ckpt=[], beside=str(published), baselines=False)


def test_a_report_written_by_the_command_line_names_its_analysis(monkeypatch, published):
    """`python -m nca_interp.layer_sim` defines its config class in `__main__`: the report
    still records analysis "layer_sim" (it wrote null before)."""
    import importlib.util
    import sys
    import types

    from nca_interp import analysis

    stand_in = types.ModuleType("__main__")
    stand_in.__spec__ = importlib.util.find_spec("nca_interp.layer_sim")
    monkeypatch.setitem(sys.modules, "__main__", stand_in)
    as_main = type("LayerSimConfig", (layer_sim.LayerSimConfig,), {"__module__": "__main__"})
    rep = analysis.load(published)
    made = analysis.make_report(as_main(), task=rep.task, context=rep.context, paths={},
                                results={k: v.to_json() for k, v in rep.results.items()},
                                at=rep.at, responses=rep.responses,
                                responses_from=rep.responses_from, layers=rep.layers,
                                checkpoints=rep.checkpoints)
    assert made.analysis == "layer_sim"


def test_another_family_of_the_same_tokenizer_and_depth_goes_beside(ckpts, published):
    """A Llama checkpoint beside a Qwen3 report: measured on the report's items, its entry
    equal to measuring it alone on them (the ordinary command)."""
    rep = layer_sim.run(ckpt=[str(ckpts["llama"])], beside=str(published), threads=1)
    alone = layer_sim.run(ckpt=[str(ckpts["llama"])], task="sokoban", context="state",
                          n_levels=5, threads=1, baselines=False)
    assert rep.results["llama"].cos == pytest.approx(alone.results["llama"].cos, abs=1e-6)


def test_a_statistic_no_row_has_is_one_line_and_a_partial_one_keeps_its_dashes():
    """An older report without a statistic prints one line saying so, not a table of dashes;
    where some rows have it, the others show '-' in their cells."""
    none = {"a": {"cos": [1.0, 0.9]}, "b": {"cos": [1.0, 0.8]}}
    assert layer_sim.format_table(none, "cos_se", ["embed", "0"]).startswith(
        "cos_se: not in this report")
    some = {"a": {"cos_se": [0.01, 0.02]}, "b": {}}
    text = layer_sim.format_table(some, "cos_se", ["embed", "0"])
    assert "0.0100" in text and text.splitlines()[2].split()[1:] == ["-", "-"]


# -- the fault probe of issue #71: a damaged or code-naming report ----------------------------

@pytest.mark.parametrize("value, said", [
    (float("nan"), r"\.cos holds nan, which layer_sim never writes"),  # it writes null
    (None, r"base recomputed here does not match .*cos at embed")])
def test_an_undefined_value_where_the_recomputation_has_a_number_is_refused(
        ckpts, published, tmp_path, value, said):
    """The base's cos at the embeddings set to NaN (or null) passed the check as 'largest
    difference 0' (np.nanmax skips it) and was carried: one side undefined is a disagreement
    (a NaN, which layer_sim writes as null, is refused before that, as any value it never
    writes)."""
    def edit(d):
        d["results"]["base"]["cos"][0] = value
    with pytest.raises(UsageError, match=said):
        layer_sim.run(ckpt=[], beside=edited(published, tmp_path, edit), threads=1)


def test_undefined_values_agree_with_undefined_ones():
    """Both sides undefined (NaN here, null in the report) agree; a number against an undefined
    value in either direction does not."""
    new = {"cos": [1.0, float("nan")]}
    assert layer_sim.disagreement(new, {"cos": [1.0, None]}) == 0
    assert layer_sim.disagreement(new, {"cos": [1.0, 0.5]}) == float("inf")
    assert layer_sim.disagreement({"cos": [1.0, 0.5]}, {"cos": [1.0, None]}) == float("inf")


def test_a_results_entry_without_its_runs_entry_is_one_line(ckpts, published, tmp_path):
    """It was a KeyError traceback in run_beside, after the model passes."""
    def edit(d):
        d["results"]["evil_student"] = d["results"]["opd"]
    with pytest.raises(UsageError, match=r"edited.json is damaged: results entry 'evil_student' "
                                         "has no runs entry; restore it"):
        layer_sim.run(ckpt=[], beside=edited(published, tmp_path, edit), threads=1)


@pytest.fixture(scope="module")
def scored(ckpts, tmp_path_factory):
    """A report of the jsonl task whose scorer is the user's code (FILE.py:fn)."""
    root = tmp_path_factory.mktemp("scored")
    score = root / "score.py"
    score.write_text("def fn(item, response):\n    return True\n")
    data = root / "d.jsonl"
    data.write_text("".join(f'{{"prompt": "q{i}", "context": "c{i}", "answer": "a", '
                            f'"id": "q{i}"}}\n' for i in range(16)))
    options = [f"data={data}", f"scorer={score}:fn", "context_as=prefix"]
    out = root / "layer_sim"
    layer_sim.main([str(ckpts["base"]), "--task", "jsonl", "--task-options", ",".join(options),
                    "--context", "context", "--n-levels", "3", "--threads", "1",
                    "--out", str(out)])
    return out.with_suffix(".json"), f"{score}:fn"


def test_a_report_naming_a_scorer_goes_beside_when_the_command_names_it(ckpts, scored):
    """The refusal named 'the checkpoint's run config' and advised --task-options scorer=...,
    which --beside then refused ('drop --task-options'): a dead end."""
    report, scorer = scored
    with pytest.raises(UsageError, match=rf"{report.name} records the task's scorer .*never code"
                                         rf".*--task-options scorer={scorer}") as e:
        layer_sim.run(ckpt=[str(ckpts["mine"])], beside=str(report), threads=1)
    assert "checkpoint's run config" not in str(e.value)
    rep = layer_sim.run(ckpt=[str(ckpts["mine"])], beside=str(report), threads=1,
                        task_options=[f"scorer={scorer}"])
    assert list(rep.results) == ["random_init", "base", "mine"]
    with pytest.raises(UsageError, match="differs from the report's"):  # another scorer
        layer_sim.run(ckpt=[], beside=str(report), threads=1, task_options=["scorer=exact"])
    with pytest.raises(UsageError, match="differs from the report's"):  # something else too
        layer_sim.run(ckpt=[], beside=str(report), threads=1,
                      task_options=[f"scorer={scorer}", "context_as=user"])


def test_impossible_values_are_refused_before_any_work(ckpts, published, tmp_path):
    """Probe 10's U-D: a carried entry with a cosine of 5, an infinite CKA or 10^30 examples
    (values layer_sim never writes) is refused in one line naming the field, not carried."""
    cases = [(lambda d: d["results"]["opd"]["cos"].__setitem__(1, 5.0), r"\.cos holds 5\.0"),
             (lambda d: d["results"]["opd"]["cka"].__setitem__(0, -0.5), r"\.cka holds -0\.5"),
             (lambda d: d["results"]["opd"]["ctx_attn"].__setitem__(0, 1.5),
              r"\.ctx_attn holds 1\.5"),
             (lambda d: d["results"]["opd"].update(n_examples=10 ** 30),
              r"counts 1000000000000000000000000000000 examples")]
    for edit, said in cases:
        with pytest.raises(UsageError, match=said):
            layer_sim.run(ckpt=[str(ckpts["mine"])], beside=edited(published, tmp_path, edit))
