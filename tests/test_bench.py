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
