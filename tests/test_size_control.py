import json

from nca_interp.checkpoint import read_run_config
from train import reproduce, sft, size_control


def test_size_matched_opd_reruns_the_setting_command_at_scaled_lr(tmp_path, capsys):
    """The control trains OPD with the setting's own distillation command, only --lr scaled by
    NCA's / OPD's measured update size, and compares all three groups; a second call trains
    nothing."""
    runs, figs = tmp_path / "runs", tmp_path / "figs"
    sft.main(["--out", str(runs / "sokoban_base"), *reproduce.PRESETS["sokoban"].sft_args,
              "--steps", "4", "--threads", "1", "--eval-every", "100", "--eval-levels", "8",
              "--save-every", "4", "--n-layers", "1", "--d-model", "32"])
    reproduce.main(["--task", "sokoban", "--name", "sk", "--analyses", "false", "--seeds", "0,1",
                    "--teacher-steps", "4", "--distill-steps", "3", "--save-every", "3",
                    "--batch", "8", "--n-levels", "8", "--jobs", "2", "--threads", "2",
                    "--runs", str(runs), "--figures", str(figs)])
    argv = ["--setting", "sk", "--seeds", "0,1", "--runs", str(runs), "--figures", str(figs),
            "--threads", "2"]
    out = size_control.main(argv)
    before = json.loads((figs / "sk_size" / "param_delta_before.json").read_text())
    size = size_control.sizes(before)
    ratio = (sum(size["nca"]) / 2) / (sum(size["opd"]) / 2)
    assert out["ratio"] == ratio and len(out["sizes"]["opdsized"]) == 2
    for seed in (0, 1):
        opd = read_run_config(runs / f"sk_opd_s{seed}")
        sized = read_run_config(runs / f"sk_opdsized_s{seed}")
        assert abs(sized["lr"] - opd["lr"] * ratio) < 1e-3 * opd["lr"]
        assert {k: v for k, v in sized.items() if k not in ("lr", "out", "threads", "git_commit")} \
            == {k: v for k, v in opd.items() if k not in ("lr", "out", "threads", "git_commit")}
    report = json.loads((figs / "sk_size" / "param_delta.json").read_text())
    assert len(report["per_checkpoint"]) == 6
    capsys.readouterr()
    size_control.main(argv)
    assert "[run]" not in capsys.readouterr().out
