"""The verdict rule book: every verdict `train.claims` prints is decided by these functions,
and docs/method.md states them from `RULES` (`python -m train.claims --write` regenerates the
block), so the words and the code cannot drift apart.

A unit is what a rule counts: a seed, a checkpoint, a patched case. A unit is *clear* when its
95% interval lies on the claimed side of its null, *against* when it lies on the other side,
and *not judged* when the quantity is undefined there (harm with nothing right without c, an
angle within its noise).
"""

from __future__ import annotations

VERDICTS = ("reproduced", "partly", "inconclusive", "not reproduced", "not measurable")

# The smallest change of accuracy the "breaks" and "keeps" claims are about: two points. The
# paper counts accuracy changes from 0.6 points up as effects (NCA's gains without c: 0.6-3.6
# points in 7 of 12 settings), so a margin must sit inside that range, not above it; two points
# is the middle of it. A change below the margin is "no change" for these claims, so that an
# absence can be shown (`train.judge`) instead of assumed from an interval that reaches 0.
BREAK_MARGIN = 0.02
KEEP_MARGIN = 0.02

RULES = (
    ("every seed",
     "**reproduced** needs the effect's 95% interval clear of its null in every unit (seed, "
     "checkpoint), or a pooled interval clear of it *and* a majority of the units clear on "
     "their own; anything less is at most **partly**."),
    ("partly",
     "**partly** needs the effect on the claimed side of its null on average and at least one "
     "unit clear; a mean on the wrong side of the null is **not reproduced**, whatever single "
     "units show."),
    ("coverage",
     "a verdict that judges fewer than half of its units is **not measurable**, so a verdict is "
     "never stronger because fewer units could be judged."),
    ("effect or absence",
     "a claim that c *changes* something (OPD breaks: accuracy with c below accuracy without "
     "c, paired on the same items) is judged on the seeds' pooled estimate (a bootstrap over "
     "(seed, unit) clusters): **reproduced** when its 95% interval lies clear of no change on "
     "the claimed side and a majority of seeds are clear on their own (a minority: **partly**); "
     "**not reproduced** when the interval excludes every change as large as the claim's "
     f"margin ({BREAK_MARGIN:g} of accuracy); **inconclusive** when it reaches both, with the "
     "number of seeds that would decide (`train/judge.py`)."),
    ("equivalence",
     "a claim that something is *kept* (NCA's accuracy with c against step 0's, on the same "
     "items) is an equivalence claim, tested TOST-style: **reproduced** when the 90% interval "
     f"of the pooled difference lies above -{KEEP_MARGIN:g} (and a majority of seeds' do); "
     "**not reproduced** when the 95% interval lies wholly below it; **inconclusive** "
     "otherwise. An interval that merely reaches 0 keeps nothing: fewer items no longer make "
     "keeping easier."),
    ("harm",
     "a harm (P(wrong with c | right without c)) is OPD's own when its interval clears the "
     "step-0 model's harm on the same items *and* either accuracy with c lies below accuracy "
     "without c (regime A) or the harm also clears the independence baseline, 1 - accuracy "
     "with c of the same student: what harm is when being right with c does not depend on "
     "being right without it (a student right without c by chance is 'harmed' that much). "
     "The baseline is printed beside every harm."),
    ("matched drift",
     "a comparison of the methods *at matched drift* (NCA - OPD: each NCA checkpoint against "
     "OPD's run of the same seed interpolated at the same drift from step 0) counts seeds: a "
     "seed is clear when its mean difference lies beyond 0 by more than its conservative 95% "
     "half-width (the two runs' checkpoint intervals combined in quadrature, averaged over the "
     "checkpoints without narrowing); the pooled interval is the t interval of the seeds' "
     "means. A harm is compared only where OPD's harm is its own (the harm rule) in some "
     "seed."),
    ("reading c",
     "NCA *reads* c when its reads_c (accuracy with c minus with a wrong c of the same form) "
     "is at least half the teacher's (step 0's, across models); a student clear of 0 but under "
     "that share is close to blind, and the claim is **not reproduced** for it."),
    ("8B thresholds",
     "a threshold taken from the paper's 8B models (views near-identical at cos >= 0.997) is "
     "judged as stated *and* scaled to this model: the same share of the way from this "
     "model's different-item floor (the cosine two different items already have) to 1, "
     "(cos - floor) / (1 - floor) >= 0.997. Both verdicts are printed."),
    ("closed set",
     "a verdict is one of " + ", ".join(f"**{v}**" for v in VERDICTS) + "; its reason is "
     "written beside it, never in place of it."),
)


def verdict(flags: list[bool], mean_on_side: bool = True, total: int | None = None) -> str:
    """The verdict of units judged `flags` (True: clear of the null on the claimed side) out of
    `total` units (default: all were judged), with the mean effect on the claimed side or not."""
    total = len(flags) if total is None else total
    if not flags or 2 * len(flags) < total:
        return "not measurable"
    if not mean_on_side:
        return "not reproduced"
    if all(flags):
        return "reproduced"
    return "partly" if any(flags) else "not reproduced"


def pooled(pooled_clear: bool, unit_flags: list[bool], mean_on_side: bool = True) -> str:
    """A pooled interval clear of its null makes `reproduced` only with a majority of units
    clear on their own (`unit_flags`); else the unit rule, at most partly."""
    if not mean_on_side:
        return "not reproduced"
    majority = 2 * sum(unit_flags) > len(unit_flags)
    if pooled_clear and majority:
        return "reproduced"
    if pooled_clear or any(unit_flags):
        return "partly"
    return "not reproduced"


def independence_harm(win_c: float) -> float:
    """The harm of a student whose being right with c does not depend on being right
    without it."""
    return 1.0 - win_c


def harm_is_own(harm_lo: float | None, step0_harm: float | None, win_c: float,
                regime_a: bool) -> bool:
    """The harm rule: the harm's interval (lower end `harm_lo`) clears step 0's harm, and
    either the student is in regime A or the interval also clears the independence
    baseline. Where step 0's harm is undefined (nothing right without c at step 0) there is
    no step-0 null: the independence baseline alone decides, never a harm of 0 assumed."""
    if harm_lo is None:
        return False
    if step0_harm is None:
        return harm_lo > independence_harm(win_c)
    if not harm_lo > step0_harm:
        return False
    return regime_a or harm_lo > independence_harm(win_c)


def reads_c(mean: float, teacher: float | None, share: float = 0.5) -> bool:
    """Whether a mean reads_c counts as reading c: at least `share` of the teacher's."""
    return teacher is None or teacher <= 0 or mean >= share * teacher


def markdown() -> str:
    """The rule book as a list (docs/method.md)."""
    return "\n".join(f"- *{name}*: {text}" for name, text in RULES)
