"""The verdict rule book: every verdict `nca_interp.paper.claims` prints is decided by these
functions, and docs/method.md states them from `RULES` (`python -m nca_interp.paper.claims --write`
regenerates the block), so the words and the code cannot drift apart.

A unit is what a rule counts: a seed, a checkpoint, a patched case. A unit is *clear* when its
95% interval lies on the claimed side of its null, *against* when it lies on the other side,
and *not judged* when the quantity is undefined there (harm with nothing right without c, an
angle within its noise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nca_interp import bootstrap
from nca_interp.errors import UsageError

__all__ = ["ALPHA", "BREAK_MARGIN", "DEPTH_MARGIN", "DEPTH_THIRDS", "FEW_CLUSTERS", "GAP_MARGIN",
           "HARM_MARGIN", "HEADS_MARGIN", "HEADS_MIN_CASES", "KEEP_MARGIN", "LENGTH_MARGIN",
           "MIN_SEEDS", "ORTHO_BAND", "PAPER_COS_THRESHOLD", "READ_MARGIN", "RISE_MARGIN",
           "SIZE_MATCH", "SPECS", "SUPPORT_MIN", "Spec", "UPDATE_MARGIN", "VERDICTS",
           "after_holm", "beyond_chance", "closed_share", "cosine_in_range", "counted_p",
           "harm_is_own", "holm", "holm_threshold", "independence_harm", "interval_p",
           "markdown", "pooled", "prevents", "spec_table", "together", "verdict"]

VERDICTS = ("reproduced", "partly", "inconclusive", "not reproduced", "not measurable",
            "not run")

# The smallest change of accuracy the "breaks" and "keeps" claims are about: two points. The paper
# counts accuracy changes from 0.6 points up as effects (NCA's gains without c: 0.6-3.6 points in 7
# of 12 settings), so a margin must sit inside that range, not above it; two points is the middle of
# it. A change below the margin is "no change" for these claims, so that an absence can be shown
# (`nca_interp.paper.judge`) instead of assumed from an interval that reaches 0.
BREAK_MARGIN = 0.02
KEEP_MARGIN = 0.02
# reads_c (accuracy with c minus with a wrong c of c's form) is an accuracy difference too: the
# same two points decide whether NCA still reads c or is blind to it.
READ_MARGIN = 0.02

# The paper's one number on the views (/work/shared/PAPER.md, its Sokoban mechanistic case): under
# NCA "the hidden-state cosine stays near-perfect (>= 0.997) across all layers"; under OPD "a
# noticeable gap ... remains in middle and late layers" (no number). The threshold is judged as
# stated. The paper gives no cosine for its base model or its OPD student, so no share of a gap
# closed is the paper's: `closed_share` is this project's own scale-free description, printed
# beside the threshold and compared with nothing of the paper's.
PAPER_COS_THRESHOLD = 0.997


def closed_share(cos: float, cos_step0: float) -> float:
    """The share of step 0's distance to 1 that `cos` closes (1: identical views, 0: step 0's
    gap kept, below 0: a wider gap)."""
    return (cos - cos_step0) / (1.0 - cos_step0)


# The smallest later-half gap between OPD's views and NCA's that counts as the paper's
# "noticeable gap": 1 - 0.997, the distance from identity the paper itself calls near-perfect.
# A difference smaller than that lies within what the paper reads as no gap at all.
GAP_MARGIN = 1.0 - PAPER_COS_THRESHOLD
# The smallest rise in accuracy without c that counts as internalizing c: as BREAK_MARGIN, an
# accuracy change of two points (the middle of the paper's 0.6-3.6 point effects).
RISE_MARGIN = 0.02
# The smallest difference of harm (a share of the items right without c, on accuracy's scale)
# that counts as NCA preventing OPD's harm, or as OPD's harm exceeding NCA's at matched drift:
# two points, as BREAK_MARGIN.
HARM_MARGIN = 0.02
# The smallest relative length change with c that counts as answers growing longer: 5%. The
# paper gives no smallest length effect; it reports OPD's inflation "up to +39.5%" and NCA's as
# "often near zero". Our choice: an eighth of the paper's largest inflation, one token in twenty,
# which keeps the +1.1% and +2.0% means the issue cited (#70) from counting as longer answers.
LENGTH_MARGIN = 0.05
# The smallest concentration of updates in the shallow layers: the first third moving 1.25x the
# last third (Adam-normalised). The paper says only that updates "concentrate" there; our
# choice: a quarter more than uniform, five times the usual seed-to-seed spread of update size
# (1.01-1.05x, see SIZE_MATCH), so a ratio that seed noise alone gives never counts.
DEPTH_MARGIN = 0.25
# The smallest direction difference between NCA's and OPD's updates: the cross-method cosine at
# least 0.05 below the same-method (seed-to-seed) cosine. The paper gives no number; our choice:
# a cosine difference under 0.05 leaves the methods sharing over 95% as much direction as two
# seeds of one method do.
UPDATE_MARGIN = 0.05

# Two gradients are near-orthogonal when their angle lies within 15 degrees of 90: |cos| <=
# cos 75 deg = 0.26, so either carries under 7% of its squared norm along the other (cos^2 =
# 0.067). Beyond 105 degrees the NCA term pulls against OPD's by more than that share: it
# opposes OPD's term, which is not the new (orthogonal) direction the paper describes.
ORTHO_BAND = (75.0, 105.0)
# An angle says something about two gradients only where their supports overlap: given each
# module's gradient norm, the largest cosine the two can reach is sum_m |a_m| |b_m| / (|a| |b|)
# (equality when they align inside every module). Where that bound is below cos 75 deg, the
# angle lies in the band by the supports alone, and the checkpoint is not judged.
SUPPORT_MIN = 0.2588190451025208  # cos 75 deg


def cosine_in_range(cos_corrected: float | None) -> bool:
    """The noise-corrected cosine U_ab / sqrt(U_aa U_bb) is an estimate, not a cosine: it
    leaves [-1, 1] where a term's signal estimate U is within its noise (the denominator too
    small). Such a checkpoint has no angle, as a term with no signal has none; clipping it
    to 0 or 180 degrees would invent one. None (no estimate recorded) is left to the caller."""
    return cos_corrected is None or -1.0 <= cos_corrected <= 1.0

# A test's one-sided error: a permutation or random-draw p-value at or under it is clear (the
# same 5% per side as the 95% intervals everywhere else).
ALPHA = 0.05
# Seeds a claim needs before it generalises beyond the seeds run: with 2, a t interval over
# seeds is 12.7 standard errors wide; with 3, 4.3.
MIN_SEEDS = 3
# "Shallow" and "deep" are the first and last third of the layers.
DEPTH_THIRDS = 3

# The head claim chooses heads on half the harm cases and judges them on the other half: 10
# cases a half is the fewest whose answers-flipped share can clear a 20-draw random-head null.
HEADS_MIN_CASES = 20
# The smallest effect of removing the chosen heads' reading of c: answers flipped at least 0.1
# above the random heads' mean, one case in the ten of the smallest held-out half
# (HEADS_MIN_CASES / 2): a smaller difference is under one case where the claim is first judged.
HEADS_MARGIN = 2 / HEADS_MIN_CASES
# Under this many clusters an interval of a mean is the cluster-robust t interval (CR1, t on
# G - 1 degrees of freedom: `nca_interp.bootstrap.cluster_t_interval`), not the percentile
# cluster bootstrap, which under-covers with few clusters (about 86-89% at 8 in
# tests/unit/test_bootstrap.py's simulation); ~30 is where the two agree within a point. The
# library's constant: evaluate and the verdicts read one rule.
FEW_CLUSTERS = bootstrap.FEW_CLUSTERS

# Update sizes within this factor count as magnitude-matched (a direction difference between
# updates of unequal size can be a magnitude effect: a longer Adam path bends further). The
# seed-to-seed spread of a method's update size is 1.01-1.05x in every published setting but
# FrozenLake (1.17-1.33x); a tenth is twice the usual spread.
SIZE_MATCH = 1.1

@dataclass(frozen=True)
class Spec:
    """A claim as the rule book types it: the quantity measured, its unit of replication
    (what a rule counts or pools; items and checkpoints nest inside it), the null it is judged
    against, the side the paper claims, the rule of `RULES` that decides, and its margin or
    threshold with where that comes from ("" where none: any effect clear of the noise)."""

    quantity: str
    unit: str
    null: str
    direction: str
    rule: str
    margin: str = ""

    def __post_init__(self):
        if self.rule not in {name for name, _ in RULES}:
            raise UsageError(f"{self.rule!r} is not a rule of the rule book")


_BREAK = (f"BREAK_MARGIN {BREAK_MARGIN:g}: the middle of the paper's 0.6-3.6 point accuracy "
          "gains without c")
_BAND = (f"ORTHO_BAND {ORTHO_BAND[0]:g}-{ORTHO_BAND[1]:g} deg: |cos| <= 0.26, under 7% of a "
         f"squared norm along the other; SUPPORT_MIN {SUPPORT_MIN:.2f}")


def _specs() -> dict[str, Spec]:
    acc = "seed (its items nested, paired on the same items)"
    return {
        "internalizes": Spec("OPD's accuracy without c - step 0's", "seed (its items nested, "
                             "paired on the same items)", "0 (step 0 measured on the same "
                             "items: the step-0 rule)", "above", "the other counted claims",
                             f"RISE_MARGIN {RISE_MARGIN:g}: as BREAK_MARGIN"),
        "degrades": Spec("accuracy with c - without c (OPD)", acc, "0 (no change)", "below",
                         "effect or absence", _BREAK),
        "nca_prevents": Spec("OPD's harm - NCA's harm", "seed pair whose OPD harm is its own "
                             "(the harm rule)", "0; NCA not in regime A", "above", "prevents",
                             f"HARM_MARGIN {HARM_MARGIN:g}: as BREAK_MARGIN (harm is a share "
                             "of items, on accuracy's scale)"),
        "harm_not_drift": Spec("NCA's harm - OPD's at matched drift", "seed (checkpoints "
                               "nested)", "0", "below", "matched drift",
                               f"HARM_MARGIN {HARM_MARGIN:g}: as BREAK_MARGIN"),
        "nca_keeps_context": Spec("NCA's accuracy with c - step 0's", acc, "0", "not below "
                                  "-margin", "equivalence",
                                  f"KEEP_MARGIN {KEEP_MARGIN:g}: as BREAK_MARGIN"),
        "nca_reads_context": Spec("reads_c: accuracy with c - with a wrong c of c's form (NCA)",
                                  "seed (its items nested; pooled by the items' cluster "
                                  "bootstrap where kept, else the t interval over seeds)",
                                  "0 (blind to c)", "above", "reading c",
                                  f"READ_MARGIN {READ_MARGIN:g}: as BREAK_MARGIN"),
        "nca_improves_no_c": Spec("NCA's accuracy without c - OPD's", "seed pair (items "
                                  "nested)", "0", "above", "effect or absence", _BREAK),
        "longer": Spec("OPD's relative length change with c (answers right both ways)",
                       "seed (its items nested)", "the larger of 0 and step 0's change (step 0 "
                       "with its own interval: the step-0 rule)", "above",
                       "the other counted claims",
                       f"LENGTH_MARGIN {LENGTH_MARGIN:g}: our choice, an eighth of the paper's "
                       "largest inflation (+39.5%)"),
        "nca_identical": Spec("NCA's lowest layer cosine between the views (every layer at or "
                              "above the threshold); the share of step 0's gap it closes (ours, "
                              "a description)", "seed (layers nested; item noise "
                              "clustered by the task's unit; layer_sim runs that predate "
                              "cos_se take the examples as independent, understated where "
                              "they cluster, as a fact's questions do)",
                              f"the paper's threshold {PAPER_COS_THRESHOLD:g}", "at or above",
                              "the paper's thresholds",
                              f"PAPER_COS_THRESHOLD {PAPER_COS_THRESHOLD:g}: the paper's, as "
                              "stated (>= 0.997 across all layers)"),
        "opd_gap": Spec("NCA's later-half cosine - OPD's; 1 - OPD's", "seed pair (layers and "
                        "items nested; item noise clustered by the task's unit, or, in runs "
                        "that predate cos_se, with the examples taken as independent)",
                        "0 (no gap)", "above", "the gap",
                        f"GAP_MARGIN {GAP_MARGIN:.3f}: 1 - the paper's 0.997, the distance "
                        "from identity the paper calls near-perfect"),
        "orthogonal": Spec("noise-corrected angle between OPD's and the context view's "
                           "gradients", "seed (checkpoints nested)", "the band", "inside",
                           "angles", _BAND),
        "nca_new_direction": Spec("noise-corrected angle between the OPD and NCA terms' "
                                  "gradients", "seed (checkpoints nested)", "the band",
                                  "inside (beyond it: opposes)", "angles", _BAND),
        "shallow_qk": Spec("Adam-normalised update: first third of the layers / last third; "
                           "q_proj and k_proj's rank", "run", "1 (uniform over depth); "
                           "q, k not the top two", "above; top two", "the other counted claims",
                           f"DEPTH_THIRDS {DEPTH_THIRDS}; DEPTH_MARGIN {DEPTH_MARGIN:g} (a mean "
                           "ratio >= 1.25): our choice, five times the seed-to-seed spread of "
                           "update size"),
        "updates_differ": Spec("cosine between NCA's and OPD's updates", "pair of runs",
                               "the same-method (seed-to-seed) cosines; the method-label "
                               "permutation", "below", "updates differ",
                               f"ALPHA {ALPHA:g}; UPDATE_MARGIN {UPDATE_MARGIN:g} of cosine: "
                               f"our choice; SIZE_MATCH {SIZE_MATCH:g}x: twice the usual "
                               "seed-to-seed spread of update size"),
        "size_matched": Spec("cosine between NCA's and a size-matched OPD's updates",
                             "pair of runs", "the same-method cosines", "below",
                             "updates differ", f"ALPHA {ALPHA:g}; UPDATE_MARGIN "
                             f"{UPDATE_MARGIN:g} of cosine: our choice"),
        "heads_carry_harm": Spec("answers flipped and logit-difference effect of removing the "
                                 "chosen heads' reading of c", "OPD seed, counted as trained (its "
                                 "harm cases nested: a sample where --max-cases caps them, "
                                 "judged on the held-out half)",
                                 "random heads neither half chose", "above", "the other "
                                 "counted claims", f"ALPHA {ALPHA:g}; HEADS_MIN_CASES "
                                 f"{HEADS_MIN_CASES}: the fewest whose flipped share can clear "
                                 f"a 20-draw null; HEADS_MARGIN {HEADS_MARGIN:g}: one case of "
                                 "the smallest held-out half"),
    }


def spec_table() -> str:
    """Every claim's type (`SPECS`) as a markdown table (docs/method.md)."""
    rows = ["| claim | quantity | unit | null | claimed side | rule | margin (source) |",
            "|---|---|---|---|---|---|---|"]
    def cell(text: str) -> str:  # a cell's own bars (|cos|) would split it
        return text.replace("|", "\\|")

    rows += [f"| `{k}` | {cell(s.quantity)} | {cell(s.unit)} | {cell(s.null)} | "
             f"{cell(s.direction)} | *{s.rule}* | {cell(s.margin or '-')} |"
             for k, s in SPECS.items()]
    return "\n".join(rows)


RULES = (
    ("every seed",
     "a claim judged by counting units (seeds, checkpoints, cases) is **reproduced** when the "
     "effect's 95% interval is clear of its null in every unit; anything less is at most "
     "**partly**. A counted claim has no pooled path: internalizes, longer, the gap, matched "
     "drift, shallow k/q, the heads and the pairs of *prevents* need every unit clear for "
     "**reproduced**, whatever a pooled interval of their units would show (*prevents* needs "
     "its pooled gap besides). A claim judged by a test of `nca_interp/paper/judge.py` (effect, "
     "equivalence, band) is decided by its pooled interval first, and is **reproduced** there "
     "when that interval is clear of the null *and* a majority of the units are clear on "
     "their own, as its own rule below says."),
    ("smallest effect",
     "every claim has a smallest effect of interest, its margin, stated in the claim table "
     "below with its source: the paper's own numbers where it gives them (its 0.6-3.6 point "
     "accuracy gains, its 0.997 cosine), else a choice argued there. No verdict rests on a unit "
     "alone: **reproduced** and **partly** need the pooled estimate (the mean of the units' "
     "points, or the pooled interval's point) beyond the margin on the claimed side. An "
     "estimate short of the margin is **not reproduced** where no unit's interval reaches the "
     "margin on the claimed side (too small to count, shown: every unit excludes an effect as "
     "large as the margin), whatever side of the null the estimate lies on and however many "
     "units straddle the null; units without intervals (shallow k/q's runs, the updates' "
     "pairs of runs) reach nothing, so their estimate short of the margin is shown short. "
     "Where some unit's interval reaches the margin, an estimate on the claimed side but short "
     "of it is **inconclusive**. So one lucky unit among nulls is never **partly**: its mean "
     "with the nulls falls short of the margin."),
    ("partly",
     "for a claim judged by counting units, **partly** needs the mean of the units' points "
     "on the claimed side of its null beyond the margin and at least one unit clear; with a "
     "unit clear, a mean on the wrong "
     "side of the null is **not reproduced**, whatever that unit shows (with no unit clear, "
     "the straddling-units rule decides)."),
    ("straddling units",
     "a counted claim whose units carry intervals and of which no unit is clear is **not "
     "reproduced** only when a majority of its units lie clear on the other side of the null "
     "(*against*: its interval holds no value on the claimed side of the null, a "
     "zero-width interval on the null included); otherwise (a minority against, the rest "
     "straddling) the data cannot "
     "tell: **inconclusive**, whatever side the mean lies on, unless every unit's interval "
     "lies short of the margin (the smallest-effect rule, which comes first: see *order*)."),
    ("coverage",
     "a verdict that judges fewer than half of its units is **not measurable**, so a verdict is "
     "never stronger because fewer units could be judged. It applies to every claim, its units "
     "counted as trained, not as analysed: an analysis run on 1 of 3 seeds judges 1 of 3."),
    ("constant",
     "a quantity the task fixes (every answer exactly 2 tokens long, with c and without, in "
     "every run) has no spread to show or exclude an effect: **not measurable**, not **not "
     "reproduced**. A difference of zero width between quantities that could vary is a "
     "measurement, not a constant: two methods right on exactly the same items differ by "
     "exactly 0 (an absence shown), and accuracies at 0 everywhere are read by the floor rule "
     "below (an accuracy could have been above 0; a fixed length could not differ)."),
    ("order",
     "a counted claim's rules apply in one order, the first that decides giving the verdict "
     "(`rules.verdict`): coverage (**not measurable**); constant (**not measurable**); the "
     "smallest effect's absence shown, an estimate short of the margin with no unit's "
     "interval reaching it (**not reproduced**); straddling units, no unit clear "
     "(**not reproduced** with a majority against, else **inconclusive**); partly's wrong "
     "side, a mean on the wrong side of the null (**not reproduced**); the smallest effect's "
     "short estimate, some unit reaching the margin (**inconclusive**); every seed "
     "(**reproduced**, **partly**, else **not reproduced**). The pooled path of the every-seed "
     "rule and *prevents* take the smallest effect first in the same way."),
    ("few clusters",
     f"an interval of a mean over fewer than {FEW_CLUSTERS} clusters (facts, levels, seeds) is "
     "the cluster-robust t interval (CR1 standard error, Student's t on G - 1 degrees of "
     "freedom), not the percentile cluster bootstrap, which under-covers there (about 86-89% "
     "for a nominal 95% at 8 clusters; the t interval holds >= 92.5% at 8 and 12 in "
     "tests/unit/test_bootstrap.py). Ratios (harm, P(wrong with c | right without c)) keep the "
     "percentile bootstrap; their verdicts rest on it and say nothing stronger where clusters "
     "are few. The rule binds a seed's own intervals from an evaluation report too: its "
     "accuracy, its accuracy with c - without (and so its "
     "regime: A where that interval lies below 0, B above, else C) and its reads_c are "
     "recomputed as the CR1 t interval from the report's per-item outcomes where it keeps "
     "them; where it keeps none, its interval is evaluate's percentile cluster bootstrap "
     "(reads_c's in every control report written before evaluate kept per-item control "
     "outcomes; since then evaluate writes the t interval itself), and each of its halves, "
     "from the point, is scaled by t(0.975, G - 1) sqrt(G / (G - 1)) / 1.96 (the bootstrap's "
     "spread is the CR0 standard error under normal quantiles: 1.29x at 8 clusters, 1.17x at "
     "12). The regime column of the evaluation tables (A A A C beside a run) reads the regime "
     "by this rule too, through the one function the claim tables and every verdict read "
     "(`nca_interp.evaluate.regime`): evaluate writes it so, and a report written before "
     "(whose own `regime` field read its percentile bootstrap) is re-read by it."),
    ("effect or absence",
     "a claim that c *changes* something (OPD breaks: accuracy with c below accuracy without "
     "c, paired on the same items) is judged on the seeds' pooled estimate (a cluster bootstrap, "
     "the wider of its (seed, unit) and unit intervals: the seeds share their items; the "
     "per-item outcomes of the context-return report, else of the control report of the same "
     "evaluation, taken where every accuracy agrees; with neither, the t interval of the "
     "seeds' points, never narrower than one seed's item noise): "
     "**reproduced** when its 95% interval lies clear of no change on "
     "the claimed side, its point beyond the margin, and a majority of seeds are clear on "
     "their own (a minority, at least one: **partly**; none: **inconclusive**); "
     "**not reproduced** when the interval excludes every change as large as the claim's "
     f"margin ({BREAK_MARGIN:g} of accuracy), clear of no change or not (a change wholly below "
     "the margin is too small to count, and this is checked first); **inconclusive** when it "
     "reaches both, or its point falls short of the margin, with the "
     "number of seeds that would decide (`nca_interp/paper/judge.py`)."),
    ("equivalence",
     "a claim that something is *kept* (NCA's accuracy with c against step 0's, on the same "
     "items) is an equivalence claim, tested TOST-style: **reproduced** when the 90% interval "
     f"of the pooled difference lies above -{KEEP_MARGIN:g} (and a majority of seeds' do); "
     "**not reproduced** when the 95% interval lies wholly below it; **inconclusive** "
     "otherwise. An interval that merely reaches 0 keeps nothing: fewer items no longer make "
     "keeping easier."),
    ("harm",
     "a harm (P(wrong with c | right without c)) is OPD's own when its interval's lower end "
     "lies above the step-0 model's harm on the same items (step 0's point: a gate that "
     "selects the pairs *prevents* counts, not a claim of its own; step 0's harm is measured "
     "on the few items it gets right without c, and its interval combined with the seed's, as "
     "the step-0 rule combines lengths, would leave almost no harm OPD's own) *and* either "
     "accuracy with c lies below accuracy without c (regime A) or the harm also clears the "
     "independence baseline, 1 - accuracy with c of the same student: what harm is when "
     "being right with c does not depend on "
     "being right without it (a student right without c by chance is 'harmed' that much). "
     "The baseline is printed beside every harm."),
    ("prevents",
     "NCA *prevents* the harm only where OPD's break is shown (its verdict reproduced or "
     "partly; else **not measurable**: nothing to prevent). Units are the seed pairs whose OPD "
     "harm is its own (the harm rule); a pair is clear when NCA's harm lies below OPD's and "
     "NCA is not in regime A; the counted verdict follows the every-seed rule, and "
     "**reproduced** also needs the paired OPD - NCA harm interval, pooled over (seed, unit) "
     "clusters, clear above 0 (else at most **partly**); **reproduced** and **partly** need "
     f"that pooled gap's point at or beyond {HARM_MARGIN:g} (short of it: **inconclusive** "
     "where its interval reaches the margin, else **not reproduced**). No pair with OPD's own "
     "harm: **not measurable**."),
    ("beyond chance",
     "no longer a verdict (#70): harm above its independence baseline 1 - accuracy with c "
     "cannot fire where a student's answers with and without c agree more than chance, as "
     "every trained student's do (it lay at or below the baseline in every seed of every "
     "setting), so a column of it only ever said **not reproduced** or **inconclusive** and "
     "tested nothing. The baseline stays printed beside every harm as a description, and the "
     "harm rule above keeps it as one way a harm is OPD's own."),
    ("matched drift",
     "a comparison of the methods *at matched drift* (NCA - OPD: each NCA checkpoint against "
     "OPD's run of the same seed interpolated at the same drift from step 0) counts seeds: a "
     "seed is clear when its mean difference lies beyond 0 by more than its conservative 95% "
     "half-width (the two runs' checkpoint intervals combined in quadrature, averaged over the "
     "checkpoints without narrowing); the pooled interval is the t interval of the seeds' "
     f"means, whose point must lie beyond {HARM_MARGIN:g} (the smallest-effect rule). A harm "
     "is compared only where OPD's harm is its own (the harm rule) in some seed."),
    ("reading c",
     "NCA *reads* c when its reads_c (accuracy with c minus with a wrong c of the same form) "
     "is an effect above 0 by the effect test: **reproduced** when the pooled interval lies "
     "above 0 (and a majority of seeds' do), **not reproduced** (blind) when it excludes a "
     f"reads_c of {READ_MARGIN:g}, **inconclusive** otherwise. The seeds pool as accuracy "
     "does (the cluster bootstrap of the items) where the control runs keep their per-item "
     "outcomes (`correct_control`, which `evaluate --control` writes); where an older report "
     "lacks them, by the t interval of the seeds' reads_c (wide with few seeds: three give "
     "2 degrees of freedom), never narrower than the seeds' root-mean-square 95% "
     "half-width, set symmetrically about the pooled mean (the seeds share their items, so "
     "their item noise does not average out over seeds), and the reason names which. Each "
     "seed's own interval (its clear or not, and the half-width above) follows the "
     "few-clusters rule: the t interval from its per-item control outcomes, or its report's "
     "percentile interval widened as that rule says. Its "
     "size beside the teacher's is "
     "printed as a description; how much of what c gives NCA keeps is the equivalence claim's "
     "question."),
    ("the paper's thresholds",
     "a threshold taken from the paper (under NCA the views' hidden-state cosine >= "
     f"{PAPER_COS_THRESHOLD:g} across all layers, its Sokoban case) is judged as stated: every "
     "layer of every seed, so the lowest layer decides. Beside it, as this project's own "
     "scale-free description, the share of step 0's distance to 1 a method closes on the "
     "layers' mean cosine, (cos - cos_step0) / (1 - cos_step0), compared with nothing of the "
     "paper's (it gives no cosine for its base model or its OPD student). Views of different "
     "items that already reach the threshold make it **not measurable**."),
    ("the gap",
     "OPD *leaves a gap* where NCA closes it: per seed, OPD's mean cosine over the later half "
     "of the layers lies below NCA's of the same seed and below 1, each by more than its 95% "
     "item noise (layer_sim's standard error of each layer's mean cosine, the examples "
     "clustered by the task's unit; runs that predate it give only the spread over examples, "
     "read as independent), and the seeds' mean difference beyond "
     f"{GAP_MARGIN:.3f} (1 - the paper's 0.997: a smaller gap is within what the paper calls "
     "near-perfect); whether OPD widened step 0's gap is printed apart."),
    ("angles",
     "an angle claim takes the seed as its unit: a seed's checkpoints' noise-corrected angles "
     "are averaged, their 95% jackknife intervals averaged without narrowing, and the seeds "
     f"pooled (t interval). *Near-orthogonal* is inside {ORTHO_BAND[0]:g}-{ORTHO_BAND[1]:g} "
     "degrees (|cos| <= 0.26: under 7% of a squared norm along the other); an interval "
     "straddling a bound is not clear: with its point inside the band, **partly** with a clear "
     "seed, else **inconclusive**; with its point outside the band (straddling or not), **not "
     "reproduced**; wholly beyond the upper bound, the NCA "
     "term *opposes* OPD's, which is not a new direction. A checkpoint whose two gradients' "
     "module norms cannot reach cos 0.26 (their supports barely overlap) is not judged: its "
     "angle is set by where the gradients live. Nor is a checkpoint whose noise-corrected "
     "cosine lies outside [-1, 1] (a term's signal within its noise): it has no angle, as a "
     "term with no signal has none, not a clipped 0 or 180 degrees."),
    ("detectable",
     "beside every verdict a test of `nca_interp/paper/judge.py` decides, the table prints the "
     "minimum detectable effect of the deciding interval, (1.96 + 0.84) x its standard error: the "
     "smallest true effect (or distance from a band's bound, for angles) it shows four times "
     "in five; beside a counted claim whose units carry intervals (internalizes, longer, the "
     "gap), the same from the units' mean 95% half-width: for the views' threshold, each NCA "
     "seed's item noise at its lowest layer; for the heads, the held-out k=1 effect's "
     "interval (in logit difference); for *prevents*, the pooled paired OPD - NCA harm "
     "interval. Shallow k/q, whose units carry no interval, prints the runs' spread: "
     "(1.96 + 0.84) sd / sqrt(n) of their shallow / deep ratio. An absence below it is not "
     "shown by these data."),
    ("stable to the bootstrap",
     "a verdict must not depend on the bootstrap's seed: where it changes when a bootstrap "
     "interval's ends move out by the resampling's own error (the 1.5% and 98.5% percentiles "
     "in place of 2.5% and 97.5%), the wider reading decides and the reason says the verdict "
     "sits on the edge (`python -m nca_interp.paper.claims --stability 5` checks every setting)."),
    ("updates differ",
     "NCA's updates differ from OPD's, judged in this order over every pair of runs. First the "
     "smallest-effect rule: where the cross-method mean cosine of the updates lies less than "
     f"{UPDATE_MARGIN:g} of cosine below the seed-to-seed (same-method) mean, or not below it "
     "at all, the claim is **not reproduced**, whatever the permutation p or the seeds' number "
     "(pairs of runs carry no interval, so an estimate short of the margin is shown short). "
     "Past the margin: **reproduced** when each cross-method cosine lies below each "
     f"seed-to-seed cosine and the exact method-label permutation p is at most {ALPHA:g}; "
     "else **partly** when the cross-method mean lies below *each* method's own seed-to-seed "
     "mean (OPD's seeds agree more with each other than with NCA's, and NCA's likewise); else "
     f"**inconclusive** where the seeds allow no p at or under {ALPHA:g} (three seeds a "
     "method: the smallest possible p is 0.1), **not reproduced** where they do. A size ratio "
     f"outside {SIZE_MATCH:g}x caps it at **partly** until a size-matched OPD decides. The "
     "size-matched claim is judged the same way, the size-matched OPD in OPD's place (its "
     "**partly**: the cross-group mean below the within-group mean)."),
    ("the other counted claims",
     "counting units: OPD *internalizes* c when each OPD seed's interval of its accuracy "
     "without c minus step 0's (the step-0 rule) lies above 0, their mean by more than "
     f"{RISE_MARGIN:g}; answers grow *longer* when each seed's interval of its length "
     "change (answers right both ways) less the larger of 0 and step 0's change (the step-0 "
     "rule) lies above 0, a seed being against when it lies at or below 0, and the seeds' "
     f"mean of it exceeds {LENGTH_MARGIN:g}; updates are *shallow, "
     "k/q first* when in each checkpoint the first third of the layers moves more than the "
     "last third (Adam-normalised) and q_proj and k_proj are the two largest matrix types, "
     f"the checkpoints' mean ratio at least {1 + DEPTH_MARGIN:g}; a "
     "few *heads carry the harm* when one head chosen on each half of the harm cases is the "
     "same and stands clear of random heads on the other half (teacher-forced effect and "
     f"answers flipped, one-sided p <= {ALPHA:g}; the effect's 95% interval above the random "
     f"heads' mean; answers flipped at least {HEADS_MARGIN:g} above the random heads'; the "
     "both-right controls it breaks below the harm cases it flips, intervals "
     "apart), **partly** when only several heads together do or the halves choose different "
     f"heads; **not measurable** under {HEADS_MIN_CASES} harm cases or where the help cases "
     "were patched instead. The heads' unit is the OPD seed, counted as trained (the coverage "
     "rule, no exemption): patching fewer than half of the OPD seeds trained is **not "
     "measurable**, the reason naming the seeds patched and the command that patches the "
     "rest; a seed's harm cases (a sample where --max-cases caps them) are nested in it; with "
     "several seeds judged, **reproduced** where every one is, **partly** where some is "
     "reproduced or partly, else **not reproduced**."),
    ("the floor",
     "accuracies at 0 on every item (nobody right without c) are a measurement, judged as any "
     "other: a zero-width interval on the null is against, so OPD *internalizes* and NCA's "
     "*gain without c* are **not reproduced** there, the floor said in the reason (and no "
     "detectable effect printed: a zero-width interval has no spread to compute it from). "
     "**Not measurable** is kept for quantities the floor leaves undefined: a harm (P(wrong "
     "with c | right without c)) where no item is right without c; a claim on accuracy itself "
     "(OPD breaks) is judged on accuracy."),
    ("not run",
     "a claim whose input file this setting lacks is a row **not run** naming the command that "
     "makes it, never a vanished row."),
    ("step 0",
     "step 0 is a measurement, not an exact null: a claim comparing a seed with step 0 "
     "(internalizes, longer, keeps) takes each seed's difference from step 0 on the same "
     "items, paired per item where the reports keep per-item outcomes (accuracy: the items' "
     "cluster interval of the paired differences), else with step 0's own 95% interval "
     "combined with the seed's in quadrature (lengths, whose per-item values no report "
     "keeps; the same items' positive correlation makes this conservative). Every setting "
     "here distils from one teacher, measured once: where a setting has more than one (the "
     "members of a pooled setting whose reports name different teachers), the teacher is the "
     "outer cluster, its seeds and units nested in it (a third interval over teacher "
     "clusters, the widest kept: the t interval on teachers - 1 degrees of freedom, very wide "
     "with two); with one, its variance between rebuilds of the same command is in no "
     "interval, and each such claim, pooled ones included, says so."),
    ("ratios",
     "a ratio of two measured quantities (NCA's reads_c over the teacher's) is a description, "
     "never a verdict: its 95% interval is the percentile cluster bootstrap of the ratio "
     "itself, numerator and denominator drawn together over units, never a delta-method "
     "(normal) interval, which is symmetric where a ratio is not and fails as the "
     "denominator nears 0. Where the denominator's own interval reaches 0 the ratio is **not "
     "measurable**; where the reports keep no per-item outcomes the point is printed alone "
     "and says it has no interval."),
    ("together",
     "an outcome made of several claims (NCA prevents the harm *and* keeps what c gives *and* "
     "still reads c: the decisive table of each setting's page) is **reproduced** only when "
     "every part is; **not reproduced** when any part is; **not measurable** when a part is "
     "(and none is not reproduced); otherwise **partly** where every part is reproduced or "
     "partly, else **inconclusive**. It adds no test of its own: its parts' verdicts, each "
     "by its own rule, are read together (none is stronger than its weakest part)."),
    ("multiplicity",
     "each setting's claims that rest on a test are one family, corrected by Holm's step-down "
     f"procedure at a family-wise {ALPHA:g}: the claims' p-values sorted, the k-th smallest (k "
     f"from 0) compared with {ALPHA:g} / (m - k), m the claims with a p, rejection stopping at "
     "the first that fails. A claim's p is that of the test its raw rule applies at "
     f"{ALPHA:g}, found by inverting its deciding interval under the normal approximation "
     "(standard error: the interval's half facing the null over 1.96; a 95% interval just "
     f"touching the null gives p = {ALPHA:g}): for the effect rule (breaks, improves, reads "
     "c, prevents' pooled gap, the pooled harm verdicts) the two-sided p of the pooled "
     "interval against no change; for equivalence (keeps) the one-sided p of the "
     "symmetric interval against -margin, TOST's own test; for the band (angles) the larger "
     "of the two bounds' two-sided p's; for a claim counted over units with intervals "
     "(internalizes, longer, the gap, matched drift) each unit's p against its null, the "
     "largest where every unit is clear (**reproduced** needs each: an intersection-union "
     "test), else the smallest (**partly** needs one); the exact permutation p for the "
     "updates' and the random-draw p's (the larger of the effect's and the flips') for the "
     "heads. Claims whose rule tests nothing (the paper's 0.997 threshold on points, shallow "
     "k/q's runs without intervals) and **not measurable** or **not run** rows are outside "
     "the family. After Holm, a **reproduced** or **partly** whose p does not clear its Holm "
     "threshold reads **inconclusive**, whether or not it clears "
     f"{ALPHA:g} alone: a finding the raw rule gives without its test passing (the updates' "
     "'direction only' **partly**, an angle's **partly** on one clear seed) is corrected as "
     "any other, so a weaker p never keeps a stronger word; every other verdict is unchanged "
     "(the correction guards against false findings). The table prints the corrected verdict "
     "beside the raw one, with each claim's p and threshold. A t interval (few clusters) "
     "inverted as normal understates p far in its tail: the correction is approximate "
     "there, never stricter than the raw "
     "rule."),
    ("closed set",
     "a verdict is one of " + ", ".join(f"**{v}**" for v in VERDICTS) + "; its reason is "
     "written beside it, never in place of it."),
)


SPECS = _specs()


def verdict(flags: list[bool], mean_on_side: bool = True, total: int | None = None,
            against: list[bool] | None = None, effect: float | None = None,
            margin: float = 0.0, reach: bool = True, constant: bool = False) -> str:
    """The verdict of units judged `flags` (True: clear of the null on the claimed side) out of
    `total` units (default: all were judged), with the mean effect on the claimed side or not.
    `against` (for units with intervals): True where a unit lies clear on the other side; with
    no unit clear, only a majority against makes "not reproduced", else "inconclusive".
    `effect`: the pooled estimate's distance beyond the null on the claimed side (the units'
    mean), which must reach `margin` (the smallest-effect rule); short of it, "inconclusive"
    where some unit's interval `reach`es the margin, else "not reproduced". The rules apply
    in the rule book's order ("order"): coverage, constant, then the smallest effect's
    absence shown (short of the margin and no unit reaching it: "not reproduced", whatever
    side the mean lies on), then the straddling units, partly and every seed. `constant`: the
    quantity has no spread at all (the constant rule)."""
    total = len(flags) if total is None else total
    if not flags or 2 * len(flags) < total:
        return "not measurable"
    if constant:
        return "not measurable"
    if effect is not None and effect < margin and not reach:
        return "not reproduced"  # too small to count, shown: before the straddling units
    if against is not None and not any(flags):
        return "not reproduced" if 2 * sum(against) > len(against) else "inconclusive"
    if effect is not None:
        mean_on_side = mean_on_side and effect > 0
    if not mean_on_side:
        return "not reproduced"
    if effect is not None and effect < margin:
        return "inconclusive"
    if all(flags):
        return "reproduced"
    return "partly" if any(flags) else "not reproduced"


def prevents(break_verdict: str, pair_flags: list[bool], pairs: int,
             pooled_lo: float | None, pooled_point: float | None = None,
             pooled_hi: float | None = None) -> str:
    """The "prevents" rule: `break_verdict` is OPD's break; `pair_flags` the seed pairs whose
    OPD harm is its own (True: NCA's harm below OPD's, NCA not in regime A) out of `pairs`;
    the pooled paired OPD - NCA harm interval (`pooled_lo`, `pooled_point`, `pooled_hi`;
    None: none), whose point must reach `HARM_MARGIN`."""
    if break_verdict not in ("reproduced", "partly"):
        return "not measurable"
    word = verdict(pair_flags, total=pairs)
    if word in ("reproduced", "partly") and pooled_point is not None \
            and pooled_point < HARM_MARGIN:
        return "inconclusive" if pooled_hi is None or pooled_hi >= HARM_MARGIN \
            else "not reproduced"
    if word == "reproduced" and pooled_lo is not None and not pooled_lo > 0:
        return "partly"
    return word


def pooled(pooled_clear: bool, unit_flags: list[bool], mean_on_side: bool = True,
           effect: float | None = None, margin: float = 0.0, reach: bool = True) -> str:
    """A pooled interval clear of its null makes `reproduced` only with a majority of units
    clear on their own (`unit_flags`); else the unit rule, at most partly. `effect`, `margin`,
    `reach`: the smallest-effect rule, as `verdict` (the absence shown first)."""
    if effect is not None and effect < margin and not reach:
        return "not reproduced"
    if effect is not None:
        mean_on_side = mean_on_side and effect > 0
    if not mean_on_side:
        return "not reproduced"
    if effect is not None and effect < margin:
        return "inconclusive"
    majority = 2 * sum(unit_flags) > len(unit_flags)
    if pooled_clear and majority:
        return "reproduced"
    if any(unit_flags):
        return "partly"
    return "inconclusive" if pooled_clear else "not reproduced"


def together(words: list[str]) -> str:
    """The together rule: the verdict of an outcome made of the claims whose verdicts are
    `words` (every part reproduced: reproduced; any not reproduced: not reproduced; any not
    measurable: not measurable; all reproduced or partly: partly; else inconclusive)."""
    unknown = [w for w in words if w not in VERDICTS]
    if not words or unknown:
        raise UsageError(f"together: verdict words expected, got {words!r}")
    if all(w == "reproduced" for w in words):
        return "reproduced"
    for word in ("not reproduced", "not measurable"):
        if word in words:
            return word
    if all(w in ("reproduced", "partly") for w in words):
        return "partly"
    return "inconclusive"


def independence_harm(correct_c: float) -> float:
    """The harm of a student whose being right with c does not depend on being right
    without it."""
    return 1.0 - correct_c


def harm_is_own(harm_lo: float | None, step0_harm: float | None, correct_c: float,
                regime_a: bool) -> bool:
    """The harm rule: the harm's interval (lower end `harm_lo`) clears step 0's harm, and
    either the student is in regime A or the interval also clears the independence
    baseline. Where step 0's harm is undefined (nothing right without c at step 0) there is
    no step-0 null: the independence baseline alone decides, never a harm of 0 assumed."""
    if harm_lo is None:
        return False
    if step0_harm is None:
        return harm_lo > independence_harm(correct_c)
    if not harm_lo > step0_harm:
        return False
    return regime_a or harm_lo > independence_harm(correct_c)


def beyond_chance(harm_lo: float, harm_hi: float, step0_harm: float | None,
                  correct_c: float) -> tuple[bool, bool]:
    """(clear above chance, clear below it) for one seed's harm interval: above the
    independence baseline and step 0's harm (where step 0 has one), or wholly under the
    baseline."""
    baseline = independence_harm(correct_c)
    clear = harm_lo > baseline and (step0_harm is None or harm_lo > step0_harm)
    return clear, harm_hi < baseline


def interval_p(point: float, lo: float, hi: float, null: float = 0.0, direction: int = 1,
               sides: int = 2) -> float:
    """The p-value of "beyond `null` in `direction`" found by inverting a 95% interval
    [`lo`, `hi`] around `point` under the normal approximation (the multiplicity rule): the
    standard error is the interval's half facing the null over 1.96, so an interval whose end
    just touches the null gives p = 0.05 (`sides` 2: the two-sided p a 95% interval tests;
    1: a one-sided p). A zero-width half gives 0 (clear) or 1."""
    half = point - lo if direction > 0 else hi - point
    toward = (point - null) * direction
    if half <= 0:
        return 0.0 if toward > 0 else 1.0
    z = toward / (half / 1.959963984540054)
    return min(1.0, sides * 0.5 * math.erfc(z / math.sqrt(2)))


def counted_p(unit_ps: list[float], every: bool) -> float | None:
    """A counted claim's p (the multiplicity rule): `every` unit clear (reproduced) is an
    intersection-union test, its p the largest unit p; else "some unit clear" (partly), the
    smallest. None: no unit."""
    if not unit_ps:
        return None
    return max(unit_ps) if every else min(unit_ps)


def holm(ps: list[float | None], alpha: float = ALPHA) -> list[bool | None]:
    """Holm's step-down procedure over the p's that are not None (the family): True where a
    claim's null is rejected at family-wise `alpha`, False where not, None outside the
    family."""
    tested = sorted((p, i) for i, p in enumerate(ps) if p is not None)
    out: list[bool | None] = [None] * len(ps)
    going = True
    for k, (p, i) in enumerate(tested):
        going = going and p <= alpha / (len(tested) - k)
        out[i] = going
    return out


def holm_threshold(ps: list[float | None], i: int, alpha: float = ALPHA) -> float | None:
    """The level Holm compares claim `i`'s p with: alpha / (m - its rank)."""
    if ps[i] is None:
        return None
    tested = sorted((p, j) for j, p in enumerate(ps) if p is not None)
    rank = [j for _, j in tested].index(i)
    return alpha / (len(tested) - rank)


def after_holm(word: str, p: float | None, rejected: bool | None,
               alpha: float = ALPHA) -> str:
    """The verdict after the multiplicity rule: a reproduced or partly whose p is not
    rejected by Holm over its setting's family reads inconclusive, whether or not its own
    test passed at `alpha` alone (a weaker p never keeps a stronger word: the 'direction
    only' partly of the updates, given by the raw rule without its test passing, is
    corrected as any other); every other verdict, and a claim outside the family, is
    unchanged."""
    if p is None or rejected is None or rejected:
        return word
    if word in ("reproduced", "partly"):
        return "inconclusive"
    return word


def markdown() -> str:
    """The rule book as a list, then every claim's type (docs/method.md)."""
    return "\n".join(f"- *{name}*: {text}" for name, text in RULES) + \
        "\n\nEach claim, typed (`rules.SPECS`; a claim's `spec` names its row):\n\n" + \
        spec_table()
