"""The analyses at real checkpoint sizes: wall time and peak resident memory, each beside a
reference measured in the same run.

    python -m bench.analysis_scale --shape qwen3-0.6b      # 28 layers, d 1024, vocab 151,936
    python -m bench.analysis_scale --shape qwen3-1.7b      # 28 layers, d 2048, 16 q / 8 kv heads
    python -m bench.analysis_scale --shape tiny            # what the default tests run

Random-init folders of the shape are written in bf16 and sharded as `save_pretrained` shards
them (an initial checkpoint, two perturbed "students" and a teacher), then each analysis runs as
its own process under `/usr/bin/time -v` (peak resident set size):
  param_delta (init + 2 checkpoints)         reference: reading the three folders once, both
                                             from the page cache (warm) and with the folders'
                                             pages evicted first (cold: posix_fadvise DONTNEED,
                                             read from the disk, as a user's fresh checkpoints)
  layer_sim (3 checkpoints + random-init)    reference: a plain HF forward over the same tokens
  grad_align (one checkpoint, batch 4)       reference: the same HF forward
Results go to bench/results/analysis_scale_<shape>.{json,txt}. Needs free disk of about 4x the
bf16 model size.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

SHAPES = {
    "tiny": dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=None),
    "qwen3-0.6b": dict(num_hidden_layers=28, hidden_size=1024, intermediate_size=3072,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       vocab_size=151936),
    "qwen3-1.7b": dict(num_hidden_layers=28, hidden_size=2048, intermediate_size=6144,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       vocab_size=151936),
}


def build(shape: str, folder: Path, seed: int, base: Path | None = None,
          scale: float = 1e-3) -> Path:
    """A bf16 folder of `shape`: random init, or `base` with every tensor perturbed (read and
    written one shard at a time)."""
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM, Qwen3Config

    from nca_interp.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    if base is not None:
        shutil.copytree(base, folder)
        gen = torch.Generator().manual_seed(seed)
        for f in sorted(folder.glob("*.safetensors")):
            t = load_file(f)
            save_file({k: (v.float() + scale * torch.randn(v.shape, generator=gen)).to(v.dtype)
                       for k, v in t.items()}, f, metadata={"format": "pt"})
        return folder
    kw = dict(SHAPES[shape])
    kw["vocab_size"] = kw["vocab_size"] or len(tok)
    cfg = Qwen3Config(**kw, tie_word_embeddings=False, max_position_embeddings=4096,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(folder, max_shard_size="500MB")
    tok.save_pretrained(folder)
    del model
    return folder


def measured(cmd: list[str], keep_stdout: bool = False) -> dict:
    """Wall seconds and peak RSS (GB) of a command, from /usr/bin/time -v (and its stdout)."""
    t0 = time.time()
    out = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    wall = time.time() - t0
    if out.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", out.stderr).group(1))
    return {"wall_s": round(wall, 2), "peak_rss_gb": round(rss_kb / 1e6, 3),
            **({"stdout": out.stdout} if keep_stdout else {})}


def evict(folders: list[Path]) -> None:
    """Drop the folders' file pages from the page cache (no privileges needed for files we
    can open), so the next command reads them from the disk."""
    import os

    for d in folders:
        for f in Path(d).iterdir():
            if f.is_file():
                fd = os.open(f, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)


def read_folders_cmd(folders: list[Path]) -> list[str]:
    code = ("import sys; from safetensors import safe_open; from pathlib import Path\n"
            "for d in sys.argv[1:]:\n"
            "    for f in sorted(Path(d).glob('*.safetensors')):\n"
            "        with safe_open(str(f), framework='pt') as h:\n"
            "            [h.get_tensor(k).sum() for k in h.keys()]\n")
    return [sys.executable, "-c", code, *map(str, folders)]


def forward_cmd(folder: Path, n_levels: int) -> list[str]:
    code = ("import sys, torch\n"
            "from nca_interp.checkpoint import load_checkpoint\n"
            "from nca_interp.rollout import encode\n"
            "from nca_interp.tasks import make_task\n"
            "torch.set_num_threads(int(sys.argv[3]))\n"
            "m, tok = load_checkpoint(sys.argv[1], dtype='stored')\n"
            "t = make_task('sokoban'); lv = t.levels('test', int(sys.argv[2]))\n"
            "ids, mask = encode(tok, [t.prompt(x, t.context(x, 'plan')) + x.solution "
            "for x in lv])\n"
            "with torch.no_grad(): m(input_ids=ids, attention_mask=mask)\n")
    return [sys.executable, "-c", code, str(folder), str(n_levels), "2"]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    ap.add_argument("--work", default=None, help="folder for the checkpoints (default: tmp)")
    ap.add_argument("--levels", type=int, default=16)
    ap.add_argument("--reuse", action="store_true",
                    help="keep the folders already in --work (same shape) instead of rebuilding")
    ap.add_argument("--out", default=None, help="default: bench/results/analysis_scale_<shape>")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--analyses", default="param_delta,layer_sim,grad_align",
                    help="which rows to measure (comma-separated); references always run")
    args = ap.parse_args(argv)
    if "param_delta" in args.analyses.split(",") and not hasattr(os, "posix_fadvise"):
        raise SystemExit("error: param_delta's cold-read rows evict pages with posix_fadvise "
                         "(Linux); run them on Linux or pass --analyses layer_sim,grad_align")
    import tempfile

    work = Path(args.work or tempfile.mkdtemp(prefix="analysis_scale_"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    init, a, b = work / "init", work / "a", work / "b"
    reuse = args.reuse and all((f / "config.json").exists() and json.loads(
        (f / "config.json").read_text())["hidden_size"] == SHAPES[args.shape]["hidden_size"]
        for f in (init, a, b))
    if not reuse:
        for f in (init, a, b):
            shutil.rmtree(f, ignore_errors=True)
        build(args.shape, init, 0)
        build(args.shape, a, 1, base=init)
        build(args.shape, b, 2, base=init)
    build_s = time.time() - t0
    py = [sys.executable, "-m"]
    th = ["--threads", str(args.threads)]
    wanted = set(args.analyses.split(","))
    unknown = wanted - {"param_delta", "layer_sim", "grad_align"}
    if unknown:
        raise SystemExit(f"error: --analyses knows param_delta, layer_sim, grad_align, not "
                         f"{sorted(unknown)}")
    folders = [init, a, b]
    measured(read_folders_cmd(folders))  # warm the page cache (not timed)
    rows = {"read 3 folders once (reference)": measured(read_folders_cmd(folders))}
    pd_cmd = [*py, "nca_interp.param_delta", str(a), str(b), "--init", str(init), "--out",
              str(work / "pd")]
    if "param_delta" in wanted:
        rows["param_delta init + 2"] = measured(pd_cmd)
        evict(folders)
        rows["read 3 folders once, cold (reference)"] = measured(read_folders_cmd(folders))
        evict(folders)
        rows["param_delta init + 2, cold"] = measured(pd_cmd)
    if wanted & {"layer_sim", "grad_align"}:
        rows["HF forward, same tokens (reference)"] = measured(forward_cmd(a, args.levels))
    if "layer_sim" in wanted:
        rows["layer_sim 3 + random-init"] = measured(
            [*py, "nca_interp.layer_sim", str(init), str(a), str(b), "--task", "sokoban",
             "--context", "plan", "--n-levels", str(args.levels), "--batch", "4",
             "--out", str(work / "ls"), *th])
    if "grad_align" in wanted:
        rows["grad_align batch 4"] = measured(
            [*py, "nca_interp.grad_align", str(a), "--teacher", str(init), "--task", "sokoban",
             "--context", "plan", "--batch", "4", "--micro-batch", "2", "--parts", "2",
             "--precision", "bf16", "--out", str(work / "ga"), *th])
    from nca_interp.tensorfiles import TensorFolder

    with TensorFolder(init) as f:
        n_params = sum(int(torch.Size(f.shape(k)).numel()) for k in f.names())
    report = {"shape": args.shape, "parameters": n_params, "dtype": "bfloat16",
              "levels": args.levels, "threads": args.threads, "build_s": round(build_s, 1),
              "rows": rows}
    built = "reused" if reuse else f"built in {build_s:.0f} s"
    lines = [f"shape {args.shape}: {n_params / 1e9:.3f}B parameters, bf16, "
             f"{len(list(init.glob('*.safetensors')))} shards per folder; folders {built}",
             f"{'':<40}{'wall s':>10}{'peak RSS GB':>14}"]
    for name, r in rows.items():
        lines.append(f"{name:<40}{r['wall_s']:>10.1f}{r['peak_rss_gb']:>14.2f}")
    ref = rows["read 3 folders once (reference)"]["wall_s"]
    if "param_delta init + 2" in rows:
        cold = rows["read 3 folders once, cold (reference)"]["wall_s"]
        lines.append(f"param_delta / reading once: "
                     f"{rows['param_delta init + 2']['wall_s'] / ref:.2f}x from the page cache, "
                     f"{rows['param_delta init + 2, cold']['wall_s'] / cold:.2f}x from the disk")
    text = "\n".join(lines)
    print(text)
    suffix = "" if wanted == {"param_delta", "layer_sim", "grad_align"} else \
        "_" + "_".join(sorted(wanted))
    out = str(args.out or f"bench/results/analysis_scale_{args.shape}{suffix}")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out + ".json").write_text(json.dumps(report, indent=1))
    Path(out + ".txt").write_text(f"# python -m bench.analysis_scale --shape {args.shape} "
                                  f"--analyses {args.analyses}\n" + text + "\n")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return report


if __name__ == "__main__":
    main()
