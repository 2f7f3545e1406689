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
