"""What the committed docs and figures promise: HTML figures that load nothing from the
network, and markdown tables whose rows have their header's cell count (a row with an extra
cell renders under the wrong column)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HTML = sorted((ROOT / "figures").rglob("*.html"))
MARKDOWN = [ROOT / "README.md", *sorted((ROOT / "figures").rglob("*.md")),
            *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_html_figure_loads_the_one_shared_plotly_bundle():
    """figures/ holds one plotly.min.js (4.6 MB; it was one per setting folder), and every
    page loads it by a relative link, never from a CDN (nca_interp.plots.bundle_folder)."""
    import os

    from nca_interp.plots import bundle_state

    assert HTML
    shared = ROOT / "figures" / "plotly.min.js"
    assert bundle_state(shared.parent) == "ok"
    assert sorted((ROOT / "figures").rglob("plotly.min.js")) == [shared]
    for page in HTML:
        text = page.read_text()
        srcs = re.findall(r'<script[^>]*src="([^"]+)"', text)
        assert srcs == [Path(os.path.relpath(shared, page.parent)).as_posix()], \
            f"{page}: scripts {srcs}"
        assert "cdn.plot.ly" not in text, page


def _cells(line: str) -> int:
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") else body
    return len(re.split(r"(?<!\\)\|", body))


def table_problems(text: str) -> list[str]:
    """Rows whose cell count differs from their table's header, as 'line N: ...'."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines) - 1:
        head, sep = lines[i], lines[i + 1]
        if head.lstrip().startswith("|") and re.fullmatch(r"\s*\|?[\s:|-]+\|?\s*", sep) \
                and "-" in sep:
            n = _cells(head)
            j = i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                if _cells(lines[j]) != n:
                    out.append(f"line {j + 1}: {_cells(lines[j])} cells under a {n}-column "
                               "header")
                j += 1
            i = j
        else:
            if head.lstrip().startswith("|") and (i == 0 or not lines[i - 1].strip()
                                                  .startswith("|")):
                out.append(f"line {i + 1}: a table row without a header")
            i += 1
    return out


def test_the_table_check_catches_extra_cells_and_orphans():
    assert table_problems("| a | b |\n|---|---|\n| 1 | 2 |\n") == []
    assert table_problems("| a | b |\n|---|---|\n| 1 | 2 | 3 |\n") == \
        ["line 3: 3 cells under a 2-column header"]
    assert table_problems("text\n\n| lonely | row |\n\nmore") == \
        ["line 3: a table row without a header"]
    assert table_problems("| a \\| b | c |\n|---|---|\n| 1 | 2 |\n") == []


@pytest.mark.parametrize("doc", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_tables_are_well_formed(doc):
    assert table_problems(doc.read_text()) == []


@pytest.mark.pages  # every published page regenerated: make test-pages
def test_generated_blocks_equal_their_generators():
    """README and docs blocks are exactly what `nca_interp.paper.claims` /
    `nca_interp.paper.summary` / `nca_interp.paper.sweep` / `nca_interp.paper.paper` write now."""
    from nca_interp.paper import claims, summary, sweep

    for doc in claims.DOCS:
        text = (ROOT / doc).read_text()
        assert claims.refresh(text, ROOT / "figures") == text, \
            f"{doc}: a claims block is stale; run python -m nca_interp.paper.claims --write"
    for doc in summary.DOCS:
        text = (ROOT / doc).read_text()
        body = summary.table(ROOT / "figures", summary.VARIANTS_IN[doc])
        assert summary.BLOCK.replace(text, body) == text, \
            f"{doc}: the summary block is stale; run python -m nca_interp.paper.summary --write"
    page = (ROOT / summary.REPRODUCE_PAGE).read_text()
    assert summary.REPRODUCE.replace(page, summary.reproduce_table(ROOT / "figures")) \
        == page, (f"{summary.REPRODUCE_PAGE}: the reproduce block is stale; run python -m "
                  "nca_interp.paper.summary --write")
    readme = (ROOT / "README.md").read_text()
    assert summary.TEST_TIME.replace(readme, summary.test_time_line(ROOT / summary.TEST_RECORD)) \
        == readme, ("README: the make-test time is stale; run python -m "
                    "nca_interp.paper.summary --write")
    from nca_interp.paper import paper, referee

    for doc in paper.DOCS:
        text = (ROOT / doc).read_text()
        assert paper.BLOCK.replace(text, paper.table(ROOT / "figures")) == text, \
            (f"{doc}: the paper-beside-us block is stale; run python -m "
             "nca_interp.paper.paper --write")
    page = (ROOT / referee.PAGE).read_text()
    assert referee.refresh(page, ROOT / "figures") == page, \
        (f"{referee.PAGE}: the referee block is stale; run python -m "
         "nca_interp.paper.referee --write")
    page = (ROOT / sweep.ESTIMATORS_PAGE).read_text()
    est = sweep.estimator_table(ROOT / "figures")
    assert est  # the estimator-by-outcome table is published, and current
    assert sweep.ESTIMATORS.replace(page, est, str(sweep.ESTIMATORS_PAGE)) == page, \
        (f"{sweep.ESTIMATORS_PAGE}: the estimator table is stale; run python -m "
         "nca_interp.paper.sweep --write")


def typed_numbers(text: str) -> list[str]:
    """Digits in a page's prose: outside its generated blocks, code and link targets, model
    names and versions aside (times and counts come from manifests and records)."""
    prose = re.sub(r"<!-- ([\w:-]+):begin.*?<!-- \1:end -->", "", text, flags=re.S)
    prose = re.sub(r"```.*?```|`[^`]*`|\]\([^)]*\)", "", prose, flags=re.S)  # code, link targets
    prose = re.sub(r"SmolLM2(-135M-Instruct)?|Qwen[23]", "", prose)
    return re.findall(r"\d", prose)


def test_readme_is_a_front_door_without_typed_numbers():
    """Under 150 lines, no typed number, and what a user comes for first (#72): what the
    package does, installing it, then analysing one's own checkpoints within the first 60
    lines (the command line and a model in memory), the paper's reproduction on its own page,
    linked."""
    text = (ROOT / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) < 150
    assert typed_numbers(text) == [], "a number typed into README.md; generate it"
    heads = [i for i, ln in enumerate(lines) if ln.startswith("## ")]
    assert [lines[i] for i in heads[:2]] == ["## Install", "## Analyse your own checkpoints"]
    own = "\n".join(lines[heads[1]:heads[2]])
    assert heads[1] < 60 and "```python" in own and "python -m nca_interp." in own
    assert "](docs/reproduction.md)" in text and "<!-- verdicts:" not in text


def test_the_reproduction_page_types_no_number():
    assert typed_numbers((ROOT / "docs/reproduction.md").read_text()) == [], \
        "a number typed into docs/reproduction.md; generate it"


@pytest.mark.parametrize("page", ["README.md", "docs/reproduction.md", "docs/real_model.md"])
def test_prose_beside_verdict_tables_states_no_verdict(page):
    """A page that shows generated verdicts leaves them to the tables: its hand-written prose
    names no verdict word of the rule book (nor "holds" / "does not hold" of a claim), so a
    re-judged table cannot be contradicted by a sentence written against the old one."""
    text = (ROOT / page).read_text()
    prose = re.sub(r"<!-- ([\w:-]+):begin.*?<!-- \1:end -->", "", text, flags=re.S)
    prose = re.sub(r"```.*?```|`[^`]*`|--8<-- \"[^\"]*\"", "", prose, flags=re.S)
    found = re.findall(r"\b(?:not )?reproduced\b|\breproduces\b|"
                       r"\bdoes not reproduce\b|\bpartly\b|\binconclusive\b|"
                       r"\bnot measurable\b|\b(?:claim|claims) (?:do(?:es)? not )?holds?\b|"
                       r"\bdo(?:es)? not hold\b", prose, flags=re.I)
    assert found == [], f"{page}: verdict words in prose: {found}; let the tables say them"


def test_docs_site_builds_offline_and_strict(tmp_path):
    import re
    import subprocess
    import sys

    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "--site-dir", str(site)], cwd=ROOT, capture_output=True, text=True,
                          env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    warnings = [ln for ln in (done.stdout + done.stderr).splitlines() if "WARNING" in ln]
    assert not warnings, warnings[:5]
    assert (site / "real_model" / "index.html").exists()
    # nothing is requested from another host: no stylesheet, font or script from outside
    outside = {m for page in site.rglob("*.html") if "figures" not in page.parts
               for m in re.findall(r'<(?:link|script)[^>]+(?:href|src)="(https?://[^"]+)"',
                                   page.read_text())}
    assert not outside, sorted(outside)[:5]
    # a setting page shows its figures, and each image it shows is in the site
    page = site / "results" / "sokoban_long" / "index.html"
    imgs = re.findall(r'<img[^>]+src="([^"]+)"', page.read_text())
    assert any("trajectory.png" in i for i in imgs)
    assert all((page.parent / i).resolve().exists() for i in imgs)


@pytest.mark.pages  # every published page regenerated: make test-pages
def test_every_setting_page_is_its_generated_report():
    """figures/<setting>/README.md (what the docs site embeds) is what `nca_interp.paper.report`
    renders from that folder's JSON, verdicts included: a page left stale by a re-run fails here."""
    from nca_interp.paper import report

    names = report.published(ROOT / "figures")  # the presets published as folders too
    assert {"sokoban_remap_d2", "sokoban_remap_d8", "sokoban"} <= set(names)
    for name in names:
        figs = ROOT / "figures" / name
        assert (figs / "README.md").read_text() == report.render(figs) + "\n", \
            (f"figures/{name}/README.md is stale; run python -m nca_interp.paper.report "
             f"--task {name} --write (every page: --task all --write)")
    assert len(names) >= 8


@pytest.mark.pages
def test_the_persona_page_is_what_its_script_prints_from_its_json():
    """figures/persona/README.md (docs/own_data.md embeds it) is docs/examples/persona/page.py's
    rendering of the JSON beside it: a changed table or cost line left unregenerated fails."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "persona_page", ROOT / "docs" / "examples" / "persona" / "page.py")
    page = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(page)
    figs = ROOT / "figures" / "persona"
    assert (figs / "README.md").read_text() == page.render(figs), \
        ("figures/persona/README.md is stale; run "
         "python docs/examples/persona/page.py figures/persona")


def test_every_generated_page_is_on_the_docs_site():
    """Each figures/<folder>/README.md is embedded by a docs page (a docs/results page, or a
    walk-through such as docs/own_data.md), and each such page is in mkdocs.yml's nav: a
    setting published without a page is invisible on the site."""
    nav = (ROOT / "mkdocs.yml").read_text()
    embedded = {}
    for page in (ROOT / "docs").rglob("*.md"):
        for target in re.findall(r'--8<-- "figures/([^/"]+)/README\.md"', page.read_text()):
            embedded[target] = page.relative_to(ROOT / "docs").as_posix()
    for readme in sorted((ROOT / "figures").glob("*/README.md")):
        name = readme.parent.name
        assert name in embedded, f"figures/{name}/README.md has no docs page"
        assert embedded[name] in nav, f"docs/{embedded[name]} not in nav"


def test_the_test_time_line_names_the_processes_of_a_parallel_run(tmp_path):
    """A record made with pytest -n says how many test processes shared the cores; a record
    without the field (one process) says nothing of them."""
    import json

    from nca_interp.paper import summary

    rec = {"seconds": 300.0, "tests": 10, "cpus": 2, "load_before": 0.5, "commit": "abc",
           "date": "2026-12-03"}
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    one.write_text(json.dumps(rec))
    two.write_text(json.dumps({**rec, "workers": 2}))
    assert "process" not in summary.test_time_line(one)
    assert "on 2 CPU cores, 2 test processes (measured" in summary.test_time_line(two)
