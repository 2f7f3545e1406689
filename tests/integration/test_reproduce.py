import json
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest

from nca_interp import analysis
from nca_interp.cli import parse_config
from nca_interp.paper import reproduce
from nca_interp.paper.reproduce import ReproduceConfig


def _report(results: dict, methods: dict):
    """A context-return report as `analysis.load` gives it (typed)."""
    from nca_interp import analysis

    return analysis.from_json(
        {"config": {}, "results": results,
         "runs": {n: {"name": n, "method": methods.get(n),
                      "seed": int(n[-1]) if n in methods else None} for n in results}},
        analysis="evaluate")


def test_summary_by_recorded_method():
    reports = {n: {"correct_no_c": w, "correct_c": w, "harm": 0.1, "help": 0.2, "harm_joint": 0.05,
                   "help_joint": 0.1, "both": 0.5, "rel_len": 0.0, "rel_len_both": 0.0,
                   "regime": "B"}
               for n, w in [("t_base", 0.5), ("t_opd_s0", 0.6), ("t_opd_s1", 0.8)]}
    methods = {"t_opd_s0": "opd", "t_opd_s1": "opd"}
    s = reproduce.summarise(_report(reports, methods))
    assert s["opd"]["correct_no_c"] == {"mean": 0.7, "min": 0.6, "max": 0.8, "n": 2}
    assert s["base"]["regimes"] == ["B"] and "nca" not in s and "teacher" not in s
    # cross-model: the students' start is evaluated first and is the null; the teacher apart
    cross = {"s_base": reports["t_base"], "xl_base": {**reports["t_base"], "correct_no_c": 0.2},
             "xl_opd_s0": reports["t_opd_s0"]}
    s = reproduce.summarise(_report(cross, methods))
    assert s["base"]["correct_no_c"]["mean"] == 0.5 and s["teacher"]["correct_no_c"]["mean"] == 0.2


@pytest.mark.slow
def test_pipeline_end_to_end_and_skips(tmp_path):
    argv = ["--task", "frozenlake", "--seeds", "0", "--teacher-steps", "10",
            "--distill-steps", "4", "--save-every", "2", "--batch", "8", "--n-levels", "20",
            "--grad-batch", "8",
            "--runs", str(tmp_path / "runs"), "--figures", str(tmp_path / "figs")]
    reproduce.main(argv)
    figs = tmp_path / "figs" / "frozenlake"
    for name in ("context_return.json", "layer_sim.json", "layer_sim_generating.json",
                 "grad_align_opd.json",
                 "param_delta.json", "layer_sim.html", "manifest.json"):
        assert (figs / name).exists(), name
    manifest = json.loads((figs / "manifest.json").read_text())
    assert all(v["commit"] for v in manifest["files"].values())
    before = (figs / "layer_sim.json").stat().st_mtime
    reproduce.main(argv)  # everything exists: skipped
    assert (figs / "layer_sim.json").stat().st_mtime == before


def test_a_command_other_than_a_published_settings_writes_its_own_folder(tmp_path,
                                                                       monkeypatch):
    """`--quick` (one seed, fewer steps) and any other change of a published setting's command
    leave figures/<setting> as it is: its outputs go to RUNS/figures/<setting>_<tag>, unless
    --publish."""
    cfg = parse_config(ReproduceConfig, ["--task", "sokoban", "--quick", "--runs",
                                         str(tmp_path / "runs")])
    p = reproduce.plan(cfg, [])
    assert p.figs == tmp_path / "runs" / "figures" / "sokoban_quick"
    assert p.name == "sokoban_quick"
    same = parse_config(ReproduceConfig, shlex.split(reproduce.settings()["sokoban"].command(
        "sokoban"))[3:] + ["--threads", "1", "--runs", str(tmp_path / "runs")])
    reproduce.apply_preset(same)
    assert reproduce.published_changes(same, "sokoban") == {}
    monkeypatch.setattr(reproduce, "FIGURES", tmp_path / "published")
    cfg = parse_config(ReproduceConfig, ["--task", "sokoban", "--quick", "--publish",
                                         "--figures", str(tmp_path / "published")])
    reproduce.apply_preset(cfg)
    assert "seeds" in reproduce.published_changes(cfg, "sokoban")
    assert reproduce.plan(cfg, []).figs == tmp_path / "published" / "sokoban"


def test_a_student_is_matched_to_its_teacher_by_content(tmp_path, tok):
    """A student run records its --student's content digest: it matches the teacher in place
    after a copy (times renewed), not after the teacher is retrained; a run from before
    digests were kept is judged by time."""
    import os
    import shutil

    from nca_interp.checkpoint import content_digest, save_checkpoint
    from tests.conftest import tiny

    teacher, run = tmp_path / "teacher", tmp_path / "student"
    save_checkpoint(teacher, tiny(tok, seed=0), tok, {"task": {"name": "sokoban"}})
    final = save_checkpoint(run / "checkpoints" / "step_000002", tiny(tok, seed=2), tok, {})
    config = {"inputs": {"--student": {"path": str(teacher), "sha256": content_digest(teacher)}}}
    (run / "run_config.json").write_text(json.dumps(config))
    assert reproduce.distilled_from(run, teacher, teacher)
    shutil.copytree(teacher, tmp_path / "copy")
    shutil.rmtree(teacher)
    (tmp_path / "copy").rename(teacher)
    os.utime(teacher / "nca_checkpoint.json", (final.stat().st_mtime + 100,) * 2)
    assert reproduce.distilled_from(run, teacher, teacher)  # newer, but the same weights
    save_checkpoint(teacher, tiny(tok, seed=1), tok, {"task": {"name": "sokoban"}})
    os.utime(teacher / "nca_checkpoint.json", (0, 0))
    assert not reproduce.distilled_from(run, teacher, teacher)  # older, but other weights
    (run / "run_config.json").write_text("{}")  # recorded before digests were kept
    assert reproduce.distilled_from(run, teacher, teacher)
    os.utime(teacher / "nca_checkpoint.json", (final.stat().st_mtime + 100,) * 2)
    assert not reproduce.distilled_from(run, teacher, teacher)


def test_stage_reruns_only_when_stale(tmp_path, tok):
    """A stage runs a command's `execute` on its config object and records the command line
    that makes the same config and its inputs' content digests; it reruns when an input's
    content changed (a retrained checkpoint) or the config differs (not for another thread
    count, flag order or a spelled-out default), and not when an input was only copied or
    checked out again (every file's time renewed, its content the same). An entry recorded
    before digests were kept falls back to times."""
    import os
    import shutil
    from dataclasses import replace

    from nca_interp.checkpoint import save_checkpoint
    from nca_interp.evaluate import EvalConfig
    from tests.conftest import tiny

    manifest = reproduce.Manifest(tmp_path / "manifest.json", reproduce.ReproduceConfig())
    ckpt, out = tmp_path / "ckpt", tmp_path / "out.json"
    save_checkpoint(ckpt, tiny(tok, seed=0), tok, {"task": {"name": "sokoban"}})
    calls = []

    def fn(cfg):
        calls.append(cfg)
        out.write_text("{}")

    fn.__module__ = "m"
    cfg = EvalConfig(ckpt=["a"], out=str(out))
    reproduce.stage("s", manifest, [out], fn, cfg, inputs=[ckpt])
    reproduce.stage("s", manifest, [out], fn, cfg, inputs=[ckpt])
    assert len(calls) == 1 and calls[0] is cfg  # up to date: skipped
    copy = tmp_path / "copy"  # a copy, or a fresh checkout: every time renewed, content kept
    shutil.copytree(ckpt, copy)
    shutil.rmtree(ckpt)
    copy.rename(ckpt)
    for f in ckpt.iterdir():
        os.utime(f, (out.stat().st_mtime + 10,) * 2)
    reproduce.stage("s", manifest, [out], fn, cfg, inputs=[ckpt])
    assert len(calls) == 1
    save_checkpoint(ckpt, tiny(tok, seed=1), tok, {"task": {"name": "sokoban"}})  # retrained
    os.utime(ckpt / "nca_checkpoint.json", (0, 0))  # older than the output, yet stale
    reproduce.stage("s", manifest, [out], fn, cfg, inputs=[ckpt])
    assert len(calls) == 2
    recorded = json.loads((tmp_path / "manifest.json").read_text())["files"][str(out)]["command"]
    assert recorded == f"python -m m a --out {out}"
    os.utime(ckpt / "nca_checkpoint.json", (0, 0))
    reproduce.stage("s", manifest, [out], fn, replace(cfg, threads=1), inputs=[ckpt])
    assert len(calls) == 2  # a thread count changes nothing
    manifest.data["files"][str(out)]["command"] = f"python -m m --n-levels 1000 --out {out} a"
    reproduce.stage("s", manifest, [out], fn, cfg, inputs=[ckpt])
    assert len(calls) == 2  # the same config, spelled differently
    reproduce.stage("s", manifest, [out], fn, replace(cfg, seed=1), inputs=[ckpt])
    assert len(calls) == 3  # another config (another seed): rerun
    reproduce.stage("s", manifest, [out], fn, replace(cfg, seed=1), inputs=[ckpt])
    assert len(calls) == 3
    # an entry written before digests were kept is judged by time; found up to date, it gets
    # its inputs' digests, and from then on is judged by content
    entry = manifest.data["files"][str(out)]
    del entry["inputs"]
    reproduce.stage("s", manifest, [out], fn, replace(cfg, seed=1), inputs=[ckpt])
    assert len(calls) == 3 and entry["inputs"] == reproduce.digests([ckpt])
    os.utime(ckpt / "nca_checkpoint.json", (out.stat().st_mtime + 10,) * 2)
    reproduce.stage("s", manifest, [out], fn, replace(cfg, seed=1), inputs=[ckpt])
    assert len(calls) == 3
    del entry["inputs"]  # by time, an input newer than the output is stale
    reproduce.stage("s", manifest, [out], fn, replace(cfg, seed=1), inputs=[ckpt])
    assert len(calls) == 4
    # a PNG export computes nothing new (the pipeline draws PNGs from the JSON at its end): a
    # published stage is not re-run because a later invocation asks for PNGs
    from nca_interp.cli import argv_of, same_config
    from nca_interp.trajectory import TrajectoryConfig

    traj = TrajectoryConfig(runs=["a"], out="o")
    assert same_config(replace(traj, png=True), argv_of(traj, "runs"), "runs")
    assert not same_config(replace(traj, every=3), argv_of(traj, "runs"), "runs")


def test_sweep_row_shares_the_teacher_and_times_every_stage(tmp_path):
    """A sweep row (--name, one method, --analyses false) stops after the context return and
    its trajectory; its teacher is the task's, trained here outside the pipeline first, and the
    manifest still records the teacher's training time (from the run directory)."""
    from train import sft

    runs, figs = tmp_path / "runs", tmp_path / "figs"
    sft.main(["--out", str(runs / "sokoban_base"), *reproduce.presets()["sokoban"].sft_args,
              "--steps", "4", "--threads", "1", "--eval-every", "100", "--eval-levels", "8",
              "--save-every", "4", "--n-layers", "1", "--d-model", "32"])
    argv = ["--task", "sokoban", "--name", "sk_long", "--methods", "opd", "--analyses",
            "false", "--seeds", "0,1", "--teacher-steps", "4", "--distill-steps", "4",
            "--save-every", "2", "--batch", "8", "--n-levels", "16", "--jobs", "2",
            "--threads", "2", "--runs", str(runs), "--figures", str(figs), "--kl", "sampled"]
    reproduce.main(argv)
    out = figs / "sk_long"
    from nca_interp.checkpoint import read_run_config

    assert read_run_config(runs / "sk_long_opd_s1")["kl"] == "sampled"  # the row's estimator
    summary = json.loads((out / "context_return_summary.json").read_text())
    assert set(summary) == {"base", "opd"} and summary["opd"]["correct_no_c"]["n"] == 2
    traj = json.loads((out / "trajectory.json").read_text())
    assert set(traj["results"]) == {"sk_long_opd_s0", "sk_long_opd_s1"}  # one method: all seeds
    assert not (out / "layer_sim.json").exists() and not (runs / "sk_long_nca_s0").exists()
    files = json.loads((out / "manifest.json").read_text())["files"]
    teacher = files[str(runs / "sokoban_base" / "checkpoints" / "step_000004")]
    assert teacher["seconds"] > 0 and "wall clock" in teacher["seconds_from"]
    for seed in (0, 1):
        run = files[str(runs / f"sk_long_opd_s{seed}" / "checkpoints" / "step_000004")]
        assert run["seconds"] > 0 and "--method opd" in run["command"]
    with pytest.raises(ValueError, match="--analyses false"):
        reproduce.main([*argv[:7], "true", *argv[8:]])
    # a student retrained to other weights: --keep leaves the named steps' outputs as they
    # are; without it the evaluation is stale and runs again
    import torch

    from nca_interp.checkpoint import load_checkpoint, save_checkpoint

    final = runs / "sk_long_opd_s0" / "checkpoints" / "step_000004"
    kept = {n: (out / n).stat().st_mtime for n in ("context_return.json", "trajectory.json")}
    model, tk = load_checkpoint(final)
    with torch.no_grad():
        next(model.parameters()).add_(1e-3)
    save_checkpoint(final, model, tk, json.loads((final / "run_config.json").read_text()))
    reproduce.main([*argv, "--keep", "context_return,over_training"])
    assert {n: (out / n).stat().st_mtime for n in kept} == kept
    reproduce.main(argv)
    assert (out / "context_return.json").stat().st_mtime > kept["context_return.json"]


@pytest.mark.pipeline  # a pipeline end to end: make test-pipeline
def test_dose_follows_every_seed_with_its_control_and_draws_harm_against_drift(tmp_path):
    """--dose true (a preset's `dose` is its default): the trajectory covers every run of every
    seed at every saved checkpoint with reads_c, and harm against drift is computed from it and
    drawn."""
    from train import sft

    assert not reproduce.presets()["sokoban"].dose  # the flag, not the preset, asks for it
    runs, figs = tmp_path / "runs", tmp_path / "figs"
    sft.main(["--out", str(runs / "sokoban_base"), *reproduce.presets()["sokoban"].sft_args,
              "--steps", "4", "--threads", "1", "--eval-every", "100", "--eval-levels", "8",
              "--save-every", "4", "--n-layers", "1", "--d-model", "32"])
    reproduce.main(["--task", "sokoban", "--name", "sk_dose", "--analyses", "false", "--seeds",
                    "0,1", "--teacher-steps", "4", "--distill-steps", "4", "--save-every", "2",
                    "--batch", "8", "--n-levels", "16", "--jobs", "2", "--threads", "2",
                    "--runs", str(runs), "--figures", str(figs), "--dose", "true"])
    out = figs / "sk_dose"
    traj = json.loads((out / "trajectory.json").read_text())["results"]
    assert set(traj) == {f"sk_dose_{m}_s{s}" for m in ("opd", "nca") for s in (0, 1)}
    for run in traj.values():
        assert [r["step"] for r in run["steps"]] == [0, 2, 4]
        assert all("reads_c" in r and "drift" in r for r in run["steps"])
    hd = json.loads((out / "harm_drift.json").read_text())
    assert len(hd["rows"]) == 12 and set(hd["course"]) == {"opd", "nca"}
    assert (out / "harm_drift.html").exists()
    assert "Harm against drift" in (out / "README.md").read_text()


def test_task_options_reach_students_and_every_evaluation(tmp_path):
    """--task-options kb=1: the students internalize knowledge base 1 from the shared teacher
    (recorded with kb 0), and every evaluation asks KB 1's questions (without the option the
    first checkpoint's KB 0 would be used for all: evaluate refuses that mix)."""
    from nca_interp.checkpoint import read_run_config
    from train import sft

    runs, figs = tmp_path / "runs", tmp_path / "figs"
    sft.main(["--out", str(runs / "sysprompt_base"), *reproduce.presets()["sysprompt"].sft_args,
              "--batch", "8", "--pack", "2", "--steps", "2", "--threads", "1", "--eval-every",
              "100", "--eval-levels", "8", "--save-every", "2", "--n-layers", "1",
              "--d-model", "32"])
    reproduce.main(["--task", "sysprompt", "--name", "sp_kb1", "--task-options", "kb=1",
                    "--methods", "opd", "--analyses", "false", "--seeds", "0",
                    "--teacher-steps", "2", "--distill-steps", "2", "--save-every", "2",
                    "--batch", "8", "--n-levels", "8", "--jobs", "1", "--threads", "1",
                    "--runs", str(runs), "--figures", str(figs)])
    assert read_run_config(runs / "sysprompt_base")["task"]["kb"] == 0
    assert read_run_config(runs / "sp_kb1_opd_s0")["task"]["kb"] == 1
    files = json.loads((figs / "sp_kb1" / "manifest.json").read_text())["files"]
    for name in ("teacher_system.json", "context_return.json", "context_control.json"):
        assert "--task-options kb=1" in files[str(figs / "sp_kb1" / name)]["command"], name


@pytest.mark.pipeline  # a pipeline end to end: make test-pipeline
def test_cross_model_row_distils_the_small_student_from_the_large_teacher(tmp_path):
    """--student-from: students start from the other task's base and learn from this task's
    teacher (both trained here outside the pipeline, tiny, so the pipeline skips them)."""
    from nca_interp.checkpoint import read_run_config
    from train import sft

    runs, figs = tmp_path / "runs", tmp_path / "figs"
    common = ["--runs", str(runs), "--figures", str(figs), "--teacher-steps", "2"]
    tiny = ["--steps", "2", "--threads", "1", "--eval-every", "100", "--eval-levels", "4",
            "--save-every", "2", "--batch", "8", "--d-model", "32"]
    sft.main(["--out", str(runs / "sokoban_xl_base"), *reproduce.presets()["sokoban_xl"].sft_args,
              *tiny, "--n-layers", "2"])
    with pytest.raises(Exception, match="--teacher-only first"):
        reproduce.main(["--task", "sokoban_xl", "--student-from", "sokoban", *common])
    sft.main(["--out", str(runs / "sokoban_base"), *reproduce.presets()["sokoban"].sft_args, *tiny,
              "--n-layers", "1"])
    reproduce.main(["--task", "sokoban_xl", "--student-from", "sokoban", "--methods", "opd",
                    "--analyses", "false", "--seeds", "0", "--distill-steps", "2",
                    "--save-every", "2", "--batch", "4", "--n-levels", "4", "--jobs", "1",
                    "--threads", "1", *common])
    run = read_run_config(runs / "sokoban_xl_opd_s0")
    assert run["student"] == str(runs / "sokoban_base")
    assert run["teacher"] == str(runs / "sokoban_xl_base")
    assert read_run_config(runs / "sokoban_xl_base")["n_layers"] == 2  # the larger model
    assert "8" == reproduce.presets()["sokoban_xl"].sft_args[
        reproduce.presets()["sokoban_xl"].sft_args.index("--n-layers") + 1]


def test_remap_teacher_starts_from_the_plain_teacher(tmp_path):
    """sokoban_remap's teacher is fine-tuned from sokoban's (train.sft --init): refused with
    the command to run when that teacher is missing, started from its weights otherwise."""
    from nca_interp.checkpoint import read_run_config
    from nca_interp.errors import RunError
    from train import sft

    runs, figs = tmp_path / "runs", tmp_path / "figs"
    argv = ["--task", "sokoban_remap", "--teacher-only", "true", "--teacher-steps", "1",
            "--n-levels", "4", "--threads", "1", "--runs", str(runs), "--figures", str(figs)]
    with pytest.raises(RunError, match="--task sokoban first"):
        reproduce.main(argv)
    assert not (runs / "sokoban_remap_base").exists()
    sft.main(["--out", str(runs / "sokoban_base"), "--steps", "1", "--threads", "1",
              "--eval-levels", "4", "--batch", "8", "--d-model", "32", "--n-layers", "1"])
    reproduce.main(argv)
    run = read_run_config(runs / "sokoban_remap_base")
    assert run["init"] == str(runs / "sokoban_base") and run["task"]["remap"] == "LRUD"
    assert (run["d_model"], run["n_layers"]) == (32, 1)  # the init's architecture, recorded


def test_a_fetched_model_with_sft_args_is_the_teacher_s_start(tmp_path):
    """A preset naming a registry model and sft_args (sokoban_smollm2) fine-tunes its teacher
    from the fetched weights into RUNS/<task>_base; without sft_args the weights are the
    teacher as they are (the facts presets)."""
    import dataclasses
    import unittest.mock

    from nca_interp.checkpoint import read_run_config
    from train import sft

    fetched = tmp_path / "registry_model"
    sft.main(["--out", str(fetched), "--steps", "1", "--threads", "1", "--eval-levels", "4",
              "--batch", "8", "--d-model", "32", "--n-layers", "1"])
    preset = dataclasses.replace(reproduce.presets()["sokoban_smollm2"],
                                 sft_args=("--task", "sokoban", "--batch", "8",
                                           "--eval-levels", "4"))
    assert not preset.fetched_as_is and reproduce.presets()["facts"].fetched_as_is
    runs, figs = tmp_path / "runs", tmp_path / "figs"
    every = {**reproduce.presets(), "sokoban_smollm2": preset}
    with unittest.mock.patch.object(reproduce, "presets", lambda: every), \
            unittest.mock.patch("nca_interp.fetch.fetch", lambda name: fetched):
        reproduce.main(["--task", "sokoban_smollm2", "--teacher-only", "true",
                        "--teacher-steps", "1", "--n-levels", "4", "--threads", "1",
                        "--runs", str(runs), "--figures", str(figs)])
    run = read_run_config(runs / "sokoban_smollm2_base")
    assert run["init"] == str(fetched) and run["kind"] == "sft" and run["precision"] == "fp32"


# the file stems of the analyses the pipeline's `analyses` step runs (from the registry)
ANALYSIS_FILES = reproduce.planned()


def test_every_published_setting_is_what_its_manifest_ran():
    """`SETTINGS` (read by the summary and the sweep) names the command that produced each
    committed figures/<setting>/: the manifest's pipeline command asks for the same config,
    less the flags that do not change results (threads, jobs, PNG export, --keep; flag order
    aside), and a setting said to be analysed has analysis files (one run with --analyses false
    has none)."""
    import json
    import shlex
    from pathlib import Path

    from nca_interp.cli import parse_config, same_config
    from nca_interp.paper.reproduce import ReproduceConfig, presets, settings

    seen = 0
    for name, setting in settings().items():
        assert setting.preset in presets(), name
        manifest = Path("figures") / name / "manifest.json"
        if not manifest.exists():
            continue
        files = json.loads(manifest.read_text())["files"]
        ran = {(f["command"], Path(p).name.startswith(ANALYSIS_FILES),
                Path(p).name.startswith("grad_align"))
               for p, f in files.items() if f["command"].startswith("python -m "
                                                                    "nca_interp.paper.reproduce")}
        assert ran, name
        cfg = parse_config(ReproduceConfig, shlex.split(setting.command(name))[3:])
        for command, analysis_file, grad_file in ran:
            # --keep says which steps' outputs were kept (students retrained and shown
            # identical) and --publish only where a run's files may go; like threads and jobs
            # they do not change what the config asks for. The gradient flags are read by
            # grad_align alone, and --analyses (whether analyses follow) does not change a
            # file the context return made: a sweep row's evaluation, analysed later, is the
            # setting's own
            ignore = ("threads", "png", "jobs", "keep", "publish",
                      *(() if grad_file else ("grad_batch", "grad_every", "grad_seeds")),
                      *(() if analysis_file else ("analyses",)))
            assert same_config(cfg, shlex.split(command)[3:], ignore=ignore), \
                f"{name}: SETTINGS says {setting.command(name)!r}, the manifest ran {command!r}"
        analysed = any(Path(p).name.startswith(ANALYSIS_FILES) for p in files)
        assert analysed == setting.analyses, \
            f"{name}: SETTINGS says analyses={setting.analyses}, figures/{name} " \
            f"{'has' if analysed else 'has no'} analysis files"
        seen += 1
    assert seen >= 8


def test_estimator_flags_reach_distillation_unchanged():
    """A setting's --kl flags are train.distill's own (same checks) and only non-defaults are
    passed on, so the commands of settings without them do not change."""
    from nca_interp.cli import parse_config
    from nca_interp.paper.reproduce import ReproduceConfig, estimator_args
    from train.distill import DistillConfig

    assert estimator_args(ReproduceConfig()) == []
    cfg = parse_config(ReproduceConfig, ["--kl", "topk", "--kl-k", "8", "--kl-support", "q",
                                         "--nca-kl", "full"])
    args = estimator_args(cfg)
    assert args == ["--kl", "topk", "--kl-k", "8", "--kl-support", "q", "--nca-kl", "full"]
    back = parse_config(DistillConfig, ["--student", "x", "--out", "y", *args])
    assert (back.kl, back.kl_k, back.kl_support, back.nca_kl) == ("topk", 8, "q", "full")
    from nca_interp.errors import UsageError

    with pytest.raises(UsageError, match="--kl-support must be one of p, q"):
        parse_config(ReproduceConfig, ["--kl-support", "r"])


def test_gradients_are_aligned_on_the_first_seeds_at_every_kth_checkpoint(tmp_path):
    """--grad-seeds picks how many runs of each method are aligned (the preset's by default,
    never more than the seeds trained); --grad-every thins the checkpoints counting back from
    the final one, which is always aligned."""
    from nca_interp.cli import parse_config
    from nca_interp.errors import UsageError

    assert reproduce.aligned_runs([0, 1, 2, 3, 4], 3) == [
        ("opd", 0, ""), ("nca", 0, ""), ("opd", 1, "_s1"), ("opd", 2, "_s2"),
        ("nca", 1, "_s1"), ("nca", 2, "_s2")]
    assert reproduce.aligned_runs([3, 4], 1) == [("opd", 3, ""), ("nca", 3, "")]
    run = tmp_path / "run"
    for step in range(50, 501, 50):
        (run / "checkpoints" / f"step_{step:06d}").mkdir(parents=True)
    names = [p.rsplit("_", 1)[1] for p in reproduce.grad_checkpoints(run, 2)]
    assert names == [f"{s:06d}" for s in (100, 200, 300, 400, 500)]
    assert len(reproduce.grad_checkpoints(run, 1)) == 10
    assert [p[-6:] for p in reproduce.grad_checkpoints(run, 4)] == ["000100", "000300",
                                                                    "000500"]

    def applied(*argv):
        cfg = parse_config(reproduce.ReproduceConfig, list(argv))
        reproduce.apply_preset(cfg)
        return cfg.grad_seeds

    assert applied("--task", "sokoban") == 1  # the preset's
    assert applied("--task", "sokoban_remap", "--seeds", "0,1") == 2  # capped by the seeds
    assert applied("--task", "sokoban", "--seeds", "0,1,2,3", "--grad-seeds", "3") == 3
    with pytest.raises(UsageError, match="--grad-seeds 3: only 2 seeds"):
        applied("--task", "sokoban", "--seeds", "0,1", "--grad-seeds", "3")
    with pytest.raises(UsageError, match="grad-every"):
        applied("--grad-every", "0")


def test_a_killed_and_resumed_run_is_timed_without_its_pause():
    """Training time read from a run's step records leaves out the time it was not running (a
    kill, then a resume hours later) but keeps slow steps such as in-run evaluations."""
    steps = [2.0] * 50 + [8.0] + [2.0] * 49  # one evaluation step
    times = list(np.cumsum([0.0] + steps))
    seconds, pauses = reproduce.running_seconds(times)
    assert seconds == pytest.approx(sum(steps)) and pauses == []
    resumed = times[:30] + [t + 3600.0 for t in times[30:]]
    seconds, pauses = reproduce.running_seconds(resumed)
    assert seconds == pytest.approx(sum(steps) - steps[29] + 2.0)
    assert pauses == [pytest.approx(3602.0)]
    assert reproduce.running_seconds([5.0]) == (0.0, [])
    slow = [70.0 * i for i in range(20)]  # a large model: every step over the pause bound
    assert reproduce.running_seconds(slow) == (pytest.approx(70.0 * 19), [])


def test_a_retrained_run_replaces_its_recorded_training(tmp_path):
    """A run retrained outside the pipeline (its checkpoints lost, then rebuilt) gets a new
    manifest entry, with the commit its run config recorded; one recorded after its checkpoint
    was written is kept."""
    run = tmp_path / "run"
    final = run / "checkpoints" / "step_000004"
    final.mkdir(parents=True)
    (final / "nca_checkpoint.json").write_text("{}")
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"step": i, "step_s": 1.0, "time": 100.0 + 2 * i}) + "\n"
        for i in range(1, 5)))
    (run / "run_config.json").write_text(json.dumps({"git_commit": "c0ffee"}))
    manifest = reproduce.Manifest(tmp_path / "manifest.json", reproduce.ReproduceConfig())
    old = {"command": "python -m train.distill --seed 0", "commit": "abc", "seconds": 999.0,
           "date": "2020-01-01 00:00:00"}
    manifest.data["files"][str(final)] = dict(old)
    reproduce.record_training_time(manifest, run, final, ["--seed", "0"], "train.distill")
    entry = manifest.data["files"][str(final)]
    assert entry["seconds"] == 7.0 and entry["date"] != old["date"]
    assert entry["commit"] == "c0ffee"  # the commit that trained it, not today's
    kept = dict(entry, seconds=123.0)
    manifest.data["files"][str(final)] = kept
    reproduce.record_training_time(manifest, run, final, ["--seed", "0"], "train.distill")
    assert manifest.data["files"][str(final)]["seconds"] == 123.0


def test_pipeline_time_adds_up_over_resumes_but_not_over_a_full_rebuild(tmp_path):
    """A resumed pipeline's wall time adds to what earlier invocations spent on the outputs it
    kept; one that rebuilt all of the setting's own outputs (only the shared teacher's stages up
    to date) reports its own time, and an earlier invocation's note on how it ran is dropped."""
    import json
    import time

    from nca_interp.paper.reproduce import Manifest, ReproduceConfig, finish

    def run(skipped, ran=1, before=600.0, resumed=(), until=None):
        path = tmp_path / "manifest.json"
        path.write_text(json.dumps({"files": {}, "note": "students trained outside",
                                    **({"pipeline_seconds": before,
                                        "pipeline_until": until or time.time() + 60}
                                       if before else {})}))
        m = Manifest(path, ReproduceConfig(runs=str(tmp_path / "runs")))
        m.ran, m.skipped, m.resumed = ran, skipped, list(resumed)
        finish(m, time.time() - 30.0, m.cfg)
        return json.loads(path.read_text())

    rebuilt = run(["teacher", "teacher evaluation (plan)"])
    assert rebuilt["pipeline_seconds"] == pytest.approx(30.0, abs=2)
    assert rebuilt["note"] == ("all stages but the teacher's, up to date before it (teacher, "
                               "teacher evaluation (plan); their times are in manifest.json)")
    assert "note" not in run([])  # made everything: "all stages"
    resumed = run(["teacher", "opd seed 0"])
    assert resumed["pipeline_seconds"] == pytest.approx(630.0, abs=2)
    assert resumed["note"] == "students trained outside"
    assert run([], ran=0)["pipeline_seconds"] == 600.0  # render-only
    # a resumed training stage means earlier work too, as a student skipped does
    assert run(["teacher"], resumed=["nca seed 0"])["pipeline_seconds"] == pytest.approx(
        630.0, abs=2)
    # the first recorded invocation of a setting whose students were partly made before it:
    # its own time, and a note naming what it did not make (never "all stages")
    first = run(["teacher", "opd seed 0"], before=None, resumed=["nca seed 0"])
    assert first["pipeline_seconds"] == pytest.approx(30.0, abs=2)
    assert first["note"] == ("this invocation only; made before it: opd seed 0; resumed from a "
                             "checkpoint made before it: nca seed 0; each run's own training "
                             "time is in manifest.json")
    # an earlier total from before the students on disk were trained (another machine's, or
    # a teacher's) is not theirs: this invocation's own time, with the note, not the sum
    step = tmp_path / "runs" / "sokoban_opd_s0" / "checkpoints" / "step_000025"
    step.mkdir(parents=True)
    (step / "nca_checkpoint.json").write_text("{}")
    stale = run(["teacher", "context-return evaluation"], until=time.time() - 3600)
    assert stale["pipeline_seconds"] == pytest.approx(30.0, abs=2)
    assert stale["note"].startswith("this invocation only; made before it: context-return")
    assert run(["teacher", "opd seed 0"])["pipeline_seconds"] == pytest.approx(
        630.0, abs=2)  # recorded once the students existed: their pipeline, resumed
    # legacy manifests without pipeline_until: not summed either
    legacy = tmp_path / "manifest.json"
    legacy.write_text(json.dumps({"files": {}, "pipeline_seconds": 600.0}))
    m = Manifest(legacy, ReproduceConfig(runs=str(tmp_path / "runs")))
    m.ran, m.skipped = 1, ["teacher", "opd seed 0"]
    finish(m, time.time() - 30.0, m.cfg)
    assert json.loads(legacy.read_text())["pipeline_seconds"] == pytest.approx(30.0, abs=2)
    # a stage whose output is up to date is counted as skipped, and not run
    from nca_interp.paper.reproduce import stage

    out = tmp_path / "x.json"
    out.write_text("{}")
    m = Manifest(tmp_path / "m2.json", ReproduceConfig())
    stage("layer_sim", m, [out], lambda cfg: pytest.fail("ran"), m.cfg, positional=None)
    assert m.skipped == ["layer_sim"] and m.ran == 0


def test_a_resumed_training_stage_is_timed_over_the_whole_run(tmp_path, monkeypatch):
    """A run the pipeline resumes (a checkpoint of an earlier launch on disk) is recorded with
    the whole run's time from its step records, not just the steps after the resume; a run
    started afresh with the launch's own wall time."""
    import subprocess

    class Done:  # train.distill finished at once, successfully
        returncode = 0

        def __init__(self, *a, **k):
            pass

        def poll(self):
            return 0

    monkeypatch.setattr(reproduce, "git_commit", lambda: "c0ffee")  # it runs git itself
    monkeypatch.setattr(subprocess, "Popen", Done)
    old, new = tmp_path / "old", tmp_path / "new"
    (old / "checkpoints" / "step_000002").mkdir(parents=True)
    (old / "checkpoints" / "step_000002" / "nca_checkpoint.json").write_text("{}")
    (old / "metrics.jsonl").write_text("".join(  # 2 steps, killed for an hour, 2 more
        json.dumps({"step": i, "step_s": 5.0, "time": t}) + "\n"
        for i, t in enumerate([100.0, 105.0, 3705.0, 3710.0], start=1)))
    manifest = reproduce.Manifest(tmp_path / "manifest.json", reproduce.ReproduceConfig())
    pending = [(f"opd seed {i}", run / "checkpoints" / "step_000004", run, ["--seed", str(i)])
               for i, run in enumerate((old, new))]
    reproduce.run_parallel(pending, 2, manifest)
    resumed = manifest.data["files"][str(old / "checkpoints" / "step_000004")]
    assert resumed["seconds"] == 20.0  # 5 + 5 + one median step for the pause + 5
    assert "resumed: the whole run" in resumed["seconds_from"]
    fresh = manifest.data["files"][str(new / "checkpoints" / "step_000004")]
    assert fresh["seconds"] < 10.0 and "seconds_from" not in fresh
    assert manifest.resumed == ["opd seed 0"] and manifest.ran == 2


def test_figures_an_earlier_run_drew_are_removed_with_their_data(tmp_path, monkeypatch):
    """A figure the pipeline drew before whose JSON no longer asks for it (a retrained teacher
    with no harm case has no patching panels) is deleted with its manifest entry; a figure drawn
    now keeps both formats, and a file another command made is left alone."""
    monkeypatch.chdir(tmp_path)
    figs = Path("figures") / "x"
    figs.mkdir(parents=True)
    manifest = reproduce.Manifest(figs / "manifest.json", reproduce.ReproduceConfig())
    for name in ("patching_x_base_heads.html", "patching_x_base_heads.png", "layer_sim.html",
                 "layer_sim.png", "sizing.html"):
        (figs / name).write_text("old")
        command = "size_control" if name == "sizing.html" else "reproduce --task x"
        manifest.record([str(figs / name)], f"python -m nca_interp.paper.{command}".split(), 0.0)
    gone = reproduce.prune_figures(figs, [str(figs / "layer_sim.html")], manifest)
    assert sorted(gone) == [str(figs / "patching_x_base_heads.html"),
                            str(figs / "patching_x_base_heads.png")]
    assert sorted(p.name for p in figs.iterdir()) == ["layer_sim.html", "layer_sim.png",
                                                      "manifest.json", "sizing.html"]
    assert sorted(manifest.data["files"]) == sorted(str(figs / n) for n in (
        "layer_sim.html", "layer_sim.png", "sizing.html"))


def test_a_disk_without_room_for_every_student_is_refused_before_the_first(tmp_path,
                                                                           monkeypatch):
    """The pipeline adds up what all its pending students keep (and what `jobs` of them hold
    at a save) and refuses before training any: room for one student is not room for four."""
    from collections import namedtuple

    from nca_interp.errors import RunError
    from train import common, sft

    runs, figs = tmp_path / "runs", tmp_path / "figs"
    sft.main(["--out", str(runs / "sokoban_base"), *reproduce.presets()["sokoban"].sft_args,
              "--steps", "2", "--threads", "1", "--eval-every", "100", "--eval-levels", "4",
              "--save-every", "2", "--batch", "8", "--d-model", "32", "--n-layers", "1"])
    w = common.weight_bytes(runs / "sokoban_base")
    kept, brief = common.disk_needed(w, 2, 2)
    assert (kept, brief) == (4 * w, 3 * w)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda p: usage(10**12, 0, 2 * kept + brief))  # two students' room
    monkeypatch.setattr(analysis, "OUT_BYTES", 0)  # the teacher's evaluation writes a report
    with pytest.raises(RunError, match="distilling 4 students of"):
        reproduce.main(["--task", "sokoban", "--analyses", "false", "--seeds", "0,1",
                        "--teacher-steps", "2", "--distill-steps", "2", "--save-every", "2",
                        "--batch", "4", "--n-levels", "4", "--jobs", "1", "--threads", "1",
                        "--runs", str(runs), "--figures", str(figs)])
    assert sorted(p.name for p in runs.iterdir()) == ["sokoban_base"]  # no student begun


def _planned(tmp_path, *argv):
    from nca_interp.cli import parse_config

    cfg = parse_config(reproduce.ReproduceConfig, [
        "--task", "sokoban", "--seeds", "0,1,2", "--grad-seeds", "2", "--runs",
        str(tmp_path / "runs"), "--figures", str(tmp_path / "figs"), *argv])
    p = reproduce.plan(cfg, list(argv))
    p.base = p.student_init = p.teacher_final = tmp_path / "teacher"
    return p


def test_keep_trains_only_the_students_the_steps_left_to_run_read(tmp_path, monkeypatch):
    """--keep may name one analysis; students no step left to run reads are not trained (a
    grad_align or patching rerun after a machine lost its runs trains two or four, not all),
    and a kept analysis's stage is not run."""
    launched, staged = [], []
    monkeypatch.setattr(reproduce, "run_parallel",
                        lambda pending, jobs, m: launched.extend(n for n, *_ in pending))
    monkeypatch.setattr(reproduce, "verify_folder", lambda c: c)
    monkeypatch.setattr(reproduce, "check_disk", lambda *a: None)
    monkeypatch.setattr(reproduce, "weight_bytes", lambda *a: 0)
    monkeypatch.setattr(reproduce, "stage", lambda name, *a, **k: staged.append(name))

    def trained(*keep):
        launched.clear()
        p = _planned(tmp_path, *(["--keep", ",".join(keep)] if keep else []))
        reproduce.train_students(p)
        return p, sorted(launched)

    every = sorted(f"{m} seed {s}" for m in ("opd", "nca") for s in (0, 1, 2))
    assert trained()[1] == every
    assert trained("context_return", "over_training", "layer_sim")[1] == every  # param_delta
    _, grads = trained("context_return", "over_training", "layer_sim", "param_delta")
    assert grads == ["nca seed 0", "nca seed 1", "opd seed 0", "opd seed 1"]
    _, patch = trained("context_return", "over_training", "layer_sim", "param_delta",
                       "grad_align")
    assert patch == ["nca seed 0", "opd seed 0"]  # patching and the lens: the first seed's
    assert trained("context_return", "over_training", "analyses")[1] == []
    assert trained("context_return", "analyses")[1] == ["nca seed 0", "opd seed 0"]  # trajectory
    p, _ = trained("context_return", "over_training", "layer_sim", "param_delta", "grad_align")
    staged.clear()
    reproduce.analyses(p)
    assert staged == ["patching", "lens"]
    p, _ = trained("context_return", "over_training", "patching", "lens")
    staged.clear()
    reproduce.analyses(p)
    assert staged == ["layer_sim at response positions", "layer_sim at generating positions",
                      "layer_sim at prompt positions", "grad_align opd seed 0",
                      "grad_align nca seed 0", "grad_align opd seed 1", "grad_align nca seed 1",
                      "param_delta"]


def test_patching_scope_of_a_preset_overrides_the_levels_and_adds_task_options(tmp_path):
    """A preset's patching_kw may widen the question pool (its task options come after the
    pipeline's) and set its own number of levels; an option patching lacks is refused before
    any work."""
    import dataclasses

    from nca_interp.errors import UsageError

    p = _planned(tmp_path, "--task-options", "kb=1")
    assert reproduce.patching_fields(p) == {"n_levels": p.cfg.n_levels,
                                            **dict(p.preset.patching_kw),
                                            "task_options": ["kb=1"]}
    p.preset = dataclasses.replace(p.preset, patching_kw=(
        ("kind", "help"), ("n_levels", 192), ("task_options", ["n_entities=16"])))
    assert reproduce.patching_fields(p) == {"n_levels": 192, "kind": "help",
                                            "task_options": ["kb=1", "n_entities=16"]}
    with pytest.raises(UsageError, match="--keep layer_sim: --analyses false"):
        _planned(tmp_path, "--analyses", "false", "--keep", "over_training,layer_sim")
    bad = dataclasses.replace(reproduce.presets()["sokoban"], patching_kw=(("cases", 3),))
    presets = {**reproduce.presets(), "sokoban": bad}
    import unittest.mock

    with unittest.mock.patch.object(reproduce, "presets", lambda: presets), \
            pytest.raises(UsageError, match="patching_kw names cases"):
        _planned(tmp_path)
