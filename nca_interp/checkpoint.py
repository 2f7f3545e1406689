"""Checkpoint folders: Hugging Face layout, safetensors only, atomic saves, loud failures.

A checkpoint is a `save_pretrained` folder (config, `model.safetensors`, tokenizer) plus
`run_config.json` and a manifest `nca_checkpoint.json` (size and sha256 of every file). The
manifest is written last, so a folder of ours without it is an interrupted save. Step
checkpoints are written to a temporary sibling and renamed into place. A run directory is itself
a checkpoint folder (its latest published weights) plus `metrics.jsonl` and `checkpoints/`.

Loading never unpickles (`use_safetensors=True`, no `trust_remote_code`) and works offline.
Training state (optimizer moments, step) is stored as `trainer_state.safetensors` +
`trainer_state.json`, also without pickle.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from nca_interp.errors import UsageError
from nca_interp.faults import fault_point
from nca_interp.fsio import (
    check_target,
    default_cache,
    is_temporary,
    new_stage,
    read_json,
    regular_file,
    replace_folder,
    staged,
    write_error,
    write_text,
)

__all__ = ["LOADED_FILES", "MANIFEST", "RUN_CONFIG_CIRCUMSTANCES", "CheckpointError",
           "check_architecture",
           "check_same_tokenizer", "content_digest", "drop_optimizer_state", "git_commit",
           "hash_once", "latest_step_checkpoint", "load_checkpoint", "n_layers_of",
           "read_run_config", "same_weights", "save_checkpoint", "step_number", "verify_folder",
           "check_step_record",
           "weight_files",
           "weights_digest", "write_manifest"]

MANIFEST = "nca_checkpoint.json"
RUN_CONFIG = "run_config.json"


class CheckpointError(UsageError):
    """A path that cannot be used as a checkpoint; the message says what to do. `fact`: what
    is wrong without the advice (a caller that acts on it itself prints only that)."""

    def __init__(self, message: str, fact: str | None = None):
        super().__init__(message)
        self.fact = fact or message


def git_commit(where: Path | None = None) -> str:
    """The commit of the source (of the git tree holding `where`; default this package), with
    "+dirty" when tracked files differ from it: a run launched from an edited tree cannot be
    reproduced from its commit alone."""
    here = where or Path(__file__).parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=here, timeout=5)
        commit = out.stdout.strip()
        if not commit:
            return "unknown"
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, cwd=here, timeout=10)
        return commit + ("+dirty" if status.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# Inside `hash_once()` (every command's entry point): folder -> the (name, size, mtime_ns,
# inode) of its manifest and listed files when they last hashed clean. A command opens a
# checkpoint several times (up-front checks, tokenizer, model) and at 1.7B each sha256 pass
# reads gigabytes; a changed stat hashes the folder again. Outside it every open hashes.
_HASHED: dict[Path, tuple] | None = None


@contextmanager
def hash_once():
    global _HASHED
    before, _HASHED = _HASHED, {} if _HASHED is None else _HASHED
    try:
        yield
    finally:
        _HASHED = before


def _file_stats(folder: Path, names: list[str]) -> tuple:
    out: list[tuple] = []
    for n in names:
        try:
            st = (folder / n).stat()
            out.append((n, st.st_size, st.st_mtime_ns, st.st_ino))
        except OSError:
            out.append((n, None))
    return tuple(out)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# folders of a checkpoint whose files its manifest lists too, as "FOLDER/NAME" (a LoRA run's
# adapter, nca_interp.lora.ADAPTER_DIR): one level, no other
SUBFOLDERS = ("adapter",)


def _listed_files(folder: Path, skip: tuple[str, ...] = ()) -> list[tuple[str, Path]]:
    """(manifest name, path) of every file a manifest of `folder` lists: its own files and
    those of its `SUBFOLDERS`, but `skip`, the manifest and dot-files (.lock, temporaries)."""
    out = []
    for sub in ("", *SUBFOLDERS):
        where = folder / sub if sub else folder
        if sub and (where.is_symlink() or not where.is_dir()):
            continue
        for p in sorted(where.iterdir()):
            name = f"{sub}/{p.name}" if sub else p.name
            if p.is_file() and not p.is_symlink() and name not in (MANIFEST, *skip) \
                    and not p.name.startswith("."):
                out.append((name, p))
    return out


def write_manifest(folder: Path, skip: tuple[str, ...] = ()) -> None:
    """Size and sha256 of every file (but `skip` and temporaries) of the folder and its
    `SUBFOLDERS`, written last, atomically."""
    files = {name: {"bytes": p.stat().st_size, "sha256": _sha256(p)}
             for name, p in _listed_files(folder, skip)}
    write_text(folder / MANIFEST, json.dumps({"files": files}, indent=1))


def manifest_name_ok(name) -> bool:
    """A name a manifest may list: a file of the folder itself, or of one of its `SUBFOLDERS`
    (`adapter/adapter_model.safetensors`); never a path elsewhere (`/etc/hostname`, `../x`)."""
    if not isinstance(name, str) or "\\" in name or "\0" in name:
        return False
    parts = name.split("/")
    if len(parts) == 2 and parts[0] in SUBFOLDERS:
        parts = parts[1:]
    return len(parts) == 1 and parts[0] not in ("", ".", "..")


def _write_folder(folder: Path, model, tokenizer, run_config: dict | None,
                  trainer_state: tuple[dict[str, torch.Tensor], dict] | None) -> None:
    folder.mkdir(parents=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    if run_config is not None:
        (folder / RUN_CONFIG).write_text(json.dumps(run_config, indent=1, default=str))
    if trainer_state is not None:
        tensors, meta = trainer_state
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()},
                  folder / "trainer_state.safetensors")
        (folder / "trainer_state.json").write_text(json.dumps(meta, indent=1))
    _shareable(folder)
    write_manifest(folder)


def _shareable(folder: Path) -> None:
    """Every file of a saved checkpoint readable as the user's umask allows any new file
    (transformers writes the weights through a private temporary, mode 0600: a colleague could
    read a run's root but not its step checkpoints)."""
    mask = os.umask(0)
    os.umask(mask)
    for f in folder.rglob("*"):
        if f.is_file() and not f.is_symlink():
            os.chmod(f, 0o666 & ~mask)


def save_checkpoint(path: str | Path, model, tokenizer, run_config: dict | None = None,
                    trainer_state: tuple[dict[str, torch.Tensor], dict] | None = None) -> Path:
    """Write a complete checkpoint folder at `path` atomically (temp folder, then rename).
    An existing folder at `path` is replaced only once the new one is complete."""
    path = check_target(Path(path).expanduser().absolute())  # the name itself: resolving it
    path = path.parent.resolve() / path.name  # first followed a link there and replaced the
    stage = new_stage(path.parent)  # folder it pointed to, files and all (the sixth probe)
    try:
        tmp = stage / path.name
        _write_folder(tmp, model, tokenizer, run_config, trainer_state)
        fault_point("save")
        return replace_folder(tmp, path)
    except OSError as e:  # a full disk or a limit keeps no half-written folder, names the file
        raise write_error(e, path) from None
    except Exception as e:  # safetensors wraps the OSError of a write in its own error
        from nca_interp.fsio import is_write_fault

        if is_write_fault(e):
            raise write_error(e, path) from None
        raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def same_weights(src: str | Path, run_dir: str | Path) -> bool:
    """Whether `run_dir`'s published files are checkpoint `src`'s (by the sha256s their
    manifests record): False when a kill fell between a step's save and its publish."""
    try:
        step = read_json(Path(src) / MANIFEST)["files"]
        root = read_json(Path(run_dir) / MANIFEST)["files"]
    except (OSError, ValueError, KeyError):
        return False
    return all(root.get(name, {}).get("sha256") == meta["sha256"] for name, meta in step.items()
               if name not in ("trainer_state.safetensors", "trainer_state.json"))


def publish(src: str | Path, run_dir: str | Path) -> None:
    """Make `run_dir` itself a loadable copy of checkpoint `src` (its latest weights).
    The manifest is removed first and rewritten last, so a crash in between leaves a run
    directory that `load_checkpoint` reports as incomplete rather than half-old weights."""
    src, run_dir = Path(src), Path(run_dir)
    (run_dir / MANIFEST).unlink(missing_ok=True)
    with staged(run_dir) as stage:
        for name, f in _listed_files(src, ("trainer_state.safetensors", "trainer_state.json")):
            if "/" in name:  # an adapter/ file: its folder, never through a link
                sub = check_target(run_dir / name.split("/")[0])
                if not sub.is_dir():
                    sub.mkdir()
            target = check_target(run_dir / name)
            try:
                shutil.copyfile(f, stage / f.name)
                os.replace(stage / f.name, target)
            except OSError as e:
                raise write_error(e, target) from None
            fault_point("publish")
    # metrics.jsonl keeps growing after a publish; it is not part of the weights' manifest.
    write_manifest(run_dir, skip=("metrics.jsonl",))


def weight_files(path: Path) -> list[Path]:
    """The safetensors weight files of a checkpoint folder: one set, or a CheckpointError
    naming both (a `model.safetensors` beside shards and their index: transformers reads one,
    a reader of every `*.safetensors` the other)."""
    files = sorted(f for f in path.glob("*.safetensors")
                   if f.name != "trainer_state.safetensors" and not is_temporary(f.name))
    index = path / "model.safetensors.index.json"
    if index.exists():
        try:
            listed = set(read_json(index, "checkpoint index")["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CheckpointError(f"{index} is corrupt ({e}); restore it") from e
        missing = sorted(n for n in listed if not (path / n).is_file())
        if missing:
            raise CheckpointError(f"{path}: {index.name} lists {len(missing)} shard(s) the "
                                  f"folder lacks ({', '.join(missing[:3])}); restore them from "
                                  "where the checkpoint came from")
        extra = [f.name for f in files if f.name not in listed]
        if extra:
            raise CheckpointError(f"{path} holds two weight sets: the shards its "
                                  f"{index.name} lists and {', '.join(extra[:3])}; keep one "
                                  "(move the other to its own folder)")
        return files
    if len(files) > 1:
        raise CheckpointError(f"{path} holds {len(files)} weight files "
                              f"({', '.join(f.name for f in files[:3])}) and no "
                              "model.safetensors.index.json saying which belong together; keep "
                              "one weight set per folder")
    return files


def _remedy(path: Path) -> str:
    """What to do about a damaged folder: fetch again (a registry model in the cache) or
    restore it."""
    prov = path / "PROVENANCE.json"
    if prov.is_file():
        try:
            name = read_json(prov, "provenance").get("model")
        except (ValueError, AttributeError):
            name = None
        fix = f"python -m nca_interp.fetch {name or 'MODEL'} --verify"
        if (default_cache() / "models").expanduser().resolve() in path.parents:
            return (f"it is a fetched model: run `{fix}`, which checks every file's sha256 and "
                    "fetches a damaged copy again")
        return (f"it is a copy of a fetched model made outside the cache: run `{fix}` and use "
                "(or copy here) the cache's folder it prints")
    if path.name.startswith("step_") and (path.parent.parent / RUN_CONFIG).exists():
        return (f"restore it, or rerun the run with --resume-from an earlier step under "
                f"{path.parent}")
    return "restore it from where the folder came from, or use an earlier checkpoint"


def _check_finite_config(config: Path) -> None:
    """A model config holds no NaN or Infinity (Python's JSON reader takes them, and 1e999,
    as inf: a NaN `rms_norm_eps` made every answer wrong without a word), no size or epsilon of
    0 or below (`POSITIVE_CONFIG`, at any depth: transformers 5 nests `rope_theta` in
    `rope_parameters`), no epsilon of 1 or more (1e30 flattened every logit), and an activation
    transformers knows (an unknown one was a KeyError traceback)."""
    import math

    from nca_interp.fsio import MAX_JSON_BYTES, read_text

    def refuse(name: str):
        raise CheckpointError(f"{config} holds {name}, which is no number a model config can "
                              "use; restore the file from where the checkpoint came from")

    def finite(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            refuse(text)
        return value

    try:
        d = json.loads(read_text(config, "model config", MAX_JSON_BYTES), parse_constant=refuse,
                       parse_float=finite)
    except (json.JSONDecodeError, RecursionError):
        return  # named, in one line, where the config is parsed (check_architecture)

    def walk(node, depth=0):
        if not isinstance(node, dict) or depth > 3:
            return
        for key, value in node.items():
            if isinstance(value, dict) and set(value) == {"__float__"}:  # transformers 5
                try:  # writes inf as {"__float__": "Infinity"}
                    value = float(str(value["__float__"]))
                except ValueError:
                    refuse(f"{key}: {value['__float__']!r}")
                if not math.isfinite(value):
                    refuse(f"{key}: {value}")
            if isinstance(value, dict):
                walk(value, depth + 1)
            if key not in POSITIVE_CONFIG or value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise CheckpointError(f"{config}: {key} is {value!r}, not a number; restore the "
                                      "file from where the checkpoint came from")
            if key not in EPSILONS and (value > 2**31 - 1 and key != "rope_theta" or
                                        value > 1e30):
                raise CheckpointError(f"{config}: {key} is {value}, more than any model holds; "
                                      "restore the file from where the checkpoint came from")
            if value <= 0:
                raise CheckpointError(f"{config}: {key} is {value}, and must be above 0; "
                                      "restore the file from where the checkpoint came from")
            if key in EPSILONS and value >= 1:
                raise CheckpointError(f"{config}: {key} is {value}; a norm's epsilon is a small "
                                      "number (1e-6 to 1e-5), not 1 or more: restore the file "
                                      "from where the checkpoint came from")

    walk(d)
    act = d.get("hidden_act") if isinstance(d, dict) else None
    if act is not None:
        from transformers.activations import ACT2FN

        if not isinstance(act, str) or act not in ACT2FN:
            raise CheckpointError(f"{config}: hidden_act {act!r} is no activation transformers "
                                  "knows; restore the file from where the checkpoint came from")


# model-config numbers that must be above 0 for the model to compute what it was trained to
EPSILONS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps")
POSITIVE_CONFIG = (*EPSILONS, "rope_theta", "hidden_size", "num_hidden_layers",
                   "num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size",
                   "head_dim", "max_position_embeddings", "sliding_window")


# what transformers reads from a checkpoint folder when it loads the model and its tokenizer
# (besides every *.safetensors): in a folder with a manifest each must be listed there
LOADED_FILES = ("config.json", "generation_config.json", "model.safetensors.index.json",
                "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model", "vocab.txt",
                "chat_template.jinja", "chat_template.json", "preprocessor_config.json",
                "processor_config.json")
LOADED_FOLDERS = ("additional_chat_templates",)  # transformers 5: named chat templates
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")  # what peft reads of adapter/


def _unlisted_loaded(path: Path, files: dict) -> list[str]:
    """The files of `path` (and of its `SUBFOLDERS`) that a loader reads but its manifest does
    not list: a chat template planted in a verified run changed every prompt without a word,
    and a manifest listing nothing verified nothing (the sixth probe)."""
    out = []
    for sub in ("", *SUBFOLDERS):
        where = path / sub if sub else path
        if sub and (where.is_symlink() or not where.is_dir() or
                    not any(str(n).startswith(f"{sub}/") for n in files)):
            continue  # a manifest of before adapter/ was listed (a LoRA run of then resumes)
        for p in sorted(where.iterdir()):
            name = f"{sub}/{p.name}" if sub else p.name
            loaded = p.name in ADAPTER_FILES if sub else \
                p.name in (*LOADED_FILES, *LOADED_FOLDERS) or p.name.endswith(".safetensors")
            if loaded and name not in files and not is_temporary(p.name) and \
                    not p.name.startswith(".") and (p.is_file() or p.is_dir()):
                out.append(name)
    return out


def verify_folder(path: str | Path) -> Path:
    """Check that `path` is a usable checkpoint folder; return it resolved, or raise
    CheckpointError naming the problem and what to do."""
    path = Path(path).expanduser().resolve()
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}: check the path, or train one with "
                              "`python -m train.sft --out DIR` (from a clone; installed: "
                              "`python -m nca_interp.train.sft`)")
    if not path.is_dir():
        raise CheckpointError(f"{path} is a file; pass the checkpoint *folder* that holds "
                              "config.json and model.safetensors")
    if not (path / "config.json").exists():
        hint = ""
        if (path / "checkpoints").is_dir():
            hint = f" (its step checkpoints are under {path / 'checkpoints'})"
        raise CheckpointError(f"{path} is not a checkpoint folder: no config.json{hint}")
    regular_file(path / "config.json", "checkpoint file")  # a FIFO would block the load
    _check_finite_config(path / "config.json")
    weights = weight_files(path)
    if not weights:
        if list(path.glob("*.bin")) or list(path.glob("*.pt")):
            raise CheckpointError(f"{path} holds only pickled weights (*.bin/*.pt); nca_interp "
                                  "never unpickles. Convert them to safetensors first.")
        raise CheckpointError(f"{path} has config.json but no *.safetensors weights")
    for f in weights:
        regular_file(f, "checkpoint file")
    for n in ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt"):
        if (path / n).exists() or (path / n).is_symlink():
            regular_file(path / n, "checkpoint file")  # a FIFO read as "no tokenizer files"
    if not any((path / n).is_file() for n in ("tokenizer.json", "tokenizer.model",
                                              "vocab.json", "vocab.txt")):
        raise CheckpointError(f"{path} holds no tokenizer files (tokenizer.json, "
                              "tokenizer.model or vocab.json); copy the tokenizer the model was "
                              "trained with into the folder")
    for n in ("tokenizer.json", "tokenizer_config.json"):
        if (path / n).exists():
            regular_file(path / n, "checkpoint file")
    manifest = path / MANIFEST
    if manifest.exists():
        try:
            files = read_json(manifest, "checkpoint manifest")["files"]
            if not isinstance(files, dict):
                raise TypeError("'files' is not a mapping")
        except (ValueError, KeyError, TypeError) as e:
            fact = f"{manifest} is corrupt ({e})"
            raise CheckpointError(f"{fact}; {_remedy(path)}", fact) from e
        # a manifest lists the folder's own files by name: a path elsewhere (`/etc/hostname`,
        # `../x`) is refused before anything is opened, read or hashed
        outside = [n for n in files if not manifest_name_ok(n)]
        outside += [n for n in files if "/" in str(n) and (path / n.split("/")[0]).is_symlink()]
        if outside:
            fact = (f"{manifest} names {outside[0]!r}, which is not a file of the folder "
                    "itself; the manifest is damaged or was made to read other files")
            raise CheckpointError(f"{fact}: {_remedy(path)}", fact)
        bad = next((n for n, m in files.items() if not (
            isinstance(m, dict) and isinstance(m.get("sha256"), str) and
            isinstance(m.get("bytes"), int) and not isinstance(m.get("bytes"), bool))), None)
        if bad is not None:  # an entry of another shape was a TypeError (the sixth probe)
            fact = (f"{manifest} is corrupt (its entry for {bad!r} is not the file's bytes "
                    "and sha256)")
            raise CheckpointError(f"{fact}; {_remedy(path)}", fact)
        unlisted = _unlisted_loaded(path, files)
        if unlisted:
            fact = (f"{path / unlisted[0]} is not in the folder's {MANIFEST}: the loader "
                    "reads it, but the checkpoint was not saved with it (a file added later "
                    "changes the model or its prompts without a word)")
            raise CheckpointError(f"{fact}; remove it, or {_remedy(path)}", fact)
        seen = _file_stats(path, [MANIFEST, *files])
        if _HASHED is None or _HASHED.get(path) != seen:
            for name, meta in files.items():
                f = path / name
                if f.is_file() and not os.access(f, os.R_OK):
                    raise CheckpointError(f"{f} cannot be read (permission denied); make it "
                                          "readable (chmod u+r) or copy the checkpoint where "
                                          "you can read it")
                if not f.is_file() or f.stat().st_size != meta["bytes"] or \
                        _sha256(f) != meta["sha256"]:
                    fact = (f"{f} is missing, truncated or corrupt (does not match "
                            f"{MANIFEST}: the file or the manifest is damaged)")
                    raise CheckpointError(f"{fact}; {_remedy(path)}", fact)
            if _HASHED is not None:
                _HASHED[path] = seen
    elif (path / RUN_CONFIG).exists():
        raise CheckpointError(f"{path} is an interrupted save (no {MANIFEST}); resume the run "
                              f"or load a step folder under {path / 'checkpoints'}")
    for w in weights:
        try:
            with safe_open(str(w), framework="pt") as f:
                f.keys()
        except Exception as e:  # noqa: BLE001 - safetensors/OS errors of any kind
            raise CheckpointError(f"{w} is not a valid safetensors file ({e}); the file is "
                                  "truncated or corrupt: restore it or use another "
                                  "checkpoint") from e
    return path


SUPPORTED = ("qwen3", "qwen2", "llama")  # the families every published number was measured on


def bridge_architectures() -> set[str]:
    """The Hugging Face model classes TransformerLens 4's bridge has an adapter for."""
    from transformer_lens.tools.model_registry import HF_SUPPORTED_ARCHITECTURES

    return set(HF_SUPPORTED_ARCHITECTURES)


def causal_lm_class(config: dict) -> str | None:
    """The causal-LM class a config names (`architectures`), else the one transformers maps
    its model_type to."""
    named = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    if named:
        return named[0]
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(str(config.get("model_type")))


def check_architecture(path: Path) -> dict:
    """The folder's config, if its architecture can be analysed: a causal LM that
    TransformerLens 4's bridge has an adapter for (module names, head layout and embedding ties
    are read from the model and its config, not from a list of families). Otherwise one line
    naming the folder and the reason, before any work."""
    from nca_interp.errors import InputError

    try:
        config = read_json(path / "config.json", "model config")
    except InputError as e:  # names the file and what to do already
        raise CheckpointError(str(e)) from e
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path / 'config.json'} is not readable JSON ({e}); restore it "
                              "from the checkpoint's source") from e
    if not isinstance(config, dict):
        raise CheckpointError(f"{path / 'config.json'} is not a JSON object; restore it")
    if config.get("quantization_config"):  # transformers would import a quantizer (or fail
        raise CheckpointError(  # to: an ImportError traceback, the sixth probe)
            f"{path / 'config.json'} describes quantized weights (quantization_config "
            f"{str(config['quantization_config'])[:60]}); nca_interp analyses full-precision "
            "safetensors weights: dequantize the checkpoint first")
    arch = config.get("model_type")
    if arch in SUPPORTED:
        return config
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    cls = causal_lm_class(config)
    if cls is None or cls not in set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()):
        raise CheckpointError(f"{path}: model_type {arch!r} ({cls or 'no model class'}) is not "
                              "a causal language model transformers knows; nca_interp analyses "
                              "causal LMs")
    if cls not in bridge_architectures():
        raise CheckpointError(f"{path}: {cls} (model_type {arch!r}) is not supported: "
                              "TransformerLens 4's bridge has no adapter for it, and every "
                              "hook-based analysis reads the model through the bridge")
    return config


def load_checkpoint(path: str | Path, device: str = "cpu",
                    dtype: torch.dtype | str | None = None, verify: bool = True):
    """(model, tokenizer) from a local checkpoint folder, offline, without unpickling, and
    strictly: a supported architecture, every tensor present with its shape and none extra,
    finite weights, a tokenizer that fits the embedding. `dtype`: None keeps float32 (what
    every number here was measured in); "stored" keeps the folder's dtype."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one "Loading weights" bar per load clutters every table
    path = verify_folder(path) if verify else Path(path).resolve()
    config = check_architecture(path)
    _check_config_loads(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - transformers raises many types here
        raise CheckpointError(f"{path}: tokenizer could not be loaded ({e}); a checkpoint "
                              "folder must hold its tokenizer files") from e
    limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit != limit \
            or limit < 1:  # "NaN" in tokenizer_config.json broke every later encode
        raise CheckpointError(f"{path / 'tokenizer_config.json'}: model_max_length is "
                              f"{limit!r}, not a positive number of tokens; restore the file "
                              "(or remove the key)")
    if len(tokenizer) > config.get("vocab_size", len(tokenizer)):
        raise CheckpointError(f"{path}: the tokenizer has {len(tokenizer)} tokens but the model "
                              f"only {config['vocab_size']} embedding rows; the tokenizer files "
                              "belong to another model")
    if dtype == "stored":
        dtype = "auto"
    hf_logging.set_verbosity_error()  # missing/unexpected weights are reported below instead
    try:
        model, info = _from_pretrained(path, dtype or torch.float32)
    except RuntimeError as e:  # transformers' report of tensors whose shapes do not match
        if not any(w in str(e) for w in ("size mismatch", "shape", "mismatched")):
            raise  # not a shape report (out of threads or memory): its own message is the fact
        raise CheckpointError(f"{path}: the weights do not match config.json (tensor shapes "
                              "differ); restore the model.safetensors that belongs to this "
                              "config") from e
    problems = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys",
                                                       "mismatched_keys") and v}
    if problems:
        what = "; ".join(f"{k.replace('_', ' ')}: {sorted(map(str, v))[:3]}"
                         for k, v in problems.items())
        raise CheckpointError(f"{path}: the weights do not match config.json ({what}); a "
                              "missing tensor would be silently re-initialised at random - "
                              "restore the complete model.safetensors")
    for name, p in model.named_parameters():
        if not torch.isfinite(p).all():
            raise CheckpointError(f"{path}: parameter {name} holds NaN or Inf; this checkpoint "
                                  "is broken - use an earlier one")
    model.to(device).eval()
    return model, tokenizer


def _check_config_loads(path: Path) -> None:
    """transformers' own reading of config.json, before the tokenizer's (which reads it too):
    a config it refuses (a layer count its layer_types disagree with, a bool field holding
    "yes") is named as the config, not as a tokenizer that could not be loaded."""
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - transformers raises many types here
        said = " ".join(str(e).split())[:300]
        raise CheckpointError(f"{path / 'config.json'} is not a config transformers accepts "
                              f"({said}); restore the file from where the checkpoint came "
                              "from") from e


def _from_pretrained(path: Path, dtype):
    """The model through PyTorch's fused attention, or eager attention for an architecture
    that does not offer it (Gemma 2)."""
    from transformers import AutoModelForCausalLM

    kw = dict(local_files_only=True, use_safetensors=True, trust_remote_code=False, dtype=dtype,
              output_loading_info=True)
    try:
        return AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa", **kw)
    except ValueError as e:
        if "attention implementation" not in str(e):
            raise
        return AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", **kw)


def check_same_tokenizer(tok_a, tok_b, a: str, b: str) -> None:
    """Token-level KL and patching compare distributions token id by token id: both models
    must map every string to the same id (a permuted vocabulary scrambles every number)."""
    if tok_a.get_vocab() != tok_b.get_vocab() or tok_a.eos_token_id != tok_b.eos_token_id:
        raise CheckpointError(f"{b} and {a} use different tokenizers; token-level comparisons "
                              "need one vocabulary - pick checkpoints trained with the same "
                              "tokenizer")


def n_layers_of(config: dict) -> int | None:
    """A model config's number of transformer blocks, under the names HF families use (None:
    the config names none)."""
    return next((config[k] for k in ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
                 if isinstance(config.get(k), int)), None)


def read_run_config(path: str | Path) -> dict:
    f = Path(path) / RUN_CONFIG
    if not f.exists():
        return {}
    config = read_json(f, "run config")
    if not isinstance(config, dict):
        raise CheckpointError(f"{f} is not a JSON object; restore it from the run")
    return config


def load_trainer_state(folder: str | Path) -> tuple[dict[str, torch.Tensor], dict] | None:
    folder = Path(folder)
    if not (folder / "trainer_state.json").exists():
        return None
    if not (folder / "trainer_state.safetensors").exists():
        raise CheckpointError(f"{folder} no longer holds its optimizer state (only a run's "
                              "newest step checkpoint keeps it); resume from the newest")
    return (load_file(folder / "trainer_state.safetensors"),
            read_json(folder / "trainer_state.json", "trainer state"))


def load_weights_into(model, folder: str | Path) -> None:
    """Load a checkpoint folder's weights (every weight shard) into `model` in place, to resume
    training it. A key the files leave out because it is tied to a saved one (a tied lm_head,
    as in SmolLM2) is fine; any other missing or unexpected key is a CheckpointError."""
    folder = Path(folder)
    device = str(next(model.parameters()).device)
    state: dict[str, torch.Tensor] = {}
    for f in weight_files(folder):
        state.update(load_file(f, device=device))
    params = model.state_dict(keep_vars=True)
    shapes = [k for k, v in state.items() if k in params and params[k].shape != v.shape]
    missing = [k for k in params if k not in state]
    unexpected = [k for k in state if k not in params]
    saved = {params[k].data_ptr() for k in state if k in params}
    untied = [k for k in missing if params[k].data_ptr() not in saved]
    if shapes or unexpected or untied:
        raise CheckpointError(f"{folder} does not fit the model being resumed (shapes differ "
                              f"{shapes[:3]}, missing {untied[:3]}, unexpected "
                              f"{unexpected[:3]}); delete the run folder to train it from the "
                              "start")
    model.load_state_dict(state, strict=False)


def drop_optimizer_state(folder: str | Path) -> None:
    """Delete a superseded step checkpoint's optimizer moments (twice its weights' size under
    Adam: a 135M-parameter run's 4 checkpoints took 6.6 GB, 4.3 GB of it optimizer state) and
    take them out of its manifest. Its weights and trainer_state.json (the step, which
    param_delta's lr budget reads) stay; only resuming needs the moments, from the newest."""
    folder = Path(folder)
    manifest = read_json(folder / MANIFEST, "checkpoint manifest")
    manifest["files"].pop("trainer_state.safetensors", None)
    write_text(folder / MANIFEST, json.dumps(manifest, indent=1))
    (folder / "trainer_state.safetensors").unlink(missing_ok=True)


def latest_step_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete `checkpoints/step_*` folder of a run (temp folders are ignored)."""
    root = Path(run_dir) / "checkpoints"
    steps = sorted(p for p in root.glob("step_*") if (p / MANIFEST).exists()) \
        if root.is_dir() else []
    return steps[-1] if steps else None


# run-config entries that say how or where a run was made, not what its checkpoint computes
RUN_CONFIG_CIRCUMSTANCES = ("git_commit", "out", "threads", "device", "teacher_device",
                            "micro_batch", "grad_checkpointing", "inputs", "resume_from",
                            "eval_every", "eval_levels", "save_every")


def weights_digest(folder: str | Path) -> str:
    """What a checkpoint folder computes with: the sha256s its manifest records for its
    weights, config and tokenizer, and its run config without the circumstances of the run
    (`RUN_CONFIG_CIRCUMSTANCES`: commit, output folder, threads, ...), hashed together; not
    the trainer state (Adam's moments and the step, which only resuming reads). So dropping
    the moments, copying, checking out or retraining to the same weights keeps it; retraining
    to other weights, or another task or method in the run config, does not."""
    folder = verify_folder(folder)
    files = read_json(folder / MANIFEST, "checkpoint manifest")["files"]
    kept = sorted((name, meta["sha256"]) for name, meta in files.items()
                  if not name.startswith("trainer_state") and name != RUN_CONFIG)
    config = {k: v for k, v in read_run_config(folder).items()
              if k not in RUN_CONFIG_CIRCUMSTANCES}
    return hashlib.sha256(json.dumps([kept, config], sort_keys=True, default=str)
                          .encode()).hexdigest()


def content_digest(path: str | Path) -> str:
    """A sha256 that changes whenever what a checkpoint folder (or data file) holds changes:
    of its verified manifest where it has one (which records every file's sha256), else of its
    config, weights and tokenizer files, else of the file itself. A run records it for each
    input, so a resume against a retrained teacher is refused."""
    import hashlib

    path = Path(path).expanduser().resolve()
    if path.is_file():
        return _sha256(regular_file(path, "input file"))
    folder = verify_folder(path)
    if (folder / MANIFEST).exists():
        return hashlib.sha256((folder / MANIFEST).read_bytes()).hexdigest()
    h = hashlib.sha256()
    for f in ["config.json", *(w.name for w in weight_files(folder)),
              *(n for n in ("tokenizer.json", "tokenizer_config.json", "vocab.json",
                            "merges.txt", "tokenizer.model") if (folder / n).is_file())]:
        h.update(f.encode() + b"\0" + _sha256(folder / f).encode())
    return h.hexdigest()


def step_number(folder: str | Path) -> int | None:
    """N of a `step_N` checkpoint folder."""
    name = Path(folder).name
    return int(name[5:]) if name.startswith("step_") and name[5:].isdigit() else None


def check_step_record(step_dir: str | Path) -> int:
    """N of a `step_N` checkpoint folder, checked against the step its trainer state records
    where it keeps one (a state edited to step 10^12 made a resume print "done" and train
    nothing; a folder renamed step_000900 put 100 steps' weights at step 900 of a trajectory
    without a word). Raises CheckpointError naming both."""
    from nca_interp.fsio import read_json

    step_dir = Path(step_dir)
    named = step_number(step_dir)
    if named is None:
        raise CheckpointError(f"{step_dir} is not a step checkpoint (step_N)")
    if not (step_dir / "trainer_state.json").exists():
        return named
    meta = read_json(step_dir / "trainer_state.json", "trainer state")
    recorded = meta.get("step") if isinstance(meta, dict) else None
    if not isinstance(recorded, int) or isinstance(recorded, bool) or recorded != named:
        raise CheckpointError(f"{step_dir / 'trainer_state.json'} records step {recorded!r}, "
                              f"not the {named} its folder is named for; rename the folder "
                              "back or restore the file")
    _check_same_run(step_dir)
    return named


# what a run config records that makes it this run and no other (a step of another run
# placed among its checkpoints differs in one of them)
# (and what it started from and trained with: a step of another OPD run of the same seed,
# from the same base at another --lr, sat at step 2 of a trajectory without a word: the
# seventh probe); never a flag a resume may change (train.common.FREE_FLAGS)
RUN_IDENTITY = ("kind", "method", "task", "context", "seed", "beta", "lora_rank", "student",
                "teacher", "init", "lr", "batch")


def _check_same_run(step_dir: Path) -> None:
    """A `RUN/checkpoints/step_N` folder was saved by RUN: its run config records the run's
    kind, method, task, context, seed, beta and LoRA rank (a link to another run's step_000001
    put NCA's weights at step 1 of an OPD trajectory without a word: the sixth probe)."""
    root = step_dir.parent.parent
    if step_dir.parent.name != "checkpoints" or not (root / RUN_CONFIG).is_file() or \
            not (step_dir / RUN_CONFIG).is_file():
        return
    mine, theirs = read_run_config(step_dir), read_run_config(root)
    differ = [k for k in RUN_IDENTITY if k in mine and k in theirs and mine[k] != theirs[k]]
    if differ:
        k = differ[0]
        raise CheckpointError(f"{step_dir} is not a checkpoint of {root}: its run config "
                              f"records {k} {mine.get(k)!r}, the run's {theirs.get(k)!r} (a step "
                              "of another run, or a link to one); move it out of "
                              f"{step_dir.parent} or restore the run's own")
