"""Teachers kept in git (nca_interp.paper.kept): the copy holds the run's weights (its digest is
the run's), drops Adam's moments, never overwrites, and is restored only where nothing is."""

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
    save_checkpoint(run, model, tok, {"task": {"name": "sokoban"}})  # replaces the folder
    save_checkpoint(run / "checkpoints" / "step_000004", model, tok, {"task": {"name": "sokoban"}},
                    trainer_state=state)
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
