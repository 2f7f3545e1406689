"""The rule book's two tests on synthetic data whose right verdict is known: a clear effect,
an absence shown within the margin, an underpowered sample, a collapse that few units cannot
show alone, a loss beyond a keeping margin."""

import numpy as np
import pytest

from nca_interp.paper.judge import (
    Z95,
    Estimate,
    detectable,
    effect,
    equivalent,
    more_data,
    within_band,
)


def seeds(true: float, sd_item: float, n_items: int, n_seeds: int, rng) -> tuple:
    """Per-seed means of `n_items` noisy items and the pooled estimate over all of them, each
    with its 95% normal interval."""
    units, pooled = [], []
    for _ in range(n_seeds):
        x = rng.normal(true, sd_item, n_items)
        se = x.std(ddof=1) / np.sqrt(n_items)
        units.append(Estimate(x.mean(), x.mean() - 1.96 * se, x.mean() + 1.96 * se))
        pooled.append(x)
    x = np.concatenate(pooled)
    se = x.std(ddof=1) / np.sqrt(len(x))
    return units, Estimate(x.mean(), x.mean() - 1.96 * se, x.mean() + 1.96 * se, n_seeds)


@pytest.mark.parametrize("true, n_items, want", [
    (-0.30, 400, "reproduced"),       # a clear drop, every seed shows it
    (0.00, 4000, "not reproduced"),   # no effect, enough data to exclude a 0.05 one
    (-0.30, 2, "inconclusive"),       # a large drop on 2 items a seed: the data cannot tell
])
def test_effect_separates_shown_absent_and_underpowered(true, n_items, want):
    rng = np.random.default_rng(0)
    units, pooled = seeds(true, 1.0, n_items, 4, rng)
    got = effect(units, pooled, null=0.0, direction=-1, margin=0.05)
    assert got.verdict == want, got
    if want == "inconclusive":
        assert "would decide" in got.reason


def test_a_pooled_effect_with_a_minority_of_seeds_clear_is_partly():
    units = [Estimate(-0.1, -0.2, -0.01), Estimate(-0.1, -0.25, 0.05),
             Estimate(-0.1, -0.22, 0.02)]
    got = effect(units, Estimate(-0.1, -0.15, -0.05, 3), 0.0, -1, 0.05)
    assert got.verdict == "partly" and "1 of 3" in got.reason


def test_the_wrong_side_is_not_reproduced_whatever_the_margin():
    got = effect([Estimate(0.2, 0.1, 0.3)], None, 0.0, -1, 0.05)
    assert got.verdict == "not reproduced"


def test_equivalence_needs_the_90_interval_inside_the_margin():
    shown = equivalent([Estimate(0.0, -0.01, 0.01)], None, 0.0, 0.05)
    assert shown.verdict == "reproduced"
    lost = equivalent([Estimate(-0.2, -0.25, -0.15)], None, 0.0, 0.05, sides="lower")
    assert lost.verdict == "not reproduced"
    wide = equivalent([Estimate(0.0, -0.3, 0.3)], None, 0.0, 0.05)
    assert wide.verdict == "inconclusive" and "would decide" in wide.reason
    # "keeps" is one-sided: a gain is not a failure to keep
    assert equivalent([Estimate(0.2, 0.15, 0.25)], None, 0.0, 0.05,
                      sides="lower").verdict == "reproduced"
    assert equivalent([Estimate(0.2, 0.15, 0.25)], None, 0.0, 0.05).verdict == "not reproduced"


def test_an_interval_that_only_reaches_the_null_does_not_keep():
    """The old `kept` rule: an interval reaching the null was 'kept', so fewer items kept
    more easily. Equivalence asks the interval to lie inside the margin instead."""
    few = equivalent([Estimate(-0.1, -0.4, 0.2)], None, 0.0, 0.05, sides="lower")
    assert few.verdict == "inconclusive"


def test_more_data_grows_with_noise_and_shrinks_with_the_distance():
    e = Estimate(0.0, -0.2, 0.2, 4)
    assert more_data(e, 0.05) > more_data(e, 0.1) > 1
    assert more_data(Estimate(0.0, -0.4, 0.4, 4), 0.1) > more_data(e, 0.1)
    # a large drop with a wide interval needs a few times the data, not thousands of seeds
    wide = Estimate(-0.35, -0.75, 0.1, 4)
    assert 2 < more_data(wide, 0.35) < 5


def test_a_simulated_null_is_rarely_called_an_effect():
    """Calibration: with no effect, 'reproduced' comes up in about 2.5% of samples or less
    (the one-sided error of a 95% interval); with a real effect of twice the margin on
    enough items, in nearly all."""
    rng = np.random.default_rng(1)
    null_hits = sum(effect(*seeds(0.0, 1.0, 50, 3, rng), 0.0, 1, 0.2).verdict == "reproduced"
                    for _ in range(400))
    assert null_hits / 400 < 0.04
    real = sum(effect(*seeds(0.4, 1.0, 200, 3, rng), 0.0, 1, 0.2).verdict == "reproduced"
               for _ in range(100))
    assert real >= 95


def test_an_angle_band_is_shown_refuted_straddled_or_underpowered():
    """within_band on synthetic seeds whose right verdict is known: inside 75-105, wholly
    outside, straddling with a clear seed (partly), straddling with none (inconclusive), and
    a straddling interval whose point lies outside the band (not reproduced)."""
    def seeds(*cells):
        units = [Estimate(a, lo, hi) for a, lo, hi in cells]
        return units, Estimate(np.mean([u.point for u in units]), min(u.lo for u in units),
                               max(u.hi for u in units), len(units))

    inside = [(90, 85, 95)] * 3
    assert within_band(*seeds(*inside), 75, 105).verdict == "reproduced"
    assert within_band(*seeds(*[(40, 30, 50)] * 3), 75, 105).verdict == "not reproduced"
    units, _ = seeds((90, 85, 95), (95, 70, 104), (90, 72, 103))
    straddle = Estimate(92, 72, 104, 3)
    assert within_band(units, straddle, 75, 105).verdict == "partly"
    units, _ = seeds((90, 60, 120), (92, 62, 118), (88, 58, 121))
    j = within_band(units, Estimate(90, 60, 120, 3), 75, 105)
    assert j.verdict == "inconclusive" and "would decide" in j.reason
    assert within_band(units, Estimate(70, 60, 80, 3), 75, 105).verdict == "not reproduced"


def test_every_judgement_carries_its_minimum_detectable_effect():
    """(z95 + z80) se of the deciding interval: a 95% interval of half-width 0.1 detects a
    true effect of 0.143 four times in five."""
    e = Estimate(0.0, -0.1, 0.1)
    assert detectable(e) == pytest.approx(0.1 / Z95 * (Z95 + 0.8416), rel=1e-4)
    assert effect([e], None, 0.0, 1, 0.05).mde == pytest.approx(0.143, abs=1e-3)
    assert equivalent([e], None, 0.0, 0.05).mde == detectable(e)
    assert within_band([Estimate(90, 80, 100)], None, 75, 105).mde > 0


def test_a_verdict_on_the_bootstraps_edge_takes_the_wider_reading_and_says_so():
    """An interval whose end sits within the resampling's own error of the null: its verdict
    must not depend on the bootstrap seed, so the wider (outer) reading decides, said as 'on
    the edge'; where the outer ends change nothing, nothing is said."""
    unit = Estimate(-0.3, -0.5, -0.1)
    edge = Estimate(-0.24, -0.5, -0.029, 4, outer=(-0.52, 0.0))
    j = effect([unit] * 4, edge, 0.0, -1, 0.02)
    assert j.verdict == "inconclusive" and "on the edge" in j.reason
    assert "the 95% interval alone gives reproduced" in j.reason
    firm = Estimate(-0.24, -0.5, -0.1, 4, outer=(-0.52, -0.09))
    j = effect([unit] * 4, firm, 0.0, -1, 0.02)
    assert j.verdict == "reproduced" and "edge" not in j.reason


def test_an_effect_clear_of_0_but_below_the_margin_is_no_change():
    """The margin is the smallest change the claim is about: an interval clear of 0 yet wholly
    below it shows a change too small to count (sokoban_long's reads_c [0.0005, 0.014])."""
    from nca_interp.paper.judge import Estimate, effect

    tiny = [Estimate(0.007, 0.0005, 0.014)] * 3
    j = effect(tiny, Estimate(0.007, 0.0005, 0.014), 0.0, 1, 0.02)
    assert j.verdict == "not reproduced" and "below the margin" in j.reason
    big = [Estimate(0.1, 0.05, 0.15)] * 3
    assert effect(big, Estimate(0.1, 0.05, 0.15), 0.0, 1, 0.02).verdict == "reproduced"


def test_a_counted_claim_without_units_has_no_detectable_effect():
    from nca_interp.paper.judge import mde_of_halfwidths

    assert mde_of_halfwidths([]) is None  # a setting that trained no OPD (a beta variant)
    assert abs(mde_of_halfwidths([1.959964]) - 2.801585) < 1e-5
