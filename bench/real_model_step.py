"""One distillation step on a real pretrained model (SmolLM2-135M-Instruct, the `facts` task):
sampling, OPD update, NCA update, tokens/s and peak resident memory per phase; our KV-cache
sampler against HF `generate` at this size, beside the floor under any fp32 decoder (the
step's matrix products alone: at batch 8 a step is bound by reading the weights). Every phase
runs in its own process (so its peak RSS is its own), one after the other, in one invocation.

    python -m bench.real_model_step [--batch 8] [--threads 2] [--repeat 3]
    python -m bench.real_model_step --write      # also bench/results/real_model_step.txt

The model comes from `python -m nca_interp.fetch smollm2-135m-instruct` (fetched if missing).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

import torch

PHASES = ("load", "sample", "opd", "nca", "greedy_ours", "greedy_hfpath", "greedy_hf", "floor")


def _setup(batch: int):
    from nca_interp.checkpoint import load_checkpoint
    from nca_interp.fetch import fetch
    from nca_interp.rollout import onpolicy_batch
    from nca_interp.tasks import make_task

    folder = fetch("smollm2-135m-instruct")
    student, tok = load_checkpoint(folder)
    task = make_task("facts").for_tokenizer(tok)
    levels = task.levels("bench", batch)
    gen = torch.Generator().manual_seed(0)
    b, _, _ = onpolicy_batch(student, tok, task, levels, "facts", task.max_response_tokens(),
                             1.0, gen)
    return folder, student, tok, task, levels, b


def phase(name: str, batch: int, repeat: int) -> dict:
    """Seconds (median of `repeat`) of one phase, its token counts, and this process's peak
    RSS (GB), which includes loading the model(s) the phase needs."""
    from bench.common import timeit
    from nca_interp.checkpoint import load_checkpoint
    from nca_interp.losses import combine, loss_terms
    from nca_interp.prefix import PrefixCache
    from nca_interp.rollout import encode, pad_id, sample, stop_ids

    folder, student, tok, task, levels, b = _setup(batch)
    n_resp = int(b.resp_mask.sum())
    out = {"phase": name, "batch": batch, "resp_tokens": n_resp,
           "x_tokens": int(b.x_mask.sum()), "cx_tokens": int(b.cx_mask.sum())}
    max_new = task.max_response_tokens()
    if name in ("opd", "nca"):
        teacher, _ = load_checkpoint(folder)
        teacher.requires_grad_(False)
        opt = torch.optim.AdamW(student.parameters(), lr=0.0)  # lr 0: one model throughout
        beta = 1.0 if name == "nca" else 0.0

        cache = PrefixCache()  # as training holds it: the teacher's prefix once per run

        def update():
            terms = loss_terms(student, teacher, b, ("opd", "nca") if beta else ("opd",),
                               prefix_cache=cache)
            opt.zero_grad()
            combine(terms, beta).backward()
            opt.step()
        student.train()
        out["seconds"] = timeit(update, repeat=repeat, warmup=1)
    elif name == "sample":
        out["seconds"] = timeit(lambda: sample(
            student, b.x_ids, b.x_mask, max_new, stop_ids(tok, student), pad_id(tok), 1.0,
            torch.Generator().manual_seed(0)), repeat=repeat, warmup=1)
    elif name == "floor":
        out["seconds"] = timeit(lambda: weight_reads(student, batch), repeat=repeat, warmup=1)
        out["steps"] = 1
    elif name in ("greedy_ours", "greedy_hfpath", "greedy_hf"):
        ids, mask = encode(tok, [task.prompt(lv) for lv in levels])
        ours, _ = sample(student, ids, mask, max_new, stop_ids(tok, student), pad_id(tok), 0.0)
        out["steps"] = ours.shape[1]
        hf = student.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new,
                              do_sample=False, eos_token_id=stop_ids(tok, student),
                              pad_token_id=pad_id(tok))[:, ids.shape[1]:]
        n = min(ours.shape[1], hf.shape[1])
        out["agreement"] = float((ours[:, :n] == hf[:, :n]).float().mean())
        if name != "greedy_hf":
            fn = lambda: sample(student, ids, mask, max_new, stop_ids(tok, student),  # noqa
                                pad_id(tok), 0.0, fast=name == "greedy_ours")
        else:
            fn = lambda: student.generate(  # noqa: E731
                input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False,
                eos_token_id=stop_ids(tok, student), pad_token_id=pad_id(tok))
        out["seconds"] = timeit(fn, repeat=repeat, warmup=1)
    else:
        out["seconds"] = 0.0
    out["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    return out


@torch.no_grad()
def weight_reads(model, batch: int) -> None:
    """The matrix products of one decoding step at this batch (every linear layer and the LM
    head, each read once from memory): the floor under any fp32 decoder of these weights."""
    x = {}
    for mod in model.modules():
        if isinstance(mod, torch.nn.Linear):
            d = mod.in_features
            x.setdefault(d, torch.randn(batch, d))
            torch.nn.functional.linear(x[d], mod.weight)


def table(rows: dict[str, dict], threads: int) -> str:
    load, s, o, n = rows["load"], rows["sample"], rows["opd"], rows["nca"]
    tok = o["resp_tokens"]
    lines = [f"SmolLM2-135M-Instruct, facts task, batch {o['batch']}, {threads} threads, fp32; "
             f"tokens per batch: x {o['x_tokens']}, [c, x] {o['cx_tokens']}, sampled y {tok}",
             f"{'phase':<34}{'seconds':>9}{'y tokens/s':>12}{'peak RSS GB':>13}",
             f"{'load model + sample batch (null)':<34}{'-':>9}{'-':>12}"
             f"{load['peak_rss_gb']:>13.2f}"]
    for label, r, t in (("sampling (KV cache, T=1)", s, s["seconds"]),
                        ("OPD update (fwd x2, bwd, AdamW)", o, o["seconds"]),
                        ("NCA update (+ student [c,x] pass)", n, n["seconds"]),
                        ("OPD step = sampling + update", o, s["seconds"] + o["seconds"]),
                        ("NCA step = sampling + update", n, s["seconds"] + n["seconds"])):
        lines.append(f"{label:<34}{t:>9.2f}{tok / t:>12.1f}{r['peak_rss_gb']:>13.2f}")
    step = (s["seconds"] + n["seconds"]) / (s["seconds"] + o["seconds"])
    lines.append(f"NCA / OPD step: {step:.2f}x (update only {n['seconds'] / o['seconds']:.2f}x)")
    go, gp, gh, fl = rows["greedy_ours"], rows["greedy_hfpath"], rows["greedy_hf"], rows["floor"]
    lines.append(f"greedy decoding, same prompts ({go['steps']} tokens): ours "
                 f"{go['seconds']:.2f} s, our loop through the HF forward "
                 f"{gp['seconds']:.2f} s, HF generate {gh['seconds']:.2f} s; HF / ours "
                 f"{gh['seconds'] / go['seconds']:.2f}x, token agreement {go['agreement']:.4f}")
    floor = fl["seconds"] * go["steps"]
    lines.append(f"weight-read floor: the step's matrix products alone {fl['seconds'] * 1e3:.1f} "
                 f"ms x {go['steps']} tokens = {floor:.2f} s; HF generate is "
                 f"{gh['seconds'] / floor:.2f}x the floor, ours {go['seconds'] / floor:.2f}x")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    if args.phase:
        print(json.dumps(phase(args.phase, args.batch, args.repeat)))
        return
    rows = {}
    for name in PHASES:
        done = subprocess.run([sys.executable, "-m", "bench.real_model_step", "--phase", name,
                               "--batch", str(args.batch), "--threads", str(args.threads),
                               "--repeat", str(args.repeat)], capture_output=True, text=True,
                              check=True)
        rows[name] = json.loads(done.stdout.strip().splitlines()[-1])
    text = table(rows, args.threads)
    print(text)
    if args.write:
        out = Path(__file__).parent / "results" / "real_model_step.txt"
        out.write_text(f"$ python -m bench.real_model_step --batch {args.batch} --threads "
                       f"{args.threads} --repeat {args.repeat} --write\n{text}\n")


if __name__ == "__main__":
    main()
