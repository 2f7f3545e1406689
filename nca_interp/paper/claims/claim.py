"""The claim type every family returns, and the small helpers that read a report's runs and write a
table cell.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nca_interp.errors import UsageError
from nca_interp.identity import others, roster, students
from nca_interp.paper import rules

__all__ = ["Claim", "base_of", "count_verdict", "not_run", "runs_of", "seeds_text", "spread_text"]


@dataclass(frozen=True)
class Claim:
    """One claim judged on one setting: what was measured, against which null, and the
    verdict, a word of the rule book's closed set (`rules.VERDICTS`) with its reason apart.
    `coverage` is (units judged, units) where the rule counts units; `detectable` the
    minimum detectable effect where a `nca_interp.paper.judge` test decides; `also` holds verdicts
    under other thresholds (e.g. the share of step 0's gap closed beside the paper's
    threshold),
    as (threshold, verdict word, reason). Tables, the referee page and the summary render
    this; none reads a verdict back out of text."""

    name: str
    measured: str
    null: str
    verdict: str
    reason: str = ""
    coverage: tuple[int, int] | None = None
    also: tuple[tuple[str, str, str], ...] = field(default=())
    detectable: str = ""  # the smallest effect its deciding interval detects at 80% power
    # its type in the rule book (`rules.SPECS`: quantity, unit, null, claimed side, deciding
    # rule, margin and its source); `claims.claims` sets it from the function that judged it
    spec: str = ""
    # the p of the test its verdict rests on (rules: multiplicity; None: its rule tests
    # nothing), and its verdict after Holm over its setting's family with the threshold
    # ("" until `claims.corrected` sets them)
    p: float | None = None
    holm: str = ""
    holm_note: str = ""

    def __post_init__(self):
        for word in (self.verdict, *(v for _, v, _ in self.also), *([self.holm] * bool(
                self.holm))):
            if word not in rules.VERDICTS:
                raise UsageError(f"verdict {word!r} is not one of {', '.join(rules.VERDICTS)}")
        if self.spec and self.spec not in rules.SPECS:
            raise UsageError(f"claim type {self.spec!r} is not in the rule book "
                             f"({', '.join(rules.SPECS)})")

    @property
    def typed(self) -> rules.Spec | None:
        """The rule book's type of this claim (None: untyped)."""
        return rules.SPECS.get(self.spec)

    @property
    def cell(self) -> str:
        """The verdict as a table shows it: the word, then its reason in parentheses, then
        each other threshold's verdict."""
        text = self.verdict + (f" ({self.reason})" if self.reason else "")
        for threshold, word, reason in self.also:
            text += f"; {threshold}: {word}" + (f" ({reason})" if reason else "")
        return text



def not_run(name: str, needs: str, command: str) -> Claim:
    """A claim whose input (`needs`) this setting did not produce; `command` makes it."""
    return Claim(name, "not run", f"needs {needs}", "not run", f"`{command}`")


def runs_of(rep: Mapping, method: str) -> list[Any]:
    return [r for _, r in students(rep, method)]



def base_of(rep: Mapping) -> Any:
    """The report's first entry that is no student (the teacher, step 0)."""
    return others(rep)[0][1]



def spread_text(vals: list[float], pct: bool = False) -> str:
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    f = (lambda v: f"{100 * v:+.1f}%") if pct else (lambda v: f"{v:.3f}")
    return f(vals[0]) if len(vals) == 1 else f"{f(float(np.mean(vals)))} ({f(min(vals))} to " \
        f"{f(max(vals))}, n={len(vals)})"



def count_verdict(flags: list[bool], mean_on_side: bool = True, total: int | None = None,
                  against: list[bool] | None = None, **margin) -> str:
    """The rule book's verdict (nca_interp/paper/rules.py, stated in docs/method.md);
    `margin`: the smallest-effect rule's effect, margin and reach (`rules.verdict`)."""
    return rules.verdict(flags, mean_on_side, total, against, **margin)



def seeds_text(rep: dict, method: str) -> str:
    who = roster(rep)
    seeds = sorted(str(who[n].seed) for n, _ in students(rep, method))
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(seeds)
