"""Harm against drift (nca_interp.paper.dose): the course over seeds and the methods at matched
drift, on a constructed trajectory whose answers are known."""

import json

import pytest

from nca_interp.errors import UsageError
from nca_interp.paper import dose


def step(s, drift, harm, correct_c=0.5, help_=0.3, correct_no_c=0.4):
    return {"step": s, "drift": drift, "correct_no_c": correct_no_c, "correct_c": correct_c,
            "harm": harm,
            "help": help_, "rel_len_both": 0.0, "reads_c": 0.1, "n_correct_no_c": 3}


def trajectory():
    def runs(method, seed, beta, steps):
        return {f"{method}_s{seed}": {"identity": {"method": method, "seed": seed,
                                                    "beta": beta}, "steps": steps}}

    return {"results": {
        **runs("opd", 0, 0.0, [step(0, 0.0, None), step(8, 0.1, 0.2), step(16, 0.3, 0.6)]),
        **runs("nca", 0, 1.0, [step(0, 0.0, None), step(8, 0.2, 0.1), step(16, 0.5, 0.0)]),
        **runs("opd", 1, 0.0, [step(0, 0.0, None), step(8, 0.2, 0.5), step(16, 0.4, 0.5)]),
        **runs("nca", 1, 1.0, [step(0, 0.0, None), step(8, 0.3, 0.6, correct_c=0.8),
                               step(16, 0.35, None)]),
    }}


def test_matched_drift_interpolates_the_same_seeds_reference_inside_its_range_only():
    result = dose.run(trajectory())
    harm = result["matched"]["nca - opd"]["harm"]
    # seed 0: NCA at drift 0.2 against OPD's 0.4 interpolated (0.5 is outside OPD's range);
    # seed 1: NCA at 0.3 against OPD's 0.5; its step 16 has no harm
    assert harm["per_seed"] == {0: pytest.approx(-0.3), 1: pytest.approx(0.1)}
    assert harm["pairs"] == 2 and harm["below_0"] == 1
    assert harm["mean"] == pytest.approx(-0.1)


def test_the_course_is_per_method_and_step_with_the_independence_baseline():
    result = dose.run(trajectory())
    c = result["course"]["nca"][8]
    assert c["n_seeds"] == 2
    assert c["harm"]["mean"] == pytest.approx(0.35)
    assert c["baseline"]["min"] == pytest.approx(0.2) and c["baseline"]["max"] == 0.5
    assert result["course"]["opd"][0]["harm"] is None  # nothing right without c: undefined
    assert "| nca | 8 | 2 |" in dose.markdown(result)


def test_an_nca_beta_other_than_one_is_its_own_method():
    t = trajectory()
    t["results"]["nca_s1"]["identity"]["beta"] = 0.3
    result = dose.run(t)
    assert set(result["course"]) == {"opd", "nca", "nca beta 0.3"}
    assert set(result["matched"]) == {"nca - opd", "nca beta 0.3 - opd"}


def test_a_trajectory_without_identity_or_drift_is_refused(tmp_path):
    t = trajectory()
    del t["results"]["opd_s0"]["identity"]
    with pytest.raises(UsageError, match="method and seed"):
        dose.run(t)
    t = trajectory()
    del t["results"]["opd_s0"]["steps"][1]["drift"]
    with pytest.raises(UsageError, match="drift"):
        dose.run(t)
    with pytest.raises(UsageError, match="no such trajectory"):
        dose.main([str(tmp_path / "missing.json")])


def test_the_command_writes_table_json_and_figure(tmp_path):
    (tmp_path / "t.json").write_text(json.dumps(trajectory()))
    dose.main([str(tmp_path / "t.json"), "--out", str(tmp_path / "hd")])
    assert "matched drift" in (tmp_path / "hd.md").read_text()
    assert json.loads((tmp_path / "hd.json").read_text())["matched"]
    assert (tmp_path / "hd.html").exists()


def with_ci(s, half):
    """A step whose quantities carry a 95% interval of half-width `half`."""
    s["ci95"] = {q: [s[q] - half, s[q] + half] for q in dose.MATCHED if s[q] is not None}
    return s


def test_each_seeds_half_width_combines_both_runs_without_narrowing_over_checkpoints():
    t = trajectory()
    for name, half in (("opd_s0", 0.04), ("nca_s0", 0.03), ("opd_s1", 0.05), ("nca_s1", 0.01)):
        for s in t["results"][name]["steps"]:
            with_ci(s, half)
    harm = dose.run(t)["matched"]["nca - opd"]["harm"]
    # one matched checkpoint per seed: the two half-widths in quadrature
    assert harm["half"] == {0: pytest.approx(0.05), 1: pytest.approx(0.0509902)}
    assert dose.clear_seeds(harm) == (1, 1)  # seed 0: -0.3 + 0.05 < 0; seed 1: 0.1 - 0.051 > 0
    lo, hi = harm["t95"]  # two seeds: t with 1 degree of freedom, 12.706 * sd / sqrt(2)
    assert (lo + hi) / 2 == pytest.approx(-0.1)
    assert (hi - lo) / 2 == pytest.approx(12.706 * 0.4 / 2)
    assert harm["seeds"] == [0, 1]


def test_a_seed_without_intervals_is_not_clear_either_way():
    harm = dose.run(trajectory())["matched"]["nca - opd"]["harm"]
    assert harm["half"] == {} and dose.clear_seeds(harm) == (0, 0)


def test_the_t_quantiles_are_students():
    """The table's 0.975 quantiles against Student's t cdf integrated numerically."""
    from math import gamma, pi, sqrt

    import numpy as np

    for df, q in enumerate(dose.T975, start=1):
        x = np.linspace(0, q, 200_001)  # the density is symmetric: cdf(q) = 1/2 + int_0^q
        pdf = gamma((df + 1) / 2) / (sqrt(df * pi) * gamma(df / 2)) * (1 + x**2 / df) ** (
            -(df + 1) / 2)
        assert 0.5 + np.trapezoid(pdf, x) == pytest.approx(0.975, abs=1e-4)
