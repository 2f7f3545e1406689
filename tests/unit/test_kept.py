"""Teachers kept in git (nca_interp.paper.kept): the copy holds the run's weights (its digest is
the run's), drops Adam's moments, never overwrites, and is restored only where nothing is."""

import os

import pytest

from nca_interp.checkpoint import latest_step_checkpoint, save_checkpoint, weights_digest
from nca_interp.errors import UsageError
from nca_interp.paper import kept, reproduce
from tests.conftest import tiny


def finished_run(tmp_path, tok, seed=0):
    """A run folder as training leaves it: its published copy at the root and a last step
    checkpoint with optimizer moments."""
    import torch

    run = tmp_path / "runs" / "sk_base"
    model = tiny(tok, seed=seed)
    state = ({"m": torch.randn(3, 4)}, {"step": 4})
    config = {"task": {"name": "sokoban"}, "kind": "sft", "steps": 4}
    save_checkpoint(run, model, tok, config)  # replaces the folder
    save_checkpoint(run / "checkpoints" / "step_000004", model, tok, config, trainer_state=state)
    return run


def test_a_kept_run_holds_the_runs_weights_without_its_moments(tmp_path, tok):
    run = finished_run(tmp_path, tok)
    last = latest_step_checkpoint(run)
    assert (last / "trainer_state.safetensors").exists()
    dest = kept.save(run, tmp_path / "kept")
    step = dest / "checkpoints" / last.name
    assert not (step / "trainer_state.safetensors").exists()
    assert (last / "trainer_state.safetensors").exists()  # the run is left as it is
    assert weights_digest(step) == weights_digest(last)
    assert weights_digest(dest) == weights_digest(run)
    # a stage's recorded inputs read the same from the kept copy: nothing computed goes stale
    assert list(reproduce.digests([step]).values()) == list(reproduce.digests([last]).values())
    with pytest.raises(UsageError, match="never overwritten"):
        kept.save(run, tmp_path / "kept")
    assert not list((tmp_path / "kept").glob(".*"))  # no temporary left behind


def test_a_kept_run_is_restored_only_where_no_run_is(tmp_path, tok):
    run = finished_run(tmp_path, tok)
    store = tmp_path / "kept"
    kept.save(run, store)
    fresh = tmp_path / "clone" / run.name
    assert kept.restore(fresh, store)
    assert weights_digest(latest_step_checkpoint(fresh)) == \
        weights_digest(latest_step_checkpoint(run))
    assert not kept.restore(fresh, store)  # it holds a checkpoint now: never copied over
    assert not kept.restore(tmp_path / "clone" / "other_base", store)  # nothing kept by that name
    started = tmp_path / "started" / run.name  # a run begun here, before its first checkpoint
    started.mkdir(parents=True)
    (started / "run_config.json").write_text("{}")
    with pytest.raises(UsageError, match="move"):
        kept.restore(started, store)
    retrained = finished_run(tmp_path / "again", tok, seed=1)
    assert weights_digest(retrained) != weights_digest(run)


def test_a_run_too_large_for_git_is_refused(tmp_path, tok, monkeypatch):
    run = finished_run(tmp_path, tok)
    monkeypatch.setattr(kept, "LIMIT", 1000)
    with pytest.raises(UsageError, match="over the"):
        kept.save(run, tmp_path / "kept")
    assert not (tmp_path / "kept" / run.name).exists()


def test_only_a_finished_published_teacher_is_kept(tmp_path, tok):
    """An unfinished run, a run whose root is not its last step (a kill between save and
    publish) and a student are refused in one line each; nothing is left in the store."""
    import json

    from nca_interp.checkpoint import write_manifest

    run = finished_run(tmp_path, tok)
    store = tmp_path / "kept"
    config = json.loads((run / "run_config.json").read_text())

    def recorded(**fields):  # a run config as its run saved it (its manifest says so)
        (run / "run_config.json").write_text(json.dumps({**config, **fields}))
        write_manifest(run)

    recorded(steps=8)
    with pytest.raises(UsageError, match="has not finished: its last checkpoint is step_000004"):
        kept.save(run, store)
    recorded(kind="distill")
    with pytest.raises(UsageError, match="not a teacher"):
        kept.save(run, store)
    recorded(steps="abc")  # was "invalid literal for int()" (the sixth probe)
    with pytest.raises(UsageError, match="run_config.json records steps 'abc'"):
        kept.save(run, store)
    run = finished_run(tmp_path / "b", tok)
    save_checkpoint(run / "checkpoints" / "step_000004", tiny(tok, seed=5), tok,
                    json.loads((run / "run_config.json").read_text()))
    with pytest.raises(UsageError, match="root is not its last checkpoint"):
        kept.save(run, store)
    with pytest.raises(UsageError, match="no run at"):
        kept.save(tmp_path / "nowhere", store)
    assert not store.exists() or not any(store.iterdir())


def test_a_failed_restore_leaves_nothing_and_a_later_one_works(tmp_path, tok, monkeypatch):
    import shutil

    run = finished_run(tmp_path, tok)
    store = tmp_path / "kept"
    kept.save(run, store)
    fresh = tmp_path / "clone" / run.name
    copy, calls = shutil.copyfile, []

    def failing(src, dst, **kw):  # a kill in the middle of the copy
        calls.append(fresh.exists())  # the run's name appears only once the copy is whole
        if len(calls) == 5:
            raise KeyboardInterrupt
        return copy(src, dst, **kw)

    monkeypatch.setattr(shutil, "copyfile", failing)
    with pytest.raises(KeyboardInterrupt):
        kept.restore(fresh, store)
    monkeypatch.setattr(shutil, "copyfile", copy)
    assert not any(calls) and not fresh.exists() and not list(fresh.parent.glob(".*"))
    assert kept.restore(fresh, store) and latest_step_checkpoint(fresh) is not None


def test_the_command_line_saves_from_a_relative_path_and_says_errors_in_a_line(
        tmp_path, tok, monkeypatch, capsys):
    from nca_interp.cli import entry

    run = finished_run(tmp_path, tok)
    store = tmp_path / "kept"
    assert entry(kept.main, ["--kept", str(store), "list"]) == 0
    assert "no kept runs" in capsys.readouterr().out
    monkeypatch.chdir(run)
    assert entry(kept.main, ["--kept", str(store), "save", "."]) == 0
    assert (store / run.name / "checkpoints" / "step_000004").is_dir()
    assert entry(kept.main, ["--kept", str(store), "list"]) == 0
    assert "sk_base: step_000004" in capsys.readouterr().out
    assert entry(kept.main, ["--kept", str(store), "save", str(tmp_path / "nowhere")]) != 0
    err = capsys.readouterr().err
    assert "no run at" in err and "Traceback" not in err


def test_a_retrain_to_the_same_weights_keeps_the_digest_and_other_weights_do_not(tmp_path, tok):
    """The weights digest leaves out the run's circumstances (commit, output folder, threads,
    its inputs' recorded digests), so a bit-identical retrain elsewhere or at another commit
    matches, while other weights or another method in the run config do not."""
    import json

    from nca_interp.checkpoint import RUN_CONFIG_CIRCUMSTANCES

    config = {"task": {"name": "sokoban"}, "kind": "distill", "method": "nca", "seed": 0}
    a = save_checkpoint(tmp_path / "a", tiny(tok, seed=0), tok,
                        {**config, "out": "runs/a", "git_commit": "1", "threads": 1})
    b = save_checkpoint(tmp_path / "b", tiny(tok, seed=0), tok,
                        {**config, "out": "elsewhere", "git_commit": "2", "threads": 2})
    assert weights_digest(a) == weights_digest(b)
    assert "git_commit" in RUN_CONFIG_CIRCUMSTANCES and "method" not in RUN_CONFIG_CIRCUMSTANCES
    c = save_checkpoint(tmp_path / "c", tiny(tok, seed=0), tok, {**config, "method": "opd"})
    d = save_checkpoint(tmp_path / "d", tiny(tok, seed=1), tok, config)
    assert len({weights_digest(a), weights_digest(c), weights_digest(d)}) == 3
    assert json.loads((a / "run_config.json").read_text())["git_commit"] == "1"


def test_the_default_runs_folder_lives_outside_the_work_tree(tmp_path, monkeypatch):
    """A fresh checkout lost runs/ twice: the default runs/ is made a link to
    $NCA_INTERP_RUNS, a folder the checkout does not hold; a cleared target is made again, a
    real runs/ folder or another --runs is left as it is."""
    from nca_interp.errors import UsageError
    from nca_interp.paper.reproduce import runs_home

    work, home = tmp_path / "checkout", tmp_path / "cache" / "runs"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("NCA_INTERP_RUNS", str(home))
    runs_home("runs")
    assert (work / "runs").is_symlink() and (work / "runs").resolve() == home.resolve()
    (work / "runs" / "sokoban_base").mkdir()
    assert (home / "sokoban_base").is_dir()
    home.rename(tmp_path / "gone")  # the cache was cleared
    runs_home("runs")
    assert home.is_dir()
    runs_home("elsewhere")
    assert not (work / "elsewhere").exists()
    (work / "runs").unlink()
    (work / "runs").mkdir()  # a runs/ of the user's own: used as it is
    runs_home("runs")
    assert not (work / "runs").is_symlink()
    (work / "runs").rmdir()
    (work / "runs").write_text("")
    with pytest.raises(UsageError, match="is a file"):
        runs_home("runs")


def test_keeping_and_restoring_never_touch_a_folder_of_the_temporary_names_of_old(tmp_path,
                                                                                  tok):
    """`kept` once staged in `.NAME.tmp` / `.NAME.restore.tmp`, removed first: a user's
    folder of that name went, and a link there was written through."""
    import os

    run = finished_run(tmp_path, tok)
    store = tmp_path / "kept"
    victim = tmp_path / "victim"
    victim.mkdir()
    store.mkdir()
    (store / f".{run.name}.tmp").mkdir()
    (store / f".{run.name}.tmp" / "mine.txt").write_text("mine")
    os.symlink(victim, run.parent / f".{run.name}.restore.tmp")
    kept.save(run, store)
    assert (store / f".{run.name}.tmp" / "mine.txt").read_text() == "mine"
    fresh = tmp_path / "fresh" / run.name
    fresh.parent.mkdir()
    os.symlink(victim, fresh.parent / f".{run.name}.restore.tmp")
    assert kept.restore(fresh, store)
    assert list(victim.iterdir()) == [] and latest_step_checkpoint(fresh) is not None
    assert not list(store.glob(".nca-tmp-*")) and not list(fresh.parent.glob(".nca-tmp-*"))


def test_nothing_is_kept_through_a_link(tmp_path, tok):
    """A linked adapter/ or metrics.jsonl was copied as what it pointed to into the kept run,
    which the repository publishes (SECURITY in #71's fifth probe)."""
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "id_rsa").write_text("SECRET")
    for name, target in (("adapter", secret), ("metrics.jsonl", secret / "id_rsa")):
        run = finished_run(tmp_path / name, tok)
        (run / name).unlink(missing_ok=True)
        (run / name).symlink_to(target)
        with pytest.raises(UsageError, match="is a symbolic link"):
            kept.save(run, tmp_path / "kept")
        assert not (tmp_path / "kept" / run.name).exists()


def test_a_kept_record_naming_a_path_outside_the_run_is_refused(tmp_path, tok):
    """kept.json's merged_sha256 named ../../victim/model.safetensors and the restore wrote
    the merged model there (SECURITY in #71's fifth probe); a record without its base was a
    KeyError."""
    import json

    run = finished_run(tmp_path, tok)
    store = tmp_path / "kept"
    dest = kept.save(run, store)
    good = {"base": {"name": "smollm2-135m-instruct", "content_digest": "0" * 64},
            "merged_sha256": {"model.safetensors": "0" * 64}}
    for record, needle in (
            ({**good, "merged_sha256": {"../../../victim/model.safetensors": "0" * 64}},
             "which is no weight file of the kept run"),
            ({"merged_sha256": good["merged_sha256"]}, "is damaged"),
            ({"x": [1]}, "is damaged")):
        (dest / kept.RECORD).write_text(json.dumps(record))
        with pytest.raises(UsageError, match=needle):
            kept.restore(tmp_path / "clone" / run.name, store)
    assert not (tmp_path / "victim").exists()


# -- the sixth probe's cases (#71) -------------------------------------------------------------

def test_a_link_in_a_kept_run_is_never_restored_through(tmp_path, tok):
    """A kept run's metrics.jsonl linked to a file outside it (in a clone: anyone's link) was
    restored as that file's content, which a later `save` publishes (SECURITY)."""
    secret = tmp_path / "id_rsa"
    secret.write_text("SECRET")
    run = finished_run(tmp_path, tok)
    store = tmp_path / "kept"
    dest = kept.save(run, store)
    (dest / "metrics.jsonl").unlink(missing_ok=True)
    (dest / "metrics.jsonl").symlink_to(secret)
    fresh = tmp_path / "clone" / run.name
    with pytest.raises(UsageError, match="metrics.jsonl is a symbolic link"):
        kept.restore(fresh, store)
    assert not fresh.exists() and not list(fresh.parent.glob(".nca-tmp-*"))


def test_a_restore_onto_a_link_is_refused_before_work(tmp_path, tok):
    run = finished_run(tmp_path, tok)
    store = tmp_path / "kept"
    kept.save(run, store)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for target in (elsewhere, tmp_path / "nowhere"):  # was [Errno 20] after the copy
        fresh = tmp_path / "clone" / run.name
        fresh.parent.mkdir(exist_ok=True)
        fresh.unlink(missing_ok=True)
        fresh.symlink_to(target)
        with pytest.raises(UsageError, match="is a symbolic link"):
            kept.restore(fresh, store)
    assert not any(elsewhere.iterdir())


def test_a_step_folder_is_kept_as_its_manifest_lists_it(tmp_path, tok):
    """A stray .env and a pipe in the last step folder were copied into the kept run (the
    repository) or ended in a list of tuples printed as the error."""
    run = finished_run(tmp_path, tok)
    last = latest_step_checkpoint(run)
    (last / ".env").write_text("TOKEN=secret")
    (last / "junk.bin").write_bytes(b"\0" * 1000)
    os.mkfifo(last / "pipe")
    dest = kept.save(run, tmp_path / "kept")
    names = {p.name for p in (dest / "checkpoints" / last.name).iterdir()}
    assert not names & {".env", "junk.bin", "pipe"} and "model.safetensors" in names
    assert weights_digest(dest / "checkpoints" / last.name) == weights_digest(last)


def test_a_link_at_the_kept_name_is_refused_before_work(tmp_path, tok):
    run = finished_run(tmp_path, tok)
    store = tmp_path / "kept"
    store.mkdir()
    (store / run.name).symlink_to(tmp_path / "nowhere")  # was [Errno 20] after the merge
    with pytest.raises(UsageError, match="exists: a kept run is never overwritten"):
        kept.save(run, store)


def test_a_killed_save_or_restore_leaves_no_stage_behind_the_next(tmp_path, tok):
    """A save or restore killed with SIGKILL left its stage (a LoRA teacher's merged weights)
    in the repository's checkpoints/ or beside the run for ever."""
    import subprocess
    import sys

    from nca_interp.fsio import new_stage

    def killed_stage(folder):  # a stage as a killed process leaves it: marked, its pid gone
        folder.mkdir(parents=True, exist_ok=True)
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True).stdout.strip()
        stage = new_stage(folder)
        gone = stage.with_name(stage.name.replace(f"-{os.getpid()}-", f"-{dead}-"))
        stage.rename(gone)
        (gone / ".nca-temporary").write_text(gone.name)
        (gone / "model.safetensors").write_bytes(b"\0" * 100)
        return gone

    run = finished_run(tmp_path, tok)
    store = tmp_path / "kept"
    left = killed_stage(store)
    kept.save(run, store)
    assert not left.exists()
    fresh = tmp_path / "clone" / run.name
    left = killed_stage(fresh.parent)
    assert kept.restore(fresh, store)
    assert not left.exists()


def test_an_adapter_config_that_is_not_its_weights_is_one_line(tmp_path, tok):
    """A kept adapter's config edited to r 10^12 tried to allocate 128 TB (a traceback); r -1
    and a NaN alpha were peft's message or "other bits"."""
    import json

    pytest.importorskip("peft")
    from nca_interp import lora
    from nca_interp.checkpoint import CheckpointError

    folder = tmp_path / "adapter"
    lora.save_adapter(lora.wrap(tiny(tok, arch="llama"), 2, 4.0), folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    lora.check_adapter(folder, config)
    for fields, needle in (({"r": 10**12}, "says rank 1000000000000, but"),
                           ({"r": -1}, "r is -1, not a rank"),
                           ({"lora_alpha": float("nan")}, "lora_alpha is nan"),
                           ({"lora_dropout": 2}, "lora_dropout is 2")):
        (folder / "adapter_config.json").write_text(json.dumps({**config, **fields}))
        with pytest.raises(CheckpointError, match=needle):
            lora.restore(tiny(tok, arch="llama"), folder)


def test_a_lora_runs_adapter_is_kept_as_its_manifest_lists_it(tmp_path, tok, monkeypatch):
    """A stray .env beside a LoRA run's adapter was published with it, and a pipe there was a
    list of tuples for an error."""
    import json

    from nca_interp.checkpoint import write_manifest

    run = finished_run(tmp_path, tok)
    last = latest_step_checkpoint(run)
    for folder in (run, last):
        config = json.loads((folder / "run_config.json").read_text())
        (folder / "run_config.json").write_text(json.dumps({**config, "lora_rank": 2}))
        (folder / "adapter").mkdir()
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            (folder / "adapter" / name).write_text("{}")
        write_manifest(folder)
    (run / "adapter" / ".env").write_text("TOKEN=secret")
    os.mkfifo(run / "adapter" / "pipe")
    monkeypatch.setattr(kept, "_keep_adapter_only", lambda *a, **k: None)
    dest = kept.save(run, tmp_path / "kept")
    assert sorted(p.name for p in (dest / "adapter").iterdir()) == \
        ["adapter_config.json", "adapter_model.safetensors"]


def test_a_record_naming_a_step_the_kept_run_lacks_is_named_where_it_lives(tmp_path, tok):
    import json

    run = finished_run(tmp_path, tok)
    store = tmp_path / "kept"
    dest = kept.save(run, store)
    (dest / kept.RECORD).write_text(json.dumps({
        "base": {"name": "tinybase", "content_digest": "0" * 64},
        "merged_sha256": {"checkpoints/step_000009/model.safetensors": "0" * 64}}))
    with pytest.raises(UsageError, match="holds no adapter beside it"):  # was the copy's path
        kept.restore(tmp_path / "clone" / run.name, store)
