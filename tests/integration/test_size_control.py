import json
from pathlib import Path

import pytest

from nca_interp import analysis
from nca_interp.checkpoint import read_run_config
from nca_interp.paper import reproduce, size_control
from train import sft


@pytest.mark.pipeline  # a pipeline run end to end (88 s): the pipeline tier
def test_size_matched_opd_reruns_the_setting_command_at_scaled_lr(tmp_path, capsys,
                                                                  monkeypatch):
    """The control trains OPD with the setting's own distillation command, only --lr scaled by
    NCA's / OPD's measured update size, and compares all three groups; a second call trains
    nothing."""
    runs, figs = tmp_path / "runs", tmp_path / "figs"
    sft.main(["--out", str(runs / "sokoban_base"), *reproduce.presets()["sokoban"].sft_args,
              "--steps", "4", "--threads", "1", "--eval-every", "100", "--eval-levels", "8",
              "--save-every", "4", "--n-layers", "1", "--d-model", "32"])
    reproduce.main(["--task", "sokoban", "--name", "sk", "--analyses", "false", "--seeds", "0,1",
                    "--teacher-steps", "4", "--distill-steps", "3", "--save-every", "3",
                    "--batch", "8", "--n-levels", "8", "--jobs", "2", "--threads", "2",
                    "--runs", str(runs), "--figures", str(figs)])
    argv = ["--setting", "sk", "--seeds", "0,1", "--runs", str(runs), "--figures", str(figs),
            "--threads", "2", "--rounds", "1"]
    out = size_control.main(argv)
    before = analysis.load(figs / "sk_size" / "param_delta_before.json")
    size = size_control.sizes(before)
    ratio = (sum(size["nca"]) / 2) / (sum(size["opd"]) / 2)
    assert out["ratio"] == ratio and len(out["sizes"]["opdsized"]) == 2
    for seed in (0, 1):
        opd = read_run_config(runs / f"sk_opd_s{seed}")
        sized = read_run_config(runs / f"sk_opdsized_s{seed}")
        assert abs(sized["lr"] - opd["lr"] * ratio) < 1e-3 * opd["lr"]
        free = ("lr", "out", "threads", "git_commit", "role")
        assert {k: v for k, v in sized.items() if k not in free} \
            == {k: v for k, v in opd.items() if k not in free}
        assert sized["role"] == "opdsized" and opd["role"] is None  # read as its method
    report = json.loads((figs / "sk_size" / "param_delta.json").read_text())
    assert len(report["results"]) == 6
    capsys.readouterr()
    size_control.main(argv)
    assert "[run]" not in capsys.readouterr().out

    # a second round when round 1 missed NCA's size (here: no size counts as matched): its lr
    # is the one the two measured (lr, size) points predict, and the final comparison uses it
    monkeypatch.setattr(size_control, "SIZE_MATCH", 1.0)
    out = size_control.main([*argv[:-1], "2"])
    assert [r["runs"] for r in out["rounds"]] == ["opdsized", "opdsized2"]
    s1 = size_control.mean(size_control.sizes(analysis.load(
        figs / "sk_size" / "param_delta_round1.json"))["opdsized"])
    s_opd, s_nca = sum(size["opd"]) / 2, sum(size["nca"]) / 2
    lr0 = read_run_config(runs / "sk_opd_s0")["lr"]
    m1 = read_run_config(runs / "sk_opdsized_s0")["lr"] / lr0  # round 1's lr, as trained
    m2 = size_control.next_multiplier([(1.0, s_opd), (m1, s1)], s_nca)  # property-tested below
    for seed in (0, 1):
        lr0 = read_run_config(runs / f"sk_opd_s{seed}")["lr"]
        assert abs(read_run_config(runs / f"sk_opdsized2_s{seed}")["lr"] - lr0 * m2) < 1e-3 * lr0
    final = json.loads((figs / "sk_size" / "param_delta.json").read_text())["results"]
    assert sorted(Path(p).name for p in final if "sized" in p) == ["sk_opdsized2_s0",
                                                                  "sk_opdsized2_s1"]
    made = json.loads((figs / "sk_size" / "manifest.json").read_text())
    assert [r["round"] for r in made["rounds"]] == [1, 2]


def test_next_multiplier_hits_a_power_law_target():
    """Where the update size follows lr as a power (what Adam gives between two lrs), the lr
    predicted from two measured points reaches the target size exactly."""
    def size(m):
        return 0.3 * m ** 0.44

    points = [(1.0, size(1.0)), (1.229, size(1.229))]
    assert abs(size_control.next_multiplier(points, size(1.6)) - 1.6) < 1e-9
    import pytest

    from nca_interp.errors import RunError

    with pytest.raises(RunError, match="did not grow with lr"):
        size_control.next_multiplier([(1.0, 0.3), (1.2, 0.29)], 0.4)
    with pytest.raises(RunError, match="far from the last"):
        size_control.next_multiplier([(1.0, 0.3), (1.01, 0.3003)], 0.6)


def test_nonsense_rounds_and_elasticity_are_refused_before_any_work(tmp_path):
    """No round to train, or an elasticity that would send the first lr off by orders of
    magnitude, is a one-line usage error before anything is read or trained."""
    import pytest

    from nca_interp.errors import UsageError

    for flags, msg in ((["--rounds", "0"], "give at least 1 training round"),
                       (["--elasticity", "0"], r"give a value in \[0.05, 2\]"),
                       (["--elasticity", "5"], r"give a value in \[0.05, 2\]")):
        with pytest.raises(UsageError, match=msg):
            size_control.main(["--figures", str(tmp_path / "none"), *flags])
