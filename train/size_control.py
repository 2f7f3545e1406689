"""The size-matched OPD control of a setting: does NCA's update differ from OPD's in
direction, or only because it is larger?

    python -m train.size_control --setting sysprompt_kb0 --seeds 0,1,2,3

A cosine is blind to scale, but a trajectory that runs further curves further: an OPD update
as large as NCA's might point elsewhere than a shorter OPD update of the same seed. So:
1. param_delta over the setting's OPD and NCA students gives their raw update sizes ||dW||;
2. OPD students are trained again with lr x (NCA's mean size / OPD's mean size), every other
   flag as the setting's own distillation command (read from its manifest), into
   RUNS/<setting>_opdsized_s<seed>: OPD run to NCA's total movement;
3. param_delta over OPD, size-matched OPD and NCA of every seed writes
   FIGURES/<setting>_size/param_delta.json (and a manifest of each stage's command),
which `train.claims.size_matched` judges: NCA's update differs in direction when it stays
apart from the size-matched OPD's as much as from OPD's, beyond the seed-to-seed cosines.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from nca_interp import param_delta
from nca_interp.cli import RunError, entry, parse_config
from train.reproduce import Manifest, record_training_time, run_parallel, stage

SUFFIX = "opdsized"


@dataclass
class SizeControlConfig:
    setting: str = field(default="sysprompt_kb0", metadata={
        "help": "a setting whose OPD and NCA students are trained (figures/<setting>/ holds "
                "its manifest)"})
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3], metadata={
        "help": "seeds of the setting to match (each needs its OPD and NCA run)"})
    runs: str = field(default="runs", metadata={"help": "where run directories are"})
    figures: str = field(default="figures", metadata={"help": "where figures go"})
    threads: int = field(default=2, metadata={"help": "torch threads"})
    jobs: int = field(default=2, metadata={"help": "training runs in parallel"})


def distill_command(manifest: dict, run: Path) -> list[str]:
    """The train.distill argv that trained `run` (its final checkpoint's manifest entry)."""
    for path, entry_ in manifest["files"].items():
        if Path(path).parent.parent == run and entry_["command"].startswith(
                "python -m train.distill"):
            return shlex.split(entry_["command"])[3:]
    raise RunError(f"{run} has no train.distill command in the setting's manifest; train it "
                   "with python -m train.reproduce first")


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def with_flag(argv: list[str], name: str, value: str) -> list[str]:
    out = list(argv)
    out[out.index(name) + 1] = value
    return out


def sizes(report: dict) -> dict[str, list[float]]:
    """Raw update sizes ||dW|| (root of summed squares over every tensor) per method."""
    out: dict[str, list[float]] = {"opd": [], "nca": [], SUFFIX: []}
    for path, r in report["per_checkpoint"].items():
        m = re.search(rf"_({SUFFIX}|opd|nca)_s\d+$", Path(path).name)
        if m:
            out[m.group(1)].append(r["global_sq"] ** 0.5)
    return out


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_config(SizeControlConfig, argv, __doc__)
    runs, src = Path(cfg.runs), Path(cfg.figures) / cfg.setting
    if not (src / "manifest.json").exists():
        raise RunError(f"{src}/manifest.json is missing: run the setting's pipeline first")
    made = json.loads((src / "manifest.json").read_text())
    pairs = {s: (runs / f"{cfg.setting}_opd_s{s}", runs / f"{cfg.setting}_nca_s{s}")
             for s in cfg.seeds}
    commands = {s: distill_command(made, opd) for s, (opd, _) in pairs.items()}
    init = flag(commands[cfg.seeds[0]], "--student")
    figs = Path(cfg.figures) / f"{cfg.setting}_size"
    figs.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(figs / "manifest.json", cfg)
    t0 = time.time()
    before = figs / "param_delta_before.json"
    both = [str(p) for s in cfg.seeds for p in pairs[s]]
    finals = [Path(p) / "checkpoints" / f"step_{int(flag(commands[cfg.seeds[0]], '--steps')):06d}"
              for p in both]
    stage("param_delta of OPD and NCA", manifest, [before], param_delta.execute,
          param_delta.ParamDeltaConfig(ckpt=both, init=init, out=str(before.with_suffix(""))),
          inputs=finals)
    size = sizes(json.loads(before.read_text()))
    ratio = sum(size["nca"]) / len(size["nca"]) / (sum(size["opd"]) / len(size["opd"]))
    pending, sized = [], {}
    for s, argv0 in commands.items():
        out = runs / f"{cfg.setting}_{SUFFIX}_s{s}"
        args = with_flag(with_flag(argv0, "--out", str(out)), "--lr",
                         f"{float(flag(argv0, '--lr')) * ratio:.4g}")
        args = with_flag(args, "--threads", str(max(1, cfg.threads // cfg.jobs)))
        final = out / "checkpoints" / f"step_{int(flag(args, '--steps')):06d}"
        if final.exists():
            print(f"[skip] size-matched OPD seed {s}: outputs exist")
        else:
            pending.append((f"size-matched OPD seed {s}", final, out, args))
        sized[s] = (out, final, args)
    run_parallel(pending, cfg.jobs, manifest)
    for out, final, args in sized.values():
        record_training_time(manifest, out, final, args, "train.distill")
    three = [str(p) for s in cfg.seeds for p in (*pairs[s], sized[s][0])]
    stage("param_delta of OPD, size-matched OPD and NCA", manifest, [figs / "param_delta.json"],
          param_delta.execute,
          param_delta.ParamDeltaConfig(ckpt=three, init=init, out=str(figs / "param_delta")),
          inputs=[*finals, *(f for _, f, _ in sized.values())])
    after = sizes(json.loads((figs / "param_delta.json").read_text()))
    manifest.data["size_ratio_nca_over_opd"] = ratio
    manifest.data["pipeline_seconds"] = round(manifest.data.get("pipeline_seconds", 0)
                                              + time.time() - t0, 1)
    manifest.path.write_text(json.dumps(manifest.data, indent=1))
    print(f"NCA / OPD update size {ratio:.3f}; OPD trained at lr x {ratio:.3f}: sizes "
          + ", ".join(f"{k} {sum(v) / len(v):.4g}" for k, v in after.items() if v))
    return {"ratio": ratio, "sizes": after}


if __name__ == "__main__":
    sys.exit(entry(main))
