"""Markdown tables for the README, printed from a pipeline's JSON outputs (numbers are never
typed by hand).

    python -m train.report --task sokoban
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from nca_interp.evaluate import label, metric_of


def fmt_range(r: dict) -> str:
    return f"{r['mean']:.3f} [{r['min']:.3f}, {r['max']:.3f}]"


def metric(figs: Path) -> str:
    """`win` (games) or `accuracy` (QA), as the pipeline's evaluations recorded it."""
    for f in [figs / "context_return.json", *sorted(figs.glob("teacher_*.json"))]:
        if f.exists():
            return metric_of(json.loads(f.read_text())["reports"])
    return "win"


def teacher(figs: Path) -> str:
    m = "accuracy" if metric(figs) == "accuracy" else "win"
    rows = [f"| context kind | {m} without c | {m} with c | harm | help | regime |",
            "|---|---|---|---|---|---|"]
    for f in sorted(figs.glob("teacher_*.json")):
        r = next(iter(json.loads(f.read_text())["reports"].values()))
        cells = [with_ci(r, k) for k in ("win_no_c", "win_c", "harm", "help")]
        rows.append(f"| {f.stem.split('_', 1)[1]} | " + " | ".join(cells) +
                    f" | {r['regime']} |")
    return "\n".join(rows)


def with_ci(r: dict, k: str) -> str:
    v, ci = r.get(k), r["ci95"].get(k, [None, None])
    if v is None:
        return "-"
    return f"{v:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci[0] is not None else "")


def context_return(figs: Path) -> str:
    s = json.loads((figs / "context_return_summary.json").read_text())
    keys = ["win_no_c", "win_c", "harm", "help", "both", "rel_len_both", "rel_len"]
    rows = ["| model | " + " | ".join(label(k, metric(figs)) for k in keys) +
            " | regime per seed |",
            "|---" * (len(keys) + 2) + "|"]
    for method, r in s.items():
        rows.append(f"| {method} | " + " | ".join(fmt_range(r[k]) if r.get(k) else "-"
                                                  for k in keys) +
                    f" | {' '.join(r['regimes'])} |")
    return "\n".join(rows)


def per_seed(figs: Path) -> str:
    rep = json.loads((figs / "context_return.json").read_text())["reports"]
    keys = ["win_no_c", "win_c", "harm", "help", "delta_c", "rel_len_both"]
    rows = ["| run | " + " | ".join(label(k, metric(figs)) for k in keys) +
            " | regime | resampled unit |", "|---" * (len(keys) + 3) + "|"]
    for name, r in rep.items():
        cells = [with_ci(r, k) for k in keys]
        unit = f"{r.get('n_units', r['n'])} {r.get('unit', 'level')}s" + \
            f" ({r['n_right_no_c']} right without c)" if "n_right_no_c" in r else ""
        rows.append(f"| {name} | " + " | ".join(cells) + f" | {r['regime']} | {unit} |")
    return "\n".join(rows)


def layer_sim(figs: Path, name: str = "layer_sim") -> str:
    rep = json.loads((figs / f"{name}.json").read_text())
    layers = rep["layers"][1:]
    out = []
    for metric in ("cos", "cos_centred", "cka"):
        rows = [f"| {metric} | " + " | ".join(f"L{lab}" for lab in layers) + " |",
                "|---" * (len(layers) + 1) + "|"]
        groups: dict[str, list[list[float]]] = {}
        for name, r in rep["results"].items():
            key = name.rsplit("_s", 1)[0] if name[-1].isdigit() and "_s" in name else name
            groups.setdefault(key, []).append(r[metric][1:])
        for key, vals in groups.items():
            v = np.array(vals)
            cells = [f"{m:.4f}" + (f" [{lo:.4f}, {hi:.4f}]" if len(vals) > 1 else "")
                     for m, lo, hi in zip(v.mean(0), v.min(0), v.max(0))]
            rows.append(f"| {key} | " + " | ".join(cells) + " |")
        out.append("\n".join(rows))
    return "\n\n".join(out)


def grad_align(figs: Path) -> str:
    def ang(v):
        return "-" if v is None else f"{v:.0f}°"

    rows = ["| run | step | prompts | opd~ctx | opd~nca | nca~ctx | floor opd | floor ctx | "
            "floor nca | \\|ctx\\|/\\|opd\\| |", "|---" * 10 + "|"]
    for method in ("opd", "nca"):
        rep = json.loads((figs / f"grad_align_{method}.json").read_text())
        steps = rep.get("steps") or [None] * len(rep["results"])
        for step, r in zip(steps, rep["results"].values()):
            g = r["global"]
            if "angle_xfit_deg" not in g:
                raise ValueError(f"{figs}/grad_align_{method}.json predates noise floors; "
                                 "re-run the grad_align stage")
            x, f = g["angle_xfit_deg"], g["self_angle_deg"]
            ratio = g["norm_ratio"].get("ctx/opd")
            rows.append(f"| {method} | {step} | {rep['config']['batch']} | {ang(x['opd~ctx'])} | "
                        f"{ang(x['opd~nca'])} | {ang(x['nca~ctx'])} | {ang(f['opd'])} | "
                        f"{ang(f['ctx'])} | {ang(f['nca'])} | "
                        f"{'-' if ratio is None else f'{ratio:.2f}'} |")
    rows.append("\nAngles are cross-fitted (each term on one half batch against the other term "
                "on the other half); floor: the angle between a term's own gradients on the two "
                "halves. '-': a term within its sampling noise (snr <= 1) gets no angle.")
    return "\n".join(rows)


def param_delta(figs: Path) -> str:
    rep = json.loads((figs / "param_delta.json").read_text())
    out = []
    per = rep["per_checkpoint"]
    modules = sorted(next(iter(per.values()))["per_module"])
    rows = ["| module | " + " | ".join(Path(p).name for p in per) + " |",
            "|---" * (len(per) + 1) + "|"]
    for m in modules:
        rows.append(f"| {m} | " + " | ".join(f"{r['per_module'][m]:.5f}" for r in per.values())
                    + " |")
    out.append("Relative delta per module type (||dW|| / ||W0||):\n\n" + "\n".join(rows))
    layers = sorted(next(iter(per.values()))["per_layer"], key=lambda k: (k == "all", k))
    rows = ["| layer | " + " | ".join(Path(p).name for p in per) + " |",
            "|---" * (len(per) + 1) + "|"]
    for layer in layers:
        rows.append(f"| {layer} | " + " | ".join(f"{r['per_layer'][layer]:.5f}"
                                                 for r in per.values()) + " |")
    out.append("Relative delta per layer:\n\n" + "\n".join(rows))
    for p, r in per.items():
        top = sorted(r["share"].items(), key=lambda kv: -kv[1])[:5]
        out.append(f"Largest shares of the squared delta, {Path(p).name}: " +
                   ", ".join(f"{k} {v:.1%}" for k, v in top))
    cmp = rep["comparison"]
    top = sorted(cmp["specific"]["share"].items(), key=lambda kv: -kv[1])[:5]
    out.append(f"cos(dOPD, dNCA) over all parameters: {cmp['global_cos']:.3f}; "
               "NCA-specific delta (dNCA - dOPD) largest shares: " +
               ", ".join(f"{k} {v:.1%}" for k, v in top))
    return "\n\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="sokoban")
    ap.add_argument("--figures", default="figures")
    args = ap.parse_args(argv)
    figs = Path(args.figures) / args.task
    manifest = json.loads((figs / "manifest.json").read_text())
    print(f"<!-- python -m train.report --task {args.task} -->")
    if "pipeline_seconds" in manifest:
        print(f"Pipeline wall time: {manifest['pipeline_seconds'] / 60:.1f} min "
              f"(seeds {manifest['config']['seeds']}; {manifest.get('note', 'all stages')}).\n")
    first = next(iter(sorted(figs.glob("teacher_*.json"))), None)
    n = next(iter(json.loads(first.read_text())["reports"].values()))["n"] if first else "?"
    unit = "questions" if metric(figs) == "accuracy" else "levels"
    print(f"#### Teacher, {n} held-out {unit}, greedy\n\n{teacher(figs)}\n")
    if not (figs / "context_return_summary.json").exists():
        return
    for title, fn in (("Context return (mean [min, max] over seeds)", context_return),
                      ("Per run, 95% paired-bootstrap intervals", per_seed),
                      ("Layer similarity with vs without context", layer_sim),
                      ("Gradient alignment (seed 0, over training)", grad_align),
                      ("Parameter deltas (seed 0)", param_delta)):
        print(f"#### {title}\n\n{fn(figs)}\n")
        if fn is layer_sim and (figs / "layer_sim_generating.json").exists():
            print("#### Layer similarity at the positions generating the response "
                  f"(`--at generating`)\n\n{layer_sim(figs, 'layer_sim_generating')}\n")


if __name__ == "__main__":
    main()
