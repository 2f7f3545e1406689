"""Reading and writing model-sized tensors without holding them: safetensors files read row
chunk by row chunk in their stored dtype (`TensorFolder`: one file, `save_pretrained` shards with
`model.safetensors.index.json`, or any folder of `*.safetensors`), headers checked against the
file, shards written one at a time (`save_sharded`), and a read-ahead thread (`prefetch`) so
reading overlaps whatever consumes the chunks (the Gram reducer of `nca_interp.reduce`).
"""

from __future__ import annotations

import json
import queue
import threading
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open

from nca_interp.errors import UsageError

__all__ = ["TensorFolder", "prefetch", "read_header", "row_chunks", "save_sharded"]

CHUNK_ELEMENTS = 1 << 22  # per vector and read: 4M elements (8 MB in bf16)


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
            raise UsageError(f"{path} is not a safetensors file (header of {n} bytes in a "
                             f"{size}-byte file); re-save or re-download it")
        try:
            header = json.loads(f.read(n))
            if not isinstance(header, dict):
                raise UsageError("not a JSON object")
        except (ValueError, RecursionError) as e:
            raise UsageError(f"{path}: unreadable safetensors header ({e}); re-save or "
                             "re-download it") from e
    header.pop("__metadata__", None)
    out = {}
    for name, h in header.items():
        try:
            a, b = (8 + n + int(o) for o in h["data_offsets"])
            dtype, shape = h["dtype"], tuple(int(d) for d in h["shape"])
        except (KeyError, TypeError, ValueError) as e:
            raise UsageError(f"{path}: malformed safetensors header entry for {name!r} ({e!r}); "
                             "re-save or re-download it") from e
        if not 8 + n <= a <= b <= size:
            raise UsageError(f"{path}: {name} lies outside the file (truncated?); re-save or "
                             "re-download it")
        if dtype in ST_DTYPES and \
                int(np.prod(shape)) * ST_DTYPES[dtype].itemsize != b - a:
            raise UsageError(f"{path}: {name} holds {b - a} bytes, not what its shape {shape} "
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
            from nca_interp.fsio import read_json

            weight_map = read_json(index, "checkpoint index")["weight_map"]
            files = sorted({self.path / f for f in weight_map.values()})
        self.entries: dict[str, tuple[Path, str, tuple[int, ...], int, int]] = {}
        for f in files:
            for n, (dtype, shape, a, b) in read_header(f).items():
                self.entries[n] = (f, dtype, shape, a, b)
        if self.path.is_dir() and index.exists():
            missing = set(weight_map) - set(self.entries)
            if missing:
                raise UsageError(f"{index} names {len(missing)} tensors its shards do not hold "
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
            view = out.reshape(-1).view(torch.uint8).numpy().data.cast("B")
            with open(f, "rb", buffering=0) as h:
                h.seek(a + start * row_bytes)
                got = 0
                while got < need:
                    k = h.readinto(view[got:])
                    if not k:
                        raise UsageError(f"{f}: {name} ends early (truncated?); re-save or "
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
    weight_map: dict[str, str] = {}
    shard: dict[str, torch.Tensor] = {}
    size, k = 0, 0

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
