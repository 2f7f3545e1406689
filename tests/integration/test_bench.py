import pytest


def test_gpu_check_script_runs_on_cpu_at_tiny_shape(tmp_path):
    """The prepared GPU check (bench/gpu_check.py) runs end to end at a tiny shape on the CPU,
    so it is ready for a session that is lent a GPU."""
    from bench import gpu_check

    out = gpu_check.main(["--shape", "tiny", "--device", "cpu", "--steps", "2", "--batch", "4",
                          "--micro-batch", "2", "--levels", "4",
                          "--out", str(tmp_path / "g.json")])
    assert set(out["runs"]) == {"opd", "nca"} and out["shape"]["vocab"] == 512
    assert all(r["prompts_per_s"] > 0 for r in out["runs"].values())
    assert len(out["layer_sim"]["cos_last_layer"]) >= 3


def test_patching_cost_runs():
    from bench import patching_cost

    out = patching_cost.main(["--n-levels", "40", "--cases", "4"])
    heads = out["sweeps"]["head"]
    assert heads["forwards"] == out["layers"] * out["heads"] and heads["rerun_s"] > 0
    assert all(s["exact"] and s["max_abs_diff"] < 1e-5 for s in out["sweeps"].values())
    gen = out["generation"]
    assert gen["identical"] == gen["n"] == 4 and gen["heads_ablated"] > 0
    alone = patching_cost.main(["--n-levels", "40", "--cases", "4", "--heads", "false",
                                "--resid", "false", "--heads-ablated", "0"])
    assert alone["sweeps"] == {} and alone["generation"]["heads_ablated"] == 0
    with pytest.raises(SystemExit):
        patching_cost.main(["--heads-ablated", "1.5"])


def test_patching_cost_says_what_to_do_without_a_case(monkeypatch):
    """A checkpoint that wins no level either way gives no batch to time: one line naming the
    flag, not an IndexError from an empty batch."""
    from bench import patching_cost
    from nca_interp.errors import InputError

    monkeypatch.setattr(patching_cost.patching, "find_cases", lambda *a, **k: ([], [], {}))
    with pytest.raises(InputError, match="raise --n-levels"):
        patching_cost.main(["--n-levels", "4", "--cases", "4"])
    with pytest.raises(SystemExit):
        patching_cost.main(["--cases", "0"])


def test_grad_align_cost_runs_and_both_ways_agree():
    from bench import grad_align_cost

    out = grad_align_cost.main(["--batch", "8", "--parts", "2", "--micro-batch", "2",
                                "--repeat", "1"])
    assert out["gram_max_rel_diff"] < 1e-6 and out["median_s"]["shared"] > 0


def test_analysis_scale_runs_at_tiny_shape(tmp_path):
    """bench/analysis_scale.py end to end on bf16, sharded-as-saved folders of a tiny shape
    (the 0.6B / 1.7B runs are the benchmark's, not the tests')."""
    from bench import analysis_scale

    rep = analysis_scale.main(["--shape", "tiny", "--levels", "4", "--threads", "1",
                               "--out", str(tmp_path / "as")])
    assert set(rep["rows"]) >= {"param_delta init + 2", "layer_sim 3 + random-init",
                                "grad_align batch 4"}
    assert all(r["peak_rss_gb"] > 0 for r in rep["rows"].values())


def test_scale_model_file_is_its_generator_output():
    """docs/scale.md's memory extrapolation is bench/results/scale_model.txt, which must equal
    what bench.scale_model computes from the committed analysis_scale JSON."""
    from pathlib import Path

    from bench import scale_model

    assert Path("bench/results/scale_model.txt").read_text() == scale_model.render()


def test_kl_estimator_audit_runs_and_full_is_its_own_reference():
    from bench import kl_estimators

    r = kl_estimators.run(str(__import__("nca_interp.assets", fromlist=["embedded"])
                              .embedded("sokoban_opd")), batch=8, ks=[4, 500])
    full = [row for row in r["rows"] if row["estimator"] == "full"]
    assert len(full) == 2 and all(row["bias"] == 0 and abs(row["cos_full"] - 1) < 1e-9
                                  for row in full)
    assert not any("top-500" in row["estimator"] for row in r["rows"])  # k >= |V|: skipped
    sampled = [row for row in r["rows"] if row["estimator"].startswith("sampled")]
    assert len(sampled) == 4 and all(row["teacher_floats"] == 1 for row in sampled)


def test_trl_step_bench_runs_both_loops():
    from bench import trl_step

    out = trl_step.main(["--batch", "4", "--steps", "1", "--threads", "1", "--kls", "full"])
    assert {(r["loop"], r["kl"]) for r in out["rows"]} == {("ours", "full"), ("trl", "full")}
    assert all(r["step_s"] > 0 and r["peak_rss_gb"] > 0 and r["tokens"] > 0
               for r in out["rows"])


def test_precision_bench_parts_and_its_committed_table():
    """bench.precision: bf16's agreement on one batch is measured against fp32 on the same
    tokens (the gradient of another batch is the null), and the committed table is what its
    JSON renders to under today's rules."""
    from pathlib import Path

    from bench import precision
    from nca_interp.assets import embedded

    a = precision.agreement(str(embedded("sokoban_base")), None, None, None, 8, 1)
    assert a["loss_rel_diff"] < precision.LOSS_TOL and a["grad_cos_bf16"] > precision.GRAD_COS_MIN
    assert abs(a["grad_cos_recomputed"] - 1) < 1e-9 and a["loss_recomputed_diff"] == 0
    assert a["grad_cos_other_batch"] < a["grad_cos_bf16"]
    for stem in ("precision_sokoban_base",):
        saved = Path(f"bench/results/{stem}.txt").read_text()
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            precision.main(["--report", f"bench/results/{stem}.json"])
        assert buf.getvalue() == saved


def test_pilot_bench_budgets_a_plan_from_measured_steps(tmp_path):
    """bench.pilot runs a few teacher, OPD and NCA steps and turns their median step times into
    the plan's hours (teacher alone, students two at a time)."""
    from bench import pilot
    from nca_interp.assets import embedded

    out = pilot.main(["--init", str(embedded("sokoban_base")), "--batch", "4", "--sft-steps",
                      "2", "--distill-steps", "2", "--eval-levels", "4", "--sft-lr", "1e-4",
                      "--plan", "teacher=100,students=50,seeds=3", "--keep", str(tmp_path)])
    by = {r["stage"]: r for r in out["rows"]}
    assert set(by) == {"teacher SFT", "OPD student", "NCA student"}
    assert all(r["step_s"] > 0 and r["peak_rss_gb"] > 0 for r in out["rows"])
    assert abs(out["teacher_h"] - 100 * by["teacher SFT"]["step_s"] / 3600) < 1e-9
    assert abs(out["students_h"] - 3 * 50 * (by["OPD student"]["step_s"]
                                             + by["NCA student"]["step_s"]) / 2 / 3600) < 1e-9
