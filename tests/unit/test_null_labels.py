"""A null that sits at or above the measured values it is read against is called a reference,
not a floor (#70 item 7), wherever a table, a page, a claim or a figure names one: a term's
self-angle beside its cross-fitted angles (grad_align's table, the setting page, the figures),
the different-item cosine beside the layers' cosines (layer_sim's table, the NCA claim, the
depth page) and the lens's arithmetic floor beside the KL with c. Each is checked on one
case below and one above."""

import json
from pathlib import Path
from types import SimpleNamespace

from nca_interp import grad_align, layer_sim, lens, plots
from nca_interp.checkpoint import save_checkpoint
from nca_interp.paper import claims
from nca_interp.paper import report as pages
from nca_interp.paper.claims import views
from nca_interp.reports import null_role
from tests.conftest import tiny


def test_a_null_is_a_floor_only_below_every_measured_value():
    assert null_role([(0.2, 0.5), (0.3, 0.9)]) == "floor"
    assert null_role([(0.2, 0.5), (0.9, 0.9)]) == "reference"  # at a measured value
    assert null_role([(0.965, 0.918)]) == "reference"  # layer_sim's random init, #70
    assert null_role([(None, 0.5), (0.2, None)]) == "reference"  # nothing to compare


def _global(self_opd: float, self_ctx: float, opd_ctx: float) -> dict:
    angles = {"opd~ctx": opd_ctx, "opd~nca": 80.0, "nca~ctx": 70.0}
    return {"angle_deg": angles, "angle_xfit_deg": angles,
            "self_angle_deg": {"opd": self_opd, "ctx": self_ctx, "nca": 10.0},
            "snr": {"opd": 3.0, "ctx": 3.0, "nca": 3.0},
            "norm": {"opd": 1.0, "ctx": 1.0, "nca": 1.0}, "norm_ratio": {"ctx/opd": 1.0}}


def test_a_self_angle_above_a_cross_fitted_angle_is_a_reference(tmp_path):
    """facts' OPD at step 24: opd~ctx 21 degrees, opd's own halves 59 degrees apart."""
    below, above = _global(15.0, 12.0, 40.0), _global(59.0, 12.0, 21.0)
    table = grad_align.format_table({"a": SimpleNamespace(global_=below),
                                     "b": SimpleNamespace(global_=above)})
    a, b = (line for line in table.splitlines() if line.startswith(("a ", "b ")))
    assert "ref" not in a and b.count("ref") == 1 and "59.0 ref" in b
    assert "'ref' where one does not: a reference, not a floor" in table
    results = {f"step_{i}": {"modules": {}, "tokens": {}, "global": g}
               for i, g in enumerate((below, above))}
    (tmp_path / "grad_align_opd.json").write_text(json.dumps(
        {"analysis": "grad_align", "config": {"batch": 64}, "task": "t", "context": "c",
         "runs": {}, "results": results, "batch": 64, "steps": [0, 1]}))
    page = pages.grad_align(tmp_path)
    rows = [line for line in page.splitlines() if line.startswith("| opd |")]
    assert " ref" not in rows[0] and "| 59° ref |" in rows[1]
    assert "(1 of 6 self-angles here)" in page
    from nca_interp import analysis

    fig = plots.grad_align_figure(analysis.load(tmp_path / "grad_align_opd.json"))
    names = {t.name for t in fig.data}
    assert "self-angle of opd (reference)" in names and "self-angle of ctx (floor)" in names


def test_the_different_item_cosine_above_a_layers_cosine_is_a_reference(tmp_path):
    def row(cos, other):
        return {"cos": cos, "cos_other": other, "cos_std": [0.0] * 4, "n_examples": 100}

    def write(nca_other):
        (tmp_path / "layer_sim.json").write_text(json.dumps({"results": {
            "t_base": row([1.0, 0.95, 0.94, 0.93], [1.0, 0.5, 0.5, 0.5]),
            "random_init": row([1.0, 0.9, 0.9, 0.9], [1.0, 0.8, 0.8, 0.8]),
            **{f"t_nca_s{s}": row([1.0, 0.999, 0.95, 0.998], nca_other) for s in range(2)},
            **{f"t_opd_s{s}": row([1.0, 0.9, 0.9, 0.9], [1.0, 0.5, 0.5, 0.5])
               for s in range(2)}}}))
        return claims.nca_identical(tmp_path).null

    assert "different-item floor up to 0.900" in write([1.0, 0.6, 0.9, 0.7])
    assert "different-item reference up to 0.960 (not a floor" in write([1.0, 0.6, 0.96, 0.7])
    assert views._floor(tmp_path)[1] == "reference"
    entries = {name: SimpleNamespace(cos=r["cos"], cos_other=r["cos_other"],
                                     get=r.get) for name, r in
               json.loads((tmp_path / "layer_sim.json").read_text())["results"].items()}
    said = layer_sim.null_line(entries)
    assert "t_nca_s0, t_nca_s1: there it is a reference" in said
    assert "t_base" not in said
    floor = {"t_base": entries["t_base"]}
    assert "a floor" in layer_sim.null_line(floor)


def test_the_lens_floor_at_or_above_the_kl_with_c_is_a_reference(tok, tmp_path, capsys):
    rows = [{"prompt": f"what is {i} plus one", "context": f"you always answer {i + 1}",
             "answer": str(i + 1), "id": f"q{i}"} for i in range(8)]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    student = save_checkpoint(tmp_path / "student", tiny(tok), tok)
    report = lens.execute(lens.LensConfig(
        ckpt=[str(student)], task="jsonl", task_options=[f"data={data}"], n_levels=4,
        batch=4, threads=1, max_cases=1, out=str(tmp_path / "lens")))
    assert "(reference)" not in pages.lens(tmp_path)  # the arithmetic floor, ~1e-8, below
    assert "kl_floor sits at or above" not in capsys.readouterr().out
    saved = json.loads(Path(tmp_path / "lens.json").read_text())
    e = saved["results"]["student"]
    e["overall"]["kl_floor"] = e["overall"]["kl"] * 2  # a floor above the effect
    Path(tmp_path / "lens.json").write_text(json.dumps(saved))
    assert "(reference)" in pages.lens(tmp_path)
    lens.show(saved)
    assert "kl_floor sits at or above kl for student: there it is a reference" in \
        capsys.readouterr().out
    assert report.results["student"].overall["kl"] > 0
