"""Layerwise similarity of hidden states with vs without the privileged context.

    python -m nca_interp.layer_sim                       # embedded Sokoban base / OPD / NCA
    python -m nca_interp.layer_sim runs/base runs/opd runs/nca --context plan --out figures/x

For each checkpoint: greedy response y to x (no context); y is then teacher-forced under both
prompts, x and [c, x], and the residual stream at y's positions is compared layer by layer
(`hook_embed`, then `blocks.{i}.hook_resid_post`). `--at generating` compares instead the
positions that *produce* y (the last prompt token, then y_1..y_{N-1}): for one-token answers
(`sysprompt`) the default positions come after the decision, the generating ones include it.
Reported per layer:
  cos          mean over examples of the mean token cosine (and its std over examples)
  cos_centred  the same after subtracting the layer's mean hidden state (pooled over views),
               so the large shared direction that makes raw cosines ~1 does not count
  cka          linear CKA between the two views' token matrices
  ctx_attn     fraction of attention (mean over heads and response queries) on context tokens
               in the [c, x] view
A random-init model of the same config and the base/teacher are added as baselines.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from nca_interp.assets import resolve
from nca_interp.checkpoint import load_checkpoint, read_run_config, save_checkpoint
from nca_interp.cli import parse_config, to_dict
from nca_interp.evaluate import TASK_OPTIONS_HELP, max_response_tokens, task_for_checkpoints
from nca_interp.hooks import boot_bridge, capture
from nca_interp.models import context_limit, resolve_device
from nca_interp.rollout import encode, pad_id, sample, stop_ids
from nca_interp.tasks import Task


def linear_cka(X_M_D: torch.Tensor, Y_M_D: torch.Tensor) -> float:
    """Linear CKA (Kornblith et al. 2019) between two sets of M token representations."""
    X = X_M_D.double() - X_M_D.double().mean(0)
    Y = Y_M_D.double() - Y_M_D.double().mean(0)
    num = (Y.T @ X).norm() ** 2
    den = (X.T @ X).norm() * (Y.T @ Y).norm()
    return float(num / den) if den > 0 else float("nan")


def similarity_by_layer(h0_L_B_N_D: torch.Tensor, h1_L_B_N_D: torch.Tensor,
                        mask_B_N: torch.Tensor) -> dict[str, list[float]]:
    """Per-layer cosine (mean, std over examples), centred cosine and CKA of two views."""
    m = mask_B_N.bool()
    per_ex = m.sum(1).clamp(min=1).double()
    out: dict[str, list[float]] = {"cos": [], "cos_std": [], "cos_centred": [], "cka": []}
    for h0, h1 in zip(h0_L_B_N_D.double(), h1_L_B_N_D.double()):
        cos = torch.nn.functional.cosine_similarity(h0, h1, dim=-1)
        ex = (cos * m).sum(1) / per_ex
        mu = torch.cat([h0[m], h1[m]]).mean(0)
        cc = torch.nn.functional.cosine_similarity(h0 - mu, h1 - mu, dim=-1)
        out["cos"].append(float(ex.mean()))
        out["cos_std"].append(float(ex.std()) if len(ex) > 1 else 0.0)
        out["cos_centred"].append(float(((cc * m).sum(1) / per_ex).mean()))
        out["cka"].append(linear_cka(h0[m], h1[m]))
    return out


def context_attention(pattern_L_B_H_Q_K: torch.Tensor, key_is_ctx_B_K: torch.Tensor,
                      query_mask_B_Q: torch.Tensor) -> list[float]:
    """Per layer: attention mass on context keys, mean over heads and valid queries."""
    mass = (pattern_L_B_H_Q_K * key_is_ctx_B_K[None, :, None, None, :]).sum(-1)  # L B H Q
    mass = mass.mean(2)  # L B Q
    q = query_mask_B_Q.to(mass.dtype)
    return [float((layer * q).sum() / q.sum()) for layer in mass]


def context_token_mask(tokenizer, text: str, context: str) -> list[bool]:
    """Which tokens of `text` (tokenized as `encode` does) overlap the context string; found
    by character offsets, so it works wherever a chat template puts the context."""
    start = text.find(context)
    if start < 0:
        raise ValueError("context string not found in the prompt")
    end = start + len(context)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return [a < end and b > start for a, b in enc["offset_mapping"]]


def layer_similarity(path: str | Path, task: Task, context: str, levels: list,
                     batch: int = 100, device: str = "cpu", at: str = "response") -> dict:
    """Similarity of the with/without-context residual streams of one checkpoint folder
    (sampling and hooked passes on `device`; the statistics are computed on the CPU), at the
    response tokens (`at="response"`) or at the positions that generate them (`generating`)."""
    if at not in ("response", "generating"):
        raise ValueError(f"at must be response or generating, not {at!r}")
    model, tok = load_checkpoint(path, device=device)
    bridge = boot_bridge(path, device)
    task = task.for_tokenizer(tok)
    max_new = max_response_tokens(task)
    h0s, h1s, masks, attn = [], [], [], []
    for i in range(0, len(levels), batch):
        chunk = levels[i: i + batch]
        x_ids, x_mask = encode(tok, [task.prompt(lv) for lv in chunk], context_limit(model),
                               max_new)
        cx_ids, cx_mask = encode(tok, [task.prompt(lv, task.context(lv, context))
                                       for lv in chunk], context_limit(model), max_new)
        resp, rmask = (t.cpu() for t in sample(
            model, x_ids.to(device), x_mask.to(device), max_new, stop_ids(tok, model),
            pad_id(tok), temperature=0.0))
        N = resp.shape[1]
        # positions compared: y's own (-N:) or those that produce y (-N-1:-1), same mask
        sel = slice(-N, None) if at == "response" else slice(-N - 1, -1)
        a = capture(bridge, torch.cat([x_ids, resp], 1), torch.cat([x_mask, rmask], 1))
        b = capture(bridge, torch.cat([cx_ids, resp], 1), torch.cat([cx_mask, rmask], 1),
                    patterns=True)
        h0s.append(a["resid"][:, :, sel])
        h1s.append(b["resid"][:, :, sel])
        masks.append(rmask)
        Pc = cx_ids.shape[1]
        key_ctx = torch.zeros(len(chunk), Pc + N)
        for j, lv in enumerate(chunk):
            is_ctx = context_token_mask(tok, task.prompt(lv, task.context(lv, context)),
                                        task.context(lv, context))
            key_ctx[j, Pc - len(is_ctx): Pc] = torch.tensor(is_ctx, dtype=key_ctx.dtype)
        attn.append((context_attention(b["pattern"][:, :, :, sel], key_ctx, rmask),
                     len(chunk)))
    N = max(h.shape[2] for h in h0s)
    pad = lambda t: torch.nn.functional.pad(t, (0, 0, 0, N - t.shape[2]))  # noqa: E731
    mask = torch.cat([torch.nn.functional.pad(m, (0, N - m.shape[1])) for m in masks])
    out = similarity_by_layer(torch.cat([pad(h) for h in h0s], 1),
                              torch.cat([pad(h) for h in h1s], 1), mask)
    weights = np.array([n for _, n in attn], float)
    out["ctx_attn"] = list(np.average(np.array([a for a, _ in attn]), axis=0, weights=weights))
    out["n_examples"] = len(levels)
    out["mean_response_tokens"] = float(mask.sum(1).float().mean())
    return out


def random_init_copy(path: str | Path, folder: Path) -> Path:
    """A random-init model with `path`'s config and tokenizer, saved to `folder`."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    cfg = AutoConfig.from_pretrained(path, local_files_only=True)
    torch.manual_seed(0)
    return save_checkpoint(folder, AutoModelForCausalLM.from_config(cfg), tok)


@dataclass
class LayerSimConfig:
    ckpt: list[str] = field(default_factory=list, metadata={
        "help": "checkpoint folders; default: the embedded Sokoban base, OPD and NCA"})
    task: str | None = field(default=None, metadata={"help": "default: from the run config"})
    task_options: list[str] | None = field(default=None, metadata={"help": TASK_OPTIONS_HELP})
    context: str | None = field(default=None, metadata={
        "help": "state|plan|rules; default: the context the checkpoints were distilled with"})
    n_levels: int = field(default=200, metadata={"help": "held-out levels"})
    seed: int = field(default=0, metadata={"help": "held-out set seed"})
    baselines: bool = field(default=True, metadata={"help": "add the random-init baseline"})
    out: str = field(default="figures/demo/layer_sim",
                     metadata={"help": "output stem (.json/.html)"})
    png: bool = field(default=False, metadata={"help": "also write a PNG (needs kaleido)"})
    threads: int = field(default=2, metadata={"help": "torch threads"})
    device: str = field(default="cpu", metadata={"help": "cpu|cuda|auto for the model passes"})
    batch: int = field(default=100, metadata={"help": "levels per hooked pass"})
    at: str = field(default="response", metadata={
        "help": "response (y's positions) | generating (the positions that produce y)"})


def default_checkpoints() -> list[str]:
    from nca_interp.assets import embedded

    return [str(embedded(n)) for n in ("sokoban_base", "sokoban_opd", "sokoban_nca")]


def with_initial_checkpoints(paths: list[str]) -> list[str]:
    """Add the checkpoint each distilled run started from (the base), once, in front."""
    seen = {str(Path(p).resolve()) for p in paths}
    bases = []
    for p in paths:
        init = resolve(read_run_config(p).get("student"))
        if init and Path(init).exists() and str(Path(init).resolve()) not in seen:
            seen.add(str(Path(init).resolve()))
            bases.append(init)
    return bases + list(paths)


def resolve_task_and_context(paths: list[str], task: str | None, context: str | None,
                             options: list[str] | None = None):
    runs = [read_run_config(p) for p in paths]
    found = task_for_checkpoints(paths, task, options=options)
    ctx = context or next((r["context"] for r in runs if r.get("context")), None) \
        or found.default_context
    return found, ctx


def format_table(results: dict[str, dict], metric: str, layers: list[str]) -> str:
    w = max(12, *(len(n) for n in results))
    lines = [f"{metric:<{w}} " + " ".join(f"{lab:>8}" for lab in layers)]
    for name, r in results.items():
        lines.append(f"{name:<{w}} " + " ".join(f"{v:>8.4f}" for v in r[metric]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    from nca_interp.plots import layer_sim_figure, write_figure

    cfg = parse_config(LayerSimConfig, argv, __doc__, positional="ckpt")
    torch.set_num_threads(cfg.threads)
    paths = with_initial_checkpoints(cfg.ckpt or default_checkpoints())
    task, context = resolve_task_and_context(paths, cfg.task, cfg.context,
                                             cfg.task_options)
    levels = task.levels("test", cfg.n_levels, cfg.seed)
    device = str(resolve_device(cfg.device))
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if cfg.baselines:
            rnd = random_init_copy(paths[0], Path(tmp) / "random_init")
            results["random_init"] = layer_similarity(rnd, task, context, levels, cfg.batch,
                                                      device, cfg.at)
        for p in paths:
            name = Path(p).name if Path(p).name not in results else str(p)
            results[name] = layer_similarity(p, task, context, levels, cfg.batch, device,
                                             cfg.at)
    n_layers = len(next(iter(results.values()))["cos"]) - 1
    layers = ["embed"] + [str(i) for i in range(n_layers)]
    print(f"task={task.name} context={context} levels={len(levels)} positions={cfg.at}")
    for metric in ("cos", "cos_centred", "cka"):
        print(format_table(results, metric, layers) + "\n")
    print(format_table(results, "ctx_attn", layers[1:]))
    report = {"config": to_dict(cfg), "task": task.name, "context": context, "at": cfg.at,
              "layers": layers,
              "checkpoints": paths, "results": results}
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    written = write_figure(layer_sim_figure(report), out, png=cfg.png)
    print("wrote", out.with_suffix(".json"), *written)
    return report


if __name__ == "__main__":
    main()
