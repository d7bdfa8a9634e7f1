"""Stage 2 of the loader, the reader: decodes a dataset's partitions and checks them.

:class:`PartitionReader` decodes a partition with pyarrow on the CPU (untransformed parquet row
groups straight into a memory pool that keeps its pages, since page faults cost as much as
decoding), or as cuDF frames on the GPU, with a fitted workflow applied when the dataset is a
transformed one. It checks the columns and nulls up front, so that a bad file fails with a
:class:`LoaderReadError` naming the file and column rather than deep in a framework.
:class:`ReadAhead` decodes the next partitions on threads of their own (pyarrow and libcudf
release the GIL), so decoding overlaps with packing the previous partition; how many partitions
are decoded ahead at once is :func:`read_ahead` (``TABLOADER_READ_AHEAD``, default 1).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, ContextManager, Sequence

from tabloader import backend
from tabloader.dataset.source import error_message


class LoaderReadError(RuntimeError):
    """A partition could not be read or does not hold what the loader needs (names the files)."""

    __module__ = "tabloader.loader"  # its public home (tracebacks, pickles), as before the split


class PartitionReader:
    """Decodes partitions of a dataset and checks them.

    Reads with pyarrow (``Dataset.read_partition_arrow``: no pandas for untransformed parquet,
    decoded into :func:`memory_pool`) or, for a cuDF dataset on the GPU, as cuDF frames. Keeps
    the last partition read, so a partition split between two chunks is decoded once. Errors
    name the partition's files (``Dataset.describe_partition``); a null in a column raises,
    except in ``nan_columns`` (the loader passes its float columns: there a null is handed on
    as NaN, as pandas does).

    Example:
        >>> import pandas as pd, tabloader as tl
        >>> reader = PartitionReader(tl.Dataset(pd.DataFrame({"a": pd.array([1, 2, None], "Int64")})), ["a"])
        >>> reader.read(0)
        Traceback (most recent call last):
        ...
        tabloader.loader.LoaderReadError: column 'a' has 1 null value(s) in partition 0 (rows [0, 3) of the DataFrame); ...
    """

    def __init__(self, dataset: Any, columns: Sequence[str], gpu_frames: bool = False,
                 nan_columns: Sequence[str] = ()) -> None:
        self.dataset, self.columns = dataset, list(columns)
        self.nan_columns = set(nan_columns)
        self.gpu_frames = gpu_frames
        self._cache: tuple[int, Any] | None = None

    def describe(self, index: int) -> str:
        """The files (or rows) of partition ``index`` (for messages)."""
        return self.dataset.describe_partition(index)

    def read(self, index: int) -> Any:
        """Partition ``index`` as a pyarrow Table (or a cuDF frame) with the loader's columns."""
        if self._cache is not None and self._cache[0] == index:
            return self._cache[1]
        self._cache = None
        data = self.read_uncached(index)
        self._cache = (index, data)
        return data

    def read_uncached(self, index: int) -> Any:
        """Partition ``index``, decoded and checked (thread-safe: touches no cache)."""
        try:
            if self.gpu_frames:
                data = self.dataset.read_partition(index, self.columns)
            else:
                data = self.dataset.read_partition_arrow(index, self.columns, memory_pool=memory_pool())
        except Exception as exc:
            raise LoaderReadError(f"could not read partition {index} ({self.describe(index)}): "
                                  f"{type(exc).__name__}: {error_message(exc)}") from exc
        self._check(index, data)
        return data

    def read_ahead(self, partitions: Sequence[int], ahead: int = 1,
                   context: Callable[[], ContextManager] = contextlib.nullcontext) -> "ReadAhead":
        """A :class:`ReadAhead` over ``partitions`` (in the order they will be asked for)."""
        return ReadAhead(self, partitions, ahead, context)

    def count(self, index: int) -> int:
        """Rows of partition ``index`` (reads it)."""
        return len(self.read(index))

    def _check(self, index: int, data: Any) -> None:
        names = list(data.column_names) if hasattr(data, "column_names") else list(data.columns)
        missing = [c for c in self.columns if c not in names]
        if missing:
            raise LoaderReadError(f"columns {missing} are missing from partition {index} ({self.describe(index)})")
        for name in self.columns:
            if name in self.nan_columns:
                continue  # nulls of float columns become NaN
            column = data[name] if not hasattr(data, "column") else data.column(name)
            nulls = int(column.null_count) or _element_nulls(column)
            if nulls:
                raise LoaderReadError(
                    f"column {name!r} has {nulls} null value(s) in partition {index} ({self.describe(index)}); "
                    "the loader cannot hand nulls to a framework: fill them first with a workflow (FillMissing(0) "
                    "fills nulls, and null elements of list columns, whose null lists become []; "
                    "FillMissing([...]) fills null lists with that list; Categorify encodes a null as 1) "
                    "or leave the column out")


class ReadAhead:
    """Decodes the next ``ahead`` partitions of a known order on ``ahead`` threads of their own
    (one with ``ahead=0``), so that decoding (pyarrow or libcudf, GIL released) overlaps with
    packing the previous partition, and, with ``ahead > 1``, one partition's decoding with
    another's reading of its files.

    ``get(i)`` must be called in the announced order (a partition asked for twice in a row,
    when it is split between two chunks, is decoded once). The thread decodes inside
    ``context()`` (the loader passes :func:`tabloader.backend.device_context` of its device, so
    cuDF decodes on the loader's GPU).

    Example:
        >>> import pandas as pd, tabloader as tl
        >>> reader = PartitionReader(tl.Dataset(pd.DataFrame({"a": range(4)}), part_size=16), ["a"])
        >>> with reader.read_ahead([1, 0]) as ahead:
        ...     ahead.get(1).column("a").to_pylist(), ahead.get(0).column("a").to_pylist()
        ([2, 3], [0, 1])
    """

    def __init__(self, reader: PartitionReader, partitions: Sequence[int], ahead: int = 1,
                 context: Callable[[], ContextManager] = contextlib.nullcontext) -> None:
        import collections
        import concurrent.futures

        self._reader, self._ahead, self._context = reader, max(0, ahead), context
        self._order = [p for i, p in enumerate(partitions) if i == 0 or partitions[i - 1] != p]
        self._next = 0
        self._futures: Any = collections.deque()
        self._last: tuple[int, Any] | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(max(1, self._ahead), thread_name_prefix="tabloader-read")

    def get(self, partition: int) -> Any:
        if self._last is not None and self._last[0] == partition:
            return self._last[1]
        self._last = None
        while len(self._futures) < self._ahead + 1 and self._next < len(self._order):
            index = self._order[self._next]
            self._futures.append((index, self._pool.submit(self._read, index)))
            self._next += 1
        if not self._futures or self._futures[0][0] != partition:
            raise RuntimeError(f"partition {partition} asked for out of the announced order")
        _, future = self._futures.popleft()
        self._last = (partition, future.result())
        return self._last[1]

    def _read(self, index: int) -> Any:
        with self._context():
            return self._reader.read_uncached(index)

    def close(self) -> None:
        self._futures.clear()
        self._last = None
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "ReadAhead":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


#: Partitions decoded ahead of the one being packed, at once, each on a thread of its own.
READ_AHEAD_ENV = "TABLOADER_READ_AHEAD"


def read_ahead() -> int:
    """How many partitions a prefetching loader decodes ahead at once: ``TABLOADER_READ_AHEAD``
    (an integer >= 1), by default 1. One keeps the decoder busy while the loader packs; more
    overlap one partition's file reads with another's decoding (pyarrow's threads or the GPU
    may then idle less), for the memory of as many more decoded partitions.
    ``tools/gpu_profile_loader.py --read-ahead 1 2`` times both.

    Example:
        >>> read_ahead()
        1
    """
    value = os.environ.get(READ_AHEAD_ENV, "1").strip()
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{READ_AHEAD_ENV}={value!r}: give the number of partitions to decode ahead, an integer >= 1")
    return int(value)


_POOL: list[Any] = []


def memory_pool() -> Any:
    """The pyarrow memory pool the loader decodes into: jemalloc keeping freed pages for a
    while (falls back to pyarrow's default pool where jemalloc is not built in).

    The default (mimalloc) pool hands freed memory back to the OS at once, and page faults on
    fresh memory cost about as much as decoding itself; a pool that keeps its pages makes
    reading a partition about twice as fast in a loop that reads one partition after another.
    """
    if not _POOL:
        import pyarrow as pa

        try:
            pool = pa.jemalloc_memory_pool()
            pa.jemalloc_set_decay_ms(_POOL_DECAY_MS)
        except (NotImplementedError, AttributeError, OSError):
            pool = pa.default_memory_pool()
        _POOL.append(pool)
    return _POOL[0]


_POOL_DECAY_MS = 10_000


def _element_nulls(column: Any) -> int:
    """Null elements of a list column (a pyarrow ChunkedArray, or a cuDF Series decoded on the
    GPU); 0 for other columns."""
    if hasattr(column, "type"):
        return sum(int(c.values.null_count) for c in column.chunks) if _is_arrow_list(column.type) else 0
    return int(backend.list_layout(column).values.null_count) if backend.is_list_dtype(column.dtype) else 0


def _is_arrow_list(arrow_type: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)
