r"""fp32 or bf16 autocast on this CPU: the speed of each (achieved FLOP/s beside the measured
GEMM peak of the same dtype) and bf16's agreement with fp32, measured side by side in one run;
the default precision (`--precision auto`, `models.auto_bf16`) follows from both.

    python -m bench.precision --write                     # the tiny Sokoban base: every part
    python -m bench.precision --ckpt ~/.cache/nca_interp/models/smollm2-135m-instruct \
        --task facts --context rule --task-options kind=rule,rule=french,max_new=24 \
        --batch 8 --trajectory 0 --write                   # SmolLM2, facts_rule's step

1. GEMM: `F.linear` (what every layer calls) at the model's shapes, GFLOP/s per dtype; the
   best shape is the dtype's peak, the ceiling a step's efficiency is read against.
2. Steps: one NCA step (sampling + loss + backward + AdamW, batch --batch) of our loop and of
   TRL's trainer in fp32 and in bf16 autocast (TRL's default), each in its own process
   (`bench.trl_step`), plus our OPD step: seconds, sampled tokens/s with its step-to-step
   range, achieved GFLOP/s (torch's FLOP counter on the warm-up step) and its share of the
   dtype's peak, peak RSS.
3. Agreement on one batch: the loss and the full gradient under bf16 autocast against fp32 on
   the same sampled tokens. Null: the gradient of a second batch in fp32 (how far sampling
   alone moves it) and fp32 recomputed (the floor).
4. Trajectory (--trajectory N steps, `train.distill` itself): bf16 seed 0 against fp32 seed 0,
   beside fp32 seed 1 against fp32 seed 0 (the seed-to-seed spread): mean |loss difference|
   per step and the final held-out wins.

bf16 agrees when the loss differs by under 1%, the gradient cosine exceeds 0.99, the
trajectory's mean loss deviation stays within the seed-to-seed one and its final wins within
the larger of the seed-to-seed difference and two standard errors of the evaluation; it is the
default only where it also runs faster (a CPU with native bf16: AVX512-BF16 or AMX, or a GPU).
`--report JSON` prints the tables of an earlier run again under today's rules.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

LOSS_TOL = 0.01  # relative loss difference bf16 may show
GRAD_COS_MIN = 0.99  # gradient cosine bf16 must reach

__all__ = ["GRAD_COS_MIN", "LOSS_TOL", "agreement", "gemm", "main", "trajectory"]


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def gemm(model_config, threads: int) -> list[dict]:
    """GFLOP/s of `F.linear` at the model's shapes (4096 tokens), fp32 and bf16."""
    import torch
    import torch.nn.functional as F

    from bench.common import timeit

    torch.set_num_threads(threads)
    d, mlp, vocab = model_config.hidden_size, model_config.intermediate_size, \
        model_config.vocab_size
    rows = []
    for name, (k, n) in {"attention (d x d)": (d, d), "MLP up (d x mlp)": (d, mlp),
                         "MLP down (mlp x d)": (mlp, d), "unembed (d x vocab)": (d, vocab)}.items():
        m = 4096 if n * k < 2e7 else 512  # keep the unembedding's product small
        for dtype in (torch.float32, torch.bfloat16):
            x, w = torch.randn(m, k, dtype=dtype), torch.randn(n, k, dtype=dtype)
            s = timeit(lambda x=x, w=w: F.linear(x, w), repeat=5, warmup=1)
            rows.append({"shape": name, "m": m, "k": k, "n": n, "dtype": str(dtype)[6:],
                         "gflops_per_s": 2 * m * k * n / s / 1e9})
    return rows


def agreement(ckpt: str, task: str | None, context: str | None, options, batch: int,
              threads: int) -> dict:
    """Loss and gradient of one NCA step's batch in bf16 autocast against fp32 (same tokens),
    beside a second fp32 batch's gradient (sampling noise) and fp32 recomputed (floor)."""
    import torch

    from bench.common import self_distillation
    from nca_interp.losses import combine, loss_terms
    from nca_interp.models import context_limit
    from nca_interp.rollout import onpolicy_batch

    student, teacher, tok, view, ctx = self_distillation(ckpt, task, context, options, threads)
    levels = view.levels("train", 2 * batch, 0)
    gen = torch.Generator().manual_seed(0)
    student.eval()
    batches = [onpolicy_batch(student, tok, view, levels[i * batch:(i + 1) * batch], ctx,
                              view.max_response_tokens(), 1.0, gen, context_limit(student))[0]
               for i in range(2)]
    student.train()

    def grad(b, bf16: bool) -> tuple[float, torch.Tensor]:
        student.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = combine(loss_terms(student, teacher, b, ("opd", "nca")), 1.0)
        loss.backward()
        g = torch.cat([p.grad.flatten() for p in student.parameters() if p.grad is not None])
        return float(loss.detach()), g

    def cos(a, b) -> float:  # in float64: fp32 rounds a million-term cosine to 1 +- 2e-4
        return float(torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=0))

    loss32, g32 = grad(batches[0], False)
    again, g32b = grad(batches[0], False)
    loss16, g16 = grad(batches[0], True)
    _, g_other = grad(batches[1], False)
    return {"loss_fp32": loss32, "loss_bf16": loss16,
            "loss_rel_diff": abs(loss16 - loss32) / abs(loss32),
            "grad_cos_bf16": cos(g16, g32), "grad_norm_ratio": float(g16.norm() / g32.norm()),
            "grad_cos_other_batch": cos(g_other, g32), "grad_cos_recomputed": cos(g32b, g32),
            "loss_recomputed_diff": abs(again - loss32)}


def trajectory(ckpt: str, steps: int, threads: int, flags: list[str]) -> dict:
    """`train.distill` (NCA) for `steps` steps: fp32 seeds 0 and 1, bf16 seed 0."""
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, precision, seed in (("fp32_s0", "fp32", 0), ("fp32_s1", "fp32", 1),
                                      ("bf16_s0", "bf16", 0)):
            out = Path(tmp) / name
            subprocess.run([sys.executable, "-m", "train.distill", "--method", "nca",
                            "--student", ckpt, "--out", str(out), "--steps", str(steps),
                            "--seed", str(seed), "--precision", precision, "--threads",
                            str(threads), "--save-every", str(steps), *flags],
                           check=True, capture_output=True, text=True)
            log = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
            log = [r for r in log if "loss" in r]
            runs[name] = {"loss": [r["loss"] for r in log], "eval_levels": 200,
                          "step_s": statistics.median(r["step_s"] for r in log),
                          **{k: log[-1][k] for k in ("eval_win_no_c", "eval_win_c")
                             if k in log[-1]}}

    def dev(a: str, b: str) -> dict:
        la, lb = runs[a]["loss"], runs[b]["loss"]
        return {"mean_abs_loss_diff": statistics.fmean(abs(x - y) for x, y in zip(la, lb)),
                **{k: runs[a][k] - runs[b][k] for k in ("eval_win_no_c", "eval_win_c")
                   if k in runs[a]}}
    return {"runs": runs, "steps": steps, "bf16_vs_fp32": dev("bf16_s0", "fp32_s0"),
            "seed_vs_seed": dev("fp32_s1", "fp32_s0")}


def win_noise(traj: dict) -> dict:
    """Two standard errors of the difference of two held-out win rates (fp32 seed 0's rate,
    `eval_levels` levels each): how far two evaluations of equal players may differ."""
    ref = traj["runs"]["fp32_s0"]
    n = ref.get("eval_levels", 200)
    return {k: 2 * (2 * ref[k] * (1 - ref[k]) / n) ** 0.5
            for k in ("eval_win_no_c", "eval_win_c") if k in ref}


def steps_table(args) -> list[dict]:
    from bench.analysis_scale import measured

    rows = []
    for loop, precision, method in (("ours", "fp32", "nca"), ("ours", "bf16", "nca"),
                                    ("trl", "fp32", "nca"), ("trl", "bf16", "nca"),
                                    ("ours", "fp32", "opd"), ("ours", "bf16", "opd")):
        cmd = [sys.executable, "-m", "bench.trl_step", "--one",
               f"{loop}:full:{precision}:{method}", "--ckpt", args.ckpt, "--batch",
               str(args.batch), "--steps", str(args.steps), "--threads", str(args.threads)]
        for flag in ("task", "context", "task_options"):
            if getattr(args, flag):
                cmd += [f"--{flag.replace('_', '-')}", getattr(args, flag)]
        m = measured(cmd, keep_stdout=True)
        out = json.loads(m.pop("stdout").strip().splitlines()[-1])
        rows.append({"loop": loop, "precision": precision, "method": method, **out, **m})
    return rows


def report(args, machine: dict, g: list[dict], rows: list[dict], agree: dict,
           traj: dict | None) -> str:
    peak = {dt: max(r["gflops_per_s"] for r in g if r["dtype"] == dt)
            for dt in ("float32", "bfloat16")}
    lines = [f"# {' '.join(['python -m bench.precision', *args.argv])}",
             f"machine: {machine['cpu']}; torch {machine['torch']}; CPU capability "
             f"{machine['capability']}; native bf16 (AVX512-BF16 or AMX): "
             f"{machine['native_bf16']}; {args.threads} threads",
             "", "## GEMM (F.linear), GFLOP/s",
             f"{'shape':<22} {'m x k x n':>18} {'fp32':>8} {'bf16':>8} {'bf16/fp32':>10}"]
    for name in dict.fromkeys(r["shape"] for r in g):
        a, b = (next(r for r in g if r["shape"] == name and r["dtype"] == dt)
                for dt in ("float32", "bfloat16"))
        mkn = f"{a['m']}x{a['k']}x{a['n']}"
        lines.append(f"{name:<22} {mkn:>18} "
                     f"{a['gflops_per_s']:>8.1f} {b['gflops_per_s']:>8.1f} "
                     f"{b['gflops_per_s'] / a['gflops_per_s']:>9.2f}x")
    lines.append(f"{'peak (best shape)':<22} {'':>18} {peak['float32']:>8.1f} "
                 f"{peak['bfloat16']:>8.1f} {peak['bfloat16'] / peak['float32']:>9.2f}x")
    lines += ["", f"## One step, batch {args.batch} (median of {args.steps} timed steps after a "
              "warm-up)",
              f"{'loop':<5} {'prec':<5} {'method':<6} {'s/step':>8} {'tokens/s':>9} "
              f"{'over steps':>16} {'GFLOP/s':>8} {'% of peak':>9} {'RSS GB':>7}"]
    for r in rows:
        p = peak["float32" if r["precision"] == "fp32" else "bfloat16"]
        lo, hi = r["tokens_per_s_range"]
        lines.append(f"{r['loop']:<5} {r['precision']:<5} {r['method']:<6} {r['step_s']:>8.2f} "
                     f"{r['tokens_per_s']:>9.1f} {f'{lo:.1f} to {hi:.1f}':>16} "
                     f"{r['gflops_per_s']:>8.1f} {100 * r['gflops_per_s'] / p:>8.1f}% "
                     f"{r['peak_rss_gb']:>7.2f}")

    def rate(loop, precision, method="nca"):
        return next(r for r in rows if (r["loop"], r["precision"], r["method"]) ==
                    (loop, precision, method))["tokens_per_s"]
    default = "bf16" if machine["native_bf16"] else "fp32"
    lines += [f"ours / TRL, both fp32: {rate('ours', 'fp32') / rate('trl', 'fp32'):.2f}x; "
              f"both bf16: {rate('ours', 'bf16') / rate('trl', 'bf16'):.2f}x; our default "
              f"here ({default}) / TRL's default (bf16): "
              f"{rate('ours', default) / rate('trl', 'bf16'):.2f}x (sampled tokens/s)",
              f"bf16 / fp32, our NCA step: {rate('ours', 'bf16') / rate('ours', 'fp32'):.2f}x; "
              f"NCA / OPD step time (fp32): "
              f"{rate('ours', 'fp32', 'opd') / rate('ours', 'fp32'):.2f}x, (bf16): "
              f"{rate('ours', 'bf16', 'opd') / rate('ours', 'bf16'):.2f}x"]
    a = agree
    lines += ["", "## Agreement on one batch (same sampled tokens)",
              f"loss fp32 {a['loss_fp32']:.6f}, bf16 {a['loss_bf16']:.6f}: relative difference "
              f"{a['loss_rel_diff']:.2e} (tolerance {LOSS_TOL}); fp32 recomputed differs by "
              f"{a['loss_recomputed_diff']:.1e}",
              f"gradient cosine bf16 vs fp32 {a['grad_cos_bf16']:.4f} (needs > {GRAD_COS_MIN}), "
              f"norm ratio {a['grad_norm_ratio']:.4f}; nulls: fp32 recomputed "
              f"{a['grad_cos_recomputed']:.4f}, fp32 on another batch "
              f"{a['grad_cos_other_batch']:.4f}"]
    ok = a["loss_rel_diff"] < LOSS_TOL and a["grad_cos_bf16"] > GRAD_COS_MIN
    if traj:
        t, s = traj["bf16_vs_fp32"], traj["seed_vs_seed"]
        lines += ["", f"## Trajectory: train.distill NCA, {traj['steps']} steps",
                  f"{'comparison':<24} {'mean |loss diff|':>17} {'win no c diff':>14} "
                  f"{'win with c diff':>16}"]
        for name, d in (("bf16 s0 vs fp32 s0", t), ("fp32 s1 vs fp32 s0 (null)", s)):
            lines.append(f"{name:<24} {d['mean_abs_loss_diff']:>17.4f} "
                         f"{d.get('eval_win_no_c', float('nan')):>+14.3f} "
                         f"{d.get('eval_win_c', float('nan')):>+16.3f}")
        lines.append("median s/step: " + ", ".join(f"{k} {v['step_s']:.2f}"
                                                   for k, v in traj["runs"].items()))
        noise = win_noise(traj)
        lines.append(f"win noise: 2 s.e. of a difference of two win rates on "
                     f"{traj['runs']['fp32_s0'].get('eval_levels', 200)} held-out levels: "
                     + ", ".join(f"{k[9:]} {v:.3f}" for k, v in noise.items()))
        within = t["mean_abs_loss_diff"] <= s["mean_abs_loss_diff"] and all(
            abs(t.get(k, 0)) <= max(abs(s.get(k, 0)), noise[k]) for k in noise)
        ok = ok and within
    faster = rate("ours", "bf16") > rate("ours", "fp32")
    lines += ["", f"verdict: bf16 agrees with fp32 within the tolerances: {'yes' if ok else 'no'}; "
              f"bf16 faster on this machine: {'yes' if faster else 'no'} "
              f"({rate('ours', 'bf16') / rate('ours', 'fp32'):.2f}x); `--precision auto` "
              f"picks {default} here (bf16 only where the CPU has native bf16 or on a GPU)"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    import torch

    from bench.common import add_step_args
    from nca_interp.checkpoint import load_checkpoint
    from nca_interp.models import auto_bf16

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_step_args(ap, batch=128, steps=3)
    ap.add_argument("--trajectory", type=int, default=50,
                    help="train.distill steps per precision (0: skip)")
    ap.add_argument("--distill-flags", default="--batch 128 --lr 1e-3",
                    help="further train.distill flags of the trajectory")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--report", default=None, help="re-print an earlier run's JSON")
    args = ap.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    if args.report:
        saved = json.loads(Path(args.report).read_text())
        args.argv = saved.get("argv", [])
        for k, v in saved.get("args", {}).items():
            setattr(args, k, v)
        text = report(args, saved["machine"], saved["gemm"], saved["steps"],
                      saved["agreement"], saved["trajectory"])
        print(text, end="")
        return saved
    options = args.task_options.split(",") if args.task_options else None
    machine = {"cpu": cpu_name(), "torch": torch.__version__,
               "capability": torch.backends.cpu.get_cpu_capability(),
               "native_bf16": auto_bf16(torch.device("cpu"))}
    model, _ = load_checkpoint(args.ckpt)
    g = gemm(model.config, args.threads)
    del model
    rows = steps_table(args)
    agree = agreement(args.ckpt, args.task, args.context, options, args.batch, args.threads)
    traj = (trajectory(args.ckpt, args.trajectory, args.threads, args.distill_flags.split())
            if args.trajectory else None)
    text = report(args, machine, g, rows, agree, traj)
    print(text, end="")
    if args.write:
        stem = Path("bench/results") / f"precision_{Path(args.ckpt).name}"
        stem.with_suffix(".txt").write_text(text)
        stem.with_suffix(".json").write_text(json.dumps(
            {"argv": args.argv, "args": {"batch": args.batch, "steps": args.steps,
                                         "threads": args.threads},
             "machine": machine, "gemm": g, "steps": rows, "agreement": agree,
             "trajectory": traj}, indent=1))
    return {"gemm": g, "steps": rows, "agreement": agree, "trajectory": traj}


if __name__ == "__main__":
    main()
