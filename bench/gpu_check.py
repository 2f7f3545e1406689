"""GPU check: a few OPD and NCA steps of a random-init Qwen3 of a real model's shape, in bf16,
with tokens/s and peak memory, then layer_sim on the result. Only where a GPU is lent; never CI.

    python -m bench.gpu_check --shape qwen3-0.6b --device cuda          # the prepared check
    python -m bench.gpu_check --shape tiny --device cpu --steps 2       # what the tests run

The model has Qwen3-0.6B's shape (28 layers, d 1024, 16 query / 8 KV heads, MLP 3072) and a
151,936-token vocabulary (the char tokenizer padded with unused tokens), so full-vocabulary
KL, sampling noise and logits have their real size; weights are random (nothing is
downloaded), so the rollouts are noise: this measures cost, not learning.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

SHAPES = {  # n_layers, d_model, n_heads, n_kv_heads, d_mlp, vocab
    "qwen3-0.6b": (28, 1024, 16, 8, 3072, 151_936),
    "tiny": (2, 64, 4, 2, 128, 512),
}


def padded_tokenizer(vocab: int):
    """The char tokenizer with unused tokens added up to `vocab` entries."""
    from nca_interp.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    tok.add_tokens([f"<unused_{i}>" for i in range(vocab - len(tok))])
    return tok


def build(folder: Path, shape: str) -> Path:
    from nca_interp.checkpoint import save_checkpoint
    from nca_interp.models import ModelConfig, build_model
    from nca_interp.tasks import make_task, task_record

    n_layers, d, heads, kv, mlp, vocab = SHAPES[shape]
    tok = padded_tokenizer(vocab)
    model = build_model(ModelConfig("qwen3", n_layers, d, heads, kv, mlp, max_len=1024), tok)
    return save_checkpoint(folder, model, tok, {"task": task_record(make_task("sokoban"))})


def main(argv=None) -> dict:
    from nca_interp import layer_sim
    from train import distill

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shape", default="qwen3-0.6b", choices=sorted(SHAPES))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--levels", type=int, default=64, help="layer_sim levels")
    ap.add_argument("--out", default="bench/results/gpu_check.json")
    args = ap.parse_args(argv)
    cuda = args.device.startswith("cuda")
    results = {"shape": shape_info(args.shape), "device": device_name(args.device),
               "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        base = build(Path(tmp) / "base", args.shape)
        n_params = sum(p.numel() for p in _load(base).parameters())
        results["shape"]["params"] = n_params
        for method in ("opd", "nca"):
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            out = Path(tmp) / method
            t0 = time.time()
            distill.main(["--method", method, "--student", str(base), "--out", str(out),
                          "--device", args.device, "--steps", str(args.steps), "--batch",
                          str(args.batch), "--micro-batch", str(args.micro_batch),
                          "--context", "plan", "--save-every", str(args.steps),
                          "--eval-every", str(10 * args.steps), "--eval-levels", "16"])
            log = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
            steady = log[1:] or log  # the first step includes CUDA warm-up
            step_s = sum(r["step_s"] for r in steady) / len(steady)
            sample_s = sum(r["sample_s"] for r in steady) / len(steady)
            resp = sum(r["response_len"] for r in steady) / len(steady)
            results["runs"][method] = {
                "step_s": step_s, "sample_s": sample_s, "response_tokens": resp,
                "sampled_tokens_per_s": args.batch * resp / sample_s,
                "prompts_per_s": args.batch / step_s,
                "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
                "wall_s": time.time() - t0}
        t0 = time.time()
        rep = layer_sim.main([str(base), str(Path(tmp) / "opd"), str(Path(tmp) / "nca"),
                              "--context", "plan", "--n-levels", str(args.levels), "--device",
                              args.device, "--batch", "16", "--out", str(Path(tmp) / "ls")])
        results["layer_sim"] = {"seconds": time.time() - t0,
                                "cos_last_layer": {k: v["cos"][-1]
                                                   for k, v in rep["results"].items()}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))
    return results


def _load(path):
    from nca_interp.checkpoint import load_checkpoint

    return load_checkpoint(path)[0]


def shape_info(shape: str) -> dict:
    n_layers, d, heads, kv, mlp, vocab = SHAPES[shape]
    return {"name": shape, "n_layers": n_layers, "d_model": d, "n_heads": heads,
            "n_kv_heads": kv, "d_mlp": mlp, "vocab": vocab}


def device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return "cpu"


if __name__ == "__main__":
    main()
