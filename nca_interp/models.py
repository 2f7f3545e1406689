"""Tiny Hugging Face causal LMs built from a config (no weights are ever downloaded).

Qwen3 is the default; Qwen2 and Llama share the module names the analyses key on
(`model.layers.{i}.self_attn.{q,k,v,o}_proj`, `model.layers.{i}.mlp.{gate,up,down}_proj`).
"""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass

import torch
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    PreTrainedModel,
    Qwen2Config,
    Qwen3Config,
)

from nca_interp.configs import PRECISION_HELP  # noqa: F401 - read here as before
from nca_interp.errors import UsageError

__all__ = ["PRECISIONS", "ModelConfig", "autocast", "build_model", "auto_bf16", "check_precision",
           "context_limit", "native_bf16", "resolve_device", "resolved_precision", "weights_dtype"]

ARCHS = {"qwen3": Qwen3Config, "qwen2": Qwen2Config, "llama": LlamaConfig}


@dataclass
class ModelConfig:
    arch: str = "qwen3"
    n_layers: int = 4
    d_model: int = 128
    n_heads: int = 4
    n_kv_heads: int = 4
    d_mlp: int = 384
    max_len: int = 512


def check_shape(cfg: ModelConfig, vocab_size: int) -> None:
    """Refuse, before anything is built, a shape no attention layer has (--d-model 3 with 4
    heads was a ZeroDivisionError in the rotary embedding) or one that could not be trained in
    this machine's memory (--n-layers 100000 built for minutes, then failed to allocate)."""
    if cfg.d_model % cfg.n_heads:
        raise UsageError(f"--d-model {cfg.d_model} is not a multiple of --n-heads "
                         f"{cfg.n_heads}: each head takes d_model / n_heads dimensions")
    if (cfg.d_model // cfg.n_heads) % 2:
        raise UsageError(f"--d-model {cfg.d_model} / --n-heads {cfg.n_heads} = "
                         f"{cfg.d_model // cfg.n_heads} dimensions a head, which must be even "
                         "(rotary position embeddings turn pairs of them)")
    if cfg.n_heads % cfg.n_kv_heads:
        raise UsageError(f"{cfg.n_heads} attention heads do not share {cfg.n_kv_heads} "
                         "key/value heads evenly")
    params = cfg.n_layers * (4 * cfg.d_model ** 2 + 3 * cfg.d_model * cfg.d_mlp) \
        + 2 * vocab_size * cfg.d_model
    need, have = TRAIN_BYTES_PER_PARAM * params, available_memory()
    if have is not None and need > have:
        raise UsageError(f"a model of --n-layers {cfg.n_layers}, --d-model {cfg.d_model}, "
                         f"--d-mlp {cfg.d_mlp} has about {params:.3g} parameters, whose training "
                         f"needs about {need / 2**30:.3g} GiB (weights, gradients, Adam's two "
                         f"moments), more than the {have / 2**30:.3g} GiB free here: choose a "
                         "smaller model")


# float32 weights, gradients and Adam's two moments
TRAIN_BYTES_PER_PARAM = 16


def available_memory() -> int | None:
    """Bytes of memory free for a new allocation (Linux's MemAvailable), or None elsewhere."""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def build_model(cfg: ModelConfig, tokenizer, seed: int = 0) -> PreTrainedModel:
    """A randomly initialised model of `cfg` for `tokenizer`; same seed, same weights."""
    if cfg.arch not in ARCHS:
        raise UsageError(f"unknown arch {cfg.arch!r}; choose one of {sorted(ARCHS)}")
    check_shape(cfg, len(tokenizer))
    hf_cfg = ARCHS[cfg.arch](
        vocab_size=len(tokenizer), hidden_size=cfg.d_model, intermediate_size=cfg.d_mlp,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads, head_dim=cfg.d_model // cfg.n_heads,
        max_position_embeddings=cfg.max_len, tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(hf_cfg, attn_implementation="sdpa")
    return model


def context_limit(model: PreTrainedModel) -> int:
    return int(getattr(model.config, "max_position_embeddings", 0) or 0)


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """`auto` is the GPU when there is one, else the CPU; `cuda` without a GPU is an error."""
    if name not in ("auto", "cpu", "cuda") and not name.startswith("cuda:"):
        raise UsageError(f"--device must be auto, cpu, cuda or cuda:N, not {name!r}")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {name} asked for, but torch sees no GPU "
                         f"(torch {torch.__version__}); use --device cpu")
    return torch.device(f"cuda:{local_rank}" if name == "cuda" else name)


PRECISIONS = ("auto", "fp32", "bf16")
def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise UsageError(f"--precision must be auto, fp32 or bf16, not {precision!r}")


@functools.cache
def native_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices natively (AVX512-BF16 or AMX). Without it
    torch's bf16 GEMM is emulated, several times slower than fp32 (an AVX2 Zen 3:
    bench/results/precision_sokoban_base.txt), where with it bf16 runs faster. The
    environment variable NCA_INTERP_NATIVE_BF16=0|1 overrides the detection (the test suite
    sets 0, so that it checks fp32 numerics on every machine)."""
    forced = os.environ.get("NCA_INTERP_NATIVE_BF16")
    if forced in ("0", "1"):
        return forced == "1"
    cpu = torch.cpu
    return any(getattr(cpu, name, lambda: False)()
               for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))


def auto_bf16(device: torch.device) -> bool:
    """What `--precision auto` picks: bf16 on a GPU and on a CPU with native bf16 (bf16
    autocast agrees with fp32 there within the tolerances of `bench.precision`), fp32 on a CPU
    that emulates bf16 (slower than fp32)."""
    return device.type == "cuda" or (device.type == "cpu" and native_bf16())


def resolved_precision(device: torch.device, precision: str) -> str:
    """`fp32` or `bf16`: the precision `--precision` means on `device` (what a run records, so
    that it resumes and replays in the same precision on any machine)."""
    check_precision(precision)
    if precision == "auto":
        return "bf16" if auto_bf16(device) else "fp32"
    return precision


def weights_dtype(device: torch.device, precision: str) -> torch.dtype:
    """The weights' dtype for an analysis without an optimiser under `--precision` (the one
    precision flag; `auto` as in `autocast`)."""
    bf16 = resolved_precision(device, precision) == "bf16"
    return torch.bfloat16 if bf16 else torch.float32


def autocast(device: torch.device, precision: str):
    """bf16 autocast (fp32 master weights; the KL is computed in fp32) or nothing (`auto`:
    `auto_bf16`)."""
    if weights_dtype(device, precision) == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)
