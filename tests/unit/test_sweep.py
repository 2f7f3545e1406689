import json

import pytest

from nca_interp.paper import sweep


def report(w0, w1, regime):
    return {"correct_no_c": w0, "correct_c": w1, "harm": 0.5 * (w0 - w1 if w0 > w1 else 0),
            "regime": regime}


def test_table_summarises_rows_from_their_json_and_lists_the_rest(tmp_path):
    figs = tmp_path / "sokoban_long"
    figs.mkdir()
    reports = {"sokoban_base": report(0.9, 0.99, "B"),
               "sokoban_long_opd_s0": report(0.9, 0.6, "A"),
               "sokoban_long_opd_s1": report(0.8, 0.7, "A"),
               "sokoban_long_nca_s0": report(0.9, 0.9, "C")}
    (figs / "context_return.json").write_text(json.dumps(
        {"config": {"context": "plan"}, "results": reports}))
    (figs / "teacher_plan.json").write_text(json.dumps(
        {"results": {"sokoban_base": reports["sokoban_base"]}}))
    (figs / "trajectory.json").write_text(json.dumps({"results": {
        "sokoban_long_opd_s0": {"steps": [{"kl_ctx": 0.0}, {"kl_ctx": 1.5}]}}}))
    text = sweep.table(tmp_path)
    opd = next(ln for ln in text.splitlines() if "| sokoban_long |" in ln and "| opd |" in ln)
    assert "| 2 | 0.850 (0.800 to 0.900) | 0.650 (0.600 to 0.700) |" in opd
    assert "| AA |" in opd and "0.00 -> 1.50" in opd and "0.900 / 0.990" in opd
    nca = next(ln for ln in text.splitlines() if "| sokoban_long |" in ln and "| nca |" in ln)
    assert "| 1 | 0.900 | 0.900 |" in nca and "| C |" in nca
    assert "- sokoban8s:" in text
    assert "python -m nca_interp.paper.reproduce --task sokoban8s" in text
    remap = tmp_path / "sokoban_remap"
    remap.mkdir()
    (remap / "teacher_remap.json").write_text(json.dumps(
        {"results": {"b": report(0.3, 0.8, "B")}}))
    row = next(ln for ln in sweep.table(tmp_path).splitlines() if "| sokoban_remap |" in ln)
    assert "0.300 / 0.800" in row and "students not trained" in row
    assert "base" not in opd.split("|")[4]  # the teacher never counts as a seed


def rep(w0, w1, regime, rel=0.05, n=1000):
    return {**report(w0, w1, regime), "help": 0.2, "rel_len_both": rel, "n": n, "unit": "level"}


def write_setting(root, name, kl, teacher, teacher_report, opd_reports):
    """figures/<name>/ as a fresh clone holds it: the context-return reports of the teacher and
    one OPD student per seed, and the manifest's training commands (runs/ never created)."""
    figs, runs = root / "figs" / name, root / "runs"
    figs.mkdir(parents=True)
    reports, ckpts, files = {teacher: teacher_report}, [str(runs / teacher)], {}
    for seed, r in opd_reports.items():
        run = runs / f"{name}_opd_s{seed}"
        files[f"{run}/checkpoints/step_000500"] = {"command": (
            f"python -m train.distill --method opd --out {run} --beta 1.0 "
            + (f"--kl {kl} " if kl else "") + f"--seed {seed}")}
        reports[f"{name}_opd_s{seed}"] = r
        ckpts.append(str(run))
    (figs / "context_return.json").write_text(json.dumps(
        {"config": {"context": "plan", "ckpt": ckpts}, "results": reports}))
    (figs / "manifest.json").write_text(json.dumps({"files": files}))


def test_estimator_table_compares_the_same_seeds_and_names_each_estimator(tmp_path):
    """The estimator row sits beside its full-KL row on the seeds it ran (the full row's extra
    seeds are left out), each with the estimator its manifest's training commands record."""
    for name, kl, wins in (("sokoban_long", None, {0: (0.9, 0.6), 1: (0.8, 0.7), 2: (0.1, 0.1)}),
                           ("sokoban_long_k1", "sampled", {0: (0.7, 0.7), 1: (0.5, 0.5)})):
        write_setting(tmp_path, name, kl, "sokoban_base", rep(0.9, 0.99, "B", -0.01),
                      {seed: rep(w0, w1, "A" if w1 < w0 else "C")
                       for seed, (w0, w1) in wins.items()})
    text = sweep.estimator_table(tmp_path / "figs")
    full = next(ln for ln in text.splitlines() if ln.startswith("| sokoban_long |"))
    k1 = next(ln for ln in text.splitlines() if ln.startswith("| sokoban_long_k1 | sampled"))
    assert "| full | opd | 2 | 0.850 (0.800 to 0.900) | 0.650 (0.600 to 0.700) |" in full
    assert "| sampled k1 | opd | 2 | 0.600 (0.500 to 0.700) |" in k1 and k1.endswith("| CC |")
    assert "(teacher: step 0)" in text and "+5.0%" in full
    # the rows not trained yet are listed with the estimator and the command that trains them
    assert ("- sokoban_remap_topk (topk top-4, beside sokoban_remap): `python -m "
            "nca_interp.paper.reproduce "
            "--task sokoban_remap --name sokoban_remap_topk --kl topk --kl-k 4 --seeds 0,1,2 "
            "--analyses false`") in text
    assert "- sokoban_long_k1 (" not in text.split("not trained yet")[1]
    # the story line: these rows have no NCA students, so there is nothing to judge
    assert ("- sokoban_long_k1 (sampled k1): OPD regime A in 0 of 2 seeds; no OPD/NCA seed "
            "pair") in text and "**not judged" in text
    assert sweep.estimator_table(tmp_path / "nothing") == ""


def test_beta_sweep_reads_beta_from_training_commands_on_common_seeds(tmp_path, monkeypatch):
    """beta 0 is the base setting's OPD, NCA's beta comes from its recorded command; every beta
    averages the same seeds; the figure draws a point per student and the teacher."""
    monkeypatch.setattr(sweep, "beta_sweeps", lambda: {"b": ("b_beta0p3",)})

    def rep(harm, help_, regime="C"):
        return {"harm": harm, "help": help_, "correct_no_c": 0.9, "correct_c": 0.9,
                "regime": regime,
                "ci95": {"harm": [harm - 0.01, harm + 0.01], "help": [help_ - 0.01,
                                                                     help_ + 0.01]}}

    def folder(name, runs, beta):
        (tmp_path / name).mkdir()
        reps = {"t_base": rep(0.0, 0.9, "B"), **runs}
        (tmp_path / name / "context_return.json").write_text(json.dumps({"results": reps}))
        files = {f"runs/{n}/checkpoints/step_000010": {"command": (
            f"python -m train.distill --method {n.split('_')[-2]} --out runs/{n} --beta {beta}")}
            for n in runs}
        (tmp_path / name / "manifest.json").write_text(json.dumps({"files": files}))

    folder("b", {"b_opd_s0": rep(0.3, 0.8, "A"), "b_nca_s0": rep(0.02, 0.1),
                 "b_opd_s1": rep(0.2, 0.7, "A"), "b_nca_s1": rep(0.04, 0.2),
                 "b_opd_s3": rep(0.9, 0.9, "A"), "b_nca_s3": rep(0.9, 0.9)}, 1.0)
    folder("b_beta0p3", {"b_beta0p3_nca_s0": rep(0.1, 0.5), "b_beta0p3_nca_s1": rep(0.12, 0.6)},
           0.3)
    points, teacher = sweep.beta_points("b", tmp_path)
    assert [(p["beta"], p["seed"]) for p in points] == [
        (0.0, 0), (0.0, 1), (0.3, 0), (0.3, 1), (1.0, 0), (1.0, 1)]  # seed 3: not in every beta
    assert teacher["help"] == 0.9
    text = sweep.beta_table("b", tmp_path)
    # harm, then its independence baseline 1 - win c (win c 0.9 here), then help
    assert "| 0 | OPD | 0, 1 | 0.250 (0.200 to 0.300) | 0.100 (0.100 to 0.100) |" in text
    assert ("| 0.3 | NCA | 0, 1 | 0.110 (0.100 to 0.120) | 0.100 (0.100 to 0.100) | "
            "0.550 (0.500 to 0.600) |") in text
    fig = sweep.beta_figure("b", tmp_path)
    # per beta a point pair in each panel, the means in each, the teacher in each
    assert [len(t.x) for t in fig.data] == [2, 2, 2, 2, 2, 2, 3, 3, 1, 1]
    assert list(fig.data[1].x) == [0.9, 0.9]  # the right panel: right without c
    assert list(fig.data[0].x) == [0.8, 0.7]  # the left: help
    # a teacher right on nothing without c has no harm: '-' in the table, no star drawn
    reps = json.loads((tmp_path / "b" / "context_return.json").read_text())
    reps["results"]["t_base"]["harm"] = None
    (tmp_path / "b" / "context_return.json").write_text(json.dumps(reps))
    assert "| (teacher: step 0) | - | - | - | 0.100 |" in sweep.beta_table("b", tmp_path)
    assert "teacher" not in {t.legendgroup for t in sweep.beta_figure("b", tmp_path).data}
    (tmp_path / "b_beta0p3" / "manifest.json").write_text(json.dumps({"files": {}}))
    with pytest.raises(ValueError, match="its beta is unknown"):  # never a silent beta 1
        sweep.beta_points("b", tmp_path)


def _report(results: dict) -> dict:
    """A report file's shape (its keys' identity as analysis.load reads a file without runs)."""
    from nca_interp import analysis

    return analysis.from_json({"config": {}, "results": results}, analysis="evaluate")


def test_estimator_story_is_judged_per_seed_against_the_full_kl():
    """The story holds with an estimator when OPD is in regime A in every seed, NCA's harm is
    below OPD's on every same-seed pair and no NCA student is in regime A; a row where it fails
    but the full KL holds says the estimator changes the story; the full row's extra seeds are
    left out."""
    def one(h, g):  # per-item results: the first round(300 h) of 300 levels lost with c
        if h is None:  # nothing right without c: no harm, no items to pair
            return {"harm": None, "regime": g}
        lost = round(300 * h)
        return {"harm": h, "regime": g, "items": {
            "unit": [f"L{i}" for i in range(300)], "correct_no_c": [True] * 300,
            "correct_c": [i >= lost for i in range(300)]}}

    def reps(prefix, harms):
        return {f"{prefix}_{m}_s{s}": one(h, g)
                for s, (opd, nca) in harms.items()
                for m, (h, g) in (("opd", opd), ("nca", nca))}

    full = reps("x", {"0": ((0.2, "A"), (0.01, "C")), "1": ((0.3, "A"), (0.02, "C")),
                      "2": ((0.0, "C"), (0.5, "A"))})
    good = reps("x_k1", {"0": ((0.25, "A"), (0.02, "C")), "1": ((0.2, "A"), (0.05, "C"))})
    seeds = {"0", "1"}
    st = sweep.story(_report(full), seeds)
    assert st["holds"] and st["gaps"] == pytest.approx([0.19, 0.28]) and st["opd_n"] == 2
    assert sweep.story(_report(good), seeds)["holds"]
    assert not sweep.story(_report(full), {"0", "1", "2"})["holds"]
    nca_breaks = reps("x_k1", {"0": ((0.25, "A"), (0.02, "C")), "1": ((0.2, "A"), (0.1, "A"))})
    line = sweep.story_line("x_k1", "sampled k1", sweep.story(_report(nca_breaks), seeds), st, "x")
    assert "NCA regime A in 1 of 2" in line and "**the estimator changes the story**" in line
    worse = reps("x_k1", {"0": ((0.25, "A"), (0.3, "C")), "1": ((0.2, "A"), (0.05, "C"))})
    assert not sweep.story(_report(worse), seeds)["holds"]
    # without per-item results a pair has no interval: a point above 0 is not clear
    points = {k: {"harm": v["harm"], "regime": v["regime"]} for k, v in good.items()}
    st = sweep.story(_report(points), seeds)
    assert not st["holds"] and st["clear"] == 0
    assert "2 without per-item results, not clear" in sweep.story_line("x_k1", "k1", st, st, "x")
    opd_fine = reps("x_k1", {"0": ((0.25, "A"), (0.02, "C")), "1": ((0.0, "C"), (0.0, "C"))})
    assert not sweep.story(_report(opd_fine), seeds)["holds"]
    no_harm = reps("x", {"0": ((None, "C"), (None, "C"))})  # nothing right without c
    line = sweep.story_line("x_k1", "topk", sweep.story(_report(no_harm), {"0"}),
                            sweep.story(_report(no_harm), {"0"}), "x")
    assert "harm undefined in 1 seed pairs (no item right without c)" in line  # not "no pair"
    assert "**not judged" in line


def test_estimator_story_needs_each_pair_clear_of_its_paired_interval():
    """With per-item results, a seed pair counts only when its paired interval over the
    held-out items stands above 0: a gap of 0.01 on 300 items is a point above 0 but not a
    difference, so the story does not hold on it; a gap of 0.3 does."""
    def rep(n_lost: int, regime: str, units=None, first: int = 0) -> dict:
        correct_c = [not first <= i < first + n_lost for i in range(300)]
        return {"harm": n_lost / 300, "regime": regime,
                "items": {"unit": units or [f"L{i}" for i in range(300)],
                          "correct_no_c": [True] * 300, "correct_c": correct_c}}

    clear = {"x_opd_s0": rep(90, "A"), "x_nca_s0": rep(0, "C")}
    st = sweep.story(_report(clear), {"0"})
    assert st["holds"] and st["clear"] == 1 and st["lows"][0] > 0.2
    close = {"x_opd_s0": rep(9, "A"), "x_nca_s0": rep(6, "C", first=100)}  # other levels
    st = sweep.story(_report(close), {"0"})
    assert st["gaps"][0] == pytest.approx(0.01) and st["lows"][0] < 0
    assert not st["holds"] and st["clear"] == 0
    line = sweep.story_line("x_k1", "topk", st, sweep.story(_report(clear), {"0"}), "x")
    assert "its paired interval above 0 in 0 of 1" in line
    assert "**the estimator changes the story**" in line
    other = {"x_opd_s0": rep(90, "A"), "x_nca_s0": rep(0, "C", [f"M{i}" for i in range(300)])}
    with pytest.raises(ValueError, match="not evaluated on the same items"):
        sweep.story(_report(other), {"0"})


def test_estimator_table_reads_a_fetched_teacher_and_undefined_rates(tmp_path):
    """The real-model row: its teacher is the fetched model's folder (no `_base` name), nothing
    is right without c so harm and rel_len_both are undefined, and its items are 48, not the
    1000 Sokoban levels: the table shows '-' and says how many items each row used."""
    def blind(w1, regime):
        return {"correct_no_c": 0.0, "correct_c": w1, "harm": None, "help": w1,
                "rel_len_both": None, "regime": regime, "n": 48, "unit": "fact"}

    write_setting(tmp_path, "sokoban_long", None, "sokoban_base", rep(0.9, 0.99, "B"),
                  {0: rep(0.9, 0.6, "A")})
    write_setting(tmp_path, "sokoban_long_k1", "sampled", "sokoban_base", rep(0.9, 0.99, "B"),
                  {0: rep(0.7, 0.6, "A")})
    for name, kl in (("facts", None), ("facts_k1", "sampled")):
        write_setting(tmp_path, name, kl, "smollm2-135m-instruct", blind(0.44, "B"),
                      {0: blind(0.5, "B"), 1: blind(0.4, "B")})
    text = sweep.estimator_table(tmp_path / "figs")
    teacher = next(ln for ln in text.splitlines() if ln.startswith("| facts_k1 | (teacher"))
    assert teacher == "| facts_k1 | (teacher: step 0) | - | - | 0.000 | 0.440 | - | 0.440 | - | B |"
    k1 = next(ln for ln in text.splitlines() if ln.startswith("| facts_k1 | sampled"))
    assert "| 0.450 (0.400 to 0.500) | - | 0.450 (0.400 to 0.500) | - | BB |" in k1
    assert "(1000 items: sokoban_long_k1; 48 items: facts_k1)" in text
    assert "- facts_k1 (sampled k1): OPD regime A in 0 of 2 seeds; no OPD/NCA seed pair" in text
