"""SFT training throughput against the machine's fp32 matmul peak, measured in one run.

    python -m bench.train_throughput [--threads 2] [--batch 128]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from bench.common import matmul_peak_gflops, timeit
from nca_interp.forward import response_logits
from nca_interp.models import ModelConfig, build_model
from nca_interp.rollout import encode, target_batch
from nca_interp.tasks import make_task
from nca_interp.tokenizer import build_char_tokenizer


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    args = ap.parse_args(argv)
    torch.set_flush_denormal(True)
    peak = matmul_peak_gflops(args.threads)
    tok = build_char_tokenizer()
    model = build_model(ModelConfig(), tok)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    task = make_task("sokoban")
    levels = task.levels("bench", args.batch)
    prompts = [task.prompt(lv, task.context(lv, "state") if i % 3 else None)
               for i, lv in enumerate(levels)]
    ids, mask = encode(tok, prompts)
    resp, rmask = target_batch(tok, [task.target(lv) for lv in levels])

    def step():
        logits = response_logits(model, ids, mask, resp, rmask)
        loss = (F.cross_entropy(logits.transpose(1, 2), resp, reduction="none") * rmask).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()

    s = timeit(step, repeat=10, warmup=3)
    B, T = ids.shape[0], ids.shape[1] + resp.shape[1]
    cfg = model.config
    n_matmul = sum(p.numel() for n, p in model.named_parameters()
                   if p.dim() == 2 and "embed_tokens" not in n)  # lm_head included
    # fwd + bwd = 3 passes of 2 FLOPs per weight per token, plus attention scores and mixing
    flops = 6 * n_matmul * B * T + 3 * 4 * cfg.num_hidden_layers * B * T * T * cfg.hidden_size
    real_tokens = int(mask.sum() + rmask.sum())
    print(f"{'threads':<28}{args.threads}")
    print(f"{'matmul peak (GFLOP/s)':<28}{peak:.1f}")
    print(f"{'batch x padded length':<28}{B} x {T}")
    print(f"{'step time (s)':<28}{s:.3f}")
    print(f"{'tokens/s (padded)':<28}{B * T / s:.0f}")
    print(f"{'tokens/s (real)':<28}{real_tokens / s:.0f}")
    print(f"{'achieved GFLOP/s':<28}{flops / s / 1e9:.1f}")
    print(f"{'fraction of peak':<28}{flops / s / 1e9 / peak:.1%}")


if __name__ == "__main__":
    main()
