"""Where a pipeline folder keeps each analysis's JSON (figures/<setting>/), read by the pipeline
that writes them and the pages that read them: each analysis's names come from its registration
(`nca_interp.analysis.AnalysisSpec.files`), the one place they are decided."""

from __future__ import annotations

import re
from pathlib import Path

from nca_interp import analysis

__all__ = ["CONTEXT_CONTROL", "CONTEXT_RETURN", "GRAD_ALIGN_OPD", "HARM_DRIFT",
           "LAYER_SIM", "LENS", "LAYER_SIM_STAGES", "OWN_PLANS", "OWN_STEPS", "PARAM_DELTA",
           "PATCHING", "TEACHER_GLOB", "TRAJECTORY", "analysis_files", "grad_files",
           "grad_stem", "teacher_file"]

# How the pipeline runs each registered analysis (the registry itself names no pipeline):
# these in a step of their own, these by a plan of its own (`reproduce.plan_<name>`, in
# `reproduce.PLANS`), and any other by `reproduce.default_plan`
OWN_STEPS = {"evaluate": "context_return", "trajectory": "over_training"}
OWN_PLANS = ("layer_sim", "grad_align", "param_delta", "patching", "lens")


def _file(name: str, role: str) -> str:
    """A built-in analysis's file (registered when nca_interp.analysis is imported: reading it
    imports no plug-in, so a bad NCA_INTERP_ANALYSES is named by the command, not at import)."""
    return analysis.REGISTRY[name].file(role)


# the file names of a pipeline folder: each analysis's are decided in its registration
# (nca_interp.analysis), the dose step's here; the pages and claims read these
CONTEXT_RETURN = _file("evaluate", "context_return")
CONTEXT_CONTROL = _file("evaluate", "context_control")
TEACHER_GLOB = _file("evaluate", "teacher")
LAYER_SIM = _file("layer_sim", "response")
PARAM_DELTA = _file("param_delta", "param_delta")
PATCHING = _file("patching", "patching")
TRAJECTORY = _file("trajectory", "trajectory")
GRAD_ALIGN_OPD = _file("grad_align", "opd")
LENS = _file("lens", "lens")
HARM_DRIFT = "harm_drift.json"


def teacher_file(kind: str) -> str:
    """The teacher's evaluation in context `kind`."""
    return TEACHER_GLOB.replace("*", kind)


# layer_sim position sets: y's tokens, the positions producing y (what the losses train), and
# x's tokens (untouched by the losses: the control)
LAYER_SIM_STAGES = {at: name.removesuffix(".json")
                    for at, name in analysis.REGISTRY["layer_sim"].files.items()}


def grad_stem(method: str, seed: int | None = None) -> str:
    """The file stem of a grad_align run: grad_align_<method> for the first seed, with _s<seed>
    for each further one."""
    stem = _file("grad_align", method).removesuffix(".json")
    return stem if seed is None else f"{stem}_s{seed}"


def grad_files(figs: Path) -> list[tuple[str, Path]]:
    """(label, JSON) of each grad_align run: seed 0 of OPD and NCA, then further seeds
    (grad_align_<method>_s<seed>.json), OPD's then NCA's, in seed order."""
    out = [(m, figs / _file("grad_align", m)) for m in ("opd", "nca")]
    for method in ("opd", "nca"):
        stem = grad_stem(method)
        seeds = sorted((int(m.group(1)), f) for f in figs.glob(f"{stem}_s*.json")
                       if (m := re.fullmatch(rf"{stem}_s(\d+)\.json", f.name)))
        out += [(f"{method} s{s}", f) for s, f in seeds]
    return [(label, f) for label, f in out if f.exists()]


def analysis_files(figs: str | Path) -> list[tuple[str, Path]]:
    """(analysis, JSON) of every analysis report in a pipeline folder, in the registry's order
    (each analysis's files: `AnalysisSpec.outputs`; their figures: analysis.figure_stem)."""
    figs, out = Path(figs), []
    for entry in analysis.specs():
        for pattern in entry.outputs():
            out += [(entry.name, f) for f in sorted(figs.glob(pattern))
                    if (entry.name, f) not in out]
    return out
