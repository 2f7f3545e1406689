"""The KL estimators trainers use at scale, audited against the full-vocabulary KL on one
on-policy batch of a checkpoint: their bias, the direction of their gradient, and the teacher
memory they save.

    python -m bench.kl_estimators                                   # embedded Sokoban OPD
    python -m bench.kl_estimators --ckpt runs/facts_opd_s0 --batch 8 --ks 256 --write

For each loss term (OPD: KL(g(.|x) || f(.|x,c)); NCA: KL(sg[g(.|x)] || g(.|x,c))) and each
estimator (`nca_interp.losses.Estimator`), on the same sampled batch split into two halves:
  value      the estimator's token-mean value beside the full KL's (bias = value - full)
  cos(full)  cosine of its gradient with the full KL's gradient, both on the whole batch
  floor      the noise floor beside it: the cosine between the *full* gradient on the two halves
             (an estimator whose cos(full) sits at or above this floor points where the full
             gradient does, as far as one batch can tell); and its own half-half cosine
  teacher    floats per token the teacher must provide (the full logits are |V|), relative
Gradients are of the student's parameters, held in memory (the tiny and the 135M models fit).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from nca_interp.checkpoint import load_checkpoint
from nca_interp.forward import response_logits
from nca_interp.losses import Estimator, estimated_kl
from nca_interp.models import context_limit
from nca_interp.rollout import onpolicy_batch
from nca_interp.runs import resolve_task_and_context, teacher_of


def estimators(ks: list[int]) -> list[Estimator]:
    out = [Estimator()]
    for k in ks:
        out += [Estimator("topk", k, "p", "renorm"), Estimator("topk", k, "q", "renorm"),
                Estimator("topk", k, "p", "bucket"), Estimator("topk", k, "p", "none")]
    return out + [Estimator("sampled", form="k1"), Estimator("sampled", form="k3")]


def gradient(student, teacher, batch, term: str, est: Estimator) -> tuple[torch.Tensor, float]:
    """(flattened gradient, value) of one term on `batch`."""
    student.zero_grad(set_to_none=True)
    g = response_logits(student, batch.x_ids, batch.x_mask, batch.resp, batch.resp_mask)
    if term == "opd":
        with torch.no_grad():
            f_c = response_logits(teacher, batch.cx_ids, batch.cx_mask, batch.resp,
                                  batch.resp_mask)
        loss, value = estimated_kl(est, g, f_c, batch.resp, batch.resp_mask)
    else:
        g_c = response_logits(student, batch.cx_ids, batch.cx_mask, batch.resp, batch.resp_mask)
        loss, value = estimated_kl(est, g.detach(), g_c, batch.resp, batch.resp_mask)
    loss.backward()
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten().double()
                      for p in student.parameters()])
    student.zero_grad(set_to_none=True)
    return flat, float(value)


def cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(a @ b / (a.norm() * b.norm()).clamp(min=1e-300))


def run(ckpt: str, teacher: str | None = None, batch: int = 64, ks: list[int] = (8, 32),
        seed: int = 0, context: str | None = None) -> dict:
    task, ctx = resolve_task_and_context([ckpt], None, context)
    student, tok = load_checkpoint(ckpt)
    teacher_model, _ = load_checkpoint(teacher_of(ckpt, teacher))
    teacher_model.requires_grad_(False)
    view = task.for_tokenizer(tok)
    levels = task.levels("grad", batch, seed)
    gen = torch.Generator().manual_seed(seed)
    b, _, _ = onpolicy_batch(student, tok, view, levels, ctx, view.max_response_tokens(), 1.0,
                             gen, min(context_limit(student), context_limit(teacher_model)))
    half = batch // 2
    halves = [b.rows(0, half), b.rows(half, batch)]
    vocab = student.config.vocab_size
    student.train()
    rows = []
    for term in ("opd", "nca"):
        full, full_value = gradient(student, teacher_model, b, term, Estimator())
        f1, _ = gradient(student, teacher_model, halves[0], term, Estimator())
        f2, _ = gradient(student, teacher_model, halves[1], term, Estimator())
        floor = cos(f1, f2)
        for est in estimators(list(ks)):
            if est.kind == "topk" and est.k >= vocab:
                continue
            g, value = (full, full_value) if est.kind == "full" else \
                gradient(student, teacher_model, b, term, est)
            e1, _ = gradient(student, teacher_model, halves[0], term, est)
            e2, _ = gradient(student, teacher_model, halves[1], term, est)
            rows.append({"term": term, "estimator": est.label, "value": value,
                         "full_value": full_value, "bias": value - full_value,
                         "cos_full": cos(g, full), "floor_full": floor,
                         "self_floor": cos(e1, e2),
                         "teacher_floats": est.teacher_floats_per_token(vocab),
                         "teacher_share": est.teacher_floats_per_token(vocab) / vocab})
    return {"checkpoint": ckpt, "task": task.name, "context": ctx, "batch": batch,
            "vocab": vocab, "tokens": int(b.resp_mask.sum()), "rows": rows}


def format_report(r: dict) -> str:
    lines = [f"# python -m bench.kl_estimators --ckpt {r['checkpoint']} --batch {r['batch']}",
             f"task {r['task']}, context {r['context']}, vocabulary {r['vocab']}, "
             f"{r['tokens']} sampled response tokens",
             f"{'term':<5} {'estimator':<26} {'value':>8} {'full KL':>8} {'bias':>8} "
             f"{'cos(full)':>9} {'floor':>7} {'own floor':>9} {'teacher floats':>14}"]
    for row in r["rows"]:
        lines.append(f"{row['term']:<5} {row['estimator']:<26} {row['value']:>8.4f} "
                     f"{row['full_value']:>8.4f} {row['bias']:>+8.4f} {row['cos_full']:>9.3f} "
                     f"{row['floor_full']:>7.3f} {row['self_floor']:>9.3f} "
                     f"{row['teacher_floats']:>8.0f} ({row['teacher_share']:.1%})")
    lines.append("cos(full): the estimator's gradient against the full KL's on the whole batch; "
                 "floor: the full gradient's own half-half cosine (what one batch can resolve); "
                 "own floor: the estimator's half-half cosine; teacher floats: per token, share "
                 "of the full logits")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    from nca_interp.assets import embedded

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", default=str(embedded("sokoban_opd")))
    ap.add_argument("--teacher", default=None)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--ks", default="8,32", help="top-k sizes, comma-separated")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--write", action="store_true",
                    help="write bench/results/kl_estimators_<checkpoint>.{txt,json}")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    r = run(args.ckpt, args.teacher, args.batch, [int(k) for k in args.ks.split(",")])
    text = format_report(r)
    print(text, end="")
    if args.write:
        stem = Path("bench/results") / f"kl_estimators_{Path(args.ckpt).name}"
        stem.with_suffix(".txt").write_text(text)
        stem.with_suffix(".json").write_text(json.dumps(r, indent=1))
    return r


if __name__ == "__main__":
    main()
