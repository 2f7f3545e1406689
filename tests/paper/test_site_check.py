"""The site check catches what it is for: a missing image, a table cut off by a box that does
not scroll, a page that needs an outside host; and passes a table that scrolls. Needs
chromium (`make check-site`)."""

import pytest

from tests import site_check

pytestmark = pytest.mark.browser

WIDE = "<table><tr>" + "<td>" + "x" * 400 + "</td>" * 1 + "</tr></table>"
PAGE = "<html><head>{head}</head><body>{body}</body></html>"


def run_on(tmp_path, pages: dict[str, str]) -> dict[str, list[str]]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "ok.png").write_bytes(bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"))
    for name, html in pages.items():
        (site / name).write_text(html)
    found = {}
    for page in site_check.probed_copy(site, tmp_path / "copy"):
        found[page.name] = site_check.check(page)[1]
    return found


def test_the_check_finds_broken_images_cut_tables_and_outside_hosts(tmp_path):
    long_word = "<p style='width:1300px'>" + "y" * 10 + "</p>"
    found = run_on(tmp_path, {
        "good.html": PAGE.format(head="", body="<img src='ok.png'>" + long_word
                                 + "<div style='overflow-x:auto;width:500px'>" + WIDE
                                 + "</div>"),
        "image.html": PAGE.format(head="", body="<img src='missing.png'>"),
        "cut.html": PAGE.format(head="", body="<div style='overflow-x:hidden;width:500px'>"
                                + WIDE + "</div>"),
        "wide.html": PAGE.format(head="", body=WIDE),
        "outside.html": PAGE.format(head="<script src='https://cdn.example.com/x.js'></script>",
                                    body="<img src='https://cdn.example.com/x.png'>"),
    })
    assert found["good.html"] == []
    assert found["image.html"] == ["image not loaded: missing.png"]
    assert found["cut.html"] == ["table 0 cut off at 1400 px"]
    assert found["wide.html"] == ["table 0 cut off at 1400 px"]
    assert found["outside.html"] == ["image not loaded: https://cdn.example.com/x.png"]
