"""Stage 5 of the loader, the batcher: cuts the stream of permuted chunks into batches.

:class:`Batcher` gathers each batch's rows in the chunk's permuted order and carries the tail
of a chunk into the next one, so every batch but the epoch's last is full whatever the chunk
size. Scalar columns are gathered into one column-major array per dtype (on the CPU in
cache-sized blocks), allocated once per batch -- a batch spanning two chunks is gathered into
place, not concatenated -- so that every feature comes out as a contiguous, aligned 1-D array
the framework adapters can take without a copy.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator

from tabloader import backend
from tabloader.loader.buffer import Chunk, concat_lists
from tabloader.loader.layout import ColumnLayout
from tabloader.loader.lists import pad_lists

_GATHER_ROWS = 1024  # rows per cache-sized block when gathering a batch on the CPU


class Batcher:
    """Cuts the rank's stream of permuted chunks into batches.

    Batch ``k`` holds the stream's rows ``[start + k*batch_size, start + (k+1)*batch_size)``;
    a batch that straddles two chunks is completed from the next one (the tail is carried),
    so only the epoch's last batch can be short (and is dropped with ``drop_last``).
    Scalar columns are gathered into one column-major array per dtype, so every feature is a
    contiguous 1-D array.

    Example:
        >>> import numpy as np
        >>> from tabloader.loader import ChunkSpec, Segment
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
        batch: _Batch | None = None
        position = start
        for chunk in chunks:
            lo = max(position, chunk.spec.row_start) - chunk.spec.row_start
            hi = min(end, chunk.spec.row_start + chunk.num_rows) - chunk.spec.row_start
            while lo < hi:
                if batch is None:
                    batch = self._empty_batch(chunk, min(bs, end - chunk.spec.row_start - lo))
                take = min(hi - lo, batch.rows - batch.filled)
                self._gather(chunk, chunk.perm[lo:lo + take], batch)
                lo += take
                if batch.filled == batch.rows:
                    yield self._emit(batch)
                    batch = None
            position = chunk.spec.row_start + hi
            if position >= end:
                break

    def _empty_batch(self, chunk: Chunk, rows: int) -> "_Batch":
        """A batch of ``rows`` rows to gather into, on the device of ``chunk``: one column-major
        array per dtype, whose every column is aligned (so that a batch spanning two chunks is
        gathered into place instead of concatenated afterwards)."""
        groups = {d: backend.empty_columns(buf.shape[1], rows, buf.dtype, like=buf) for d, buf in chunk.groups.items()}
        return _Batch(rows, groups, {name: [] for name in chunk.lists})

    def _gather(self, chunk: Chunk, idx: Any, batch: "_Batch") -> None:
        """Gather the chunk rows ``idx`` into the next ``len(idx)`` rows of ``batch``."""
        stop = batch.filled + len(idx)
        for d, buf in chunk.groups.items():
            _gather_columns(buf, idx, batch.groups[d][:, batch.filled:stop])
        for name, (values, offsets) in chunk.lists.items():
            batch.lists[name].append(_gather_lists(values, offsets, idx))
        batch.filled = stop

    def _emit(self, batch: "_Batch") -> tuple[dict, Any, int]:
        lists = {name: parts[0] if len(parts) == 1 else concat_lists(parts, None, backend.array_lib(parts[0][0]))
                 for name, parts in batch.lists.items()}
        features: dict[str, Any] = {}
        for name in self.layout.features:
            if name in self.layout.padded:
                features[name] = pad_lists(*lists[name], self.layout.padded[name])
            elif name in self.layout.lists:
                features[name] = lists[name]
            else:
                dtype, j = self.layout.where(name)
                features[name] = batch.groups[dtype][j]
        target = None
        if self.layout.targets:
            cols = [batch.groups[d][j] for d, j in map(self.layout.where, self.layout.targets)]
            xp = backend.array_lib(cols[0])
            target = cols[0] if len(cols) == 1 else xp.stack(cols, axis=1)
        return features, target, batch.rows


@dataclasses.dataclass
class _Batch:
    """A batch being gathered: ``groups`` dtype -> (columns, rows) array, filled up to row
    ``filled``; ``lists`` name -> the (values, offsets) parts gathered so far."""

    rows: int
    groups: dict[str, Any]
    lists: dict[str, list[tuple[Any, Any]]]
    filled: int = 0


def _gather_columns(buf: Any, idx: Any, out: Any) -> None:
    """Write rows ``idx`` of a row-major ``(rows, columns)`` buffer into the column-major
    ``(columns, len(idx))`` array ``out``.

    The rows are gathered a block at a time into a row-major scratch (one contiguous read per
    row; on the CPU ``_GATHER_ROWS`` rows, so that it stays in cache, on a GPU all of them at
    once) and transposed into ``out`` from there.
    """
    n, ncols = len(idx), buf.shape[1]
    if ncols == 1:
        backend.take_rows(buf[:, 0], idx, out[0])
        return
    block = backend.block_rows(buf, n, _GATHER_ROWS)
    scratch = backend.array_lib(buf).empty((block, ncols), dtype=buf.dtype)
    for s in range(0, n, block):
        e = min(n, s + block)
        tmp = scratch[:e - s]
        backend.take_rows(buf, idx[s:e], tmp)
        out[:, s:e] = tmp.T


def _gather_lists(values: Any, offsets: Any, idx: Any) -> tuple[Any, Any]:
    """Rows ``idx`` of a list column, each row's list kept whole: (values, offsets)."""
    xp = backend.array_lib(values)
    starts = offsets[idx]
    lengths = offsets[idx + 1] - starts
    new_offsets = xp.zeros(len(idx) + 1, dtype=xp.int64)
    xp.cumsum(lengths, out=new_offsets[1:])
    total = int(new_offsets[-1])
    positions = backend.repeat(starts - new_offsets[:-1], lengths, total) + xp.arange(total, dtype=xp.int64)
    return values[positions], new_offsets
