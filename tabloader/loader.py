"""The framework-neutral batch loader: plan -> read -> chunk buffer -> shuffle -> batch -> prefetch.

One class per stage:

* :class:`PartitionPlan` -- which rows each rank reads in an epoch and how they are cut into
  chunks. The partition order comes from ``(seed, epoch)``; ranks get equal, disjoint row
  ranges of that order (partitions at the edges are split by rows).
* :class:`PartitionReader` -- decodes a partition (pyarrow on the CPU, cuDF on the GPU, a
  fitted workflow applied when the dataset is a transformed one), checks columns and nulls.
* :class:`ChunkBuffer` -- packs the rows of a chunk into preallocated buffers on the device:
  one 2-D row-major array per dtype (so a shuffled row gather touches one contiguous span per
  row) plus ``(values, offsets)`` for list columns.
* :class:`Shuffler` -- a seeded permutation of a chunk's rows (never the global RNG).
* :class:`Batcher` -- slices the permuted chunks into batches; a batch may span two chunks
  (the tail of one chunk is carried into the next), so every batch but the last is full.
* :class:`Prefetcher` -- builds the next chunk on a background thread while the current one is
  consumed, and re-raises its exceptions in the consumer.

:class:`Loader` wires them together and yields ``(features, target)`` with numpy (CPU) or CuPy
(GPU) arrays; it imports no deep-learning framework. ``tabloader.torch.Loader`` adapts it.

Example:
    >>> import numpy as np, pandas as pd, tabloader as tl
    >>> df = pd.DataFrame({"c": np.arange(10), "x": np.arange(10, dtype="float32"), "y": np.ones(10)})
    >>> loader = tl.Loader(tl.Dataset(df), batch_size=4, categorical=["c"], continuous=["x"], target="y")
    >>> [len(target) for features, target in loader]
    [4, 4, 2]
    >>> sorted(np.concatenate([f["c"] for f, _ in loader]).tolist()) == list(range(10))
    True
"""

from __future__ import annotations

import dataclasses
import math
import queue
import threading
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from tabloader import backend
from tabloader.schema import Schema, Tags

__all__ = [
    "Loader", "LoaderReadError", "ColumnLayout", "Segment", "ChunkSpec", "PartitionPlan",
    "PartitionReader", "ReadAhead", "ChunkBuffer", "Chunk", "Shuffler", "Batcher", "Prefetcher",
]

_PACK_ROWS = 4096  # rows per cache-sized block when packing a chunk on the CPU
_GATHER_ROWS = 1024  # rows per cache-sized block when gathering a batch on the CPU


class LoaderReadError(RuntimeError):
    """A partition could not be read or does not hold what the loader needs (names the files)."""


# --------------------------------------------------------------------------------------------
# Column roles
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ColumnLayout:
    """Which columns are features and targets, and how they are packed.

    Scalar columns of one dtype share a 2-D buffer (``groups`` maps dtype -> column names);
    list columns keep ``(values, offsets)``.

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
                    target: Sequence[str] | str | None = None) -> "ColumnLayout":
        """Roles from the schema tags, overridden by the arguments that are not None.

        Without any CATEGORICAL/CONTINUOUS tag (and no argument), every non-target numeric
        column is a feature.
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
        return cls(tuple(features), tuple(targets), {d: tuple(v) for d, v in groups.items()}, lists)


def _names(value: Sequence[str] | str) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _numeric_dtype(name: str, dtype: str | None) -> str:
    try:
        np_dtype = np.dtype(dtype) if dtype is not None else None
    except TypeError:
        np_dtype = None
    if np_dtype is None or np_dtype.kind not in "biuf":
        raise TypeError(f"column {name!r} has dtype {dtype!r}; the loader hands numeric columns to frameworks: "
                        "encode it first (for instance with a Categorify op)")
    return np_dtype.name


# --------------------------------------------------------------------------------------------
# Stage 1: the partition plan
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Segment:
    """Rows ``[start, stop)`` of partition ``partition``."""

    partition: int
    start: int
    stop: int

    @property
    def num_rows(self) -> int:
        return self.stop - self.start


@dataclasses.dataclass(frozen=True)
class ChunkSpec:
    """The segments of one chunk; ``row_start`` is its first row's position in the rank's epoch."""

    index: int
    segments: tuple[Segment, ...]
    row_start: int

    @property
    def num_rows(self) -> int:
        return sum(s.num_rows for s in self.segments)


class PartitionPlan:
    """The rows each rank reads in an epoch, cut into chunks.

    The epoch's partition order is a permutation drawn from ``(seed, epoch)`` (the identity
    without shuffle). The rows of that order are split into ``global_size`` consecutive ranges
    of equal length, one per rank, so ranks are disjoint and balanced even with more ranks than
    partitions (partitions are split by row ranges). Like ``torch.utils.data.DistributedSampler``,
    when the rows do not divide evenly each rank gets ``ceil(rows / global_size)`` rows and the
    missing ones are repeated from the start of the epoch's order (at most ``global_size - 1``
    rows repeated); with ``drop_last`` each rank gets ``floor(rows / global_size)`` rows instead.

    Args:
        sizes: rows per partition.
        rows_per_chunk: most rows in a chunk (segments are split to respect it), or None.
        parts_per_chunk: segments per chunk instead of a row budget.

    Example:
        >>> plan = PartitionPlan([4, 4, 2], shuffle=False, rows_per_chunk=5)
        >>> [[(s.partition, s.start, s.stop) for s in c.segments] for c in plan.chunks(epoch=0)]
        [[(0, 0, 4), (1, 0, 1)], [(1, 1, 4), (2, 0, 2)]]
        >>> two = [PartitionPlan([4, 4, 2], shuffle=False, global_rank=r, global_size=2) for r in (0, 1)]
        >>> [[(s.partition, s.start, s.stop) for s in p.rank_segments(0)] for p in two]
        [[(0, 0, 4), (1, 0, 1)], [(1, 1, 4), (2, 0, 2)]]
    """

    def __init__(self, sizes: Sequence[int], shuffle: bool = True, seed: int = 0, global_rank: int = 0,
                 global_size: int = 1, drop_last: bool = False, rows_per_chunk: int | None = None,
                 parts_per_chunk: int | None = None) -> None:
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.total_rows = int(self.sizes.sum())
        if self.total_rows == 0:
            raise ValueError("the dataset has no rows to load")
        if not 0 <= global_rank < global_size:
            raise ValueError(f"need 0 <= global_rank < global_size, got global_rank={global_rank}, "
                             f"global_size={global_size}")
        if rows_per_chunk is not None and rows_per_chunk < 1:
            raise ValueError(f"rows_per_chunk must be >= 1, got {rows_per_chunk}")
        if parts_per_chunk is not None and parts_per_chunk < 1:
            raise ValueError(f"parts_per_chunk must be >= 1, got {parts_per_chunk}")
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.global_rank, self.global_size = global_rank, global_size
        self.rows_per_chunk, self.parts_per_chunk = rows_per_chunk, parts_per_chunk
        if global_size == 1:
            self.rows_per_rank = self.total_rows
        elif drop_last:
            self.rows_per_rank = self.total_rows // global_size
            if self.rows_per_rank == 0:
                raise ValueError(f"{self.total_rows} rows cannot give each of {global_size} ranks a row with "
                                 "drop_last=True")
        else:
            self.rows_per_rank = -(-self.total_rows // global_size)

    def order(self, epoch: int) -> np.ndarray:
        """Partition order of ``epoch``."""
        if not self.shuffle:
            return np.arange(len(self.sizes))
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.sizes))

    def rank_segments(self, epoch: int) -> list[Segment]:
        """This rank's rows in ``epoch``, in order, as partition row ranges."""
        order = self.order(epoch)
        starts = np.concatenate([[0], np.cumsum(self.sizes[order])])
        lo = self.global_rank * self.rows_per_rank
        hi = lo + self.rows_per_rank
        segments: list[Segment] = []
        position = lo
        while position < hi:  # positions past the end wrap around (padding)
            a = position % self.total_rows
            b = min(self.total_rows, a + hi - position)
            segments += _stream_segments(order, starts, a, b)
            position += b - a
        return segments

    def chunks(self, epoch: int) -> list[ChunkSpec]:
        """This rank's chunks in ``epoch``."""
        segments = self.rank_segments(epoch)
        groups: list[list[Segment]] = []
        if self.parts_per_chunk is not None:
            groups = [segments[i:i + self.parts_per_chunk] for i in range(0, len(segments), self.parts_per_chunk)]
        else:
            budget = self.rows_per_chunk or self.rows_per_rank
            current: list[Segment] = []
            room = budget
            for seg in segments:
                while seg.num_rows:
                    take = min(room, seg.num_rows)
                    current.append(Segment(seg.partition, seg.start, seg.start + take))
                    seg = Segment(seg.partition, seg.start + take, seg.stop)
                    room -= take
                    if room == 0:
                        groups.append(current)
                        current, room = [], budget
            if current:
                groups.append(current)
        specs, row = [], 0
        for i, group in enumerate(groups):
            specs.append(ChunkSpec(i, tuple(group), row))
            row += specs[-1].num_rows
        return specs

    def num_batches(self, batch_size: int) -> int:
        """Batches per epoch on every rank."""
        if self.drop_last:
            return self.rows_per_rank // batch_size
        return -(-self.rows_per_rank // batch_size)


def _stream_segments(order: np.ndarray, starts: np.ndarray, a: int, b: int) -> list[Segment]:
    """Rows ``[a, b)`` of the epoch's row stream as segments of the partitions in ``order``."""
    out = []
    k = int(np.searchsorted(starts, a, side="right")) - 1
    while a < b:
        part_end = int(starts[k + 1])
        stop = min(b, part_end)
        if stop > a:
            out.append(Segment(int(order[k]), a - int(starts[k]), stop - int(starts[k])))
        a = stop
        k += 1
    return out


# --------------------------------------------------------------------------------------------
# Stage 2: the reader
# --------------------------------------------------------------------------------------------
class PartitionReader:
    """Decodes partitions of a dataset and checks them.

    Reads with pyarrow (``Dataset.read_partition_arrow``: no pandas for untransformed parquet)
    or, for a cuDF dataset on the GPU, as cuDF frames. Keeps the last partition read, so a
    partition split between two chunks is decoded once. Errors name the partition's files; a
    null in a column raises, except in ``nan_columns`` (the loader passes its float columns:
    there a null is handed on as NaN, as pandas does).

    Example:
        >>> import pandas as pd, tabloader as tl
        >>> reader = PartitionReader(tl.Dataset(pd.DataFrame({"a": pd.array([1, 2, None], "Int64")})), ["a"])
        >>> reader.read(0)
        Traceback (most recent call last):
        ...
        tabloader.loader.LoaderReadError: column 'a' has 1 null value(s) in partition 0 (a DataFrame); ...
    """

    def __init__(self, dataset: Any, columns: Sequence[str], gpu_frames: bool = False,
                 nan_columns: Sequence[str] = ()) -> None:
        self.dataset, self.columns = dataset, list(columns)
        self.nan_columns = set(nan_columns)
        self.gpu_frames = gpu_frames
        self._cache: tuple[int, Any] | None = None
        # Untransformed parquet: read the row groups directly into the loader's memory pool.
        pieces = getattr(dataset, "_partitions", None)
        self._pieces = pieces if pieces and not gpu_frames and not dataset.is_transformed else None
        self._arrow_fs = _arrow_filesystem(getattr(dataset, "_fs", None)) if self._pieces else None

    def describe(self, index: int) -> str:
        """The files of partition ``index`` (for messages)."""
        parts = getattr(self.dataset, "_partitions", None)
        if parts and index < len(parts):
            files = sorted({p.path for p in parts[index]})
            return ", ".join(files)
        return "a DataFrame" if getattr(self.dataset, "_frame", None) is not None else "in-memory data"

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
            elif self._pieces is not None:
                data = _read_pieces_arrow(self._pieces[index], self.columns, self._arrow_fs)
            else:
                data = self.dataset.read_partition_arrow(index, self.columns)
        except Exception as exc:
            raise LoaderReadError(f"could not read partition {index} ({self.describe(index)}): "
                                  f"{type(exc).__name__}: {exc}") from exc
        self._check(index, data)
        return data

    def read_ahead(self, partitions: Sequence[int], ahead: int = 1) -> "ReadAhead":
        """A :class:`ReadAhead` over ``partitions`` (in the order they will be asked for)."""
        return ReadAhead(self, partitions, ahead)

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
            nulls = int(column.null_count)
            if not nulls and hasattr(column, "type") and _is_arrow_list(column.type):
                nulls = sum(int(c.values.null_count) for c in column.chunks)
            if nulls:
                raise LoaderReadError(
                    f"column {name!r} has {nulls} null value(s) in partition {index} ({self.describe(index)}); "
                    "the loader cannot hand nulls to a framework: fill them first (for instance with a "
                    "FillMissing op) or leave the column out")


class ReadAhead:
    """Decodes the next ``ahead`` partitions of a known order on a thread of its own, so that
    decoding (pyarrow, GIL released) overlaps with packing the previous partition.

    ``get(i)`` must be called in the announced order (a partition asked for twice in a row,
    when it is split between two chunks, is decoded once).

    Example:
        >>> import pandas as pd, tabloader as tl
        >>> reader = PartitionReader(tl.Dataset(pd.DataFrame({"a": range(4)}), part_size=16), ["a"])
        >>> with reader.read_ahead([1, 0]) as ahead:
        ...     ahead.get(1).column("a").to_pylist(), ahead.get(0).column("a").to_pylist()
        ([2, 3], [0, 1])
    """

    def __init__(self, reader: PartitionReader, partitions: Sequence[int], ahead: int = 1) -> None:
        import collections
        import concurrent.futures

        self._reader, self._ahead = reader, max(0, ahead)
        self._order = [p for i, p in enumerate(partitions) if i == 0 or partitions[i - 1] != p]
        self._next = 0
        self._futures: Any = collections.deque()
        self._last: tuple[int, Any] | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tabloader-read")

    def get(self, partition: int) -> Any:
        if self._last is not None and self._last[0] == partition:
            return self._last[1]
        self._last = None
        while len(self._futures) < self._ahead + 1 and self._next < len(self._order):
            index = self._order[self._next]
            self._futures.append((index, self._pool.submit(self._reader.read_uncached, index)))
            self._next += 1
        if not self._futures or self._futures[0][0] != partition:
            raise RuntimeError(f"partition {partition} asked for out of the announced order")
        _, future = self._futures.popleft()
        self._last = (partition, future.result())
        return self._last[1]

    def close(self) -> None:
        self._futures.clear()
        self._last = None
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "ReadAhead":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _read_pieces_arrow(pieces: Sequence[Any], columns: Sequence[str], fs: Any) -> Any:
    """Row groups of parquet files as one pyarrow Table, decoded into :func:`_memory_pool`.

    The default (mimalloc) pool hands freed memory back to the OS at once, and page faults on
    fresh memory cost about as much as decoding itself; a pool that keeps its pages makes
    reading a partition about twice as fast in a loop that reads one partition after another.
    """
    import pyarrow as pa
    import pyarrow.dataset as pds

    pool = _memory_pool()
    fmt = pds.ParquetFileFormat(default_fragment_scan_options=pds.ParquetFragmentScanOptions(pre_buffer=True))
    tables = []
    for piece in pieces:
        try:
            fragment = fmt.make_fragment(piece.path, filesystem=fs, row_groups=piece.row_groups)
            missing = [c for c in columns if c not in fragment.physical_schema.names]
            if missing:
                raise KeyError(f"columns {missing} are missing")
            tables.append(fragment.to_table(columns=list(columns), memory_pool=pool, use_threads=True))
        except Exception as exc:
            raise LoaderReadError(f"{piece.path}: could not read row groups {piece.row_groups}: "
                                  f"{type(exc).__name__}: {exc}") from exc
    if not tables:
        return pa.table({c: [] for c in columns})
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, memory_pool=pool)


_POOL: list[Any] = []


def _memory_pool() -> Any:
    """The pyarrow memory pool the loader decodes into: jemalloc keeping freed pages for a
    while (falls back to pyarrow's default pool where jemalloc is not built in)."""
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


def _arrow_filesystem(fs: Any) -> Any:
    """A pyarrow filesystem for an fsspec one (local paths stay local)."""
    import pyarrow.fs as pafs

    if fs is None or type(fs).__name__ == "LocalFileSystem":
        return pafs.LocalFileSystem()
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs))


def _is_arrow_list(arrow_type: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)


# --------------------------------------------------------------------------------------------
# Stage 3: the chunk buffer
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Chunk:
    """A chunk's rows on the device: ``groups`` dtype -> (rows, columns) array, list columns as
    (values, offsets), and the permutation in which the batcher reads the rows."""

    spec: ChunkSpec
    groups: dict[str, Any]
    lists: dict[str, tuple[Any, Any]]
    perm: Any = None

    @property
    def num_rows(self) -> int:
        return self.spec.num_rows


class ChunkBuffer:
    """Packs the rows of a chunk into reusable, row-major buffers on the device.

    Same-dtype scalar columns share one ``(rows, columns)`` array, so a shuffled gather reads one
    contiguous span per row instead of one cache line per value. ``slots`` buffers are kept
    and reused in turn (two when prefetching: the chunk being consumed and the next one), so
    memory stays at ``slots x rows_per_chunk`` rows whatever the dataset size. On the GPU
    without cuDF, rows are packed in pinned host memory and copied to the GPU once per chunk.

    Example:
        >>> import pyarrow as pa
        >>> layout = ColumnLayout(("a", "b"), (), {"int64": ("a", "b")}, {})
        >>> buf = ChunkBuffer(layout, max_rows=3)
        >>> table = pa.table({"a": [1, 2, 3], "b": [4, 5, 6]})
        >>> chunk = buf.fill(ChunkSpec(0, (Segment(0, 1, 3),), 0), [table])
        >>> chunk.groups["int64"].tolist()
        [[2, 5], [3, 6]]
    """

    def __init__(self, layout: ColumnLayout, max_rows: int, device: str = "cpu", slots: int = 1) -> None:
        self.layout, self.max_rows, self.device = layout, int(max_rows), device
        self.slots = slots
        self._buffers: list[dict[str, Any] | None] = [None] * slots
        self._host: list[dict[str, Any] | None] = [None] * slots
        self._next = 0
        self.max_rows_filled = 0  # the largest chunk packed so far (memory accounting)

    def _slot(self, index: int, host: bool) -> dict[str, Any]:
        store = self._host if host else self._buffers
        if store[index] is None:
            if host and self.device == "cuda":
                alloc = backend.pinned_empty
            elif self.device == "cuda":
                alloc = backend.device_empty
            else:
                alloc = np.empty
            store[index] = {d: alloc((self.max_rows, len(n)), np.dtype(d)) for d, n in self.layout.groups.items()}
        return store[index]

    def fill(self, spec: ChunkSpec, tables: Sequence[Any]) -> Chunk:
        """Pack ``spec``'s segments; ``tables[i]`` is the partition of ``spec.segments[i]``."""
        if spec.num_rows > self.max_rows:
            raise ValueError(f"chunk of {spec.num_rows} rows exceeds the buffer of {self.max_rows} rows")
        slot = self._next
        self._next = (self._next + 1) % self.slots
        self.max_rows_filled = max(self.max_rows_filled, spec.num_rows)
        if tables and backend.is_gpu_object(tables[0]):
            return self._fill_gpu_frames(spec, tables, self._slot(slot, host=False))
        target = self._slot(slot, host=True) if self.device == "cuda" else self._slot(slot, host=False)
        lists: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {name: [] for name in self.layout.lists}
        row = 0
        for seg, table in zip(spec.segments, tables):
            for batch in table.slice(seg.start, seg.num_rows).to_batches():
                n = batch.num_rows
                for dtype, names in self.layout.groups.items():
                    _pack_rows(target[dtype], row, [_arrow_to_numpy(batch.column(c)) for c in names])
                for name in self.layout.lists:
                    lists[name].append(_arrow_list_to_numpy(batch.column(name)))
                row += n
        groups = {d: buf[:row] for d, buf in target.items()}
        packed_lists = {name: _concat_lists(parts, self.layout.lists[name]) for name, parts in lists.items()}
        if self.device == "cuda":
            groups = backend.copy_to_device({d: a for d, a in groups.items()}, self._slot(slot, host=False))
            packed_lists = {k: (backend.asarray(v, "cuda"), backend.asarray(o, "cuda"))
                            for k, (v, o) in packed_lists.items()}
        return Chunk(spec, groups, packed_lists)

    def _fill_gpu_frames(self, spec: ChunkSpec, frames: Sequence[Any], target: dict[str, Any]) -> Chunk:
        cp = backend.cupy()
        row = 0
        lists: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {name: [] for name in self.layout.lists}
        for seg, frame in zip(spec.segments, frames):
            part = frame.iloc[seg.start:seg.stop]
            n = len(part)
            for dtype, names in self.layout.groups.items():
                for j, name in enumerate(names):
                    target[dtype][row:row + n, j] = part[name].values
            for name in self.layout.lists:  # list columns take the host route (documented)
                lists[name].append(_arrow_list_to_numpy(part[name].to_arrow()))
            row += n
        groups = {d: buf[:row] for d, buf in target.items()}
        packed = {}
        for name, parts in lists.items():
            values, offsets = _concat_lists(parts, self.layout.lists[name])
            packed[name] = (cp.asarray(values), cp.asarray(offsets))
        return Chunk(spec, groups, packed)


def _arrow_to_numpy(array: Any) -> np.ndarray:
    """A primitive arrow array as numpy: zero-copy without nulls (booleans copy)."""
    return array.to_numpy(zero_copy_only=False)


def _pack_rows(buf: np.ndarray, row: int, columns: Sequence[np.ndarray]) -> None:
    """Write ``columns`` into ``buf[row:row+n, :]`` block by block (blocks stay in cache)."""
    n = len(columns[0]) if columns else 0
    if len(columns) == 1:
        buf[row:row + n, 0] = columns[0]
        return
    for s in range(0, n, _PACK_ROWS):
        e = min(n, s + _PACK_ROWS)
        dst = buf[row + s:row + e]
        for j, col in enumerate(columns):
            dst[:, j] = col[s:e]


def _arrow_list_to_numpy(array: Any) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets starting at 0) of an arrow list array (or chunked array)."""
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        parts = [_arrow_list_to_numpy(c) for c in array.chunks]
        return _concat_lists(parts, None) if parts else (np.empty(0), np.zeros(1, np.int64))
    offsets = array.offsets.to_numpy().astype(np.int64)
    values = array.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    return values.to_numpy(zero_copy_only=False), offsets - offsets[0]


def _concat_lists(parts: Sequence[tuple[np.ndarray, np.ndarray]], dtype: str | None) -> tuple[np.ndarray, np.ndarray]:
    if not parts:
        return np.empty(0, dtype or np.int64), np.zeros(1, np.int64)
    values = np.concatenate([v for v, _ in parts])
    if dtype is not None:
        values = values.astype(dtype, copy=False)
    shifts = np.cumsum([0] + [int(o[-1]) for _, o in parts[:-1]])
    offsets = np.concatenate([parts[0][1][:1]] + [o[1:] + s for (_, o), s in zip(parts, shifts)])
    return values, offsets.astype(np.int64, copy=False)


# --------------------------------------------------------------------------------------------
# Stage 4: the shuffle
# --------------------------------------------------------------------------------------------
class Shuffler:
    """A seeded permutation of each chunk's rows, drawn on the chunk's device.

    The permutation of chunk ``c`` of ``epoch`` on rank ``r`` depends only on
    ``(seed, epoch, r, c)``, so a loader can be resumed by recomputing it. (CPU and GPU draw
    from different generators: the same seed gives different orders on the two devices.)

    Example:
        >>> Shuffler(seed=0).permutation(5, epoch=0, rank=0, chunk=0).tolist() == \\
        ...     Shuffler(seed=0).permutation(5, epoch=0, rank=0, chunk=0).tolist()
        True
        >>> Shuffler(shuffle=False).permutation(3, 0, 0, 0).tolist()
        [0, 1, 2]
    """

    def __init__(self, shuffle: bool = True, seed: int = 0, device: str = "cpu") -> None:
        self.shuffle, self.seed, self.device = shuffle, seed, device

    def permutation(self, n: int, epoch: int, rank: int, chunk: int) -> Any:
        key = [self.seed, epoch, rank, chunk]
        if self.device == "cuda":
            return backend.device_permutation(n, key, shuffle=self.shuffle)
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        return np.random.default_rng(key).permutation(n)


# --------------------------------------------------------------------------------------------
# Stage 5: the batcher
# --------------------------------------------------------------------------------------------
class Batcher:
    """Cuts the rank's stream of permuted chunks into batches.

    Batch ``k`` holds the stream's rows ``[start + k*batch_size, start + (k+1)*batch_size)``;
    a batch that straddles two chunks is completed from the next one (the tail is carried),
    so only the epoch's last batch can be short (and is dropped with ``drop_last``).
    Scalar columns are gathered into one column-major array per dtype, so every feature is a
    contiguous 1-D array.

    Example:
        >>> layout = ColumnLayout(("a",), (), {"int64": ("a",)}, {})
        >>> def chunk(i, rows):
        ...     spec = ChunkSpec(i, (Segment(i, 0, len(rows)),), 3 * i)
        ...     return Chunk(spec, {"int64": np.array(rows).reshape(-1, 1)}, {}, np.arange(len(rows)))
        >>> [f["a"].tolist() for f, _, _ in Batcher(layout, 2).batches([chunk(0, [1, 2, 3]), chunk(1, [4, 5, 6])], 0, 6)]
        [[1, 2], [3, 4], [5, 6]]
    """

    def __init__(self, layout: ColumnLayout, batch_size: int, drop_last: bool = False) -> None:
        self.layout, self.batch_size, self.drop_last = layout, batch_size, drop_last

    def batches(self, chunks: Iterable[Chunk], start: int, end: int) -> Iterator[tuple[dict, Any, int]]:
        """Yield ``(features, target, rows)`` for the stream rows ``[start, end)``."""
        bs = self.batch_size
        if self.drop_last:
            end = start + (end - start) // bs * bs
        pending: list[dict[str, Any]] = []
        pending_rows = 0
        position = start
        for chunk in chunks:
            lo = max(position, chunk.spec.row_start) - chunk.spec.row_start
            hi = min(end, chunk.spec.row_start + chunk.num_rows) - chunk.spec.row_start
            while lo < hi:
                take = min(hi - lo, bs - pending_rows)
                part = self._gather(chunk, chunk.perm[lo:lo + take])
                lo += take
                if take == bs:
                    yield self._emit(part, take)
                else:
                    pending.append(part)
                    pending_rows += take
                    if pending_rows == bs:
                        yield self._emit(_concat_parts(pending), bs)
                        pending, pending_rows = [], 0
            position = chunk.spec.row_start + hi
            if position >= end:
                break
        if pending_rows:
            yield self._emit(_concat_parts(pending), pending_rows)

    def _gather(self, chunk: Chunk, idx: Any) -> dict[str, Any]:
        part = {("g", d): _gather_columns(buf, idx) for d, buf in chunk.groups.items()}
        for name, (values, offsets) in chunk.lists.items():
            part[("l", name)] = _gather_lists(values, offsets, idx)
        return part

    def _emit(self, part: dict[str, Any], rows: int) -> tuple[dict, Any, int]:
        features: dict[str, Any] = {}
        for name in self.layout.features:
            if name in self.layout.lists:
                features[name] = part[("l", name)]
            else:
                dtype, j = self.layout.where(name)
                features[name] = part[("g", dtype)][j]
        target = None
        if self.layout.targets:
            cols = [part[("g", d)][j] for d, j in map(self.layout.where, self.layout.targets)]
            xp = backend.array_lib(cols[0])
            target = cols[0] if len(cols) == 1 else xp.stack(cols, axis=1)
        return features, target, rows


def _gather_columns(buf: Any, idx: Any) -> Any:
    """Rows ``idx`` of a row-major ``(rows, columns)`` buffer as a column-major array.

    On the CPU the rows are gathered ``_GATHER_ROWS`` at a time into a small row-major scratch
    (one contiguous read per row, stays in cache) and transposed into the output from there.
    """
    if backend.is_gpu_object(buf):
        return buf.take(idx, axis=0).T.copy()
    n, ncols = len(idx), buf.shape[1]
    out = backend.aligned_columns(ncols, n, buf.dtype)  # aligned columns: zero-copy into TF
    if ncols == 1:
        np.take(buf[:, 0], idx, out=out[0], mode="clip")
        return out
    scratch = np.empty((min(n, _GATHER_ROWS), ncols), dtype=buf.dtype)
    for s in range(0, n, _GATHER_ROWS):
        e = min(n, s + _GATHER_ROWS)
        tmp = scratch[:e - s]
        np.take(buf, idx[s:e], axis=0, out=tmp, mode="clip")
        out[:, s:e] = tmp.T
    return out


def _gather_lists(values: Any, offsets: Any, idx: Any) -> tuple[Any, Any]:
    """Rows ``idx`` of a list column, each row's list kept whole: (values, offsets)."""
    xp = backend.array_lib(values)
    starts = offsets[idx]
    lengths = offsets[idx + 1] - starts
    new_offsets = xp.zeros(len(idx) + 1, dtype=xp.int64)
    xp.cumsum(lengths, out=new_offsets[1:])
    total = int(new_offsets[-1])
    positions = xp.repeat(starts - new_offsets[:-1], lengths) + xp.arange(total, dtype=xp.int64)
    return values[positions], new_offsets


def _concat_parts(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    if len(parts) == 1:
        return parts[0]
    out: dict[str, Any] = {}
    for key in parts[0]:
        arrays = [p[key] for p in parts]
        if key[0] == "g":
            xp = backend.array_lib(arrays[0])
            out[key] = xp.concatenate(arrays, axis=1)
        else:
            xp = backend.array_lib(arrays[0][0])
            values = xp.concatenate([v for v, _ in arrays])
            shifts = np.cumsum([0] + [int(o[-1]) for _, o in arrays[:-1]])
            offsets = xp.concatenate([arrays[0][1][:1]] + [o[1:] + int(s) for (_, o), s in zip(arrays, shifts)])
            out[key] = (values, offsets)
    return out


# --------------------------------------------------------------------------------------------
# Stage 6: the prefetcher
# --------------------------------------------------------------------------------------------
class Prefetcher:
    """Runs ``produce(item)`` for each item on a background thread, ``depth`` results ahead.

    Results come back in order; an exception raised by ``produce`` is re-raised in the
    consumer when it reaches that item. A result's slot is only reused after the consumer asked
    for the following one, so at most ``depth + 1`` results exist at once. ``close()`` stops
    the thread.

    Example:
        >>> with Prefetcher(lambda x: x * x, [1, 2, 3]) as p:
        ...     list(p)
        [1, 4, 9]
    """

    _DONE = object()

    def __init__(self, produce: Callable[[Any], Any], items: Iterable[Any], depth: int = 1) -> None:
        self._produce, self._items = produce, iter(items)
        self._queue: queue.Queue = queue.Queue()
        self._permits = threading.Semaphore(depth + 1)
        self._stop = threading.Event()
        self._started = False
        self._thread = threading.Thread(target=self._run, name="tabloader-prefetch", daemon=True)

    def _run(self) -> None:
        try:
            for item in self._items:
                while not self._permits.acquire(timeout=0.1):
                    if self._stop.is_set():
                        return
                if self._stop.is_set():
                    return
                self._queue.put((True, self._produce(item)))
        except BaseException as exc:  # forwarded to the consumer
            self._queue.put((False, exc))
            return
        self._queue.put((True, self._DONE))

    def __iter__(self) -> Iterator[Any]:
        if not self._started:
            self._started = True
            self._thread.start()
        first = True
        while True:
            if not first:
                self._permits.release()  # the consumer is done with the previous result
            first = False
            ok, value = self._queue.get()
            if not ok:
                raise value
            if value is self._DONE:
                return
            yield value

    def close(self) -> None:
        self._stop.set()
        if self._started and self._thread.is_alive():
            self._thread.join()

    def __enter__(self) -> "Prefetcher":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --------------------------------------------------------------------------------------------
# The loader
# --------------------------------------------------------------------------------------------
class Loader:
    """Shuffled batches of a dataset as numpy (CPU) or CuPy (GPU) arrays, framework-free.

    Each ``iter(loader)`` runs one epoch and the next ``iter`` the following epoch. A batch is
    ``(features, target)``: ``features`` maps column name -> 1-D array (list columns: a
    ``(values, offsets)`` pair, ``offsets`` int64 of length rows + 1); ``target`` is a 1-D
    array for one target column, ``(rows, n_targets)`` for several, or None.

    Nulls: a null in an integer, boolean or list column raises a :class:`LoaderReadError`
    naming the column and the file; in a float column it is handed on as NaN (pandas' null).

    Args:
        dataset: a :class:`tabloader.Dataset` (possibly transformed by a workflow) or a path.
        batch_size: rows per batch (>= 1).
        shuffle: shuffle the partition order per epoch and the rows within each chunk.
        seed: seed of every shuffle; the epoch's order depends on ``(seed, epoch)``.
        device: ``"cpu"`` (numpy) or ``"cuda"`` (CuPy; decoded by cuDF when the dataset is a
            cuDF one, else by pyarrow and copied to the GPU once per chunk from pinned memory).
        categorical, continuous, target: column names overriding the schema's CATEGORICAL,
            CONTINUOUS and TARGET tags (``[]`` for none).
        drop_last: drop the last short batch (and, with several ranks, the rows that do not
            divide evenly among them).
        buffer_size: bytes of one chunk (``"256MB"`` or an int): rows are shuffled within a
            chunk. The loader holds at most two chunks (the one consumed and the one being
            prefetched), plus one decoded partition.
        parts_per_chunk: partitions per chunk instead of a byte budget.
        global_rank, global_size: data-parallel sharding (torch.distributed conventions). Ranks
            get disjoint rows and the same number of batches; rows that do not divide evenly are
            padded by repeating rows from the start of the epoch (as DistributedSampler does).
        prefetch: build the next chunk on a background thread.

    Every row is yielded exactly once per epoch (single rank; with several ranks, exactly once
    over the rank set apart from the at most ``global_size - 1`` padded rows).

    Example:
        >>> import numpy as np, pandas as pd, tabloader as tl
        >>> ds = tl.Dataset(pd.DataFrame({"a": np.arange(6), "y": np.zeros(6, "float32")}))
        >>> loader = tl.Loader(ds, batch_size=4, categorical=["a"], target="y", seed=1)
        >>> len(loader), [f["a"].shape for f, _ in loader]
        (2, [(4,), (2,)])
    """

    def __init__(self, dataset: Any, batch_size: int, shuffle: bool = True, seed: int = 0, device: str = "cpu",
                 categorical: Sequence[str] | str | None = None, continuous: Sequence[str] | str | None = None,
                 target: Sequence[str] | str | None = None, drop_last: bool = False,
                 buffer_size: int | str = "256MB", parts_per_chunk: int | None = None,
                 global_rank: int | None = None, global_size: int | None = None, prefetch: bool = True) -> None:
        if isinstance(dataset, str):
            from tabloader.dataset import Dataset

            dataset = Dataset(dataset)
        if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle, self.seed, self.drop_last, self.prefetch = bool(shuffle), int(seed), bool(drop_last), prefetch
        self.device = backend.resolve_device(device)
        self.global_rank = int(global_rank or 0)
        self.global_size = int(global_size or 1)
        self.layout = ColumnLayout.from_schema(dataset.schema, categorical, continuous, target)
        self.gpu_frames = self.device == "cuda" and getattr(dataset, "device", "cpu") == "cuda"
        floats = [c for d, names in self.layout.groups.items() if np.dtype(d).kind == "f" for c in names]
        self.reader = PartitionReader(dataset, self.layout.columns, gpu_frames=self.gpu_frames, nan_columns=floats)
        self.buffer_bytes = _parse_bytes(buffer_size)
        self.parts_per_chunk = parts_per_chunk
        sizes = dataset.partition_sizes()
        if sizes is None:  # a transform may drop rows: count them once by reading
            sizes = [self.reader.count(i) for i in range(dataset.npartitions)]
        rows_per_chunk = None
        if parts_per_chunk is None:
            rows_per_chunk = max(1, int(self.buffer_bytes // self.layout.row_bytes(self._list_lengths(sizes))))
        self.plan = PartitionPlan(sizes, self.shuffle, self.seed, self.global_rank, self.global_size,
                                  self.drop_last, rows_per_chunk, parts_per_chunk)
        self.shuffler = Shuffler(self.shuffle, self.seed, self.device)
        self.batcher = Batcher(self.layout, self.batch_size, self.drop_last)
        self._buffer: ChunkBuffer | None = None
        self._epoch, self._start_row = 0, 0
        self._current: list[int] | None = None  # [epoch, rows yielded] of the running epoch
        self._active: Any = None

    # --- sizes ------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Batches per epoch (the same on every rank)."""
        return self.plan.num_batches(self.batch_size)

    @property
    def rows_per_epoch(self) -> int:
        """Rows this rank yields per epoch."""
        rows = self.plan.rows_per_rank
        return rows // self.batch_size * self.batch_size if self.drop_last else rows

    def _list_lengths(self, sizes: Sequence[int]) -> dict[str, float]:
        if not self.layout.lists:
            return {}
        first = next((i for i, s in enumerate(sizes) if s), None)
        if first is None:
            return {}
        table = self.reader.read(first)
        if backend.is_gpu_object(table):
            return {n: float(table[n].list.len().mean()) for n in self.layout.lists}
        return {n: len(_arrow_list_to_numpy(table.column(n))[0]) / max(1, len(table)) for n in self.layout.lists}

    # --- iteration --------------------------------------------------------------------------
    def __iter__(self) -> Iterator[tuple[dict[str, Any], Any]]:
        self.close()
        epoch, start = self._epoch, self._start_row
        self._epoch, self._start_row = epoch + 1, 0
        self._current = [epoch, start]
        generator = self._run(epoch, start)
        self._active = generator
        return generator

    def _run(self, epoch: int, start: int) -> Iterator[tuple[dict[str, Any], Any]]:
        specs = [s for s in self.plan.chunks(epoch) if s.row_start + s.num_rows > start]
        buffer = self._chunk_buffer(max((s.num_rows for s in self.plan.chunks(epoch)), default=1))
        reads = self.reader.read_ahead([seg.partition for spec in specs for seg in spec.segments],
                                       ahead=1 if self.prefetch else 0)
        build = lambda spec: self._build(buffer, reads, spec, epoch)  # noqa: E731
        source = Prefetcher(build, specs, depth=1) if self.prefetch else map(build, specs)
        try:
            for features, target, rows in self.batcher.batches(source, start, self.plan.rows_per_rank):
                self._current[1] += rows
                yield features, target
            self._current = None  # finished: state_dict() points at the next epoch
        finally:
            if isinstance(source, Prefetcher):
                source.close()
            reads.close()

    def _chunk_buffer(self, max_rows: int) -> ChunkBuffer:
        slots = 2 if self.prefetch else 1
        if self._buffer is None or self._buffer.max_rows < max_rows or self._buffer.slots != slots:
            self._buffer = ChunkBuffer(self.layout, max_rows, self.device, slots=slots)
        return self._buffer

    def _build(self, buffer: ChunkBuffer, reads: "ReadAhead", spec: ChunkSpec, epoch: int) -> Chunk:
        tables = [reads.get(seg.partition) for seg in spec.segments]
        chunk = buffer.fill(spec, tables)
        chunk.perm = self.shuffler.permutation(spec.num_rows, epoch, self.global_rank, spec.index)
        return chunk

    @property
    def epoch(self) -> int:
        """The epoch the running (or next) iteration covers."""
        return self._current[0] if self._current is not None else self._epoch

    # --- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where the loader stands: epoch, rows and batches of it already yielded, and the
        settings the position depends on. Load it into a new loader to resume mid-epoch."""
        epoch, rows = self._current if self._current is not None else (self._epoch, self._start_row)
        return {"epoch": int(epoch), "rows": int(rows), "batches": -(-int(rows) // self.batch_size),
                "seed": self.seed, "shuffle": self.shuffle, "batch_size": self.batch_size,
                "global_rank": self.global_rank, "global_size": self.global_size, "drop_last": self.drop_last,
                "rows_per_chunk": self.plan.rows_per_chunk, "parts_per_chunk": self.plan.parts_per_chunk,
                "partition_sizes": [int(s) for s in self.plan.sizes]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: the next ``iter`` yields exactly the rows not yet yielded
        in that epoch (chunks already consumed are skipped without being read)."""
        keys = ("shuffle", "global_rank", "global_size", "drop_last", "rows_per_chunk", "parts_per_chunk")
        differ = [f"{k}={state[k]!r} (this loader: {v!r})" for k in keys
                  if k in state and state[k] != (v := self.state_dict()[k])]
        if "partition_sizes" in state and list(state["partition_sizes"]) != [int(s) for s in self.plan.sizes]:
            differ.append("partition_sizes (the dataset changed)")
        if differ:
            raise ValueError("cannot resume: the state was saved by a loader with " + "; ".join(differ))
        self.close()
        self.seed = int(state.get("seed", self.seed))
        self.plan.seed = self.shuffler.seed = self.seed
        self._epoch, self._start_row = int(state["epoch"]), int(state["rows"])
        self._current = None

    # --- closing ------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop a running epoch (and its prefetch thread). The loader stays usable."""
        active, self._active = self._active, None
        if active is not None:
            active.close()
        self.reader._cache = None

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return (f"Loader(batch_size={self.batch_size}, batches={len(self)}, shuffle={self.shuffle}, "
                f"seed={self.seed}, device={self.device!r}, rank={self.global_rank}/{self.global_size}, "
                f"features={list(self.layout.features)}, target={list(self.layout.targets)})")


def _parse_bytes(size: int | str) -> int:
    from dask.utils import parse_bytes

    try:
        value = int(size) if isinstance(size, (int, np.integer)) else parse_bytes(size)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"buffer_size={size!r} is not a size such as '512MB' ({exc})") from None
    if value <= 0:
        raise ValueError(f"buffer_size must be positive, got {size!r}")
    return value
