"""Where training moved the weights: parameter deltas against a common initial checkpoint.

    python -m nca_interp.param_delta --init runs/base runs/opd runs/nca

Per checkpoint and per layer x module (HF names: `model.layers.{i}.self_attn.k_proj`, ...):
  rel        ||W - W0||_F / ||W0||_F
  share      the module's fraction of the checkpoint's total squared delta
and totals per module type and per layer (root of summed squares, relative to ||W0||).
With two or more checkpoints (first = OPD, second = NCA by convention, or --pair A,B):
  cos        cosine between the two deltas per module
  specific   ||dB - dA|| / ||W0|| per module (the NCA-specific delta) and its share.
Checkpoints must match the initial one in architecture, parameter names and shapes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file

from nca_interp.assets import resolve
from nca_interp.checkpoint import read_run_config, verify_folder
from nca_interp.cli import parse_config, to_dict
from nca_interp.names import MODULES, module_of


def load_weights(path: str | Path) -> tuple[dict[str, torch.Tensor], dict]:
    path = verify_folder(path)
    tensors: dict[str, torch.Tensor] = {}
    for f in sorted(path.glob("*.safetensors")):
        if f.name != "trainer_state.safetensors":
            tensors.update(load_file(f))
    config = json.loads((path / "config.json").read_text())
    return {k: v.double() for k, v in tensors.items()}, config


def check_compatible(w0: dict, c0: dict, w1: dict, c1: dict, name0: str, name1: str) -> None:
    for key in ("model_type", "num_hidden_layers", "hidden_size", "vocab_size"):
        if c0.get(key) != c1.get(key):
            raise ValueError(f"{name1} and {name0} differ in {key} ({c1.get(key)} vs "
                             f"{c0.get(key)}); deltas need checkpoints of one architecture")
    missing, extra = sorted(set(w0) - set(w1)), sorted(set(w1) - set(w0))
    if missing or extra:
        raise ValueError(f"{name1} and {name0} have different parameters: missing "
                         f"{missing[:3]}, extra {extra[:3]}")
    for k in w0:
        if w0[k].shape != w1[k].shape:
            raise ValueError(f"{name1}: parameter {k} has shape {tuple(w1[k].shape)}, "
                             f"{name0} has {tuple(w0[k].shape)}")


def module_table(sq_delta: dict[str, float], sq_w0: dict[str, float]) -> dict:
    """Aggregate per-parameter squared norms into layer x module, per-module and per-layer."""
    cells: dict[tuple, list[float]] = {}
    for name in sq_delta:
        key = module_of(name)
        c = cells.setdefault(key, [0.0, 0.0])
        c[0] += sq_delta[name]
        c[1] += sq_w0[name]
    total = sum(sq_delta.values())
    rel = {f"{'all' if k[0] is None else k[0]}.{k[1]}": (d / w) ** 0.5 if w else 0.0
           for k, (d, w) in cells.items()}
    share = {f"{'all' if k[0] is None else k[0]}.{k[1]}": d / total if total else 0.0
             for k, (d, w) in cells.items()}
    by_module: dict[str, list[float]] = {}
    by_layer: dict[str, list[float]] = {}
    for (layer, module), (d, w) in cells.items():
        for table, key in ((by_module, module), (by_layer, "all" if layer is None else str(layer))):
            t = table.setdefault(key, [0.0, 0.0])
            t[0] += d
            t[1] += w
    agg = lambda t: {k: (d / w) ** 0.5 if w else 0.0 for k, (d, w) in t.items()}  # noqa: E731
    return {"rel": rel, "share": share, "per_module": agg(by_module), "per_layer": agg(by_layer),
            "global_rel": (total / sum(sq_w0.values())) ** 0.5, "global_sq": total}


def deltas(init: str, ckpts: list[str]) -> dict:
    w0, c0 = load_weights(init)
    sq_w0 = {k: float(v.pow(2).sum()) for k, v in w0.items()}
    out, flat = {}, {}
    for p in ckpts:
        w, c = load_weights(p)
        check_compatible(w0, c0, w, c, str(init), str(p))
        d = {k: w[k] - w0[k] for k in w0}
        flat[p] = d
        out[p] = module_table({k: float(v.pow(2).sum()) for k, v in d.items()}, sq_w0)
    return {"per_checkpoint": out, "n_layers": c0.get("num_hidden_layers"), "_deltas": flat,
            "_sq_w0": sq_w0}


def compare(da: dict[str, torch.Tensor], db: dict[str, torch.Tensor],
            sq_w0: dict[str, float]) -> dict:
    """Per-module cosine between two deltas, and where db - da (the specific delta) lies."""
    groups: dict[str, list[str]] = {}
    for name in da:
        layer, module = module_of(name)
        groups.setdefault(f"{'all' if layer is None else layer}.{module}", []).append(name)
    cos = {}
    for key, names in groups.items():
        a = torch.cat([da[n].flatten() for n in names])
        b = torch.cat([db[n].flatten() for n in names])
        den = a.norm() * b.norm()
        cos[key] = float(a @ b / den) if den > 0 else None
    specific = module_table({k: float((db[k] - da[k]).pow(2).sum()) for k in da}, sq_w0)
    a = torch.cat([v.flatten() for v in da.values()])
    b = torch.cat([v.flatten() for v in db.values()])
    return {"cos": cos, "global_cos": float(a @ b / (a.norm() * b.norm())) if a.norm() * b.norm()
            else None, "specific": specific}


def layer_module_grid(cells: dict[str, float | None], n_layers: int
                      ) -> tuple[list[list[float | None]], list[str], list[str]]:
    cols = [m for m in MODULES if any(k.endswith("." + m) for k in cells)]
    grid = [[cells.get(f"{i}.{m}") for m in cols] for i in range(n_layers)]
    return grid, [str(i) for i in range(n_layers)], cols


@dataclass
class ParamDeltaConfig:
    ckpt: list[str] = field(default_factory=list, metadata={
        "help": "checkpoints to compare (default: embedded Sokoban OPD and NCA)"})
    init: str | None = field(default=None, metadata={
        "help": "common initial checkpoint; default: the runs' --student"})
    pair: list[str] = field(default_factory=list, metadata={
        "help": "two of the checkpoints to compare (A,B: specific delta = dB - dA); "
                "default: the first two"})
    out: str = field(default="figures/demo/param_delta", metadata={"help": "output stem"})
    png: bool = field(default=False, metadata={"help": "also write PNGs (needs kaleido)"})


def format_table(per_ckpt: dict[str, dict], key: str) -> str:
    names = list(per_ckpt)
    rows = sorted({k for r in per_ckpt.values() for k in r[key]},
                  key=lambda k: (not k.isdigit(), int(k) if k.isdigit() else 0, k))
    w = max(14, *(len(Path(n).name) for n in names))
    lines = [f"{key:<14} " + " ".join(f"{Path(n).name:>{w}}" for n in names)]
    for k in rows:
        lines.append(f"{k:<14} " + " ".join(f"{per_ckpt[n][key].get(k, 0):>{w}.5f}"
                                            for n in names))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    from nca_interp.plots import heatmap, write_figure

    cfg = parse_config(ParamDeltaConfig, argv, __doc__, positional="ckpt")
    if not cfg.ckpt:
        from nca_interp.assets import embedded

        cfg.ckpt = [str(embedded("sokoban_opd")), str(embedded("sokoban_nca"))]
    init = cfg.init or resolve(read_run_config(cfg.ckpt[0]).get("student"))
    if not init:
        raise ValueError(f"{cfg.ckpt[0]} does not name its initial checkpoint; pass --init")
    result = deltas(init, cfg.ckpt)
    d, sq_w0 = result.pop("_deltas"), result.pop("_sq_w0")
    n_layers = result["n_layers"]
    per = result["per_checkpoint"]
    print(f"initial checkpoint: {init}")
    print(format_table(per, "per_module") + "\n")
    print(format_table(per, "per_layer") + "\n")
    out = Path(cfg.out)
    written = []
    for p, r in per.items():
        grid, rows, cols = layer_module_grid(r["rel"], n_layers)
        written += write_figure(heatmap(grid, rows, cols, f"||dW||/||W0||: {Path(p).name}"),
                                f"{out}_{Path(p).name}", png=cfg.png)
    report = {"config": to_dict(cfg), "init": init, **result}
    pair = cfg.pair or cfg.ckpt[:2]
    if len(pair) == 2:
        a, b = pair
        cmp = compare(d[a], d[b], sq_w0)
        report["comparison"] = {"a": a, "b": b, **cmp}
        grid, rows, cols = layer_module_grid(cmp["cos"], n_layers)
        written += write_figure(heatmap(grid, rows, cols, f"cos(d {Path(a).name}, d "
                                        f"{Path(b).name}) per module", signed=True),
                                f"{out}_cos", png=cfg.png)
        grid, rows, cols = layer_module_grid(cmp["specific"]["rel"], n_layers)
        written += write_figure(heatmap(grid, rows, cols, f"specific delta ||d{Path(b).name} - "
                                        f"d{Path(a).name}|| / ||W0||"),
                                f"{out}_specific", png=cfg.png)
        top = sorted(cmp["specific"]["share"].items(), key=lambda kv: -kv[1])[:5]
        gc = cmp["global_cos"]
        print(f"cos(d{Path(a).name}, d{Path(b).name}) global: "
              f"{'undefined (a delta is zero)' if gc is None else f'{gc:.4f}'}")
        print("specific delta concentrates in: " +
              ", ".join(f"{k} ({v:.1%})" for k, v in top))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    print("wrote", out.with_suffix(".json"), *written)
    return report


if __name__ == "__main__":
    main()
