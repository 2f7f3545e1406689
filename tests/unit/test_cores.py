"""Each analysis's core on models in memory: labelled arrays equal to the command's JSON on the
same models (saved to a folder for the command), and the docs' API page's in-memory snippets
run as written (#72)."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from nca_interp import grad_align, layer_sim, param_delta
from nca_interp.checkpoint import save_checkpoint
from nca_interp.errors import UsageError
from nca_interp.labelled import Arrays, Labelled, stack
from nca_interp.tasks import make_task
from tests.conftest import tiny

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ["--task", "sokoban", "--context", "state", "--n-levels", "5", "--threads", "1"]


@pytest.fixture(scope="module")
def models(tok, tmp_path_factory):
    """Three tiny models in memory (init, a and b) and the folders the commands read them
    from."""
    root = tmp_path_factory.mktemp("cores")
    mem = {name: tiny(tok, seed=seed) for name, seed in (("init", 0), ("a", 1), ("b", 2))}
    folders = {name: save_checkpoint(root / name, m, tok) for name, m in mem.items()}
    return mem, folders


def near(got, want, what: str, atol: float = 1e-6) -> None:
    want = np.array([np.nan if v is None else v for v in np.ravel(want)], dtype=float)
    got = np.ravel(np.asarray(got, dtype=float))
    assert got.shape == want.shape, what
    assert np.allclose(got, want, atol=atol, rtol=0, equal_nan=True), \
        f"{what}: largest difference {np.nanmax(np.abs(got - want)):.3g}"


def same_arrays(core: Arrays, report: Arrays, names: dict[str, str], only_core=()) -> None:
    """The core's arrays equal the report's read back as arrays (`report_arrays`), with the
    same dimensions and labels: `names` maps the core's checkpoints to the report's keys."""
    assert set(core) - set(report) == set(only_core)
    for k in report:
        c, r = core[k], report[k]
        assert c.dims == r.dims, k
        assert {d: v for d, v in c.coords.items() if d not in ("checkpoint", "other")} == \
            {d: v for d, v in r.coords.items() if d not in ("checkpoint", "other")}, k
        for cn, rn in names.items():
            if "other" not in c.dims:
                near(np.asarray(c.sel(checkpoint=cn)), np.asarray(r.sel(checkpoint=rn)),
                     f"{k} {cn}", 1e-6)
                continue
            for co, ro in names.items():
                if co != cn:
                    near(np.asarray(c.sel(checkpoint=cn, other=co)),
                         np.asarray(r.sel(checkpoint=rn, other=ro)), f"{k} {cn}~{co}", 1e-6)


def test_labelled_selects_by_label_and_keeps_every_number_in_its_frame():
    a = Labelled(np.arange(6.0).reshape(2, 3), ("checkpoint", "layer"),
                 {"checkpoint": ("base", "opd"), "layer": ("embed", "0", "1")}, "cos")
    assert a.sel(checkpoint="opd", layer="0") == 4.0
    assert a.sel(layer=0).values.tolist() == [1.0, 4.0]  # labels compare as text
    assert a.sel(layer=["embed", "1"]).coords["layer"] == ("embed", "1")
    with pytest.raises(ValueError, match="no layer '7'"):
        a.sel(layer="7")
    both = Arrays({"cos": a, "n": Labelled(np.array([3.0, 3.0]), ("checkpoint",),
                                           {"checkpoint": ("base", "opd")}, "n")})
    frame = both.to_frame()
    assert list(frame.columns) == ["stat", "checkpoint", "layer", "value"]
    assert len(frame) == 8 and frame[frame.stat == "cos"].layer.tolist()[:3] == ["embed", "0",
                                                                                  "1"]
    s = stack({"x": a, "y": a}, "run")
    assert s.dims == ("run", "checkpoint", "layer") and s.sel(run="y").values.tolist() == \
        a.values.tolist()


def test_ragged_parts_stack_at_their_own_labels():
    """Checkpoints that found different numbers of cases (or offsets) stack with each value at
    its own label and NaN past a part's end; an array a part lacks is NaN there; labels that
    are not a prefix of the longest's are refused, not silently shifted."""
    from nca_interp.labelled import stack_ragged

    def part(n_case, offsets, with_extra=True):
        arrays = {"fx": Labelled(np.arange(n_case * len(offsets), dtype=float).reshape(
            n_case, len(offsets)), ("case", "offset"), {"offset": offsets}, "fx")}
        if with_extra:
            arrays["n"] = Labelled(np.array(float(n_case)), (), {}, "n")
        return Arrays(arrays, {"cases": n_case})

    s = stack_ragged({"a": part(3, (1, 2)), "b": part(1, (1, 2, 3), False)}, "checkpoint",
                     ("case", "offset"))
    assert "fx" in s and "nope" not in s
    assert s["fx"].coords["case"] == (0, 1, 2) and s["fx"].coords["offset"] == (1, 2, 3)
    assert s["fx"].sel(checkpoint="a", case=2, offset=2) == 5.0
    assert np.isnan(s["fx"].sel(checkpoint="a", case=0, offset=3))
    assert s["fx"].sel(checkpoint="b", case=0).values[:3].tolist() == [0.0, 1.0, 2.0]
    assert np.isnan(s["fx"].sel(checkpoint="b", case=1).values).all()
    assert np.isnan(s["n"].sel(checkpoint="b")) and s["n"].sel(checkpoint="a") == 3.0
    assert s.attrs == {"a": {"cases": 3}, "b": {"cases": 1}}
    with pytest.raises(UsageError, match="not a prefix"):
        stack_ragged({"a": part(1, (1, 2)), "b": part(1, (2, 3, 4))}, "checkpoint",
                     ("offset",))


def test_layer_sim_core_on_models_in_memory_equals_the_command(models, tok, tmp_path):
    mem, folders = models
    out = tmp_path / "ls"
    layer_sim.main([str(folders["a"]), str(folders["b"]), *SETTINGS, "--out", str(out)])
    report = json.loads(out.with_suffix(".json").read_text())
    task = make_task("sokoban")
    levels = task.levels("test", 5, 0)
    got = layer_sim.compare({"a": mem["a"], "b": mem["b"]}, task, levels, "state", tok=tok)
    assert got["cos"].dims == ("checkpoint", "layer")
    assert got["cos"].coords["layer"] == tuple(report["layers"])
    assert got["ctx_attn_ratio"].dims == ("checkpoint", "layer", "head")
    assert got["ctx_attn_ratio"].coords["layer"] == tuple(report["layers"][1:])
    for name in ("a", "b"):
        entry = report["results"][name]
        mine = got.sel(checkpoint=name)
        for stat in (*layer_sim.STATS, "ctx_attn", "ctx_attn_ratio", "ctx_attn_ratio_layer",
                     "n_examples", "n_units", "n_positions", "mean_response_tokens"):
            near(mine[stat].values, entry[stat], f"{name} {stat}")
        assert got.attrs[name]["responses"] == entry["responses"]
        # the statistics are functions of the per-item array
        item = mine["cos_item"]
        assert item.dims == ("layer", "item")
        near(item.values.mean(1), entry["cos"], f"{name} cos from cos_item", 1e-12)
        units = got.attrs[name]["units"]
        near([layer_sim.clustered_se(torch.tensor(row), units)
              for row in item.values], entry["cos_se"], f"{name} cos_se from cos_item", 1e-12)
    same_arrays(got, layer_sim.report_arrays(report), {"a": "a", "b": "b"}, ["cos_item"])
    frame = got.to_frame()
    ratio = frame[frame.stat == "ctx_attn_ratio"]
    assert len(ratio) == 2 * 2 * 4 and set(ratio.layer) == {"0", "1"}  # 2 ckpts, layers, heads


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_layer_sim_core_on_other_families(tok, tmp_path, arch):
    """The in-memory core on Llama and Qwen2 equals the command's entry for the same model
    and tokenizer. The tokenizer is the folder's as loaded: transformers reads the char
    tokenizer saved beside a Qwen2 config back as a Qwen2Tokenizer, which drops newlines, so
    the in-memory one would encode other ids (and the numbers differ by ~0.02)."""
    from nca_interp.checkpoint import load_checkpoint

    model = tiny(tok, arch, seed=3)
    folder = save_checkpoint(tmp_path / arch, model, tok)
    _, loaded = load_checkpoint(folder)
    task = make_task("sokoban")
    levels = task.levels("test", 3)
    responses = layer_sim.reference_responses(loaded, task, levels)
    got = layer_sim.similarity(model, task, levels, "state", tok=loaded, responses=responses)
    want = layer_sim.layer_similarity(folder, task, "state", levels, responses=responses)
    for stat in (*layer_sim.STATS, "ctx_attn", "ctx_attn_ratio", "n_positions"):
        near(got[stat].values, want[stat], f"{arch} {stat}")


def test_param_delta_core_on_models_in_memory_equals_the_command(models, tmp_path):
    mem, folders = models
    a, b = str(folders["a"]), str(folders["b"])
    out = tmp_path / "pd"
    report = param_delta.main([a, b, "--init", str(folders["init"]), "--lr", "0.01",
                               "--steps", "10", "--out", str(out)])
    report = json.loads(out.with_suffix(".json").read_text())
    budgets = {n: report["results"][p]["lr_budget"] for n, p in (("a", a), ("b", b))}
    got = param_delta.deltas_of(mem["init"], {"a": mem["a"], "b": mem["b"]}, budgets)
    assert got["rel"].dims == ("checkpoint", "layer", "module")
    assert got["rel"].coords["layer"][:3] == ("all", "0", "1")
    for name, path in (("a", a), ("b", b)):
        entry = report["results"][path]
        for key in ("rel", "adam_norm", "share"):
            cells = got[key].sel(checkpoint=name)
            assert int(np.isfinite(cells.values).sum()) == len(entry[key]), key
            for cell, value in entry[key].items():
                layer, module = cell.split(".", 1)
                near(cells.sel(layer=layer, module=module), value, f"{name} {key} {cell}",
                     1e-9)
        for key, dim in (("per_module", "module"), ("per_module_adam", "module"),
                         ("per_layer", "layer"), ("per_layer_adam", "layer")):
            assert len(got[key].coords[dim]) == len(entry[key]), key
            for k, value in entry[key].items():
                near(got[key].sel(checkpoint=name, **{dim: k}), value, f"{name} {key} {k}",
                     1e-9)
        for key in ("global_rel", "global_adam", "global_sq", "lr_budget"):
            near(got[key].sel(checkpoint=name), entry[key], f"{name} {key}", 1e-9)
    cmp = report["comparison"]
    assert (cmp["a"], cmp["b"]) == (a, b)
    pair = got.sel(checkpoint="a", other="b")
    for cell, value in cmp["cos"].items():
        layer, module = cell.split(".", 1)
        near(pair["cos"].sel(layer=layer, module=module), value, f"cos {cell}", 1e-9)
        near(pair["specific"].sel(layer=layer, module=module), cmp["specific"]["rel"][cell],
             f"specific {cell}", 1e-9)
        near(pair["specific_share"].sel(layer=layer, module=module),
             cmp["specific"]["share"][cell], f"specific share {cell}", 1e-9)
    for m, value in cmp["per_module_cos"].items():
        near(pair["module_cos"].sel(module=m), value, f"module_cos {m}", 1e-9)
    near(pair["global_cos"].values, cmp["global_cos"], "global_cos", 1e-9)
    near(pair["specific_global"].values, cmp["specific"]["global_rel"], "specific global",
         1e-9)
    near(pair["global_cos"].values, report["all_pairs"]["a~b"]["global_cos"], "all_pairs",
         1e-9)
    from_report = param_delta.report_arrays(report)  # runs named as in every other frame
    assert from_report.attrs["paths"] == {"a": a, "b": b}
    same_arrays(got, from_report, {"a": "a", "b": "b"})
    assert got["global_cos"].sel(checkpoint="a", other="a") == pytest.approx(1)
    same = param_delta.deltas_of(mem["init"], {"init": mem["init"]})
    assert np.nanmax(same["rel"].values) == 0 and same["global_rel"].values.tolist() == [0.0]


def test_grad_align_core_on_models_in_memory_equals_the_command(models, tok, tmp_path):
    mem, folders = models
    out = tmp_path / "ga"
    grad_align.main([str(folders["a"]), "--teacher", str(folders["init"]), "--task",
                     "frozenlake", "--context", "plan", "--batch", "8", "--parts", "4",
                     "--threads", "1", "--out", str(out)])
    report = json.loads(out.with_suffix(".json").read_text())
    entry = report["results"]["a"]
    task = make_task("frozenlake")
    was = mem["a"].training
    got = grad_align.align(mem["a"], mem["init"], tok, task, task.levels("grad", 8, 0), "plan",
                           parts=4)
    assert mem["a"].training == was and all(p.requires_grad for p in mem["init"].parameters())
    assert got.attrs["responses"] == entry["responses"]
    g = entry["global"]
    assert got["snr"].dims == ("term",) and got["angle_xfit_deg"].dims == ("pair",)
    for k in ("norm", "self_angle_deg", "snr", "angle_deg", "cos", "angle_xfit_deg",
              "cos_xfit", "norm_ratio"):
        dim = got[k].dims[0]
        assert list(got[k].coords[dim]) == list(g[k]), k
        near(got[k].values, list(g[k].values()), k, 1e-6)
    for k in ("cos_corrected", "angle_corrected_deg"):
        near(got[k].values, [g["parts"]["pairs"][p][k] for p in got[k].coords["pair"]], k)
    for k in ("ci95", "angle_ci95_deg", "splits"):
        near(got[k].values, [g["parts"]["pairs"][p][k] or [None, None]
                             for p in got[k].coords["pair"]], k)
    for k in ("noise_scale", "floor_predicted_deg", "floor_splits_deg"):
        near(got[k].values, [g["parts"]["terms"][t][k] for t in got[k].coords["term"]], k)
    same_arrays(stack({"a": got}, "checkpoint"), grad_align.report_arrays(report), {"a": "a"})
    cells = entry["modules"]
    assert got["angle_xfit_deg_by_module"].dims == ("layer", "module", "pair")
    filled = np.isfinite(got["norm_by_module"].values).any(-1).sum()
    assert filled == len(cells)
    for cell, stats in cells.items():
        layer, module = cell.split(".", 1)
        for k in ("norm", "snr", "angle_xfit_deg"):
            mine = got[f"{k}_by_module"].sel(layer=layer, module=module)
            near(mine.values, [stats[k][x] for x in mine.coords[mine.dims[0]]],
                 f"{k} {cell}")


def test_lens_core_on_models_in_memory_equals_the_command(models, tok, tmp_path):
    """#72: `lens.effects` on two models in memory gives the arrays the command's JSON on
    their folders reads back as (`lens.report_arrays`), labels, intervals, parts, the logit
    lens's layers and the forks included."""
    from nca_interp import lens

    mem, folders = models
    got = lens.effects({"a": mem["a"], "b": mem["b"]}, tok, "sokoban", 5, "state",
                       max_cases=2, batch=3)
    out = tmp_path / "lens"
    lens.main([str(folders["a"]), str(folders["b"]), *SETTINGS, "--max-cases", "2", "--batch",
               "3", "--out", str(out)])
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["environment"]["precision"] == "fp32"  # what its numbers were computed in
    saved = lens.report_arrays(report)
    assert set(got) == set(saved) and {"kl_ci95", "kl_parts", "lens_kl", "part"} <= set(got)
    for k in got:
        assert got[k].dims == saved[k].dims and got[k].coords == saved[k].coords, k
        near(got[k].values, saved[k].values, k, 1e-9)
    assert got["lens_kl"].dims == ("checkpoint", "layer")
    assert got["lens_kl"].coords["layer"] == tuple(report["layers"])
    assert got["kl"].sel(checkpoint="b", region="all") == report["results"]["b"]["overall"]["kl"]
    for name in ("a", "b"):
        assert got.attrs[name]["forks"] == saved.attrs[name]["forks"]
        assert got.attrs[name]["responses"] == report["results"][name]["responses"]
    with pytest.raises(UsageError, match="takes the options"):  # the items are `levels`
        lens.effect(mem["a"], tok, "sokoban", 5, "state", n_levels=3)


def test_patching_core_on_a_model_in_memory_equals_the_command(tmp_path):
    """#72: `patching.patch` on the embedded OPD student in memory (it has harm cases) gives
    the arrays the command's JSON on its folder reads back as (`report_arrays`): every
    sweep's per-case effects, intervals and the logit lens, with the same cases and head
    table; the model in memory is left as it was (the sweeps run on a copy)."""
    from nca_interp import patching
    from nca_interp.checkpoint import load_checkpoint
    from nca_interp.patching import command

    folder = ROOT / "nca_interp" / "assets" / "sokoban_opd"
    model, tok = load_checkpoint(folder)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    options = {"n_levels": 40, "max_cases": 4, "ks": [1], "n_random": 3,
               "n_random_generate": 2}
    task = make_task("sokoban", dim_room=(6, 6), num_boxes=1)
    got = patching.patch(model, tok, task, "plan", **options)
    assert type(model).__name__ != "TransformerBridge" and all(
        torch.equal(v, before[k]) for k, v in model.state_dict().items())
    out = tmp_path / "p"
    patching.main([str(folder), "--n-levels", "40", "--max-cases", "4", "--ks", "1",
                   "--n-random", "3", "--n-random-generate", "2", "--threads", "1",
                   "--out", str(out)])
    report = json.loads(out.with_suffix(".json").read_text())
    saved = command.report_arrays(report)
    assert set(got) == set(saved)
    assert {"forward_resid_all", "reverse_heads", "ablation_ci95", "lens_kl"} <= set(got)
    (name,) = report["results"]
    for k in got:
        mine = saved[k].sel(checkpoint=name)
        mine = mine if hasattr(mine, "dims") else Labelled(np.asarray(mine), (), {}, k)
        assert got[k].dims == mine.dims and got[k].coords == mine.coords, k
        near(got[k].values, mine.values, k, 1e-9)
    assert got["forward_heads"].dims == ("case", "layer", "head")
    assert got["lens_kl"].coords["layer"][0] == "embed"
    for k in ("cases", "heads", "counts"):
        assert got.attrs[k] == saved.attrs[name][k], k
    with pytest.raises(UsageError, match="takes the options"):
        patching.patch(model, tok, task, "plan", ckpt=[str(folder)])


def test_published_reports_read_back_as_labelled_arrays():
    """A published report of each analysis as its core's arrays: every field, 2-D ones
    included, in one frame with the report's own layer labels (embed, 0, 1, ...)."""
    from nca_interp import analysis

    folder = ROOT / "figures" / "sokoban_remap_d2"
    ls = analysis.load(folder / "layer_sim.json")
    arrays = layer_sim.report_arrays(ls)
    frame = arrays.to_frame()
    cos = frame[(frame.stat == "cos") & (frame.checkpoint == next(iter(ls.results)))]
    assert cos.layer.tolist() == list(ls.layers)
    assert cos.value.tolist() == pytest.approx(next(iter(ls.results.values())).cos)
    ratio = frame[frame.stat == "ctx_attn_ratio"]
    assert len(ratio) == sum(np.size(e.ctx_attn_ratio) for e in ls.results.values())
    assert set(ratio.layer) == set(ls.layers[1:])
    pd_ = analysis.load(folder / "param_delta.json")
    d = param_delta.report_arrays(pd_)
    first = next(iter(pd_.results))
    name = Path(first).name  # the run's name as layer_sim's and grad_align's reports key it
    assert d.attrs["paths"][name] == first
    for cell, value in pd_.results[first].rel.items():
        layer, module = cell.split(".", 1)
        assert d["rel"].sel(checkpoint=name, layer=layer, module=module) == pytest.approx(value)
    ga = analysis.load(folder / "grad_align_opd.json")
    g = grad_align.report_arrays(ga)
    name = next(iter(ga.results))
    assert g["angle_xfit_deg"].sel(checkpoint=name).coords["pair"] == tuple(
        ga.results[name].global_["angle_xfit_deg"])
    from nca_interp import lens, trajectory

    le = analysis.load(ROOT / "figures" / "persona" / "lens.json")
    arrays = lens.report_arrays(le)
    name = next(iter(le.results))
    assert arrays["lens_kl"].sel(checkpoint=name).coords["layer"] == tuple(le.layers)
    assert arrays["kl"].sel(checkpoint=name, region="last") == \
        le.results[name].thirds["kl"][-1]
    tr = analysis.load(ROOT / "figures" / "sokoban_long" / "trajectory.json")
    arrays = trajectory.report_arrays(tr)
    name = next(iter(tr.results))
    last = tr.results[name].steps[-1]
    assert arrays["harm"].sel(run=name, step=last["step"]) == last["harm"]
    assert arrays["harm"].coords["step"][0] == 0  # the null
    from nca_interp import patching

    pa = analysis.load(ROOT / "figures" / "facts" / "patching.json")  # NCA found no case
    arrays = patching.report_arrays(pa)
    opd, nca = pa.results
    assert arrays["forward_mlp_mean"].sel(checkpoint=opd).values.tolist() == \
        pytest.approx(pa.results[opd].forward["mlp"]["mean"])
    assert np.isnan(arrays["forward_mlp"].sel(checkpoint=nca).values).all()
    assert arrays.attrs[nca]["note"] and arrays["count_levels"].sel(checkpoint=nca) == \
        pa.results[nca].counts["levels"]


def api_snippets(section: str) -> list[str]:
    """The python blocks of docs/api.md's `section` that are marked as run here."""
    page = (ROOT / "docs" / "api.md").read_text()
    body = page.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"<!-- run by tests/unit/test_cores.py -->\n```python\n(.*?)```", body,
                      re.S)


@pytest.mark.parametrize("section", ["Layer similarity", "Parameter deltas",
                                     "Gradient alignment", "Context return over training",
                                     "The two-view lens", "Patching"])
def test_the_api_page_in_memory_snippets_run(models, tok, section):
    mem, _ = models
    found = api_snippets(section)
    assert found, f"docs/api.md's {section} has no in-memory snippet marked as run here"
    for code in found:
        scope = {"base": mem["init"], "opd": mem["a"], "nca": mem["b"], "tok": tok}
        exec(compile(code, f"docs/api.md ({section})", "exec"), scope)
