"""Stage 3 of the loader, the chunk buffer: packs a chunk's rows into reusable buffers on the device.

:class:`ChunkBuffer` writes the rows of a chunk's segments into one 2-D array per dtype (plus
``(values, offsets)`` for list columns): row-major on the host, so that a shuffled row gather
touches one contiguous span per row instead of one cache line per value; column-major on a GPU
(``backend.column_major_chunks``), where the whole chunk is gathered at once and each column
is copied from arrow into pinned memory contiguously. Its buffers are preallocated and
reused in turn, so the loader's memory is bounded by the chunk size whatever the dataset size.
There is one fill path for every device: rows decoded on the host (pyarrow) are packed in host
staging -- the buffers themselves on the CPU; on a GPU pinned memory (allocated on first use),
copied to the GPU partition by partition while the next one is packed -- rows decoded on the
device (cuDF) straight into the buffers, and resident rows
(:class:`PackedRows`, already packed on the device) are copied there. :class:`Chunk` is the
packed result the shuffler and the batcher work on.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from tabloader import backend, columnar
from tabloader.loader import host_threads
from tabloader.loader.layout import ColumnLayout
from tabloader.loader.plan import ChunkSpec, Segment

_PACK_ROWS = 4096  # rows per cache-sized block when packing a chunk on the CPU
_PARALLEL_BYTES = 1 << 20  # below this a column copy is not worth a thread hand-off


@dataclasses.dataclass
class Chunk:
    """A chunk's rows on the device: ``groups`` dtype -> (rows, columns) array (a view of the
    chunk buffer), list columns as (values, offsets), ``perm``: the rows of ``groups`` in the
    order the batcher reads them, and, where chunks are column-major (a GPU), ``shuffled`` dtype ->
    (columns, rows) array of the rows already in that order (arrays of their own, not the
    buffer's: the batcher hands out views of them). A chunk gathered in place from resident
    rows has ``rows``: the rows of ``groups`` (the resident store) holding its rows, in order."""

    spec: ChunkSpec
    groups: dict[str, Any]
    lists: dict[str, tuple[Any, Any]]
    perm: Any = None
    rows: Any = None
    shuffled: dict[str, Any] | None = None
    ready: Any = None  # on a GPU, the mark of the work that built it (backend.work_queued), for the consumer

    @property
    def num_rows(self) -> int:
        return self.spec.num_rows


@dataclasses.dataclass
class PackedRows:
    """All rows of a partition packed as in a chunk, in arrays of their own on the device:
    ``groups`` dtype -> (rows, columns), ``lists`` name -> (values, offsets)."""

    groups: dict[str, Any]
    lists: dict[str, tuple[Any, Any]]

    @property
    def nbytes(self) -> int:
        arrays = [*self.groups.values(), *(a for pair in self.lists.values() for a in pair)]
        return sum(int(a.nbytes) for a in arrays)


class HostStaging(dict):
    """dtype -> the host staging (:func:`tabloader.backend.host_staging`) of ``buffers[dtype]``,
    allocated when first asked for: rows decoded on the device (cuDF) are packed straight into
    the buffers and never need it, and pinned memory takes long to allocate (the driver locks
    every page).

    Example:
        >>> import numpy as np
        >>> buffers = {"int64": np.zeros((2, 1), "int64")}
        >>> staging = HostStaging(buffers)
        >>> len(staging), staging["int64"] is buffers["int64"], len(staging)
        (0, True, 1)
    """

    def __init__(self, buffers: dict[str, Any], pooled: bool = True) -> None:
        super().__init__()
        self._buffers, self._pooled = buffers, pooled

    def __missing__(self, dtype: str) -> Any:
        self[dtype] = staging = backend.host_staging(self._buffers[dtype], pooled=self._pooled)
        return staging


class ChunkBuffer:
    """Packs the rows of a chunk into reusable buffers on the device.

    Same-dtype scalar columns share one ``(rows, columns)`` array: row-major on the host, so a
    shuffled gather reads one contiguous span per row instead of one cache line per value;
    on a GPU the transposed view of a column-major ``(columns, rows)`` array, each column one
    contiguous copy from the host. ``slots`` buffers are kept
    and reused in turn (two when prefetching: the chunk being consumed and the next one), so
    memory stays at ``slots x rows_per_chunk`` rows whatever the dataset size. On the GPU,
    rows decoded by pyarrow are packed in pinned host memory, each partition's rows copied
    while the next partition's are packed.

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
        self.xp = backend.array_lib(device)
        self.column_major = backend.column_major_chunks(device)
        self._slots: list[tuple[dict[str, Any], dict[str, Any]] | None] = [None] * slots
        self._next = 0
        self.max_rows_filled = 0  # the largest chunk packed so far (memory accounting)

    def _empty(self, rows: int) -> dict[str, Any]:
        """New ``(rows, columns)`` buffers per dtype (views of ``(columns, rows)`` ones where
        chunks are column-major)."""
        if self.column_major:
            return {d: self.xp.empty((len(names), rows), dtype=np.dtype(d)).T for d, names in self.layout.groups.items()}
        return {d: self.xp.empty((rows, len(names)), dtype=np.dtype(d)) for d, names in self.layout.groups.items()}

    def _slot(self, index: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """The buffers of slot ``index`` on the device and their host staging (allocated once)."""
        if self._slots[index] is None:
            buffers = self._empty(self.max_rows)
            self._slots[index] = (buffers, HostStaging(buffers))
        return self._slots[index]

    def fill(self, spec: ChunkSpec, sources: Iterable[Any]) -> Chunk:
        """Pack ``spec``'s segments; ``sources`` yields the rows of each of ``spec.segments`` in
        turn: its decoded partition (a pyarrow Table, or a frame on the device) or its
        :class:`PackedRows`. They are taken one at a time, so that a decoded partition can be freed
        once its rows are packed, before the next one is decoded: a chunk spanning many partitions
        never holds them all."""
        if spec.num_rows > self.max_rows:
            raise ValueError(f"chunk of {spec.num_rows} rows exceeds the buffer of {self.max_rows} rows")
        slot = self._next
        self._next = (self._next + 1) % self.slots
        self.max_rows_filled = max(self.max_rows_filled, spec.num_rows)
        buffers, staging = self._slot(slot)
        lists = self._pack(spec.segments, sources, buffers, staging)
        return Chunk(spec, {d: b[:spec.num_rows] for d, b in buffers.items()}, lists)

    def empty_rows(self, rows: int) -> dict[str, Any]:
        """New arrays of ``rows`` rows per dtype, laid out as the chunk buffers are."""
        return self._empty(rows)

    def pack_partition(self, table: Any, into: dict[str, Any] | None = None) -> PackedRows:
        """Every row of a decoded partition packed into new arrays on the device, or into
        ``into`` (dtype -> array of as many rows). Its host staging is used once (partitions
        differ in size): not pooled, so that it is not kept."""
        rows = table.num_rows if hasattr(table, "num_rows") else len(table)
        buffers = self._empty(rows) if into is None else into
        lists = self._pack([Segment(-1, 0, rows)], [table], buffers, HostStaging(buffers, pooled=False))
        return PackedRows(buffers, lists)

    def _pack(self, segments: Sequence[Segment], sources: Iterable[Any], buffers: dict[str, Any],
              staging: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
        """Write the segments' rows one after the other into ``buffers``; return the list
        columns as (values, offsets) on the device. Rows packed in host staging are copied to
        the device as soon as their segment is packed, so that the copy overlaps packing the
        next segment; all copies are waited for before returning."""
        row, copies = 0, None  # copies: the stream of the copies to the device, waited for at the end
        lists: dict[str, list[tuple[Any, Any]]] = {name: [] for name in self.layout.lists}
        try:
            for seg, source in zip(segments, sources):
                stop = row + seg.num_rows
                if isinstance(source, PackedRows):  # resident: a copy on the device
                    for dtype, buf in buffers.items():
                        buf[row:stop] = source.groups[dtype][seg.start:seg.stop]
                    for name, parts in lists.items():
                        parts.append(_slice_lists(*source.lists[name], seg.start, seg.stop))
                else:
                    decoded_on_host = backend.on_host(source)
                    _pack_table(self.layout, source, seg, staging if decoded_on_host else buffers, row)
                    if decoded_on_host:
                        copies = backend.copy_rows(buffers, staging, [(row, stop)], wait=False)
                    for name, parts in lists.items():
                        parts.append(_list_rows(source, seg, name))
                row = stop
                del source  # not held while the next source is produced (and the one after it decoded)
        finally:  # on an error too: the staging must not be refilled or freed while a copy reads it
            if copies is not None:
                copies.synchronize()
        xp = self.xp
        return {name: concat_lists([(xp.asarray(v), xp.asarray(o)) for v, o in parts], self.layout.lists[name], xp)
                for name, parts in lists.items()}


def _pack_table(layout: ColumnLayout, table: Any, seg: Segment, target: dict[str, Any], row: int) -> None:
    """Write the rows of ``seg`` of a decoded partition into ``target[dtype][row:]``."""
    for rows, column in _pieces(table, seg):
        for dtype, names in layout.groups.items():
            _pack_rows(target[dtype], row, [column(c, dtype) for c in names])
        row += rows


def _pieces(table: Any, seg: Segment) -> Iterator[tuple[int, Any]]:
    """``(rows, column)`` pieces of the rows of ``seg``: ``column(name, dtype)`` is that piece
    of a column as an array of the table's device (of ``dtype`` or one that copies into it;
    nulls of a float column as NaN). A pyarrow Table gives one piece per record batch (numpy,
    zero-copy without nulls; booleans copy), a frame (cuDF) one piece: each column's values as
    a whole (zero-copy without nulls), then sliced as an array. Slicing the frame itself would
    make libcudf count the nulls of every slice of a column with a validity mask (parquet's
    optional columns have one, null or not): a wait for the device per column.
    """
    if _is_arrow(table):
        for batch in table.slice(seg.start, seg.num_rows).to_batches():
            yield batch.num_rows, lambda name, dtype, b=batch: b.column(name).to_numpy(zero_copy_only=False)
    else:
        yield seg.num_rows, lambda name, dtype: _frame_values(table[name], dtype)[seg.start:seg.stop]


def _frame_values(column: Any, dtype: str) -> Any:
    """A frame column's values for a buffer of ``dtype``: float columns with their nulls as NaN
    (the seam replaces them without counting the NaN, a wait on a GPU), others as they are (the
    reader refused their nulls)."""
    return backend.column_values(column, dtype if np.dtype(dtype).kind == "f" else None)


def _is_arrow(table: Any) -> bool:
    """True for a pyarrow Table (decoded on the host); False for a frame (decoded on the device)."""
    return hasattr(table, "to_batches")


def _pack_rows(buf: Any, row: int, columns: Sequence[Any]) -> None:
    """Write ``columns`` into ``buf[row:row+n, :]``: a whole column at a time on a GPU or into
    column-major staging, else block by block (on the CPU, row-major blocks stay in cache)."""
    n = len(columns[0]) if columns else 0
    block = backend.block_rows(buf, n, _PACK_ROWS)
    if block >= n:
        _copy_columns(buf[row:row + n], columns)
        return
    for s in range(0, n, block):
        e = min(n, s + block)
        dst = buf[row + s:row + e]
        for j, col in enumerate(columns):
            dst[:, j] = col[s:e]


def _copy_columns(dst: Any, columns: Sequence[Any]) -> None:
    """``dst[:, j] = columns[j]`` for every column: into host memory on a few threads (numpy
    releases the GIL while it copies, and one thread copies far slower than the memory bus
    moves: the pinned staging of a GPU chunk is filled at memory speed), on a GPU one copy
    kernel each."""
    if backend.on_host(dst) and len(columns) > 1 and dst.nbytes >= _PARALLEL_BYTES * len(columns):
        host_threads.run_all([lambda j=j: dst[:, j].__setitem__(slice(None), columns[j]) for j in range(len(columns))])
        return
    for j, col in enumerate(columns):
        dst[:, j] = col


def _list_rows(table: Any, seg: Segment, name: str) -> tuple[Any, Any]:
    """(values, offsets from 0) of the rows of ``seg`` of a decoded partition's list column:
    numpy arrays for a table decoded on the host, CuPy arrays for a cuDF frame (its elements and
    offsets stay on the device, not sent through arrow on the host and back)."""
    if _is_arrow(table):
        return _arrow_list_to_numpy(table.column(name).slice(seg.start, seg.num_rows))
    column = table[name].iloc[seg.start:seg.stop]
    if backend.is_gpu_object(column):
        layout = columnar.list_layout(column)  # the loader refused null lists and elements when reading
        return backend.column_values(layout.values), layout.offsets
    return _arrow_list_to_numpy(backend.list_column_to_arrow(column))


def _slice_lists(values: Any, offsets: Any, start: int, stop: int) -> tuple[Any, Any]:
    """Rows ``[start, stop)`` of a packed list column, offsets from 0."""
    first, last = int(offsets[start]), int(offsets[stop])
    return values[first:last], offsets[start:stop + 1] - first


def _arrow_list_to_numpy(array: Any) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets starting at 0) of an arrow list array (or chunked array)."""
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        parts = [_arrow_list_to_numpy(c) for c in array.chunks]
        return concat_lists(parts, None) if parts else (np.empty(0), np.zeros(1, np.int64))
    offsets = array.offsets.to_numpy().astype(np.int64)
    values = array.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    return values.to_numpy(zero_copy_only=False), offsets - offsets[0]


def concat_lists(parts: Sequence[tuple[Any, Any]], dtype: str | None, xp: Any = np) -> tuple[Any, Any]:
    """One (values, offsets) of list rows given as (values, offsets from 0 to ``len(values)``)
    parts, all in ``xp``. Each part's offsets are shifted by the lengths of the values before
    it, which are shapes (host ints): nothing is read back from a GPU."""
    if not parts:
        return xp.empty(0, dtype or np.int64), xp.zeros(1, np.int64)
    values = xp.concatenate([v for v, _ in parts])
    if dtype is not None:
        values = values.astype(dtype, copy=False)
    shifts = np.cumsum([0] + [len(v) for v, _ in parts[:-1]])
    offsets = xp.concatenate([parts[0][1][:1]] + [o[1:] + int(s) for (_, o), s in zip(parts, shifts)])
    return values, offsets.astype(np.int64, copy=False)
