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
    assert r["correct_no_c"] == 0.6 and r["correct_c"] == 0.6 and r["both"] == 0.4
    # harm is the paper's: P(lost with c | won without c) = 1 of the 3 won without c
    assert r["harm"] == pytest.approx(1 / 3) and r["help"] == pytest.approx(1 / 2)
    assert r["harm_joint"] == 0.2 and r["help_joint"] == 0.2
    assert r["delta_c"] == pytest.approx(0.0)
    assert r["rel_len"] == pytest.approx(23 / 20 - 1)
    assert r["rel_len_both"] == pytest.approx(11 / 8 - 1)


def test_harm_undefined_without_right_cases_and_never_nan_in_the_report():
    r = paired_report(*views([0, 0, 0, 0], [1, 0, 0, 0]), n_boot=50)
    assert r["harm"] is None and r["n_correct_no_c"] == 0 and r["regime"] != "A"
    assert all(v is None or np.isfinite(v) for v in r["ci95"]["harm"] + [r["correct_c"]])


def test_regimes_from_bootstrap_interval():
    n = 400
    hurts = paired_report(*views([1] * n, [1] * 300 + [0] * 100))
    needed = paired_report(*views([0] * n, [1] * 300 + [0] * 100))
    neither = paired_report(*views([1, 0] * 200, [1, 0] * 200))
    assert (hurts["regime"], needed["regime"], neither["regime"]) == ("A", "B", "C")
    lo, hi = hurts["ci95"]["harm"]
    assert lo <= hurts["harm"] <= hi
    assert "regime" in format_table({"x": hurts}) and "|" in format_markdown({"x": hurts})


def test_cluster_bootstrap_resamples_units_not_items():
    """8 facts asked 12 ways each: the 96 items are 8 independent observations. 4 facts are
    harmed in all their items, 4 never; resampling questions would give a narrow interval,
    resampling facts a wide one, and the clustered interval must be the wide one."""
    won0 = [1] * 96
    won1 = [0] * 48 + [1] * 48
    units = [f"f{i // 12}" for i in range(96)]
    clustered = paired_report(*views(won0, won1), units=units, unit_name="fact")
    naive = paired_report(*views(won0, won1))
    width = lambda r: r["ci95"]["harm"][1] - r["ci95"]["harm"][0]  # noqa: E731
    assert clustered["n_units"] == 8 and clustered["unit"] == "fact"
    assert width(clustered) > 2 * width(naive)
    # the reference: a bootstrap over the 8 fact-level harm rates (each 0 or 1)
    rng = np.random.default_rng(1)
    ref = [rng.choice([0.0] * 4 + [1.0] * 4, 8).mean() for _ in range(4000)]
    assert width(clustered) == pytest.approx(np.percentile(ref, 97.5) - np.percentile(ref, 2.5),
                                             abs=0.13)
    assert "8 facts" in format_table({"x": clustered})


@pytest.mark.parametrize("name,kind", [("sokoban", "plan"), ("sokoban", "state"),
                                       ("frozenlake", "state"), ("sysprompt", "system"),
                                       ("facts", "facts")])
def test_control_contexts_have_the_form_of_c_and_are_wrong_for_the_item(name, kind):
    from nca_interp.tasks import make_task

    task = make_task(name)
    levels = task.levels("test", 12)
    for i, lv in enumerate(levels):
        real, ctrl = task.context(lv, kind), task.control_context(levels, i, kind)
        assert ctrl != real
        assert abs(len(ctrl) - len(real)) <= max(4, len(real) // 4)  # the same form
        if name == "facts":  # every fact of the rotated KB is wrong, every sentence kept
            for e, vals in zip(lv.kb.names, lv.kb.values):
                assert f"The capital of {e} is {vals['capital']}." not in ctrl
                assert f"The capital of {e} is" in ctrl
        if name == "sysprompt":  # no entity keeps its own row of values
            assert not set(real.splitlines()) & set(ctrl.splitlines())


def test_control_view_is_played_and_paired(monkeypatch):
    """With the control context replaced by the real one, the control view must reproduce the
    context view exactly (reads_c = 0, same accuracy): the third view is played on the same
    items, in the same order, and paired with them."""
    from nca_interp import evaluate
    from nca_interp.assets import embedded
    from nca_interp.tasks import Task

    monkeypatch.setattr(Task, "control_context",
                        lambda self, levels, i, kind: self.context(levels[i], kind))
    rep = evaluate.run([str(embedded("sokoban_opd"))], context="plan", n_levels=60,
                       control=True)["results"]["sokoban_opd"]
    assert rep["control"]["correct"] == rep["correct_c"] and rep["control"]["reads_c"] == 0
    assert rep["items"]["correct_control"] == rep["items"]["correct_c"]
    monkeypatch.undo()
    rep = evaluate.run([str(embedded("sokoban_opd"))], context="plan", n_levels=60,
                       control=True)["results"]["sokoban_opd"]
    k = rep["control"]
    assert k["reads_c"] == pytest.approx(rep["correct_c"] - k["correct"])
    assert k["reads_c_ci95"][0] <= k["reads_c"] <= k["reads_c_ci95"][1]
    # the per-item control outcomes are what the control's rate summarises, item by item
    items = rep["items"]
    assert len(items["correct_control"]) == len(items["unit"]) == 60
    assert sum(items["correct_control"]) / 60 == pytest.approx(k["correct"])
    assert items["correct_control"] != items["correct_c"]


def test_the_evaluate_figure_names_accuracy_for_qa_tasks_and_counts_items_once():
    """A QA task's bars read acc_no_c / acc_c like its tables; a game's win_no_c / win_c; an
    item that is its own unit is counted once in the title."""
    from nca_interp.plots import evaluate_figure

    def report(metric, unit, n_units):
        r = {"n": 16, "unit": unit, "n_units": n_units, "metric": metric, "regime": "B",
             "correct_no_c": 0.2, "correct_c": 0.5, "harm": None, "help": 0.4, "both": 0.1,
             "ci95": {}, "len_no_c": 5.0, "len_c": 6.0, "rel_len": 0.2}
        return {"task": "jsonl", "context": "persona", "results": {"base": r}, "config": {},
                "runs": {"base": {"name": "base", "path": "/m/base"}}}

    qa = evaluate_figure(report("accuracy", "item", 16))
    assert list(qa.data[0].x)[:2] == ["acc_no_c", "acc_c"]
    assert "16 items)" in qa.layout.title.text and "16 items, 16 items" not in qa.layout.title.text
    game = evaluate_figure(report("win", "level", 4))
    assert list(game.data[0].x)[:2] == ["win_no_c", "win_c"]
    assert "16 items, 4 levels" in game.layout.title.text
    # one checkpoint still shows its legend: the regime the subtitle points to is in it
    assert game.layout.showlegend is True and game.data[0].name == "base (B)"
    # a dict that lacks what the report declares is refused naming it, not drawn half
    partial = report("win", "level", 4)
    del partial["results"]["base"]["ci95"]
    with pytest.raises(ValueError, match=r"results\['base'\]: ContextReturn needs ci95"):
        evaluate_figure(partial)


@pytest.mark.parametrize("rule", ["caps", "sure", "french", "brackets"])
def test_a_rules_control_is_a_rule_it_breaks_never_its_own_words(rule):
    """c' of facts' rule kind was c's words shuffled: 'French' in every order, and c itself for
    8 of the 192 facts_rule items. Now another rule of c's form: never c, never holding c's key
    word, and an answer that follows it breaks c."""
    from nca_interp.tasks import make_task
    from nca_interp.tasks.facts import CONTROL_RULES, RULES, follows_rule

    task = make_task("facts", kind="rule", rule=rule)
    levels = task.levels("test", 192)
    wrong = {task.control_context(levels, i, "rule") for i in range(len(levels))}
    assert wrong == {CONTROL_RULES[rule]} and RULES[rule] not in wrong
    key = {"caps": "capital", "sure": "Certainly", "french": "French",
           "brackets": "square"}[rule]
    assert key in RULES[rule] and key not in CONTROL_RULES[rule]
    obeying = {"caps": "the capital is paris.", "sure": "Perhaps it is Paris.",
               "french": "The capital is Paris.", "brackets": "The answer is (Paris)."}[rule]
    assert not follows_rule(obeying, rule, levels[0].kb)
