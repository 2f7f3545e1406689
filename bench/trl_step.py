r"""One NCA distillation step in our loop and in TRL's trainer (nca_interp.trl_nca), per KL
estimator, side by side in one run: seconds per step, sampled tokens per second, peak RSS.

    python -m bench.trl_step                                   # embedded Sokoban base, tiny
    python -m bench.trl_step --ckpt ~/.cache/nca_interp/models/smollm2-135m-instruct \
        --task facts --context facts --batch 8 --write          # the real model

Each (loop, estimator) runs in its own process under /usr/bin/time -v (peak RSS is the
process's), on the same prompts, sampling at temperature 1 with the same budget of new tokens:
a warm-up step, then `--steps` timed steps (median). Ours: `rollout.sample` (KV cache) +
`losses.loss_terms` + AdamW; TRL: `DistillationTrainer` with its own generation (HF generate)
and our loss. The null beside every row: the same loop with the full-vocabulary KL.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

KLS = ("full", "topk", "sampled")


def one(loop: str, kl: str, ckpt: str, task: str | None, context: str | None, batch: int,
        steps: int, threads: int, precision: str = "fp32", method: str = "nca",
        options: list[str] | None = None) -> dict:
    """Run `steps` + 1 steps of one configuration in this process; seconds and tokens. The
    first (warm-up) step runs under torch's FLOP counter: its FLOPs per sampled token, times a
    timed step's tokens, give the step's achieved FLOP/s. `precision` bf16 is autocast over
    fp32 weights in both loops (TRL's own default on any device); `method` opd drops the NCA
    term (our loop only)."""
    import contextlib

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from bench.common import self_distillation
    from nca_interp.losses import Estimator, combine, loss_terms
    from nca_interp.models import context_limit
    from nca_interp.rollout import onpolicy_batch

    student, teacher, tok, view, ctx = self_distillation(ckpt, task, context, options, threads)
    est = Estimator(kl, k=min(256, student.config.vocab_size - 1))
    levels = view.levels("train", batch * (steps + 1), 0)
    times, tokens = [], []
    counter = FlopCounterMode(display=False)
    terms = ("opd", "nca") if method == "nca" else ("opd",)
    if loop == "ours":
        amp = (torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16"
               else contextlib.nullcontext())
        opt = torch.optim.AdamW(student.parameters(), lr=1e-5)
        gen = torch.Generator().manual_seed(0)
        for s in range(steps + 1):
            t0 = time.perf_counter()
            with counter if s == 0 else contextlib.nullcontext(), amp:
                student.eval()
                b, _, _ = onpolicy_batch(student, tok, view, levels[s * batch:(s + 1) * batch],
                                         ctx, view.max_response_tokens(), 1.0, gen,
                                         context_limit(student))
                student.train()
                opt.zero_grad(set_to_none=True)
                combine(loss_terms(student, teacher, b, terms, estimator=est),
                        1.0 if method == "nca" else 0.0).backward()
                opt.step()
            times.append(time.perf_counter() - t0)
            tokens.append(int(b.resp_mask.sum()))
    else:
        from datasets import Dataset
        from transformers import TrainerCallback

        from nca_interp.trl_nca import NCADistillationConfig, NCADistillationTrainer

        data = Dataset.from_dict({"prompt": [view.prompt(lv) for lv in levels],
                                  "teacher_prompt": [view.prompt(lv, view.context(lv, ctx))
                                                     for lv in levels]})

        class Clock(TrainerCallback):
            def on_step_begin(self, *a, **k):
                if not times:  # the warm-up step: count its FLOPs
                    counter.__enter__()
                self.t0 = time.perf_counter()

            def on_step_end(self, *a, **k):
                times.append(time.perf_counter() - self.t0)
                if len(times) == 1:
                    counter.__exit__(None, None, None)

        args = NCADistillationConfig(
            output_dir="/tmp/bench_trl_step", per_device_train_batch_size=batch,
            max_steps=steps + 1, learning_rate=1e-5,
            max_completion_length=view.max_response_tokens(),
            temperature=1.0, nca_beta=1.0, kl=est.kind, kl_k=est.k, use_cpu=True, report_to=[],
            bf16=precision == "bf16",
            save_strategy="no", logging_steps=1, shuffle_dataset=False, disable_dropout=True,
            gradient_checkpointing=False)
        trainer = NCADistillationTrainer(model=student, teacher_model=teacher, args=args,
                                         train_dataset=data, processing_class=tok,
                                         callbacks=[Clock()])
        # identical losses: TRL's on the first batch it samples, and our loop's loss_terms on
        # the same tokens (uncached, the plain path), before any step
        inputs = trainer._generate_and_score_completions([data[i] for i in range(batch)])
        with torch.no_grad():
            first = {"trl": float(trainer.compute_loss(trainer.model, inputs)),
                     "ours": float(combine(loss_terms(student, teacher, trainer.batch_of(inputs),
                                                      ("opd", "nca"), estimator=est,
                                                      share_prefix=False), 1.0))}
        trainer.train()
        # sampled completion tokens (TRL's num_tokens counts prompts too)
        tokens = [h["completions/mean_length"] * batch for h in trainer.state.log_history
                  if "completions/mean_length" in h]
    rate = [t / s for t, s in zip(tokens[1:], times[1:])]  # tokens/s of each timed step
    flops_per_token = counter.get_total_flops() / max(tokens[0], 1)
    return {**({"first_loss": first} if loop == "trl" else {}),
            "flops_per_token": flops_per_token,
            "gflops_per_s": flops_per_token * statistics.median(rate) / 1e9,
            "step_s": statistics.median(times[1:]), "tokens": statistics.median(tokens[1:]),
            "step_times": times[1:], "step_tokens": tokens[1:],
            "tokens_per_s": statistics.median(rate), "tokens_per_s_range": [min(rate), max(rate)]}


def main(argv=None) -> dict:
    from bench.analysis_scale import measured
    from bench.common import add_step_args

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_step_args(ap, batch=32, steps=4)
    ap.add_argument("--kls", default=",".join(KLS))
    # a child: loop:kl[:precision[:method]]
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    if args.one:
        loop, kl, *rest = args.one.split(":")
        options = args.task_options.split(",") if args.task_options else None
        print(json.dumps(one(loop, kl, args.ckpt, args.task, args.context, args.batch,
                             args.steps, args.threads, *rest, options=options)))
        return {}
    rows = []
    for kl in args.kls.split(","):
        for loop in ("ours", "trl"):
            cmd = [sys.executable, "-m", "bench.trl_step", "--one", f"{loop}:{kl}", "--ckpt",
                   args.ckpt, "--batch", str(args.batch), "--steps", str(args.steps),
                   "--threads", str(args.threads)]
            cmd += ["--task", args.task] if args.task else []
            cmd += ["--context", args.context] if args.context else []
            m = measured(cmd, keep_stdout=True)
            out = json.loads(m.pop("stdout").strip().splitlines()[-1])
            rows.append({"loop": loop, "kl": kl, **out, **m})
    lines = [f"# python -m bench.trl_step --ckpt {args.ckpt} --batch {args.batch} "
             f"--steps {args.steps} --threads {args.threads}",
             f"{'loop':<5} {'estimator':<9} {'s/step':>8} {'tokens/step':>12} {'tokens/s':>9} "
             f"{'tokens/s over steps':>20} {'peak RSS GB':>12} {'tokens/s vs full':>17}"]
    for r in rows:
        full = next(x for x in rows if x["loop"] == r["loop"] and x["kl"] == "full")
        lo, hi = r["tokens_per_s_range"]
        ratio = r["tokens_per_s"] / full["tokens_per_s"]
        lines.append(f"{r['loop']:<5} {r['kl']:<9} {r['step_s']:>8.2f} {r['tokens']:>12.0f} "
                     f"{r['tokens_per_s']:>9.1f} {f'{lo:.1f} to {hi:.1f}':>20} "
                     f"{r['peak_rss_gb']:>12.2f} {ratio:>16.2f}x")
    for r in rows:
        if "first_loss" in r:
            f = r["first_loss"]
            lines.append(f"first step, {r['kl']}: on the batch TRL sampled, TRL's loss "
                         f"{f['trl']:.6f}, our loss_terms {f['ours']:.6f} "
                         f"(|diff| {abs(f['trl'] - f['ours']):.1e})")
    ours = {r["kl"]: r["tokens_per_s"] for r in rows if r["loop"] == "ours"}
    for r in rows:
        if r["loop"] == "trl":
            lines.append(f"ours / TRL sampled tokens/s, {r['kl']}: "
                         f"{ours[r['kl']] / r['tokens_per_s']:.2f}x")
    lines.append("s/step, tokens/s: medians over the timed steps (sampling + loss + update); "
                 "'over steps' is their min to max (the step-to-step noise a ratio must clear); "
                 "sampled lengths differ between runs, so rates are per sampled token. Our loop "
                 "samples with its KV-cache sampler, TRL with HF generate; one process each")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.write:
        stem = Path("bench/results") / f"trl_step_{Path(args.ckpt).name}"
        stem.with_suffix(".txt").write_text(text)
        stem.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    return {"rows": rows}


if __name__ == "__main__":
    main()
