"""The rule book's statistical tests: a verdict word comes from one of two tests, applied to
the per-seed estimates (the seed is the unit of replication; items and checkpoints are nested
inside it) and to the estimate pooled over seeds.

- `effect`: is the quantity clear of its null on the side the paper claims? Three answers:
  shown (the 95% interval clear of the null), absent (the interval excludes every effect as
  large as the claim's smallest effect of interest, `margin`: an absence shown, not assumed),
  or **inconclusive** (the interval reaches both the null and an effect of that size), with
  the number of seeds that would decide.
- `equivalent`: is the quantity within `margin` of its null (a "keeps", "near-identical" or
  "no harm" claim)? A TOST-style test: shown when the 90% interval (two one-sided 5% tests)
  lies inside the margin, refuted when the 95% interval lies wholly beyond it, inconclusive
  otherwise.

Where the pooled estimate is shown, **reproduced** also needs a majority of the seeds shown on
their own; a minority makes it **partly**. Every margin is stated by the claim that uses it,
with where it comes from (`nca_interp/paper/rules.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from nca_interp.errors import UsageError

__all__ = ["Z95", "Z_POWER", "Estimate", "Judgement", "effect", "equivalent", "mde_of_halfwidths",
           "within_band"]

Z95 = 1.959963984540054  # two-sided 95%
Z90 = 1.6448536269514722  # two-sided 90% (each side 5%: the TOST interval)
Z_POWER = 0.8416212335729143  # 80% power


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its 95% interval; `n`: the units (seeds, or clusters) behind it."""

    point: float
    lo: float
    hi: float
    n: int = 1
    # a bootstrap interval's ends moved out by the resampling's own error
    # (nca_interp.paper.claims.stats: EDGE): where the verdict differs between the two, it sits on
    # the edge of the bootstrap
    outer: tuple[float, float] | None = None

    def __post_init__(self):
        if not self.lo <= self.point <= self.hi:
            raise UsageError(f"interval [{self.lo}, {self.hi}] does not hold {self.point}")

    def widened(self) -> Estimate:
        """The same estimate with its interval at the outer ends."""
        lo, hi = self.outer or (self.lo, self.hi)
        return Estimate(self.point, min(lo, self.lo), max(hi, self.hi), self.n)

    @property
    def se(self) -> float:
        """The standard error a symmetric 95% interval of this width has."""
        return (self.hi - self.lo) / (2 * Z95)

    def at90(self) -> tuple[float, float]:
        """The 90% interval of the same width's normal approximation, around the point."""
        return self.point - Z90 * self.se, self.point + Z90 * self.se

    def __str__(self) -> str:
        return f"{self.point:+.3f} [{self.lo:+.3f}, {self.hi:+.3f}]"


@dataclass(frozen=True)
class Judgement:
    verdict: str  # a word of rules.VERDICTS
    reason: str = ""
    mde: float | None = None  # the smallest effect the deciding interval detects (80% power)
    p: float | None = None  # the p of the test the verdict rests on (rules: multiplicity)


def detectable(est: Estimate) -> float:
    """The minimum detectable effect of `est`'s data: (z95 + z80) se, the true effect a 95%
    interval of this width clears its null with 80% probability."""
    return (Z95 + Z_POWER) * est.se


def more_data(est: Estimate, target: float) -> float | None:
    """How many times the data behind `est` (seeds, or items per seed where the items' spread
    dominates) a 95% interval needs to stand `target` away from where it must clear, with 80%
    power: ((z95 + z80) se / target)^2 (the interval narrows as one over the root of the
    data)."""
    if target <= 0 or est.se <= 0:
        return None
    return max(1.0, ((Z95 + Z_POWER) * est.se / target) ** 2)


def _more(est: Estimate, target: float) -> str:
    k = more_data(est, target)
    return "" if k is None else f"; about {k:.1f}x the data (seeds or items) would decide"


def _decider(units: list[Estimate], pooled: Estimate | None, margin: float) -> Estimate:
    """The estimate a verdict rests on: the pooled one, or the single unit where none."""
    if margin <= 0:
        raise UsageError(f"margin must be > 0, not {margin}")
    if pooled is None and len(units) != 1:
        raise UsageError("several units need their pooled estimate")
    return pooled if pooled is not None else units[0]


def _side(est: Estimate, null: float, direction: int) -> str:
    lo, hi = (est.lo - null, est.hi - null) if direction > 0 else (null - est.hi, null - est.lo)
    return "clear" if lo > 0 else "against" if hi < 0 else "straddles"


def _effect(units: list[Estimate], pooled: Estimate | None, null: float, direction: int,
           margin: float, what: str = "seeds") -> Judgement:
    """The claim "the quantity lies beyond `null` in `direction` (+1 above, -1 below)".
    `pooled` (over `units`) decides; where there is none, the single unit does. `margin`: the
    smallest effect the claim is about (an effect below it is absent for the claim's
    purpose)."""
    if direction not in (1, -1):
        raise UsageError(f"direction must be +1 or -1, not {direction}")
    decide = _decider(units, pooled, margin)
    clear = sum(_side(u, null, direction) == "clear" for u in units)
    of = f"{clear} of {len(units)} {what} clear on their own"
    side = _side(decide, null, direction)
    beyond = decide.hi - null if direction > 0 else null - decide.lo  # the largest effect left
    if beyond < margin:  # below the margin is "no change" for the claim, even when clear of 0
        return Judgement("not reproduced", f"the interval excludes an effect of {margin:g}"
                         + ("; it lies on the other side" if side == "against" else
                            "; clear of 0 but below the margin" if side == "clear" else ""))
    toward = (decide.point - null) * direction  # the estimate's distance on the claimed side
    if side == "clear" and toward >= margin:
        if 2 * clear > len(units) or len(units) == 1:
            return Judgement("reproduced", of if len(units) > 1 else "")
        if clear:
            return Judgement("partly", f"pooled clear, {of}; a majority is needed")
        return Judgement("inconclusive", f"pooled clear, but {of}")
    if side == "clear":  # clear of 0, the estimate short of the margin, the interval reaching it
        return Judgement("inconclusive", f"clear of 0, but the estimate {toward:+.3f} falls "
                         f"short of the smallest effect of interest {margin:g}"
                         + _more(decide, margin - toward))
    point = abs(decide.point - null)
    # to decide, clear the null when the point lies past the margin, else exclude the margin
    target = point if point >= margin else margin - point
    return Judgement("inconclusive", f"the interval reaches both no effect and {margin:g}"
                     + _more(decide, target))


def _equivalent(units: list[Estimate], pooled: Estimate | None, null: float, margin: float,
               sides: str = "both", what: str = "seeds") -> Judgement:
    """The claim "the quantity stays within `margin` of `null`" (`sides`: both, or `lower`
    for "does not fall below null - margin", a non-inferiority claim). TOST: shown when the
    90% interval lies inside the margin; refuted when the 95% interval lies wholly beyond it;
    else inconclusive."""
    if sides not in ("both", "lower"):
        raise UsageError(f"sides must be both or lower, not {sides!r}")
    decide = _decider(units, pooled, margin)

    def inside(e: Estimate) -> bool:
        lo, hi = e.at90()
        return lo > null - margin and (sides == "lower" or hi < null + margin)

    def beyond(e: Estimate) -> bool:
        return e.hi < null - margin or (sides == "both" and e.lo > null + margin)

    shown = sum(inside(u) for u in units)
    of = f"{shown} of {len(units)} {what} within {margin:g} on their own"
    if inside(decide):
        if 2 * shown > len(units) or len(units) == 1:
            return Judgement("reproduced", of if len(units) > 1 else "")
        return Judgement("partly", f"pooled within {margin:g}, {of}; a majority is needed")
    if beyond(decide):
        return Judgement("not reproduced", f"the interval lies beyond the margin {margin:g}")
    room = margin - abs(decide.point - null)
    return Judgement("inconclusive", f"the interval reaches past the margin {margin:g}"
                     + (_more(decide, room * Z95 / Z90) if room > 0 else
                        "; the estimate itself lies at or past the margin"))


def _band_side(e: Estimate, lo: float, hi: float) -> str:
    if lo <= e.lo and e.hi <= hi:
        return "clear"
    return "against" if e.hi < lo or e.lo > hi else "straddles"


def _within_band(units: list[Estimate], pooled: Estimate | None, lo: float, hi: float,
                what: str = "seeds") -> Judgement:
    """The claim "the quantity lies inside [lo, hi]" (an angle near 90 degrees). Shown when
    the deciding interval (pooled, or the single unit) lies inside the band; refuted when it
    lies wholly outside, or straddles a bound with its point outside (the mean on the wrong
    side); when it straddles with its point inside, **partly** if some unit is clear on its
    own, else **inconclusive**."""
    if not lo < hi:
        raise UsageError(f"an empty band [{lo}, {hi}]")
    decide = _decider(units, pooled, hi - lo)
    status = [_band_side(u, lo, hi) for u in units]
    clear = status.count("clear")
    of = (f"{clear} of {len(units)} {what} inside {lo:g}-{hi:g} on their own, "
          f"{status.count('straddles')} straddling a bound")
    side = _band_side(decide, lo, hi)
    if side == "clear":
        if 2 * clear > len(units) or len(units) == 1:
            return Judgement("reproduced", of if len(units) > 1 else "")
        return Judgement("partly", f"pooled inside, {of}; a majority is needed")
    if side == "against":
        return Judgement("not reproduced", f"the interval lies outside {lo:g}-{hi:g}; {of}")
    if not lo <= decide.point <= hi:
        return Judgement("not reproduced", f"the estimate lies outside {lo:g}-{hi:g}; {of}")
    if clear:
        return Judgement("partly", f"the pooled interval straddles a bound; {of}")
    room = min(decide.point - lo, hi - decide.point)
    return Judgement("inconclusive", f"the interval straddles a bound; {of}"
                     + (_more(decide, room) if room > 0 else ""))


def mde_of_halfwidths(halfwidths: list[float]) -> float | None:
    """The minimum detectable effect of a counted claim's units: (z95 + z80) standard errors,
    the standard error read back from each unit's 95% half-width, averaged over the units
    (None: no unit)."""
    if not halfwidths:
        return None
    return float(sum(halfwidths) / len(halfwidths)) * (Z95 + Z_POWER) / Z95


def _effect_p(e: Estimate, null: float, direction: int, *_, **__) -> float:
    """The effect rule's p: the two-sided p of `e`'s interval against `null` (rules.interval_p)."""
    from nca_interp.paper import rules

    return rules.interval_p(e.point, e.lo, e.hi, null, direction)


def _equivalent_p(e: Estimate, null: float, margin: float, sides: str = "both", *_, **__
                  ) -> float:
    """TOST's p: the one-sided p of `e` (its symmetric standard error, as `at90`) against
    null - margin, and against null + margin too where `sides` is both (the larger)."""
    from nca_interp.paper import rules

    lo, hi = e.point - Z95 * e.se, e.point + Z95 * e.se
    p = rules.interval_p(e.point, lo, hi, null - margin, 1, sides=1)
    return p if sides == "lower" else max(p, rules.interval_p(e.point, lo, hi, null + margin,
                                                              -1, sides=1))


def _band_p(e: Estimate, lo: float, hi: float, *_, **__) -> float:
    """The band's p: inside both bounds, the larger of the two bounds' two-sided p's."""
    from nca_interp.paper import rules

    return max(rules.interval_p(e.point, e.lo, e.hi, lo, 1),
               rules.interval_p(e.point, e.lo, e.hi, hi, -1))


def _with_mde(judge_fn, p_fn):
    def run(units, pooled, *args, **kw) -> Judgement:
        j = judge_fn(units, pooled, *args, **kw)
        decide = pooled if pooled is not None else units[0]
        tested = decide
        if decide.outer is not None:  # a bootstrap interval: is the verdict on its edge?
            wide = decide.widened()
            edge = judge_fn(units, wide, *args, **kw) if pooled is not None else \
                judge_fn([wide], None, *args, **kw)
            if edge.verdict != j.verdict:  # the conservative (wider) reading, said so
                j = replace(edge, reason="; ".join(x for x in (
                    edge.reason, f"on the edge: the 95% interval alone gives {j.verdict}, "
                    f"with its ends moved out by the bootstrap's own error {edge.verdict}, "
                    "the reading taken here") if x))
                tested = wide
        kw.pop("what", None)
        return replace(j, mde=detectable(decide), p=p_fn(tested, *args, **kw))
    run.__doc__, run.__name__ = judge_fn.__doc__, judge_fn.__name__.lstrip("_")
    return run


effect = _with_mde(_effect, _effect_p)
equivalent = _with_mde(_equivalent, _equivalent_p)
within_band = _with_mde(_within_band, _band_p)
