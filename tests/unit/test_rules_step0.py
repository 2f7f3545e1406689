"""The step-0 rule of the rule book (nca_interp/paper/rules.py, #70 item 2) on synthetic
reports with known answers: step 0 measured with noise on few items widens a seed's interval
against it, relative to treating step 0's point as exact, so a seed clear of step 0's point
need not be clear of step 0. Each test fails when step 0 is read as exact again (the run's
own interval less step 0's point)."""

import numpy as np

from nca_interp.paper.claims import harm
from nca_interp.paper.claims.stats import mean_interval


class _Report(dict):
    """A context_return row as the claims read it: fields by key, `ci95`, `items_`."""

    def __init__(self, items=None, ci95=None, **fields):
        super().__init__(fields)
        self.items_, self.ci95 = items, ci95 or {}

    def __getattr__(self, key):  # an unset field reads as a missing attribute, as a report's
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


UNITS = [f"u{i}" for i in range(8) for _ in range(2)]  # 8 clusters of 2 items: few items
STUDENT = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1]  # 15 of 16
STEP0 = [1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1]  # 11 of 16: noisy, independent


def _with_items(correct_no_c: list[int]) -> _Report:
    v = np.asarray(correct_no_c, float)
    lo, hi, _ = mean_interval(v, UNITS)
    return _Report({"unit": UNITS, "correct_no_c": correct_no_c, "correct_c": correct_no_c},
                   {"correct_no_c": [lo, hi]}, correct_no_c=float(v.mean()))


def test_a_noisy_step0_on_few_items_widens_the_interval_against_it():
    base, opd = _with_items(STEP0), _with_items(STUDENT)
    (unit,), paired = harm.step0_units(base, [opd])
    assert paired
    exact_lo = opd.ci95["correct_no_c"][0] - base.correct_no_c  # step 0's point as exact
    exact_hi = opd.ci95["correct_no_c"][1] - base.correct_no_c
    assert unit.hi - unit.lo > 1.5 * (exact_hi - exact_lo)
    # the seed is clear of step 0's point, but not of step 0 measured on the same items
    assert exact_lo > 0 and unit.lo <= 0


def test_without_items_step0s_interval_enters_in_quadrature():
    base = _Report(None, {"correct_no_c": [0.45, 0.75]}, correct_no_c=0.6)
    opd = _Report(None, {"correct_no_c": [0.72, 0.88]}, correct_no_c=0.8)
    (unit,), paired = harm.step0_units(base, [opd])
    assert not paired
    assert np.isclose(unit.point, 0.2)
    assert np.isclose(unit.point - unit.lo, (0.08 ** 2 + 0.15 ** 2) ** 0.5)
    assert unit.lo < 0.72 - 0.6  # wider than the run's interval less step 0's point


def test_a_length_change_above_step0s_noisy_change_is_not_clear_by_its_point():
    base = _Report(None, {"rel_len_both": [0.0, 0.10]}, rel_len_both=0.05)
    opd = _Report(None, {"rel_len_both": [0.07, 0.11]}, rel_len_both=0.09)
    (unit,) = harm._length_units(base, [opd])
    assert opd.ci95["rel_len_both"][0] > base.rel_len_both  # clear of step 0's point
    assert unit.lo <= 0  # not of step 0 with its own interval
    # step 0's change at or below 0: the null is 0, exact
    (flat,) = harm._length_units(_Report(None, {"rel_len_both": [-0.02, 0.0]},
                                         rel_len_both=-0.01), [opd])
    assert np.isclose(flat.lo, 0.07) and np.isclose(flat.point, 0.09)
