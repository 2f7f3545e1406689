import numpy as np
import pytest

from nca_interp.evaluate import format_markdown, format_table, paired_report


def views(won0, won1, len0=None, len1=None):
    n = len(won0)
    return ({"won": np.array(won0, bool), "length": np.array(len0 or [4.0] * n),
             "parsed": np.ones(n, bool)},
            {"won": np.array(won1, bool), "length": np.array(len1 or [4.0] * n),
             "parsed": np.ones(n, bool)})


def test_paired_metrics_by_hand():
    a, b = views([1, 1, 0, 0, 1], [1, 0, 1, 0, 1], [4, 4, 4, 4, 4], [5, 4, 4, 4, 6])
    r = paired_report(a, b, n_boot=50)
    assert r["win_no_c"] == 0.6 and r["win_c"] == 0.6
    assert r["harm"] == 0.2 and r["help"] == 0.2 and r["both"] == 0.4
    assert r["flip"] == pytest.approx(1 / 3)
    assert r["rel_len"] == pytest.approx(23 / 20 - 1)
    assert r["rel_len_both"] == pytest.approx(11 / 8 - 1)


def test_regimes_from_bootstrap_interval():
    n = 400
    hurts = paired_report(*views([1] * n, [1] * 300 + [0] * 100))
    needed = paired_report(*views([0] * n, [1] * 300 + [0] * 100))
    neither = paired_report(*views([1, 0] * 200, [1, 0] * 200))
    assert (hurts["regime"], needed["regime"], neither["regime"]) == ("A", "B", "C")
    lo, hi = hurts["ci95"]["harm"]
    assert lo <= hurts["harm"] <= hi
    assert "regime" in format_table({"x": hurts}) and "|" in format_markdown({"x": hurts})
