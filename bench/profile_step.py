"""Where one OPD and one NCA step spend their time on the real model: sampling, the teacher's
pass, the student's passes, the KL, backward, the optimizer. Each phase is timed on its own
(median of `--repeat`), in one process, after a warm-up; `--profile` adds torch.profiler's top
operators of one NCA update and of the sampler.

    python -m bench.profile_step [--batch 8] [--threads 2] [--repeat 3] [--prefix-cache both]
    python -m bench.profile_step --write      # also bench/results/profile_step.txt
    python -m bench.profile_step --ckpt runs/sokoban_smollm2_base --task sokoban \
        --context plan --batch 16 --threads 1 --write   # bench/results/profile_step_sokoban.txt

Default: SmolLM2-135M-Instruct (fetched) as student and frozen teacher on `facts`; `--ckpt`,
`--task`, `--context`, `--task-options` profile another checkpoint (self-distillation: the
student and a frozen copy as its teacher, as `bench.common.self_distillation` builds them).

`--prefix-cache off|on|both`: the uncached path (every view runs its whole prompt) and the
shared-prefix path (nca_interp.prefix: the teacher's prefix once per run, the student's once
per step), side by side in this one run. The model comes from
`python -m nca_interp.fetch smollm2-135m-instruct`.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch


def _median(fn, repeat: int) -> float:
    from bench.common import timeit

    return timeit(fn, repeat=repeat, warmup=1)


def phases(student, teacher, tok, task, batch, repeat: int, cached: bool) -> dict[str, float]:
    """Seconds of each phase of an NCA step (OPD's are the subset without the context view)."""
    from nca_interp.forward import response_logits
    from nca_interp.losses import combine, loss_terms
    from nca_interp.prefix import PrefixCache, view_logits
    from nca_interp.rollout import pad_id, sample, stop_ids

    b = batch
    cache = PrefixCache() if cached else None
    opt = torch.optim.AdamW(student.parameters(), lr=0.0)
    max_new = task.max_response_tokens()
    out = {}
    gen = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    out["sampling"] = _median(lambda: sample(student, b.x_ids, b.x_mask, max_new,
                                             stop_ids(tok, student), pad_id(tok), 1.0, gen()),
                              repeat)

    def teacher_pass():
        with torch.no_grad():
            if cached:
                view_logits(teacher, b.cx_ids, b.cx_mask, b.resp, b.resp_mask, cache)
            else:
                response_logits(teacher, b.cx_ids, b.cx_mask, b.resp, b.resp_mask)
    out["teacher [c,x] forward"] = _median(teacher_pass, repeat)
    for name, ids, mask in (("student x forward", b.x_ids, b.x_mask),
                            ("student [c,x] forward", b.cx_ids, b.cx_mask)):
        def fwd(ids=ids, mask=mask):
            with torch.no_grad():
                if cached:
                    view_logits(student, ids, mask, b.resp, b.resp_mask)
                else:
                    response_logits(student, ids, mask, b.resp, b.resp_mask)
        out[name] = _median(fwd, repeat)
    for method, terms_needed, beta in (("opd", ("opd",), 0.0), ("nca", ("opd", "nca"), 1.0)):
        def update(terms_needed=terms_needed, beta=beta):
            opt.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            loss = combine(loss_terms(student, teacher, b, terms_needed,
                                      prefix_cache=cache, share_prefix=cached), beta)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            opt.step()
            t3 = time.perf_counter()
            return t1 - t0, t2 - t1, t3 - t2
        update()
        parts = sorted((update() for _ in range(repeat)), key=sum)[repeat // 2]
        out[f"{method}: forwards + KL"], out[f"{method}: backward"], out[f"{method}: AdamW"] = \
            parts
    return out


def top_ops(fn, n: int = 12) -> str:
    from torch.profiler import ProfilerActivity, profile

    fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=n)


def main(argv=None) -> None:
    from bench.common import self_distillation
    from nca_interp.fetch import fetch
    from nca_interp.rollout import onpolicy_batch

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", default=None,
                    help="checkpoint folder (default: the fetched SmolLM2-135M-Instruct)")
    ap.add_argument("--task", default=None, help="default: facts for the fetched model, else "
                                                 "the checkpoint's own")
    ap.add_argument("--context", default=None)
    ap.add_argument("--task-options", default=None, help="KEY=VALUE,...")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--prefix-cache", choices=("off", "on", "both"), default="both")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    folder = args.ckpt or str(fetch("smollm2-135m-instruct"))
    task_name = args.task or (None if args.ckpt else "facts")
    options = [o for o in (args.task_options or "").split(",") if o] or None
    student, teacher, tok, task, ctx = self_distillation(folder, task_name, args.context,
                                                         options, args.threads)
    levels = task.levels("bench", args.batch)
    b, _, _ = onpolicy_batch(student, tok, task, levels, ctx, task.max_response_tokens(),
                             1.0, torch.Generator().manual_seed(0))
    student.train()
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.prefix_cache]
    cols = {m: phases(student, teacher, tok, task, b, args.repeat, m) for m in modes}
    names = list(next(iter(cols.values())))
    model = Path(folder).name if args.ckpt else "SmolLM2-135M-Instruct"
    head = (f"{model}, {task.name} (context {ctx}), batch {args.batch}, {args.threads} threads, "
            f"fp32; "
            f"tokens per batch: x {int(b.x_mask.sum())}, [c, x] {int(b.cx_mask.sum())}, "
            f"sampled y {int(b.resp_mask.sum())}; median of {args.repeat} after a warm-up; "
            f"load average at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
            f"(above the threads used: other processes shared the cores, so compare phases "
            f"within this run, not with other runs)")
    label = {False: "uncached s", True: "prefix-cached s"}
    lines = [head, f"{'phase':<28}" + "".join(f"{label[m]:>17}" for m in modes)
             + (f"{'cached / uncached':>19}" if len(modes) == 2 else "")]
    for n in names:
        row = f"{n:<28}" + "".join(f"{cols[m][n]:>17.2f}" for m in modes)
        if len(modes) == 2:
            row += f"{cols[True][n] / cols[False][n]:>18.2f}x"
        lines.append(row)
    for m in modes:
        c = cols[m]
        opd = c["sampling"] + sum(v for k, v in c.items() if k.startswith("opd:"))
        nca = c["sampling"] + sum(v for k, v in c.items() if k.startswith("nca:"))
        # NCA's passes beyond OPD's: the student's [c, x] forward and its backward (~2 forwards)
        implied = (opd + 3 * c["student [c,x] forward"]) / opd
        lines.append(f"{label[m]}: OPD step {opd:.2f} s, NCA step {nca:.2f} s, NCA / OPD "
                     f"{nca / opd:.2f}x (the passes NCA adds imply {implied:.2f}x: one student "
                     f"[c,x] forward + its backward at ~2 forwards)")
    text = "\n".join(lines)
    if args.profile:
        from nca_interp.losses import combine, loss_terms
        from nca_interp.rollout import pad_id, sample, stop_ids

        text += "\n\ntop operators, one NCA update (uncached):\n" + top_ops(
            lambda: combine(loss_terms(student, teacher, b, ("opd", "nca"),
                                       share_prefix=False), 1.0).backward())
        text += "\ntop operators, sampling one batch:\n" + top_ops(
            lambda: sample(student, b.x_ids, b.x_mask, task.max_response_tokens(),
                           stop_ids(tok, student), pad_id(tok), 1.0,
                           torch.Generator().manual_seed(0)))
    print(text)
    if args.write:
        name = "profile_step.txt" if task.name == "facts" and not args.ckpt else \
            f"profile_step_{task.name}.txt"
        out = Path(__file__).parent / "results" / name
        cmd = "python -m bench.profile_step " + " ".join(argv if argv is not None else
                                                          __import__("sys").argv[1:])
        out.write_text(f"$ {cmd}\n{text}\n")


if __name__ == "__main__":
    main()
