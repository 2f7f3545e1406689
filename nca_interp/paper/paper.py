"""The paper beside us: each of the paper's headline numbers and this package's measured
counterpart over every published setting, with the null each is read against, generated from
the settings' JSON (never typed).

    python -m nca_interp.paper.paper             # print the table
    python -m nca_interp.paper.paper --write     # replace the generated block in README.md and docs

The settings counted are the published ones that are no variant of another
(`nca_interp/paper/settings.toml`) and trained OPD and NCA side by side; a cell names how many
settings it counts."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from nca_interp import analysis
from nca_interp.identity import others
from nca_interp.paper import rules
from nca_interp.paper.blocks import Block
from nca_interp.paper.claims.claim import runs_of
from nca_interp.paper.claims.harm import nca_improves_no_c, pooled_harm_gap
from nca_interp.paper.claims.views import closed_shares
from nca_interp.paper.settings import load
from nca_interp.paper.sweep import beta_points, beta_sweeps
from nca_interp.reports import read_derived

__all__ = ["main"]

BLOCK = Block.named("paper", "python -m nca_interp.paper.paper --write")
DOCS = ("README.md", "docs/results/index.md")

# The paper's headline numbers, as it states them.
PAPER = {
    "harm": (11, 12),  # settings where NCA reduced harm
    "length": 0.395,  # OPD's largest relative length inflation with c
    "improves": (7, 12, 0.006, 0.036),  # settings where NCA improved accuracy without c, range
    "beta": 0.5,  # the best NCA weight
}


def main_settings(root: Path = Path("figures")) -> list[str]:
    """Published settings that vary no other and hold OPD and NCA students."""
    out = []
    for name, st in load().settings.items():
        f = root / name / "context_return_summary.json"
        if st.variant is None and f.exists():
            s = read_derived(f)
            if s.get("opd") and s.get("nca"):
                out.append(name)
    return out


def _mean(stat: dict | None) -> float | None:
    return None if not stat else stat["mean"]


def harm_row(root: Path, names: list[str]) -> str:
    lower, clear, where = 0, 0, []
    for name in names:
        s = read_derived(root / name / "context_return_summary.json")
        o, n = _mean(s["opd"].get("harm")), _mean(s["nca"].get("harm"))
        if o is not None and n is not None and n < o:
            lower += 1
        gap = pooled_harm_gap(root / name)
        if gap is not None and gap[1][0] > 0:
            clear += 1
            where.append(name)
    k, n = PAPER["harm"]
    return (f"| NCA reduces harm | {k} of {n} settings | lower mean harm than OPD in {lower} of "
            f"{len(names)}; paired OPD - NCA harm interval above 0 in {clear} of {len(names)}"
            + (f" ({', '.join(where)})" if where else "") + " | equal harm (a paired interval "
            "reaching 0) |")


def length_row(root: Path, names: list[str]) -> str:
    best, above = None, 0
    for name in names:
        s = read_derived(root / name / "context_return_summary.json")
        o, b = _mean(s["opd"].get("rel_len_both")), _mean(s["base"].get("rel_len_both"))
        if o is None:
            continue
        above += b is None or o > b
        if best is None or o > best[1]:
            best = (name, o, b)
    if best is None:
        return "| OPD's answers longer with c (largest) | +39.5% | - | - |"
    name, o, b = best
    return (f"| OPD's answers longer with c (largest relative change) | "
            f"+{100 * PAPER['length']:.1f}% | {100 * o:+.1f}% ({name}); above step 0's in "
            f"{above} of {len(names)} settings | step 0 in {name}: "
            + ("-" if b is None else f"{100 * b:+.1f}%") + " |")


def improves_row(root: Path, names: list[str]) -> str:
    better, shown = [], 0
    for name in names:
        s = read_derived(root / name / "context_return_summary.json")
        d = _mean(s["nca"].get("correct_no_c")) - _mean(s["opd"].get("correct_no_c"))
        if d > 0:
            better.append(d)
        try:
            shown += nca_improves_no_c(root / name).verdict == "reproduced"
        except FileNotFoundError:
            pass
    k, n, lo, hi = PAPER["improves"]
    span = (f", by {100 * min(better):.1f}-{100 * max(better):.1f} points" if better else "")
    return (f"| NCA improves accuracy without c | {k} of {n} settings, by {100 * lo:.1f}-"
            f"{100 * hi:.1f} points | higher mean than OPD in {len(better)} of {len(names)}"
            f"{span}; shown by the effect test (pooled paired interval above 0) in {shown} | "
            "no change (a paired interval reaching 0) |")


def cosine_rows(root: Path) -> list[str]:
    paper = rules.PAPER_COS
    closed = rules.PAPER_CLOSED
    rows = []
    published = load().settings  # a depth-sweep row (a preset's folder) is not one
    for f in sorted(root.glob("*/layer_sim.json")):
        if f.parent.name not in published:
            continue
        rep = analysis.load(f)
        base = next((r for n, r in others(rep) if n != "random_init"), None)
        opd, nca = runs_of(rep, "opd"), runs_of(rep, "nca")
        if base is None or not opd or not nca or "random_init" not in rep.results:
            continue
        b = base.cos[1:]

        def low(runs):
            return float(np.mean([min(r.cos[1:]) for r in runs]))

        def share(runs, b=b):
            return float(np.mean(closed_shares([r.cos[1:] for r in runs], b)))

        floor = [max(r.cos_other[1:]) for r in nca if r.cos_other is not None]
        rnd = min(rep.results["random_init"].cos[1:])
        rows.append(
            f"| hidden-state cosine, views with and without c (`{f.parent.name}`, "
            f"{len(b)} layers) | base {paper['base']:g}, OPD {paper['opd']:g}, NCA >= "
            f"{paper['nca']:g}; closes OPD {100 * closed['opd']:.1f}%, NCA >= "
            f"{100 * closed['nca']:.1f}% | "
            f"lowest layer: step 0 {min(b):.3f}, OPD {low(opd):.3f}, NCA {low(nca):.3f}; closes "
            f"(layers' mean) OPD {100 * share(opd):.1f}%, NCA {100 * share(nca):.1f}% | "
            "random init "
            f"{rnd:.3f}" + (f"; different items up to {max(floor):.3f}" if floor else "") + " |")
    return rows


def beta_rows(root: Path) -> list[str]:
    rows = []
    for base in beta_sweeps():
        points, _ = beta_points(base, root)
        betas = sorted({p["beta"] for p in points})
        if len(betas) < 3:
            continue
        acc = {b: [(p["correct_no_c"] + p["correct_c"]) / 2 for p in points if p["beta"] == b]
               for b in betas}
        order = sorted(betas, key=lambda b: -float(np.mean(acc[b])))
        top, nxt = order[0], order[1]
        apart = min(acc[top]) > max(acc[nxt])
        rows.append(
            f"| the best NCA weight beta (`{base}`: mean of accuracy without and with c) | "
            f"{PAPER['beta']:g} | beta {top:g} ({np.mean(acc[top]):.3f}), next {nxt:g} "
            f"({np.mean(acc[nxt]):.3f}), of {', '.join(f'{b:g}' for b in betas)} on "
            f"{len(acc[top])} seeds | seed ranges {min(acc[top]):.3f}-{max(acc[top]):.3f} and "
            f"{min(acc[nxt]):.3f}-{max(acc[nxt]):.3f}: "
            + ("apart" if apart else "overlapping, so no best beta is shown") + " |")
    return rows


def table(root: Path = Path("figures")) -> str:
    names = main_settings(root)
    rows = ["| the paper's claim | the paper | here | null beside it |", "|---|---|---|---|",
            harm_row(root, names), length_row(root, names), improves_row(root, names),
            *cosine_rows(root), *beta_rows(root)]
    return "\n".join(rows) + (
        f"\n\nSettings counted: {', '.join(f'`{n}`' for n in names)} ({len(names)}; published, "
        "no variant of another, OPD and NCA trained side by side). The paper's cosines are "
        "Qwen3-4B on Sokoban over all 36 layers; here the lowest layer of each model, and the "
        "share of step 0's distance to 1 closed on the layers' mean (`nca_interp/paper/rules.py`).")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--figures", default="figures")
    ap.add_argument("--write", action="store_true", help="replace the block in " +
                    ", ".join(DOCS))
    args = ap.parse_args(argv)
    text = table(Path(args.figures))
    print(text)
    if args.write:
        for doc in DOCS:
            BLOCK.write(Path(doc), text)


if __name__ == "__main__":
    main()
