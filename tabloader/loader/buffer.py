"""Stage 3 of the loader, the chunk buffer: packs a chunk's rows into reusable buffers on the device.

:class:`ChunkBuffer` writes the rows of a chunk's segments into one 2-D row-major array per
dtype (plus ``(values, offsets)`` for list columns), so that a shuffled row gather touches one
contiguous span per row instead of one cache line per value. Its buffers are preallocated and
reused in turn, so the loader's memory is bounded by the chunk size whatever the dataset size;
on the GPU without cuDF rows are packed in pinned host memory and copied once per chunk.
:class:`Chunk` is the packed result the shuffler and the batcher work on.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from tabloader import backend
from tabloader.loader.layout import ColumnLayout
from tabloader.loader.plan import ChunkSpec

_PACK_ROWS = 4096  # rows per cache-sized block when packing a chunk on the CPU


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
        >>> from tabloader.loader import Segment
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
