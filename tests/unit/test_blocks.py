"""nca_interp.paper.blocks: the one rewriter of generated blocks in Markdown pages."""

import re
from pathlib import Path

import pytest

from nca_interp.errors import UsageError
from nca_interp.paper.blocks import Block

ROOT = Path(__file__).resolve().parents[2]


def test_only_the_text_between_the_markers_changes():
    b = Block.named("x", "python -m gen --write")
    doc = f"intro\n{b.begin}\nold\n{b.end}\nafter {b.end}\n"
    assert b.replace(doc, "new") == f"intro\n{b.begin}\nnew\n{b.end}\nafter {b.end}\n"
    assert b.begin == "<!-- x:begin (python -m gen --write) -->" and b.end == "<!-- x:end -->"


def test_a_page_that_lost_a_marker_is_refused_unless_the_block_is_optional(tmp_path):
    b = Block.named("x", "gen")
    with pytest.raises(UsageError, match="page.md has no generated block"):
        b.replace(f"{b.begin}\nno end", "new", "page.md")
    assert b.replace("no markers", "new", optional=True) == "no markers"
    page = tmp_path / "p.md"
    page.write_text(f"{b.begin}\nold\n{b.end}\n")
    b.write(page, "new")
    assert page.read_text() == f"{b.begin}\nnew\n{b.end}\n"


def test_no_generator_rewrites_a_block_by_itself():
    """Every marker-splitting rewrite goes through Block: no other module indexes a
    '-->' marker to splice text."""
    for f in [*(ROOT / "train").glob("*.py"), *(ROOT / "nca_interp").rglob("*.py")]:
        if f.name == "blocks.py":
            continue
        assert not re.search(r"\.index\((BEGIN|END|START|begin\(|end\()", f.read_text()), f
