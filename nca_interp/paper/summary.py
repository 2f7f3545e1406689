"""The summary across settings, generated from each pipeline folder's JSON (never typed).

    python -m nca_interp.paper.summary              # print the table
    python -m nca_interp.paper.summary --write      # also replace the blocks in DOCS' pages,
                                                    # REPRODUCE_PAGE's and README.md's test time
                                         # (and the table in docs/results/index.md)

Per setting (a `figures/<name>/` written by `nca_interp.paper.reproduce`): the teacher with and
without the context (the step-0 null every student is read against: in self-distillation it *is* the
students' initial checkpoint), then OPD and NCA over their seeds: accuracy without / with c, harm =
P(wrong with c | right without c), and the regime of every seed. Cells are the mean over seeds with
the seeds' range in parentheses (a spread, not an interval; each run's own 95% cluster-bootstrap
intervals are in figures/<name>/README.md). A test checks that README.md's block equals this output.
"""

from __future__ import annotations

if __name__ == "__main__":  # Ctrl-C while the imports below run: one line, not a traceback
    from nca_interp.cli import quiet_interrupt

    quiet_interrupt()

import argparse
import re
from pathlib import Path

from nca_interp.fsio import read_json
from nca_interp.paper.blocks import Block
from nca_interp.paper.settings import load
from nca_interp.reports import read_derived

__all__ = ["main"]

DOCS = ("docs/reproduction.md", "docs/results/index.md")
REPRODUCE_PAGE = "docs/reproduction.md"  # the commands that remake each setting
# which pages list variants
VARIANTS_IN = {"docs/reproduction.md": False, "docs/results/index.md": True}
BLOCK = Block.named("summary", "python -m nca_interp.paper.summary --write")


def _cell(stat: dict | None, digits: int = 3) -> str:
    if not stat:
        return "-"
    if stat["n"] == 1 or stat["min"] == stat["max"]:
        return f"{stat['mean']:.{digits}f}"
    return f"{stat['mean']:.{digits}f} ({stat['min']:.{digits}f} to {stat['max']:.{digits}f})"


def _regimes(rs: list[str]) -> str:
    return " ".join(f"{r}x{rs.count(r)}" for r in sorted(set(rs))) if rs else "-"


def row(figs: Path) -> str | None:
    f = figs / "context_return_summary.json"
    if not f.exists():
        return None
    s = read_derived(f)
    base = s.get("base", {})
    teacher = f"{_cell(base.get('correct_no_c'))} / {_cell(base.get('correct_c'))}; harm " \
              f"{_cell(base.get('harm'))}"
    cells = [f"`{figs.name}`", teacher]
    for method in ("opd", "nca"):
        m = s.get(method)
        if not m:
            cells += ["-", "-", "-"]
            continue
        n = len(m["regimes"])
        cells += [f"{_cell(m['correct_no_c'])} / {_cell(m['correct_c'])}", _cell(m["harm"]),
                  f"{_regimes(m['regimes'])} (n={n})"]
    return "| " + " | ".join(cells) + " |"


def table(root: Path = Path("figures"), variants: bool = True) -> str:
    """Every published setting; `variants=False` leaves out the settings that vary another
    (estimators, NCA weights, a second knowledge base: the reproduction page's shorter table;
    their rows are on docs/results/index.md)."""
    head = ("| setting | step 0 (the null): right without c / with c; harm | OPD: right "
            "without c / with c | OPD harm | OPD regimes | NCA: right without c / with c | "
            "NCA harm | NCA regimes |\n|---|---|---|---|---|---|---|---|")
    settings = load().settings
    rows = [r for r in (row(root / name) for name, st in settings.items()
                        if variants or st.variant is None) if r]
    note = ("\nStep 0 is the checkpoint every student starts from: in self-distillation (every "
            "setting but `sokoban_xl`) the teacher itself; `sokoban_xl`'s students start from a "
            "4-layer `sokoban` teacher evaluated in its own folder (its 8-layer teacher's rows "
            "are on its page).")
    return "\n".join([head, *rows]) + "\n" + note


# the settings the reproduction page leads with: the real model, then the Sokoban case the
# paper studied
FRONT = ("facts_rule", "sokoban_long", "facts")
REPRODUCE = Block.named("reproduce", "python -m nca_interp.paper.summary --write")
TEST_TIME = Block.named("test-time", "python -m nca_interp.paper.summary --write")
TEST_RECORD = Path("bench/results/test_time.json")


def reproduce_table(root: Path = Path("figures"), names: tuple[str, ...] = FRONT) -> str:
    """The command of each headline setting and the time its manifest records: the sum of every
    stage's seconds (students trained side by side each count in full) and the seeds."""
    settings = load().settings
    rows = ["| setting | command | seeds | recorded time (sum of stages) |", "|---|---|---|---|"]
    for name in names:
        f = root / name / "manifest.json"
        if not f.exists():
            continue
        m = read_json(f)
        train = sum(v.get("seconds", 0) for v in m["files"].values()
                    if re.search(r"-m train\.(sft|distill) ", v["command"]))
        rest = sum(v.get("seconds", 0) for v in m["files"].values()) - train
        rows.append(f"| `{name}` | `{settings[name].command(name)}` | "
                    f"{len(m['config']['seeds'])} | {(train + rest) / 3600:.1f} h (training "
                    f"{train / 3600:.1f} h, evaluation and analyses {rest / 3600:.1f} h) |")
    return "\n".join(rows)


def test_time_line(record: Path = TEST_RECORD) -> str:
    if not record.exists():
        return "`make test-time` has not recorded the default run's time yet."
    r = read_json(record)
    busy = "" if "load_before" not in r else \
        f", 1-minute load average {r['load_before']:.1f} at its start"
    workers = r.get("workers", 1)
    split = f", {workers} test processes" if workers > 1 else ""
    return (f"`make test` runs {r['tests']} tests in {r['seconds'] / 60:.0f} min on {r['cpus']} "
            f"CPU cores{split} (measured {r['date']} at {r['commit']} by `make test-time`"
            f"{busy}).")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--figures", default="figures")
    ap.add_argument("--write", action="store_true",
                    help="replace the generated blocks of " + ", ".join(DOCS)
                    + " and README.md's test time")
    args = ap.parse_args(argv)
    new = table(Path(args.figures))
    print(new)
    if args.write:
        for doc in DOCS:
            BLOCK.write(Path(doc), table(Path(args.figures), VARIANTS_IN[doc]))
        REPRODUCE.write(Path(REPRODUCE_PAGE), reproduce_table(Path(args.figures)))
        TEST_TIME.write(Path("README.md"), test_time_line())


if __name__ == "__main__":
    from nca_interp.cli import started

    started()
    main()
