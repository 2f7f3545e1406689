"""The size-matched OPD control of a setting: does NCA's update differ from OPD's in
direction, or only because it is larger?

    python -m nca_interp.paper.size_control --setting sysprompt_kb0 --seeds 0,1,2,3

A cosine is blind to scale, but a trajectory that runs further curves further: an OPD update
as large as NCA's might point elsewhere than a shorter OPD update of the same seed. So:
1. param_delta over the setting's OPD and NCA students gives their raw update sizes ||dW||;
2. OPD students are trained again with lr x (NCA's mean size / OPD's mean size) ** (1 /
   --elasticity), every other flag as the setting's own distillation command (read from its
   manifest), into RUNS/<setting>_opdsized_s<seed>: OPD run to NCA's total movement;
3. an update does not grow one to one with Adam's lr (a larger lr converges sooner), so when
   the sized OPD's mean size is not within `rules.SIZE_MATCH` of NCA's, a further round
   trains RUNS/<setting>_opdsized<r>_s<seed> at the lr the measured size-vs-lr elasticity
   (d log size / d log lr between the last two rounds) predicts, up to --rounds rounds;
4. param_delta over OPD, the last round's sized OPD and NCA of every seed writes
   FIGURES/<setting>_size/param_delta.json (the manifest records each stage's command and
   each round's lr multiplier and sizes),
which `nca_interp.paper.claims.size_matched` judges: NCA's update differs in direction when it stays
apart from the size-matched OPD's as much as from OPD's, beyond the seed-to-seed cosines.
"""

from __future__ import annotations

if __name__ == "__main__":  # Ctrl-C while the imports below run: one line, not a traceback
    from nca_interp.cli import quiet_interrupt

    quiet_interrupt()

import dataclasses
import json
import math
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from nca_interp import analysis, param_delta
from nca_interp.checkpoint import read_run_config
from nca_interp.cli import entry, parse_config
from nca_interp.errors import RunError, UsageError
from nca_interp.fsio import read_json, write_text
from nca_interp.identity import roster
from nca_interp.paper.layout import PARAM_DELTA
from nca_interp.paper.reproduce import (
    Manifest,
    check_manifest,
    record_training_time,
    run_parallel,
    stage,
)
from nca_interp.paper.rules import SIZE_MATCH
from nca_interp.reports import ParamDeltaReport

__all__ = ["SizeControlConfig", "main"]

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
    rounds: int = field(default=3, metadata={
        "help": "at most this many training rounds; each after the first takes its lr from the "
                "size-vs-lr elasticity the earlier rounds measured"})
    task_options: list[str] | None = field(default=None, metadata={
        "help": "code the setting's recorded train.distill command names (its scorer=FILE.py:fn), "
                "given again here so that it runs: a manifest is data, never code"})
    elasticity: float = field(default=1.0, metadata={
        "help": "the first round's guess of d log(update size) / d log(lr) (1: size grows with "
                "lr; sysprompt_kb0 measured 0.44)"})

    def __post_init__(self):

        if self.rounds < 1:
            raise UsageError(f"--rounds {self.rounds}: give at least 1 training round")
        if not 0.05 <= self.elasticity <= 2:
            raise UsageError(f"--elasticity {self.elasticity}: give a value in [0.05, 2] "
                             "(1: update size proportional to lr)")


def distill_command(manifest: dict, run: Path) -> list[str]:
    """The train.distill argv that trained `run` (its final checkpoint's manifest entry)."""
    for path, entry_ in manifest["files"].items():
        if Path(path).parent.parent == run and entry_["command"].startswith(
                "python -m train.distill"):
            return shlex.split(entry_["command"])[3:]
    raise RunError(f"{run} has no train.distill command in the setting's manifest; train it "
                   "with python -m nca_interp.paper.reproduce first")


def refuse_recorded_code(argv: list[str], given: list[str] | None, where: str) -> None:
    """A recorded train.distill argv is data: a task option of it that names code (a scorer)
    runs only when this command's --task-options names the same value; otherwise one
    UsageError, before any work. The argv is read by train.distill's own parser, so an
    abbreviated or repeated flag is read as the run would read it."""
    from nca_interp.paper import require_clone
    from nca_interp.tasks import parse_task_options
    from nca_interp.tasks import refuse_recorded_code as refuse

    require_clone()
    from train.options import DistillConfig

    refuse_ambiguous_flags(argv, {"--" + f.name.replace("_", "-")
                                  for f in dataclasses.fields(DistillConfig)}, where)
    try:
        recorded = parse_config(DistillConfig, argv)
    except SystemExit:  # argparse printed why
        raise RunError(f"{where} records a train.distill command its parser refuses; rerun the "
                       "setting's pipeline") from None
    task = recorded.task or (read_run_config(recorded.student).get("task") or {}).get("name")
    try:
        theirs = parse_task_options(task or "sokoban", recorded.task_options)
    except UsageError as e:  # the manifest's option, not this command's: say whose it is
        raise RunError(f"{where} records a train.distill command whose --task-options its task "
                       f"refuses ({e}): `python -m train.distill {shlex.join(argv)[:300]}`; "
                       "rerun the setting's pipeline to record it again") from None
    mine = parse_task_options(task or "sokoban", given)
    refuse(theirs, {k: v for k, v in mine.items() if theirs.get(k) == v},
           f"the train.distill command {where} records")


# The flags this command reads from, or replaces in, a recorded argv (flag, with_flag)
EDITED = ("--out", "--lr", "--threads", "--steps", "--student")


def refuse_ambiguous_flags(argv: list[str], names: set[str], where: str) -> None:
    """One RunError, before any work, unless every flag of a recorded argv is one of `names`
    spelled out, given once, with its value as the next word. argparse takes the last of a
    repeated flag and expands an abbreviation, while `with_flag` replaces the first exact
    one: a recorded `--out X --out Y` would train into Y, which this command never named."""
    seen: set[str] = set()
    for a in argv:
        if not a.startswith("--"):
            continue
        name = a.partition("=")[0]
        if name not in names:
            raise RunError(f"{where} records a train.distill command with the flag {name}, "
                           "which is not one of train.distill's flags spelled out; rerun the "
                           "setting's pipeline to record it again")
        if name in seen:
            raise RunError(f"{where} records a train.distill command that gives {name} twice; "
                           "rerun the setting's pipeline to record it again")
        seen.add(name)
        if name in EDITED and a != name:
            raise RunError(f"{where} records a train.distill command with {a}; this command "
                           f"needs {name} VALUE: rerun the setting's pipeline to record it again")
    missing = [n for n in EDITED if n not in seen]
    if missing:
        raise RunError(f"{where} records a train.distill command without {missing[0]}; rerun "
                       "the setting's pipeline to record it again")


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def with_flag(argv: list[str], name: str, value: str) -> list[str]:
    out = list(argv)
    out[out.index(name) + 1] = value
    return out


def sizes(report: ParamDeltaReport) -> dict[str, list[float]]:
    """Raw update sizes ||dW|| (root of summed squares over every tensor) per method (every
    round's size-matched OPD counted as `opdsized`)."""
    out: dict[str, list[float]] = {"opd": [], "nca": [], SUFFIX: []}
    who = roster(report)
    for key, r in report.results.items():
        if who[key].student:
            out[who[key].method].append(r.global_sq ** 0.5)
    return out


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def next_multiplier(points: list[tuple[float, float]], target: float) -> float:
    """The lr multiplier whose update size should be `target`, from the last two (multiplier,
    mean size) points, size ~ multiplier ** elasticity between them."""
    (m0, s0), (m1, s1) = points[-2:]
    if m0 == m1 or s0 <= 0 or s1 <= 0:
        raise RunError("size control: two rounds at the same lr; cannot measure how the update "
                       "size grows with lr")
    e = math.log(s1 / s0) / math.log(m1 / m0)
    if e <= 0.05:
        raise RunError(f"size control: the update size did not grow with lr (elasticity "
                       f"{e:.3f} between lr x{m0:.3g} and x{m1:.3g}); match sizes another way")
    nxt = m1 * (target / s1) ** (1 / e)
    if not 0.25 <= nxt / m1 <= 4:
        raise RunError(f"size control: the next lr multiplier x{nxt:.3g} is far from the last "
                       f"(x{m1:.3g}): the update size does not follow lr smoothly here; match "
                       "sizes another way")
    return nxt


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_config(SizeControlConfig, argv, __doc__)
    runs, src = Path(cfg.runs), Path(cfg.figures) / cfg.setting
    if not (src / "manifest.json").exists():
        raise RunError(f"{src}/manifest.json is missing: run the setting's pipeline first")
    made = read_json((src / "manifest.json"))
    check_manifest(made, src / "manifest.json")
    pairs = {s: (runs / f"{cfg.setting}_opd_s{s}", runs / f"{cfg.setting}_nca_s{s}")
             for s in cfg.seeds}
    commands = {s: distill_command(made, opd) for s, (opd, _) in pairs.items()}
    for argv_ in commands.values():  # before any work: a manifest is data, never code
        refuse_recorded_code(argv_, cfg.task_options, f"{src / 'manifest.json'}")
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
    size = sizes(analysis.load(before))
    ratio = mean(size["nca"]) / mean(size["opd"])
    points = [(1.0, mean(size["opd"]))]
    multiplier = ratio ** (1 / cfg.elasticity)
    rounds = []
    for r in range(1, cfg.rounds + 1):
        name = SUFFIX if r == 1 else f"{SUFFIX}{r}"
        sized = train_round(cfg, runs, commands, name, multiplier, manifest)
        measured = figs / f"param_delta_round{r}.json"
        stage(f"param_delta of round {r}", manifest, [measured], param_delta.execute,
              param_delta.ParamDeltaConfig(ckpt=[str(o) for o, _, _ in sized.values()],
                                           init=init, out=str(measured.with_suffix(""))),
              inputs=[f for _, f, _ in sized.values()])
        got = mean(sizes(analysis.load(measured))[SUFFIX])
        rounds.append({"round": r, "runs": name, "lr_multiplier": round(multiplier, 4),
                       "size_sized": got, "size_nca": mean(size["nca"]),
                       "sized_over_nca": got / mean(size["nca"])})
        print(f"round {r}: OPD at lr x {multiplier:.3f}: size {got:.4g}, NCA "
              f"{mean(size['nca']):.4g} (sized / NCA {got / mean(size['nca']):.3f})")
        points.append((multiplier, got))
        if 1 / SIZE_MATCH <= got / mean(size["nca"]) <= SIZE_MATCH or r == cfg.rounds:
            break
        multiplier = next_multiplier(points, mean(size["nca"]))
    three = [str(p) for s in cfg.seeds for p in (*pairs[s], sized[s][0])]  # the last round
    stage("param_delta of OPD, size-matched OPD and NCA", manifest, [figs / PARAM_DELTA],
          param_delta.execute,
          param_delta.ParamDeltaConfig(ckpt=three, init=init, out=str(figs / "param_delta")),
          inputs=[*finals, *(f for _, f, _ in sized.values())])
    after = sizes(analysis.load(figs / PARAM_DELTA))
    manifest.data["size_ratio_nca_over_opd"] = ratio
    manifest.data["rounds"] = rounds
    manifest.data["pipeline_seconds"] = round(manifest.data.get("pipeline_seconds", 0)
                                              + time.time() - t0, 1)
    write_text(manifest.path, json.dumps(manifest.data, indent=1))
    print(f"NCA / OPD update size {ratio:.3f}; OPD trained at lr x {multiplier:.3f} (round "
          f"{len(rounds)}): sizes "
          + ", ".join(f"{k} {sum(v) / len(v):.4g}" for k, v in after.items() if v))
    return {"ratio": ratio, "sizes": after, "rounds": rounds}


def train_round(cfg: SizeControlConfig, runs: Path, commands: dict, name: str,
                multiplier: float, manifest: Manifest) -> dict:
    """OPD of every seed at lr x multiplier into RUNS/<setting>_<name>_s<seed> (skipping
    trained ones); {seed: (run, final checkpoint, argv)}."""
    pending, sized = [], {}
    for s, argv0 in commands.items():
        out = runs / f"{cfg.setting}_{name}_s{s}"
        args = with_flag(with_flag(argv0, "--out", str(out)), "--lr",
                         f"{float(flag(argv0, '--lr')) * multiplier:.4g}")
        args = with_flag(args, "--threads", str(max(1, cfg.threads // cfg.jobs)))
        args += ["--role", SUFFIX]  # every report reads the run as the size-matched OPD
        final = out / "checkpoints" / f"step_{int(flag(args, '--steps')):06d}"
        if final.exists() and read_run_config(out).get("lr") != float(flag(args, "--lr")):
            raise RunError(f"{out} was trained at lr {read_run_config(out).get('lr')}, not "
                           f"{flag(args, '--lr')}; delete it to train this round again")
        if final.exists():
            print(f"[skip] size-matched OPD ({name}) seed {s}: outputs exist")
        else:
            pending.append((f"size-matched OPD ({name}) seed {s}", final, out, args))
        sized[s] = (out, final, args)
    run_parallel(pending, cfg.jobs, manifest)
    for out, final, args in sized.values():
        record_training_time(manifest, out, final, args, "train.distill")
    return sized


if __name__ == "__main__":
    sys.exit(entry(main))
