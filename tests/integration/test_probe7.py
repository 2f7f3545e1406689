"""The seventh probe's cases (#71) and the sixth probe's open ones outside its helper's files:
each failed before its fix."""

from pathlib import Path

import pytest

from nca_interp import fetch
from tests.unit.test_fetch import NAME, fake_fetched, refetch  # noqa: F401 (a fixture)


def test_the_fetch_damage_note_states_only_the_fact(tmp_path, refetch, capsys):  # noqa: F811
    """H2v: `fetch --verify` on a copy with one flipped byte quoted verify_folder's advice,
    "run `python -m nca_interp.fetch ... --verify` and use (or copy here) the cache's folder",
    while doing just that, and called the --cache folder "outside the cache"."""
    folder = fake_fetched(tmp_path / "models" / NAME)
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 1
    weights.write_bytes(bytes(data))
    assert fetch.fetch(NAME, tmp_path, verify=True) == folder and refetch
    err = capsys.readouterr().err
    assert "is damaged (" in err and "corrupt" in err and "fetching it again" in err, err
    assert "python -m nca_interp.fetch" not in err and "outside the cache" not in err, err


def test_layer_sim_refuses_checkpoints_of_different_depths(tok, tmp_path, capsys):
    """Q2: layer_sim on a 2-layer and a 3-layer checkpoint named the layers of the first
    (the 3-layer model's fourth value had no name) and built a 2-layer random-init null."""
    from nca_interp import layer_sim
    from nca_interp.checkpoint import save_checkpoint
    from tests.conftest import tiny
    from tests.integration.test_bad_input import TASK, refused

    two = save_checkpoint(tmp_path / "two", tiny(tok), tok, {"task": TASK})
    three = save_checkpoint(tmp_path / "three", tiny(tok, n_layers=3), tok, {"task": TASK})
    err = refused(layer_sim.main, [str(two), str(three), "--n-levels", "2", "--threads", "1",
                                   "--out", str(tmp_path / "r")], capsys)
    assert "one depth" in err and "3 layers" in err and "2" in err, err
    assert not list(tmp_path.glob("r*"))


def test_a_bundle_others_can_change_is_never_loaded(tmp_path):
    """A plotly.min.js of plotly's bytes that others may write (or another user owns), or in
    a folder others may write, was loaded by every page below it: whoever can change it runs
    their script in the user's report pages."""
    import os
    import re
    import shutil

    import plotly.graph_objects as go

    from nca_interp.plots import bundle_state, ensure_plotly_bundle, write_figure

    def src(page):
        return re.findall(r'<script[^>]*src="([^"]+)"', page.read_text())

    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    cases = {"writable": 0o666, "other": 0o644}
    for name, mode in cases.items():
        up = tmp_path / name
        ensure_plotly_bundle(up)
        os.chmod(up / "plotly.min.js", mode)
        if name == "other":
            if os.getuid() != 0:
                continue
            os.chown(up / "plotly.min.js", 65534, -1)  # nobody's
        write_figure(fig, up / "sub" / "page")
        assert src(up / "sub" / "page.html") == ["plotly.min.js"], name
        assert bundle_state(up / "sub") == "ok"
    shared = tmp_path / "shared"  # a folder others may write, no sticky bit
    ensure_plotly_bundle(shared)
    os.chmod(shared, 0o777)
    write_figure(fig, shared / "sub" / "page")
    assert src(shared / "sub" / "page.html") == ["plotly.min.js"]
    here = tmp_path / "here"  # in the output folder itself: replaced by the user's own copy
    ensure_plotly_bundle(here)
    os.chmod(here / "plotly.min.js", 0o666)
    write_figure(fig, here / "page")
    assert src(here / "page.html") == ["plotly.min.js"] and bundle_state(here) == "ok"
    shutil.rmtree(shared)


def test_a_kept_run_that_fails_its_check_is_named_where_it_lives(tmp_path, tok, monkeypatch):
    """A kept run with a planted chat_template.jinja was refused naming a file in the
    restore's stage (`run/.nca-tmp-PID-X/name/...`), gone when the message was read."""
    import pytest

    from nca_interp.errors import UsageError
    from nca_interp.paper import kept
    from tests.unit.test_kept import finished_run

    monkeypatch.chdir(tmp_path)
    store = tmp_path / "kept"
    src = kept.save(finished_run(tmp_path, tok), store)
    (src / "chat_template.jinja").write_text("{{ 'planted' }}")
    with pytest.raises(UsageError) as e:
        kept.restore(Path("clone") / src.name, store)  # a relative run, as the pipeline has
    assert f"{src}/chat_template.jinja" in str(e.value) and "nca-tmp" not in str(e.value)
    assert "from git" in str(e.value) and not (tmp_path / "clone" / src.name).exists()


@pytest.mark.parametrize("key, mine, theirs", [("lr", 0.01, 0.0003),
                                               ("student", "runs/a", "runs/b")])
def test_a_step_of_another_run_of_the_same_flags_but_one_is_refused(tok, tmp_path, key, mine,
                                                                    theirs):
    """A step of another OPD run of the same seed and base at another --lr, copied into a
    run's checkpoints/, sat at step 2 of its trajectory without a word (the run identity
    compared kind, method, task, context, seed, beta and LoRA rank only)."""
    from nca_interp.checkpoint import CheckpointError, check_step_record, save_checkpoint
    from tests.conftest import tiny
    from tests.integration.test_bad_input import TASK

    config = {"task": TASK, "kind": "distill", "method": "opd", "seed": 0, key: theirs}
    run = save_checkpoint(tmp_path / "run", tiny(tok), tok, config)
    own = save_checkpoint(run / "checkpoints" / "step_000001", tiny(tok), tok,
                          {**config, "steps": 9, "threads": 4}, ({}, {"step": 1}))
    assert check_step_record(own) == 1  # a resume's free flags may differ
    other = save_checkpoint(run / "checkpoints" / "step_000002", tiny(tok), tok,
                            {**config, key: mine}, ({}, {"step": 2}))
    with pytest.raises(CheckpointError, match=f"is not a checkpoint of .*records {key}"):
        check_step_record(other)
