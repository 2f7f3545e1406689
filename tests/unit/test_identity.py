"""nca_interp.identity: who a run is, from its run config; readers take it from a report's
`runs`, never from a key's spelling (a folder name is read only for report files written
before reports carried `runs`)."""

import json
from dataclasses import dataclass

from nca_interp import analysis, identity


@dataclass
class _Config:
    ckpt: tuple = ()


def test_legacy_names_name_setting_method_and_seed():
    i = identity.legacy_of_name("sokoban_long_opd_s10")
    assert (i.setting, i.method, i.seed, i.student) == ("sokoban_long", "opd", 10, True)
    assert identity.legacy_of_name("sysprompt_kb0_size_opdsized2_s3").method == "opdsized"
    for teacher in ("sokoban_base", "smollm2-135m-instruct", "random_init", "x_nca_s"):
        assert not identity.legacy_of_name(teacher).student
    assert not identity.legacy_of_name("a_opdsized_s1").of_method()  # only when asked for
    assert identity.legacy_of_name("a_opdsized_s1").of_method("opdsized")


def _run(root, name, **config):
    run = root / name
    (run / "checkpoints" / "step_000048").mkdir(parents=True)
    (run / "run_config.json").write_text(json.dumps(config))
    return run


def test_a_run_config_gives_beta_and_estimator_and_a_step_folder_its_run(tmp_path):
    run = _run(tmp_path, "facts_rule_beta0p3_nca_s2", method="nca", seed=2, beta=0.3,
               beta_effective=0.3, kl="full")
    i = identity.of_path(run / "checkpoints" / "step_000048")
    assert (i.setting, i.method, i.seed, i.beta, i.estimator, i.step) == (
        "facts_rule_beta0p3", "nca", 2, 0.3, "full", 48)
    assert not identity.of_path(tmp_path / "my_model").student  # no run config: not a student


def test_the_config_not_the_name_decides(tmp_path):
    """A folder named like an OPD run but trained as NCA is NCA; a user's folder name with no
    pipeline suffix is still a student of its recorded method; the size control's role wins
    over its loss's method."""
    odd = identity.of_path(_run(tmp_path, "looks_opd_s0", method="nca", seed=5, kl="full"))
    assert (odd.method, odd.seed, odd.setting) == ("nca", 5, None)
    mine = identity.of_path(_run(tmp_path, "my_student", method="opd", seed=1))
    assert (mine.method, mine.seed, mine.student) == ("opd", 1, True)
    sized = identity.of_path(_run(tmp_path, "kb_size_opdsized2_s3", method="opd",
                                  role="opdsized", seed=3))
    assert (sized.method, sized.setting, sized.of_method()) == ("opdsized", "kb_size", False)


def test_readers_take_identity_from_the_reports_runs(tmp_path):
    a = _run(tmp_path, "first", method="opd", seed=0)
    b = _run(tmp_path, "second", method="nca", seed=0)
    c = _run(tmp_path, "third", method="nca", seed=1)
    rep = analysis.make_report(_Config(), task="t", context="c", paths={
        "teacher": tmp_path / "teacher", "first": a, "second": b, "third": c},
        results={"teacher": {"v": -1}, "first": {"v": 0}, "second": {"v": 1},
                 "third": {"v": 2}})
    assert [k for k, _ in identity.students(rep)] == ["first", "second", "third"]
    assert [k for k, _ in identity.students(rep, "nca")] == ["second", "third"]
    assert [k for k, _ in identity.others(rep)] == ["teacher"]
    assert identity.partner(rep, "second", "opd") == ("first", {"v": 0})
    assert identity.partner(rep, "third", "opd") is None  # no OPD of seed 1
    assert identity.by_name(rep)["third"].seed == 1
    # an entry's own identity (a trajectory's) adds what `runs` lacks
    rep["results"]["third"]["identity"] = {"beta": 0.5}
    assert identity.roster(rep)["third"].beta == 0.5
