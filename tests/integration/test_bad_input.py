"""Every command refuses bad input with a one-line message, before any work, and leaves the
inputs and the run directory as they were. Each test names the class of bad input it covers."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from nca_interp import evaluate, grad_align, layer_sim, param_delta, patching
from nca_interp.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from nca_interp.cli import entry, write_json
from nca_interp.fsio import STAGE_MARK
from tests.conftest import tiny
from train import distill, sft

TASK = {"name": "sokoban", "fmt": "compact", "dim_room": [6, 6], "num_boxes": 1}


def digest(folder: Path) -> dict[str, str]:
    """sha256 of every file under `folder` (what 'unchanged' means)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(main, argv, capsys) -> str:
    """Run a command the way `python -m` does; it must exit 2 with one `error:` line."""
    rc = entry(main, argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err  # (progress bars may precede it)
    return lines[0]


@pytest.fixture
def base(tok, tmp_path):
    return save_checkpoint(tmp_path / "base", tiny(tok), tok, {"task": TASK})


def foreign(tok, folder: Path, model=None) -> Path:
    """A plain save_pretrained folder (no manifest), as a user brings it."""
    (model or tiny(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


# --- checkpoints -------------------------------------------------------------------------

def test_missing_tensor_is_refused_not_reinitialised(tok, tmp_path, capsys):
    folder = foreign(tok, tmp_path / "f")
    f = folder / "model.safetensors"
    t = load_file(f)
    del t["model.layers.1.mlp.up_proj.weight"]
    save_file(t, f, metadata={"format": "pt"})
    before = digest(folder)
    err = refused(evaluate.main, [str(folder), "--task", "sokoban", "--n-levels", "4",
                                  "--threads", "1"], capsys)
    assert "up_proj" in err and "re-initialised" in err
    err = refused(layer_sim.main, [str(folder), "--task", "sokoban", "--n-levels", "2",
                                   "--out", str(tmp_path / "ls")], capsys)
    assert "up_proj" in err and not (tmp_path / "ls.json").exists()
    assert digest(folder) == before


def test_unexpected_and_misshapen_tensors(tok, tmp_path):
    folder = foreign(tok, tmp_path / "f")
    f = folder / "model.safetensors"
    t = load_file(f)
    save_file({**t, "model.extra.weight": torch.zeros(3)}, f, metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="unexpected keys"):
        load_checkpoint(folder)
    t["model.layers.0.self_attn.q_proj.weight"] = torch.zeros(5, 5)
    save_file(t, f, metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="do not match config.json"):
        load_checkpoint(folder)


def test_non_finite_weights_refused(tok, tmp_path, capsys):
    model = tiny(tok)
    with torch.no_grad():
        model.model.layers[0].self_attn.k_proj.weight[0, 0] = float("nan")
    folder = foreign(tok, tmp_path / "nan", model)
    err = refused(evaluate.main, [str(folder), "--task", "sokoban", "--n-levels", "4", "--out",
                                  str(tmp_path / "r.json")], capsys)
    assert "k_proj" in err and "NaN" in err and not (tmp_path / "r.json").exists()


def test_unsupported_architecture_refused(tok, tmp_path, capsys):
    """A causal LM TransformerLens 4's bridge has no adapter for (XLNet): one line from every
    command, naming the user's folder (GPT-2, once refused here, is analysed now:
    tests/integration/test_architectures.py)."""
    from transformers import XLNetConfig, XLNetLMHeadModel

    xlnet = XLNetLMHeadModel(XLNetConfig(vocab_size=len(tok), d_model=32, n_layer=1, n_head=2,
                                         d_inner=64))
    folder = foreign(tok, tmp_path / "xlnet", xlnet)
    for main, argv in ((evaluate.main, [str(folder), "--task", "sokoban", "--n-levels", "2"]),
                       (layer_sim.main, [str(folder), "--task", "sokoban", "--n-levels", "2",
                                         "--out", str(tmp_path / "x")]),
                       (grad_align.main, [str(folder), "--teacher", str(folder), "--task",
                                          "sokoban", "--batch", "8", "--out",
                                          str(tmp_path / "g")]),
                       (distill.main, ["--student", str(folder), "--task", "sokoban",
                                       "--out", str(tmp_path / "d")])):
        err = refused(main, argv, capsys)
        assert str(folder) in err and "XLNetLMHeadModel" in err and "not supported" in err
    assert not (tmp_path / "d").exists()


def test_tokenizer_that_does_not_fit_the_embedding(tok, tmp_path):
    folder = foreign(tok, tmp_path / "f")
    bigger = tok.__class__.from_pretrained(folder)
    bigger.add_tokens([f"<x{i}>" for i in range(5)])
    bigger.save_pretrained(folder)
    with pytest.raises(CheckpointError, match="embedding rows"):
        load_checkpoint(folder)


def test_permuted_vocabulary_teacher_refused_by_every_analysis(tok, base, tmp_path, capsys):
    from nca_interp.tokenizer import CHARS, build_char_tokenizer

    other = build_char_tokenizer(CHARS[::-1])
    teacher = save_checkpoint(tmp_path / "t", tiny(other), other, {"task": TASK})
    err = refused(grad_align.main, [str(base), "--teacher", str(teacher), "--batch", "8",
                                    "--out", str(tmp_path / "g")], capsys)
    assert "different tokenizers" in err and not (tmp_path / "g.json").exists()
    err = refused(layer_sim.main, [str(base), str(teacher), "--n-levels", "2",
                                   "--out", str(tmp_path / "l")], capsys)
    assert "different tokenizers" in err
    err = refused(param_delta.main, [str(teacher), "--init", str(base),
                                     "--out", str(tmp_path / "p")], capsys)
    assert "different tokenizers" in err


def test_corrupt_and_missing_checkpoints(base, tmp_path, capsys):
    err = refused(evaluate.main, [str(tmp_path / "nothing")], capsys)
    assert "no checkpoint at" in err
    f = base / "model.safetensors"
    f.write_bytes(f.read_bytes()[:100])
    err = refused(layer_sim.main, [str(base), "--out", str(tmp_path / "x")], capsys)
    assert "truncated or corrupt" in err


# --- flags ----------------------------------------------------------------------------

@pytest.mark.parametrize("flags,needle", [
    (["--steps", "0"], "--steps must be between 1 and"),
    (["--beta", "-5"], "--beta must be between 0 and 1000"),
    (["--clip", "-1"], "--clip must be > 0"), (["--temperature", "-1"], "--temperature"),
    (["--lr", "inf"], "--lr must be a finite number"), (["--lr", "nan"], "--lr"),
    (["--batch", "0"], "--batch must be between 1 and"), (["--save-every", "0"], "--save-every"),
    (["--micro-batch", "-1"], "--micro-batch"), (["--method", "kl"], "--method must be one of"),
    (["--context", "bogus"], "not a context kind"),
    (["--beta", "1e308"], "--beta must be between 0 and 1000"),  # the fourth probe's NaN
    (["--steps", "10", "--warmup", "1000"], "--warmup 1000 is longer than --steps 10: the "
     "learning rate reaches only 1% of --lr"),  # SILENT in #71's third probe
])
def test_distill_flags_refused_before_anything_is_written(base, tmp_path, capsys, flags,
                                                          needle):
    before = digest(base)
    err = refused(distill.main, ["--student", str(base), "--out", str(tmp_path / "run"),
                                 *flags], capsys)
    assert needle in err
    assert not (tmp_path / "run").exists() and digest(base) == before


@pytest.mark.parametrize("main,flags,needle", [
    (evaluate.main, ["--n-levels", "0"], "--n-levels must be between 1 and"),
    (evaluate.main, ["--context", "bogus"], "not a context kind"),
    (layer_sim.main, ["--at", "middle"], "--at must be one of"),
    (layer_sim.main, ["--responses", "mine"], "--responses must be one of"),
    (grad_align.main, ["--batch", "3"], "even number"),
    (param_delta.main, ["--rows", "some"], "--rows must be one of"),
    (sft.main, ["--lr", "inf"], "--lr must be a finite number"),
    (sft.main, ["--p-detour", "2"], "between 0 and 1"),
    (sft.main, ["--steps", "5", "--warmup", "50"], "give a --warmup of at most 5"),
    # the fourth probe's: a ZeroDivisionError, a failed 4 TB allocation, minutes of building
    (sft.main, ["--d-model", "3"], "--d-model 3 is not a multiple of --n-heads 4"),
    (sft.main, ["--lora-rank", "4"], "no --init names one"),
    (sft.main, ["--d-model", "36"], "9 dimensions a head, which must be even"),
    (sft.main, ["--d-model", "1000000"], "more than the"),
    (sft.main, ["--n-layers", "100000"], "choose a smaller model"),
    (evaluate.main, ["--temperature", "1e308"], "--temperature must be 0 (greedy) or between"),
    (patching.main, ["--method", "exact", "--top-k", "5"], "--top-k sizes --method attribution"),
])
def test_analysis_flags_refused(tmp_path, capsys, main, flags, needle):
    argv = [*flags, "--out", str(tmp_path / "o")]
    assert needle in refused(main, argv, capsys)
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.json").exists()


def test_unknown_task_option_names_the_key(base, capsys):
    err = refused(evaluate.main, [str(base), "--task", "sysprompt", "--task-options",
                                  "kbb=3"], capsys)
    assert "'kbb=3'" in err and "KEY one of" in err


def test_missing_system_prompt_file_fails_before_any_pass(tok, tmp_path, capsys, monkeypatch):
    fix = Path(__file__).resolve().parents[1] / "fixtures" / "opcd"
    folder = save_checkpoint(tmp_path / "m", tiny(tok), tok)
    calls = []
    monkeypatch.setattr(evaluate, "play_levels", lambda *a, **k: calls.append(1))
    opts = (f"train={fix / 'medmcqa_train.jsonl'},test={fix / 'medmcqa_test.jsonl'},"
            f"system_prompt={tmp_path / 'missing.txt'}")
    err = refused(evaluate.main, [str(folder), "--task", "opcd", "--task-options", opts], capsys)
    assert "missing.txt" in err and not calls


def test_unwritable_out_found_before_compute(base, tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    calls = []
    monkeypatch.setattr(layer_sim, "layer_similarity", lambda *a, **k: calls.append(1))
    err = refused(layer_sim.main, [str(base), "--out", str(blocker / "sub" / "ls")], capsys)
    assert "cannot write there" in err and not calls
    err = refused(distill.main, ["--student", str(base), "--out", str(blocker / "run")], capsys)
    assert "cannot write there" in err


# --- runs ---------------------------------------------------------------------------------

def args(base, out, *extra):
    return ["--student", str(base), "--out", str(out), "--batch", "4", "--steps", "2",
            "--save-every", "1", "--eval-every", "100", "--eval-levels", "4", "--threads", "1",
            *extra]


def test_exploding_lr_never_publishes_a_broken_state(base, tmp_path, capsys):
    err = refused(distill.main, args(base, tmp_path / "run", "--lr", "1e38"), capsys)
    assert "NaN" in err or "nan" in err or "inf" in err
    for folder in [tmp_path / "run", *(tmp_path / "run" / "checkpoints").glob("step_*")]:
        if (folder / "nca_checkpoint.json").exists():
            load_checkpoint(folder)  # whatever was published is finite and loads


def test_rerun_with_only_free_flags_changed_keeps_the_run(base, tmp_path):
    distill.main(args(base, tmp_path / "run"))
    before = digest(tmp_path / "run")
    distill.main(args(base, tmp_path / "run", "--threads", "2", "--eval-every", "50"))
    load_checkpoint(tmp_path / "run")  # the run root is not 'corrupt'
    assert digest(tmp_path / "run")["run_config.json"] == before["run_config.json"]


def test_failed_start_does_not_block_the_corrected_run(base, tmp_path, monkeypatch):
    def fail(*a, **k):
        raise ValueError("boom")

    monkeypatch.setattr(distill, "onpolicy_batch", fail)  # fails after the run dir exists
    with pytest.raises(ValueError, match="boom"):
        distill.main(args(base, tmp_path / "run", "--lr", "1e-3"))
    monkeypatch.undo()
    distill.main(args(base, tmp_path / "run", "--lr", "2e-3"))  # other args: allowed
    assert json.loads((tmp_path / "run" / "run_config.json").read_text())["lr"] == 2e-3


def test_a_refusal_before_training_removes_only_what_it_made(base, tmp_path, monkeypatch,
                                                            capsys):
    """The sixth probe's D6b: distill refused for want of disk left .lock and run_config.json
    in the folder the refusal had created (a folder that then looked like a started run)."""
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**12, 0, 1000))
    assert "GB free" in refused(distill.main, args(base, tmp_path / "new" / "r"), capsys)
    assert not (tmp_path / "new").exists()  # both folders it created are gone
    mine = tmp_path / "mine"  # the user's empty folder stays, empty
    mine.mkdir()
    refused(distill.main, args(base, mine), capsys)
    assert mine.is_dir() and not list(mine.iterdir())
    monkeypatch.undo()
    err = refused(distill.main, args(base, tmp_path / "fresh", "--resume-from",
                                     str(tmp_path / "x")), capsys)
    assert "--resume-from" in err and not (tmp_path / "fresh").exists()


def test_out_inside_another_run_or_checkpoint_is_refused(tok, base, tmp_path, capsys):
    """The sixth probe's D12: sft --out base/checkpoints/mine trained into another run's
    checkpoints/, which trajectory then refused."""
    other = save_checkpoint(tmp_path / "other", tiny(tok), tok, {"task": TASK})
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "run_config.json").write_text("{}")
    for out, what in ((run / "checkpoints" / "mine", "run"),
                      (other / "sub" / "deeper", "checkpoint folder")):
        err = refused(distill.main, args(base, out), capsys)
        assert f"lies inside the {what}" in err and "outside" in err, err
        assert not out.exists()
        err = refused(sft.main, ["--out", str(out), "--steps", "1", "--n-layers", "2",
                                 "--d-model", "32", "--threads", "1"], capsys)
        assert f"lies inside the {what}" in err, err


def test_one_writer_per_run_directory(base, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from nca_interp.runlock "
                               "import RunLock; RunLock(sys.argv[1]); print('held', flush=True);"
                               " time.sleep(60)", str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        err = refused(distill.main, args(base, run), capsys)
        assert f"pid {holder.pid}" in err and not (run / "metrics.jsonl").exists()
    finally:
        holder.kill()  # kill -9: the kernel drops its lock
        holder.wait()
    # the holder is gone: its lock is free, and leftovers of killed saves are cleared
    stage = run / "checkpoints" / ".nca-tmp-99999-k1ll3d00"  # a killed save's, with its marker
    (stage / "step_000001").mkdir(parents=True)
    (stage / STAGE_MARK).write_text(stage.name)
    distill.main(args(base, run))
    assert not list((run / "checkpoints").glob(".nca-tmp-*"))
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2]


# --- output -------------------------------------------------------------------------------

def test_json_never_holds_nan(tmp_path):
    write_json(tmp_path / "x.json", {"a": float("nan"), "b": [1.0, float("inf")], "c": 2})
    text = (tmp_path / "x.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"a": None, "b": [1.0, None], "c": 2}


def test_python_m_prints_one_line_and_no_traceback(tmp_path):
    env = {**os.environ, "NCA_INTERP_DEBUG": "0"}
    out = subprocess.run([sys.executable, "-m", "nca_interp.param_delta", str(tmp_path / "no"),
                          "--init", str(tmp_path / "no")], capture_output=True, text=True,
                         env=env)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().startswith("error: no checkpoint at")
    debug = subprocess.run([sys.executable, "-m", "nca_interp.param_delta",
                            str(tmp_path / "no"), "--init", str(tmp_path / "no"), "--debug"],
                           capture_output=True, text=True)
    assert "Traceback" in debug.stderr


ENTRY_POINTS = ["nca_interp.evaluate", "nca_interp.layer_sim", "nca_interp.grad_align",
                "nca_interp.param_delta", "nca_interp.patching", "nca_interp.trajectory",
                "train.sft", "train.distill", "nca_interp.paper.reproduce",
                "nca_interp.paper.report", "nca_interp.paper.sweep"]


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_every_entry_point_runs_as_python_m(module):
    """`python -m X --help` reaches X's parser: a module whose main block is lost does nothing
    and exits 0 silently (it happened to nca_interp.paper.reproduce once)."""
    out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                         text=True)
    assert out.returncode == 0 and "usage:" in out.stdout, module


def test_report_refuses_flag_combinations_it_would_ignore(tmp_path):
    """--png without --html, and --task all with --html, end in one line before any work,
    not in a run that silently drops a flag."""
    from nca_interp.errors import UsageError
    from nca_interp.paper import report

    with pytest.raises(UsageError, match="pass --html --png"):
        report.main(["--task", "sokoban", "--png", "--figures", str(tmp_path)])
    with pytest.raises(UsageError, match="rewrites pages only"):
        report.main(["--task", "all", "--html", "--figures", str(tmp_path)])
    # as a command: one line and status 2, as every entry point's bad input (probe 12 U-D)
    got = subprocess.run([sys.executable, "-m", "nca_interp.paper.report", "--task", "bogus",
                          "--figures", str(tmp_path)], capture_output=True, text=True)
    assert got.returncode == 2 and got.stderr.startswith("error: ")
    assert got.stderr.count("\n") == 1


def test_same_tokenizer_check_fast_path_and_full_comparison(tok, base, tmp_path):
    """Byte-identical tokenizer files pass without loading; files that differ only in a
    setting that does not change ids pass the full comparison; a changed vocabulary does not
    pass either way."""
    import copy
    import shutil

    from nca_interp.runs import check_same_tokenizers
    from nca_interp.tokenizer import CHARS, build_char_tokenizer

    model, _ = load_checkpoint(base)
    shutil.copytree(base, tmp_path / "same")
    check_same_tokenizers([base, tmp_path / "same"])
    longer = copy.deepcopy(tok)
    longer.model_max_length = 12345
    cosmetic = save_checkpoint(tmp_path / "cosmetic", model, longer, {"task": TASK})
    assert (cosmetic / "tokenizer_config.json").read_bytes() != \
        (base / "tokenizer_config.json").read_bytes()
    check_same_tokenizers([base, cosmetic])
    other = build_char_tokenizer(CHARS[::-1])
    permuted = save_checkpoint(tmp_path / "permuted", model, other, {"task": TASK})
    with pytest.raises(CheckpointError, match="different tokenizers"):
        check_same_tokenizers([base, permuted])


# --- the four refusals that used to slip through ------------------------------------------

def test_nan_weights_are_refused_by_param_delta(tok, base, tmp_path, capsys):
    """param_delta streams tensors without load_checkpoint; a NaN used to give exit 0."""
    broken = foreign(tok, tmp_path / "nan")
    f = broken / "model.safetensors"
    t = load_file(f)
    t["model.layers.0.self_attn.k_proj.weight"][1, 2] = float("nan")
    save_file(t, f, metadata={"format": "pt"})
    msg = refused(param_delta.main, [str(broken), "--init", str(base),
                                     "--out", str(tmp_path / "pd")], capsys)
    assert "model.layers.0.self_attn.k_proj.weight holds NaN or Inf" in msg
    assert not (tmp_path / "pd.json").exists()


def test_a_folder_without_tokenizer_files_is_refused_by_name(tok, tmp_path, capsys):
    """Without tokenizer files transformers used to load *some* tokenizer and layer_sim ran
    to the end on garbage; now every command refuses the folder."""
    folder = foreign(tok, tmp_path / "notok")
    for p in folder.glob("tokenizer*"):
        p.unlink()
    (folder / "special_tokens_map.json").unlink(missing_ok=True)
    for main, extra in ((evaluate.main, ["--task", "sokoban", "--n-levels", "2"]),
                        (layer_sim.main, ["--task", "sokoban", "--n-levels", "2", "--out",
                                          str(tmp_path / "ls")])):
        msg = refused(main, [str(folder), *extra], capsys)
        assert "holds no tokenizer files" in msg
    assert not (tmp_path / "ls.json").exists()


def test_a_corrupt_manifest_is_named(tok, base, capsys):
    (base / "nca_checkpoint.json").write_text('{"files": {"config.json": {"byt')
    msg = refused(evaluate.main, [str(base), "--n-levels", "2"], capsys)
    assert str(base / "nca_checkpoint.json") in msg and "is corrupt" in msg


def test_a_non_numeric_task_option_names_the_key(base, capsys):
    msg = refused(evaluate.main, [str(base), "--task", "frozenlake", "--task-options",
                                  "size=abc", "--n-levels", "2"], capsys)
    assert "size='abc'" in msg and "size takes an integer" in msg


@pytest.mark.parametrize("module,flags,kwargs,message", [
    ("grad_align", ["--batch", "6", "--micro-batch", "0"], {"micro_batch": 0},
     "--micro-batch must be >= 1"),
    ("grad_align", ["--batch", "5"], {"batch": 5}, "--batch must be an even number between 4 and"),
    ("layer_sim", ["--at", "middle"], {"at": "middle"}, "--at must be one of"),
    ("trajectory", ["x", "--every", "0"], {"runs": ["x"], "every": 0}, "--every must be >= 1"),
    ("evaluate", ["--temperature", "-1"], {"temperature": -1.0},
     r"--temperature must be 0 \(greedy\) or between"),
    ("patching", ["--kind", "hurt"], {"kind": "hurt"}, "--kind must be one of harm, help"),
    ("patching", ["--ks", "0"], {"ks": [0]}, "--ks must be >= 1"),
    ("param_delta", ["--rows", "some"], {"rows": "some"}, "--rows must be one of"),
])
def test_the_api_refuses_what_the_command_line_refuses(module, flags, kwargs, message):
    """One set of rules: `run(...)` refuses a value with the same message as `main`, before any
    work (checked where it once disagreed: grad_align's micro_batch 0 passed the CLI's shared
    >= 0 rule and then failed inside run with a different message)."""
    import importlib

    from nca_interp.errors import UsageError

    mod = importlib.import_module(f"nca_interp.{module}")
    with pytest.raises(UsageError, match=message):
        mod.main(flags)
    with pytest.raises(UsageError, match=message):
        mod.run(**kwargs)


def test_checkpoints_of_different_task_configs_refused(tok, tmp_path, capsys, monkeypatch):
    """Students of knowledge base 1 beside a teacher recorded with kb 0: without --task-options
    every question would be KB 0's (a silent wrong answer); with it, all are evaluated on KB 1."""
    from nca_interp.runs import task_for_checkpoints
    from nca_interp.tasks import make_task, task_record

    runs = [save_checkpoint(tmp_path / f"kb{kb}", tiny(tok), tok,
                            {"task": task_record(make_task("sysprompt", kb=kb))})
            for kb in (0, 1)]
    calls = []
    monkeypatch.setattr(evaluate, "play_levels", lambda *a, **k: calls.append(1))
    err = refused(evaluate.main, [*map(str, runs), "--context", "system"], capsys)
    assert "different task configs" in err and "kb: 0" in err and "--task-options" in err
    assert not calls
    assert task_for_checkpoints(list(map(str, runs)), options=["kb=1"]).config.kb == 1
    assert task_for_checkpoints([str(runs[1])]).config.kb == 1


def test_a_default_warmup_longer_than_the_run_is_a_note():
    """A short trial run keeps the default warm-up (refusing it would refuse every --steps 2
    check); the lower learning rate is said, not silent."""
    from train.common import check_warmup

    assert ("note: the default --warmup 100 is longer than --steps 4: the learning rate "
            "reaches only 4%") in check_warmup(sft.SFTConfig(steps=4))
    assert check_warmup(sft.SFTConfig(steps=400)) is None


@pytest.mark.parametrize("main,flags", [(evaluate.main, ["--control", "maybe"]),
                                        (layer_sim.main, ["--baselines", "flase"])])
def test_a_bool_flag_that_is_no_bool_is_refused(main, flags, capsys):
    """Anything but 1/true/yes/y/on read as False without a word (the fourth probe: --control on
    ran no control run)."""
    with pytest.raises(SystemExit) as e:
        main(flags)
    assert e.value.code == 2
    assert f"{flags[1]!r} is not true or false" in capsys.readouterr().err


def test_a_teacher_of_another_task_is_refused(base, tok, tmp_path, capsys):
    """A frozenlake teacher distilled into sokoban students without a word (SILENT in #71's
    fourth probe)."""
    fl = save_checkpoint(tmp_path / "fl", tiny(tok, seed=3), tok, {"task": {"name": "frozenlake"}})
    err = refused(distill.main, ["--student", str(base), "--teacher", str(fl), "--out",
                                 str(tmp_path / "run"), "--steps", "1"], capsys)
    assert "was trained on frozenlake, not on sokoban" in err
    assert not (tmp_path / "run").exists()


def test_the_budget_advice_names_an_option_the_task_takes():
    """evaluate told a sokoban user to raise max_new, which sokoban refuses (the fourth
    probe)."""
    from nca_interp.evaluate import budget_advice

    assert "max_new" not in budget_advice("sokoban") and "max_solution" in budget_advice("sokoban")
    assert "max_new=N" in budget_advice("jsonl")


def test_every_analysis_with_a_teacher_refuses_one_of_another_task(base, tok, tmp_path, capsys):
    """grad_align and trajectory measured against a frozenlake teacher for a sokoban run
    without a word (SILENT in #71's fifth probe), as distill once did."""
    from nca_interp import trajectory

    fl = save_checkpoint(tmp_path / "fl", tiny(tok, seed=3), tok, {"task": {"name": "frozenlake"}})
    err = refused(grad_align.main, [str(base), "--teacher", str(fl), "--batch", "16", "--out",
                                    str(tmp_path / "ga")], capsys)
    assert "was trained on frozenlake, not on sokoban" in err
    run = save_checkpoint(tmp_path / "run", tiny(tok, seed=4), tok,
                          {"task": TASK, "student": str(base), "kind": "distill"})
    save_checkpoint(run / "checkpoints" / "step_000001", tiny(tok, seed=4), tok,
                    {"task": TASK, "student": str(base)}, ({}, {"step": 1}))
    err = refused(trajectory.main, [str(run), "--teacher", str(fl), "--n-levels", "2",
                                    "--out", str(tmp_path / "tr")], capsys)
    assert "was trained on frozenlake, not on sokoban" in err
