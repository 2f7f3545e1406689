"""The analysis suite against its floor: each analysis's wall time beside the passes it runs and
the time of one pass, measured side by side in one run on one teacher / student pair.

    python -m bench.analysis_floor                     # small sizes: minutes (the default)
    python -m bench.analysis_floor --size full         # the issue's sizes (patching: the 15-min
                                                       # target command; an hour or more)
    python -m bench.analysis_floor --teacher T --student S --threads 1 --only patching,lens

Each analysis runs as its own process (its command line, as a user runs it, with --out in a
scratch folder), so its peak resident memory is its own. In that process a forward hook on
every layer's MLP (called once a layer by the HF forward, TransformerLens's bridge and the
package's own decoder, `decode.Decoder`) counts what the layers process: tokens of a
multi-token call (a forward), one-token calls (a cached decoding step) and, through a hook on
the MLP output's gradient, tokens a backward pass carries back. Checkpoint loads
(`load_checkpoint`) and weight-folder reads (param_delta's `TensorFolder`) are counted too.
The reference process, in the same run, times on the teacher: one forward of a batch of the
task's [c, x] + solution (no grad), one forward + backward of it (every parameter's
gradient), one cached decoding step of that many rows, one checkpoint load and one read of
the folder's weights (each the median of three after a first). Then

    forwards  = layer-tokens forward / (layers x the reference batch's tokens)   (a partial
                rerun, patching's from a layer and a column on, counts its fraction)
    backwards = the same for the backward
    steps     = one-token layer calls / layers (a step of any batch counts one: at these sizes
                a step reads every weight once, whatever its rows)
    floor     = forwards x t(forward) + backwards x (t(forward + backward) - t(forward))
                + steps x t(step) + loads x t(load) + reads x t(read)
    overhead  = run / floor   (run: the command's time in its process)

The reference forward unembeds every position; an analysis that unembeds only what it reads
(patching's reruns) is given a floor slightly too high. Counting needs the MLPs to be a
transformers `...MLP` module (Llama, Qwen, Mistral: SmolLM2 is Llama). The wall time includes
the interpreter's start and imports; `run s` is the command's own time in its process.
Results: bench/results/analysis_floor.{txt,json} (`--out` to write elsewhere).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from nca_interp.errors import UsageError

RUNS = Path("/root/.cache/nca_interp/runs")
TEACHER = RUNS / "sokoban_smollm2_lora_base"
STUDENT = RUNS / "sokoban_smollm2_lora_opd_s0" / "checkpoints" / "step_000080"
ANALYSES = ("evaluate", "layer_sim", "grad_align", "param_delta", "patching", "lens")

# each analysis's arguments after its checkpoints, per size (T: teacher, S: student)
SIZES = {
    "small": {
        "evaluate": ["S", "--n-levels", "8", "--control"],
        "layer_sim": ["T", "S", "--n-levels", "8", "--batch", "8"],
        "grad_align": ["S", "--teacher", "T", "--batch", "4", "--micro-batch", "2", "--parts",
                       "2"],
        "param_delta": ["S", "--init", "T"],
        "patching": ["T", "--kind", "help", "--n-levels", "16", "--max-cases", "4", "--scope",
                     "groups", "--ks", "1", "--n-random", "4", "--n-random-generate", "4"],
        "lens": ["S", "--n-levels", "4", "--max-cases", "2"],
    },
    "full": {
        "evaluate": ["S", "--n-levels", "200", "--control"],
        "layer_sim": ["T", "S", "--n-levels", "200"],
        "grad_align": ["S", "--teacher", "T", "--batch", "64", "--micro-batch", "16", "--parts",
                       "4"],
        "param_delta": ["S", "--init", "T"],
        "patching": ["T", "--kind", "help", "--n-levels", "200", "--max-cases", "16"],
        "lens": ["S"],
    },
}


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB on Linux


def count_passes() -> dict:
    """Counters of what decoder layers process, filled from now on in this process (a global
    forward hook; it lives as long as the process, which is the bench's child)."""
    counts = {"forward_tokens": 0, "step_calls": 0, "backward_tokens": 0, "loads": 0,
              "reads": 0}

    def backward(n):
        def hook(grad):
            counts["backward_tokens"] += n
        return hook

    def hook(module, args, kwargs, output):
        if not type(module).__name__.endswith("MLP"):
            return
        x = args[0] if args else next(iter(kwargs.values()), None)
        if not torch.is_tensor(x) or x.dim() < 2:
            return
        n = x.shape[:-1].numel()
        if x.dim() == 2 or x.shape[1] == 1:  # a decoding step (`decode.Decoder`: B D)
            counts["step_calls"] += 1
        else:
            counts["forward_tokens"] += n
        if torch.is_tensor(output) and output.requires_grad:
            output.register_hook(backward(n))

    torch.nn.modules.module.register_module_forward_hook(hook, with_kwargs=True)

    from nca_interp import checkpoint, tensorfiles

    load = checkpoint.load_checkpoint

    def counted_load(*a, **kw):
        counts["loads"] += 1
        return load(*a, **kw)

    checkpoint.load_checkpoint = counted_load  # bound by the analyses, imported after this
    enter = tensorfiles.TensorFolder.__enter__

    def counted_enter(self):
        got = enter(self)
        if (self.path / "config.json").exists():
            counts["reads"] += 1
        return got

    tensorfiles.TensorFolder.__enter__ = counted_enter
    return counts


def child(name: str, argv: list[str], report: str, threads: int) -> None:
    """One analysis's command in this process, its counts and peak memory written to
    `report`."""
    torch.set_num_threads(threads)
    counts = count_passes()
    module = importlib.import_module("nca_interp.patching" if name == "patching"
                                     else f"nca_interp.{name}")
    t0 = time.perf_counter()
    module.main(argv)
    counts["in_process_s"] = time.perf_counter() - t0
    counts["peak_rss_gb"] = peak_rss_gb()
    Path(report).write_text(json.dumps(counts))


def median_time(fn, repeat: int = 3) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def reference(teacher: str, rows: int, report: str, threads: int) -> None:
    """One pass of each kind on the teacher, timed (median of three after a warm-up)."""
    from safetensors import safe_open
    from transformers import DynamicCache

    from nca_interp.checkpoint import load_checkpoint
    from nca_interp.rollout import encode
    from nca_interp.runs import resolve_task_and_context

    torch.set_num_threads(threads)
    model, tok = load_checkpoint(teacher)
    load_s = median_time(lambda: load_checkpoint(teacher))
    task, ctx = resolve_task_and_context([teacher], None, None)
    task = task.for_tokenizer(tok)
    levels = task.levels("test", rows, 0)
    ids, mask = encode(tok, [task.prompt(lv, task.context(lv, ctx)) + task.target(lv)
                             for lv in levels])

    def forward():
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask)

    def forward_backward():
        out = model(input_ids=ids, attention_mask=mask, labels=ids)
        out.loss.backward()
        model.zero_grad(set_to_none=True)

    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
    step_mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
    nxt = ids[:, -1:]

    def step():  # one token a row on the kept cache (dropped again: every step the same)
        with torch.no_grad():
            model(input_ids=nxt, attention_mask=step_mask, past_key_values=cache,
                  use_cache=True)
        cache.crop(-1)

    files = sorted(Path(teacher).glob("*.safetensors"))

    def read():
        for f in files:
            with safe_open(str(f), framework="pt") as h:
                for k in h.keys():
                    h.get_tensor(k).sum()

    out = {"rows": rows, "tokens": int(ids.numel()), "width": int(ids.shape[1]),
           "layers": int(model.config.num_hidden_layers), "load_s": load_s,
           "forward_s": median_time(forward), "forward_backward_s": median_time(forward_backward),
           "step_s": median_time(step), "read_s": median_time(read),
           "peak_rss_gb": peak_rss_gb()}
    Path(report).write_text(json.dumps(out))


def run_child(args: list[str], threads: int) -> tuple[dict, float]:
    """A child process of this module, its report and its wall seconds (interpreter start and
    imports included: what a user waits for)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        report = f.name
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "bench.analysis_floor", "--threads",
                           str(threads), "--report", report, *args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "NCA_INTERP_QUIET": "1"})
    wall = time.perf_counter() - t0
    if done.returncode:
        raise RuntimeError(f"{' '.join(args[:2])} failed:\n{done.stderr[-3000:]}")
    got = json.loads(Path(report).read_text())
    Path(report).unlink()
    return got, wall


def floor_of(c: dict, ref: dict) -> dict:
    per_pass = ref["layers"] * ref["tokens"]
    f, b = c["forward_tokens"] / per_pass, c["backward_tokens"] / per_pass
    s = c["step_calls"] / ref["layers"]
    backward_s = max(ref["forward_backward_s"] - ref["forward_s"], 0.0)
    floor = (f * ref["forward_s"] + b * backward_s + s * ref["step_s"]
             + c["loads"] * ref["load_s"] + c["reads"] * ref["read_s"])
    return {"forwards": f, "backwards": b, "steps": s, "floor_s": floor}


def table(rows: dict, ref: dict) -> list[str]:
    out = [f"{'analysis':<12}{'wall s':>9}{'run s':>8}{'forwards':>10}{'backwards':>10}{'steps':>8}"
           f"{'loads':>6}{'reads':>6}{'floor s':>9}{'run/floor':>10}{'peak RSS GB':>12}"]
    for name, r in rows.items():
        # a floor too small to time (param_delta's read of a tiny model's weights): no ratio
        ratio = (f"{r['in_process_s'] / r['floor_s']:>9.1f}x" if r["floor_s"] >= 0.05
                 else f"{'-':>10}")
        out.append(f"{name:<12}{r['wall_s']:>9.1f}{r['in_process_s']:>8.1f}"
                   f"{r['forwards']:>10.1f}{r['backwards']:>10.1f}{r['steps']:>8.0f}"
                   f"{r['loads']:>6}{r['reads']:>6}{r['floor_s']:>9.1f}{ratio}"
                   f"{r['peak_rss_gb']:>12.2f}")
    out.append(f"one pass ({ref['rows']} rows x {ref['width']} columns, {ref['tokens']} tokens, "
               f"{ref['layers']} layers): forward {ref['forward_s']:.2f} s, forward + backward "
               f"{ref['forward_backward_s']:.2f} s, cached step {ref['step_s']:.3f} s, load "
               f"{ref['load_s']:.2f} s, read of the weights {ref['read_s']:.2f} s; peak RSS "
               f"{ref['peak_rss_gb']:.2f} GB")
    return out


def main(argv: list[str] | None = None) -> dict | None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher", default=str(TEACHER))
    ap.add_argument("--student", default=str(STUDENT))
    ap.add_argument("--size", default="small", choices=sorted(SIZES))
    ap.add_argument("--only", default=",".join(ANALYSES), help="analyses measured, of "
                    + ", ".join(ANALYSES))
    ap.add_argument("--rows", type=int, default=16, help="rows of the reference pass")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="bench/results/analysis_floor",
                    help="stem of the .txt and .json written")
    ap.add_argument("--note", default="", help="a line on the machine's state, kept in the txt")
    ap.add_argument("--report", help=argparse.SUPPRESS)  # a child's: where its counts go
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--reference", action="store_true", help=argparse.SUPPRESS)
    argv = list(sys.argv[1:] if argv is None else argv)
    # a child's analysis arguments follow "--", out of this parser's reach: parsed here, the
    # analysis's own --out and --threads were taken as the bench's, and the analysis wrote to
    # its default runs/ folder with every thread
    own, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv \
        else (argv, [])
    args = ap.parse_args(own)
    if args.child:
        if "--out" not in rest:
            raise UsageError(f"an analysis timed by this bench writes to a scratch --out, "
                             f"never its default runs/ folder (got {' '.join(rest)})")
        return child(args.child, rest, args.report, args.threads)
    if args.reference:
        return reference(args.teacher, args.rows, args.report, args.threads)
    if rest:
        ap.error(f"unrecognised arguments: {' '.join(rest)}")
    only = args.only.split(",")
    if not set(only) <= set(ANALYSES):
        ap.error(f"--only takes some of {', '.join(ANALYSES)} (got {args.only})")
    scratch = Path(tempfile.mkdtemp(prefix="analysis_floor_"))
    ref, ref_wall = run_child(["--reference", "--teacher", args.teacher, "--rows",
                               str(args.rows)], args.threads)
    print("\n".join(table({}, ref)[1:]), flush=True)
    rows = {}
    for name in only:
        argv_a = [{"T": args.teacher, "S": args.student}.get(a, a)
                  for a in SIZES[args.size][name]]
        argv_a += ["--threads", str(args.threads), "--out", str(scratch / name)]
        counts, wall = run_child(["--child", name, "--", *argv_a], args.threads)
        rows[name] = {"wall_s": wall, **counts, **floor_of(counts, ref),
                      "command": f"python -m nca_interp.{name} " + " ".join(argv_a)}
        print(table({name: rows[name]}, ref)[1], flush=True)
    command = "python -m bench.analysis_floor " + " ".join(argv or sys.argv[1:])
    lines = [f"# {command}", *([f"# {args.note}"] if args.note else []),
             f"# teacher {args.teacher}, student {args.student}, {args.threads} thread(s), "
             f"size {args.size}; each row its own process (wall: start, imports and loads "
             "included)", *table(rows, ref), "commands:",
             *(f"  {r['command']}" for r in rows.values())]
    report = {"command": command, "note": args.note, "teacher": args.teacher,
              "student": args.student, "size": args.size, "threads": args.threads,
              "reference": {**ref, "wall_s": ref_wall}, "analyses": rows}
    Path(f"{args.out}.txt").write_text("\n".join(lines) + "\n")
    Path(f"{args.out}.json").write_text(json.dumps(report, indent=1) + "\n")
    print("\n".join(lines))
    return report


if __name__ == "__main__":
    main()
