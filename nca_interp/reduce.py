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

import itertools
import json
import queue
import threading
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


def prefetch(items, depth: int = 2):
    """Yield `items` while a reader thread produces the next `depth` of them, so reading
    (safetensors copies out of the page cache or the disk) overlaps the reduction of the
    previous chunk. Exceptions from the reader are raised at the consumer."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def put(entry) -> bool:
        """Queue `entry` unless the consumer has stopped (then never block on a full queue)."""
        while not stop.is_set():
            try:
                q.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read():
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((done, None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            put((done, e))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while True:
            item, err = q.get()
            if item is done:
                if err is not None:
                    raise err
                return
            yield item
    finally:
        stop.set()
        reader.join()


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
        bad = [lab for lab, v in zip(self.labels, np.diag(G)) if not np.isfinite(v)]
        if bad:  # a NaN or Inf anywhere in a vector makes its squared norm non-finite
            raise ValueError(f"{bad[0]}: {param_name} holds NaN or Inf values; that "
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


# safetensors dtype codes read directly (anything else goes through safetensors itself)
ST_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
             "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
             "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}


def read_header(path: Path) -> dict[str, tuple[str, tuple[int, ...], int, int]]:
    """name -> (dtype code, shape, first byte, last byte) of a safetensors file, the byte
    offsets absolute and checked against the file's size."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if size < 8 or not 0 < n <= size - 8:
            raise ValueError(f"{path} is not a safetensors file (header of {n} bytes in a "
                             f"{size}-byte file); re-save or re-download it")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise ValueError(f"{path}: unreadable safetensors header ({e}); re-save or "
                             "re-download it") from e
    header.pop("__metadata__", None)
    out = {}
    for name, h in header.items():
        try:
            a, b = (8 + n + int(o) for o in h["data_offsets"])
            dtype, shape = h["dtype"], tuple(int(d) for d in h["shape"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: malformed safetensors header entry for {name!r} ({e!r}); "
                             "re-save or re-download it") from e
        if not 8 + n <= a <= b <= size:
            raise ValueError(f"{path}: {name} lies outside the file (truncated?); re-save or "
                             "re-download it")
        if dtype in ST_DTYPES and \
                int(np.prod(shape)) * ST_DTYPES[dtype].itemsize != b - a:
            raise ValueError(f"{path}: {name} holds {b - a} bytes, not what its shape {shape} "
                             f"and dtype {dtype} need; re-save or re-download it")
        out[name] = (dtype, shape, a, b)
    return out


class TensorFolder:
    """The safetensors weights of one checkpoint folder, read lazily in their stored dtype.
    Handles a single file, `save_pretrained` shards (`model.safetensors.index.json`) and any
    folder of `*.safetensors` files; training-state files are not weights.

    Row ranges are read with plain file reads straight into the destination tensor (one copy
    out of the page cache or the disk, the GIL released, so a read-ahead thread overlaps the
    reduction; no memory map, whose pages would count as resident memory)."""

    def __init__(self, path: str | Path):
        """`path`: a checkpoint folder, or one safetensors file."""
        self.path = Path(path)
        index = self.path / "model.safetensors.index.json"
        files = [self.path] if self.path.is_file() else sorted(
            f for f in self.path.glob("*.safetensors") if f.name != "trainer_state.safetensors")
        if self.path.is_dir() and index.exists():
            weight_map = json.loads(index.read_text())["weight_map"]
            files = sorted({self.path / f for f in weight_map.values()})
        self.entries: dict[str, tuple[Path, str, tuple[int, ...], int, int]] = {}
        for f in files:
            for n, (dtype, shape, a, b) in read_header(f).items():
                self.entries[n] = (f, dtype, shape, a, b)
        if self.path.is_dir() and index.exists():
            missing = set(weight_map) - set(self.entries)
            if missing:
                raise ValueError(f"{index} names {len(missing)} tensors its shards do not hold "
                                 f"(e.g. {sorted(missing)[0]}); re-save the checkpoint")
            self.entries = {n: self.entries[n] for n in weight_map}

    def __enter__(self) -> TensorFolder:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def names(self) -> list[str]:
        return list(self.entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.entries[name][2]

    def rows(self, name: str, start: int, stop: int) -> torch.Tensor:
        f, dtype, shape, a, b = self.entries[name]
        if dtype not in ST_DTYPES:  # e.g. float8: let safetensors decode it
            with safe_open(str(f), framework="pt") as h:
                s = h.get_slice(name)
                return s[start:stop] if len(shape) else s[:]
        if not shape:
            start, stop = 0, 1
        out = torch.empty((stop - start, *shape[1:]) if shape else (), dtype=ST_DTYPES[dtype])
        row_bytes = (b - a) // max(1, shape[0] if shape else 1)
        need = out.numel() * out.element_size()
        if need:
            view = memoryview(out.reshape(-1).view(torch.uint8).numpy()).cast("B")
            with open(f, "rb", buffering=0) as h:
                h.seek(a + start * row_bytes)
                got = 0
                while got < need:
                    k = h.readinto(view[got:])
                    if not k:
                        raise ValueError(f"{f}: {name} ends early (truncated?); re-save or "
                                         "re-download it")
                    got += k
        return out

    def get(self, name: str) -> torch.Tensor:
        shape = self.shape(name)
        return self.rows(name, 0, shape[0] if shape else 1)


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
