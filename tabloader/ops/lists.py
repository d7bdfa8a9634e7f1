"""List (multi-hot) columns: :class:`ValueCount` (list-length statistics) and :class:`ListSlice`.

List columns are pandas ``ArrowDtype(list<...>)`` columns on the CPU (what tabloader's readers
produce; columns of Python lists are accepted too) and cuDF list columns on the GPU. Both ops
work on the columns' offsets, elements and validity (:func:`tabloader.backend.list_layout`:
arrow buffers on the CPU, the cuDF column's device buffers on the GPU), never on Python objects
per row.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tabloader import backend
from tabloader.encoding.lists import list_column
from tabloader.ops.base import Columns, Operator, StatOperator, flatten_columns
from tabloader.schema import ColumnSchema, Schema


class ValueCount(StatOperator):
    """Learn the minimum and maximum list length of list columns; data passes through.

    The schema of each output column gets the property ``value_count: {"min": m, "max": M}``
    (null rows are not counted; a column without any list gets ``{"min": 0, "max": 0}``).
    Loaders and embedding layers use it to tell fixed-length lists (``min == max``) from
    ragged ones.

    Fitted attributes: ``stats_`` (dict column -> {"min", "max"}).

    Example:
        >>> import pandas as pd, pyarrow as pa, tabloader as tl
        >>> from tabloader.ops.lists import ValueCount
        >>> lists = pd.Series(pd.arrays.ArrowExtensionArray(pa.array([[1, 2], [3], [4, 5, 6]])))
        >>> wf = tl.Workflow(["genres"] >> ValueCount(), progress=False).fit(pd.DataFrame({"genres": lists}))
        >>> wf.output_schema["genres"].properties["value_count"]
        {'min': 1, 'max': 3}
    """

    device_note = "Reads the lengths of cuDF list columns on the GPU."

    def fit_partial(self, columns: Columns, frame: Any) -> dict[str, tuple[int | None, int | None]]:
        stats = {}
        for col in flatten_columns(columns):
            layout = backend.list_layout(list_column(self, frame, col))
            lengths = layout.lengths[layout.valid]
            stats[col] = (int(lengths.min()), int(lengths.max())) if lengths.size else (None, None)
        return stats

    def merge(self, left: dict, right: dict) -> dict:
        out = {}
        for c in left:
            (a_lo, a_hi), (b_lo, b_hi) = left[c], right[c]
            out[c] = (b_lo, b_hi) if a_lo is None else (a_lo, a_hi) if b_lo is None else (min(a_lo, b_lo), max(a_hi, b_hi))
        return out

    def finalize(self, columns: Columns, merged: dict) -> None:
        self.stats_ = {c: {"min": lo or 0, "max": hi or 0} for c, (lo, hi) in merged.items()}

    def transform(self, columns: Columns, frame: Any) -> Any:
        self.check_is_fitted(columns)
        return frame[flatten_columns(columns)]

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        schema = super().compute_output_schema(input_schema, columns)
        stats = getattr(self, "stats_", {})
        return Schema(c.with_properties(value_count=dict(stats[c.name])) if c.name in stats else c for c in schema)

    def get_state(self) -> dict[str, Any]:
        return {"stats": self.stats_} if self.is_fitted else {}

    def set_state(self, state: dict[str, Any]) -> None:
        if "stats" in state:
            self.stats_ = {c: {"min": int(v["min"]), "max": int(v["max"])} for c, v in state["stats"].items()}


class ListSlice(Operator):
    """Slice every list of list columns like Python's ``lst[start:end]`` (negative indices too).

    With ``pad=True`` every output list has exactly the slice's length (``end - start``, or
    ``-start`` for ``ListSlice(-n)``), padded at the end with ``pad_value``; null rows become
    lists of ``pad_value`` there, while without padding they stay null. Elements keep their
    type. The schema records ``value_count: {"min": n, "max": n}`` for padded outputs; without
    padding, a ``value_count`` the input has (from ValueCount) becomes the sliced lists' (dropped
    where slicing leaves it unknown: a negative start with a non-negative end).

    Args:
        start: first index (negative: from the end).
        end: index past the last (None: to the end; negative: from the end).
        pad: pad to a fixed length (needs a fixed slice length, see above).
        pad_value: the padding element.

    Example:
        >>> import pandas as pd, pyarrow as pa
        >>> from tabloader.ops.lists import ListSlice
        >>> df = pd.DataFrame({"l": pd.arrays.ArrowExtensionArray(pa.array([[1, 2, 3], [4], None]))})
        >>> ListSlice(0, 2).transform(["l"], df)["l"].tolist()
        [[1, 2], [4], <NA>]
        >>> ListSlice(-2, pad=True).transform(["l"], df)["l"].tolist()
        [[2, 3], [4, 0], [0, 0]]
    """

    device_note = "Slices cuDF list columns through their device offsets and elements."

    def __init__(self, start: int, end: int | None = None, pad: bool = False, pad_value: Any = 0) -> None:
        self.start, self.end, self.pad, self.pad_value = start, end, pad, pad_value
        if pad and self._fixed_length() is None:
            raise ValueError(f"ListSlice(start={start}, end={end}, pad=True) has no fixed length: give 0 <= start < end, "
                             "start < end < 0, or a negative start without end")

    def _fixed_length(self) -> int | None:
        s, e = self.start, self.end
        if e is None:
            return -s if s < 0 else None
        if (s >= 0 and e >= 0) or (s < 0 and e < 0):
            return max(e - s, 0)
        return None

    def transform(self, columns: Columns, frame: Any) -> Any:
        out = {col: self._slice(list_column(self, frame, col)) for col in flatten_columns(columns)}
        return backend.frame_from_columns(out, frame.index, like=frame)

    def _slice(self, series: Any) -> Any:
        layout = backend.list_layout(series)
        xp = backend.array_lib(layout.lengths)
        lengths = layout.lengths
        s = xp.clip(lengths + self.start, 0, None) if self.start < 0 else xp.minimum(self.start, lengths)
        if self.end is None:
            e = lengths
        else:
            e = xp.clip(lengths + self.end, 0, None) if self.end < 0 else xp.minimum(self.end, lengths)
        new_len = xp.maximum(e - s, 0)
        if not self.pad:  # as many elements as the slices hold: their sum is read back from the device
            offsets, take, _ = backend.run_positions(new_len, layout.offsets[:-1] + s)
            return backend.build_list(offsets, backend.take_values(layout.values, take), layout.valid, series.index,
                                      series.name, like=series)
        # Padded: row i's slot j holds element s[i] + j of its list, or the pad element (appended
        # below) past its slice; n * width slots, known without reading anything back.
        n, width = len(lengths), self._fixed_length()
        slots = xp.arange(width, dtype=xp.int64)
        index = xp.where(slots < new_len[:, None], (layout.offsets[:-1] + s)[:, None] + slots, len(layout.values))
        padded = backend.take_values(backend.concat_values(layout.values, [self.pad_value]), index.ravel())
        return backend.build_list(xp.arange(n + 1, dtype=xp.int64) * width, padded, None, series.index, series.name,
                                  like=series)

    def compute_output_schema(self, input_schema: Schema, columns: Columns) -> Schema:
        schema = super().compute_output_schema(input_schema, columns)
        if self.pad:
            width = self._fixed_length()
            return Schema(c.with_properties(value_count={"min": width, "max": width}) for c in schema)
        return Schema(self._sliced_counts(c) for c in schema)

    def _sliced_counts(self, column: ColumnSchema) -> ColumnSchema:
        """``column`` with its ``value_count`` (list lengths, from ValueCount) as slicing leaves
        them: the loader pads lists to that max. The slice's length grows with the list's, but
        for a negative start and a non-negative end: bounds unknown then, the property is dropped."""
        counts = column.properties.get("value_count")
        if not counts:
            return column
        if self.start < 0 <= (self.end if self.end is not None else -1):
            return dataclasses.replace(column, properties={k: v for k, v in column.properties.items()
                                                           if k != "value_count"})
        return column.with_properties(value_count={k: self._sliced_length(int(counts[k])) for k in ("min", "max")})

    def _sliced_length(self, length: int) -> int:
        """How many elements of a list of ``length`` the slice keeps (as :meth:`_slice` does)."""
        start = max(length + self.start, 0) if self.start < 0 else min(self.start, length)
        end = length if self.end is None else max(length + self.end, 0) if self.end < 0 else min(self.end, length)
        return max(end - start, 0)
