"""The decisive table (prevents the harm while still reading c) and the rule book's together
rule: the rule on its whole truth table, the table's numbers against the published JSON read
independently of the code that wrote them."""

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest

from nca_interp.errors import UsageError
from nca_interp.paper import rules

ROOT = Path(__file__).resolve().parents[2]
WORDS = ("reproduced", "partly", "inconclusive", "not reproduced", "not measurable")


def expected(words):
    """The together rule as the rule book states it, case by case."""
    if all(w == "reproduced" for w in words):
        return "reproduced"
    if any(w == "not reproduced" for w in words):
        return "not reproduced"
    if any(w == "not measurable" for w in words):
        return "not measurable"
    if all(w in ("reproduced", "partly") for w in words):
        return "partly"
    return "inconclusive"


@pytest.mark.parametrize("words", list(itertools.product(WORDS, repeat=3)))
def test_together_is_never_stronger_than_its_weakest_part(words):
    got = rules.together(list(words))
    assert got == expected(words)
    # weakest part: reproduced only when every part is; any "not reproduced" decides
    assert (got == "reproduced") == all(w == "reproduced" for w in words)
    if "not reproduced" in words:
        assert got == "not reproduced"


def test_together_refuses_what_is_not_a_verdict():
    with pytest.raises(UsageError, match="verdict words"):
        rules.together(["reproduced", "yes"])
    with pytest.raises(UsageError, match="verdict words"):
        rules.together([])


def test_together_is_in_the_rule_book():
    assert "together" in dict(rules.RULES)
    assert "together rule" in rules.markdown() or "together" in rules.markdown()


@pytest.mark.parametrize("setting", ["sokoban_long", "sokoban_remap"])
def test_decisive_rows_match_the_json(setting):
    """Each method's seeds, mean harm, mean accuracy with c and the paired gain over step 0
    (the mean over seeds and items of with-c correctness less step 0's) are what the
    context-return JSON holds, computed here from its raw per-run entries."""
    from nca_interp.paper.claims import decisive

    figs = ROOT / "figures" / setting
    data = json.loads((figs / "context_return.json").read_text())["results"]
    base = next(v for k, v in data.items() if "_opd_" not in k and "_nca_" not in k)
    text = decisive.table(figs)
    for method in ("opd", "nca"):
        runs = [v for k, v in data.items() if f"_{method}_s" in k]
        row = next(line for line in text.splitlines() if line.startswith(f"| {method.upper()} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == str(len(runs))
        assert cells[2].startswith(f"{np.mean([r['harm'] for r in runs]):.3f}")
        assert cells[3].startswith(f"{np.mean([r['win_c'] for r in runs]):.3f}")
        gain = float(re.match(r"([+-]\d\.\d+)", cells[4]).group(1))
        if all("items" in r for r in (base, *runs)):  # paired: per item, then pooled
            key = "won_c" if "won_c" in base["items"] else "correct_c"
            diffs = [np.asarray(r["items"][key], float) - np.asarray(base["items"][key], float)
                     for r in runs]
            want = float(np.mean(np.concatenate(diffs)))
        else:
            want = float(np.mean([r["win_c"] for r in runs])) - base["win_c"]
        assert gain == pytest.approx(want, abs=6e-4)
    assert re.search(r"Together .*\*\*(reproduced|partly|inconclusive|not reproduced|"
                     r"not measurable)\*\*", text)
