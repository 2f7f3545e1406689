"""Memory of each analysis against model size, fitted to the measured `analysis_scale` runs and
extrapolated to an 8B model: every number here comes from bench/results/analysis_scale_*.json.

    python -m bench.scale_model            # print the table
    python -m bench.scale_model --write    # also write bench/results/scale_model.txt

Per analysis, peak resident memory = a + s * (weights in GB), a straight line through the two
measured shapes (Qwen3-0.6B and Qwen3-1.7B, bf16, random init). Two points fix a line and
leave no residual, so the 8B column is an extrapolation, not a measurement; the design's
expectation (what the code holds at once) stands beside the fitted slope: param_delta streams
(slope 0), layer_sim holds one model (slope 1), grad_align the student, the teacher and a
gradient (slope 3).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

RESULTS = Path("bench/results")
SHAPES = ("qwen3-0.6b", "qwen3-1.7b")
ROWS = {"param_delta init + 2": ("param_delta", 0), "layer_sim 3 + random-init": ("layer_sim", 1),
        "grad_align batch 4": ("grad_align", 3)}
TARGET = ("Qwen3-8B", 8.19e9)  # parameters of Qwen3-8B (its model card: 8.2B)
BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def render(results: Path = RESULTS) -> str:
    runs = [json.loads((results / f"analysis_scale_{s}.json").read_text()) for s in SHAPES]
    gb = [r["parameters"] * BYTES[r["dtype"]] / 1e9 for r in runs]
    target_gb = TARGET[1] * BYTES[runs[0]["dtype"]] / 1e9
    sources = ", ".join(f"analysis_scale_{s}.json" for s in SHAPES)
    lines = [f"# python -m bench.scale_model --write (from {sources})",
             "weights: " + ", ".join(f"{s} {r['parameters'] / 1e9:.2f}B parameters = {g:.2f} GB "
                                     f"{r['dtype']}" for s, r, g in zip(SHAPES, runs, gb)),
             f"{'analysis':<12} {'peak GB ' + SHAPES[0]:>20} {'peak GB ' + SHAPES[1]:>20} "
             f"{'fitted a + s*GB':>18} {'design s':>9} {TARGET[0] + ' GB (extrapolated)':>28}"]
    for row, (name, design) in ROWS.items():
        y = [r["rows"][row]["peak_rss_gb"] for r in runs]
        if design == 0:  # streaming: no slope to fit; the larger measurement bounds it
            fit, pred = f"<= {max(y):.2f} flat", f"<= {max(y):.2f}"
        else:
            s = (y[1] - y[0]) / (gb[1] - gb[0])
            a = y[0] - s * gb[0]
            fit, pred = f"{a:.2f} + {s:.2f}*GB", f"{a + s * target_gb:.1f}"
        lines.append(f"{name:<12} {y[0]:>20.2f} {y[1]:>20.2f} {fit:>18} {design:>9} {pred:>28}")
    lines.append(f"{TARGET[0]}: {TARGET[1] / 1e9:.2f}B parameters = {target_gb:.1f} GB of weights")
    return "\n".join(lines) + "\n"


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    text = render()
    print(text, end="")
    if args.write:
        (RESULTS / "scale_model.txt").write_text(text)
    return text


if __name__ == "__main__":
    main()
