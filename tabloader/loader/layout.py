"""Column roles: which columns a loader yields as features and targets, and how it packs them.

:class:`ColumnLayout` is the first thing a :class:`~tabloader.loader.Loader` works out: it takes
the roles from the schema's CATEGORICAL / CONTINUOUS / TARGET tags (or the loader's arguments),
rejects what a framework cannot take (non-numeric columns, list targets) before any partition
is read, and groups same-dtype scalar columns, so that the chunk buffer can pack them into one
2-D row-major array per dtype and the batcher can find each column in it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from tabloader.loader.lists import ListPadding, resolve_lists
from tabloader.schema import Schema, Tags


@dataclasses.dataclass(frozen=True)
class ColumnLayout:
    """Which columns are features and targets, and how they are packed.

    Scalar columns of one dtype share a 2-D buffer (``groups`` maps dtype -> column names);
    list columns keep ``(values, offsets)``, and those in ``padded`` are yielded as dense
    ``(rows, pad_to)`` arrays (see :mod:`tabloader.loader.lists`).

    Example:
        >>> from tabloader.schema import ColumnSchema, Schema
        >>> s = Schema([ColumnSchema("c", "int64", {"categorical"}), ColumnSchema("x", "float32", {"continuous"}),
        ...             ColumnSchema("y", "float32", {"target"})])
        >>> layout = ColumnLayout.from_schema(s)
        >>> layout.features, layout.targets, layout.groups
        (('c', 'x'), ('y',), {'int64': ('c',), 'float32': ('x', 'y')})
    """

    features: tuple[str, ...]
    targets: tuple[str, ...]
    groups: dict[str, tuple[str, ...]]
    lists: dict[str, str]  # list column -> element dtype
    padded: dict[str, ListPadding] = dataclasses.field(default_factory=dict)  # list columns yielded dense
    categorical: tuple[str, ...] = ()  # the features that are categorical (sparse), in feature order

    @property
    def columns(self) -> list[str]:
        return [*self.features, *self.targets]

    def where(self, name: str) -> tuple[str, int]:
        """(dtype group, column index in the group) of a scalar column."""
        for dtype, names in self.groups.items():
            if name in names:
                return dtype, names.index(name)
        raise KeyError(name)

    def row_bytes(self, list_lengths: dict[str, float] | None = None) -> float:
        """Bytes one row takes in a chunk buffer (list columns: offsets + mean length)."""
        size = sum(np.dtype(d).itemsize * len(names) for d, names in self.groups.items())
        for name, dtype in self.lists.items():
            size += 8 + np.dtype(dtype).itemsize * (list_lengths or {}).get(name, 1.0)
        return float(size)

    @classmethod
    def from_schema(cls, schema: Schema, categorical: Sequence[str] | str | None = None,
                    continuous: Sequence[str] | str | None = None,
                    target: Sequence[str] | str | None = None,
                    padding: Mapping[str, Any] | None = None) -> "ColumnLayout":
        """Roles from the schema tags, overridden by the arguments that are not None.

        Without any CATEGORICAL/CONTINUOUS tag (and no argument), every non-target numeric
        column is a feature. ``padding`` (the loader's ``lists=``) asks for list columns as
        dense padded arrays (:func:`tabloader.loader.lists.resolve_lists`).
        """
        targets = _names(target) if target is not None else schema.select_by_tag(Tags.TARGET).column_names
        cats = _names(categorical) if categorical is not None else schema.select_by_tag(Tags.CATEGORICAL).column_names
        conts = _names(continuous) if continuous is not None else schema.select_by_tag(Tags.CONTINUOUS).column_names
        if categorical is None and continuous is None and not cats and not conts:
            conts = [c for c in schema.column_names if c not in targets]
        features = [c for c in dict.fromkeys([*cats, *conts]) if c not in targets]
        missing = [c for c in [*features, *targets] if c not in schema]
        if missing:
            raise KeyError(f"columns {missing} are not in the dataset (it has {schema.column_names})")
        groups: dict[str, list[str]] = {}
        lists: dict[str, str] = {}
        for name in [*features, *targets]:
            col = schema[name]
            dtype = _numeric_dtype(name, col.dtype)
            if col.is_list:
                if name in targets:
                    raise TypeError(f"target column {name!r} is a list column; targets must be scalar")
                lists[name] = dtype
            else:
                groups.setdefault(dtype, []).append(name)
        if not features and not targets:
            raise ValueError("the loader has no columns to yield: pass categorical=, continuous= or target=")
        return cls(tuple(features), tuple(targets), {d: tuple(v) for d, v in groups.items()}, lists,
                   resolve_lists(padding, lists, schema), tuple(c for c in features if c in cats))


def _names(value: Sequence[str] | str) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _numeric_dtype(name: str, dtype: str | None) -> str:
    try:
        np_dtype = np.dtype(dtype) if dtype is not None else None
    except (TypeError, ValueError):  # pandas' and arrow's dtype names (decimal128(21, 1)) numpy does not know
        np_dtype = None
    if np_dtype is None or np_dtype.kind not in "biuf":
        raise TypeError(f"column {name!r} has dtype {dtype!r}; the loader hands numeric columns to frameworks: "
                        f"{_how_to_encode(dtype, np_dtype)}")
    return np_dtype.name


def _how_to_encode(dtype: str | None, np_dtype: Any) -> str:
    """What to do with a column of ``dtype`` before loading it (Categorify takes no dates)."""
    if (np_dtype is not None and np_dtype.kind in "mM") or str(dtype).startswith(("date", "timestamp", "time")):
        return ("turn it into numbers first, for instance with ops.DatetimeFeatures(['day_of_week', 'hour']) "
                "(then Categorify for embeddings; Categorify takes no dates or times themselves)")
    if str(dtype).startswith("decimal"):
        return "cast it to a float first: ops.AsType('float32') in the workflow"
    return "encode it first (for instance with a Categorify op)"
