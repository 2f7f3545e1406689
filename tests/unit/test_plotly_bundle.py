"""One copy of plotly.js per tree of pages (nca_interp.plots.bundle_folder): a page loads the
nearest plotly bundle at or above its folder by a relative link, and a fresh output folder gets
its own copy, so every page renders offline and a run's folder can be sent as it is."""

import re

import plotly.graph_objects as go
import pytest
from plotly.offline import get_plotlyjs

from nca_interp.errors import RunError
from nca_interp.plots import bundle_state, check_bundle, ensure_plotly_bundle, write_figure


def src(page) -> list[str]:
    return re.findall(r'<script[^>]*src="([^"]+)"', page.read_text())


def fig() -> go.Figure:
    return go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))


def test_pages_below_a_folder_holding_plotlys_bundle_load_that_one(tmp_path):
    ensure_plotly_bundle(tmp_path / "figures")
    write_figure(fig(), tmp_path / "figures" / "setting" / "page")
    write_figure(fig(), tmp_path / "figures" / "setting" / "more" / "page")
    assert src(tmp_path / "figures" / "setting" / "page.html") == ["../plotly.min.js"]
    assert src(tmp_path / "figures" / "setting" / "more" / "page.html") == \
        ["../../plotly.min.js"]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("plotly.min.js")) == \
        [(tmp_path / "figures" / "plotly.min.js").relative_to(tmp_path)]


def test_a_fresh_output_folder_gets_its_own_copy(tmp_path):
    write_figure(fig(), tmp_path / "run" / "report")
    assert src(tmp_path / "run" / "report.html") == ["plotly.min.js"]
    assert bundle_state(tmp_path / "run") == "ok"


def test_a_redraw_in_place_gives_the_same_bytes(tmp_path):
    ensure_plotly_bundle(tmp_path)
    write_figure(fig(), tmp_path / "s" / "page")
    first = (tmp_path / "s" / "page.html").read_bytes()
    write_figure(fig(), tmp_path / "s" / "page")
    assert (tmp_path / "s" / "page.html").read_bytes() == first


def test_a_folders_own_file_comes_before_a_shared_one(tmp_path):
    """A cut-short bundle beside the pages is repaired there (the pages of that folder were
    written to load it); someone's own plotly.min.js there is refused, never replaced, even
    with plotly's bundle above."""
    ensure_plotly_bundle(tmp_path)
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "plotly.min.js").write_text("")
    write_figure(fig(), tmp_path / "cut" / "page")
    assert src(tmp_path / "cut" / "page.html") == ["plotly.min.js"]
    assert (tmp_path / "cut" / "plotly.min.js").read_text() == get_plotlyjs()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "plotly.min.js").write_text("// my own build")
    with pytest.raises(RunError, match="not plotly's bundle"):
        check_bundle(tmp_path / "mine")
    with pytest.raises(RunError, match="not plotly's bundle"):
        write_figure(fig(), tmp_path / "mine" / "page")
    assert (tmp_path / "mine" / "plotly.min.js").read_text() == "// my own build"


def test_a_file_above_that_is_not_plotlys_is_not_loaded(tmp_path):
    (tmp_path / "plotly.min.js").write_text("// another version")
    write_figure(fig(), tmp_path / "run" / "page")
    assert src(tmp_path / "run" / "page.html") == ["plotly.min.js"]
    assert bundle_state(tmp_path / "run") == "ok"
    assert (tmp_path / "plotly.min.js").read_text() == "// another version"
