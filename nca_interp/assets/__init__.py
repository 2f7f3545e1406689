"""Small checkpoints shipped with the package, so every command has a default offline."""

from pathlib import Path

ROOT = Path(__file__).parent


def embedded(name: str) -> Path:
    path = ROOT / name
    if not path.exists():
        available = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and p.name[0] != "_")
        raise FileNotFoundError(f"no embedded checkpoint {name!r}; available: {available}")
    return path


def resolve(ref: str | None) -> str | None:
    """A run-config path, with `embedded:NAME` mapped to the shipped checkpoint."""
    if ref and ref.startswith("embedded:"):
        return str(embedded(ref.split(":", 1)[1]))
    return ref


def pipeline_or_embedded(root: str | Path = ".", task: str = "sokoban",
                         seed: int = 0) -> dict[str, str]:
    """{base, opd, nca} checkpoint folders: the pipeline's `runs/<task>_*` under `root` when all
    three are complete, the embedded Sokoban ones otherwise (what the notebooks open)."""
    runs = {m: Path(root) / "runs" / f"{task}_{suffix}"
            for m, suffix in (("base", "base"), ("opd", f"opd_s{seed}"), ("nca", f"nca_s{seed}"))}
    if all((p / "nca_checkpoint.json").exists() for p in runs.values()):
        return {m: str(p) for m, p in runs.items()}
    return {m: str(embedded(f"sokoban_{m}")) for m in ("base", "opd", "nca")}
