"""#70: one regime for evaluate's tables and the rule book's verdicts. On 8 units the percentile
cluster bootstrap of accuracy with c - without lies below 0 (regime A by it alone) while the
few-clusters rule's CR1 t interval reaches 0 (regime C): evaluate writes C, its table, the
figure page's per-seed table and the claims print C, also for a report written before, whose
own `regime` field still says A. Fails when evaluate reads its percentile bootstrap again."""

import json

import numpy as np

from nca_interp import evaluate
from nca_interp.bootstrap import cluster_t_interval
from nca_interp.paper import claims
from nca_interp.paper import report as pages
from nca_interp.paper.layout import CONTEXT_RETURN
from nca_interp.regimes import regime, regime_of

UNITS = [f"u{u}" for u in range(8) for _ in range(4)]  # 8 clusters of 4 items
NO_C = [0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0, 1, 0, 0, 1,
        0, 1]
WITH_C = [0, 0, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 0, 0, 0, 1, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0,
          1, 0, 1]


def _view(won: list[int]) -> dict:
    n = len(won)
    return {"won": np.array(won), "length": np.full(n, 10), "parsed": np.ones(n)}


def _entry() -> dict:
    """evaluate's entry for these items, as a report file holds it."""
    r = evaluate.paired_report(_view(NO_C), _view(WITH_C), UNITS, "fact")
    return {**r, "metric": "accuracy"}


def test_the_bootstrap_and_the_few_clusters_rule_differ_here():
    lo, hi = _entry()["ci95"]["delta_c"]
    assert hi < 0 and regime_of([lo, hi], sum(NO_C)) == "A"
    _, t_lo, t_hi = cluster_t_interval(np.subtract(WITH_C, NO_C), UNITS)
    assert t_lo < 0 < t_hi


def test_evaluate_writes_and_prints_the_regime_the_claims_read():
    r = _entry()
    assert r["regime"] == "C"
    assert regime({**r, "items": {"unit": UNITS, "correct_no_c": NO_C,
                                  "correct_c": WITH_C}}) == "C"
    table = evaluate.format_table({"opd": r})
    assert table.splitlines()[1].split()[-1] == "C"


def test_a_report_written_before_reads_the_same_regime_everywhere(tmp_path):
    """An older report recorded the bootstrap's A and no per-item outcomes: every table and the
    claims re-read it by the rule (its interval widened over 8 units reaches 0)."""
    old = {**_entry(), "regime": "A"}
    runs = {f"t_opd_s{s}": old for s in range(3)}
    base = {**old, "correct_no_c": 0.5, "correct_c": 0.9, "delta_c": 0.4, "regime": "B",
            "ci95": {**old["ci95"], "delta_c": [0.3, 0.5]}}
    (tmp_path / CONTEXT_RETURN).write_text(json.dumps(
        {"analysis": "evaluate", "config": {}, "task": "t", "context": "c", "runs": {},
         "results": {"t_base": base, **runs}}))
    assert regime(old) == "C"
    assert evaluate.format_table(runs).splitlines()[1].split()[-1] == "C"
    rows = [line for line in pages.per_seed(tmp_path).splitlines() if "t_opd_s" in line]
    assert len(rows) == 3 and all("| C |" in line and "| A |" not in line for line in rows)
    assert "regimes C C C" in claims.degrades(tmp_path).measured
