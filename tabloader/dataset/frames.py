"""Sources of data already in a DataFrame: in memory (pandas or cuDF) or a Dask collection.

Example:
    >>> import dask.dataframe as dd, pandas as pd
    >>> source = DaskSource(dd.from_pandas(pd.DataFrame({"a": range(6)}), npartitions=3))
    >>> source.npartitions, source.partition_sizes(), source.read_frame(2)["a"].tolist()
    (3, None, [4, 5])
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
from typing import Any, Sequence

import numpy as np

from tabloader import backend
from tabloader.dataset.source import Source


class RowRangeSource(Source):
    """Rows held in memory, cut into consecutive row ranges of about ``part_size`` bytes
    (:meth:`_cut`); ``what`` names them in messages."""

    what = "the rows"
    row_ranges: list[tuple[int, int]]

    def _cut(self, rows: int, nbytes: int, part_size: int) -> None:
        parts = max(1, min(rows, math.ceil(nbytes / part_size)))
        bounds = np.linspace(0, rows, parts + 1).astype(int)
        self.row_ranges = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]

    @property
    def npartitions(self) -> int:
        return len(self.row_ranges)

    def partition_sizes(self) -> list[int]:
        return [stop - start for start, stop in self.row_ranges]

    def describe(self, index: int | None = None) -> str:
        if index is None:
            return self.what
        start, stop = self.row_ranges[index]
        return f"rows [{start}, {stop}) of {self.what}"


class FrameSource(RowRangeSource):
    """A pandas or cuDF DataFrame, moved to ``device`` where it is elsewhere, cut into
    consecutive row ranges of about ``part_size`` bytes in memory (its index is dropped: rows
    are numbered from 0)."""

    what = "the DataFrame"

    def __init__(self, frame: Any, part_size: int, device: str = "cpu") -> None:
        super().__init__(device)
        frame = backend.to_frame_device(frame, device)
        self.frame = frame = _lists_as_arrow(frame.reset_index(drop=True))
        self._scattered: dict[tuple, Any] = {}  # (client id, columns) -> the frame's future on that cluster
        n = len(frame)
        self._cut(n, int(frame.memory_usage(deep=True, index=False).sum()) if n else 0, part_size)

    @property
    def arrow_schema(self) -> Any:
        return backend.frame_arrow_schema(self.frame)

    def meta(self) -> Any:
        return self.frame.iloc[:0]

    def read_frame(self, index: int, columns: Sequence[str] | None = None) -> Any:
        start, stop = self.row_ranges[index]
        return _rows(self.frame, start, stop, columns)

    def delayed_frames(self, columns: Sequence[str] | None = None) -> list[Any] | None:
        """With a distributed client, the frame is scattered to the cluster once and each
        partition is a slice of it there: in the graph it would travel through the scheduler
        (and be unpickled there) whole. Without one, None: read in place."""
        import dask

        from tabloader.scheduler import active_client

        client = active_client()
        if client is None:
            return None
        # The future is kept here: a graph refers to its key only, and a future nobody holds is
        # released on the cluster (a later phase of a fit would find its data lost).
        key = (client.id, None if columns is None else tuple(columns))
        if key not in self._scattered:
            self._scattered[key] = client.scatter(self.frame if columns is None else self.frame[list(columns)],
                                                  broadcast=False)
        return [dask.delayed(_rows)(self._scattered[key], start, stop, None) for start, stop in self.row_ranges]

    @property
    def summary(self) -> str:
        return "a DataFrame"


def _lists_as_arrow(frame: Any) -> Any:
    """``frame`` with its object columns of lists (Python lists, or the numpy arrays of
    ``pd.read_parquet``) as arrow list columns: converted once for the whole column, a partition
    holding only null lists stays a list column (per partition it would look like a column of
    nulls, and an operator would fill or hash its rows as scalars).

    Example:
        >>> import pandas as pd
        >>> frame = _lists_as_arrow(pd.DataFrame({"l": [None, [1, 2]], "s": ["a", "b"]}))
        >>> str(frame["l"].dtype), frame["s"].tolist()
        ('list<item: int64>[pyarrow]', ['a', 'b'])
    """
    from tabloader.encoding.lists import as_list_column

    if backend.is_gpu_object(frame):
        return frame
    lists = {}
    for position, (name, series) in enumerate(frame.items()):
        if series.dtype == object:
            try:
                converted = as_list_column("Dataset", name, series)
            except TypeError:  # lists in some rows, other values in others: an operator reading it says so
                continue
            if converted is not None:
                lists[position] = converted
    if not lists:
        return frame
    frame = frame.copy(deep=False)  # the caller's frame is left as it is
    for position, converted in lists.items():
        frame.isetitem(position, converted)
    return frame


def _list_types(frame: Any) -> dict[str, Any]:
    """The columns of ``frame`` (object columns of a pandas frame) that hold lists -> their arrow
    type (see :func:`_lists_as_arrow`)."""
    converted = _lists_as_arrow(frame)
    return {name: converted[name].dtype.pyarrow_dtype for name in frame.columns
            if converted[name].dtype is not frame[name].dtype and backend.is_list_dtype(converted[name].dtype)}


def _as_lists(frame: Any, lists: dict[str, Any]) -> Any:
    """``frame`` with the columns named in ``lists`` (name -> arrow list type) as arrow list
    columns of that type, those it holds; a column of nulls only becomes null lists."""
    import pandas as pd

    from tabloader.encoding.lists import as_list_column

    present = [name for name in lists if name in frame.columns and not backend.is_list_dtype(frame[name].dtype)]
    if not present:
        return frame
    frame = frame.copy(deep=False)
    for name in present:
        arr = backend.list_column_to_arrow(as_list_column("Dataset", name, frame[name], is_list=True))
        frame[name] = pd.Series(pd.arrays.ArrowExtensionArray(arr.cast(lists[name])), index=frame.index, copy=False)
    return frame


def _rows(frame: Any, start: int, stop: int, columns: Sequence[str] | None) -> Any:
    """Rows ``[start, stop)`` of ``frame`` (``columns`` only, when given)."""
    part = frame.iloc[start:stop]
    return part[list(columns)] if columns is not None else part


_DASK_EXPRESSIONS = threading.Lock() if sys.version_info < (3, 12) else contextlib.nullcontext()


class DaskSource(Source):
    """A Dask DataFrame (pandas partitions) or Dask-cuDF DataFrame (cuDF partitions), partition
    by partition (each computed on its own, on the calling thread), moved to ``device`` where it
    is elsewhere. Its partitions' sizes are known only by reading them."""

    _lists: dict[str, Any] | None = None  # see _list_columns (a class default: older pickles lack it)

    def __init__(self, ddf: Any, device: str = "cpu") -> None:
        super().__init__(device)
        self.ddf = ddf

    @property
    def npartitions(self) -> int:
        return self.ddf.npartitions

    @property
    def arrow_schema(self) -> Any:
        schema = backend.frame_arrow_schema(self.ddf)
        for name, arrow_type in self._list_columns().items():
            schema = schema.set(schema.get_field_index(name), schema.field(name).with_type(arrow_type))
        return schema

    def meta(self) -> Any:
        meta = backend.to_frame_device(self.ddf._meta, self.device)
        return _as_lists(meta, self._list_columns())

    def _list_columns(self) -> dict[str, Any]:
        """The object columns that hold lists (``dd.read_parquet``'s numpy arrays, Python lists)
        -> their arrow list type, seen in the first partition: the meta of a Dask frame says
        ``object`` alone. They are read as arrow list columns, as a pandas frame's are."""
        if self._lists is None:
            meta = self.ddf._meta
            objects = [] if backend.is_gpu_object(meta) else [c for c, d in meta.dtypes.items() if d == object]
            self._lists = _list_types(self._computed(0, objects)) if objects and self.npartitions else {}
        return self._lists

    def read_frame(self, index: int, columns: Sequence[str] | None = None) -> Any:
        frame = self._computed(index, columns)
        return backend.to_frame_device(_as_lists(frame, self._list_columns()), self.device)

    def _computed(self, index: int, columns: Sequence[str] | None) -> Any:
        """Partition ``index`` (``columns`` only) as the collection computes it."""
        from tabloader.scheduler import active_client

        # One at a time on Python 3.11, whose functools.cached_property holds a lock per class:
        # two threads building partitions of one Dask collection took dask-expr's cached
        # properties in opposite orders and waited for each other for ever.
        with _DASK_EXPRESSIONS:
            part = self.ddf.get_partition(index)
            part = part[list(columns)] if columns is not None else part
            # On this thread, unless a distributed client holds the collection's data (persisted
            # partitions are futures there, which the synchronous scheduler cannot resolve).
            return part.compute(scheduler=None if active_client() is not None else "sync")

    def delayed_frames(self, columns: Sequence[str] | None = None) -> list[Any]:
        import dask

        lists = self._list_columns()
        return [dask.delayed(backend.to_frame_device)(dask.delayed(_as_lists)(part, lists), self.device)
                for part in self._partitions_delayed(columns)]

    def _partitions_delayed(self, columns: Sequence[str] | None) -> list[Any]:
        """The partitions (``columns`` only) as Dask delayed objects, as the collection computes them."""
        return (self.ddf[list(columns)] if columns is not None else self.ddf).to_delayed()

    def describe(self, index: int | None = None) -> str:
        return "the Dask DataFrame" if index is None else f"partition {index} of the Dask DataFrame"

    @property
    def summary(self) -> str:
        return "a Dask DataFrame"

    def dask_frame(self) -> Any:
        # On another device than the dataset's, the frame is not the dataset's rows as they are read.
        return self.ddf if backend.frame_device(self.ddf._meta) == self.device else None
