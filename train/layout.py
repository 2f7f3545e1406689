"""Where a pipeline folder keeps each analysis's JSON (figures/<setting>/): the one place the
file names are decided, read by the pipeline that writes them and the pages that read them."""

from __future__ import annotations

import re
from pathlib import Path

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
