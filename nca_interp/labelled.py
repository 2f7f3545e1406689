"""Labelled arrays: what an analysis's core returns, numbers whose dimensions are named.

    sims = layer_sim.compare({"base": base, "opd": opd}, task, levels, "plan", tok=tok)
    sims["cos"].dims                       # ("checkpoint", "layer")
    sims["cos"].sel(checkpoint="opd", layer="3")
    sims.to_frame()                        # one row per number: stat, checkpoint, layer, value

A `Labelled` is a numpy array, the names of its dimensions (layer, head, position, item,
checkpoint, module, pair, ...) and the labels along each (layer "embed", "0", "1", ...: the
labels the reports and figures use, so a frame's layer "0" is the report's layer "0" whatever
array it came from). `Arrays` holds an analysis's labelled arrays by name, with what is not a
number (responses, settings) in `attrs`.

Why not xarray: the cores need named dimensions, selection by label and a tidy table, nothing
of xarray's alignment, broadcasting or I/O, and xarray is not among the package's
dependencies; `to_xarray()` converts where it is installed. Undefined values (a report's
null) are NaN here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import overload

import numpy as np

from nca_interp.errors import UsageError

__all__ = ["Arrays", "Labelled", "as_float", "stack", "stack_ragged"]


def as_float(values) -> np.ndarray:
    """Nested lists of numbers (None where undefined, as a report's JSON holds them) as a
    float64 array with NaN for None."""
    if isinstance(values, (list, tuple)):
        return np.array([as_float(v) for v in values], dtype=float) if values else \
            np.zeros(0)
    return np.asarray(np.nan if values is None else values, dtype=float)


@dataclass(frozen=True, eq=False)
class Labelled:
    """`values` with named dimensions `dims` and, per dimension, its labels (`coords`).
    Compared by identity (`==` on arrays is elementwise: compare `.values` for numbers)."""

    values: np.ndarray
    dims: tuple[str, ...]
    coords: Mapping[str, Sequence] = field(default_factory=dict)  # kept as tuples
    name: str = ""

    def __post_init__(self) -> None:
        values = np.asarray(self.values)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "dims", tuple(self.dims))
        if values.ndim != len(self.dims):
            raise UsageError(f"{self.name or 'an array'} has {values.ndim} dimensions, "
                             f"named {len(self.dims)}: {self.dims}")
        coords: dict[str, tuple] = {}
        for d, n in zip(self.dims, values.shape):
            labels = tuple(self.coords.get(d, range(n)))
            if len(labels) != n:
                raise UsageError(f"{self.name or 'an array'}: {len(labels)} labels for its "
                                 f"{d} dimension of length {n}")
            coords[d] = labels
        object.__setattr__(self, "coords", coords)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.values, dtype=dtype)

    def index(self, dim: str, label) -> int:
        """Position of `label` along `dim` (labels compare as text too: layer 3 is "3")."""
        labels = self.coords[dim]
        for i, lab in enumerate(labels):
            if lab == label or str(lab) == str(label):
                return i
        raise UsageError(f"{self.name or 'the array'} has no {dim} {label!r}; its {dim}s: "
                         f"{', '.join(map(str, labels[:12]))}")

    def sel(self, **where) -> Labelled | float:
        """The values at the given labels (`sel(layer="3")`); a list of labels keeps the
        dimension. With every dimension selected, the number itself."""
        for d in where:
            if d not in self.dims:
                raise UsageError(f"{self.name or 'the array'} has no dimension {d!r}; its "
                                 f"dimensions: {self.dims}")
        values = self.values
        dims: list[str] = []
        coords: dict[str, Sequence] = {}
        for d in self.dims:
            axis = len(dims)  # the selected dimensions before it are gone
            if d not in where:
                dims.append(d)
                coords[d] = self.coords[d]
            elif isinstance(where[d], (list, tuple)):
                picked = [self.index(d, lab) for lab in where[d]]
                values = np.take(values, picked, axis=axis)
                dims.append(d)
                coords[d] = tuple(self.coords[d][i] for i in picked)
            else:
                values = np.take(values, self.index(d, where[d]), axis=axis)
        if not dims:
            return float(values)
        return Labelled(values, tuple(dims), coords, self.name)

    def rows(self) -> list[dict]:
        """One mapping per number: its label along each dimension and `value`."""
        out = []
        for idx in np.ndindex(*self.shape):
            row = {d: self.coords[d][i] for d, i in zip(self.dims, idx)}
            row["value"] = float(self.values[idx])
            out.append(row)
        return out

    def to_frame(self):
        """A pandas table (the `frames` extra): a column per dimension, then `value`."""
        import pandas as pd

        return pd.DataFrame(self.rows(), columns=[*self.dims, "value"])

    def to_xarray(self):
        """An `xarray.DataArray` (xarray installed separately)."""
        import xarray as xr

        return xr.DataArray(self.values, dims=self.dims,
                            coords={d: list(c) for d, c in self.coords.items()}, name=self.name)


@dataclass(frozen=True, eq=False)
class Arrays(Mapping):
    """An analysis's labelled arrays by name; `attrs`: what is not an array (responses,
    settings, the items' units)."""

    arrays: dict[str, Labelled]
    attrs: dict = field(default_factory=dict)

    def __getitem__(self, name: str) -> Labelled:
        if name not in self.arrays:
            raise UsageError(f"no array {name!r}; these are: {', '.join(self.arrays)}")
        return self.arrays[name]

    def __contains__(self, name: object) -> bool:  # Mapping's asks __getitem__ for KeyError
        return name in self.arrays

    def __iter__(self) -> Iterator[str]:
        return iter(self.arrays)

    def __len__(self) -> int:
        return len(self.arrays)

    def sel(self, **where) -> Arrays:
        """Every array at the given labels, each on the dimensions it has (an array without
        one of them is kept whole)."""
        out = {}
        for name, a in self.arrays.items():
            mine = {d: v for d, v in where.items() if d in a.dims}
            got = a.sel(**mine) if mine else a
            out[name] = got if isinstance(got, Labelled) else Labelled(np.asarray(got), (),
                                                                         {}, name)
        return Arrays(out, self.attrs)

    def to_frame(self):
        """One tidy pandas table of every array: `stat` (the array's name), a column per
        dimension any array has (empty where an array lacks it), then `value`."""
        import pandas as pd

        dims = list(dict.fromkeys(d for a in self.arrays.values() for d in a.dims))
        rows = [{"stat": name, **row} for name, a in self.arrays.items() for row in a.rows()]
        return pd.DataFrame(rows, columns=["stat", *dims, "value"])


@overload
def stack(parts: Mapping[str, Labelled], dim: str) -> Labelled: ...


@overload
def stack(parts: Mapping[str, Arrays], dim: str) -> Arrays: ...


def stack(parts: Mapping[str, Labelled | Arrays], dim: str) -> Labelled | Arrays:
    """Labelled arrays (or `Arrays`) of one shape, stacked along a new leading dimension `dim`
    labelled by their keys (`stack({"base": a, "opd": b}, "checkpoint")`). Stacked `Arrays`
    keep each part's attrs under its key."""
    names = list(parts)
    groups = {n: p for n, p in parts.items() if isinstance(p, Arrays)}
    arrays = {n: p for n, p in parts.items() if isinstance(p, Labelled)}
    if groups and arrays:
        raise UsageError(f"stack along {dim!r}: labelled arrays or `Arrays`, not both")
    if groups:
        first_group = groups[names[0]]
        return Arrays({k: _stack_labelled({n: groups[n][k] for n in names}, dim)
                       for k in first_group}, {n: groups[n].attrs for n in names})
    return _stack_labelled(arrays, dim)


def _stack_labelled(parts: Mapping[str, Labelled], dim: str) -> Labelled:
    names = list(parts)
    first = parts[names[0]]
    for n in names:
        if parts[n].dims != first.dims or parts[n].coords != first.coords:
            raise UsageError(f"{n}'s {first.name or 'array'} is labelled {parts[n].dims} "
                             f"{parts[n].shape}, the first's {first.dims} {first.shape}: "
                             "only arrays of one shape and labels stack")
    return Labelled(np.stack([parts[n].values for n in names]), (dim, *first.dims),
                    {dim: tuple(names), **first.coords}, first.name)


def stack_ragged(parts: Mapping[str, Arrays], dim: str, ragged: Sequence[str]) -> Arrays:
    """`stack` of `Arrays` whose `ragged` dimensions (positions of responses of different
    lengths, the cases each checkpoint found, offsets from a prompt's end) differ in length
    between parts, each part's labels a prefix of the longest's: padded with NaN to the
    longest, so that every part's values sit at their own labels. An array some parts lack
    (an entry without cases, an older report's) is NaN in theirs."""
    longest: dict[str, tuple] = {}
    template: dict[str, Labelled] = {}
    for a in parts.values():
        for k, v in a.items():
            template.setdefault(k, v)
            for d in v.dims:
                if d in ragged and len(v.coords[d]) > len(longest.get(d, ())):
                    longest[d] = tuple(v.coords[d])
    padded = {}
    for name, a in parts.items():
        out = {}
        for k, t in template.items():
            v = a.arrays.get(k)
            if v is None:  # this part lacks it: NaN at the longest's labels
                shape = [len(longest[d]) if d in ragged else n for d, n in zip(t.dims, t.shape)]
                v = Labelled(np.full(shape, np.nan), t.dims,
                             {d: longest[d] if d in ragged else t.coords[d] for d in t.dims},
                             t.name)
            widths = [(0, len(longest[d]) - n if d in ragged else 0)
                      for d, n in zip(v.dims, v.shape)]
            for d, (_, w) in zip(v.dims, widths):
                if w and tuple(v.coords[d]) != longest[d][:len(v.coords[d])]:
                    raise UsageError(f"{name}'s {k} is labelled {v.coords[d][:4]}... along "
                                     f"{d}, not a prefix of {longest[d][:4]}...: it cannot be "
                                     "padded to the others")
            if any(w for _, w in widths):
                v = Labelled(np.pad(v.values.astype(float), widths, constant_values=np.nan),
                             v.dims, {d: longest[d] if d in ragged else v.coords[d]
                                      for d in v.dims}, v.name)
            out[k] = v
        padded[name] = Arrays(out, a.attrs)
    return stack(padded, dim)
