"""nca_interp.identity: who a run is, from its run config or (for report keys) its name."""

import json

from nca_interp import identity


def test_report_keys_name_setting_method_and_seed():
    i = identity.of_name("sokoban_long_opd_s10")
    assert (i.setting, i.method, i.seed, i.student) == ("sokoban_long", "opd", 10, True)
    assert identity.of_name("sysprompt_kb0_size_opdsized2_s3").method == "opdsized"
    for teacher in ("sokoban_base", "smollm2-135m-instruct", "random_init", "x_nca_s"):
        assert not identity.of_name(teacher).student
    assert identity.is_student("a_nca_s1", "nca") and not identity.is_student("a_nca_s1", "opd")
    assert not identity.is_student("a_opdsized_s1")  # the size control only when asked for
    assert identity.is_student("a_opdsized_s1", "opdsized")


def test_a_run_config_gives_beta_and_estimator_and_a_step_folder_its_run(tmp_path):
    run = tmp_path / "facts_rule_beta0p3_nca_s2"
    (run / "checkpoints" / "step_000048").mkdir(parents=True)
    (run / "run_config.json").write_text(json.dumps(
        {"method": "nca", "seed": 2, "beta": 0.3, "beta_effective": 0.3, "kl": "full"}))
    i = identity.of_path(run / "checkpoints" / "step_000048")
    assert (i.setting, i.method, i.seed, i.beta, i.estimator, i.step) == (
        "facts_rule_beta0p3", "nca", 2, 0.3, "full", 48)
    assert not identity.of_path(tmp_path / "my_model").student  # no run config: not a student


def test_an_entry_carrying_its_identity_wins_over_its_key_and_partners_pair_by_seed():
    own = identity.RunId("renamed", "s", "nca", 4).to_dict()
    assert identity.of("renamed", {"identity": own}).seed == 4
    entries = {"t_base": {}, "t_opd_s0": {"v": 0}, "t_opd_s1": {"v": 1}, "t_nca_s1": {}}
    assert identity.partner("t_nca_s1", entries, "opd") == ("t_opd_s1", {"v": 1})
    assert identity.partner("t_nca_s2", entries, "opd") is None
    assert [k for k, _ in identity.students(entries, "opd")] == ["t_opd_s0", "t_opd_s1"]
