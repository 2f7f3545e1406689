"""The depth sweep reads each row's own JSON: depths from the presets' teacher chain, numbers
equal to what the claims code reads from the same files, a missing report named with the
command that makes it, and a published page that is what the command writes."""

import re
from pathlib import Path

import pytest

from nca_interp.paper import depth

ROOT = Path(__file__).resolve().parents[2]


def test_depth_follows_the_teacher_chain():
    assert [depth.depth_of(n) for n in ("sokoban_remap_d2", "sokoban_remap",
                                        "sokoban_remap_d8", "sokoban_remap_d12")] == [2, 4, 8, 12]


def test_the_rows_agree_with_the_claims_code_on_the_same_files():
    from nca_interp.paper.claims.updates import shallow_qk
    from nca_interp.paper.claims.views import _layer_cos, closed_shares

    r = depth.row("sokoban_remap", ROOT / "figures", seeds=(0, 1, 2, 3, 4))
    measured = shallow_qk(ROOT / "figures" / "sokoban_remap").measured
    opd = [float(x) for x in re.findall(r"opd_s\d: shallow/deep ([\d.]+)", measured)]
    assert r["updates"]["opd"]["shallow_deep"]["each"] == pytest.approx(opd, abs=0.005)
    runs, base, _ = _layer_cos(ROOT / "figures" / "sokoban_remap", "nca")
    assert r["views"]["nca"]["closed"]["each"] == pytest.approx(closed_shares(runs, base))
    # the seeds asked for, and only those
    three = depth.row("sokoban_remap", ROOT / "figures")
    assert three["context_return"]["opd"]["correct_c"]["n"] == 3


def test_a_row_without_reports_says_not_run_with_its_command(tmp_path):
    text = depth.table(tmp_path)
    assert text.count("not run: `python -m nca_interp.paper.reproduce --task "
                      "sokoban_remap_d8 --seeds 0,1,2 --threads 1`") == 5  # five tables


def test_a_row_with_its_teacher_alone_shows_step_0_read_from_its_json(tmp_path):
    """A row whose teacher is evaluated and whose students are not: the context-return table
    shows the teacher's accuracies, from its teacher_<context>.json, beside the command."""
    import shutil

    (tmp_path / "sokoban_remap_d12").mkdir()
    shutil.copy(ROOT / "figures" / "sokoban_remap_d12" / "teacher_remap.json",
                tmp_path / "sokoban_remap_d12")
    text = depth.table(tmp_path)
    from nca_interp import analysis

    t = analysis.load(tmp_path / "sokoban_remap_d12" / "teacher_remap.json")
    (base,) = t.results.values()
    line = next(x for x in text.splitlines() if x.startswith("| 12 |"))
    assert f"{base['correct_no_c']:.3f} / {base['correct_c']:.3f} (teacher alone)" in line
    assert "students not run: `python -m nca_interp.paper.reproduce --task sokoban_remap_d12" \
        in line and line.count("|") == 9  # the header's 8 cells
    assert text.count("sokoban_remap_d12 --seeds") == 5  # the other tables: not run


def test_harm_and_reading_c_carry_their_nulls_read_from_the_json():
    """Beside OPD's harm, step 0's harm and each seed's independence baseline 1 - accuracy
    with c; 'beyond both' counts seeds whose harm interval clears both; reads_c as the control
    run wrote it. Read here from the JSON directly, not through the depth code."""
    import json

    figs = ROOT / "figures" / "sokoban_remap_d2"
    res = json.loads((figs / "context_return.json").read_text())["results"]
    opd = [res[f"sokoban_remap_d2_opd_s{s}"] for s in (0, 1, 2)]
    for r in opd:  # reports written before version 3's vocabulary say win for correct
        r.setdefault("correct_c", r.get("win_c"))
    step0 = res["sokoban_remap_d2_base"]
    cr = depth.row("sokoban_remap_d2", ROOT / "figures")["context_return"]
    assert cr["step0"]["harm"] == pytest.approx(step0["harm"])
    assert cr["opd"]["baseline"]["each"] == pytest.approx([1 - r["correct_c"] for r in opd])
    beyond = sum(r["ci95"]["harm"][0] > max(1 - r["correct_c"], step0["harm"]) for r in opd)
    assert cr["opd"]["beyond"] == f"{beyond} of 3"
    assert cr["opd"]["rel_len_both"]["each"] == pytest.approx([r["rel_len_both"] for r in opd])
    ctl = json.loads((figs / "context_control.json").read_text())["results"]
    rd = depth.row("sokoban_remap_d2", ROOT / "figures")["reading"]
    assert rd["opd"]["each"] == pytest.approx(
        [ctl[f"sokoban_remap_d2_opd_s{s}"]["control"]["reads_c"] for s in (0, 1, 2)])


def test_the_verdicts_by_depth_are_each_row_pages_own():
    """Every verdict cell of a row is the verdict its own published page prints for the same
    claim (the row pages are checked against their JSON by the page tests)."""
    cells = dict(depth.verdicts(ROOT / "figures"))
    checked = 0
    for preset in ("sokoban_remap_d2", "sokoban_remap"):
        page = (ROOT / "figures" / preset / "README.md").read_text()
        for name, by_depth in cells.items():
            row = next((ln for ln in page.splitlines() if ln.startswith(f"| {name} |")), None)
            word = by_depth.get(depth.depth_of(preset), "-")
            if row is None:
                assert word == "-", (preset, name)
                continue
            verdict = word.split(" (")[0].split(", n=")[0]
            assert f"**{verdict} " in row or f"**{verdict}**" in row, \
                (preset, name, word)
            checked += 1
    assert checked >= 25


def test_the_published_depth_page_is_what_the_command_writes():
    out = ROOT / "figures" / depth.OUT
    text = depth.table(ROOT / "figures")
    assert (out / "README.md").read_text() == depth.page(out, text, False), \
        "figures/sokoban_depth/README.md is stale: python -m nca_interp.paper.depth --write --png"
