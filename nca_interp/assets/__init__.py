"""Small checkpoints shipped with the package, so every command has a default offline."""

from pathlib import Path

ROOT = Path(__file__).parent


def embedded(name: str) -> Path:
    path = ROOT / name
    if not path.exists():
        available = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and p.name[0] != "_")
        raise FileNotFoundError(f"no embedded checkpoint {name!r}; available: {available}")
    return path
