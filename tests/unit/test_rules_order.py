"""The rule book's order and its few-clusters rule where the re-judgement of #70 found the text
and the code apart (nca_interp/paper/rules.py), on synthetic data with known answers:
- the smallest effect's absence shown comes before the straddling units (sokoban_xl's
  "longer": every seed within 0.2% of 0, each interval short of the 5% margin);
- a seed's reads_c, accuracy and regime intervals from fewer than FEW_CLUSTERS units follow
  the CR1 t interval, the report's percentile bootstrap widened where no per-item outcomes
  are kept (sysprompt_kb0_beta0p1's "NCA still reads c");
- the heads claim counts its seeds as trained (the coverage rule; its tests are in
  tests/unit/test_claims.py, beside the updates' order);
- the reproduction page's verdict lines group claims after Holm (#70's D3).
Each fails when its rule is weakened: the straddling rule checked first, the widening factor
set to 1, the coverage counted over the seeds patched."""

import json

import numpy as np
import pytest

from nca_interp import bootstrap, evaluate, regimes
from nca_interp.bootstrap import cluster_t_interval, t_quantile
from nca_interp.paper import claims, judge, rules
from nca_interp.paper.claims import stats

# -- order: the smallest effect's absence before the straddling units ------------------------

def test_an_absence_shown_wins_over_straddling_units():
    # no seed clear, none against, each interval short of the margin: too small to count
    assert rules.verdict([False] * 3, against=[False] * 3, effect=0.0004, margin=0.05,
                         reach=False) == "not reproduced"
    # the mean on the wrong side, every interval short of the margin: shown absent too
    assert rules.verdict([False] * 3, against=[False] * 3, effect=-0.003, margin=0.02,
                         reach=False) == "not reproduced"
    # an interval reaching the margin: the straddling units decide, the data cannot tell
    assert rules.verdict([False] * 3, against=[False] * 3, effect=0.0004, margin=0.05,
                         reach=True) == "inconclusive"
    # coverage and the constant still come first
    assert rules.verdict([False], total=3, effect=0.0, margin=0.05,
                         reach=False) == "not measurable"
    assert rules.verdict([False] * 3, constant=True, effect=0.0, margin=0.05,
                         reach=False) == "not measurable"


def test_the_pooled_path_takes_the_absence_shown_first():
    """rules.pooled (the every-seed rule's pooled path, matched drift): a mean on the wrong
    side with every interval short of the margin is shown absent, not left to partly's side."""
    assert rules.pooled(False, [False] * 3, mean_on_side=False, effect=-0.01, margin=0.02,
                        reach=False) == "not reproduced"
    # short of the margin on the claimed side, an interval reaching it: the data cannot tell
    assert rules.pooled(False, [False] * 3, effect=0.01, margin=0.02,
                        reach=True) == "inconclusive"
    # a lucky unit clear and the mean short: still not partly
    assert rules.pooled(False, [True, False, False], effect=0.01, margin=0.02,
                        reach=False) == "not reproduced"


def test_the_verdicts_line_groups_claims_after_holm_and_names_the_raw_word(tmp_path,
                                                                          monkeypatch):
    """#70's D3: the "Verdicts here" line (then the README's, now docs/reproduction.md's)
    gave raw verdicts unlabelled; it groups by the verdict after Holm, the raw word said
    beside a claim Holm changed."""
    from nca_interp.paper.claims import Claim

    found = [Claim("A differs (x)", "m", "n", "reproduced", p=0.008, holm="inconclusive"),
             Claim("B holds", "m", "n", "reproduced", p=1e-9, holm="reproduced"),
             Claim("C untested", "m", "n", "not measurable")]
    monkeypatch.setattr(claims, "judged", lambda figs: found)
    (tmp_path / "context_return.json").write_text("{}")
    line = claims.verdict_line(tmp_path)
    assert line == ("Verdicts here, after Holm over this setting's tested claims: "
                    "**reproduced**: B holds. **inconclusive**: A differs (reproduced before "
                    "Holm). **not measurable**: C untested.")


def _len_report(rel, ci):
    return {"correct_no_c": 0.9, "correct_c": 0.9, "harm": 0.05, "regime": "C",
            "delta_c": 0.0, "rel_len_both": rel, "len_c": 10.2, "len_no_c": 10,
            "ci95": {"correct_no_c": [0.85, 0.95], "correct_c": [0.85, 0.95], "harm": [0, 0.1],
                     "delta_c": [-0.02, 0.02], "rel_len_both": list(ci)}}


def test_sokoban_xl_longer_is_not_reproduced_too_small_to_count(tmp_path):
    """#70's B1: step 0 -2.3% (the null is 0); seeds +0.1% [-0.1, +0.2], +0.2% [-0.0, +0.4],
    -0.1% [-0.4, +0.2]: each straddles 0 and excludes the 5% margin."""
    runs = {"t_base": _len_report(-0.023, (-0.03, -0.016)),
            "t_opd_s0": _len_report(0.001, (-0.001, 0.002)),
            "t_opd_s1": _len_report(0.002, (-0.0001, 0.004)),
            "t_opd_s2": _len_report(-0.001, (-0.004, 0.002))}
    (tmp_path / "context_return.json").write_text(json.dumps({"results": runs}))
    c = claims.longer(tmp_path)
    assert c.verdict == "not reproduced"
    assert "too small to count" in c.reason and "+5.0%" in c.reason


# -- few clusters: the widening of a report's percentile interval ----------------------------

def test_the_widening_factor_is_t_over_z_with_the_cr1_correction():
    for g in (8, 12):
        want = t_quantile(0.975, g - 1) * np.sqrt(g / (g - 1)) / judge.Z95
        assert bootstrap.few_cluster_factor(g) == pytest.approx(want)
    assert bootstrap.few_cluster_factor(8) == pytest.approx(1.29, abs=0.005)
    assert bootstrap.few_cluster_factor(rules.FEW_CLUSTERS) == 1.0
    lo, hi = bootstrap.widened(0.3, 0.1, 0.4, 8)  # each half from the point
    assert (0.3 - lo) == pytest.approx(0.2 * bootstrap.few_cluster_factor(8))
    assert (hi - 0.3) == pytest.approx(0.1 * bootstrap.few_cluster_factor(8))


def test_the_factor_matches_the_bootstrap_against_cr1_on_simulated_facts():
    """On 8 equal clusters the percentile bootstrap's half-width times the factor is the
    CR1 t half-width (within resampling error): the factor converts one into the other."""
    rng = np.random.default_rng(0)
    units = [f"f{u}" for u in range(8) for _ in range(6)]
    v = rng.normal(size=48) + np.repeat(rng.normal(size=8), 6)
    _, t_lo, t_hi = cluster_t_interval(v, units)
    b_lo, b_hi, _ = stats.interval(stats.boot_mean(v, units))
    assert (b_hi - b_lo) * bootstrap.few_cluster_factor(8) == pytest.approx(t_hi - t_lo, rel=0.08)


BETA0P1 = ((0.302, 0.0625, 0.604), (0.208, 0.0208, 0.458), (0.3125, 0.0625, 0.625))


def _control(tmp_path, cells, n_units):
    reps = {"t_base": {"control": {"reads_c": 0.6, "reads_c_ci95": [0.4, 0.8]}}}
    for i, (v, lo, hi) in enumerate(cells):
        reps[f"t_nca_s{i}"] = {"n_units": n_units,
                               "control": {"reads_c": v, "reads_c_ci95": [lo, hi]}}
    (tmp_path / "context_control.json").write_text(json.dumps({"results": reps}))
    return tmp_path


def test_reads_c_over_eight_facts_without_items_is_widened_to_inconclusive(tmp_path):
    """sysprompt_kb0_beta0p1 (#70's A1): each seed's percentile interval over 8 facts lies
    above 0, so it read "reproduced"; widened by the few-clusters rule every seed reaches 0."""
    c = claims.nca_reads_context(_control(tmp_path, BETA0P1, 8))
    assert c.verdict == "inconclusive"
    assert "few-clusters rule" in c.reason
    assert c.coverage == (3, 3)
    # from 30 units up the report's interval stands: the same numbers read reproduced
    assert claims.nca_reads_context(_control(tmp_path, BETA0P1, 40)).verdict == "reproduced"


def test_reads_c_from_kept_items_is_the_cr1_t_interval(tmp_path):
    units = [f"f{u}" for u in range(8) for _ in range(6)]
    rng = np.random.default_rng(1)
    c = (rng.random(48) < 0.7).astype(int).tolist()
    ctl = (rng.random(48) < 0.4).astype(int).tolist()
    e = stats.control_unit({"reads_c": 0.0, "reads_c_ci95": [0.0, 0.0]},
                           {"unit": units, "correct_c": c, "correct_control": ctl}, 8)
    m, lo, hi = cluster_t_interval(np.subtract(c, ctl), units)
    assert (e.point, e.lo, e.hi) == pytest.approx((m, lo, hi))


def test_evaluate_writes_the_t_interval_under_few_clusters():
    assert bootstrap.FEW_CLUSTERS == rules.FEW_CLUSTERS
    rng = np.random.default_rng(2)
    units = [f"f{u}" for u in range(8) for _ in range(6)]
    c, ctl = rng.random(48) < 0.7, rng.random(48) < 0.4
    got = evaluate.reads_c_interval(c, ctl, units, [9.0, 9.0])
    _, lo, hi = cluster_t_interval(c.astype(float) - ctl, units)
    assert got == pytest.approx([lo, hi])
    many = [f"f{u}" for u in range(40) for _ in range(2)]
    c2, ctl2 = rng.random(80) < 0.7, rng.random(80) < 0.4
    assert evaluate.reads_c_interval(c2, ctl2, many, [0.1, 0.2]) == [0.1, 0.2]


def test_a_regime_under_few_clusters_follows_the_t_interval():
    """sysprompt_kb1's OPD seeds read "A" from percentile intervals over 8 facts whose upper
    ends sat just below 0; widened (no per-item outcomes) they reach 0: regime C."""
    class Entry(dict):
        items_ = None

        def __getattr__(self, k):
            return self[k]

    r = Entry(correct_no_c=0.53, correct_c=0.29, delta_c=-0.24, n_units=8,
              n_correct_no_c=51, regime="A", ci95={"delta_c": [-0.5, -0.02]})
    assert regimes.regime(r) == "C"
    r["n_units"] = 40  # the report's own interval stands from 30 units up
    assert regimes.regime(r) == "A"


def test_breaks_pool_the_control_reports_items_where_the_return_report_keeps_none(tmp_path):
    """#70's D5 (facts): the context-return report keeps no per-item outcomes, its control
    report of the same evaluation does (the same accuracies): the pooled drop is the items'
    cluster interval, not the t interval over the seeds' points; unequal accuracies: not."""
    units = [f"f{u}" for u in range(12) for _ in range(4)]
    rng = np.random.default_rng(3)
    runs, items = {}, {}
    for s in range(3):
        no_c = (rng.random(48) < 0.8).astype(int)
        with_c = no_c * (rng.random(48) < 0.6)
        runs[f"t_opd_s{s}"] = {"correct_no_c": no_c.mean(), "correct_c": with_c.mean(),
                               "harm": 0.4, "regime": "A", "delta_c": with_c.mean() - no_c.mean(),
                               "ci95": {"delta_c": [-0.6, -0.2], "harm": [0.2, 0.6]}}
        items[f"t_opd_s{s}"] = {"unit": units, "correct_no_c": no_c.tolist(),
                                "correct_c": with_c.tolist()}
    base = {"correct_no_c": 0.5, "correct_c": 0.9, "harm": 0.1, "regime": "B", "delta_c": 0.4,
            "ci95": {"delta_c": [0.3, 0.5], "harm": [0.0, 0.2]}}
    (tmp_path / "context_return.json").write_text(json.dumps(
        {"results": {"t_base": base, **runs}}))
    ctl = {k: {**v, "items": items[k]} for k, v in runs.items()}
    (tmp_path / "context_control.json").write_text(json.dumps(
        {"results": {"t_base": base, **ctl}}))
    diff, by_seed, by_unit = [], [], []
    for i, it in enumerate(items.values()):
        diff += list(np.subtract(it["correct_c"], it["correct_no_c"]))
        by_seed += [f"{i}|{u}" for u in it["unit"]]
        by_unit += units
    want = stats.cluster_pooled(diff, [by_seed, by_unit], 3)
    assert f"pooled {want}" in claims.degrades(tmp_path).measured
    ctl["t_opd_s0"]["correct_c"] += 0.01  # not the same evaluation: the return report's own
    (tmp_path / "context_control.json").write_text(json.dumps(
        {"results": {"t_base": base, **ctl}}))
    assert f"pooled {want}" not in claims.degrades(tmp_path).measured
