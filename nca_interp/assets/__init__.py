"""Small checkpoints shipped with the package, so every command has a default offline."""

from pathlib import Path

__all__ = ["ROOT", "embedded", "pipeline_or_embedded", "resolve"]

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


def pipeline_or_embedded(root: str | Path = ".", task: str = "sokoban", seed: int = 0,
                         name: str = "sokoban_long") -> dict[str, str]:
    """{base, opd, nca} checkpoint folders: the pipeline's `runs/<task>_base` and
    `runs/<name>_{opd,nca}_s<seed>` under `root` when all three are complete (`name`: the
    pipeline's setting, by default the Sokoban case where OPD degrades, `sokoban_long`), the
    embedded Sokoban ones (the same setting, seed 0) otherwise: what the notebooks open."""
    runs = {"base": Path(root) / "runs" / f"{task}_base",
            **{m: Path(root) / "runs" / f"{name}_{m}_s{seed}" for m in ("opd", "nca")}}
    if all((p / "nca_checkpoint.json").exists() for p in runs.values()):
        return {m: str(p) for m, p in runs.items()}
    return {m: str(embedded(f"sokoban_{m}")) for m in ("base", "opd", "nca")}
