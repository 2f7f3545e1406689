"""Every published report reads as the typed class of the analysis that wrote it and writes back
unchanged (nca_interp.reports; the classes themselves are tested in tests/unit/test_reports.py)."""

import json
from pathlib import Path

from nca_interp import analysis, reports
from nca_interp.paper.layout import analysis_files


def published():
    for figs in sorted(Path("figures").iterdir()):
        for _, f in analysis_files(figs) if figs.is_dir() else []:
            yield f


def leaves(tree, path=()):
    """Every value of a JSON tree in order, with the keys on its path."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from leaves(v, (*path, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from leaves(v, (*path, i))
    else:
        yield path, tree


def test_every_published_report_reads_typed_and_writes_back_unchanged():
    """Each file is read as the class of the analysis that wrote it (its entries as the entry
    class), and `to_json` gives the file again: the same values in the same order, nothing
    dropped or defaulted in, keys renamed only to this version's vocabulary (and only where
    the file predates it), plus the version and the analysis."""
    n = renamed = 0
    old = {**reports.VOCABULARY, "win": "correct"}
    for f in published():
        raw = json.loads(f.read_text())
        rep = analysis.load(f)
        assert type(rep) is not reports.Report, f"{f} read untyped"
        assert all(isinstance(e, rep.ENTRY) for e in rep.results.values()), f
        out = rep.to_json()
        assert (out.pop("version"), out.pop("analysis")) == (reports.VERSION, rep.ANALYSIS)
        up = {k: v for k, v in reports.upgrade(raw).items() if k != "version"}
        assert up.pop("analysis", None) in (None, rep.ANALYSIS), f  # None: written before
        assert json.dumps(out, sort_keys=True) == json.dumps(up, sort_keys=True), f
        raw = {k: v for k, v in raw.items() if k not in ("analysis", "version")}
        a, b = list(leaves(raw)), list(leaves(up))  # the upgrade renames, in place, only
        assert [v for _, v in a] == [v for _, v in b], f
        for (p, _), (q, _) in zip(a, b):
            assert len(p) == len(q) and all(x == y or old.get(x) == y for x, y in zip(p, q)), \
                (f, p, q)
            renamed += p != q
        n += 1
    assert n > 150 and renamed > 1000  # the published files predate the vocabulary


def test_the_pages_and_verdicts_read_reports_by_attribute(monkeypatch):
    """The package's readers use the typed fields (`entry.correct_c`, `rep.results`), not the
    mapping view kept for users' older code: a literal key read (`r["harm"]`, `.get("at")`,
    `"control" in r`) of a typed report from package code fails here, while the page and the
    verdicts of a game, a question and a system-prompt setting are rendered. Generic walkers
    (the JSON writer, the run roster, the data frame) and reads by a computed column name are
    fine."""
    import linecache
    import sys

    from nca_interp.paper import claims, report

    real = reports.Fields.__getitem__
    generic = ("reports.py", "cli.py", "identity.py", "analysis.py")
    caught = []

    def strict(self, key):
        fr = sys._getframe(1)
        while "_collections_abc" in fr.f_code.co_filename:
            fr = fr.f_back
        where = fr.f_code.co_filename
        line = linecache.getline(where, fr.f_lineno)
        if "/nca_interp/" in where and not where.endswith(generic) and \
                (f'"{key}"' in line or f"'{key}'" in line):
            caught.append(f"{where}:{fr.f_lineno}: {line.strip()}")
        return real(self, key)

    monkeypatch.setattr(reports.Fields, "__getitem__", strict)
    for name in ("frozenlake", "facts_rule", "sysprompt_kb0"):
        figs = Path("figures") / name
        assert report.render(figs) and claims.claims(figs)
    assert not caught, "\n".join(sorted(set(caught)))
