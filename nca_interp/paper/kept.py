"""Teachers kept in git: the from-scratch teacher a published setting's students came from,
committed under checkpoints/ so that a fresh clone distils the same students without training
it again.

    python -m nca_interp.paper.kept save runs/sokoban_remap_d12_base   # -> checkpoints/
    python -m nca_interp.paper.kept list

Why: a teacher is the costliest serial stage of a setting (12 layers: about 35 minutes for the
plain game's, as long again for the remap's), and training it again from its recorded command is
not guaranteed to give the same model (the 12-layer plain teacher did not: 0.832 without c
against the 0.856 published). What is kept is the run's published copy at its root and its final
step checkpoint, without Adam's moments (twice the weights; only resuming needs them), so its
weights digest (`checkpoint.weights_digest`) is the run's own and what the pipeline computed
from it stays up to date (its `content_digest`, which counts the moments, changes). A kept run
cannot be trained further (its moments are gone). `reproduce` copies a kept teacher into RUNS
when RUNS lacks it (`restore`). Only small runs are kept (`LIMIT`): a pretrained model's
fine-tune is hundreds of MB.

A LoRA teacher (`train.sft --lora-rank`) of a pretrained model is kept without its merged
weights: its `adapter/` (about 20 MB at rank 16 on SmolLM2-135M) beside `kept.json`, which names
the base model (its registry name, `python -m nca_interp.fetch NAME`, and its content digest)
and the merged weights' sha256s. `restore` fetches nothing: it finds the base in the model cache,
checks its digest, merges the adapter into it (`nca_interp.lora.restore`, the same bits on any
machine) and refuses unless the merged files are the ones recorded.
"""

from __future__ import annotations

if __name__ == "__main__":  # Ctrl-C while the imports below run: one line, not a traceback
    from nca_interp.cli import quiet_interrupt

    quiet_interrupt()

import argparse
import json
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

from nca_interp.checkpoint import (
    MANIFEST,
    CheckpointError,
    drop_optimizer_state,
    latest_step_checkpoint,
    read_run_config,
    same_weights,
    verify_folder,
    weight_files,
    weights_digest,
)
from nca_interp.cli import entry
from nca_interp.errors import UsageError
from nca_interp.fsio import clear_temporaries, new_stage

__all__ = ["KEPT", "LIMIT", "RECORD", "main", "restore", "save"]

KEPT = Path(__file__).resolve().parents[2] / "checkpoints"
# bytes of weights a kept run may hold (a 12-layer Sokoban model: 10 MB). The root and the step
# hold the same weights twice on disk, one blob in git.
LIMIT = 32 * 2**20
ROOT_FILES = ("config.json", "generation_config.json", "model.safetensors", MANIFEST,
              "run_config.json", "tokenizer.json", "tokenizer_config.json", "metrics.jsonl")
RECORD = "kept.json"  # a LoRA teacher's record: its base and the merged weights' sha256s


def save(run: str | Path, kept: Path | None = None, remerge: bool = False) -> Path:
    """Copy finished teacher run `run` (its root and its last step checkpoint, moments dropped
    from the copy) to `kept` (default `KEPT`)/<run's name>; the run itself is left as it is."""
    kept = KEPT if kept is None else Path(kept)
    run = Path(run).expanduser().resolve()
    if not run.is_dir():
        raise UsageError(f"no run at {run}: name a training run's folder (runs/<task>_base)")
    last = latest_step_checkpoint(run)
    if last is None:
        raise UsageError(f"{run} holds no step checkpoint: keep a run once it has trained")
    verify_folder(run)  # its run config is then the one the run saved (steps "abc" was an
    verify_folder(last)  # int() message, the sixth probe)
    config = read_run_config(run)
    if config.get("kind") != "sft":
        raise UsageError(f"{run} is a {config.get('kind') or 'run of unknown kind'}, not a "
                         "teacher (train.sft): only teachers are kept")
    steps = config.get("steps")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)):
        raise UsageError(f"{run / 'run_config.json'} records steps {steps!r}, not a number of "
                         "steps; the file is damaged: restore it from the run")
    if steps is not None and last.name != f"step_{steps:06d}":
        raise UsageError(f"{run} has not finished: its last checkpoint is {last.name} of "
                         f"{config['steps']} steps; finish training it (rerun its command)")
    if not same_weights(last, run):
        raise UsageError(f"{run}'s root is not its last checkpoint {last.name} (a kill between "
                         "its save and its publish); rerun its training command to publish it")
    lora = bool(config.get("lora_rank"))
    size = sum(f.stat().st_size for f in (
        (last / "adapter").iterdir() if lora else weight_files(last)))
    if size > LIMIT:
        raise UsageError(f"{run}'s weights are {size / 2**20:.0f} MB, over the {LIMIT // 2**20} "
                         "MB a run kept in git may hold; keep it outside the repository")
    dest = kept / run.name
    if dest.exists() or dest.is_symlink():  # a dangling link too (an errno after the merge)
        raise UsageError(f"{dest} exists: a kept run is never overwritten; remove it with git "
                         "rm first if it is to be replaced")
    _refuse_links(run, last)
    if kept.exists() and not kept.is_dir():
        raise UsageError(f"--kept {kept} is a file; name the folder kept runs live in")
    kept.mkdir(parents=True, exist_ok=True)
    clear_temporaries(kept)  # a killed save's stage (merged weights) would stay for ever
    stage = new_stage(kept)  # never a name that could be a user's folder or a planted link
    tmp = stage / run.name
    try:
        (tmp / "checkpoints").mkdir(parents=True)
        listed = json.loads((run / MANIFEST).read_text())["files"]  # chat_template.jinja too
        for name in sorted({*ROOT_FILES, *(n for n in listed if "/" not in n or lora)}):
            if (run / name).is_file():  # a LoRA run's adapter/ as listed (no stray .env, no
                (tmp / name).parent.mkdir(exist_ok=True)  # pipe: the sixth probe)
                shutil.copy2(run / name, tmp / name)  # links were refused above
        step = tmp / "checkpoints" / last.name
        _copy_listed(last, step)  # what its manifest lists: no stray file (a .env, a FIFO)
        if (step / "trainer_state.safetensors").exists():
            drop_optimizer_state(step)
        if weights_digest(step) != weights_digest(last) or \
                weights_digest(tmp) != weights_digest(run):
            raise RuntimeError(f"the copy of {run} does not hold its weights; nothing was kept")
        if lora:
            _keep_adapter_only(run, tmp, [tmp, step], config, remerge)
        tmp.rename(dest)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return dest


# the most a run's own merged weights may differ from the exact merge for `--remerge` to keep
# the exact one in their place: float32 rounding of peft's merge, never a different model
REMERGE_TOLERANCE = 1e-5


def _copy_listed(src: Path, dest: Path) -> None:
    """The files a checkpoint folder's manifest lists, and the manifest, from `src` to `dest`
    (the sixth probe: a step folder copied whole published a stray .env and a 5 MB file into
    the repository, and a FIFO in it was a list of tuples for an error)."""
    listed = json.loads((src / MANIFEST).read_text())["files"]
    dest.mkdir(parents=True)
    for name in sorted([*listed, MANIFEST]):
        (dest / name).parent.mkdir(exist_ok=True)
        shutil.copy2(src / name, dest / name)  # links were refused, names checked (verified)


def _refuse_links(run: Path, last: Path) -> None:
    """A kept run is published with the repository: nothing is copied through a link (a
    linked adapter/ or metrics.jsonl copied what it pointed to: the fifth probe)."""
    for folder in (run, last):
        for p in [folder / n for n in (*ROOT_FILES, "adapter")] + \
                (sorted((folder / "adapter").iterdir()) if (folder / "adapter").is_dir() else []):
            if p.is_symlink():
                raise UsageError(f"{p} is a symbolic link; a kept run holds its own files, "
                                 "never what a link points to: replace it with the file")
    for p in sorted(last.iterdir()):
        if p.is_symlink():
            raise UsageError(f"{p} is a symbolic link; a kept run holds its own files, never "
                             "what a link points to: replace it with the file")


def _keep_adapter_only(run: Path, tmp: Path, folders: list[Path], config: dict,
                       remerge: bool = False) -> None:
    """Drop the merged weights of a LoRA teacher's copy, once the base and the adapter are shown
    to rebuild them to the same bits, and write the record `restore` checks. `remerge`: a run
    merged by peft (before the exact merge) is kept as the exact merge of its adapter, when the
    two differ by float32 rounding only (`REMERGE_TOLERANCE`); the record says by how much."""
    from nca_interp.checkpoint import content_digest
    from nca_interp.fsio import default_cache, write_text

    base = Path(str(config.get("init") or ""))
    if not config.get("init") or not base.is_dir():
        raise UsageError(f"{run} records no base model it can be rebuilt from (--init "
                         f"{config.get('init')!r}); a LoRA teacher is kept beside its base")
    models = default_cache().resolve() / "models"
    name = base.resolve().name if base.resolve().parent == models else None
    if name is None:
        raise UsageError(f"{run} was adapted from {base}, not from a model of the cache "
                         f"({models}, `python -m nca_interp.fetch`): a fresh clone could not "
                         "find its base; keep the base's run first or train from a fetched model")
    merged, remerged = {}, {}
    for folder in folders:
        manifest = json.loads((folder / MANIFEST).read_text())
        with _rebuilt(base, folder) as rebuilt:
            for w in weight_files(folder):
                want = manifest["files"][w.name]["sha256"]
                got, path = rebuilt.get(w.name, (None, None))
                rel = str(folder.relative_to(tmp) / w.name)
                if got != want:
                    if not remerge or path is None:
                        raise UsageError(f"{folder.name}/{w.name}: the base and the adapter "
                                         "rebuild other bits than the run saved (a run from "
                                         "before nca_interp.lora's exact merge); keep it with "
                                         "--remerge, retrain it, or keep its full weights "
                                         "outside git")
                    remerged[rel] = _max_difference(w, path)
                    if remerged[rel] > REMERGE_TOLERANCE:
                        raise UsageError(f"{rel}: the exact merge differs from the saved weights "
                                         f"by {remerged[rel]:.2e}, more than rounding "
                                         f"({REMERGE_TOLERANCE:g}); nothing was kept")
                    manifest["files"][w.name] = {"bytes": path.stat().st_size, "sha256": got}
                merged[rel] = got
                w.unlink()
        if any(Path(rel).parent == folder.relative_to(tmp) for rel in remerged):
            write_text(folder / MANIFEST, json.dumps(manifest, indent=1))
    write_text(tmp / RECORD, json.dumps({
        "base": {"name": name, "content_digest": content_digest(base),
                 "fetch": f"python -m nca_interp.fetch {name}"},
        "merged_sha256": merged, "run_weights_digest": weights_digest(run),
        # --remerge: the largest |difference| of each file from the run's own (peft's) merge
        "remerged_max_abs_difference": remerged}, indent=1))


def _max_difference(saved: Path, rebuilt: Path) -> float:
    """The largest |difference| between two weight files' tensors of the same names."""
    from safetensors import safe_open

    worst = 0.0
    with safe_open(str(saved), "pt") as a, safe_open(str(rebuilt), "pt") as b:
        if set(a.keys()) != set(b.keys()):
            return float("inf")
        for k in a.keys():
            worst = max(worst, float((a.get_tensor(k).double() -
                                      b.get_tensor(k).double()).abs().max()))
    return worst


@contextmanager
def _rebuilt(base: Path, folder: Path):
    """The merged weights of `folder`'s adapter over `base`, saved as a run saves them, in a
    spill folder of their own (removed after, or by the next command if this one is killed);
    yields {file name: sha256}."""
    from nca_interp import lora
    from nca_interp.checkpoint import load_checkpoint
    from nca_interp.fetch import sha256_of
    from nca_interp.fsio import spill_folder

    model, _ = load_checkpoint(base)
    with spill_folder("kept") as out:
        lora.restore(model, folder / lora.ADAPTER_DIR).save_pretrained(out / "merged",
                                                                       safe_serialization=True)
        yield {f.name: (sha256_of(f), f) for f in (out / "merged").glob("*.safetensors")}


def _restore_merged(tmp: Path) -> None:
    """Put the merged weights back into a copied LoRA teacher (`tmp`), from its recorded base
    and its adapter; refuse unless they are the recorded bits."""
    from nca_interp.checkpoint import content_digest
    from nca_interp.fsio import default_cache

    record = _checked_record(tmp)
    name = record["base"]["name"]
    base = default_cache() / "models" / name
    if not base.is_dir():
        raise UsageError(f"the kept teacher {tmp.name} is an adapter over {name}, which is not "
                         f"in the model cache: run `python -m nca_interp.fetch {name}` first")
    if content_digest(base) != record["base"]["content_digest"]:
        raise UsageError(f"{base} is not the {name} the kept teacher {tmp.name} was adapted from "
                         f"(its digest differs); fetch it again: python -m nca_interp.fetch "
                         f"{name} --verify")
    folders = sorted({(tmp / rel).parent for rel in record["merged_sha256"]})
    for folder in folders:
        with _rebuilt(base, folder) as rebuilt:
            for rel, want in record["merged_sha256"].items():
                if (tmp / rel).parent != folder:
                    continue
                digest, path = rebuilt.get(Path(rel).name, (None, None))
                if digest != want:
                    raise UsageError(f"merging the kept adapter into {name} gave other bits "
                                     f"than recorded for {rel}; nothing was restored")
                shutil.copyfile(path, tmp / rel)


def _check_adapters(src: Path) -> None:
    """Every adapter of a kept LoRA teacher is the adapter its config says (rank, alpha,
    dropout: `nca_interp.lora.check_adapter`) before anything is copied or built."""
    from nca_interp.fsio import read_json
    from nca_interp.lora import ADAPTER_DIR, check_adapter

    for folder in [src, *sorted((src / "checkpoints").glob("step_*"))]:
        adapter = folder / ADAPTER_DIR
        if (adapter / "adapter_config.json").is_file():
            config = read_json(adapter / "adapter_config.json", "adapter config")
            if not isinstance(config, dict):
                raise UsageError(f"{adapter / 'adapter_config.json'} is not a JSON object; "
                                 "restore the kept run from git")
            check_adapter(adapter, config)


def _refuse_foreign(src: Path) -> None:
    """A kept run (in a clone: anyone's files) holds folders and regular files only: a link in
    it made a restore copy what it pointed to (/etc/hostname, a key) into the run, which a later
    `save` publishes (the sixth probe); a pipe would block the copy."""
    import os
    import stat

    found = [Path(d) / n for d, dirs, files in os.walk(src) for n in (*dirs, *files)]
    for p in sorted(found):  # os.walk never descends into a linked folder
        mode = p.lstat().st_mode
        if stat.S_ISLNK(mode) or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            what = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
            raise UsageError(f"{p} is {what}; a kept run holds its own files only, never a link "
                             "or a device: restore the kept run from git")


def _checked_record(tmp: Path) -> dict:
    """`kept.json`, refused in one line unless it names a base and only weight files inside
    the kept run (`model*.safetensors` at its root or in a `checkpoints/step_N/`): a path with
    `..` in it made a restore write outside the run (the fifth probe)."""
    import re

    from nca_interp.fsio import read_json

    record = read_json(tmp / RECORD, "kept record")
    base = record.get("base") if isinstance(record, dict) else None
    merged = record.get("merged_sha256") if isinstance(record, dict) else None
    if not (isinstance(base, dict) and isinstance(base.get("name"), str) and
            re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", base["name"]) and
            isinstance(base.get("content_digest"), str) and isinstance(merged, dict) and merged):
        raise UsageError(f"{tmp.name}/{RECORD} is damaged (it must name its base model and the "
                         "merged files' sha256s); restore it from git")
    for rel, digest in merged.items():
        ok = re.fullmatch(r"(checkpoints/step_\d+/)?model[A-Za-z0-9_.-]*\.safetensors", rel)
        if not ok or ".." in rel or not isinstance(digest, str):
            raise UsageError(f"{tmp.name}/{RECORD} names {rel!r}, which is no weight file of "
                             "the kept run; restore the record from git")
        if not ((tmp / rel).parent / "adapter" / "adapter_config.json").is_file():
            raise UsageError(f"{tmp.name}/{RECORD} names {rel!r}, but the kept run holds no "
                             f"adapter beside it ({Path(rel).parent / 'adapter'}); restore the "
                             "kept run from git")
    return record


def restore(run: Path, kept: Path | None = None) -> bool:
    """Copy the kept run of `run`'s name into `run` when `run` holds no step checkpoint (never
    over one), whole or not at all (a temporary folder renamed into place); whether it did."""
    kept = KEPT if kept is None else Path(kept)
    run = Path(run)
    src = kept / run.name
    if run.is_symlink():  # restored into would be wherever it points (an errno, the sixth probe)
        raise UsageError(f"{run} is a symbolic link, which this package did not make; a kept run "
                         "is restored only into a folder of its own: remove the link")
    if latest_step_checkpoint(run) is not None or latest_step_checkpoint(src) is None:
        return False
    if run.exists() and any(run.iterdir()):
        raise UsageError(f"{run} holds files but no step checkpoint, and {src} is kept for it: "
                         f"move {run} aside to use the kept run")
    _refuse_foreign(src)
    if (src / RECORD).exists():  # named where they live, not in the copy
        _checked_record(src)
        _check_adapters(src)
    run.parent.mkdir(parents=True, exist_ok=True)
    clear_temporaries(run.parent)  # a killed restore's stage would stay for ever
    stage = new_stage(run.parent)
    tmp = stage / run.name
    try:
        shutil.copytree(src, tmp)
        if (tmp / RECORD).exists():  # a LoRA teacher: its merged weights rebuilt here
            _restore_merged(tmp)
            (tmp / RECORD).unlink()
        try:
            verify_folder(tmp)
            verify_folder(latest_step_checkpoint(tmp))
        except CheckpointError as e:  # named where it lives: the stage is gone by now
            fact = e.fact.replace(str(tmp.resolve()), str(src))
            raise UsageError(f"the kept run {src} is not what its manifests say: {fact}; "
                             "restore the kept run from git") from None
        try:
            if run.exists():
                run.rmdir()  # empty (checked above)
            tmp.rename(run)
        except OSError:  # another restore of the same run finished first (an errno, the sixth
            if latest_step_checkpoint(run) is not None:  # probe): it holds the kept run now
                return False
            raise UsageError(f"{run} was filled while the kept run was being restored into it "
                             "(by another process?); it is left as it is: move it aside and "
                             "restore again") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return True


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m nca_interp.paper.kept",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--kept", default=str(KEPT), help="where kept runs live (default: the "
                    "repository's checkpoints/)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    keep = sub.add_parser("save", help="keep finished teacher runs")
    keep.add_argument("runs", nargs="+")
    keep.add_argument("--remerge", action="store_true", help="a LoRA teacher merged by peft "
                      "(before the exact merge): keep the exact merge of its adapter, when it "
                      "differs from the saved weights by rounding only")
    sub.add_parser("list", help="the kept runs")
    args = ap.parse_args(argv)
    store = Path(args.kept)
    if args.cmd == "save":
        for run in args.runs:
            print(f"kept {run} as {save(run, store, args.remerge)}")
        return
    found = sorted(p for p in store.glob("*") if p.is_dir() and not p.name.startswith("."))
    for src in found:
        last = latest_step_checkpoint(src)
        print(f"{src.name}: {last.name if last else 'no step checkpoint'}")
    if not found:
        print(f"no kept runs in {store}")


if __name__ == "__main__":
    sys.exit(entry(main))
