"""List columns as dense ``(rows, pad_to)`` arrays: padded left or right, truncated from either end.

By default the loader hands a list (multi-hot) column on as ``(values, offsets)``. Sequence
models (Transformers4Rec-style session data) want a fixed-length matrix instead; the loader's
``lists=`` argument asks for it per column, and :func:`pad_lists` builds it for a whole batch in
a few vectorised array operations (numpy on the host, CuPy on a GPU: no loop over rows).

Example:
    >>> spec = ListPadding(pad_to=3, side="left", truncate="left")
    >>> pad_lists(np.array([1, 2, 3, 4, 5, 6]), np.array([0, 4, 4, 6]), spec).tolist()
    [[2, 3, 4], [0, 0, 0], [0, 5, 6]]
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from tabloader import backend
from tabloader.schema import Schema

_SIDES = ("left", "right")


@dataclasses.dataclass(frozen=True)
class ListPadding:
    """How one list column becomes a dense ``(rows, pad_to)`` array.

    Args:
        pad_to: the width: an integer >= 1, or ``"schema"`` for the column's ``value_count``
            max in the schema (recorded by the ``ValueCount`` op, or ``ListSlice(pad=True)``).
        side: where the padding goes: ``"right"`` (after the values, the default) or ``"left"``
            (before them, so that the most recent item of a session is always the last column).
        truncate: which end of a list longer than ``pad_to`` is cut: ``"right"`` keeps its
            first ``pad_to`` values (``lst[:pad_to]``, the default), ``"left"`` its last ones
            (``lst[-pad_to:]``, the most recent items of a session).
        value: the padding value (0 is the padding id of the encoding contract).

    Example:
        >>> ListPadding(20, side="left").side
        'left'
    """

    pad_to: int | str
    side: str = "right"
    truncate: str = "right"
    value: Any = 0

    def __post_init__(self) -> None:
        width = self.pad_to
        if width != "schema" and (isinstance(width, (bool, np.bool_)) or not isinstance(width, (int, np.integer))
                                  or width < 1):
            raise ValueError(f"pad_to must be an integer >= 1 or 'schema', got {width!r}")
        for option in ("side", "truncate"):
            if getattr(self, option) not in _SIDES:
                raise ValueError(f"{option} must be 'left' or 'right', got {getattr(self, option)!r}")


def resolve_lists(lists: Mapping[str, Any] | None, list_columns: Mapping[str, str],
                  schema: Schema) -> dict[str, ListPadding]:
    """The loader's ``lists=`` argument as ``{column: ListPadding}`` with integer widths.

    A column's entry is a :class:`ListPadding`, a dict of its arguments, an integer (``pad_to``)
    or ``"schema"``; ``None`` keeps ``(values, offsets)``. Errors name the column and option.
    """
    if lists is None:
        return {}
    if not isinstance(lists, Mapping):
        raise ValueError(f"lists must map list column names to padding options, got {type(lists).__name__}")
    out: dict[str, ListPadding] = {}
    for name, option in lists.items():
        if name not in list_columns:
            kind = "is not a list column the loader yields" if name in schema else "is not in the dataset"
            raise ValueError(f"lists[{name!r}]: column {name!r} {kind}; list columns: {sorted(list_columns)}")
        if option is None:
            continue
        spec = _spec(name, option)
        out[name] = dataclasses.replace(spec, pad_to=_width(name, spec.pad_to, schema))
        _check_value(name, out[name].value, list_columns[name])
    return out


def _spec(name: str, option: Any) -> ListPadding:
    try:
        if isinstance(option, ListPadding):
            return option
        if isinstance(option, Mapping):
            return ListPadding(**option)
        return ListPadding(option)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"lists[{name!r}]: {exc}") from None


def _width(name: str, pad_to: int | str, schema: Schema) -> int:
    if pad_to != "schema":
        return int(pad_to)
    counts = schema[name].properties.get("value_count") or {}
    width = counts.get("max")
    if not isinstance(width, (int, np.integer)) or width < 1:
        raise ValueError(f"lists[{name!r}]: pad_to='schema' needs the schema's value_count max of column {name!r} "
                         f"(>= 1), got value_count={counts or None}; fit a ValueCount op on it or give pad_to=N")
    return int(width)


def _check_value(name: str, value: Any, dtype: str) -> None:
    """The padding value must be a number the column's element dtype holds exactly."""
    kind = np.dtype(dtype).kind
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if ok and kind in "iu":
        info = np.iinfo(dtype)
        ok = float(value).is_integer() and info.min <= value <= info.max
    if not ok:
        raise ValueError(f"lists[{name!r}]: padding value={value!r} does not fit column {name!r} of {dtype} elements")


def pad_lists(values: Any, offsets: Any, spec: ListPadding, kept: int | None = None) -> Any:
    """A batch's list column ``(values, offsets)`` as a C-contiguous ``(rows, spec.pad_to)`` array.

    Each row's kept values (all of them, or ``pad_to`` from the end ``spec.truncate`` does not
    cut) are scattered into a matrix filled with ``spec.value``, at the end of the row for
    ``side="left"``: one gather and one scatter for the whole batch. ``kept`` is the number of
    values kept (the sum over rows of ``min(length, pad_to)``) when the caller knows it on the
    host; without it, it is read back from the device (on a GPU, a wait for the device).
    """
    xp = backend.array_lib(values)
    width = spec.pad_to
    rows = len(offsets) - 1
    lengths = offsets[1:] - offsets[:-1]
    kept_per_row = xp.minimum(lengths, width)
    source = offsets[:-1] + (lengths - kept_per_row if spec.truncate == "left" else 0)
    target = xp.arange(rows, dtype=xp.int64) * width + (width - kept_per_row if spec.side == "left" else 0)
    _, taken, within = backend.run_positions(kept_per_row, source, total=kept)
    flat = backend.empty_columns(1, rows * width, values.dtype, like=values)[0]  # aligned: zero-copy into TF
    flat.fill(spec.value)
    flat[backend.repeat(target, kept_per_row, len(within)) + within] = values[taken]
    return flat.reshape(rows, width)
