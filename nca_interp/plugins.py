"""Modules registered from outside the package: one loader for the two registries (tasks and
analyses) that accept plug-ins.

A plug-in is a module whose import registers something (a task, an analysis). It is named by an
entry point of an installed package (`[project.entry-points."nca_interp.tasks"] toy =
"toy_task"`) or by an environment variable holding module names, comma-separated
(`NCA_INTERP_TASKS=toy_task`)."""

from __future__ import annotations

import importlib
import os
from importlib.metadata import entry_points

from nca_interp.errors import UsageError

__all__ = ["import_plugins", "plugin_modules"]


def plugin_modules(group: str, env: str) -> list[tuple[str, str]]:
    """(where it was named, module name) for every plug-in of `group`: the entry points first,
    then the modules `env` names, in its order; blanks between commas are skipped."""
    named = [(f"entry point {ep.name}", ep.value.partition(":")[0])
             for ep in entry_points(group=group)]
    named += [(env, m.strip()) for m in os.environ.get(env, "").split(",") if m.strip()]
    return named


def import_plugins(group: str, env: str, kind: str) -> list[str]:
    """Import every plug-in module of `group` and `env` (an imported module is not imported
    again) and return their names. A module that cannot be imported is a UsageError naming
    where it was named, the `kind` of module ("task", "analysis") and what to do."""
    done = []
    for where, name in plugin_modules(group, env):
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise UsageError(f"{where} names the {kind} module {name}, which cannot be "
                             f"imported ({e}); put it on the path (PYTHONPATH) or drop it "
                             "from there") from e
        done.append(name)
    return done
