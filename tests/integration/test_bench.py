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
    assert out["forwards"] == out["layers"] * out["heads"] + 1 and out["sweep_s"] > 0


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
