r"""Context return over training: for every checkpoint of distillation runs, the paired win rates
with and without c (harm, help, regime, with intervals) and three KLs on the student's own
samples, so that a regime change can be seen forming.

    python -m nca_interp.trajectory runs/sokoban_long_opd_s0 runs/sokoban_long_opd_s1 \
        --context plan --out figures/sokoban_long/trajectory

Per checkpoint (step 0 is the run's initial checkpoint, the null every later row is read
against), on held-out levels:

  correct_no_c, correct_c, harm, help, delta_c, regime   as `nca_interp.evaluate` (greedy, paired)
  kl_opd   mean_t KL(g(.|x) || f(.|x,c))     the no-context gap OPD closes (internalization)
  kl_ctx   mean_t KL(g(.|x,c) || f(.|x,c))   context-view drift away from the teacher
  kl_nca   mean_t KL(g(.|x) || g(.|x,c))     how far the two student views are apart
  drift    mean_t KL(g(.|x) || g_0(.|x))     how far the no-context view moved from step 0's
                                             (g_0: the run's initial checkpoint)

With --control, every checkpoint is also played with the control context c' (same form, wrong
for the item) and its row carries reads_c = correct_c - correct_c' (how much it uses what c says);
each run's `control` records what c' was (the task's draw, or your own field or file with its
sha256, and the first items' c'), printed under the table, and own data's rows keep the answers
given with c' (`response_control`).

The KLs are token means over responses y ~ g(.|x) sampled at temperature 1 with a fixed
generator (the same prompts at every step), full vocabulary, in nats, each with a 95% bootstrap
interval over prompts. For self-distillation (teacher = initial checkpoint) kl_ctx is exactly 0
at step 0; the teacher is the run's own (`--teacher` overrides).
"""

from __future__ import annotations

import logging
import sys

from nca_interp.cli import parse_early
from nca_interp.configs import TrajectoryConfig

if __name__ == "__main__":  # --help and a bad flag answered before torch is imported
    PARSED = parse_early(TrajectoryConfig, __doc__, positional="runs")

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nca_interp import analysis
from nca_interp.bootstrap import iid_indices, percentile_ci
from nca_interp.checkpoint import (
    check_same_tokenizer,
    check_step_record,
    load_checkpoint,
    read_run_config,
    step_number,
    verify_folder,
)
from nca_interp.cli import as_paths, entry, parse_config, validate
from nca_interp.errors import UsageError
from nca_interp.evaluate import control_record, evaluate_checkpoint, format_c_prime
from nca_interp.forward import response_logits
from nca_interp.labelled import Arrays, Labelled, as_float, stack
from nca_interp.losses import position_kl
from nca_interp.models import context_limit
from nca_interp.progress import bar
from nca_interp.reports import TrajectoryReport, as_report
from nca_interp.rollout import onpolicy_batch
from nca_interp.runs import (
    check_trained_on,
    in_progress,
    initial_of,
    resolve_task_and_context,
    teacher_of,
)
from nca_interp.tasks import Task, make_task
from nca_interp.tokenizer import check_tokenizer

__all__ = ["arrays_of", "checkpoints_of", "execute", "figures", "format_table", "main",
           "measure", "over_steps", "report_arrays", "run", "show"]

log = logging.getLogger(__spec__.name if __spec__ else __name__)  # python -m too

KL_TERMS = ("kl_opd", "kl_ctx", "kl_nca", "drift")
REPORT_KEYS = ("correct_no_c", "correct_c", "harm", "help", "delta_c", "rel_len_both", "regime",
               "n_correct_no_c")


def _kl_rows(p_logits: torch.Tensor, q_logits: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
    """Per prompt: the sum over its valid response tokens of KL(p || q), full vocabulary."""
    return (position_kl(p_logits, q_logits) * mask).sum(1).double().numpy()


@torch.no_grad()
def drift_kls(student, teacher, tok, task, levels: list, context: str, seed: int = 0,
              batch: int = 128, n_boot: int = 2000, initial=None) -> dict:
    """kl_opd, kl_ctx, kl_nca and drift on y ~ g(.|x) (temperature 1), token means with 95%
    bootstrap intervals over prompts (a ratio of resampled sums: long responses weigh more, as
    in the loss). `initial`: the run's step-0 model g_0 (None: the teacher is g_0, as in
    self-distillation)."""
    initial = teacher if initial is None else initial
    gen = torch.Generator("cpu").manual_seed(seed)
    limit = min(context_limit(student), context_limit(teacher))
    sums: dict[str, list[np.ndarray]] = {k: [] for k in KL_TERMS}
    tokens = []
    for i in range(0, len(levels), batch):
        b, _, _ = onpolicy_batch(student, tok, task, levels[i: i + batch], context,
                                 task.max_response_tokens(), 1.0, gen, limit)
        m = b.resp_mask.float()
        g = response_logits(student, b.x_ids, b.x_mask, b.resp, b.resp_mask)
        g_c = response_logits(student, b.cx_ids, b.cx_mask, b.resp, b.resp_mask)
        f_c = response_logits(teacher, b.cx_ids, b.cx_mask, b.resp, b.resp_mask)
        sums["kl_opd"].append(_kl_rows(g, f_c, m))
        sums["kl_ctx"].append(_kl_rows(g_c, f_c, m))
        sums["kl_nca"].append(_kl_rows(g, g_c, m))
        g0 = response_logits(initial, b.x_ids, b.x_mask, b.resp, b.resp_mask)
        sums["drift"].append(_kl_rows(g, g0, m))
        tokens.append(m.sum(1).double().numpy())
    n_tok = np.concatenate(tokens)
    idx = iid_indices(len(n_tok), n_boot, seed)
    out: dict[str, Any] = {"n_prompts": len(n_tok), "n_tokens": int(n_tok.sum()), "ci95": {}}
    for k, parts in sums.items():
        s = np.concatenate(parts)
        out[k] = float(s.sum() / n_tok.sum())
        boots = s[idx].sum(1) / n_tok[idx].sum(1)
        out["ci95"][k] = [float(v) for v in percentile_ci(boots)]
    return out


def measure(model, teacher, tok, task, context: str, n_levels: int = 200,
            drift_levels: int = 64, seed: int = 0, control: bool = False,
            initial=None) -> dict:
    """One checkpoint's row, on models in memory: `model` (a student g, a transformers causal
    LM) played greedily with and without c (`evaluate.evaluate_checkpoint` on `n_levels` test
    items) and its KLs to `teacher` f on its own samples (`drift_kls` on `drift_levels` items;
    `initial`: the run's step-0 model, None where the teacher is it). With `control`, reads_c
    and its interval."""
    task = task.for_tokenizer(tok)
    rep = evaluate_checkpoint(model, tok, task, context, n_levels, seed, control=control)
    kls = drift_kls(model, teacher, tok, task, task.levels("test", drift_levels, seed), context,
                    seed, initial=initial)
    row = {**{k: rep[k] for k in REPORT_KEYS}, **{k: kls[k] for k in KL_TERMS},
           "ci95": {**{k: rep["ci95"][k] for k in REPORT_KEYS if k in rep["ci95"]},
                    **kls["ci95"]}}
    if control:
        row["reads_c"] = rep["control"]["reads_c"]
        row["ci95"]["reads_c"] = rep["control"]["reads_c_ci95"]
        if "response_control" in rep["items"]:  # own data: the answers with c'
            row["response_control"] = rep["items"]["response_control"]
    return row


# the numbers of a row as labelled arrays (`arrays_of`): each on (step,), its 95% interval on
# (step, bound); the regime is text, in attrs
ROW_NUMBERS = ("correct_no_c", "correct_c", "harm", "help", "delta_c", "rel_len_both",
               "n_correct_no_c", *KL_TERMS, "reads_c")


def arrays_of(rows: list[dict]) -> Arrays:
    """Rows (one per step, as `measure` gives them with their `step`, or as a report holds
    them) as labelled arrays over `step`: every number of `ROW_NUMBERS` a row has (None, a
    rate with no item to count, is NaN) and its interval as `<name>_ci95` on (step, bound);
    `attrs` the regimes and checkpoints by step."""
    steps = {"step": [int(r["step"]) for r in rows]}
    out = {}
    for k in ROW_NUMBERS:
        if not rows or not all(k in r for r in rows):
            continue
        out[k] = Labelled(as_float([r[k] for r in rows]), ("step",), steps, k)
        if all(k in (r.get("ci95") or {}) for r in rows):
            out[f"{k}_ci95"] = Labelled(as_float([list(r["ci95"][k]) for r in rows]),
                                        ("step", "bound"), {**steps, "bound": ("lo", "hi")},
                                        f"{k}_ci95")
    return Arrays(out, {"regime": [r["regime"] for r in rows],
                        "checkpoint": [r.get("checkpoint") for r in rows]})


def over_steps(models: Mapping[int, Any], teacher, tok, task: Task | str, context: str,
               n_levels: int = 200, drift_levels: int = 64, seed: int = 0,
               control: bool = False, initial=None) -> Arrays:
    """The core, on models in memory: each checkpoint of `models` ({step: model}, step 0 the
    run's initial checkpoint, the null every later row is read against) measured as the
    command measures it (`measure`), as labelled arrays over `step` (`arrays_of`). `task` a
    Task or its name (its defaults); `initial`: the step-0 model when it is not the teacher
    (drift is measured from it)."""
    if not models:
        raise UsageError("over_steps takes at least one model: {step: model}")
    for name, n in (("n_levels", n_levels), ("drift_levels", drift_levels)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise UsageError(f"{name} is how many held-out items (a positive int), not {n!r}")
    check_tokenizer(tok)
    task = make_task(task) if isinstance(task, str) else task
    rows = [{"step": int(step), **measure(m, teacher, tok, task, context, n_levels,
                                         drift_levels, seed, control, initial)}
            for step, m in sorted(models.items())]
    return arrays_of(rows)


def report_arrays(report: TrajectoryReport | dict) -> Arrays:
    """A trajectory report's rows as the core's labelled arrays, stacked on a leading `run`
    dimension (the report's run keys); runs measured at different steps are refused (select
    one: `report_arrays({**report, "results": {name: ...}})`)."""
    report = as_report(report, TrajectoryReport)
    parts = {name: arrays_of(r.steps) for name, r in report.results.items()}
    if len({tuple(int(row["step"]) for row in r.steps) for r in report.results.values()}) > 1:
        raise UsageError("the report's runs were measured at different steps; read one run "
                         "at a time (a report with that run's results alone)")
    arrays = stack(parts, "run")
    return Arrays(arrays.arrays, {name: a.attrs for name, a in parts.items()})


def checkpoints_of(run: str) -> list[tuple[int, str]]:
    """(step, folder) of a distillation run: its initial checkpoint as step 0, then every
    saved step."""
    init = initial_of(run)
    if not init:
        raise UsageError(f"{run} does not record the checkpoint it started from "
                         "(run_config.json `student`); is it a distillation run?")
    folder = Path(run) / "checkpoints"
    strays = sorted(p.name for p in folder.iterdir() if p.is_dir() and step_number(p) is None
                    and p.name != "discarded" and not p.name.startswith(".")) \
        if folder.is_dir() else []
    if strays:  # a renamed step_N silently ended the trajectory before it (the fourth probe)
        raise UsageError(f"{folder / strays[0]} is not a step checkpoint (step_N); a trajectory "
                         "reads every step of a run: rename it back to its step (its "
                         "trainer_state.json records it) or move it out of checkpoints/")
    steps = sorted((check_step_record(p), str(p)) for p in folder.glob("step_*")
                   if step_number(p) is not None and (p / "nca_checkpoint.json").exists())
    if not steps:
        raise UsageError(f"{run} has no saved checkpoints under checkpoints/step_*")
    return [(0, init)] + steps




def what_c_prime(task, context: str, n_levels: int, seed: int) -> dict:
    """What c' is on the items every checkpoint is evaluated on (`evaluate.control_record`),
    before any checkpoint is read: a c' the task refuses (your own equal to c, a missing
    control_file) stops the command here."""
    levels = task.levels("test", n_levels, seed)
    wrong = [task.control_context(levels, i, context) for i in range(len(levels))]
    return control_record(task, levels, context, wrong)


def format_table(results: dict) -> str:
    rows = [row for r in results.values() for row in r.steps]
    terms = [k for k in KL_TERMS if rows and all(k in row for row in rows)]  # drift: newer
    head = (f"{'run':<24} {'step':>5} {'win_no_c':>8} {'win_c':>6} {'harm':>6} {'help':>6} "
            f"{'regime':>6} " + " ".join(f"{k:>7}" for k in terms))
    lines = [head]
    for name, r in results.items():
        for row in r.steps:
            harm = "-" if row["harm"] is None else f"{row['harm']:.3f}"
            hlp = "-" if row["help"] is None else f"{row['help']:.3f}"
            lines.append(f"{name:<24} {row['step']:>5} {row['correct_no_c']:>8.3f} "
                         f"{row['correct_c']:>6.3f} {harm:>6} {hlp:>6} {row['regime']:>6} "
                         + " ".join(f"{row[k]:>7.4f}" for k in terms))
    lines.append("(step 0 = the initial checkpoint: the null; KLs in nats per response token "
                 "on the student's own samples)")
    lines += sorted({format_c_prime(r.control) for r in results.values() if r.control})
    return "\n".join(lines)


def run(cfg: TrajectoryConfig | None = None, /, **fields) -> dict:
    """Context return at the saved checkpoints of each distillation run: an `analysis` report
    whose `results[run]` holds `steps`, one row per checkpoint (step 0 = the initial
    checkpoint) with the paired rates, the KLs (drift from step 0 among them), reads_c with
    `control`, and their 95% intervals (`ci95`). `run(TrajectoryConfig(...))` or
    `run(runs=[...], ...)`."""
    cfg = analysis.config(TrajectoryConfig, cfg, fields)
    validate(cfg)
    runs = as_paths(cfg.runs, "runs")
    if not runs:
        raise UsageError("name at least one distillation run directory")
    teacher, n_levels, drift_levels, seed = cfg.teacher, cfg.n_levels, cfg.drift_levels, cfg.seed
    plan = {}
    for run_dir in runs:
        verify_folder(run_dir)
        if (note := in_progress(run_dir)) is not None:
            log.warning(f"note: {note}")
        ckpts = checkpoints_of(run_dir)
        keep = ckpts[::cfg.every]
        if keep[-1] != ckpts[-1]:
            keep.append(ckpts[-1])
        teacher_dir = teacher_of(run_dir, teacher)
        verify_folder(teacher_dir)
        task, ctx = resolve_task_and_context([run_dir], None, cfg.context)
        check_trained_on(teacher_dir, task.name, "the teacher")
        plan[run_dir] = (keep, teacher_dir, task, ctx)
    controls = {run_dir: what_c_prime(task, ctx, n_levels, seed)
                for run_dir, (_, _, task, ctx) in plan.items()} if cfg.control else {}
    results: dict[str, dict] = {}
    # rows already measured (runs of one base share step 0)
    done: dict[tuple[str, str, str], dict] = {}
    for run_dir, (keep, teacher_dir, task, ctx) in plan.items():
        teacher_model, tok_t = load_checkpoint(teacher_dir)
        init_dir = keep[0][1]
        initial = None if Path(init_dir).resolve() == Path(teacher_dir).resolve() \
            else load_checkpoint(init_dir)[0]
        rows = []
        for step, path in bar(keep, f"trajectory {Path(run_dir).name}", unit="ckpt"):
            key = (str(Path(path).resolve()), str(Path(teacher_dir).resolve()), ctx)
            if key in done:
                rows.append({**done[key], "step": step, "checkpoint": path})
                continue
            model, tok = load_checkpoint(path)
            check_same_tokenizer(tok, tok_t, path, teacher_dir)
            row = {"step": step, "checkpoint": path,
                   **measure(model, teacher_model, tok, task, ctx, n_levels, drift_levels, seed,
                             cfg.control, initial)}
            rows.append(row)
            done[key] = row
            log.info(f"{Path(run_dir).name} step {step}: win {row['correct_no_c']:.3f}/"
                     f"{row['correct_c']:.3f} harm {row['harm']} kl_ctx {row['kl_ctx']:.4f}")
        config = read_run_config(run_dir)
        results[Path(run_dir).name] = {"run": run_dir, "teacher": teacher_dir, "context": ctx,
                                       "task": task.name, "steps": rows,
                                       "identity": {"method": config.get("method"),
                                                    "seed": config.get("seed"),
                                                    "beta": config.get("beta_effective")},
                                       **({"control": controls[run_dir]} if cfg.control
                                          else {})}
    first = next(iter(plan.values()))
    return analysis.make_report(cfg, task=first[2].name, context=first[3],
                                paths={Path(r).name: r for r in plan}, results=results)


def show(report: TrajectoryReport | dict) -> None:
    report = as_report(report, TrajectoryReport)
    print(format_table(report.results))


def figures(report: TrajectoryReport | dict) -> dict:
    """{"": Figure} of a `run` report."""
    report = as_report(report, TrajectoryReport)
    from nca_interp import plots

    return {"": plots.trajectory_figure(report)}


def main(argv: list[str] | TrajectoryConfig | None = None) -> dict:
    return execute(parse_config(TrajectoryConfig, argv, __doc__, positional="runs"))


def execute(cfg: TrajectoryConfig) -> dict:
    """The command on a config object (what `nca_interp.paper.reproduce` calls; `main` parses the
    command line into one): see `analysis.execute`."""
    return analysis.execute(sys.modules[__name__], cfg)

if __name__ == "__main__":
    sys.exit(entry(main, parsed=PARSED))
