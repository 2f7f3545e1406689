"""Power where it is cheap: the same students evaluated on more held-out items
(`figures/<setting>/more_items/`, written by `python -m nca_interp.evaluate ... --out
figures/<setting>/more_items/context_return.json`), each accuracy claim judged on the
published items and on the larger set, over the same seeds, with the minimum detectable
effect of each.

Students retrained for the purpose (their checkpoints are not kept) are evaluated on the
published items too, in `more_items/published_items/`: the left column then reads those, so
both columns judge the very same weights, and the page says which retrained students
reproduce the published per-item results exactly and which do not.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from nca_interp import analysis
from nca_interp.identity import roster
from nca_interp.paper.claims.claim import Claim, not_run
from nca_interp.paper.claims.harm import (
    degrades,
    nca_improves_no_c,
    nca_keeps_context,
    nca_reads_context,
)
from nca_interp.paper.layout import CONTEXT_CONTROL, CONTEXT_RETURN

__all__ = ["table"]

MORE = "more_items"
SAME = "published_items"  # the students of more_items/ on the published items
CLAIMS = (degrades, nca_keeps_context, nca_reads_context, nca_improves_no_c)
FILES = (CONTEXT_RETURN, CONTEXT_CONTROL)


def seeds_of(figs: Path) -> set[int]:
    rep = analysis.load(figs / CONTEXT_RETURN)
    who = roster(rep)
    return {who[k].seed for k in rep.results if who[k].student}


def view(figs: Path, seeds: set[int], dst: Path) -> Path:
    """A read-only copy of `figs`'s evaluations holding only the students of `seeds` (and
    every non-student entry), in `dst`."""
    for name in FILES:
        if not (figs / name).exists():
            continue
        rep = json.loads((figs / name).read_text())
        who = roster(analysis.load(figs / name))
        rep["results"] = {k: v for k, v in rep["results"].items()
                          if not who[k].student or who[k].seed in seeds}
        (dst / name).write_text(json.dumps(rep))
    return dst


def _items(figs: Path) -> int:
    rep = analysis.load(figs / CONTEXT_RETURN)
    first = next(iter(rep.results.values()))
    return first.n if first.n is not None else len(first.items_["unit"])


def rows(figs: Path) -> list[tuple[Claim, Claim, int, int]]:
    """(claim on the published items, on more items, their item counts) for each accuracy
    claim, over the seeds both evaluated; [] without `more_items`."""
    more = figs / MORE
    if not (more / CONTEXT_RETURN).exists():
        return []
    left = more / SAME if (more / SAME / CONTEXT_RETURN).exists() else figs
    seeds = seeds_of(more) & seeds_of(left)
    with tempfile.TemporaryDirectory() as tmp:
        published = view(left, seeds, Path(tmp))
        return [(_judge(fn, published), _judge(fn, more), _items(published), _items(more))
                for fn in CLAIMS]


def _judge(fn, figs: Path) -> Claim:
    try:
        return fn(figs)
    except FileNotFoundError as e:
        return not_run(fn.__name__.replace("_", " "), Path(e.filename or FILES[1]).name,
                       "python -m nca_interp.evaluate --control")


def table(figs: Path) -> str:
    """The power table of a setting ('' without `more_items`)."""
    found = rows(figs)
    if not found:
        return ""
    same = figs / MORE / SAME
    seeds = sorted(seeds_of(figs / MORE) & seeds_of(same if (same / CONTEXT_RETURN).exists()
                                                     else figs))
    lines = ["| claim | items | verdict | detectable (80% power) | items | verdict | "
             "detectable (80% power) |", "|---|---|---|---|---|---|---|"]
    for a, b, n_a, n_b in found:
        lines.append(f"| {a.name} | {n_a} | **{a.cell}** | {a.detectable or '-'} | {n_b} | "
                     f"**{b.cell}** | {b.detectable or '-'} |")
    return "\n".join(lines) + (
        f"\n\nThe same students (seeds {', '.join(map(str, seeds))}) judged on the published "
        f"held-out items (left) and on `{MORE}/` (right); the detectable effect is the "
        "smallest true effect each interval shows four times in five. Written by "
        + "; ".join(f"`{command(d / f)}`" for d in (figs / MORE, same) for f in FILES
                    if (d / f).exists()) + "." + sameness(figs) + c_primes(figs))


def c_primes(figs: Path) -> str:
    """What the wrong context c' of each column's control report was (`evaluate`'s
    `control_record`), said once where both columns name the same, and as a warning where
    they differ (reads c then compares different wrong contexts); '' where neither says."""
    more = figs / MORE
    left = more / SAME if (more / SAME / CONTEXT_CONTROL).exists() else figs
    said = [_c_prime(d) for d in (left, more)]
    if not any(said):
        return ""
    text = (f" The wrong context c' of both control columns: {said[0]}." if said[0] == said[1]
            else " The columns' control contexts differ, so 'reads c' compares different wrong "
            f"contexts: left {said[0] or 'not recorded in its report'}; right "
            f"{said[1] or 'not recorded in its report'}.")
    own = _c_prime(figs) if (figs / CONTEXT_CONTROL).exists() and left != figs else said[0]
    if own != said[0]:
        text += (" The setting's own control report, which the verdict table above reads, "
                 f"used another c': {own or 'not recorded in its report'}.")
    return text


def _c_prime(folder: Path) -> str | None:
    """What c' the control report in `folder` says it was (None: none there, or not said)."""
    f = folder / CONTEXT_CONTROL
    runs = analysis.load(f).results.values() if f.exists() else []
    return next((r.control["c_prime"] for r in runs
                 if isinstance(r.control, dict) and r.control.get("c_prime")), None)


def sameness(figs: Path) -> str:
    """Which students of `more_items/published_items/` give the published per-item results
    exactly ('' without that folder)."""
    same = figs / MORE / SAME / CONTEXT_RETURN
    if not same.exists():
        return ""
    pub, new = (analysis.load(f).results for f in (figs / CONTEXT_RETURN, same))
    who = roster(analysis.load(same))
    exact, differ = [], []
    for name, r in new.items():
        if not who[name].student:
            continue
        items = pub[name].items_ if name in pub else None
        n = sum(a != b for f in ("correct_no_c", "correct_c")
                for a, b in zip(items[f], r.items_[f])) if items else None
        if n == 0:
            exact.append(name)
        else:  # None: not in the published report
            differ.append(name if n is None else f"{name} ({n} answer{'s' * (n > 1)})")
    return (" The students were retrained from the manifest's commands (checkpoints are not "
            "kept), and both columns judge them: the left reads their evaluation on the "
            f"published items (`{MORE}/{SAME}/`). {len(exact)} of {len(exact) + len(differ)} "
            "give the published per-item results exactly"
            + (f"; {', '.join(differ)} differ{'s' if len(differ) == 1 else ''}" if differ
               else "") + ".")


def command(path: Path) -> str:
    """The evaluate command line that wrote the report at `path` (from its recorded config)."""
    import shlex

    from nca_interp.cli import argv_of
    from nca_interp.configs import EvalConfig

    config = json.loads(path.read_text()).get("config")
    if not config:
        return f"{path.name} (its report records no command)"
    import dataclasses

    known = {f.name for f in dataclasses.fields(EvalConfig)} - {"png"}
    cfg = EvalConfig(**{k: v for k, v in config.items() if k in known})  # older reports too
    return "python -m nca_interp.evaluate " + shlex.join(argv_of(cfg, positional="ckpt"))
