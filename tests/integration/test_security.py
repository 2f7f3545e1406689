"""A checkpoint is data, never code; a name the package writes is never a planted link; a
write the OS refuses is one line naming the file. The cases of the fault probe of issue #71
(SECURITY, LOST, TRACEBACK and the unclear messages), each of which failed on the code before
its guard: the damage it asserts away (a victim file written, a marker of code run) happened."""

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from nca_interp import evaluate
from nca_interp.checkpoint import CheckpointError, save_checkpoint, verify_folder
from nca_interp.cli import check_writable, entry, interrupted_note
from nca_interp.errors import RunError, UsageError
from nca_interp.fsio import UnsafePathError, write_text
from nca_interp.runlock import RunLock
from tests.conftest import tiny
from train import distill

ROOT = Path(__file__).resolve().parents[2]
TASK = {"name": "sokoban", "fmt": "compact", "dim_room": [6, 6], "num_boxes": 1}
VICTIM = "the victim's own words\n"


@pytest.fixture
def base(tok, tmp_path):
    return save_checkpoint(tmp_path / "base", tiny(tok), tok, {"task": TASK})


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "victim.txt"
    v.write_text(VICTIM)
    return v


def args(base, out, steps=1):
    return ["--student", str(base), "--out", str(out), "--batch", "4", "--steps", str(steps),
            "--save-every", "1", "--eval-every", "100", "--eval-levels", "2", "--threads", "1",
            "--lr", "1e-3"]


# -- code runs only where this command names it ----------------------------------------------

@pytest.fixture
def evil(tok, tmp_path):
    """The probe's folder: a checkpoint whose run config names a scorer file that, imported,
    leaves a marker (a real attack would do anything else)."""
    marker = tmp_path / "code_ran"
    score = tmp_path / "evil_score.py"
    score.write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                     "def fn(item, response):\n    return True\n")
    data = tmp_path / "d.jsonl"
    data.write_text("".join(f'{{"prompt": "q{i}", "context": "c", "answer": "a", "id": "q{i}"}}\n'
                            for i in range(8)))
    task = {"name": "jsonl", "data": str(data), "scorer": f"{score}:fn",
            "context_as": "prefix"}
    folder = save_checkpoint(tmp_path / "shared_ckpt", tiny(tok), tok, {"task": task})
    return folder, marker, score


@pytest.mark.parametrize("command", ["distill", "evaluate"])
def test_a_checkpoint_naming_a_scorer_runs_no_code(evil, tmp_path, command, capsys):
    folder, marker, score = evil
    if command == "distill":
        rc = entry(distill.main, args(folder, tmp_path / "R"))
    else:
        rc = entry(evaluate.main, [str(folder), "--n-levels", "2", "--context", "context"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "never code" in err[0]
    assert f"--task-options scorer={score}:fn" in err[0]
    assert not marker.exists()
    assert not (tmp_path / "R").exists()  # refused before the run folder was made


def test_the_scorer_named_on_the_command_line_is_run(evil, tmp_path):
    folder, marker, score = evil
    evaluate.execute(evaluate.EvalConfig(ckpt=[str(folder)], n_levels=2,
                                         task_options=[f"scorer={score}:fn"]))
    assert marker.exists()  # the user named it: it runs (in the scorer's worker)


# -- no write through a link planted at a name the package uses -------------------------------

def test_a_link_at_a_reports_old_temporary_name_is_not_written_through(tmp_path, victim):
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(victim, out / f".rep.json.nca-tmp-{os.getpid()}")
    write_text(out / "rep.json", '{"report": 1}')
    assert victim.read_text() == VICTIM
    assert (out / "rep.json").is_file() and not (out / "rep.json").is_symlink()
    assert [p.name for p in out.iterdir() if p.name.startswith(".nca-tmp")] == []


def test_a_link_at_the_report_itself_is_refused_not_followed(tmp_path, victim):
    os.symlink(victim, tmp_path / "rep.json")
    with pytest.raises(UnsafePathError, match="symbolic link"):
        write_text(tmp_path / "rep.json", '{"report": 1}')
    assert victim.read_text() == VICTIM and (tmp_path / "rep.json").is_symlink()


def test_the_out_write_probe_never_follows_a_planted_link(tmp_path, victim):
    os.symlink(victim, tmp_path / f".nca_interp_write_test_{os.getpid()}")
    check_writable(tmp_path / "run", "run")
    assert victim.read_text() == VICTIM
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["victim.txt", f".nca_interp_write_test_{os.getpid()}"])


@pytest.mark.parametrize("how", ["symlink", "hardlink"])
def test_a_planted_lock_is_refused_and_its_target_kept(base, tmp_path, victim, how, capsys):
    out = tmp_path / "D"
    out.mkdir()
    (os.symlink if how == "symlink" else os.link)(victim, out / ".lock")
    with pytest.raises(UnsafePathError):
        RunLock(out)
    assert entry(distill.main, args(base, out)) == 2
    assert "link" in capsys.readouterr().err
    assert victim.read_text() == VICTIM


def test_a_link_at_a_training_temporary_name_is_never_written_through(base, tmp_path, victim):
    """The probe planted `.NAME.nca-tmp-PID` in a training --out: the victim received
    model.safetensors. A link is nothing the run made: the run refuses the folder."""
    out = tmp_path / "R"
    out.mkdir()
    os.symlink(victim, out / f".model.safetensors.nca-tmp-{os.getpid()}")
    with pytest.raises(UsageError, match="symbolic link"):
        distill.main(args(base, out))
    assert victim.read_text() == VICTIM


def test_a_link_planted_in_a_runs_folder_before_a_resume_is_not_written_through(
        base, tmp_path, victim):
    out = tmp_path / "R"
    distill.main(args(base, out, steps=1))
    for name in ("model.safetensors", "config.json"):  # where publish renames its copies
        os.symlink(victim, out / f".{name}.nca-tmp-{os.getpid()}")
    with pytest.raises(UsageError, match="symbolic link"):  # refused before any step
        distill.main(args(base, out, steps=2))
    assert victim.read_text() == VICTIM
    assert not (out / "checkpoints" / "step_000002").exists()


@pytest.mark.parametrize("where", ["checkpoints", "checkpoints/discarded",
                                   "checkpoints/step_000002"])
def test_a_link_at_a_folder_a_run_writes_into_is_refused(base, tmp_path, where):
    """The second probe: `checkpoints` (and `discarded`) as links took step 3 into the
    link's target (exit 0); a linked step folder read as a damaged checkpoint."""
    import shutil

    out = tmp_path / "R"
    distill.main(args(base, out, steps=2))
    elsewhere = tmp_path / "elsewhere"
    if where == "checkpoints/discarded":
        elsewhere.mkdir()
    else:
        shutil.move(out / where, elsewhere)
    os.symlink(elsewhere, out / where)
    before = sorted(p.name for p in elsewhere.iterdir())
    with pytest.raises(UsageError, match="symbolic link"):
        distill.main(args(base, out, steps=3))
    assert sorted(p.name for p in elsewhere.iterdir()) == before


def test_a_trainer_state_that_disagrees_with_its_folder_is_damage(base, tmp_path):
    """The probe set a step's trainer_state.json to step 10^12 (re-signed): the resume printed
    "done" and trained nothing, exit 0."""
    import json

    from nca_interp.checkpoint import write_manifest

    out = tmp_path / "R"
    distill.main(args(base, out, steps=2))
    step = out / "checkpoints" / "step_000002"
    meta = json.loads((step / "trainer_state.json").read_text())
    (step / "trainer_state.json").write_text(json.dumps({**meta, "step": 10 ** 12}))
    write_manifest(step)
    with pytest.raises(RunError, match="records step 1000000000000, not the 2"):
        distill.main(args(base, out, steps=3))


def test_an_unmarked_stage_name_in_a_fresh_out_is_the_users(base, tmp_path):
    out = tmp_path / "O"
    (out / ".nca-tmp-99999-abcdefgh").mkdir(parents=True)
    with pytest.raises(UsageError, match="already holds"):
        distill.main(args(base, out))
    assert (out / ".nca-tmp-99999-abcdefgh").is_dir()


@pytest.mark.parametrize("what", ["json", "html", "other_report"])
def test_an_analysis_never_writes_over_a_file_it_did_not_write(base, tok, tmp_path, what):
    """A user's X.json / X.html, or another report's figure of the same name, were replaced
    without a word (exit 0)."""
    from nca_interp import param_delta

    mine = {"json": tmp_path / "ao.json", "html": tmp_path / "ao.html",
            "other_report": tmp_path / "ao_cos.html"}[what]
    if what == "other_report":  # evaluate's page ao_cos.html, then param_delta --out ao
        evaluate.execute(evaluate.EvalConfig(ckpt=[str(base)], n_levels=2,
                                             out=str(tmp_path / "ao_cos")))
        a, b = (save_checkpoint(tmp_path / n, tiny(tok, seed=s), tok) for n, s in
                (("a", 2), ("b", 3)))
        with pytest.raises(UsageError, match="did not write it"):
            param_delta.execute(param_delta.ParamDeltaConfig(
                ckpt=[str(a), str(b)], init=str(base), out=str(tmp_path / "ao")))
    else:
        mine.write_text('{"mine": 1}')
        with pytest.raises(UsageError, match="never written over"):
            evaluate.execute(evaluate.EvalConfig(ckpt=[str(base)], n_levels=2,
                                                 out=str(tmp_path / "ao")))
    kept = mine.read_text()
    assert kept == '{"mine": 1}' if what != "other_report" else "evaluate" in kept or kept
    # the same command again over its own report is fine
    evaluate.execute(evaluate.EvalConfig(ckpt=[str(base)], n_levels=2,
                                         out=str(tmp_path / "again")))
    evaluate.execute(evaluate.EvalConfig(ckpt=[str(base)], n_levels=2,
                                         out=str(tmp_path / "again")))


def test_an_out_that_is_a_folder_is_refused_before_work(base, tmp_path):
    (tmp_path / "odir").mkdir()
    for out in (tmp_path / "odir", f"{tmp_path / 'odir'}/"):
        with pytest.raises(UsageError, match="is a folder"):
            evaluate.execute(evaluate.EvalConfig(ckpt=[str(base)], n_levels=2, out=str(out)))


def test_two_analyses_on_one_out_the_second_is_refused(tmp_path, base):
    """The probe's two `evaluate --out same` both said "wrote"; the second now meets the
    first's lock before any work (held here as a live first writer would)."""
    from nca_interp.analysis import figure_stem

    out = tmp_path / "rep"
    holder = RunLock(tmp_path, f".{figure_stem(out, '').name}.nca-lock")
    try:
        with pytest.raises(RunError, match="being written by"):
            evaluate.execute(evaluate.EvalConfig(ckpt=[str(base)], n_levels=2, out=str(out)))
    finally:
        holder.release()
    evaluate.execute(evaluate.EvalConfig(ckpt=[str(base)], n_levels=2, out=str(out)))
    assert (tmp_path / "rep.json").is_file()


# -- a manifest names the folder's own files only ---------------------------------------------

@pytest.mark.parametrize("name", ["/etc/hostname", "../x", "/dev/zero", "sub/../../x"])
def test_a_manifest_naming_files_elsewhere_is_refused_before_reading_them(base, name,
                                                                          monkeypatch):
    import json

    from nca_interp import checkpoint

    manifest = base / checkpoint.MANIFEST
    data = json.loads(manifest.read_text())
    data["files"][name] = {"bytes": 1, "sha256": "0" * 64}
    manifest.write_text(json.dumps(data))
    read = []
    monkeypatch.setattr(checkpoint, "_sha256", lambda p: read.append(p) or "")
    with pytest.raises(CheckpointError, match="not a file of the folder itself"):
        verify_folder(base)
    assert read == []  # nothing hashed, the folder's own files included


# -- a write the OS refuses is one line naming the file --------------------------------------

def test_a_file_size_limit_during_training_is_one_line_and_the_run_resumes(base, tmp_path):
    """EFBIG (`ulimit -f`) ended in a SafetensorError traceback; the model is ~100 KB, the
    limit 40 KB, so the first save fails and nothing half-written stays."""
    out = tmp_path / "R"

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (40_000, 40_000))

    cmd = [sys.executable, "-m", "train.distill", *args(base, out)]
    env = {**os.environ, "NCA_INTERP_QUIET": "1"}
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                       preexec_fn=limit)
    assert r.returncode == 2, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert "Traceback" not in r.stderr and last.startswith("error: ")
    assert "file-size limit" in last and "starts the run over" in last
    assert not [p for p in out.rglob(".nca-tmp-*")]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.parametrize("code", [28, 122, 27, 30, 13])
def test_every_write_fault_names_the_file_and_what_to_do(tmp_path, monkeypatch, code):
    from nca_interp import fsio

    def refuse(fd):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(fsio.os, "fsync", refuse)
    with pytest.raises(RunError) as e:
        write_text(tmp_path / "rep.json", "{}")
    assert str(tmp_path / "rep.json") in str(e.value) and "\n" not in str(e.value)
    assert not list(tmp_path.iterdir())  # nothing half-written, no stage left


# -- messages true where they are printed ------------------------------------------------------

def test_the_interrupt_message_is_true_of_each_command():
    from nca_interp import layer_sim
    from nca_interp.paper import reproduce
    from train import sft

    assert "resumes" in interrupted_note(distill.main)
    assert "resumes" in interrupted_note(sft.main)
    for main in (evaluate.main, layer_sim.main):
        assert "resumes" not in interrupted_note(main)
        assert "from the beginning" in interrupted_note(main)
    assert "skips them" in interrupted_note(reproduce.main)
    from train import trl_distill  # probe 11 U-O: it keeps no checkpoint, has no --save-every

    note = interrupted_note(trl_distill.main, ["--out", "x"])
    assert "resumes" not in note and "--save-every" not in note and "starts it over" in note


def test_a_damaged_fetched_model_is_told_to_verify(tmp_path, monkeypatch):
    from nca_interp.checkpoint import _remedy

    monkeypatch.setenv("NCA_INTERP_CACHE", str(tmp_path / "cache"))
    inside = tmp_path / "cache" / "models" / "smollm2-135m-instruct"
    outside = tmp_path / "copy"
    for f in (inside, outside):
        f.mkdir(parents=True)
        (f / "PROVENANCE.json").write_text('{"model": "smollm2-135m-instruct"}')
    assert "fetch smollm2-135m-instruct --verify" in _remedy(inside.resolve())
    assert "outside the cache" in _remedy(outside.resolve())


def test_an_interrupt_before_the_first_checkpoint_says_the_run_starts_over(base, tmp_path):
    out = tmp_path / "R"
    argv = args(base, out)
    assert "starts the run over" in interrupted_note(distill.main, argv)
    distill.main(argv)
    assert "resumes" in interrupted_note(distill.main, argv)


def test_sigterm_ends_training_as_ctrl_c_does(base, tmp_path):
    """SIGTERM ended a run with exit 143 and no word; now the same line as Ctrl-C."""
    import signal
    import time

    out = tmp_path / "R"
    cmd = [sys.executable, "-m", "train.distill", *args(base, out, steps=100000)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "NCA_INTERP_QUIET": "1"},
                            stderr=subprocess.PIPE, text=True)
    for _ in range(1800):  # until its first step is saved (a loaded machine is slow)
        if (out / "checkpoints" / "step_000001").is_dir() or proc.poll() is not None:
            break
        time.sleep(0.1)
    assert proc.poll() is None, f"the run ended before it was signalled: {proc.stderr.read()}"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("terminated; the same command resumes")


def test_a_billion_levels_is_refused_at_once(base):
    with pytest.raises(UsageError, match="--n-levels must be between 1 and"):
        evaluate.main([str(base), "--n-levels", "1000000000"])


def test_a_malformed_recorded_task_and_a_recorded_context_are_named_as_such(tok, tmp_path):
    """The probe: a run config whose task was a list read as "its run_config.json is
    missing"; a context taken from the run config was reported as if the user had given it."""
    from nca_interp.runs import resolve_task_and_context

    odd = save_checkpoint(tmp_path / "odd", tiny(tok), tok, {"task": ["x"]})
    with pytest.raises(UsageError, match="records its task as list"):
        resolve_task_and_context([str(odd)], None, None)
    plan = save_checkpoint(tmp_path / "plan", tiny(tok), tok, {"task": TASK, "context": "plan"})
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "q", "context": "c", "answer": "a"}\n')
    with pytest.raises(UsageError, match="run config records the context 'plan'"):
        resolve_task_and_context([str(plan)], "jsonl", None, [f"data={data}"])


def test_a_full_temporary_folder_under_layer_sim_names_tmpdir_not_out(base, tmp_path,
                                                                      monkeypatch):
    from nca_interp import fsio, layer_sim

    def refuse(fd):
        raise OSError(27, os.strerror(27))

    monkeypatch.setattr(fsio.os, "fsync", refuse)
    with pytest.raises(RunError, match="random-init null's temporary copy.*TMPDIR"):
        layer_sim.random_init_copy(base, tmp_path / "random_init")


def test_an_unreadable_weight_file_is_named_with_what_to_do(base, monkeypatch):
    """Root reads anything, so the probe dropped its capabilities; here the permission check
    is made to fail as it does for an ordinary user."""
    from nca_interp import checkpoint

    real = os.access
    monkeypatch.setattr(checkpoint.os, "access", lambda p, m: not str(p).endswith(
        "model.safetensors") and real(p, m))
    with pytest.raises(CheckpointError, match="cannot be read.*chmod u\\+r"):
        verify_folder(base)


# -- the second probe's cases ------------------------------------------------------------------

def test_a_hard_link_at_a_pipeline_log_is_refused_before_it_is_truncated(tmp_path, victim):
    from nca_interp.paper.reproduce import open_log

    os.link(victim, tmp_path / "run.log")
    with pytest.raises(UnsafePathError, match="hard link"):
        open_log(tmp_path / "run.log")
    assert victim.read_text() == VICTIM
    with open_log(tmp_path / "fresh.log") as f:  # its own file: opened and written
        f.write("ok")


def test_a_report_of_another_analysis_at_out_is_not_replaced(base, tmp_path):
    from nca_interp import layer_sim

    layer_sim.execute(layer_sim.LayerSimConfig(ckpt=[str(base)], n_levels=2,
                                               out=str(tmp_path / "b0")))
    before = (tmp_path / "b0.json").read_bytes()
    with pytest.raises(UsageError, match="is a layer_sim report, not evaluate's"):
        evaluate.execute(evaluate.EvalConfig(ckpt=[str(base)], n_levels=2,
                                             out=str(tmp_path / "b0")))
    assert (tmp_path / "b0.json").read_bytes() == before


@pytest.mark.parametrize("argv, flag", [
    (["--steps", "1000000000000"], "--steps"), (["--batch", "100000000"], "--batch")])
def test_absurd_training_sizes_are_refused_at_once(base, tmp_path, argv, flag):
    with pytest.raises(UsageError, match=f"{flag} must be between"):
        distill.main([*args(base, tmp_path / "R"), *argv])


def test_absurd_analysis_sizes_are_refused_at_once(base):
    from nca_interp import patching, trajectory

    with pytest.raises(UsageError, match="--n-random must be between"):
        patching.main([str(base), "--n-random", "1000000000"])
    with pytest.raises(UsageError, match="--drift-levels must be between"):
        trajectory.main([str(base), "--drift-levels", "1000000000"])


def test_the_disk_a_run_needs_is_counted_not_looped():
    import time

    from train.common import disk_needed

    start = time.monotonic()
    assert disk_needed(1, 10**12, 10**6) == (10**6 + 3, 3)
    assert time.monotonic() - start < 1


def test_nan_in_a_model_config_is_refused(base, tmp_path):
    import json
    import shutil

    from nca_interp.checkpoint import write_manifest

    ck = tmp_path / "CK"
    shutil.copytree(base, ck)
    cfg = json.loads((ck / "config.json").read_text())
    (ck / "config.json").write_text(json.dumps({**cfg, "rms_norm_eps": float("nan")}))
    write_manifest(ck)
    with pytest.raises(CheckpointError, match="holds NaN"):
        verify_folder(ck)
    for key, value in (("rms_norm_eps", -1), ("rms_norm_eps", 0), ("num_hidden_layers", 0)):
        (ck / "config.json").write_text(json.dumps({**cfg, key: value}))  # the third probe's
        write_manifest(ck)  # eps of -1 answered wrongly without a word
        with pytest.raises(CheckpointError, match=f"{key} is {value}, and must be above 0"):
            verify_folder(ck)
    for edit, needle in (  # the fourth probe's: 1e999 read as inf, eps 1e30 flattened the
            ('"rms_norm_eps": 1e999', "holds 1e999"),  # logits, a nested rope_theta, an
            ('"rms_norm_eps": 1e30', r"rms_norm_eps is 1e\+30; a norm's epsilon"),  # activation
            ('"rope_parameters": {"rope_theta": -5}', "rope_theta is -5"),  # transformers
            ('"hidden_act": "evil_act"', "hidden_act 'evil_act' is no activation"),  # lacks
            ('"rms_norm_eps": {"__float__": "Infinity"}', "holds rms_norm_eps: inf"),
            ('"intermediate_size": 1000000000000000000000000000000', "more than any model"),
            ('"rope_parameters": {"rope_theta": "abc"}', "rope_theta is 'abc', not a number")):
        text = json.dumps({k: v for k, v in cfg.items() if k not in ("rms_norm_eps",
                                                                      "hidden_act")})
        (ck / "config.json").write_text(text[:-1] + ", " + edit + "}")
        write_manifest(ck)
        with pytest.raises(CheckpointError, match=needle):
            verify_folder(ck)


def test_chat_turns_on_a_checkpoint_without_a_template_are_refused(base, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(f'{{"prompt": [{{"role": "system", "content": "S"}}, {{"role": '
                            f'"user", "content": "U{i}"}}], "context": "c", "answer": "a"}}\n'
                            for i in range(8)))
    with pytest.raises(UsageError, match="no chat template"):
        evaluate.execute(evaluate.EvalConfig(ckpt=[str(base)], task="jsonl", n_levels=1,
                                             task_options=[f"data={data}"]))


# -- the third probe's cases -------------------------------------------------------------------

def test_an_lr_fp32_adam_cannot_hold_is_refused(base, tmp_path):
    with pytest.raises(UsageError, match="--lr must be between"):
        distill.main([*args(base, tmp_path / "R")[:-2], "--lr", "1e308"])
    assert not (tmp_path / "R").exists()


def test_grad_aligns_batch_is_bounded(base):
    from nca_interp import grad_align

    with pytest.raises(UsageError, match="--batch must be an even number between 4 and"):
        grad_align.main([str(base), "--batch", "1000000000"])


@pytest.mark.parametrize("line, why", [
    ('{"id": 1e999, "prompt": "p", "context": "c"}', "no finite number"),
    ('{"prompt": "p", "context": "c", "answer": "A", "answer": "B"}', "given twice")])
def test_infinity_and_a_repeated_key_in_a_data_line_are_refused(tmp_path, line, why):
    from nca_interp.tasks import jsonl, task_from_record

    data = tmp_path / "d.jsonl"
    data.write_text(line + "\n")
    t = task_from_record(None, "jsonl", None, [f"data={data}"])
    with pytest.raises(UsageError, match=f"d.jsonl:1: .*{why}"):
        jsonl.items(t.config)


# -- the sixth probe's cases -------------------------------------------------------------------

def test_a_file_the_loader_reads_that_the_manifest_does_not_list_is_refused(base, tmp_path):
    """A chat template planted in a verified run changed every prompt without a word, and a
    manifest listing nothing verified nothing; a file the loader never reads stays allowed."""
    import json

    (base / "notes.txt").write_text("a file of the user's: the loader never reads it")
    verify_folder(base)
    (base / "chat_template.jinja").write_text("{{ messages[0].content }} obey")
    with pytest.raises(CheckpointError, match="chat_template.jinja is not in the folder's"):
        verify_folder(base)
    (base / "chat_template.jinja").unlink()
    (base / "nca_checkpoint.json").write_text(json.dumps({"files": {}}))
    with pytest.raises(CheckpointError, match="is not in the folder's nca_checkpoint.json"):
        verify_folder(base)


@pytest.mark.parametrize("entry_", [5, {"bytes": 10}, {"sha256": "0" * 64, "bytes": "10"}])
def test_a_manifest_entry_of_another_shape_is_one_line(base, entry_):
    import json

    manifest = json.loads((base / "nca_checkpoint.json").read_text())
    manifest["files"]["config.json"] = entry_  # was a TypeError / KeyError traceback
    (base / "nca_checkpoint.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="its entry for 'config.json' is not the file's"):
        verify_folder(base)


def _resigned(folder, **fields):
    import json

    from nca_interp.checkpoint import write_manifest

    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **fields}))
    write_manifest(folder)
    return folder


@pytest.mark.parametrize("fields, needle", [
    ({"max_position_embeddings": -1}, "max_position_embeddings is -1, and must be above 0"),
    ({"max_position_embeddings": 0}, "max_position_embeddings is 0"),
    ({"sliding_window": -5, "use_sliding_window": True}, "sliding_window is -5"),
    ({"quantization_config": {"quant_method": "bitsandbytes", "load_in_8bit": True}},
     "describes quantized weights")])
def test_a_config_size_no_model_has_or_quantized_weights_are_refused(base, fields, needle):
    """-1 was blamed on the prompt, 0 read as no limit, a negative window was a RuntimeError in
    attention and a quantization config an ImportError traceback."""
    from nca_interp.checkpoint import load_checkpoint

    with pytest.raises(CheckpointError, match=needle):
        load_checkpoint(_resigned(base, **fields))


@pytest.mark.parametrize("fields", [{"num_hidden_layers": 3}, {"tie_word_embeddings": "yes"}])
def test_a_config_transformers_refuses_is_named_as_the_config(base, fields):
    from nca_interp.checkpoint import load_checkpoint

    with pytest.raises(CheckpointError, match="config.json is not a config transformers"):
        load_checkpoint(_resigned(base, **fields))  # was "tokenizer could not be loaded"


def test_a_tokenizer_file_that_is_a_pipe_is_named(base):
    (base / "tokenizer.json").unlink()
    os.mkfifo(base / "tokenizer.json")
    with pytest.raises(UsageError, match="tokenizer.json is not a regular file"):
        verify_folder(base)  # was "holds no tokenizer files"


def test_a_step_of_another_run_among_a_runs_checkpoints_is_refused(tok, tmp_path):
    """A link to NCA's step_000001 in an OPD run's checkpoints/ put NCA's weights at step 1
    of the OPD trajectory without a word."""
    from nca_interp.runs import step_of

    runs = {}
    for method in ("opd", "nca"):
        config = {"task": TASK, "kind": "distill", "method": method, "seed": 0}
        runs[method] = save_checkpoint(tmp_path / method, tiny(tok), tok, config)
        save_checkpoint(runs[method] / "checkpoints" / "step_000001", tiny(tok), tok, config,
                        ({}, {"step": 1}))
    assert step_of(str(runs["opd"] / "checkpoints" / "step_000001")) == 1
    planted = runs["opd"] / "checkpoints" / "step_000001"
    planted.rename(tmp_path / "opd_step_1")
    planted.symlink_to(runs["nca"] / "checkpoints" / "step_000001")
    with pytest.raises(CheckpointError, match="is not a checkpoint of .*records method 'nca'"):
        step_of(str(planted))


@pytest.mark.parametrize("key, value", [("teacher", 5), ("student", {"x": 1})])
def test_a_run_config_recording_a_checkpoint_that_is_no_path_is_one_line(tok, tmp_path, key,
                                                                         value):
    from nca_interp.runs import teacher_of, with_initial_checkpoints

    run = save_checkpoint(tmp_path / "run", tiny(tok), tok, {"task": TASK, key: value})
    with pytest.raises(UsageError, match=f"records its {key} as"):  # an AttributeError
        teacher_of(str(run), None) if key == "teacher" else with_initial_checkpoints([str(run)])


def test_a_pending_figure_record_that_is_not_ours_is_never_replaced(tmp_path, base):
    """A file at the name `write` records its figures in (`.STEM.nca-figures`) that is not that
    record was overwritten, then deleted, by the next report."""
    from nca_interp.analysis import check_outputs

    mine = tmp_path / "out" / ".r.nca-figures"
    mine.parent.mkdir()
    mine.write_text("my notes")
    with pytest.raises(UsageError, match="is not the record of figures"):
        check_outputs(tmp_path / "out" / "r", "evaluate")
    mine.unlink()
    os.mkfifo(mine)
    with pytest.raises(UsageError, match="is not the record of figures"):
        check_outputs(tmp_path / "out" / "r", "evaluate")
    mine.unlink()
    mine.write_text('{"r.html": ["' + "0" * 64 + '"]}')  # a killed write's record: ours
    check_outputs(tmp_path / "out" / "r", "evaluate")


def test_a_recorded_student_that_is_no_checkpoint_is_named_as_recorded(tok, tmp_path):
    from nca_interp.runs import with_initial_checkpoints

    (tmp_path / "notes").mkdir()
    run = save_checkpoint(tmp_path / "run", tiny(tok), tok,
                          {"task": TASK, "student": str(tmp_path / "notes")})
    with pytest.raises(UsageError, match="records the checkpoint it started from"):
        with_initial_checkpoints([str(run)])  # was "notes is not a checkpoint folder"


def test_a_small_disk_is_said_in_digits_that_differ(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    from nca_interp.cli import check_disk

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 0, 606_000))
    with pytest.raises(RunError, match=r"0.000606 GB free, the run needs about 0.00283 GB"):
        check_disk(tmp_path, 2_830_000, "the run", "free space")  # was 0.00 GB of 0.00 GB


def test_a_lock_holders_command_is_named_in_one_line(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", f"""
import time
from nca_interp.runlock import RunLock
lock = RunLock({str(tmp_path)!r})
print("held", flush=True)
time.sleep(30)"""], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunError) as refused:
            RunLock(tmp_path)
        assert "\n" not in str(refused.value) and "RunLock(" in str(refused.value)
    finally:
        holder.kill()
        holder.wait()


def test_an_out_whose_names_no_file_system_takes_is_one_line(tmp_path):
    from nca_interp.analysis import check_outputs

    with pytest.raises(UsageError, match="its name is 300 bytes"):  # was [Errno 36] naming
        check_outputs(tmp_path / ("x" * 300))  # the report's lock, a name never typed


def test_an_adapter_a_manifest_of_before_adapters_were_listed_is_read_as_then(base):
    """A LoRA run saved before adapter/ joined its manifest still resumes (its adapter was
    never listed); where the manifest lists the adapter, an unlisted adapter file is refused."""
    import json

    (base / "adapter").mkdir()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (base / "adapter" / name).write_text("{}")
    verify_folder(base)
    manifest = json.loads((base / "nca_checkpoint.json").read_text())
    manifest["files"]["adapter/adapter_config.json"] = {
        "bytes": 2, "sha256": "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"}
    (base / "nca_checkpoint.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="adapter_model.safetensors is not in the folder's"):
        verify_folder(base)


def test_a_checkpoint_is_never_saved_through_a_link_at_its_name(tok, tmp_path):
    """save_checkpoint resolved its path first, so a link at the name (planted while a run
    trained) had the folder it pointed to replaced, the user's files in it deleted."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text(VICTIM)
    (tmp_path / "step").symlink_to(victim)
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        save_checkpoint(tmp_path / "step", tiny(tok), tok, {})
    assert [p.name for p in victim.iterdir()] == ["keep.txt"]
    assert (victim / "keep.txt").read_text() == VICTIM
    (tmp_path / "linked").symlink_to(tmp_path / "real", target_is_directory=True)
    (tmp_path / "real").mkdir()
    save_checkpoint(tmp_path / "linked" / "ok", tiny(tok), tok, {})  # a link above: the user's
    assert (tmp_path / "real" / "ok" / "nca_checkpoint.json").is_file()


def test_a_report_is_never_written_under_a_name_a_checkpoint_loader_reads(base, tok,
                                                                          tmp_path):
    """--out CKPT/chat_template wrote chat_template.json into a checkpoint folder (not one the
    analysis read), which its loader then reads as the checkpoint's chat template."""
    from nca_interp.analysis import check_out_clear

    other = save_checkpoint(tmp_path / "other", tiny(tok), tok, {"task": TASK})
    cfg = evaluate.EvalConfig(ckpt=[str(base)])
    with pytest.raises(UsageError, match="would put chat_template.json into the checkpoint"):
        check_out_clear(cfg, other / "chat_template")
    check_out_clear(cfg, other / "report")  # another name there is the user's choice
