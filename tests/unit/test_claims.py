"""The claim rules of nca_interp.paper.claims on small hand-made pipeline outputs: each verdict
flips when the data crosses its rule."""

import json

import pytest

from nca_interp.paper import claims, rules


def report(correct_no_c, correct_c, harm, regime, ci_no_c=(0.0, 1.0), ci_harm=(0.0, 1.0),
           ci_c=(0.0, 1.0), ci_delta=None):
    d = correct_c - correct_no_c
    return {"correct_no_c": correct_no_c, "correct_c": correct_c, "harm": harm, "regime": regime,
            "delta_c": d, "rel_len_both": None,
            "ci95": {"correct_no_c": list(ci_no_c), "harm": list(ci_harm), "correct_c": list(ci_c),
                     "delta_c": list(ci_delta or (d - 0.05, d + 0.05)),
                     "rel_len_both": [None, None]}}


def write(tmp_path, reports):
    (tmp_path / "context_return.json").write_text(json.dumps({"results": reports}))
    return tmp_path


def test_degradation_is_judged_on_the_seeds_pooled_drop(tmp_path):
    base = report(0.9, 0.95, 0.01, "B")
    a = report(0.9, 0.7, 0.2, "A", ci_harm=(0.1, 0.3))
    c = report(0.9, 0.9, 0.02, "C", ci_harm=(0.0, 0.05), ci_delta=(-0.01, 0.01))
    figs = write(tmp_path, {"t_base": base, "t_opd_s0": a, "t_opd_s1": a})
    assert claims.degrades(figs).verdict == "reproduced"
    # one seed drops, one does not: the seeds' t interval reaches 0 and -0.2 alike
    figs = write(tmp_path, {"t_base": base, "t_opd_s0": a, "t_opd_s1": c})
    assert claims.degrades(figs).verdict == "inconclusive"
    figs = write(tmp_path, {"t_base": base, "t_opd_s0": c, "t_opd_s1": c, "t_opd_s2": c})
    assert claims.degrades(figs).verdict == "not reproduced"
    none = report(0.0, 0.4, None, "B")
    figs = write(tmp_path, {"t_base": base, "t_opd_s0": none})
    # nothing right without c: harm is undefined, but accuracy with c is not below without
    blind = claims.degrades(figs)
    assert blind.verdict == "not reproduced" and not blind.also


def test_harm_beside_its_independence_baseline_is_printed_not_judged(tmp_path):
    """Regime A breaks; the harm's independence baseline (1 - accuracy with c) is printed
    beside it as a description, with no verdict column of its own: harm above it could not
    fire where a student's answers with and without c agree more than chance (#70)."""
    base = report(0.9, 0.95, 0.01, "B")
    low = report(0.9, 0.7, 0.1, "A", ci_harm=(0.05, 0.15))   # breaks, harm below 0.3
    c = claims.degrades(write(tmp_path, {"t_base": base, "t_opd_s0": low, "t_opd_s1": low}))
    assert c.verdict == "reproduced" and not c.also
    assert "independence baseline (1 - accuracy with c) 0.300" in c.null


def test_internalizing_is_judged_against_the_step_zero_null(tmp_path):
    # step 0 is measured (the step-0 rule): these reports keep no items, so its own interval
    # enters each seed's in quadrature
    base = report(0.3, 0.9, 0.0, "B", ci_no_c=(0.25, 0.35))
    up = report(0.6, 0.9, 0.0, "B", ci_no_c=(0.45, 0.75))
    flat = report(0.35, 0.9, 0.0, "B", ci_no_c=(0.2, 0.5))
    assert claims.internalizes(write(tmp_path, {"b": base, "t_opd_s0": up})).cell == "reproduced"
    # an interval straddling step 0 shows neither a rise nor its absence
    assert claims.internalizes(write(tmp_path, {"b": base, "t_opd_s0": flat})).cell == \
        "inconclusive (no seed clear, 0 of 1 clear the other way, 1 straddling the null)"
    flat_claim = claims.internalizes(write(tmp_path, {"b": base, "t_opd_s0": flat}))
    half = (0.15 ** 2 + 0.05 ** 2) ** 0.5  # the seed's and step 0's half-widths combined
    assert flat_claim.detectable == f"{half * (1.959964 + 0.841621) / 1.959964:.3f}"  # 0.226
    down = report(0.2, 0.9, 0.0, "B", ci_no_c=(0.1, 0.25))
    assert claims.internalizes(write(tmp_path, {"b": base, "t_opd_s0": down,
                                                "t_opd_s1": down, "t_opd_s2": flat})
                               ).verdict == "not reproduced"  # a majority clear below
    assert claims.internalizes(write(tmp_path, {"b": base, "t_opd_s0": down, "t_opd_s1": flat,
                                                "t_opd_s2": flat})).verdict == "inconclusive"


def test_nca_blind_to_c_fails_the_keeps_context_claim(tmp_path):
    base = report(0.0, 0.44, None, "B")
    blind = report(0.0, 0.02, None, "C", ci_c=(0.0, 0.06))
    keeps = report(0.0, 0.435, None, "B", ci_c=(0.425, 0.445))
    wide = report(0.0, 0.42, None, "B", ci_c=(0.3, 0.55))
    assert claims.nca_keeps_context(write(tmp_path, {"b": base, "t_nca_s0": blind})).verdict \
        == "not reproduced"
    assert claims.nca_keeps_context(write(tmp_path, {"b": base, "t_nca_s0": keeps})).verdict \
        == "reproduced"
    # an interval that only reaches step 0 shows no keeping (the margin is 0.02)
    assert claims.nca_keeps_context(write(tmp_path, {"b": base, "t_nca_s0": wide})).verdict \
        == "inconclusive"


def test_seeds_each_short_of_step_0_lose_what_c_gives_together(tmp_path):
    """Five seeds, each 4 of 20 units short of step 0 on the same items: the pooled paired
    difference, -0.2, lies beyond the keeping margin: not kept."""
    units = [f"u{i}" for i in range(20)]
    base = report(0.0, 0.8, None, "B")
    base["items"] = {"unit": units, "correct_c": [1] * 16 + [0] * 4, "correct_no_c": [0] * 20}
    reps = {"b": base}
    for s in range(5):
        r = report(0.0, 0.6, None, "C", ci_c=(0.4, 0.8))
        won = [1] * 16 + [0] * 4
        for i in range(4):
            won[(3 * s + 5 * i) % 16] = 0  # a different 4 of step 0's right answers lost
        r["items"] = {"unit": units, "correct_c": won, "correct_no_c": [0] * 20}
        reps[f"t_nca_s{s}"] = r
    claim = claims.nca_keeps_context(write(tmp_path, reps))
    assert claim.verdict == "not reproduced" and "-0.200" in claim.measured
    for s in range(5):  # the same seeds equal to step 0 item by item: kept
        reps[f"t_nca_s{s}"]["items"]["correct_c"] = base["items"]["correct_c"]
    assert claims.nca_keeps_context(write(tmp_path, reps)).verdict == "reproduced"


def _measured(pairs: dict) -> dict:
    """param_delta's per-run entries (keyed by path) for the runs its pairs name: who each run
    is comes from there, not from the pair keys."""
    return {f"r/{r}": {} for k in pairs for r in k.split("~")}


def test_updates_differ_needs_cross_method_below_every_seed_pair(tmp_path):
    def pd(cross, within):
        pairs = {"x_opd_s0~x_nca_s0": cross[0], "x_opd_s1~x_nca_s1": cross[1],
                 "x_opd_s0~x_opd_s1": within[0], "x_nca_s0~x_nca_s1": within[1]}
        (tmp_path / "param_delta.json").write_text(json.dumps(
            {"all_pairs": {k: {"global_cos": v} for k, v in pairs.items()},
             "results": _measured(pairs)}))
        return claims.updates_differ(tmp_path).cell
    # two seeds per method: complete separation, yet the exact permutation test cannot go
    # below 2/6, so only the direction counts
    assert pd((0.5, 0.55), (0.9, 0.92)).startswith("partly (the direction only: "
                                                   "permutation p 0.33")
    assert pd((0.5, 0.95), (0.9, 0.92)).startswith("partly")
    # past the margin but not below each method's own mean (NCA's seeds disagree), and two
    # seeds a method could never show p <= 0.05: no absence shown
    assert pd((0.5, 0.5), (0.95, 0.3)).startswith("inconclusive (the cross-method mean is "
                                                  "not below each method's own")
    # the smallest-effect rule comes first (#70's facts and frozenlake rows): a cross mean
    # above the seed-to-seed mean, or below it by less than the margin, is not reproduced
    # whether or not it lies below each method's own mean and whatever p the seeds allow
    assert pd((0.95, 0.96), (0.9, 0.92)).startswith("not reproduced (the cross-method mean "
                                                    "lies 0.045 above")
    assert pd((0.303, 0.303), (0.297, 0.407)).startswith(  # facts: 0.049, OPD-OPD below
        "not reproduced (the cross-method mean lies 0.049 below the seed-to-seed mean, short")
    assert pd((0.88, 0.88), (0.9, 0.92)).startswith("not reproduced (the cross-method mean "
                                                    "lies 0.030 below")
    # pairs of runs the report has no entry (no identity) for are not judged, not a KeyError
    (tmp_path / "param_delta.json").write_text(json.dumps(
        {"all_pairs": {"x_opd_s0~x_nca_s0": {"global_cos": 0.5}}, "results": {}}))
    assert claims.updates_differ(tmp_path).verdict == "not measurable"
    # four seeds per method, every cross pair below every within pair: p = 2/70
    from itertools import combinations

    runs = [f"x_{m}_s{i}" for m in ("opd", "nca") for i in range(4)]
    pairs = {f"{a}~{b}": {"global_cos": 0.9 if a.split("_")[1] == b.split("_")[1] else 0.5}
             for a, b in combinations(runs, 2)}
    (tmp_path / "param_delta.json").write_text(json.dumps({"all_pairs": pairs,
                                                           "results": _measured(pairs)}))
    c = claims.updates_differ(tmp_path)
    assert c.cell == "reproduced" and "p = 0.029 (exact, 70 labelings" in c.null
    assert "OPD-OPD 0.900, NCA-NCA 0.900" in c.null
    # the same seeds with cross above within: enough seeds to decide, not reproduced
    flipped = {k: {"global_cos": 1.4 - v["global_cos"]} for k, v in pairs.items()}
    (tmp_path / "param_delta.json").write_text(json.dumps({"all_pairs": flipped,
                                                           "results": _measured(flipped)}))
    assert claims.updates_differ(tmp_path).verdict == "not reproduced"
    # the same separation between updates of unequal size is a magnitude effect until a
    # size-matched control says otherwise
    for nca_size, matched in ((0.21, True), (0.3, False)):
        per = {r: {"global_adam": 0.2 if "_opd_" in r else nca_size} for r in runs}
        (tmp_path / "param_delta.json").write_text(json.dumps(
            {"all_pairs": pairs, "results": per}))
        c = claims.updates_differ(tmp_path)
        if matched:
            assert c.cell == "reproduced" and "sizes matched: NCA / OPD 1.05" in c.null
        else:
            assert c.cell.startswith("partly (NCA's update is 1.50x OPD's in size")
            assert c.cell.endswith(f"python -m nca_interp.paper.size_control --setting "
                                   f"{tmp_path.name})")
    # once the setting's size control has run, the verdict points to its row
    (tmp_path.parent / f"{tmp_path.name}_size").mkdir()
    (tmp_path.parent / f"{tmp_path.name}_size" / "param_delta.json").write_text("{}")
    assert claims.updates_differ(tmp_path).cell.endswith("the size-matched OPD row decides)")


def test_reading_c_is_an_effect_test_blind_shown_or_underpowered(tmp_path):
    """reads_c is judged as an effect above 0 with the rule book's margin: blind (the pooled
    interval excludes the margin), reads (clear above 0), too few or too noisy seeds to tell
    (inconclusive); its size beside the teacher's is a description, not a rule."""
    def ctl(reads, lo, hi):
        return {"control": {"reads_c": reads, "reads_c_ci95": [lo, hi]}}

    def write_ctl(reports):
        (tmp_path / "context_control.json").write_text(json.dumps({"results": reports}))
        return tmp_path

    base = ctl(0.6, 0.55, 0.65)
    blind = write_ctl({"t_base": base, "t_opd_s0": ctl(0.3, 0.25, 0.35),
                       **{f"t_nca_s{i}": ctl(v, v - 0.008, v + 0.008)
                          for i, v in enumerate((0.0, 0.003, 0.001))}})
    c = claims.nca_reads_context(blind)
    assert c.verdict == "not reproduced" and "teacher 0.600" in c.null
    assert c.reason.startswith("NCA is blind to what c says: the interval excludes an effect "
                               "of 0.02")
    # two seeds that agree by chance: the t interval over 2 seeds is too wide to show blindness
    two = write_ctl({"t_base": base, "t_nca_s0": ctl(0.0, -0.01, 0.01),
                     "t_nca_s1": ctl(0.003, -0.003, 0.01)})
    c = claims.nca_reads_context(two)
    assert c.verdict == "inconclusive" and "would decide" in c.reason
    assert c.reason.endswith("in seeds 0, 1; 3 seeds needed to generalise")
    reads = write_ctl({"t_base": base, **{f"t_nca_s{i}": ctl(0.4, 0.3, 0.5) for i in range(3)}})
    assert claims.nca_reads_context(reads).verdict == "reproduced"
    # every seed clear of 0 at a sliver of the teacher's use: it reads c, and the sliver is
    # said beside the verdict (how much NCA keeps is the keeps claim's question)
    sliver = write_ctl({"t_base": base, **{f"t_nca_s{i}": ctl(0.03, 0.02, 0.04) for i in range(3)}})
    c = claims.nca_reads_context(sliver)
    assert c.verdict == "reproduced"
    assert "NCA reads_c 0.030 beside the teacher's 0.600: 5% of it" in c.cell
    # one seed of three clear: the pooled interval decides; a minority of clear seeds is partly
    some = write_ctl({"t_base": base, "t_nca_s0": ctl(0.3, 0.25, 0.35),
                      **{f"t_nca_s{i}": ctl(0.3, -0.05, 0.6) for i in (1, 2)}})
    assert claims.nca_reads_context(some).cell.startswith(
        "partly (pooled clear, 1 of 3 seeds clear on their own; a majority is needed")
    assert not any(c.verdict != "not run" for c in claims.claims(tmp_path / "nowhere")
                   if c.name.startswith("NCA still reads c"))
    # cross-model: the students' own start (evaluated first) is the reference, the teacher
    # beside it
    cross = write_ctl({"s_base": ctl(0.6, 0.55, 0.65), "xl_base": ctl(0.05, 0.0, 0.1),
                       **{f"t_nca_s{i}": ctl(0.03, 0.02, 0.04) for i in range(3)}})
    c = claims.nca_reads_context(cross)
    assert c.null.startswith("step 0 0.600; teacher 0.050")
    assert "beside step 0's 0.600: 5% of it" in c.cell


def test_reading_c_pools_item_outcomes_by_the_cluster_bootstrap_where_kept(tmp_path):
    """Three seeds each clear above 0 but far apart (reads_c 0.04, 0.07, 0.13): the t interval
    over three seeds (2 degrees of freedom) reaches 0; where the control runs keep per-item
    outcomes, the seeds pool by the cluster bootstrap of the items, as every accuracy claim
    does, and the reason says which interval decided."""
    def run(reads, n=400, with_items=True):
        wrong = round(reads * n)
        c = [1] * (n // 2) + [0] * (n // 2)
        ctl = c[:]
        for i in range(wrong):  # right with c, wrong with the control
            ctl[i] = 0
        rate = reads
        entry = {"control": {"reads_c": rate, "reads_c_ci95": [rate - 0.03, rate + 0.03]}}
        if with_items:
            entry["items"] = {"unit": [f"u{i}" for i in range(n)], "correct_c": c,
                              "correct_no_c": c, "correct_control": ctl}
        return entry

    def judge(with_items):
        reps = {"t_base": {"control": {"reads_c": 0.6, "reads_c_ci95": [0.55, 0.65]}},
                **{f"t_nca_s{i}": run(v, with_items=with_items)
                   for i, v in enumerate((0.04, 0.07, 0.13))}}
        (tmp_path / "context_control.json").write_text(json.dumps({"results": reps}))
        return claims.nca_reads_context(tmp_path)

    t = judge(False)
    assert t.verdict == "inconclusive" and "t interval over seeds" in t.reason
    # seeds on the same items share their item noise: four seeds that agree (-0.094 to -0.115),
    # each interval reaching 0, do not make the pooled interval four times narrower
    same = {"t_base": {"control": {"reads_c": 0.6, "reads_c_ci95": [0.55, 0.65]}},
            **{f"t_nca_s{i}": {"control": {"reads_c": v, "reads_c_ci95": [v - 0.15, 0.0]}}
               for i, v in enumerate((-0.094, -0.094, -0.115, -0.094))}}
    (tmp_path / "context_control.json").write_text(json.dumps({"results": same}))
    assert claims.nca_reads_context(tmp_path).verdict == "inconclusive"
    # clear of 0 but below the margin: it reads c, by too little, not "blind"
    little = {"t_base": {"control": {"reads_c": 0.6, "reads_c_ci95": [0.55, 0.65]}},
              **{f"t_nca_s{i}": {"control": {"reads_c": 0.007, "reads_c_ci95": [0.004, 0.01]}}
                 for i in range(3)}}
    (tmp_path / "context_control.json").write_text(json.dumps({"results": little}))
    assert claims.nca_reads_context(tmp_path).cell.startswith(
        "not reproduced (NCA reads c by less than the margin: the interval excludes")
    boot = judge(True)
    assert boot.verdict == "reproduced" and "cluster bootstrap of the items" in boot.reason
    assert float(boot.detectable) < float(t.detectable)


def test_identical_views_keep_the_papers_threshold_and_describe_the_closed_share(tmp_path):
    """Near-identical is judged at the paper's 0.997 at every layer, as stated; beside it the
    share of step 0's distance to 1 closed, this project's own description, set against no
    number of the paper's (it gives none). Different items already at the threshold: not
    measurable."""
    def ls(cos, other=None):
        r = {"cos": [1.0, *cos]}
        if other is not None:
            r["cos_other"] = [1.0, *other]
        return r

    def write_ls(nca, nca_other=(0.6, 0.7), base=(0.95, 0.95), noise=None):
        (tmp_path / "layer_sim.json").write_text(json.dumps({"results": {
            "t_base": ls(list(base)), "random_init": ls([0.5, 0.5]),
            "t_opd_s0": ls([0.985, 0.985]),
            "t_nca_s0": {**ls(list(nca), None if nca_other is None else list(nca_other)),
                         **(noise or {})}}}))
        return tmp_path

    # the detectable effect is the lowest layer's item noise: cos_std / sqrt(n) in runs
    # before cos_se, the clustered standard error (5x wider here) where the run recorded it
    spread = {"cos_std": [0.0, 0.01, 0.02], "n_examples": 100}
    old = float(claims.nca_identical(write_ls([0.998, 0.9975], noise=spread)).detectable)
    clustered = {**spread, "cos_se": [0.0, 0.001, 0.01], "n_units": 10}
    new = float(claims.nca_identical(write_ls([0.998, 0.9975], noise=clustered)).detectable)
    assert new / old == pytest.approx(5.0, rel=0.01)

    assert not hasattr(rules, "PAPER_CLOSED") and not hasattr(rules, "PAPER_COS")
    assert rules.PAPER_COS_THRESHOLD == 0.997  # the paper's one number on the views
    c = claims.nca_identical(write_ls([0.998, 0.9975]))
    # closed on the layers' mean: (0.99775 - 0.95) / 0.05 = 95.5%, a description only
    assert c.verdict == "reproduced" and not c.also
    assert "NCA 95.5%, OPD 70.0%" in c.measured and "0.953" not in c.null + c.measured
    assert "layers at or above 0.997: 100.0%" in c.measured
    # one layer under the threshold fails it, whatever the mean
    one = claims.nca_identical(write_ls([0.9999, 0.996]))
    assert one.verdict == "not reproduced" and "layers at or above 0.997: 50.0%" in one.measured
    wide = claims.nca_identical(write_ls([0.97, 0.97], base=(0.5, 0.5)))
    assert wide.verdict == "not reproduced"
    assert wide.reason == "no seed reaches 0.997 at every layer"
    high = claims.nca_identical(write_ls([0.999, 0.998], nca_other=(0.998, 0.999)))
    assert high.verdict == "not measurable" and "different items already reach" in high.reason
    assert "not measured" in claims.nca_identical(write_ls([0.999, 0.998], None)).null


def _grad(tmp_path, name, pair, cells, modules=None):
    """A grad_align report `name` whose checkpoints hold `pair`'s noise-corrected angle with
    its interval, cells as (angle, lo, hi), (angle, lo, hi, noise-corrected cosine) or None
    (no signal); `modules`: per-module norms."""
    import math

    res = {}
    for i, c in enumerate(cells):
        a, ci = (None, None) if c is None else (c[0], [c[1], c[2]])
        cos = None if c is None else c[3] if len(c) > 3 else math.cos(math.radians(a))
        res[f"step_{i}"] = {"global": {"parts": {"pairs": {pair: {
            "angle_corrected_deg": a, "angle_ci95_deg": ci, "cos_corrected": cos}}}},
            "modules": modules or {}}
    (tmp_path / f"{name}.json").write_text(json.dumps({"results": res}))
    return tmp_path


def _seeds_of_grads(tmp_path, method, pair, seeds):
    """grad_align reports of `method` for seeds 0.. (each a list of checkpoint cells), any
    earlier ones removed."""
    for f in tmp_path.glob("grad_align_*.json"):
        f.unlink()
    for i, cells in enumerate(seeds):
        _grad(tmp_path, f"grad_align_{method}" + (f"_s{i}" if i else ""), pair, cells)
    return tmp_path


def test_angle_claims_take_the_seed_as_unit_and_need_its_interval_inside_the_band(tmp_path):
    """A seed's checkpoints are one unit (their intervals averaged, not narrowed); the seeds
    pooled decide: inside 75-105 reproduced, a straddling pooled interval partly with a clear
    seed and inconclusive without, a point outside the band not reproduced."""
    def ortho(*seeds):
        return claims.orthogonal(_seeds_of_grads(tmp_path, "opd", "opd~ctx", seeds))

    inside = [(90, 80, 100), (88, 78, 99)]
    c = ortho(inside, inside, inside)
    assert c.verdict == "reproduced" and c.coverage == (3, 3)
    assert "per seed s0: 89 [79, 100], s1: 89 [79, 100], s2: 89 [79, 100]" in c.measured
    # twelve checkpoints would count as twelve units; three seeds are three: one seed's
    # checkpoints all acute make the pooled mean fall outside the band
    acute = [(60, 50, 70), (62, 52, 72)]
    assert ortho(inside, acute, acute).cell.startswith("not reproduced (the estimate lies "
                                                       "outside 75-105")
    # one clear seed, the pooled interval straddling a bound with its point inside: partly
    loose = [(95, 70, 120)]
    assert ortho(inside, loose, [(100, 85, 110)]).cell.startswith(
        "partly (the pooled interval straddles a bound; 1 of 3 seeds inside")
    # nothing clear and nothing against: the data cannot tell
    assert ortho(loose, loose, loose).verdict == "inconclusive"
    # one seed: it decides, and says it cannot generalise
    one = ortho(inside)
    assert one.verdict == "reproduced" and "1 seed; 3 needed to generalise" in one.reason
    # checkpoints without signal are left out and counted; a seed with none is not judged
    assert "1 checkpoint without signal left out" in ortho(inside + [None], inside, inside).reason
    assert ortho([None], [None], inside).verdict == "not measurable"
    # an older report without the corrected angle: rerun, said in one line
    (tmp_path / "grad_align_opd.json").write_text(json.dumps({"results": {"step_0": {
        "global": {"angle_xfit_deg": {"opd~ctx": 90}}}}}))
    with pytest.raises(ValueError, match="--parts 4"):
        claims.orthogonal(tmp_path)
    # a folder without aligned gradients: the row stays, not run, with its command
    for f in tmp_path.glob("grad_align_*.json"):
        f.unlink()
    row = next(c for c in claims.claims(tmp_path) if c.name.startswith("OPD's gradient"))
    assert row.verdict == "not run" and "grad_align --parts 4" in row.reason


def test_a_noise_corrected_cosine_outside_its_range_gives_no_angle(tmp_path):
    """U_ab / sqrt(U_aa U_bb) leaves [-1, 1] where a term's signal is within its noise: such a
    checkpoint has no angle (left out, counted as without signal), never a clipped 0 or 180
    degrees averaged into its seed."""
    def new_direction(*seeds):
        return claims.nca_new_direction(_seeds_of_grads(tmp_path, "nca", "opd~nca", seeds))

    inside = [(90, 82, 98), (92, 84, 100)]
    clipped = inside + [(180, 120, 180, -2.97)]  # cos -2.97 shown as 180 degrees
    c = new_direction(clipped, inside, inside + [(0, 0, 40, 1.3)])
    assert c.verdict == "reproduced" and c.coverage == (3, 3)
    assert "2 checkpoints without signal left out" in c.reason
    assert "s0: 91 [83, 99]" in c.measured  # the clipped 180 is not averaged in
    assert "s0: 90 92 -; s1: 90 92; s2: 90 92 -" in c.measured  # nor shown as an angle
    assert rules.cosine_in_range(1.0) and rules.cosine_in_range(-1.0)
    assert not rules.cosine_in_range(1.0001) and rules.cosine_in_range(None)
    # a seed whose every checkpoint left the range is not judged
    assert new_direction([(0, 0, 30, 1.2)], [(180, 150, 180, -1.5)],
                         inside).verdict == "not measurable"


def test_an_angle_between_gradients_on_disjoint_supports_is_not_judged(tmp_path):
    """Given each module's norm, the largest cosine two gradients can reach is
    sum |a_m||b_m| / (|a||b|); where that cannot reach cos 75 deg, 90 deg is forced by where
    the gradients live (the context view's gradient in the embedding, OPD's elsewhere)."""
    from nca_interp.paper.claims.gradients import support_bound

    disjoint = {"all.embed": {"norm": {"opd": 0.01, "ctx": 5.0}},
                "0.q_proj": {"norm": {"opd": 1.0, "ctx": 0.01}}}
    shared = {"all.embed": {"norm": {"opd": 1.0, "ctx": 5.0}},
              "0.q_proj": {"norm": {"opd": 1.0, "ctx": 1.0}}}
    assert support_bound(disjoint, "opd", "ctx") < rules.SUPPORT_MIN < support_bound(
        shared, "opd", "ctx")
    assert support_bound({"m": {"norm": {"opd": 2.0, "ctx": 3.0}}}, "opd", "ctx") == 1.0
    cells = [(90, 85, 95)] * 2
    for i in range(3):
        _grad(tmp_path, "grad_align_opd" + (f"_s{i}" if i else ""), "opd~ctx", cells, disjoint)
    c = claims.orthogonal(tmp_path)
    assert c.verdict == "not measurable" and c.coverage == (0, 3)
    for i in range(3):
        _grad(tmp_path, "grad_align_opd" + (f"_s{i}" if i else ""), "opd~ctx", cells, shared)
    c = claims.orthogonal(tmp_path)
    assert c.verdict == "reproduced" and "largest cosine the supports allow 0.83" in c.null


def test_nca_improves_no_c_is_an_effect_over_seed_pairs(tmp_path):
    """NCA - OPD accuracy without c on the same items: each seed pair a unit with its paired
    interval, the pairs pooled; better in every pair is reproduced (one pair says it cannot
    generalise), equal is an absence shown within the margin, as many worse as better is no
    improvement."""
    units = [f"u{i}" for i in range(200)]

    def rep(won):
        return {"items": {"unit": units, "correct_no_c": won, "correct_c": won}}

    def write(results):
        (tmp_path / "context_control.json").write_text(json.dumps({"results": results}))
        return claims.nca_improves_no_c(tmp_path)

    rng = __import__("numpy").random.default_rng(0)
    opd = (rng.random(200) < 0.5).astype(int).tolist()
    better = [1 if o or rng.random() < 0.5 else 0 for o in opd]  # NCA right wherever OPD is
    one = write({"t_base": rep(opd), "t_opd_s0": rep(opd), "t_nca_s0": rep(better)})
    assert one.verdict == "reproduced" and "1 seed pair; 3 needed to generalise" in one.reason
    assert one.measured.startswith("NCA - OPD 0.2")
    three = write({**{f"t_opd_s{i}": rep(opd) for i in range(3)},
                   **{f"t_nca_s{i}": rep(better) for i in range(3)}})
    assert three.verdict == "reproduced" and three.detectable
    same = write({f"t_opd_s{i}": rep(opd) for i in range(3)} |
                 {f"t_nca_s{i}": rep(opd) for i in range(3)})
    assert same.cell == "not reproduced (the interval excludes an effect of 0.02)"
    # better in one pair, worse in another, unchanged in a third: no improvement shown
    mixed = write({"t_opd_s0": rep(opd), "t_nca_s0": rep(better), "t_opd_s1": rep(better),
                   "t_nca_s1": rep(opd), "t_opd_s2": rep(opd), "t_nca_s2": rep(opd)})
    assert mixed.verdict in ("inconclusive", "not reproduced") and mixed.verdict != "partly"


def test_accuracies_at_zero_everywhere_are_one_reading_a_measured_floor(tmp_path):
    """Nobody right on any item without c: internalizing and NCA's gain without c are the same
    kind of measurement (a zero-width interval on the null, against), both not reproduced with
    the floor named and no detectable effect; the harm, undefined there, is what is not
    measurable."""
    units = [f"u{i}" for i in range(50)]
    zero = {"items": {"unit": units, "correct_no_c": [0] * 50, "correct_c": [1] * 50}}
    reps = {"t_base": zero, **{f"t_{m}_s{i}": zero for m in ("opd", "nca") for i in range(3)}}
    (tmp_path / "context_control.json").write_text(json.dumps({"results": reps}))
    gain = claims.nca_improves_no_c(tmp_path)
    floor = report(0.0, 0.9, None, "B", ci_no_c=(0.0, 0.0))
    inside = claims.internalizes(write(tmp_path, {"b": floor, **{f"t_opd_s{i}": floor
                                                                 for i in range(3)}}))
    for c in (gain, inside):
        assert c.verdict == "not reproduced" and "a floor: no student is right" in c.reason
        assert c.detectable == "-"


def test_nca_prevents_pools_harm_over_seed_and_unit_clusters(tmp_path):
    """The paired OPD - NCA harm interval pools seeds; with 8 seeds where OPD loses one of 8
    facts' items per seed it stands clear of 0, while one harmed fact in one seed (the old
    sysprompt evidence: 3/3 vs 0/3) does not, and the verdict says so."""
    units = [f"fact{i}" for i in range(8) for _ in range(6)]

    def items(harmed: set[str]):  # the first item of each harmed fact is lost with c
        return {"unit": units, "correct_no_c": [True] * len(units),
                "correct_c": [not (u in harmed and units.index(u) == i) for i, u in
                          enumerate(units)]}

    def write(harm_per_seed: list[set[str]]):
        reps = {"t_base": {"harm": 0.0, "regime": "B"}}
        for s, harmed in enumerate(harm_per_seed):
            h = len(harmed) / len(units)
            reps[f"t_opd_s{s}"] = {"harm": h, "regime": "A", "correct_c": 1 - h,
                                   "correct_no_c": 1.0, "delta_c": -h,
                                   "ci95": {"delta_c": [-h - 0.03, -h + 0.03]},
                                   "items": items(harmed)}
            reps[f"t_nca_s{s}"] = {"harm": 0.0, "regime": "C", "items": items(set())}
        (tmp_path / "context_return.json").write_text(json.dumps({"results": reps}))
        return claims.nca_prevents(tmp_path)

    many = write([{f"fact{i}" for i in range(8)}] * 8)  # 8 items of 48 in every seed
    assert many.cell == "reproduced" and "pooled over 8 seed pairs: +0.167 [+" in many.null
    # one lost item per seed in 3 seeds: a drop of 0.02 the data cannot tell from none:
    # OPD's break is not shown, so there is nothing for NCA to prevent
    few = write([{"fact0"}, {"fact3"}, {"fact5"}])
    assert few.cell == ("not measurable (OPD's break is inconclusive here: nothing shown to "
                        "prevent)")


def test_pooled_claims_over_two_knowledge_bases(tmp_path):
    """Two settings x 4 seeds judged together: OPD's pooled harm is established against the
    teachers' harm on the same items, the paired OPD - NCA interval clears 0, and the same
    data with NCA harmed like OPD (or OPD no worse than its teacher) is not called a fix."""
    units = [f"fact{i}" for i in range(8) for _ in range(6)]

    def items(lost: int, gained: int = 0):
        """The first `lost` facts each lose their first item with c; the first `gained` facts
        have their last item wrong without c and right with it."""
        first = {u: units.index(u) for u in units}
        last = {u: len(units) - 1 - units[::-1].index(u) for u in units}
        return {"unit": units,
                "correct_no_c": [not (int(u[4:]) < gained and last[u] == i)
                             for i, u in enumerate(units)],
                "correct_c": [not (int(u[4:]) < lost and first[u] == i)
                          for i, u in enumerate(units)]}

    def write(opd_lost, nca_lost, regime_opd="A", opd_gained=0):
        for kb in (0, 1):
            reps = {"t_base": {"harm": 0.0, "regime": "B", "items": items(0)}}
            for s in range(4):
                reps[f"kb{kb}_opd_s{s}"] = {"regime": regime_opd,
                                            "items": items(opd_lost, opd_gained)}
                reps[f"kb{kb}_nca_s{s}"] = {"regime": "C", "items": items(nca_lost)}
            (tmp_path / f"kb{kb}").mkdir(exist_ok=True)
            (tmp_path / f"kb{kb}" / "context_return.json").write_text(
                json.dumps({"results": reps}))
        return claims.pooled_claims(("kb0", "kb1"), tmp_path)

    breaks, prevents, reads, improves = write(opd_lost=4, nca_lost=0, regime_opd="C")
    # every seed's own paired interval lies below 0 (the regime label is not the test), the
    # pooled wider interval too, and the harm clears the teachers' and chance: reproduced
    assert breaks.measured.startswith("OPD: accuracy with c - without -0.083 [") and \
        "harm 0.083 [" in breaks.measured and breaks.cell == (
            "reproduced (8 of 8 seeds clear on their own; regime A (a seed's own interval, by "
            "the few-clusters rule, below 0) in 0 of 8 seeds; OPD's harm its "
            "own by the harm rule (above the teachers' harm, and in A or above the "
            "independence baseline))")
    assert breaks.detectable == "0.066"  # 16 (setting, fact) clusters: the t interval
    assert "with c - without +0.000" in breaks.null  # the teachers' own change: the null
    assert reads.cell == "not measurable (not measured here)"  # no control run written here
    assert "8 seeds over 2 settings" in breaks.null
    assert prevents.cell == "reproduced" and "OPD - NCA harm +0.083 [+" in prevents.null
    assert improves.verdict == "not reproduced"  # equal accuracy without c: no improvement
    same = write(opd_lost=4, nca_lost=4)[1]
    assert same.verdict == "not reproduced" and "OPD - NCA harm +0.000" in same.null
    weak = write(opd_lost=4, nca_lost=0, opd_gained=4)[0]  # as many items gained as lost
    assert weak.verdict == "not reproduced"  # accuracy with c no lower on average: no break
    # one fact lost in every seed: seeds as replicates would call it established, the same
    # fact drawn with all its seeds does not
    one = write(opd_lost=1, nca_lost=0)[0]
    harm = one.measured.split("harm ")[1]
    seed_lo = float(harm.split("[")[1].split(",")[0])
    fact_lo = float(harm.split("[")[2].split(",")[0])
    assert seed_lo > 0 and fact_lo == 0 and one.verdict == "inconclusive"
    assert "OPD's harm not its own by the harm rule" in one.reason

    def control(lo, teacher=0.3):  # every run's reads_c with its interval
        for kb in (0, 1):
            reps = {f"kb{kb}_{m}_s{s}": {"control": {"reads_c": lo + 0.1,
                                                     "reads_c_ci95": [lo, lo + 0.2]}}
                    for m in ("opd", "nca") for s in range(4)}
            reps["t_base"] = {"control": {"reads_c": teacher, "reads_c_ci95": [0.1, 0.7]}}
            (tmp_path / f"kb{kb}" / "context_control.json").write_text(
                json.dumps({"results": reps}))
        return claims.pooled_claims(("kb0", "kb1"), tmp_path)[2]

    # reads_c 0 with intervals of +-0.1 over 8 seeds cannot exclude 0.02: inconclusive
    assert control(-0.1).verdict == "inconclusive"
    assert control(-0.3).cell.startswith("not reproduced (NCA is blind to what c says")
    assert control(0.1).verdict == "reproduced"
    assert "NCA reads_c 0.200 beside the teachers' mean 0.800: 25% of it" in control(0.1, 0.8).cell
    none = write(opd_lost=0, nca_lost=0, regime_opd="C")
    assert none[0].verdict == "not reproduced" and none[1].verdict == "not measurable"


def test_size_matched_control_separates_direction_from_size(tmp_path):
    """NCA apart from a size-matched OPD (cross cosines below every seed-to-seed one, 4 seeds
    each: exact p 2/70) is reproduced; a sized OPD as close to NCA as seeds are to each other
    is not; unmatched sizes are not judged."""
    from itertools import combinations

    def write(cross, within, nca_size=1.0, sized="opdsized"):
        runs = [f"r/x_{k}_s{s}" for k in ("opd", sized, "nca") for s in range(4)]
        size = {"opd": 0.8, sized: 1.0, "nca": nca_size}
        per = {r: {"global_sq": size[r.split("_")[1]] ** 2} for r in runs}  # keyed by path
        pairs = {}
        for a, b in combinations(runs, 2):  # keyed by run name, as param_delta writes them
            ka, kb = a.split("_")[1], b.split("_")[1]
            cos = within if ka == kb else 0.9 if "opd" in (ka, kb) else cross
            pairs[f"{a[2:]}~{b[2:]}"] = {"global_cos": cos}
        (tmp_path / "param_delta.json").write_text(json.dumps(
            {"results": per, "all_pairs": pairs}))
        return claims.size_matched(tmp_path)

    apart = write(cross=0.3, within=0.6)
    assert apart.verdict == "reproduced" and "p = 0.029" in apart.null
    assert "size alone: cos(d OPD, d sized OPD) same seed 0.900" in apart.null
    assert write(cross=0.6, within=0.6).cell.startswith(
        "not reproduced (the cross-group mean lies at the seed-to-seed mean, short")
    assert write(cross=0.3, within=0.6, nca_size=1.5).cell.startswith("not measurable (sizes")
    # a later round's runs (opdsized2) are the sized group; the manifest names its lr
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"rounds": [{"round": 1, "lr_multiplier": 1.229}, {"round": 2, "lr_multiplier": 1.6}]}))
    second = write(cross=0.3, within=0.6, sized="opdsized2")
    assert second.verdict == "reproduced" and "p = 0.029" in second.null
    assert second.name.endswith("(OPD at lr x1.60, round 2 of size matching)")


def test_a_new_direction_is_near_orthogonal_and_an_opposing_term_is_said_apart(tmp_path):
    """opd~nca in the NCA runs, seeds as units: inside 75-105 a new direction; wholly beyond
    105 the NCA term opposes OPD's, which is no new direction, and the reason says so."""
    def direction(*seeds):
        return claims.nca_new_direction(_seeds_of_grads(tmp_path, "nca", "opd~nca", seeds))

    new = [(90, 82, 98)]
    assert direction(new, new, new).verdict == "reproduced"
    oppose = [(125, 115, 135)]
    c = direction(oppose, oppose, oppose)
    assert c.verdict == "not reproduced" and "the NCA term opposes OPD's" in c.reason
    c = direction(new, new, oppose)
    assert "in 1 seed the NCA term opposes OPD's" in c.reason
    assert direction([(30, 20, 40)], [(35, 25, 45)], new).verdict == "not reproduced"


def test_heads_verdict_needs_one_stable_head_clear_of_random_heads_on_held_out_cases(tmp_path):
    def row(k, a, b, p_ld=0.01, p_flip=0.01, lo=0.4, broken_hi=0.1, nulls=True):
        r = {"k": k, "chosen_on_a": a, "chosen_on_b": b, "percentile": 100.0,
             "effect": {"mean": 0.6, "lo": lo, "hi": 0.8},
             "flipped": {"mean": 0.5, "lo": 0.3, "hi": 0.7},
             "broken_control": {"mean": 0.05, "lo": 0.0, "hi": broken_hi}}
        if nulls:
            r["effect_null"] = {"n": 100, "mean": 0.1, "lo": -0.4, "hi": 0.3, "p": p_ld}
            r["flipped_null"] = {"n": 100, "mean": 0.2, "lo": 0.0, "hi": 0.4, "p": p_flip}
        return r

    def verdict(rows, harm=40, ablate="prefix"):
        rep = {"kind": "harm", "ablate": ablate, "counts": {"harm": harm}, "harm": {"n": harm},
               "heads": {"rows": rows + [row(16, ["L0H0"], ["L0H0"], nulls=False)]}}
        (tmp_path / "patching.json").write_text(json.dumps(
            {"results": {"t_opd_s0": rep, "t_base": {"kind": "harm"}}}))
        return claims.heads_carry_harm(tmp_path)

    two = row(2, ["L2H2", "L1H0"], ["L2H2", "L1H1"])
    assert verdict([row(1, ["L2H2"], ["L2H2"]), two]).cell == "reproduced"
    # the same effect, but the halves disagree on the head: not one head
    assert verdict([row(1, ["L2H2"], ["L0H1"]), two]).cell.startswith("partly (one head")
    # the answers flip no more often than with random heads: only the pair stands clear
    assert verdict([row(1, ["L2H2"], ["L2H2"], p_flip=0.2), two]).cell.startswith(
        "partly (no single head")
    # the LD interval reaches down to the random heads' mean
    assert verdict([row(1, ["L2H2"], ["L2H2"], lo=0.05), two]).cell.startswith("partly")
    # breaking as many controls as it fixes harm cases is not a localisation
    assert verdict([row(1, ["L2H2"], ["L2H2"], broken_hi=0.5),
                    row(2, ["L2H2", "L1H0"], ["L2H2", "L1H1"], broken_hi=0.5)]).cell == \
        "not reproduced"
    assert verdict([row(1, ["L2H2"], ["L2H2"])], harm=10).cell.startswith(
        "not measurable (t_opd_s0: 10 harm cases (fewer than 20)")
    assert "c's own tokens only" in verdict([row(1, ["L2H2"], ["L2H2"])], ablate="context").null
    assert "c's own tokens only" not in verdict([row(1, ["L2H2"], ["L2H2"]), two]).null


def test_heads_count_their_seeds_as_trained(tmp_path):
    """The coverage rule, no exemption (#70's B3): one OPD seed patched of the three trained
    is not measurable, the reason naming the seed patched and the command that patches the
    rest; two of three patched are judged, every one clear for reproduced."""
    def row(k, clear=True):
        return {"k": k, "chosen_on_a": ["L2H2"], "chosen_on_b": ["L2H2"], "percentile": 100.0,
                "effect": {"mean": 0.6, "lo": 0.4, "hi": 0.8},
                "flipped": {"mean": 0.5, "lo": 0.3, "hi": 0.7},
                "broken_control": {"mean": 0.05, "lo": 0.0, "hi": 0.1},
                "effect_null": {"n": 100, "mean": 0.1, "lo": -0.4, "hi": 0.3,
                                "p": 0.01 if clear else 0.3},
                "flipped_null": {"n": 100, "mean": 0.2, "lo": 0.0, "hi": 0.4, "p": 0.01}}

    def patched(clear: list[bool]):
        rep = {f"t_opd_s{i}": {"kind": "harm", "ablate": "prefix", "counts": {"harm": 40},
                               "harm": {"n": 40}, "heads": {"rows": [row(1, c)]}}
               for i, c in enumerate(clear)}
        (tmp_path / "patching.json").write_text(json.dumps(
            {"config": {"ckpt": [f"runs/t_opd_s{i}" for i in range(len(clear))],
                        "context": "plan", "kind": "harm", "max_cases": 64,
                        "out": "figures/t/patching"},
             "results": {**rep, "t_base": {"kind": "harm"}}}))
        return claims.heads_carry_harm(tmp_path)

    runs = {f"t_opd_s{i}": {"path": f"runs/t_opd_s{i}", "method": "opd", "seed": i}
            for i in range(3)}
    (tmp_path / "context_return.json").write_text(json.dumps(
        {"runs": {"t_base": {"path": "runs/t_base"}, **runs},
         "results": {k: {"correct_no_c": 0.5} for k in ("t_base", *runs)}}))
    one = patched([True])
    assert one.verdict == "not measurable" and one.coverage == (1, 3)
    assert "only t_opd_s0 patched and judged: 1 of the 3 OPD seeds trained" in one.reason
    assert "python -m nca_interp.patching runs/t_opd_s0 runs/t_opd_s1 runs/t_opd_s2 " \
        "--context plan --kind harm --max-cases 64 --out figures/t/patching" in one.reason
    assert patched([True, True]).verdict == "reproduced"
    assert patched([True, False]).verdict == "partly"
    assert patched([True, True]).coverage == (2, 3)


def test_referee_tally_groups_settings_by_verdict_word_and_keeps_unmeasured_rows(tmp_path):
    from nca_interp.paper import referee

    assert referee.tally([("a", "reproduced"), ("b", "partly"), ("c", "reproduced"),
                          ("d", "not reproduced")]) == \
        "**reproduced** in 2 (a, c); **partly** in 1 (b); **not reproduced** in 1 (d)"
    # a setting without the rule's JSON has no row; one with it is judged with its seeds
    base = {"correct_no_c": 0.9, "correct_c": 0.95, "harm": 0.01, "regime": "B"}
    for name, patched in (("sokoban", True), ("frozenlake", False)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "context_return.json").write_text(json.dumps(
            {"results": {f"{name}_base": base, f"{name}_opd_s0": base, f"{name}_opd_s3": base,
                         f"{name}_nca_s0": base}}))
        if patched:
            (tmp_path / name / "patching.json").write_text(json.dumps(
                {"results": {f"{name}_opd_s0": {"kind": "harm", "counts": {"harm": 2}}}}))
    text = referee.section(1, referee.VERDICTS[0], tmp_path)
    assert "| `sokoban` | patched: sokoban_opd_s0 |" in text
    # a setting without the rule's input keeps its row, "not run" with the command
    assert "| `frozenlake` | - | not run | needs patching.json |" in text
    assert referee.seeds_of(tmp_path / "frozenlake") == "opd 0,3; nca 0"
    assert "**not measurable** in 1 (sokoban)" in text


def test_referee_refresh_refuses_a_page_without_its_block():
    import pytest

    from nca_interp.errors import UsageError
    from nca_interp.paper import referee

    with pytest.raises(UsageError, match="has no generated block <!-- referee:begin"):
        referee.refresh("# a page someone rewrote\n")


def test_a_claim_takes_only_the_rule_books_words_and_renders_its_reason_apart():
    c = claims.Claim("x", "1", "0", "partly", "2 of 3 seeds",
                     also=(("scaled threshold", "reproduced", ""),))
    assert c.cell == "partly (2 of 3 seeds); scaled threshold: reproduced"
    for word in ("reproduced (all)", "in the 2 seed pairs measured", "not informative",
                 "not measured"):
        with pytest.raises(ValueError, match="not one of"):
            claims.Claim("x", "1", "0", word)
    with pytest.raises(ValueError, match="not one of"):
        claims.Claim("x", "1", "0", "partly", also=(("t", "likely", ""),))


def test_the_later_layer_gap_is_opds_below_ncas_and_below_one_beyond_item_noise(tmp_path):
    """The paper's gap: OPD's later-half cosine below NCA's of the same seed and below 1,
    each by more than its 95% item noise; the same means with a wide spread are not clear;
    whether OPD widened step 0's gap is said apart."""
    def write(std, opd=0.90, nca=0.99, base=0.95, se=None):
        def row(cos):
            out = {"cos": [1.0, 0.99, 0.99, cos, cos], "cos_std": [0.0, 0.01, 0.01, std, std],
                   "n_examples": 100}
            return out if se is None else {**out, "cos_se": [0.0, 0.001, 0.001, se, se]}
        (tmp_path / "layer_sim.json").write_text(json.dumps({"results": {
            "t_base": row(base), "random_init": row(0.5),
            **{f"t_opd_s{s}": row(opd) for s in range(3)},
            **{f"t_nca_s{s}": row(nca) for s in range(3)}}}))
        return claims.opd_gap(tmp_path)

    tight = write(0.05)  # se 0.005 per run: +0.09 +- 0.014
    assert tight.verdict == "reproduced" and "+0.090 [" in tight.measured
    assert "OPD widened step 0's gap in 3 of 3 seeds" in tight.null
    # OPD keeps step 0's gap (no widening) while NCA closes it: the paper's claim holds
    kept = write(0.05, opd=0.95)
    assert kept.verdict == "reproduced" and "in 0 of 3 seeds" in kept.null
    assert write(0.5).verdict == "inconclusive"  # se 0.05: the interval reaches 0 and 0.09
    # the same spread over 100 examples that are 5 facts asked 20 ways: layer_sim's clustered
    # standard error (cos_se) decides, not cos_std / sqrt(n_examples)
    assert write(0.05, se=0.05).verdict == "inconclusive"
    assert write(0.5, se=0.005).verdict == "reproduced"
    assert write(0.05, opd=0.99, nca=0.90).verdict == "not reproduced"  # OPD clear above NCA
    # NCA below OPD: the mean on the wrong side
    assert write(0.05, opd=0.99, nca=0.95).verdict == "not reproduced"
    # OPD within noise of 1 and of NCA's 1.0: no gap shown, nor its absence
    flat = write(0.05, opd=0.999, nca=1.0)
    assert flat.verdict == "inconclusive" and "within noise of 1 in 3 seeds" in flat.reason


def _dose(tmp_path, per_seed, half, t95, reports):
    write(tmp_path, reports)
    h = {"per_seed": per_seed, "half": half, "pairs": 3 * len(per_seed), "n": len(per_seed),
         "mean": sum(per_seed.values()) / len(per_seed), "min": min(per_seed.values()),
         "max": max(per_seed.values()), "t95": t95,
         "below_0": sum(v < 0 for v in per_seed.values()), "seeds": sorted(per_seed)}
    (tmp_path / "harm_drift.json").write_text(json.dumps({"matched": {"nca - opd": {
        "harm": h}}}))
    return tmp_path


def test_harm_at_matched_drift_is_judged_per_seed_and_only_where_opd_is_harmed(tmp_path):
    base = report(0.9, 0.95, 0.01, "B")
    harmed = report(0.9, 0.7, 0.2, "A", ci_harm=(0.1, 0.3))
    runs = {"t_base": base, "t_opd_s0": harmed, "t_opd_s1": harmed}
    figs = _dose(tmp_path, {"0": -0.1, "1": -0.08}, {"0": 0.05, "1": 0.05}, [-0.2, -0.01], runs)
    assert claims.harm_not_drift(figs).cell == "reproduced"
    # one seed's mean inside its half-width, and the t interval reaching 0: partly
    figs = _dose(tmp_path, {"0": -0.1, "1": -0.02}, {"0": 0.05, "1": 0.05}, [-0.5, 0.4], runs)
    assert claims.harm_not_drift(figs).cell == "partly"
    # a pooled interval clear of 0 with a majority of seeds clear: reproduced
    three = {**runs, "t_opd_s2": harmed}
    figs = _dose(tmp_path, {"0": -0.1, "1": -0.1, "2": -0.02}, {"0": 0.05, "1": 0.05, "2": 0.05},
                 [-0.2, -0.01], three)
    assert claims.harm_not_drift(figs).cell == "reproduced"
    # the mean above 0: not reproduced, whatever one seed shows
    figs = _dose(tmp_path, {"0": -0.1, "1": 0.3}, {"0": 0.05, "1": 0.05}, [-2.0, 2.0], runs)
    assert claims.harm_not_drift(figs).cell == "not reproduced"
    # OPD's harm not its own (under step 0's, not regime A): nothing to attribute
    unharmed = report(0.9, 0.9, 0.05, "C", ci_harm=(0.0, 0.1))
    figs = _dose(tmp_path, {"0": -0.1, "1": -0.08}, {"0": 0.05, "1": 0.05}, [-0.2, -0.01],
                 {"t_base": report(0.9, 0.95, 0.2, "B"), "t_opd_s0": unharmed,
                  "t_opd_s1": unharmed})
    assert claims.harm_not_drift(figs).verdict == "not measurable"
    # a file written before the per-seed intervals: said so, never a KeyError
    figs = _dose(tmp_path, {"0": -0.1, "1": -0.08}, {}, None, runs)
    old = json.loads((figs / "harm_drift.json").read_text())
    del old["matched"]["nca - opd"]["harm"]["half"]
    (figs / "harm_drift.json").write_text(json.dumps(old))
    assert "rerun" in claims.harm_not_drift(figs).reason
    # a beta variant trains no OPD: the row stays, not measurable, and says why
    (tmp_path / "harm_drift.json").write_text(json.dumps({"matched": {}}))
    assert claims.harm_not_drift(tmp_path).reason == "no OPD run trained beside NCA here"
    (tmp_path / "harm_drift.json").unlink()
    row = next(c for c in claims.claims(tmp_path) if "matched drift" in c.name)
    assert row.verdict == "not run" and "python -m nca_interp.paper.dose" in row.reason


def test_power_judges_the_same_seeds_on_both_item_sets(tmp_path):
    """more_items/ holds the same students on more questions: each accuracy claim is judged
    on the published items restricted to the seeds both evaluated, and on the larger set,
    with its detectable effect; four times the items roughly halve it."""
    from nca_interp.paper.claims import power

    def rep(n_items, seeds, drop):
        units = [f"f{i // 4}" for i in range(n_items)]
        won = [1] * n_items
        rng = __import__("numpy").random.default_rng(n_items)
        lost = [0 if drop and rng.random() < 0.25 else 1 for _ in range(n_items)]
        r = {"t_base": {"harm": 0.0, "regime": "B", "correct_c": 1.0, "correct_no_c": 1.0,
                        "items": {"unit": units, "correct_no_c": won, "correct_c": won}}}
        for s in seeds:
            for m in ("opd", "nca"):
                w_c = lost if m == "opd" else won
                r[f"t_{m}_s{s}"] = {
                    "harm": 0.25 if m == "opd" else 0.0, "regime": "A" if m == "opd" else "C",
                    "correct_c": sum(w_c) / n_items, "correct_no_c": 1.0,
                    "delta_c": sum(w_c) / n_items - 1.0,
                    "ci95": {"harm": [0.1, 0.4], "delta_c": [-0.4, -0.1], "correct_c": [0.6, 0.9]},
                    "items": {"unit": units, "correct_no_c": won, "correct_c": w_c}}
        return {"results": r}

    (tmp_path / power.MORE).mkdir()
    (tmp_path / "context_return.json").write_text(json.dumps(rep(16, range(5), True)))
    more = rep(64, range(3), True)
    more["config"] = {"ckpt": ["base", "t_opd_s0"], "context": "rule", "n_levels": 64,
                      "task_options": ["n_entities=16"], "png": False,
                      "out": "figures/t/more_items/context_return.json"}
    (tmp_path / power.MORE / "context_return.json").write_text(json.dumps(more))
    found = power.rows(tmp_path)
    assert [(n_a, n_b) for _, _, n_a, n_b in found] == [(16, 64)] * 4
    breaks_a, breaks_b = found[0][0], found[0][1]
    assert breaks_a.coverage == (3, 3) and breaks_b.coverage == (3, 3)  # seeds 0-2 both sides
    assert float(breaks_b.detectable) < float(breaks_a.detectable)
    assert "seeds 0, 1, 2" in power.table(tmp_path)
    assert ("Written by `python -m nca_interp.evaluate base t_opd_s0 --task-options "
            "n_entities=16 --context rule --n-levels 64 --out "
            "figures/t/more_items/context_return.json`.") in power.table(tmp_path)
    assert power.table(tmp_path / "nowhere") == ""
    # retrained students on the published items: the left column reads them, and the page
    # says which give the published per-item results (seed 1's OPD loses one more answer)
    same = json.loads(json.dumps(rep(16, range(3), True)))  # lists unshared
    same["results"]["t_opd_s1"]["items"]["correct_c"][0] = 1 - \
        same["results"]["t_opd_s1"]["items"]["correct_c"][0]
    (tmp_path / power.MORE / power.SAME).mkdir()
    (tmp_path / power.MORE / power.SAME / "context_return.json").write_text(json.dumps(same))
    text = power.table(tmp_path)
    assert "5 of 6 give the published per-item results exactly; t_opd_s1 (1 answer) differs" \
        in text
    assert power.rows(tmp_path)[0][0].coverage == (3, 3)


def test_the_power_table_says_which_wrong_context_each_column_used(tmp_path):
    """The power table's 'reads c' rows compare two control reports: where their c' differ
    (facts' rule kind changed its c' in session 45) the page says so; where they agree it names
    it once; where neither records one, nothing."""
    from nca_interp.paper.claims import power

    def control(note):
        ctl = {"win": 0.5, "reads_c": 0.1, **({"c_prime": note} if note else {})}
        return {"results": {"t_nca_s0": {"correct_c": 0.6, "correct_no_c": 0.5,
                                         "control": ctl}}}

    (tmp_path / power.MORE / power.SAME).mkdir(parents=True)
    assert power.c_primes(tmp_path) == ""
    for where, note in ((tmp_path / power.MORE / power.SAME, None),
                        (tmp_path / power.MORE, "another rule")):
        (where / "context_control.json").write_text(json.dumps(control(note)))
    said = power.c_primes(tmp_path)
    assert "differ" in said and "left not recorded in its report; right another rule" in said
    (tmp_path / power.MORE / power.SAME / "context_control.json").write_text(
        json.dumps(control("another rule")))
    assert power.c_primes(tmp_path) == " The wrong context c' of both control columns: " \
        "another rule."
    (tmp_path / "context_control.json").write_text(json.dumps(control(None)))
    assert power.c_primes(tmp_path).endswith(" The setting's own control report, which the "
                                             "verdict table above reads, used another c': not "
                                             "recorded in its report.")


def test_the_stability_check_names_every_verdict_that_changes_with_the_bootstrap_seed(
        tmp_path, monkeypatch):
    """`flips` judges each setting under several bootstrap seeds and names a claim whose
    verdict word changes; the seed really reaches the claims' bootstrap."""
    from nca_interp.paper.claims import stats

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "context_return.json").write_text("{}")
    monkeypatch.setattr(claims, "pooled_settings", lambda: {})

    def judged(figs):
        word = "reproduced" if stats.BOOTSTRAP["seed"] < 3 else "inconclusive"
        return [claims.Claim("edge", "-", "-", word), claims.Claim("firm", "-", "-", "partly")]

    monkeypatch.setattr(claims, "judged", judged)
    assert claims.flips(tmp_path, seeds=5) == [
        "a: edge: reproduced, reproduced, reproduced, inconclusive, inconclusive"]
    assert stats.BOOTSTRAP["seed"] == 0  # restored


def test_the_vectorised_cluster_bootstrap_equals_the_index_sets_it_replaces():
    """boot_mean and the paired harm gap read per-cluster sums over the very draws of
    `resample`: the same statistics as the index sets, to rounding."""
    import numpy as np

    from nca_interp.paper.claims import stats

    rng = np.random.default_rng(3)
    v = rng.random(500)
    clusters = [f"u{i % 37}" for i in range(500)]
    slow = np.array([v[i].mean() for i in stats.resample(clusters)])
    assert np.abs(stats.boot_mean(v, clusters) - slow).max() < 1e-12
    w0, w1 = rng.random(500) < 0.7, rng.random(500) < 0.6
    lost, won = stats.cluster_sums([w0 & ~w1, w0], clusters)
    ratio = np.array([stats.pooled_harm_rate(w0[i], w1[i]) for i in stats.resample(clusters)])
    assert np.abs(lost / won - ratio).max() < 1e-12


def test_the_stability_check_covers_both_columns_of_the_power_table(tmp_path, monkeypatch):
    """A power-table verdict that moves with the bootstrap seed is named by `flips`, on
    either column; the claims themselves are stable here."""
    from nca_interp.paper import claims
    from nca_interp.paper.claims import power, stats

    (tmp_path / "s").mkdir()
    monkeypatch.setattr(claims, "settings_judged", lambda root: [tmp_path / "s"])
    monkeypatch.setattr(claims, "judged", lambda figs: [])

    def moving():
        word = "partly" if stats.BOOTSTRAP["seed"] % 2 else "inconclusive"
        return claims.Claim("NCA keeps", "m", "n", word)

    monkeypatch.setattr(power, "rows", lambda figs: [(claims.Claim("NCA keeps", "m", "n",
                                                                   "partly"), moving(), 48, 192)])
    assert claims.flips(tmp_path, 3) == [
        "s: NCA keeps (power, more items): inconclusive, partly, inconclusive"]
    monkeypatch.setattr(power, "rows", lambda figs: [])
    assert claims.flips(tmp_path, 3) == []


def test_longer_answers_counted_per_seed_straddling_is_inconclusive(tmp_path):
    """Answers grow when each OPD seed's interval of the length change less step 0's (step 0
    above 0 here: its own interval in quadrature, the step-0 rule) lies above 0; intervals
    across it cannot tell; intervals below it say no."""
    def seed(rel, lo, hi):
        r = report(0.9, 0.8, 0.1, "A")
        r["rel_len_both"], r["ci95"]["rel_len_both"] = rel, [lo, hi]
        return r

    base = seed(0.01, -0.02, 0.04)
    grow, across, shrink = seed(0.3, 0.2, 0.4), seed(0.02, -0.05, 0.09), seed(-0.2, -0.3, -0.1)

    def verdict(*seeds):
        runs = {"t_base": base, **{f"t_opd_s{i}": s for i, s in enumerate(seeds)}}
        return claims.longer(write(tmp_path, runs))

    assert verdict(grow, grow, grow).verdict == "reproduced"
    assert verdict(grow, across, across).verdict == "partly"
    assert verdict(across, across, shrink).verdict == "inconclusive"
    assert verdict(shrink, shrink, across).verdict == "not reproduced"
    half = (0.1 ** 2 + 0.03 ** 2) ** 0.5  # the seed's and step 0's half-widths combined
    assert verdict(grow, grow).detectable == f"{100 * half * 2.801585 / 1.959964:.1f}%"


def test_shallow_qk_needs_every_checkpoint_shallow_and_q_k_on_top(tmp_path):
    """Per checkpoint: the first third of the layers moves more than the last third
    (Adam-normalised) and q_proj, k_proj are the two largest of the seven matrix types."""
    qk = {"q_proj": 3, "k_proj": 2, "v_proj": 1, "o_proj": 1, "gate_proj": 1, "up_proj": 1,
          "down_proj": 1}
    mlp = {**qk, "gate_proj": 5}

    def ckpt(shallow, deep, modules):
        return {"rel": {}, "adam_norm": {}, "share": {}, "per_module": {},
                "per_layer_adam": {"0": shallow, "1": (shallow + deep) / 2, "2": deep},
                "per_module_adam": modules}

    def judge(*ckpts):
        (tmp_path / "param_delta.json").write_text(json.dumps({
            "n_layers": 3, "results": {f"runs/t_opd_s{i}": c for i, c in enumerate(ckpts)}}))
        return claims.shallow_qk(tmp_path).verdict

    assert judge(ckpt(2, 1, qk), ckpt(3, 1, qk)) == "reproduced"
    assert judge(ckpt(2, 1, qk), ckpt(1, 2, qk)) == "partly"   # one deep-heavy checkpoint
    assert judge(ckpt(2, 1, mlp), ckpt(2, 1, mlp)) == "not reproduced"  # gate on top
    assert judge(ckpt(1, 2, qk), ckpt(1, 3, qk)) == "not reproduced"


def test_a_length_the_task_fixes_is_not_measurable_not_unreproduced():
    """sysprompt_kb0's answers are exactly 2 tokens with c and without, in every run: "longer"
    was judged "not reproduced" on a constant; it cannot change, so it is not measurable."""
    from pathlib import Path

    from nca_interp.paper.claims.harm import longer

    c = longer(Path("figures/sysprompt_kb0"))
    assert c.verdict == "not measurable" and "exactly 2 tokens" in c.reason
    assert longer(Path("figures/sokoban_long")).verdict == "reproduced"  # lengths that vary
