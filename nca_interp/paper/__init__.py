"""The paper's pipeline: from nothing to a published setting (runs, reports, claims, pages).

    python -m nca_interp.paper.reproduce --task sokoban      # one setting, end to end
    python -m nca_interp.paper.report --write                # its page from the reports
    python -m nca_interp.paper.claims                        # every verdict, judged again

`settings` reads `settings.toml` (every preset and published setting) when first asked, never
at import; `layout` decides the file names of a setting's folder; `rules` is the rule book the
`claims` are judged by; `report`, `summary`, `referee`, `sweep` and `paper` write the pages.
Training itself is `train/` (`train.sft`, `train.distill`, `train.trl_distill`); the analyses
are `nca_interp.<analysis>`.

Its pipeline runs from a clone of the repository, at its root: it imports the clone's `train/`
folder by that name (`require_clone`), and the library's wheel leaves the package out. Its pages
and claims read any figures folder.
"""

import importlib.util
import sys

__all__ = ["require_clone"]


def require_clone() -> None:
    """Stop in one line (status 2) where the clone's `train/` folder cannot be imported: what
    the modules that train (`reproduce`, `options`, `size_control`) call before they import it,
    so that a command run from elsewhere says why instead of a ModuleNotFoundError traceback."""
    try:
        found = importlib.util.find_spec("train.options") is not None
    except ImportError:  # a `train` module that is not the clone's folder
        found = False
    if not found:
        sys.stderr.write("error: the paper's pipeline runs from a clone of the repository, at "
                         "its root (it imports the clone's train/ folder): cd to the clone, or "
                         "run the library's own commands (python -m nca_interp.<analysis>) "
                         "from anywhere\n")
        raise SystemExit(2)
