"""Where a pipeline folder keeps each analysis's JSON (figures/<setting>/): the one place the
file names are decided, read by the pipeline that writes them and the pages that read them."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["ANALYSIS_FILES", "CONTEXT_CONTROL", "CONTEXT_RETURN", "GRAD_ALIGN_OPD", "HARM_DRIFT",
           "LAYER_SIM", "LAYER_SIM_STAGES", "PARAM_DELTA", "PATCHING", "TEACHER_GLOB",
           "TRAJECTORY", "analysis_files", "grad_files", "teacher_file"]

# the file names of a pipeline folder, decided here once (the pages and claims read these)
CONTEXT_RETURN = "context_return.json"
CONTEXT_CONTROL = "context_control.json"
TEACHER_GLOB = "teacher_*.json"
LAYER_SIM = "layer_sim.json"
PARAM_DELTA = "param_delta.json"
HARM_DRIFT = "harm_drift.json"
PATCHING = "patching.json"
TRAJECTORY = "trajectory.json"
GRAD_ALIGN_OPD = "grad_align_opd.json"


def teacher_file(kind: str) -> str:
    """The teacher's evaluation in context `kind`."""
    return f"teacher_{kind}.json"


# layer_sim position sets: y's tokens, the positions producing y (what the losses train), and
# x's tokens (untouched by the losses: the control)
LAYER_SIM_STAGES = {"response": "layer_sim", "generating": "layer_sim_generating",
                    "prompt": "layer_sim_prompt"}


def grad_files(figs: Path) -> list[tuple[str, Path]]:
    """(label, JSON) of each grad_align run: seed 0 of OPD and NCA, then further seeds
    (grad_align_<method>_s<seed>.json), OPD's then NCA's, in seed order."""
    out = [(m, figs / f"grad_align_{m}.json") for m in ("opd", "nca")]
    for method in ("opd", "nca"):
        seeds = sorted((int(m.group(1)), f) for f in figs.glob(f"grad_align_{method}_s*.json")
                       if (m := re.fullmatch(rf"grad_align_{method}_s(\d+)\.json", f.name)))
        out += [(f"{method} s{s}", f) for s, f in seeds]
    return [(label, f) for label, f in out if f.exists()]


# the JSON files of a pipeline folder each analysis writes (their figures: analysis.figure_stem)
ANALYSIS_FILES = {
    "evaluate": (TEACHER_GLOB, CONTEXT_RETURN, CONTEXT_CONTROL),
    "trajectory": (TRAJECTORY, "trajectory_*steps.json"),
    "layer_sim": tuple(f"{stem}.json" for stem in LAYER_SIM_STAGES.values()),
    "grad_align": (GRAD_ALIGN_OPD, "grad_align_nca.json", "grad_align_*_s*.json"),
    "param_delta": (PARAM_DELTA,),
    "patching": (PATCHING,),
}


def analysis_files(figs: Path) -> list[tuple[str, Path]]:
    """(analysis, JSON) of every analysis report in a pipeline folder, in ANALYSIS_FILES's
    order."""
    out: list[tuple[str, Path]] = []
    for name, patterns in ANALYSIS_FILES.items():
        for pattern in patterns:
            out += [(name, f) for f in sorted(figs.glob(pattern)) if (name, f) not in out]
    return out
