"""The tenth probe's cases on what a run records (#71, /work/notes/probe10.md): a teacher
retrained in place, a run config's relative data path, a chat template that drops the system
message, a task option too long to be a path. Each failed before its fix."""

import pytest

from nca_interp.checkpoint import content_digest, save_checkpoint
from nca_interp.errors import UsageError
from tests.conftest import tiny


def _recorded(path) -> dict:
    return {"path": str(path.resolve()), "sha256": content_digest(path)}


@pytest.mark.parametrize("self_distilled", [False, True])
def test_a_runs_teacher_retrained_in_place_is_refused(tmp_path, tok, self_distilled):
    """Q-F: probe 9's Q-D check compared the run's start, not its teacher. A teacher retrained
    at the recorded path (or, in self-distillation, the start) was read by grad_align and
    trajectory as the run's teacher with exit 0: angles and KLs against another model."""
    from nca_interp import grad_align
    from nca_interp.runs import teacher_of

    base = save_checkpoint(tmp_path / "base", tiny(tok), tok)
    teacher = base if self_distilled else save_checkpoint(tmp_path / "T", tiny(tok, seed=3), tok)
    inputs = {"--student": _recorded(base)}
    if not self_distilled:
        inputs["--teacher"] = _recorded(teacher)
    run = save_checkpoint(tmp_path / "run", tiny(tok, seed=1), tok, run_config={
        "task": {"name": "sokoban"}, "context": "plan", "student": str(base),
        "teacher": None if self_distilled else str(teacher), "inputs": inputs})
    assert teacher_of(str(run), None) == str(teacher)  # unchanged: read
    was = content_digest(teacher)
    save_checkpoint(teacher, tiny(tok, seed=9), tok)  # the same path, another model
    for read in (lambda: teacher_of(str(run), None),
                 lambda: grad_align.run(ckpt=[str(run)], batch=4, parts=2, threads=1,
                                        out=str(tmp_path / "ga"))):
        with pytest.raises(UsageError, match="has changed since.*not this run's teacher") as e:
            read()
        assert was in str(e.value) and content_digest(teacher) in str(e.value)
        assert "--teacher" in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "ga.json").exists()
    assert teacher_of(str(run), str(teacher)) == str(teacher)  # named on purpose: read
