"""One streaming reducer for every analysis that compares whole weight or gradient vectors.

param_delta (W0 and the deltas of several checkpoints) and grad_align (the gradients of the loss
terms on two half batches) both need the same thing: the inner products of K vectors the size of
a model, per parameter group. `Gram` accumulates those K x K matrices in float64, fed one tensor
(or one row chunk of a tensor) at a time, so no analysis ever holds more than a chunk of each
vector. Reading the vectors is `nca_interp.tensorfiles`' concern.

Groups, keyed by the one naming scheme (`names.module_of`): `global`, `{layer}.{module}` (e.g.
`3.k_proj`, `all.embed`), `module:{module}` and `layer:{layer}`.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import torch

from nca_interp.errors import UsageError
from nca_interp.names import module_of
from nca_interp.tensorfiles import prefetch

__all__ = ["Gram", "cosine", "stream_by_name"]

BLOCK_ELEMENTS = 1 << 15  # per vector and reduction block: 256 KB in float64, cache-resident


def group_keys(param_name: str) -> list[str]:
    layer, module = module_of(param_name)
    where = "all" if layer is None else str(layer)
    return ["global", f"{where}.{module}", f"module:{module}", f"layer:{where}"]


@contextmanager
def single_thread():
    """Run cache-sized blocks on one thread: intra-op threads only add synchronisation at this
    size, and on a busy machine (other jobs on the cores) each parallel region can stall for a
    scheduler slice (an order of magnitude slower beside two training jobs, in an ad-hoc run)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def _reduce_blocks(flat: list[torch.Tensor], starts: list[int], m: int, delta: bool,
                   G: torch.Tensor, buf: torch.Tensor) -> None:
    """G += V V^T over the blocks at `starts` (torch releases the GIL inside each op, so
    threads running this on different blocks run in parallel)."""
    for s in starts:
        e = min(s + BLOCK_ELEMENTS, m)
        V = buf[:, : e - s]
        for i, v in enumerate(flat):
            V[i].copy_(v[s:e])
            if delta and i:
                V[i].sub_(V[0])
        G.addmm_(V, V.T)


def stream_by_name(gram: Gram, items, delta: bool = False) -> None:
    """Feed (param_name, [K tensors]) row chunks, consecutive per parameter, to `gram`, the
    next chunks read ahead in a background thread."""
    for name, group in itertools.groupby(prefetch(items), key=lambda t: t[0]):
        gram.add(name, (vecs for _, vecs in group), delta=delta)


class Gram:
    """K x K float64 inner products of K named vectors, per group."""

    def __init__(self, labels: list[str]):
        self.labels = list(labels)
        self.mats: dict[str, np.ndarray] = {}
        self.sizes: dict[str, int] = {}  # elements per group (for per-element normalisations)

    def add(self, param_name: str, chunks, delta: bool = False) -> None:
        """`chunks`: an iterable of lists of K same-shape tensors (row chunks of one parameter
        in each vector, any dtype). `delta`: vectors 1..K-1 are taken minus vector 0 (the
        difference formed in float64). Each chunk is converted and reduced in blocks of
        BLOCK_ELEMENTS that stay in the CPU cache (the float64 products are exact; no
        chunk-sized float64 copy travels through main memory), the blocks split between
        `workers` threads (default: torch's thread count), each with its own K x K sum."""
        k = len(self.labels)
        workers = max(1, torch.get_num_threads())
        parts = [torch.zeros((k, k), dtype=torch.float64) for _ in range(workers)]
        bufs = [torch.empty((k, BLOCK_ELEMENTS), dtype=torch.float64) for _ in range(workers)]
        n = 0
        with single_thread(), ThreadPoolExecutor(workers) as pool:
            for vecs in chunks:
                if len(vecs) != k:
                    raise UsageError(f"{param_name}: {len(vecs)} vectors for {k} labels")
                flat = [v.reshape(-1) for v in vecs]
                m = flat[0].numel()
                starts = list(range(0, m, BLOCK_ELEMENTS))
                share = -(-len(starts) // workers)
                jobs = [pool.submit(_reduce_blocks, flat, starts[w * share:(w + 1) * share], m,
                                    delta, parts[w], bufs[w]) for w in range(workers)]
                for j in jobs:
                    j.result()
                n += m
        G = torch.stack(parts).sum(0).numpy()
        bad = [lab for lab, v in zip(self.labels, np.diag(G)) if not np.isfinite(v)]
        if bad:  # a NaN or Inf anywhere in a vector makes its squared norm non-finite
            raise UsageError(f"{bad[0]}: {param_name} holds NaN or Inf values; that "
                             "checkpoint (or gradient) is broken - use an earlier checkpoint")
        for key in group_keys(param_name):
            self.mats[key] = self.mats.get(key, np.zeros((k, k))) + G
            self.sizes[key] = self.sizes.get(key, 0) + n

    def index(self, label: str) -> int:
        return self.labels.index(label)

    def dot(self, key: str, a: str, b: str) -> float:
        return float(self.mats[key][self.index(a), self.index(b)])

    def combine(self, key: str, weights: dict[str, dict[str, float]]) -> np.ndarray:
        """Gram matrix of linear combinations: `weights[name] = {label: coefficient}`."""
        W = np.array([[w.get(lab, 0.0) for lab in self.labels] for w in weights.values()])
        return W @ self.mats[key] @ W.T


def cosine(G: np.ndarray, i: int, j: int) -> float | None:
    den = G[i, i] * G[j, j]
    return float(G[i, j] / np.sqrt(den)) if den > 0 else None
