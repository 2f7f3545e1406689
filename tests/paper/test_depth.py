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
                      "sokoban_remap_d8 --seeds 0,1,2 --threads 1`") == 3


def test_the_published_depth_page_is_what_the_command_writes():
    out = ROOT / "figures" / depth.OUT
    text = depth.table(ROOT / "figures")
    assert (out / "README.md").read_text() == depth.page(out, text, False), \
        "figures/sokoban_depth/README.md is stale: python -m nca_interp.paper.depth --write --png"
