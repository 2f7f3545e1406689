"""One streaming reducer for every analysis that compares whole weight or gradient vectors.

param_delta (W0 and the deltas of several checkpoints) and grad_align (the gradients of the loss
terms on two half batches) both need the same thing: the inner products of K vectors the size of
a model, per parameter group. `Gram` accumulates those K x K matrices in float64, fed one tensor
(or one row chunk of a tensor) at a time, so no analysis ever holds more than a chunk of each
vector. `TensorFolder` reads tensors of a safetensors folder (one file or `save_pretrained`
shards with `model.safetensors.index.json`) in their stored dtype, row chunk by row chunk.

Groups, keyed by the one naming scheme (`names.module_of`): `global`, `{layer}.{module}` (e.g.
`3.k_proj`, `all.embed`), `module:{module}` and `layer:{layer}`.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open

from nca_interp.names import module_of

CHUNK_ELEMENTS = 1 << 22  # per vector and read: 4M elements (8 MB in bf16)
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
                    raise ValueError(f"{param_name}: {len(vecs)} vectors for {k} labels")
                flat = [v.reshape(-1) for v in vecs]
                m = flat[0].numel()
                starts = list(range(0, m, BLOCK_ELEMENTS))
                share = -(-len(starts) // workers)
                jobs = [pool.submit(_reduce_blocks, flat, starts[w * share:(w + 1) * share], m,
                                    delta, parts[w], bufs[w]) for w in range(workers)]
                for j in jobs:
                    j.result()
                n += m
        G = sum(parts).numpy()
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


class TensorFolder:
    """The safetensors weights of one checkpoint folder, read lazily in their stored dtype.
    Handles a single file, `save_pretrained` shards (`model.safetensors.index.json`) and any
    folder of `*.safetensors` files; training-state files are not weights. Every read opens
    and closes its file, so no memory map outlives the tensor chunk it served (mapped pages
    count as resident memory)."""

    def __init__(self, path: str | Path):
        """`path`: a checkpoint folder, or one safetensors file."""
        self.path = Path(path)
        index = self.path / "model.safetensors.index.json"
        files = [self.path] if self.path.is_file() else sorted(
            f for f in self.path.glob("*.safetensors") if f.name != "trainer_state.safetensors")
        if self.path.is_dir() and index.exists():
            weight_map = json.loads(index.read_text())["weight_map"]
            self.files = {n: self.path / f for n, f in weight_map.items()}
        else:
            self.files = {}
            for f in files:
                with safe_open(str(f), framework="pt") as h:
                    for n in h.keys():
                        self.files[n] = f
        self._shapes: dict[str, tuple[int, ...]] = {}

    def __enter__(self) -> TensorFolder:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def names(self) -> list[str]:
        return list(self.files)

    def shape(self, name: str) -> tuple[int, ...]:
        if name not in self._shapes:
            with safe_open(str(self.files[name]), framework="pt") as h:
                self._shapes[name] = tuple(h.get_slice(name).get_shape())
        return self._shapes[name]

    def rows(self, name: str, start: int, stop: int) -> torch.Tensor:
        with safe_open(str(self.files[name]), framework="pt") as h:
            s = h.get_slice(name)
            return s[start:stop] if len(s.get_shape()) else s[:]

    def get(self, name: str) -> torch.Tensor:
        with safe_open(str(self.files[name]), framework="pt") as h:
            return h.get_tensor(name)


def save_sharded(tensors, folder: Path, max_bytes: int = 1 << 28) -> Path:
    """Write (name, tensor) pairs from an iterator as safetensors shards of at most
    `max_bytes` with an index, holding one shard in memory at a time; `TensorFolder` reads it.
    Tensors keep their dtype (a bf16 model's gradients are bf16: no precision is lost, half
    the disk of float32)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    weight_map, shard, size, k = {}, {}, 0, 0

    def flush():
        nonlocal shard, size, k
        if shard:
            name = f"shard-{k:05d}.safetensors"
            save_file(shard, folder / name)
            weight_map.update({n: name for n in shard})
            shard, size, k = {}, 0, k + 1

    for name, t in tensors:
        t = t.detach().cpu().contiguous()
        nbytes = t.numel() * t.element_size()
        if size and size + nbytes > max_bytes:
            flush()
        shard[name] = t
        size += nbytes
    flush()
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


def row_chunks(shape: tuple[int, ...], max_elements: int = CHUNK_ELEMENTS):
    """(start, stop) row ranges of a tensor of `shape`, each at most `max_elements` (but at
    least one row)."""
    if not shape:
        yield 0, 1
        return
    per_row = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    step = max(1, max_elements // max(per_row, 1))
    for start in range(0, shape[0], step):
        yield start, min(start + step, shape[0])
