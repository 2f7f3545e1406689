"""Causal localisation of the context's effect: activation patching, head ablation of context
reading (heads chosen on one half of the cases, judged on the other), and the logit lens of
both views.

    python -m nca_interp.patching                                # embedded Sokoban OPD
    python -m nca_interp.patching runs/sysprompt_kb0_opd_s0 --out figures/sysprompt_kb0/patching_opd
    python -m nca_interp.patching runs/facts_opd_s0 --kind help --scope groups

The package is split by concern: `cases` finds and aligns the cases (harm: right without c,
wrong with it; help: wrong without c, right with it; controls: right both ways), `interventions`
holds the hooks and sweeps, `heads` the held-out head selection and its random-head nulls;
`command` runs them and writes the report. Numbers are normalised per case: 0 = the running view
unchanged, 1 = the other view's logit difference at the deciding position. forward = the
no-context run's activations written into the context run, reverse = the other way. Intervals:
95% bootstrap over cases, or over their units where several cases share one (a fact asked in
several phrasings: its cases are resampled together, and kept in one half by `heads`).
TransformerLens 4's `transformer_lens.patching` helpers run clean and corrupted prompts of one
length without attention masks; our two views differ by the context prefix and are batched
with left padding, which needs masks, so the sweeps are our own loops over hooks. A hooked run
reruns only the blocks from the hooked layer on (`rerun`: the clean run kept block by block,
checked against the full forward), about half the cost of a full forward on a 30-layer model.
"""

import importlib

from nca_interp.configs import PatchingConfig  # no torch: the command parses with it first

__all__ = ["ABLATE_NOTE", "BY", "DEMO", "DIRECTIONS", "FLIPPED", "PatchingConfig", "ablate_of",
           "arrays_of", "execute", "figures", "format_report", "kind_of", "main", "patch",
           "report_arrays", "run", "show"]

# The package's names, each served from the module that defines it when first asked
# (`patching.run`, `from nca_interp.patching import main`): importing the package imports no
# torch, so `python -m nca_interp.patching --help` (which imports it before its `__main__`)
# answers at once. A test that replaces a function `command` calls replaces it in `command`.
LAZY_NAMES = {
    "ABLATE_NOTE": "command", "DEMO": "command", "DEMO_SCOPE": "command",
    "DIRECTIONS": "command", "FLIPPED": "command", "ablate_of": "command",
    "direction_record": "command", "execute": "command", "figures": "command",
    "format_report": "command", "kind_of": "command", "main": "command", "run": "command",
    "patch": "command", "arrays_of": "command", "report_arrays": "command",
    "measure": "command", "CORE_OPTIONS": "command",
    "run_checkpoint": "command", "show": "command", "sweeps": "command",
    "BY": "attribution", "METHODS": "attribution",
    "ABLATE": "cases", "KINDS": "cases", "Cases": "cases", "build_cases": "cases",
    "find_cases": "cases", "score": "cases",
    "GROUPS": "interventions", "SCOPES": "interventions",
    "ablate_context_hook": "interventions", "ablation": "interventions",
    "cache_of": "interventions", "greedy": "interventions", "last_logits": "interventions",
    "logit_diff": "interventions", "logit_lens": "interventions",
    "normalised": "interventions", "patch_hook": "interventions",
    "pattern_edits_reach_logits": "interventions", "sweep": "interventions",
}


def __getattr__(name: str):
    if name not in LAZY_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{LAZY_NAMES[name]}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *LAZY_NAMES})
