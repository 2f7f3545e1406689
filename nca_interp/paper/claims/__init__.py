"""The paper's claims as code: each is a function from a pipeline folder's JSON to (measured,
null or control, verdict), its rule written once in the rule book (`nca_interp/paper/rules.py`)
and its statistics in `nca_interp.paper.judge` and `nca_interp.paper.claims.stats`. One module
per claim family:

- `harm`: accuracy when c returns (internalizes, breaks, prevents, keeps, reads c, improves,
  longer answers);
- `views`: the two views' hidden states (near-identical, the later-layer gap);
- `gradients`: the loss terms' gradients (near-orthogonal, a new direction);
- `updates`: the parameter updates (shallow k/q, NCA's differ from OPD's);
- `heads`: the heads that carry the harm.

    python -m nca_interp.paper.claims facts                 # one setting's claims table
    python -m nca_interp.paper.claims --write               # regenerate the docs' blocks

Verdicts are the words of `rules.VERDICTS`; numbers are per-seed point estimates with each
run's 95% cluster-bootstrap interval where a rule uses one; ranges over seeds are written
"lo-hi" (a spread, not an interval). A claim whose input this setting lacks is a row "not run"
with the command that makes it, never a vanished row.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from nca_interp.fsio import write_text
from nca_interp.paper import rules
from nca_interp.paper.blocks import Block
from nca_interp.paper.claims.claim import Claim, not_run
from nca_interp.paper.claims.gradients import nca_new_direction, orthogonal, orthogonal_corrected
from nca_interp.paper.claims.harm import (
    degrades,
    harm_not_drift,
    internalizes,
    longer,
    nca_improves_no_c,
    nca_keeps_context,
    nca_prevents,
    nca_reads_context,
    pooled_claims,
    pooled_harm_gap,
    pooled_settings,
    reads_c_verdict,
)
from nca_interp.paper.claims.heads import heads_carry_harm
from nca_interp.paper.claims.stats import label_permutation_p, paired_harm_gap, pooled_gain
from nca_interp.paper.claims.updates import shallow_qk, size_matched, updates_differ
from nca_interp.paper.claims.views import nca_identical, opd_gap
from nca_interp.paper.layout import (
    CONTEXT_CONTROL,
    CONTEXT_RETURN,
    HARM_DRIFT,
    LAYER_SIM,
    PARAM_DELTA,
    PATCHING,
)
from nca_interp.paper.settings import load

__all__ = ["Claim", "CLAIMS", "DOCS", "claim_or_not_run", "pooled_settings", "claims", "corrected",
           "degrades", "harm_not_drift",
           "heads_carry_harm", "internalizes", "label_permutation_p", "longer", "main",
           "nca_identical", "nca_improves_no_c", "nca_keeps_context", "nca_new_direction",
           "nca_prevents", "nca_reads_context", "not_run", "opd_gap", "orthogonal",
           "orthogonal_corrected", "paired_harm_gap", "pooled_claims", "pooled_gain",
           "pooled_harm_gap", "reads_c_verdict", "refresh", "shallow_qk", "size_matched",
           "table", "updates_differ"]


# Each claim with its name, the report it reads and the command that writes it: a setting
# without the report gets the row "not run" naming the command, never a vanished row.
EVALUATE = (CONTEXT_RETURN, "python -m nca_interp.evaluate")
CONTROL = (CONTEXT_CONTROL, "python -m nca_interp.evaluate --control")
LAYERS = (LAYER_SIM, "python -m nca_interp.layer_sim")
GRADS = ("grad_align_<method>.json", "python -m nca_interp.grad_align --parts 4")
UPDATES = (PARAM_DELTA, "python -m nca_interp.param_delta")
CLAIMS: tuple[tuple[Callable[[Path], Claim | None], str, tuple[str, str]], ...] = (
    (internalizes, "OPD internalizes c (right without c rises)", EVALUATE),
    (degrades, "OPD students break when c returns (harm, regime A)", EVALUATE),
    (nca_prevents, "NCA prevents the harm", EVALUATE),
    (harm_not_drift, "OPD's harm is its own, not drift's (NCA's harm below OPD's at matched "
     "drift)", (HARM_DRIFT,
                "python -m nca_interp.paper.dose {figs}/trajectory.json --out {figs}/harm_drift")),
    (nca_keeps_context, "NCA keeps what c gives (accuracy with c)", EVALUATE),
    (nca_reads_context, "NCA still reads c (not blind to it)", CONTROL),
    (nca_improves_no_c, "NCA improves accuracy without c (vs OPD, same seed)", CONTROL),
    (longer, "OPD answers get longer with c (rel_len_both)", EVALUATE),
    (nca_identical, "NCA keeps the views near-identical", LAYERS),
    (opd_gap, "OPD leaves a gap in middle / late layers", LAYERS),
    (orthogonal, "OPD's gradient is near-orthogonal to the context view's", GRADS),
    (nca_new_direction, "NCA adds a direction OPD's gradient lacks", GRADS),
    (shallow_qk, "Updates concentrate in shallow layers, mostly k/q", UPDATES),
    (updates_differ, "NCA's updates differ from OPD's", UPDATES),
    (heads_carry_harm, "OPD's harm runs through a few heads reading c",
     (PATCHING, "python -m nca_interp.patching --kind harm")),
)


def claim_or_not_run(fn: Callable[[Path], Claim | None], figs: Path) -> Claim | None:
    """`fn(figs)`, or where the report it reads is missing the row "not run" naming that
    report and the command that writes it (`CLAIMS`; a rule outside it names the setting's
    pipeline)."""
    try:
        claim = fn(figs)
    except FileNotFoundError as e:
        name, (file, command) = next(  # a rule outside CLAIMS: its setting's pipeline
            ((n, spec) for f, n, spec in CLAIMS if f is fn),
            (fn.__name__, ("its input", f"python -m nca_interp.paper.reproduce --task "
                                        f"{figs.name}")))
        missing = Path(e.filename).name if e.filename else file
        claim = not_run(name, missing, command.format(figs=f"{figs.parent.name}/{figs.name}"))
    return typed(claim, fn.__name__)


def typed(claim: Claim | None, spec: str) -> Claim | None:
    """`claim` with its rule-book type `spec` (a key of `rules.SPECS`) where it has none."""
    if claim is None or claim.spec or spec not in rules.SPECS:
        return claim
    return replace(claim, spec=spec)


def corrected(found: list[Claim]) -> list[Claim]:
    """`found` with each claim's verdict after Holm over this family (`rules.holm`, the
    multiplicity rule): claims with a p and a verdict other than not measurable / not run are
    the family; the others keep their verdict, "not tested" beside it."""
    ps = [c.p if c.verdict not in ("not measurable", "not run") else None for c in found]
    rejected = rules.holm(ps)
    out = []
    for i, c in enumerate(found):
        if ps[i] is None:
            out.append(replace(c, holm=c.verdict, holm_note="not tested"))
            continue
        level = rules.holm_threshold(ps, i)
        out.append(replace(c, holm=rules.after_holm(c.verdict, ps[i], rejected[i]),
                           holm_note=f"p {_p(ps[i])} against {_p(level)}"))
    return out


def _p(v: float) -> str:
    return f"{v:.2g}" if v >= 0.001 else f"{v:.0e}"


def family_size(found: list[Claim]) -> int:
    """The claims Holm corrects over (`corrected`)."""
    return sum(c.holm_note.startswith("p ") for c in found)


def claims(figs: Path) -> list[Claim]:
    """Every claim of `CLAIMS` on `figs`: judged where its report exists, else "not run" with
    the command that writes the report; the size-matched comparison where
    `<setting>_size` exists beside it."""
    out = []
    for fn, _, _ in CLAIMS:
        claim = claim_or_not_run(fn, figs)
        if claim is not None:
            out.append(claim)
    if (figs.parent / f"{figs.name}_size" / PARAM_DELTA).exists():
        out.append(size_matched(figs.parent / f"{figs.name}_size"))
    return corrected(out)


def table(figs: Path) -> str:
    members = pooled_settings().get(figs.name)
    if members:
        try:
            found = judged(figs)
        except FileNotFoundError:  # a member not run yet: say how to run it
            settings = load().settings
            found = [not_run("harm verdicts pooled over " + ", ".join(members),
                             "context_return.json of every member",
                             "; ".join(settings[m].command(m) for m in members))]
    else:
        found = claims(figs)
    m = family_size(found)
    rows = ["| claim | measured | null / control | detectable (80% power) | verdict | after "
            f"Holm over this setting's {m} tested claim{'s' * (m != 1)} |",
            "|---|---|---|---|---|---|"]
    rows += [f"| {c.name} | {c.measured} | {c.null} | {c.detectable or '-'} | **{c.cell}** | "
             f"{holm_cell(c)} |" for c in found]
    return "\n".join(rows)


def holm_cell(c: Claim) -> str:
    """The verdict after Holm (`corrected`), its p and threshold; "-" where none was set."""
    if not c.holm:
        return "-"
    changed = " (changed)" if c.holm != c.verdict else ""
    return f"**{c.holm}**{changed} ({c.holm_note})"



def words(claim: Claim) -> tuple[str, ...]:
    """A claim's verdict words: its own, then each other threshold's, then its verdict after
    Holm (the multiplicity rule)."""
    return (claim.verdict, *(w for _, w, _ in claim.also), *([claim.holm] * bool(claim.holm)))


def judged(figs: Path) -> list[Claim]:
    """The claims a setting's table shows (pooled where the setting pools its members)."""
    if figs.name not in pooled_settings():
        return claims(figs)
    found = pooled_claims(pooled_settings()[figs.name], figs.parent)
    return corrected(found + [size_matched(figs.parent / f"{m}_size")
                              for m in pooled_settings()[figs.name]
                              if (figs.parent / f"{m}_size" / PARAM_DELTA).exists()])


def settings_judged(root: Path = Path("figures")) -> list[Path]:
    """Every folder of `root` with an evaluation, and every pooled setting."""
    found = sorted(p.parent for p in root.glob("*/context_return.json"))
    return found + [root / name for name in pooled_settings() if (root / name) not in found]


def flips(root: Path = Path("figures"), seeds: int = 5) -> list[str]:
    """Every verdict that changes with the claims' bootstrap seed (0 .. seeds - 1), as
    'setting: claim: word, word, ...'; none is the stability the rule book asks."""
    from nca_interp.paper.claims import power
    from nca_interp.paper.claims.stats import bootstrap_seed

    out = []
    for figs in settings_judged(root):
        runs = []
        for seed in range(seeds):
            with bootstrap_seed(seed):
                found = {c.name: words(c) for c in judged(figs)}
                for left, right, _, _ in power.rows(figs):  # the power table, both columns
                    found[f"{left.name} (power, published items)"] = words(left)
                    found[f"{right.name} (power, more items)"] = words(right)
                runs.append(found)
        for name in runs[0]:
            seen = [r.get(name) for r in runs]
            if len(set(seen)) > 1:
                out.append(f"{figs.name}: {name}: " + ", ".join("/".join(w) for w in seen))
    return out


def claims_block(name: str) -> Block:
    return Block.named(f"claims:{name}", "python -m nca_interp.paper.claims --write")



RULES = Block.named("rules", "python -m nca_interp.paper.claims --write; nca_interp/paper/rules.py")



def verdict_line(figs: Path) -> str:
    """The setting's verdicts as one sentence, claims grouped by their verdict after Holm (the
    multiplicity rule), a raw verdict Holm changed said beside its claim: what prose beside a
    table may say of the verdicts, generated so it cannot contradict the table."""
    pooled = figs.name in pooled_settings()
    found = judged(figs) if (figs / CONTEXT_RETURN).exists() or pooled else []
    groups: dict[str, list[str]] = {}
    for c in found:
        after = c.holm or c.verdict
        raw = f" ({c.verdict} before Holm)" if after != c.verdict else ""
        groups.setdefault(after, []).append(c.name.split(" (")[0] + raw)
    parts = [f"**{word}**: " + "; ".join(groups[word]) for word in rules.VERDICTS
             if word in groups]
    return ("Verdicts here, after Holm over this setting's tested claims: " + ". ".join(parts)
            + ".")


def verdicts_block(name: str) -> Block:
    return Block.named(f"verdicts:{name}", "python -m nca_interp.paper.claims --write")


def refresh(text: str, root: Path = Path("figures")) -> str:
    """`text` with every claims block, verdict line and the rule book's block regenerated."""
    for name in re.findall(r"<!-- claims:([\w-]+):begin", text):
        text = claims_block(name).replace(text, table(root / name), f"claims block {name}")
    for name in re.findall(r"<!-- verdicts:([\w-]+):begin", text):
        text = verdicts_block(name).replace(text, verdict_line(root / name),
                                            f"verdicts block {name}")
    return RULES.replace(text, rules.markdown(), optional=True)



DOCS = ("docs/reproduction.md", "docs/index.md", "docs/real_model.md",
        "docs/results/sysprompt_kbs.md", "docs/method.md")



def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("settings", nargs="*", default=[])
    ap.add_argument("--figures", default="figures")
    ap.add_argument("--write", action="store_true",
                    help="regenerate every claims block of " + ", ".join(DOCS))
    ap.add_argument("--stability", type=int, metavar="K",
                    help="judge every setting under K bootstrap seeds; exit 1 on any verdict "
                         "that changes")
    args = ap.parse_args(argv)
    if args.stability:
        changed = flips(Path(args.figures), args.stability)
        print("\n".join(changed) or f"no verdict changes over {args.stability} bootstrap seeds")
        if changed:
            raise SystemExit(1)
    for name in args.settings:
        print(f"{name}\n{table(Path(args.figures) / name)}\n")
    if args.write:
        for doc in map(Path, DOCS):
            if doc.exists():
                write_text(doc, refresh(doc.read_text(), Path(args.figures)))
