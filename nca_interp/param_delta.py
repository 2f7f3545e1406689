r"""Where training moved the weights: parameter deltas against a common initial checkpoint.

    python -m nca_interp.param_delta --init runs/base runs/opd runs/nca
    python -m nca_interp.param_delta --init runs/base runs/opd_s0 runs/nca_s0 runs/opd_s1 \
        --control runs/opd_s0,runs/opd_s1          # seed-to-seed baseline for cos(dOPD, dNCA)

Per checkpoint and per layer x module (HF names: `model.layers.{i}.self_attn.k_proj`, ...):
  rel        ||W - W0||_F / ||W0||_F
  adam_norm  ||W - W0||_F / (sum_t lr_t x sqrt(n)): under Adam every element moves about lr per
             step whatever its gradient, so this is the fraction of that budget the module used
             (1: every element moved lr every step in one direction). `rel` instead mostly
             measures lr x steps / ||W0||: modules with small initial norms look larger.
  share      the module's fraction of the checkpoint's total squared delta
and totals per module type and per layer (root of summed squares, relative to ||W0||).
With two or more checkpoints (first = OPD, second = NCA by convention, or --pair A,B):
  cos        cosine between the two deltas per module
  specific   ||dB - dA|| / ||W0|| per module (the NCA-specific delta) and its share
  control    with --control C,D (e.g. OPD seed 0 and seed 1): cos(dC, dD) per module, the
             seed-to-seed baseline that every cos(dA, dB) must be read against.
`--rows task` restricts embed and lm_head to the rows of tokens the task uses (unused vocabulary
rows inflate ||W0|| and, with weight decay, the delta).

Streaming: tensors are read one at a time (embedding and lm_head in row chunks) through
`safetensors.safe_open` in their stored dtype (bf16/fp16/fp32; single files or
`save_pretrained` shards), and only float64 inner products are kept (nca_interp.reduce), so
memory stays at a few tensors whatever the model size and the number of checkpoints. A tied
lm_head (`tie_word_embeddings`) is the embedding and is counted once.
Checkpoints must match the initial one in architecture, parameter names and shapes.
"""

from __future__ import annotations

import logging
import math
import sys

from nca_interp.cli import parse_early
from nca_interp.configs import ParamDeltaConfig

if __name__ == "__main__":  # --help and a bad flag answered before torch is imported
    PARSED = parse_early(ParamDeltaConfig, __doc__, positional="ckpt")

from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from nca_interp import analysis
from nca_interp.checkpoint import CheckpointError, n_layers_of, read_run_config, verify_folder
from nca_interp.cli import (
    as_paths,
    check_arguments,
    entry,
    parse_config,
    validate,
)
from nca_interp.errors import UsageError
from nca_interp.fsio import read_json
from nca_interp.labelled import Arrays, Labelled, as_float
from nca_interp.names import MODULES, hf_name
from nca_interp.reduce import Gram, stream_by_name
from nca_interp.reports import ParamDeltaReport, as_report
from nca_interp.runs import check_same_tokenizers, initial_of, lr_at
from nca_interp.tensorfiles import TensorFolder, row_chunks

__all__ = ["DEMO", "arrays_of", "deltas_of", "execute", "figure_names", "figures", "format_cos",
           "format_table", "gram_of", "labelled_tables", "layer_module_grid", "main",
           "report_arrays", "run", "show"]

log = logging.getLogger(__spec__.name if __spec__ else __name__)  # python -m too

ARCH_KEYS = ("model_type", "num_hidden_layers", "hidden_size", "vocab_size",
             "num_attention_heads", "num_key_value_heads", "intermediate_size")


def read_config(path: Path) -> dict:
    return read_json(path / "config.json", "model config")


def weight_names(folder: TensorFolder, config: dict) -> list[str]:
    """Parameter tensors of a folder; a tied lm_head is the embedding (counted once)."""
    names = folder.names()
    if config.get("tie_word_embeddings") and "model.embed_tokens.weight" in names:
        names = [n for n in names if n != "lm_head.weight"]
    return names


def check_compatible(f0: TensorFolder, c0: dict, f1: TensorFolder, c1: dict, name0: str,
                     name1: str) -> None:
    """Same architecture, parameter names and shapes; raised before any tensor is read."""
    for key in ARCH_KEYS:
        if c0.get(key) != c1.get(key):
            raise CheckpointError(f"{name1} and {name0} differ in {key} ({c1.get(key)} vs "
                                  f"{c0.get(key)}); deltas need checkpoints of one "
                                  "architecture")
    n0, n1 = weight_names(f0, c0), weight_names(f1, c1)
    missing, extra = sorted(set(n0) - set(n1)), sorted(set(n1) - set(n0))
    if missing or extra:
        raise CheckpointError(f"{name1} and {name0} have different parameters: missing "
                              f"{missing[:3]}, extra {extra[:3]}")
    for k in n0:
        if f0.shape(k) != f1.shape(k):
            raise CheckpointError(f"{name1}: parameter {k} has shape {f1.shape(k)}, {name0} "
                                  f"has {f0.shape(k)}")


def weight_shas(folder: str | Path) -> list[tuple[str, str]]:
    """(file, sha256) of a checkpoint's weight files: from its manifest where it has one
    (verified on load), else hashed here."""
    import hashlib

    from nca_interp.checkpoint import MANIFEST, weight_files

    folder = Path(folder)
    names = sorted(w.name for w in weight_files(folder))
    if (folder / MANIFEST).is_file():
        files = read_json(folder / MANIFEST, "checkpoint manifest").get("files") or {}
        if all(isinstance(files.get(n), dict) and "sha256" in files[n] for n in names):
            return [(n, files[n]["sha256"]) for n in names]
    out = []
    for n in names:
        h = hashlib.sha256()
        with open(folder / n, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
        out.append((n, h.hexdigest()))
    return out


def recorded_steps(path: str | Path, run: dict) -> tuple[int | None, str]:
    """The optimizer steps that produced `path`, where it records them, and where: its trainer
    state (`step`; a Hugging Face Trainer's `global_step`), else, for a run folder, the step
    checkpoint whose weights it publishes (a run stopped at step 5 of 10 publishes step 5),
    else its run config's `steps` (a run trained here to the end); (None, "") when none."""
    from nca_interp.checkpoint import check_step_record, same_weights, step_number

    folder = Path(path)
    if step_number(folder) is not None:
        check_step_record(folder)  # a renamed step folder would put its steps elsewhere
    state = folder / "trainer_state.json"
    if state.exists():
        meta = read_json(state, "trainer state")
        n = meta.get("step", meta.get("global_step")) if isinstance(meta, dict) else None
        if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
            return n, "its trainer state"
    steps = sorted((folder / "checkpoints").glob("step_*"), key=lambda q: step_number(q) or -1)
    for step in reversed(steps):
        if step_number(step) is not None and same_weights(step, folder):
            return step_number(step), f"its published {step.name}"
    if "lr" in run and run.get("steps"):
        return int(run["steps"]), "its run config"
    return None, ""


def lr_budget(path: str | Path, given: dict | None = None) -> float | None:
    """sum_t lr_t over the optimizer steps that produced `path` (`recorded_steps`), at the
    schedule of its run config; for a checkpoint not trained here, at `given`: the command's
    --lr / --warmup / --schedule, and its --steps where it records none. None when neither
    says."""
    run = read_run_config(path)
    if "lr" in run:  # a damaged record is named, never read as "none recorded"
        lr, steps = run["lr"], run.get("steps")
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) \
                or lr <= 0 or (steps is not None and (isinstance(steps, bool) or
                                                      not isinstance(steps, int) or steps < 1)):
            raise UsageError(f"{Path(path) / 'run_config.json'} records lr={lr!r}, "
                             f"steps={steps!r}: not a positive learning rate and step count; "
                             "the record is damaged: restore it from the run")
    done, _ = recorded_steps(path, run)
    if "lr" not in run:
        if not (given and given.get("lr")):
            return None
        run = {"lr": given["lr"], "steps": done or given.get("steps"),
               "warmup": given.get("warmup") or 0, "schedule": given.get("schedule") or "constant"}
    steps = done or run.get("steps")
    if not steps:
        return None
    total = run.get("steps") or steps  # the schedule's length (a cosine's end)
    return float(sum(lr_at(t, run["lr"], run.get("warmup", 0), total,
                           run.get("schedule", "constant")) for t in range(steps)))


def steps_each(ckpts: list[str], steps: int | list[int] | None) -> list[int | None]:
    """--steps for each checkpoint: one count for all, or one per checkpoint in order. A count
    given for a checkpoint that records its own must be that one: refused before any work
    (one --steps beside checkpoints that differ is ambiguous), naming the checkpoint."""
    given: list[int | None] = \
        [] if steps is None else [steps] if isinstance(steps, int) else list(steps)
    if len(given) not in (0, 1, len(ckpts)):
        raise UsageError(f"--steps takes one count or one per checkpoint ({len(ckpts)}, in the "
                         f"order given), not {len(given)}")
    each = given * len(ckpts) if len(given) == 1 else given or [None] * len(ckpts)
    own = {p: recorded_steps(p, read_run_config(p)) for p in ckpts}
    for p, n in zip(ckpts, each):
        mine, where = own[p]
        if n is None or mine is None or n == mine:
            continue
        if len(given) == 1 and any(own[q][0] is None for q in ckpts):
            say = ",".join(str(own[q][0]) if own[q][0] is not None else "N" for q in ckpts)
            raise UsageError(f"--steps {n} is one count for every checkpoint, but {p} records "
                             f"{mine} ({where}): the checkpoints differ; give each its own, "
                             f"--steps {say} (one per checkpoint in the order given, N the "
                             "steps of one that records none)")
        raise UsageError(f"--steps gives {p} {n} steps, but {where} records {mine}; give it "
                         f"{mine}, or drop --steps where every checkpoint records its own")
    return each


def lr_each(ckpts: list[str], lr: float | list[float] | None) -> list[float | None]:
    """--lr for each checkpoint: one peak rate for all, or one per checkpoint in order. A rate
    given for a checkpoint whose run config records its own must be that one: refused before
    any work (the recorded one was used without a word), naming the checkpoint."""
    given: list[float | None] = \
        [] if lr is None else [lr] if isinstance(lr, (int, float)) else list(lr)
    if len(given) not in (0, 1, len(ckpts)):
        raise UsageError(f"--lr takes one rate or one per checkpoint ({len(ckpts)}, in the "
                         f"order given), not {len(given)}")
    each = given * len(ckpts) if len(given) == 1 else given or [None] * len(ckpts)
    for p, rate in zip(ckpts, each):
        mine = read_run_config(p).get("lr")
        if rate is None or mine is None or abs(float(rate) - float(mine)) <= 1e-9 * abs(mine):
            continue
        if len(given) == 1:
            raise UsageError(f"--lr {rate:g} is one rate for every checkpoint, but {p} records "
                             f"{mine:g} (its run config): give each its own, one per "
                             "checkpoint in the order given, or drop --lr where every "
                             "checkpoint records its own")
        raise UsageError(f"--lr gives {p} {rate:g}, but its run config records {mine:g}; "
                         f"give it {mine:g}")
    return each


def stream_deltas(init: Path, ckpts: list[Path], rows: dict[str, torch.Tensor] | None = None
                  ) -> Gram:
    """Gram matrix of [W0, d_1, ..., d_k] (d_i = W_i - W0) per group, streamed. `rows`: for
    the named tensors, only these row indices count."""
    c0 = read_config(init)
    with ExitStack() as stack:
        f0 = stack.enter_context(TensorFolder(init))
        fs = [stack.enter_context(TensorFolder(p)) for p in ckpts]
        for p, f in zip(ckpts, fs):
            check_compatible(f0, c0, f, read_config(p), str(init), str(p))
        gram = Gram(["w0", *map(str, ckpts)])

        def chunks():
            """(name, row chunks of [W0, W1, ...]) in their stored dtype; the Gram forms the
            deltas W_i - W0 and their products block by block in float64."""
            for name in weight_names(f0, c0):
                keep = rows.get(name) if rows else None
                for a, b in row_chunks(f0.shape(name)):
                    vecs = [f.rows(name, a, b) for f in (f0, *fs)]
                    if keep is not None:
                        sel = keep[(keep >= a) & (keep < b)] - a
                        vecs = [r[sel] for r in vecs]
                    yield name, vecs

        stream_by_name(gram, chunks(), delta=True)
    return gram


def _cells(gram: Gram) -> list[str]:
    return [k for k in gram.mats if k != "global" and ":" not in k]


def module_table(gram: Gram, i: int, budget: float | None) -> dict:
    """Delta i (Gram index) per cell, per module type, per layer and in total."""
    def sq(key):
        return gram.mats[key][i, i]

    def w0(key):
        return gram.mats[key][0, 0]

    def rel(key):
        return float(np.sqrt(sq(key) / w0(key))) if w0(key) > 0 else 0.0

    def adam(key):
        return float(np.sqrt(sq(key) / gram.sizes[key]) / budget) if budget else None

    total = sq("global")
    cells = _cells(gram)
    modules = [k for k in gram.mats if k.startswith("module:")]
    layers = [k for k in gram.mats if k.startswith("layer:")]
    strip = lambda k: k.split(":", 1)[1]  # noqa: E731
    return {"rel": {k: rel(k) for k in cells},
            "adam_norm": {k: adam(k) for k in cells},
            "share": {k: float(sq(k) / total) if total else 0.0 for k in cells},
            "per_module": {strip(k): rel(k) for k in modules},
            "per_module_adam": {strip(k): adam(k) for k in modules},
            "per_layer": {strip(k): rel(k) for k in layers},
            "per_layer_adam": {strip(k): adam(k) for k in layers},
            "global_rel": rel("global"), "global_adam": adam("global"),
            "global_sq": float(total), "lr_budget": budget}


def _cos(gram: Gram, key: str, a: int, b: int) -> float | None:
    G = gram.mats[key]
    den = G[a, a] * G[b, b]
    return float(G[a, b] / np.sqrt(den)) if den > 0 else None


def pair_cos(gram: Gram, a: int, b: int) -> tuple[dict, float | None]:
    """cos(d_a, d_b) per layer x module cell, and over all parameters."""
    return {k: _cos(gram, k, a, b) for k in _cells(gram)}, _cos(gram, "global", a, b)


def module_cos(gram: Gram, a: int, b: int) -> dict:
    """cos(d_a, d_b) per module type (all layers together)."""
    return {k.split(":", 1)[1]: _cos(gram, k, a, b) for k in gram.mats
            if k.startswith("module:")}


def specific(gram: Gram, a: int, b: int) -> dict:
    """||dB - dA|| relative to ||W0|| per cell, and its shares (from the Gram matrix)."""
    def sq(key):
        G = gram.mats[key]
        return max(G[a, a] + G[b, b] - 2 * G[a, b], 0.0)

    total = sq("global")
    cells = _cells(gram)
    return {"rel": {k: float(np.sqrt(sq(k) / gram.mats[k][0, 0])) if gram.mats[k][0, 0] > 0
                    else 0.0 for k in cells},
            "share": {k: float(sq(k) / total) if total else 0.0 for k in cells},
            "global_rel": float(np.sqrt(total / gram.mats["global"][0, 0]))}


def task_rows(init: Path, task_name: str | None, options: list[str] | None,
              n: int = 200) -> torch.Tensor:
    """Token ids the task uses: its prompts with and without every context kind, its target
    responses, and the special tokens, over `n` held-out levels."""
    from transformers import AutoTokenizer

    from nca_interp.runs import task_for_checkpoints

    tok = AutoTokenizer.from_pretrained(init, local_files_only=True)
    task = task_for_checkpoints([str(init)], task_name, options=options).for_tokenizer(tok)
    kinds = ["system"] if task.default_context == "system" else ["state", "plan", "rules"]
    ids = set(i for i in (tok.eos_token_id, tok.pad_token_id, tok.bos_token_id) if i is not None)
    for lv in task.levels("test", n):
        texts = [task.prompt(lv), task.target(lv)] + [task.prompt(lv, task.context(lv, k))
                                                       for k in kinds]
        for t in texts:
            ids.update(tok(t, add_special_tokens=False)["input_ids"])
    return torch.tensor(sorted(ids))


def deltas(init: str | Path, ckpts: list[str], rows: str = "all", task: str | None = None,
           task_options: list[str] | None = None, schedule: dict | None = None
           ) -> tuple[dict, Gram]:
    """Per-checkpoint tables and the Gram matrix behind them (index 0: W0, i: checkpoint i).
    `schedule`: --lr / --steps / --warmup / --schedule for checkpoints not trained here, its
    steps one count or one per checkpoint (`steps_each`), as its lr (`lr_each`)."""
    init = verify_folder(init)
    paths = [verify_folder(p) for p in ckpts]
    check_arguments(ParamDeltaConfig, rows=rows)
    keep = None
    if rows == "task":
        ids = task_rows(init, task, task_options)
        keep = {"model.embed_tokens.weight": ids, "lm_head.weight": ids}
    schedule = schedule or {}
    each = steps_each(ckpts, schedule.get("steps"))
    rates = lr_each(ckpts, schedule.get("lr"))
    gram = stream_deltas(init, paths, keep)
    per = {p: module_table(gram, i + 1, lr_budget(p, {**schedule, "steps": n, "lr": r}))
           for i, (p, n, r) in enumerate(zip(ckpts, each, rates))}
    config = read_config(init)
    n_layers = n_layers_of(config)
    return {"results": per, "n_layers": n_layers,
            "rows": rows, "n_task_rows": None if keep is None else
            len(keep["lm_head.weight"])}, gram


def tensors_of(model) -> dict[str, torch.Tensor]:
    """A model's parameters by HF name (a bridge's `._original_component` dropped), a tied
    lm_head counted once (as `named_parameters` gives them); a state dict as it is, less an
    lm_head that is the embedding's own tensor."""
    if isinstance(model, torch.nn.Module):
        return {hf_name(n): p.detach() for n, p in model.named_parameters()}
    if not isinstance(model, Mapping):
        raise UsageError(f"param_delta takes models or state dicts, not {type(model).__name__}")
    out = {hf_name(n): t.detach() for n, t in model.items()}
    embed, head = out.get("model.embed_tokens.weight"), out.get("lm_head.weight")
    if embed is not None and head is not None and embed.data_ptr() == head.data_ptr():
        del out["lm_head.weight"]
    return out


def gram_of(init, models: Mapping[str, object]) -> Gram:
    """Gram matrix of [W0, d_1, ..., d_k] per group (labels "w0" and the keys of `models`)
    from tensors in memory: the same reduction `stream_deltas` runs over folders."""
    w0 = tensors_of(init)
    each = {name: tensors_of(m) for name, m in models.items()}
    for name, w in each.items():
        missing, extra = sorted(set(w0) - set(w)), sorted(set(w) - set(w0))
        if missing or extra:
            raise UsageError(f"{name} and the initial model have different parameters: "
                             f"missing {missing[:3]}, extra {extra[:3]}")
        for k, t in w0.items():
            if w[k].shape != t.shape:
                raise UsageError(f"{name}: parameter {k} has shape {tuple(w[k].shape)}, the "
                                 f"initial model's {tuple(t.shape)}")
    gram = Gram(["w0", *each])
    for k, t in w0.items():
        vecs = [t, *(w[k].to(t.device) for w in each.values())]
        chunks = [vecs] if t.dim() == 0 else [[v[a:b] for v in vecs]
                                              for a, b in row_chunks(tuple(t.shape))]
        gram.add(k, chunks, delta=True)
    return gram


def arrays_of(gram: Gram, budgets: Mapping[str, float | None] | None = None,
              n_layers: int | None = None) -> Arrays:
    """The statistics of a Gram matrix of [W0, d_1, ..., d_k] as labelled arrays, the
    checkpoints labelled by the Gram's labels (`labelled_tables`, every pair measured)."""
    names = gram.labels[1:]
    budgets = budgets or {}
    idx = {n: i + 1 for i, n in enumerate(names)}
    tables = {n: module_table(gram, idx[n], budgets.get(n)) for n in names}
    pairs = {}
    for a in names:
        for b in names:
            cos, gcos = pair_cos(gram, idx[a], idx[b])
            pairs[a, b] = {"cos": cos, "global_cos": gcos,
                           "per_module_cos": module_cos(gram, idx[a], idx[b]),
                           "specific": specific(gram, idx[a], idx[b])}
    return labelled_tables(tables, pairs, n_layers)


def labelled_tables(tables: Mapping[str, dict], pairs: Mapping[tuple[str, str], dict],
                    n_layers: int | None = None) -> Arrays:
    """Per-checkpoint tables (a report entry: `module_table`) and per-pair ones (a report's
    `comparison` shape) as labelled arrays: per `checkpoint`, `layer` x `module` (`rel`,
    `adam_norm`, `share`; layer "all" holds the parameters outside the blocks: embed,
    final_norm, lm_head), per `module` (`per_module`, `per_module_adam`), per `layer`
    (`per_layer`, `per_layer_adam`) and in total; between two checkpoints (`checkpoint` x
    `other`) the deltas' cosine per cell (`cos`), per module type (`module_cos`) and in total
    (`global_cos`), and the specific delta ||d_other - d_checkpoint|| / ||W0|| (`specific`,
    `specific_share`, `specific_global`). NaN where a value is undefined (no budget, a zero
    delta) or a pair was not measured."""
    names = list(tables)
    cells = list(dict.fromkeys(k for t in tables.values() for k in t["rel"]))
    _, layers, modules = layer_module_grid(dict.fromkeys(cells, 0.0), n_layers)
    found = {k.split(".", 1)[1] for k in cells if k.startswith("all.")}
    layers = (["all"] if found else []) + layers
    modules = modules + [m for m in GLOBAL_ORDER if m in found] + sorted(found - set(GLOBAL_ORDER))
    kinds = sorted({m for t in tables.values() for m in t["per_module"]},
                   key=lambda m: (modules.index(m) if m in modules else len(modules), m))
    seen = {g for t in tables.values() for g in t["per_layer"]}
    groups = [g for g in layers if g in seen] + sorted(seen - set(layers))
    ck, two = {"checkpoint": names}, {"checkpoint": names, "other": names}
    grid = {"layer": layers, "module": modules}

    def cells_of(values: dict | None) -> list:
        values = values or {}
        return [[values.get(f"{lay}.{m}") for m in modules] for lay in layers]

    def pair(a: str, b: str) -> dict:
        return pairs.get((a, b)) or {}

    out = {}
    for key in ("rel", "adam_norm", "share"):
        out[key] = Labelled(as_float([cells_of(tables[n][key]) for n in names]),
                            ("checkpoint", "layer", "module"), {**ck, **grid}, key)
    for key in ("per_module", "per_module_adam"):
        out[key] = Labelled(as_float([[tables[n][key].get(m) for m in kinds] for n in names]),
                            ("checkpoint", "module"), {**ck, "module": kinds}, key)
    for key in ("per_layer", "per_layer_adam"):
        out[key] = Labelled(as_float([[tables[n][key].get(g) for g in groups] for n in names]),
                            ("checkpoint", "layer"), {**ck, "layer": groups}, key)
    for key in ("global_rel", "global_adam", "global_sq", "lr_budget"):
        out[key] = Labelled(as_float([tables[n][key] for n in names]), ("checkpoint",), ck, key)
    by_cell = ("checkpoint", "other", "layer", "module")
    out["cos"] = Labelled(as_float([[cells_of(pair(a, b).get("cos")) for b in names]
                                    for a in names]), by_cell, {**two, **grid}, "cos")
    out["global_cos"] = Labelled(as_float([[pair(a, b).get("global_cos") for b in names]
                                           for a in names]), ("checkpoint", "other"), two,
                                 "global_cos")
    out["module_cos"] = Labelled(as_float([[[(pair(a, b).get("per_module_cos") or {}).get(m)
                                             for m in kinds] for b in names] for a in names]),
                                 ("checkpoint", "other", "module"), {**two, "module": kinds},
                                 "module_cos")
    for key, part in (("specific", "rel"), ("specific_share", "share")):
        out[key] = Labelled(as_float([[cells_of((pair(a, b).get("specific") or {}).get(part))
                                       for b in names] for a in names]), by_cell,
                            {**two, **grid}, key)
    out["specific_global"] = Labelled(
        as_float([[(pair(a, b).get("specific") or {}).get("global_rel") for b in names]
                  for a in names]), ("checkpoint", "other"), two, "specific_global")
    return Arrays(out)


def report_arrays(report: ParamDeltaReport | dict) -> Arrays:
    """A param_delta report as the labelled arrays `deltas_of` returns. The checkpoints are
    labelled as the other analyses key their results (`analysis.label_of`: the folder's name,
    its path where that name is taken; `attrs["paths"]` maps them back to the report's keys).
    The pairwise arrays hold the report's `comparison` and `control` pairs (cosines and, for
    the comparison, the specific delta) and `all_pairs`' global and per-module cosines, each
    in both orders, NaN for the rest."""
    report = as_report(report, ParamDeltaReport)
    label: dict[str, str] = {}
    for p in report.results:
        label[p] = analysis.label_of(p, label.values())
    tables = {label[p]: e.to_json() for p, e in report.results.items()}
    pairs: dict[tuple[str, str], dict] = {}
    paths = list(label)
    written = {f"{Path(a).name}~{Path(b).name}": (label[a], label[b])  # as run keys all_pairs
               for i, a in enumerate(paths) for b in paths[i + 1:]}
    for key, v in (report.all_pairs or {}).items():
        if key in written:
            a, b = written[key]
            pairs[a, b] = pairs[b, a] = v
    for cmp in (report.control, report.comparison):
        if cmp and cmp.get("a") in label and cmp.get("b") in label:
            a, b = label[cmp["a"]], label[cmp["b"]]
            pairs[a, b] = pairs[b, a] = cmp
    arrays = labelled_tables(tables, pairs, report.n_layers)
    return Arrays(arrays.arrays, {"paths": {v: k for k, v in label.items()}})


GLOBAL_ORDER = ("embed", "pos_embed", "final_norm", "lm_head")


def deltas_of(init, models, lr_budget: Mapping[str, float] | None = None) -> Arrays:
    """The core: where training moved the weights of models in memory, from `init`.

    `init` and each of `models` ({name: model}; one model alone is named "model") a
    transformers model, a TransformerLens bridge or a state dict of one architecture;
    `lr_budget` ({name: sum_t lr_t}) gives the Adam-normalised arrays (NaN without). Labelled
    arrays as `arrays_of` describes: `rel` (checkpoint, layer, module), `per_module`,
    `per_layer`, `global_rel`, and between every two models `cos`, `module_cos`,
    `global_cos`, `specific`. The command (`run`) reduces checkpoint folders streamed from
    disk to the same Gram matrix and writes the same numbers."""
    if not isinstance(models, Mapping) or (models and all(
            isinstance(v, torch.Tensor) for v in models.values())):
        models = {"model": models}
    if not models:
        raise UsageError("deltas_of takes at least one model: {name: model}")
    first = next(iter(models.values()))
    config = getattr(first, "config", None)
    n_layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
    return arrays_of(gram_of(init, models), lr_budget, n_layers)


def layer_module_grid(cells: dict[str, float | None], n_layers: int | None
                      ) -> tuple[list[list[float | None]], list[str], list[str]]:
    """Layers x modules of `cells` ("3.k_proj" -> value): the modules every family shares in
    their usual order, then any other module a family names (GPT-2's c_attn, ...); the
    layers from the cells when the config does not say how many."""
    found = {k.split(".", 1)[1] for k in cells if "." in k and k.split(".", 1)[0].isdigit()}
    cols = [m for m in MODULES if m in found] + sorted(found - set(MODULES))
    if n_layers is None:
        n_layers = 1 + max((int(k.split(".", 1)[0]) for k in cells
                            if k.split(".", 1)[0].isdigit()), default=-1)
    grid = [[cells.get(f"{i}.{m}") for m in cols] for i in range(n_layers)]
    return grid, [str(i) for i in range(n_layers)], cols




LEGEND = ("(rel = ||W - W0|| / ||W0||; adam = ||W - W0|| / (sum_t lr_t x sqrt(n)), the share of "
          "Adam's step budget used; per_module / per_layer: root of summed squares over the "
          "group; '-': not defined)")


def format_table(per_ckpt: dict[str, dict], key: str) -> str:
    names = list(per_ckpt)
    label = analysis.short_labels(names)  # two folders called `final` stay two columns
    rows = sorted({k for r in per_ckpt.values() for k in r[key]},
                  key=lambda k: (not k.isdigit(), int(k) if k.isdigit() else 0, k))
    w = max(14, *(len(label[n]) for n in names))
    kw = max(16, *(len(k) + 1 for k in rows))
    lines = [f"{key:<{kw}} " + " ".join(f"{label[n]:>{w}}" for n in names)]
    for k in rows:
        vals = [per_ckpt[n][key].get(k) for n in names]
        lines.append(f"{k:<{kw}} " + " ".join(f"{v:>{w}.5f}" if v is not None else f"{'-':>{w}}"
                                              for v in vals))
    return "\n".join(lines)


def format_cos(cmp: dict, ctrl: dict | None) -> str:
    """cos(dA, dB) per module type beside the seed-to-seed control (per cell: the JSON)."""
    a, b = Path(cmp["a"]).name, Path(cmp["b"]).name
    cols = [f"cos(d{a}, d{b})"] + ([f"control cos(d{Path(ctrl['a']).name}, "
                                    f"d{Path(ctrl['b']).name})"] if ctrl else [])
    w = max(len(c) for c in cols) + 1
    keys = ["global", *sorted(cmp["per_module_cos"])]
    kw = max(len(k) for k in keys) + 1
    lines = [f"{'module':<{kw}}" + "".join(f"{c:>{w}}" for c in cols)]
    for k in keys:
        vals = [cmp["global_cos"] if k == "global" else cmp["per_module_cos"][k]]
        if ctrl:
            vals.append(ctrl["global_cos"] if k == "global" else ctrl["per_module_cos"].get(k))
        lines.append(f"{k:<{kw}}" + "".join(f"{'-' if v is None else f'{v:.4f}':>{w}}"
                                           for v in vals))
    return "\n".join(lines)


def paths_written(pieces: list[str]) -> list[str]:
    r"""Paths as written before the command line split the list at commas (`op\,d`,
    `"op,d"`): `nca_interp.tasks.rejoin_commas`."""
    from nca_interp.tasks import rejoin_commas

    return rejoin_commas(pieces)


def run(cfg: ParamDeltaConfig | None = None, /, **fields) -> dict:
    """Parameter deltas of the checkpoints from `init`, an `analysis` report: `results[path]`
    (||dW||/||W0||, the Adam-normalised size, per module / layer), `comparison` (cos(dA, dB)
    per module and the specific delta of `pair`), `control` (the same cosine for a
    seed-to-seed `control` pair) and `all_pairs` (global and per-module cosines of every
    pair). `run(ParamDeltaConfig(...))` or `run(ckpt=[...], ...)`."""
    cfg = analysis.config(ParamDeltaConfig, cfg, fields)
    validate(cfg)
    if isinstance(cfg.steps, list) and len(cfg.steps) == 1:
        cfg = replace(cfg, steps=cfg.steps[0])  # one count is recorded as it always was
    ckpts = analysis.checkpoint_paths(cfg)
    pair = paths_written(as_paths(cfg.pair, "pair") or [])
    control = paths_written(as_paths(cfg.control, "control") or [])
    init, rows, task, task_options = cfg.init, cfg.rows, cfg.task, cfg.task_options
    for name, two in (("pair", pair), ("control", control)):
        if two and (len(two) != 2 or not set(two) <= set(ckpts)):
            raise UsageError(f"--{name} takes two of the checkpoints given (A,B), not {two}; "
                             "write a comma inside a path as \\, (a\\,b) or quote the path "
                             "('\"a,b\"')")
        if two and verify_folder(two[0]).resolve() == verify_folder(two[1]).resolve():
            raise UsageError(f"--{name} {two[0]},{two[1]} pairs a checkpoint with itself (cos 1 "
                             "everywhere); name two different checkpoints")
    for p in ckpts:
        verify_folder(p)  # a missing folder is named as such, not as a missing --init
    for name, two in (("pair", pair), ("control", control)):
        if len(two) == 2 and weight_shas(two[0]) == weight_shas(two[1]):
            raise UsageError(f"--{name} {two[0]},{two[1]}: the two checkpoints hold the same "
                             "weights (a copy of one run, or a run and its own published "
                             "step), so their deltas' cosine is 1 by construction; name two "
                             "different runs")
    steps_each(ckpts, cfg.steps)  # an ambiguous --steps is refused before any tensor is read
    init = init or initial_of(ckpts[0])
    if not init:
        raise UsageError(f"{ckpts[0]} does not name its initial checkpoint; pass --init")
    check_same_tokenizers([init, *ckpts])  # a permuted vocabulary: same bytes, other model
    start = weight_shas(verify_folder(init))
    for p in ckpts:  # --init one of the compared (the fourth probe): a zero column, and the
        if weight_shas(p) == start:  # others measured from a run, not from their start
            raise UsageError(f"--init {init} holds the same weights as the checkpoint {p} it "
                             "is to be compared from; --init names the checkpoint the runs "
                             f"started from ({initial_of(p) or 'their run configs record it'})")
        recorded = initial_of(p)
        if recorded and Path(recorded).exists() and weight_shas(verify_folder(recorded)) != start:
            log.warning(f"note: {p} started from {recorded}, not from --init {init}: its delta "
                        "and Adam budget are measured from --init")
    result, gram = deltas(init, ckpts, rows, task, task_options,
                          {"lr": cfg.lr, "steps": cfg.steps, "warmup": cfg.warmup,
                           "schedule": cfg.schedule})
    run_config = read_run_config(ckpts[0])
    own = run_config.get("task")  # a run config records its task's fields, name among them
    report = analysis.make_report(cfg, task=task or (own.get("name") if isinstance(own, dict)
                                                     else own),
                                  context=run_config.get("context"),
                                  paths={p: p for p in ckpts}, init=init, **result)
    index = {p: i + 1 for i, p in enumerate(ckpts)}
    if control:
        c, d = control
        cos, gcos = pair_cos(gram, index[c], index[d])
        report["control"] = {"a": c, "b": d, "cos": cos, "global_cos": gcos,
                             "per_module_cos": module_cos(gram, index[c], index[d])}
    report["all_pairs"] = {
        f"{Path(a).name}~{Path(b).name}": {"global_cos": pair_cos(gram, index[a], index[b])[1],
                                           "per_module_cos": module_cos(gram, index[a],
                                                                        index[b])}
        for i, a in enumerate(ckpts) for b in ckpts[i + 1:]}
    if not pair and len(ckpts) >= 2 and weight_shas(ckpts[0]) == weight_shas(ckpts[1]):
        log.warning(f"note: {ckpts[0]} and {ckpts[1]} hold the same weights: their deltas' "
                    "cosine is 1 by construction, so the report has no comparison; name two "
                    "different runs (or --pair A,B)")
        report["comparison"] = None
        return report
    pair = pair or ckpts[:2]
    if len(pair) == 2:
        a, b = pair
        cos, gcos = pair_cos(gram, index[a], index[b])
        report["comparison"] = {"a": a, "b": b, "cos": cos, "global_cos": gcos,
                                "per_module_cos": module_cos(gram, index[a], index[b]),
                                "specific": specific(gram, index[a], index[b])}
    return report


COMPARISON_FIGURES = ("cos", "specific", "control_cos")


def figure_names(paths: list[str]) -> dict[str, str]:
    """Each checkpoint's figure name, unique: its folder name, or as many trailing parts as
    make it unique with `/` written `_` (`da/m`, `db/m`: `da_m`, `db_m`); a name that would
    still meet another figure's (a comparison's, another checkpoint's or its `adam_` one) gets
    its position in front (`2_cos`), so no figure is written over another."""
    safe = {p: label.replace("/", "_").replace("\\", "_")
            for p, label in analysis.short_labels(paths).items()}
    values = list(safe.values())
    clash = {v for v in values if values.count(v) > 1 or v in COMPARISON_FIGURES
             or (v.startswith("adam_") and v[5:] in values)}
    out = {p: f"{i + 1}_{v}" if v in clash else v for i, (p, v) in enumerate(safe.items())}
    keys = [*COMPARISON_FIGURES, *out.values(), *(f"adam_{v}" for v in out.values())]
    if len(set(keys)) != len(keys):
        raise UsageError(f"the checkpoints' figure names {sorted(out.values())} meet each "
                         "other's; rename a folder")
    return out


def figures(report: ParamDeltaReport | dict) -> dict:
    """Layer x module heatmaps: per checkpoint ||dW||/||W0|| (`<name>`) and the
    Adam-normalised size (`adam_<name>`); cos(dA, dB) (`cos`), the specific delta
    (`specific`) and the seed-to-seed control's cosine (`control_cos`)."""
    report = as_report(report, ParamDeltaReport)
    from nca_interp.plots import heatmap

    n = report.n_layers
    out = {}
    names = figure_names(list(report.results))
    labels = analysis.short_labels(list(report.results))
    for p, r in report.results.items():
        grid, rows, cols = layer_module_grid(r.rel, n)
        out[names[p]] = heatmap(grid, rows, cols, f"||dW||/||W0||: {labels[p]}")
        if r.lr_budget:
            grid, rows, cols = layer_module_grid(r.adam_norm, n)
            out[f"adam_{names[p]}"] = heatmap(
                grid, rows, cols, f"Adam-normalised ||dW|| / (sum lr * sqrt(n)): {labels[p]}")
    if report.comparison is not None:
        cmp = report.comparison
        a, b = Path(cmp["a"]).name, Path(cmp["b"]).name
        grid, rows, cols = layer_module_grid(cmp["cos"], n)
        out["cos"] = heatmap(grid, rows, cols, f"cos(d {a}, d {b}) per module", signed=True)
        grid, rows, cols = layer_module_grid(cmp["specific"]["rel"], n)
        out["specific"] = heatmap(grid, rows, cols, f"specific delta ||d{b} - d{a}|| / ||W0||")
    if report.control is not None:
        c = report.control
        grid, rows, cols = layer_module_grid(c["cos"], n)
        out["control_cos"] = heatmap(grid, rows, cols, "seed-to-seed control: cos(d "
                                     f"{Path(c['a']).name}, d {Path(c['b']).name})",
                                     signed=True)
    return out


def main(argv: list[str] | ParamDeltaConfig | None = None) -> dict:
    cfg = parse_config(ParamDeltaConfig, argv, __doc__, positional="ckpt")
    return execute(analysis.command_defaults(sys.modules[__name__], cfg))


DEMO = ("sokoban_opd", "sokoban_nca")  # what the bare command line compares


def show(report: ParamDeltaReport | dict) -> None:
    report = as_report(report, ParamDeltaReport)
    per = report.results
    print(f"initial checkpoint: {report.init}  (rows: {report.rows})")
    for key in ("per_module", "per_module_adam", "per_layer", "per_layer_adam"):
        print(format_table(per, key) + "\n")
    print(LEGEND)
    blind = [p for p, r in per.items() if not r.lr_budget]
    if blind:
        names = analysis.short_labels(list(per))
        print(f"adam columns '-' for {', '.join(names[p] for p in blind)}: no learning rate "
              "and steps recorded (a checkpoint not trained here); pass --lr "
              "and --steps (and --warmup, --schedule) to get them")
    if report.comparison is not None:
        cmp = report.comparison
        print(format_cos(cmp, report.control))
        if "control" not in report:
            print("(no --control: cos(dA, dB) has no seed-to-seed baseline beside it)")
        top = sorted(cmp["specific"]["share"].items(), key=lambda kv: -kv[1])[:5]
        print("specific delta concentrates in: " +
              ", ".join(f"{k} ({v:.1%})" for k, v in top))


def execute(cfg: ParamDeltaConfig) -> dict:
    """The command on a config object (what `nca_interp.paper.reproduce` calls; `main` parses the
    command line into one): see `analysis.execute`."""
    return analysis.execute(sys.modules[__name__], cfg)

if __name__ == "__main__":
    sys.exit(entry(main, parsed=PARSED))
