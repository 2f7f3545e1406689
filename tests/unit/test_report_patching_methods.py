"""A setting's patching section says which method produced each number and where attribution
patching and exact patching disagree (#69), read from the published 30-layer report."""

import copy
import json
from pathlib import Path

from nca_interp.paper import report

PUBLISHED = Path(__file__).resolve().parents[2] / "figures/sokoban_smollm2_lora/patching.json"


def section(tmp_path: Path, data: dict) -> str:
    figs = tmp_path / "figs"
    figs.mkdir(exist_ok=True)
    (figs / "patching.json").write_text(json.dumps(data))
    return report.patching(figs)


def test_each_family_names_its_method_and_the_disagreements(tmp_path):
    data = json.loads(PUBLISHED.read_text())
    text = section(tmp_path, data)
    assert text.count("Which method produced each number") == 2  # OPD and NCA; the teacher: none
    assert "| removing a head's reading of c | exact, on attribution's candidates |" in text
    assert "| forward, mlp | every node exact |" in text
    # NCA's reverse sweep of the whole residual stream: Spearman 0.62, top-8 overlap 0.38
    nca = text[text.index("**sokoban_smollm2_lora_nca_s0**"):]
    assert "below 0.5, or a miss) on: reverse, resid all;" in nca
    opd = text[:text.index("**sokoban_smollm2_lora_nca_s0**")]
    assert "disagree" in opd  # forward resid response: top-8 overlap 0.38


def test_a_miss_of_the_random_check_is_named(tmp_path):
    data = json.loads(PUBLISHED.read_text())
    bad = copy.deepcopy(data)
    r = bad["results"]["sokoban_smollm2_lora_opd_s0"]
    r["ablation"]["agreement"]["misses"] = [17]
    text = section(tmp_path, bad)
    opd = text[:text.index("**sokoban_smollm2_lora_nca_s0**")]
    assert "removing a head's reading of c" in opd.split("disagree")[1].split("\n")[0]


def test_a_report_from_before_attribution_says_nothing_of_methods(tmp_path):
    data = json.loads(PUBLISHED.read_text())
    old = copy.deepcopy(data)
    for r in old["results"].values():
        for tag in ("forward", "reverse"):
            if r.get(tag):
                r[tag].pop("methods", None)
        if r.get("ablation"):
            r["ablation"].pop("agreement", None)
    assert "Which method" not in section(tmp_path, old)


def test_a_null_not_drawn_is_said_on_its_panel_not_left_an_empty_legend_entry():
    """The 30-layer report drew no answer-outcome null (--n-random-generate 0): the head
    selection's 'answers flipped' panel says so, the effect panel (20 draws) does not."""
    from nca_interp import analysis

    rep = analysis.load(PUBLISHED)
    figs = analysis.module("patching").figures(rep)
    sel = figs["sokoban_smollm2_lora_nca_s0_head_selection"]
    titles = [a.text for a in sel.layout.annotations]
    assert "no random-head null: 0 draws" in titles[1]
    assert "no random-head null" not in titles[0]
