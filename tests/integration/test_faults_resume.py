"""A resume never trains on damage: every resume point is checked against its manifest, the
inputs against the digests the run recorded, and --steps against what the run holds. Each case
was SILENT or a TRACEBACK in the fault probe of issue #49."""

import json
import shutil
from pathlib import Path

import pytest

from nca_interp.checkpoint import save_checkpoint, verify_folder
from nca_interp.cli import entry
from nca_interp.errors import RunError, UsageError
from tests.conftest import tiny
from tests.integration.test_faults import TASK, args, same, snapshot
from train import distill


@pytest.fixture
def base(tok, tmp_path):
    return save_checkpoint(tmp_path / "base", tiny(tok), tok, {"task": TASK})


@pytest.fixture
def run2(base, tmp_path):
    """A run of two saved steps (step_000001 without its optimizer moments, as every
    superseded checkpoint)."""
    out = tmp_path / "run"
    distill.main(args(base, out, steps=2))
    return out


def flip_byte(f: Path, at: int = -10) -> None:
    data = bytearray(f.read_bytes())
    data[at] ^= 0xFF
    f.write_bytes(bytes(data))


@pytest.mark.parametrize("name", ["model.safetensors", "trainer_state.safetensors",
                                  "trainer_state.json"])
def test_a_damaged_newest_checkpoint_is_refused_before_any_step(base, run2, name):
    f = run2 / "checkpoints" / "step_000002" / name
    flip_byte(f, -3 if name.endswith(".json") else -10)
    before = snapshot(run2)
    with pytest.raises(RunError, match=rf"{name}.*--resume-from .*step_000001"):
        distill.main(args(base, run2, steps=4))
    assert snapshot(run2) == before  # nothing trained, nothing republished


def test_a_truncated_newest_checkpoint_is_one_line(base, run2, capsys):
    f = run2 / "checkpoints" / "step_000002" / "model.safetensors"
    f.write_bytes(f.read_bytes()[:100])
    assert entry(distill.main, args(base, run2, steps=4)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "truncated or corrupt" in err and "Traceback" not in err


def test_resume_from_falls_back_to_an_intact_checkpoint_when_asked(base, run2):
    flip_byte(run2 / "checkpoints" / "step_000002" / "model.safetensors")
    step1 = run2 / "checkpoints" / "step_000001"
    distill.main([*args(base, run2, steps=3), "--resume-from", str(step1)])
    assert (run2 / "checkpoints" / "step_000003").is_dir()
    verify_folder(run2 / "checkpoints" / "step_000002")  # retrained from step 1, intact
    moved = list((run2 / "checkpoints" / "discarded").iterdir())
    assert [p.name.split("-")[0] for p in moved] == ["step_000002"]  # kept, not deleted
    log = [json.loads(ln) for ln in (run2 / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "event" not in r] == [1, 2, 3]
    assert any("fresh optimizer" in r.get("event", "") for r in log)
    assert same(run2 / "model.safetensors",
                run2 / "checkpoints" / "step_000003" / "model.safetensors")


def test_resume_from_must_name_a_step_of_this_run(base, run2, tmp_path):
    with pytest.raises(UsageError, match="not a step checkpoint of"):
        distill.main([*args(base, run2, steps=3), "--resume-from", str(base)])


def test_a_teacher_retrained_in_place_is_refused_on_resume(base, tok, tmp_path):
    teacher = save_checkpoint(tmp_path / "teacher", tiny(tok, seed=3), tok, {"task": TASK})
    out = tmp_path / "run"
    distill.main([*args(base, out, steps=1), "--teacher", str(teacher)])
    recorded = json.loads((out / "run_config.json").read_text())["inputs"]
    assert set(recorded) == {"--student", "--teacher"}
    save_checkpoint(teacher, tiny(tok, seed=4), tok, {"task": TASK})  # retrained in place
    before = snapshot(out)
    with pytest.raises(UsageError, match="--teacher .* has changed"):
        distill.main([*args(base, out, steps=2), "--teacher", str(teacher)])
    assert snapshot(out) == before


def test_fewer_steps_than_the_run_holds_is_refused(base, run2):
    with pytest.raises(UsageError, match="--steps 1 is fewer than the 2 steps"):
        distill.main(args(base, run2, steps=1))
    distill.main(args(base, run2, steps=2))  # the same command again: done, nothing refused


def test_a_half_written_metrics_line_does_not_block_resume(base, run2):
    with open(run2 / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "loss": 0.')  # a kill mid-append
    distill.main(args(base, run2, steps=3))
    steps = [json.loads(ln)["step"] for ln in (run2 / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]


def test_a_checkpoint_copied_without_its_manifest_is_not_a_resume_point(base, run2):
    """A step folder without its manifest is a save killed half-way: it is skipped, and the
    run resumes from the last complete one."""
    half = run2 / "checkpoints" / "step_000003"
    shutil.copytree(run2 / "checkpoints" / "step_000002", half)
    (half / "nca_checkpoint.json").unlink()
    (half / "model.safetensors").write_bytes(b"garbage")
    shutil.rmtree(half)
    distill.main(args(base, run2, steps=3))
    assert (run2 / "checkpoints" / "step_000003" / "nca_checkpoint.json").exists()


def test_a_step_that_lost_its_manifest_is_damage_not_a_save_in_progress(base, run2):
    """The manifest deleted (as an old message once advised): the run is refused before the
    root is republished from an earlier step, and --resume-from moves the step aside."""
    (run2 / "checkpoints" / "step_000002" / "nca_checkpoint.json").unlink()
    before = snapshot(run2)
    with pytest.raises(RunError, match=r"step_000002 has lost its nca_checkpoint.json.*"
                                       r"--resume-from .*step_000001"):
        distill.main(args(base, run2, steps=4))
    assert snapshot(run2) == before
    distill.main([*args(base, run2, steps=3), "--resume-from",
                  str(run2 / "checkpoints" / "step_000001")])
    moved = [p.name.split("-")[0] for p in (run2 / "checkpoints" / "discarded").iterdir()]
    assert moved == ["step_000002"]


def test_a_newest_step_without_optimizer_state_is_refused_not_half_resumed(base, run2):
    from nca_interp.checkpoint import drop_optimizer_state

    drop_optimizer_state(run2 / "checkpoints" / "step_000002")  # manifest kept consistent
    before = snapshot(run2)
    with pytest.raises(RunError, match="holds no optimizer state"):
        distill.main(args(base, run2, steps=4))
    assert snapshot(run2) == before
