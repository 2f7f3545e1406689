r"""What a long run will cost, measured before it starts: a few SFT steps of the teacher, then a
few OPD and NCA steps from it, each command in its own process at the thread count the long
runs will use; the median step times give the budget of the full plan.

    python -m bench.pilot --init ~/.cache/nca_interp/models/smollm2-135m-instruct \
        --task sokoban --contexts state,plan --context plan --batch 16 --threads 1 \
        --plan teacher=300,students=150,seeds=3 --write
    python -m bench.pilot --init ~/.cache/nca_interp/models/smollm2-135m-instruct \
        --task sokoban --task-options remap=LRUD --contexts remap --context remap --batch 16 \
        --threads 1 --precision fp32 --lora-rank 16 --sft-lr 5e-4 --sft-steps 72 \
        --sft-eval-every 24 --stages teacher --write   # a LoRA teacher alone, its learning curve

Prints per stage: median s/step over the steps after the first, tokens per step, peak RSS, and
the held-out wins the pilot teacher reached (with and without c: the first signal of whether
the task is learnable; with --sft-eval-every, at every evaluation); then the plan's hours: the
teacher alone, then the students two jobs at a time (`--jobs 2`, one thread each, as the
pipeline runs them). Step times are medians, and the range over steps is printed beside them: a
budget is as good as that range.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

__all__ = ["main"]


def steps_of(run: Path) -> list[dict]:
    return [r for r in (json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines())
            if "step_s" in r]


def stage(name: str, cmd: list[str]) -> dict:
    from bench.analysis_scale import measured

    out = Path(cmd[cmd.index("--out") + 1])
    m = measured([sys.executable, "-m", *cmd])
    log = steps_of(out)
    times = [r["step_s"] for r in log[1:]] or [r["step_s"] for r in log]
    last = log[-1]
    curve = [{k: v for k, v in r.items() if k == "step" or k.startswith(("win_", "eval_win"))}
             for r in log if any(k.startswith(("win_", "eval_win")) for k in r)]
    return {"stage": name, "command": "python -m " + " ".join(cmd), "steps": len(log),
            "step_s": statistics.median(times), "step_s_range": [min(times), max(times)],
            "wall_s": m["wall_s"], "peak_rss_gb": m["peak_rss_gb"],
            "curve": curve, **{k: v for k, v in last.items()
                               if k.startswith(("win_", "eval_win"))}}


def cpu() -> str | None:
    """The CPU's model name and whether it has native bf16 (Linux; None elsewhere)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines()
                 if ln.startswith("model name")), "an unknown CPU")
    return f"{name} ({'native bf16' if 'avx512_bf16' in info else 'no native bf16'})"


def render(info: dict, rows: list[dict]) -> tuple[str, dict]:
    """The pilot's table and the plan's hours."""
    plan, context = info["plan"], info["context"]
    by = {r["stage"]: r for r in rows}
    teacher_h = plan["teacher"] * by["teacher SFT"]["step_s"] / 3600
    students = "OPD student" in by and "NCA student" in by  # --stages teacher: none
    students_h = plan["seeds"] * plan["students"] * (by["OPD student"]["step_s"] +
                                                     by["NCA student"]["step_s"]) / 2 / 3600 \
        if students else 0.0
    lines = [f"# python -m bench.pilot {' '.join(info['argv'])}",
             f"{'stage':<14} {'steps':>5} {'s/step':>8} {'range':>15} {'peak RSS GB':>12} "
             f"{'wins (no c / c)':>17}"]
    for r in rows:
        lo, hi = r["step_s_range"]
        # train.sft logs win_none / win_<kind>, train.distill eval_win_no_c / eval_win_c
        no_c = r.get("win_none", r.get("eval_win_no_c"))
        c = r.get(f"win_{context}", r.get("eval_win_c"))
        shown = f"{no_c:.2f} / {c:.2f}" if no_c is not None and c is not None else "-"
        lines.append(f"{r['stage']:<14} {r['steps']:>5} {r['step_s']:>8.2f} "
                     f"{f'{lo:.2f} to {hi:.2f}':>15} {r['peak_rss_gb']:>12.2f} {shown:>17}")
        for point in r.get("curve", [])[:-1]:  # earlier evaluations (--sft-eval-every)
            no_c = point.get("win_none", point.get("eval_win_no_c"))
            c = point.get(f"win_{context}", point.get("eval_win_c"))
            if no_c is not None and c is not None:
                lines.append(f"{'  at step ' + str(point['step']):<14} {'':>48} "
                             f"{f'{no_c:.2f} / {c:.2f}':>17}")
    plan_text = ",".join(f"{k}={v}" for k, v in plan.items())
    lines += [f"plan {plan_text}, batch {info['batch']}, {info['threads']} thread(s) per job: "
              f"teacher {teacher_h:.1f} h, "
              + (f"then {2 * plan['seeds']} students two at a time {students_h:.1f} h; total "
                 f"{teacher_h + students_h:.1f} h" if students else "students not piloted")
              + " (training only: evaluations and analyses come on top)",
              f"wins: held-out, {info['eval_levels']} levels, with c = `{context}`, after the "
              "pilot's steps (the pilot teacher, and students distilled from it), not the plan's"]
    if info.get("cpu"):  # step times hold on this kind of CPU only (MACHINE_FACTS.md)
        lines.append(f"measured on {info['cpu']}")
    return "\n".join(lines) + "\n", {"teacher_h": teacher_h, "students_h": students_h}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", help="the model the teacher starts from")
    ap.add_argument("--task", default="sokoban")
    ap.add_argument("--task-options", default=None)
    ap.add_argument("--contexts", default="state,plan", help="the teacher's context kinds")
    ap.add_argument("--context", default="plan", help="the context distillation uses")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--sft-lr", default="5e-5")
    ap.add_argument("--distill-lr", default="1e-5")
    ap.add_argument("--sft-steps", type=int, default=20)
    ap.add_argument("--sft-eval-every", type=int, default=None,
                    help="evaluate the teacher every N steps (default: once, at the end)")
    ap.add_argument("--lora-rank", type=int, default=0,
                    help="train the teacher as a LoRA adapter of this rank (train.sft)")
    ap.add_argument("--precision", default="auto",
                    help="every stage's --precision (fp32: a budget that holds on CPUs "
                         "without native bf16)")
    ap.add_argument("--stages", default="teacher,opd,nca",
                    help="teacher, or teacher,opd,nca (the students are distilled from it)")
    ap.add_argument("--distill-steps", type=int, default=5)
    ap.add_argument("--eval-levels", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--plan", default="teacher=300,students=150,seeds=3",
                    help="the long runs to budget: teacher steps, student steps, seeds")
    ap.add_argument("--keep", default=None, help="keep the pilot runs in this folder")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--report", default=None, help="re-print an earlier pilot's JSON")
    args = ap.parse_args(argv)
    if args.report:
        saved = json.loads(Path(args.report).read_text())
        text, hours = render(saved, saved["rows"])
        print(text, end="")
        return {"rows": saved["rows"], **hours}
    if not args.init:
        ap.error("--init is required (the model the teacher starts from)")
    try:
        plan = {k: int(v) for k, v in (p.split("=") for p in args.plan.split(","))}
    except ValueError:
        plan = {}
    if set(plan) != {"teacher", "students", "seeds"}:
        ap.error(f"--plan {args.plan!r}: give teacher=STEPS,students=STEPS,seeds=N")
    work = Path(args.keep or tempfile.mkdtemp(prefix="pilot_"))
    work.mkdir(parents=True, exist_ok=True)
    task = ["--task", args.task, *(["--task-options", args.task_options]
                                   if args.task_options else [])]
    th = ["--threads", str(args.threads), "--precision", args.precision]
    lora = ["--lora-rank", str(args.lora_rank)] if args.lora_rank else []
    rows = [stage("teacher SFT", [
        "train.sft", "--out", str(work / "teacher"), *task, "--init", args.init,
        "--contexts", args.contexts, "--steps", str(args.sft_steps), "--batch", str(args.batch),
        "--lr", args.sft_lr, "--warmup", "2", "--eval-every",
        str(args.sft_eval_every or args.sft_steps), "--eval-levels", str(args.eval_levels),
        "--save-every", str(args.sft_steps), *lora, *th])]
    for method in [m for m in ("opd", "nca") if m in args.stages.split(",")]:
        rows.append(stage(f"{method.upper()} student", [
            "train.distill", "--method", method, "--student", str(work / "teacher"),
            "--out", str(work / method), "--context", args.context, "--steps",
            str(args.distill_steps), "--batch", str(args.batch), "--lr", args.distill_lr,
            "--save-every", str(args.distill_steps), "--eval-levels", str(args.eval_levels),
            "--seed", "0", *th]))
    info = {"argv": list(argv if argv is not None else sys.argv[1:]), "plan": plan,
            "batch": args.batch, "threads": args.threads, "context": args.context,
            "eval_levels": args.eval_levels, "cpu": cpu()}
    text, hours = render(info, rows)
    print(text, end="")
    if args.write:
        # the plain pilot keeps its name; a variant (task options, LoRA) gets its own
        variant = "".join(f"_{o.replace('=', '-')}" for o in (args.task_options or "").split(",")
                          if o) + (f"_lora{args.lora_rank}" if args.lora_rank else "")
        stem = Path("bench/results") / f"pilot_{args.task}{variant}_{Path(args.init).name}"
        stem.with_suffix(".txt").write_text(text)
        stem.with_suffix(".json").write_text(json.dumps({**info, "rows": rows}, indent=1))
    return {"rows": rows, **hours}


if __name__ == "__main__":
    main()
