"""The package's layers, read from its own imports: docs/architecture.md is generated from here.

    python -m nca_interp.paper.architecture          # the layer table and any violation
    python -m nca_interp.paper.architecture --write  # regenerate docs/architecture.md's block

Every module of `nca_interp` and `train` belongs to one layer of `LAYERS`; a module may import
modules of its own layer or of layers below it, never above, and no set of modules may import
each other in a circle (imports inside functions count: they are dependencies too). A test
fails on an upward arrow, a circle, or a module no layer names.
"""

from __future__ import annotations

if __name__ == "__main__":  # Ctrl-C while the imports below run: one line, not a traceback
    from nca_interp.cli import quiet_interrupt

    quiet_interrupt()

import argparse
import ast
from pathlib import Path

from nca_interp.paper.blocks import Block

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[2]

# lowest first: (name, what the layer does, module prefixes)
LAYERS = (
    ("core", "models, checkpoints, tokenizers, tasks, losses, rollouts, hooks, bootstrap",
     ("nca_interp",)),
    ("analyses", "each reads checkpoints and writes a JSON report (and its figures): every "
     "registered analysis's module (`nca_interp.analysis.specs`), and these helpers",
     ("nca_interp.sizing", "nca_interp.trl_nca", "nca_interp.trl_callbacks")),
    ("training", "produces runs: a teacher, OPD and NCA students, with their run configs",
     ("train", "train.common", "train.options", "train.sft", "train.distill",
      "train.trl_distill", "train.embed")),
    ("data", "what the pipeline and pages agree on: settings, file layout, rules, blocks",
     ("nca_interp.paper.settings", "nca_interp.paper.layout", "nca_interp.paper.rules",
      "nca_interp.paper.judge", "nca_interp.paper.blocks")),
    ("verdicts", "typed claims from the reports, judged by the rule book",
     ("nca_interp.paper.dose", "nca_interp.paper.claims")),
    ("pages", "generated Markdown and figures from the reports and claims",
     ("nca_interp.paper.figures", "nca_interp.paper.report", "nca_interp.paper.summary",
      "nca_interp.paper.sweep", "nca_interp.paper.referee", "nca_interp.paper.depth",
      "nca_interp.paper.architecture", "nca_interp.paper.knowledge", "nca_interp.paper.paper")),
    ("pipeline", "from nothing to a published setting: runs, reports, pages",
     ("nca_interp.paper.reproduce", "nca_interp.paper.options", "nca_interp.paper.size_control",
      "nca_interp.paper.kept")),
)

FLOW = ("checkpoint (a folder: weights, tokenizer, run config)",
        "run (`train.distill`: method, seed, beta in its run config)",
        "report (an analysis: `run(config)` -> one report shape, `nca_interp.analysis`; its "
        "one writer puts the JSON and figures in figures/<setting>/)",
        "claims (`nca_interp.paper.claims`: typed verdicts by `nca_interp.paper.rules`)",
        "pages (`nca_interp.paper.report`, `nca_interp.paper.summary`, "
        "`nca_interp.paper.referee`, `nca_interp.paper.sweep`, through "
        "`nca_interp.paper.blocks`)")

BLOCK = Block.named("architecture", "python -m nca_interp.paper.architecture --write")
PAGE = Path("docs/architecture.md")


def modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for pkg in ("nca_interp", "train"):
        for f in sorted((root / pkg).rglob("*.py")):
            parts = f.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = f
    return out


def imports(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the package modules it imports (anywhere in it, functions included)."""
    mods = modules(root)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        pkg = m if f.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                edges[m] |= {a.name for a in node.names if a.name in mods}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                if base in mods:
                    edges[m].add(base)
                edges[m] |= {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods}
        edges[m].discard(m)
    return edges


def layers() -> tuple:
    """LAYERS with every registered analysis's module in the analyses layer."""
    from nca_interp import analysis

    return tuple((name, what, (*prefixes, *(s.module for s in analysis.specs())))
                 if name == "analyses" else (name, what, prefixes)
                 for name, what, prefixes in LAYERS)


def layer_of(module: str) -> int | None:
    """Index in `layers()` of the most specific prefix naming `module` (None: no layer does)."""
    best, length = None, -1
    for i, (_, _, prefixes) in enumerate(layers()):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > length:
                best, length = i, len(p)
    return best


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def violations(edges: dict[str, set[str]]) -> list[str]:
    """Every module no layer names, every upward import, every circle, in words."""
    out = [f"{m}: no layer in nca_interp/paper/architecture.py LAYERS names it"
           for m in edges if layer_of(m) is None]
    for m, targets in sorted(edges.items()):
        for t in sorted(targets):
            if None not in (layer_of(m), layer_of(t)) and layer_of(t) > layer_of(m):
                out.append(f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} "
                           f"({LAYERS[layer_of(t)][0]}): an upward arrow")
    out += [f"a circle of imports: {' -> '.join(c)}" for c in circles(edges)]
    return out


def markdown(edges: dict[str, set[str]]) -> str:
    lines = ["| layer | what it does | modules | imports from the layers below |",
             "|---|---|---|---|"]
    for i, (name, what, _) in enumerate(LAYERS):
        mods = sorted(m for m in edges if layer_of(m) == i)
        below = sorted({LAYERS[layer_of(t)][0] for m in mods for t in edges[m]
                        if layer_of(t) is not None and layer_of(t) < i})
        lines.append(f"| {i + 1}. {name} | {what} | {', '.join(f'`{m}`' for m in mods)} | "
                     f"{', '.join(below) or '-'} |")
    lines += ["", "Data flow:", "", *(f"{i + 1}. {s}" for i, s in enumerate(FLOW))]
    lines += ["", *analysis_table(), "", *task_table(), "", *claim_table()]
    return "\n".join(lines)


def claim_table() -> list[str]:
    """The claims judged on every setting (`nca_interp.paper.claims.CLAIMS`): a new claim is a
    function of a figures folder returning a `Claim`, in its family's module, and one row there."""
    import inspect

    from nca_interp.paper.claims import CLAIMS

    rows = ["Claims, as listed in `nca_interp.paper.claims.CLAIMS` (each judged by the rule book, "
            "`nca_interp/paper/rules.py`):", "", "| claim | function | reads | written by |",
            "|---|---|---|---|"]
    for fn, name, (report, command) in CLAIMS:
        where = Path(inspect.getfile(fn)).relative_to(ROOT)
        rows.append(f"| {name} | `{where}::{fn.__name__}` | `{report}` | `{command}` |")
    return rows


def analysis_table() -> list[str]:
    """The registered analyses (`nca_interp.analysis.register`): each a module keeping the
    `Analysis` contract, its command, the files it writes in a pipeline folder and the pipeline
    step that runs it."""
    import inspect

    from nca_interp import analysis
    from nca_interp.paper.layout import OWN_PLANS, OWN_STEPS

    rows = ["Analyses, as registered (`nca_interp.analysis.register`; each writes one report "
            "shape through `analysis.write`):", "",
            "| analysis | what it measures | file | config | command | files in a pipeline "
            "folder | pipeline |", "|---|---|---|---|---|---|---|"]
    for entry in analysis.specs():
        mod = entry.load()
        path = Path(inspect.getfile(mod))
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
        config = entry.config_class()
        files = ", ".join(f"`{f}`" for f in entry.outputs()) or "-"
        runs = (f"step `{OWN_STEPS[entry.name]}`" if entry.name in OWN_STEPS else
                f"`nca_interp.paper.reproduce:plan_{entry.name}`" if entry.name in OWN_PLANS
                else "the default plan (every student)")
        rows.append(f"| {entry.name} | {entry.what} | `{where}` | "
                    f"`{config.__name__ if config else '-'}` | `python -m {entry.module}` | "
                    f"{files} | {runs} |")
    return rows


def task_table() -> list[str]:
    """The registered tasks (`nca_interp.tasks.base.REGISTRY`), each with the file that
    registers it: what a new task adds is one more such file."""
    import inspect

    from nca_interp.tasks import REGISTRY

    rows = ["Tasks, as registered (`nca_interp.tasks.base.register`):", "",
            "| task | file | config | task class | context kinds |", "|---|---|---|---|---|"]
    for name in sorted(REGISTRY):
        e = REGISTRY[name]
        where = Path(inspect.getfile(e.config)).relative_to(ROOT)
        kinds = e.contexts.replace("|", ", ") + (f" ({e.note})" if e.note else "")
        rows.append(f"| {name} | `{where}` | `{e.config.__name__}` | `{e.task.__name__}` | "
                    f"{kinds} |")
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m nca_interp.paper.architecture",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help=f"regenerate the block in {PAGE}")
    args = ap.parse_args(argv)
    edges = imports()
    text = markdown(edges)
    print(text)
    for v in violations(edges):
        print("VIOLATION:", v)
    if args.write:
        BLOCK.write(ROOT / PAGE, text)


if __name__ == "__main__":
    from nca_interp.cli import started

    started()
    main()
