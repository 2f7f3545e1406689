"""Bootstrap resampling, one implementation for every interval in the package.

Two designs: `iid_indices` resamples items (cases, prompts) with replacement; `cluster_indices`
resamples the independent units items belong to (a level; a fact asked in many phrasings),
keeping each drawn unit's items together, so items that are not independent never narrow an
interval. `percentile_ci` turns bootstrap statistics into a 95% percentile interval. A fixed
seed gives the same draws, so reports are reproducible.
"""

from __future__ import annotations

import numpy as np

__all__ = ["cluster_indices", "iid_indices", "n_units", "percentile_ci"]


def iid_indices(n: int, n_boot: int = 2000, seed: int = 0) -> np.ndarray:
    """(n_boot, n) item indices drawn with replacement."""
    return np.random.default_rng(seed).integers(0, n, (n_boot, n))


def cluster_indices(units: list[str], n_boot: int = 2000, seed: int = 0) -> list[np.ndarray]:
    """`n_boot` index arrays: each draws len(unique units) units with replacement and takes
    every item of each drawn unit (sizes vary with the units drawn)."""
    labels, inverse = np.unique(np.asarray(units), return_inverse=True)
    members = [np.flatnonzero(inverse == u) for u in range(len(labels))]
    rng = np.random.default_rng(seed)
    return [np.concatenate([members[u] for u in rng.integers(0, len(labels), len(labels))])
            for _ in range(n_boot)]


def n_units(units: list[str]) -> int:
    return len(np.unique(np.asarray(units)))


def percentile_ci(boots, axis: int = 0, nan: bool = False) -> tuple:
    """The 95% percentile interval (2.5th, 97.5th) of bootstrap statistics along `axis`;
    `nan=True` ignores NaNs (cells undefined in some resamples)."""
    pct = np.nanpercentile if nan else np.percentile
    return pct(boots, 2.5, axis), pct(boots, 97.5, axis)
