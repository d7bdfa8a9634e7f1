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
from typing import Any, Callable, Iterable, Iterator, Sequence

from tabloader import backend
from tabloader.loader import host_threads
from tabloader.loader.buffer import Chunk, concat_lists
from tabloader.loader.layout import ColumnLayout
from tabloader.loader.lists import pad_lists

_GATHER_ROWS = 1024  # rows per cache-sized block when gathering a batch on the CPU
_GATHER_ROWS_PER_THREAD = 16384  # smaller shares lost more to the hand-off than they gained (batch 4096: 8.2M -> 5.9M rows/s)


class Batcher:
    """Cuts the rank's stream of permuted chunks into batches.

    Batch ``k`` holds the stream's rows ``[start + k*batch_size, start + (k+1)*batch_size)``;
    a batch that straddles two chunks is completed from the next one (the tail is carried),
    so only the epoch's last batch can be short (and is dropped with ``drop_last``).
    Scalar columns are gathered into one column-major array per dtype, so every feature is a
    contiguous 1-D array. ``same_lengths`` names pairs of list columns whose lists must have the
    same length in every row (values and their weights): checked once per chunk, a ValueError
    naming both columns otherwise.

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

    def __init__(self, layout: ColumnLayout, batch_size: int, drop_last: bool = False,
                 same_lengths: Sequence[tuple[str, str]] = ()) -> None:
        self.layout, self.batch_size, self.drop_last = layout, batch_size, drop_last
        self.same_lengths = tuple(same_lengths)
        # feature -> (dtype group, index in it), or (None, None) for a list column: looked up
        # once here, so that building a batch is one dict comprehension
        self._places = [(name, *((None, None) if name in layout.lists else layout.where(name)))
                        for name in layout.features]
        self._feature_groups = {d for _, d, _ in self._places if d is not None}

    def batches(self, chunks: Iterable[Chunk], start: int, end: int,
                convert: Callable[[Any], Any] | None = None) -> Iterator[tuple[dict, Any, int]]:
        """Yield ``(features, target, rows)`` for the stream rows ``[start, end)``.

        ``convert`` (array -> array, e.g. ``torch.from_dlpack``) is applied to every array of a
        batch before the features are taken out: once to each dtype's ``(columns, rows)``
        array, which is then split into its columns (by ``unbind(0)`` where the converted array
        has it, else by iterating it), and to each list array and the target. A batch thus costs
        one conversion per dtype rather than one per column -- and a batch that is a view of a
        shuffled chunk (a GPU) none: the chunk's arrays are converted once and sliced after.
        """
        bs = self.batch_size
        if self.drop_last:
            end = start + (end - start) // bs * bs
        batch: _Batch | None = None
        position = start
        for chunk in chunks:
            lo = max(position, chunk.spec.row_start) - chunk.spec.row_start
            hi = min(end, chunk.spec.row_start + chunk.num_rows) - chunk.spec.row_start
            if lo < hi:
                cuts = _cuts(chunk.spec.row_start - start, lo, hi, bs)
                sizes = _ListSizes.of(chunk, cuts, self.layout.padded, self.same_lengths)
                converted = _converted(chunk.shuffled, convert)
                for a, b in zip(cuts, cuts[1:]):
                    if batch is None:
                        rows = min(bs, end - chunk.spec.row_start - a)
                        batch = (self._view_batch(chunk, converted, a, b) if b - a == rows
                                 else self._empty_batch(chunk, rows))
                    self._gather(chunk, a, b, sizes, batch)
                    if batch.filled == batch.rows:
                        yield self._emit(batch, convert)
                        batch = None
            position = chunk.spec.row_start + hi
            if position >= end:
                break

    def _view_batch(self, chunk: Chunk, converted: dict[str, Any] | None, a: int, b: int) -> "_Batch":
        """A batch of the chunk rows ``perm[a:b]`` alone: views of the chunk's shuffled columns
        (and of their ``converted`` forms) where it has them, nothing left to gather; else a
        new batch to gather into."""
        if chunk.shuffled is None:
            return self._empty_batch(chunk, b - a)
        views = {d: columns[:, a:b] for d, columns in chunk.shuffled.items()}
        batch = _Batch(b - a, views, {name: [] for name in chunk.lists}, {}, gathered=True)
        if converted is not None:
            batch.converted = {d: columns[:, a:b] for d, columns in converted.items()}
        return batch

    def _empty_batch(self, chunk: Chunk, rows: int) -> "_Batch":
        """A batch of ``rows`` rows to gather into, on the device of ``chunk``: one column-major
        array per dtype, whose every column is aligned (so that a batch spanning two chunks is
        gathered into place instead of concatenated afterwards)."""
        groups = {d: backend.empty_columns(buf.shape[1], rows, buf.dtype, like=buf) for d, buf in chunk.groups.items()}
        return _Batch(rows, groups, {name: [] for name in chunk.lists}, {})

    def _gather(self, chunk: Chunk, a: int, b: int, sizes: "_ListSizes", batch: "_Batch") -> None:
        """Gather the rows ``chunk.perm[a:b]`` into the next ``b - a`` rows of ``batch``."""
        stop = batch.filled + b - a
        if not batch.gathered:
            for d, buf in chunk.groups.items():
                out = batch.groups[d][:, batch.filled:stop]
                if chunk.shuffled is not None:  # already in order: a copy
                    out[...] = chunk.shuffled[d][:, a:b]
                else:
                    _gather_columns(buf, chunk.perm[a:b], out)
        for name, (values, _) in chunk.lists.items():
            batch.lists[name].append(_gather_lists(values, *sizes.rows(name, a, b)))
            if name in sizes.kept:
                batch.kept[name] = batch.kept.get(name, 0) + sizes.kept[name][b] - sizes.kept[name][a]
        batch.filled = stop

    def _emit(self, batch: "_Batch", convert: Callable[[Any], Any] | None) -> tuple[dict, Any, int]:
        convert = convert or _unchanged
        lists: dict[str, Any] = {}
        for name, parts in batch.lists.items():
            values, offsets = parts[0] if len(parts) == 1 else concat_lists(parts, None,
                                                                           backend.array_lib(parts[0][0]))
            if name in self.layout.padded:
                lists[name] = convert(pad_lists(values, offsets, self.layout.padded[name], kept=batch.kept[name]))
            else:
                lists[name] = (convert(values), convert(offsets))
        done = batch.converted
        columns = {d: _split(done[d] if d in done else convert(batch.groups[d])) for d in self._feature_groups}
        features = {name: lists[name] if d is None else columns[d][j] for name, d, j in self._places}
        target = None
        if len(self.layout.targets) == 1:
            d, j = self.layout.where(self.layout.targets[0])
            target = done[d][j] if d in done else convert(batch.groups[d][j])
        elif self.layout.targets:
            cols = [batch.groups[d][j] for d, j in map(self.layout.where, self.layout.targets)]
            target = convert(backend.array_lib(cols[0]).stack(cols, axis=1))
        return features, target, batch.rows


def _unchanged(array: Any) -> Any:
    return array


def _converted(shuffled: dict[str, Any] | None, convert: Callable[[Any], Any] | None) -> dict[str, Any] | None:
    """A shuffled chunk's arrays converted once (None without either): its batches are sliced
    from them, so that a batch costs no conversion (a CuPy -> torch DLPack import took ~12 us on
    an H100, with a stream handshake each time)."""
    if shuffled is None or convert is None:
        return None
    return {d: convert(columns) for d, columns in shuffled.items()}


def _split(columns: Any) -> Sequence[Any]:
    """The rows of a ``(columns, rows)`` array (the batch's columns) as 1-D views: one call for
    a torch tensor (``unbind``), numpy's and CuPy's iteration otherwise."""
    return columns.unbind(0) if hasattr(columns, "unbind") else list(columns)


@dataclasses.dataclass
class _Batch:
    """A batch being gathered: ``groups`` dtype -> (columns, rows) array, filled up to row
    ``filled``; ``lists`` name -> the (values, offsets) parts gathered so far; ``kept`` padded
    list column -> how many of its values the padding keeps (a host int)."""

    rows: int
    groups: dict[str, Any]
    lists: dict[str, list[tuple[Any, Any]]]
    kept: dict[str, int]
    gathered: bool = False  # ``groups`` are views of a shuffled chunk: only list columns to gather
    converted: dict[str, Any] = dataclasses.field(default_factory=dict)  # dtype -> ``groups[d]`` converted
    filled: int = 0


def _gather_columns(buf: Any, idx: Any, out: Any) -> None:
    """Write rows ``idx`` of a row-major ``(rows, columns)`` buffer into the column-major
    ``(columns, len(idx))`` array ``out``: on the host a share of the rows per thread (a gather
    is bound by memory latency, which one core does not saturate), on a GPU at once."""
    n = len(idx)
    parts = host_threads.parts(n, _GATHER_ROWS_PER_THREAD) if backend.on_host(buf) else 1
    if parts == 1:
        _gather_rows(buf, idx, out)
        return
    bounds = [n * p // parts for p in range(parts + 1)]
    host_threads.run_all([lambda a=a, b=b: _gather_rows(buf, idx[a:b], out[:, a:b])
                          for a, b in zip(bounds, bounds[1:])])


def _gather_rows(buf: Any, idx: Any, out: Any) -> None:
    """:func:`_gather_columns` on one thread: the rows are gathered a block at a time into a
    row-major scratch (one contiguous read per row; on the CPU ``_GATHER_ROWS`` rows, so that it
    stays in cache, on a GPU all of them at once) and transposed into ``out`` from there."""
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


def _cuts(shift: int, lo: int, hi: int, batch_size: int) -> list[int]:
    """The chunk rows where the batcher cuts ``[lo, hi)``: ``lo``, every batch boundary in
    between and ``hi``. Batch boundaries are the stream rows ``start + k * batch_size``; a
    chunk row ``p`` is stream row ``start + shift + p``.

    Example:
        >>> _cuts(3, 0, 10, 4), _cuts(0, 4, 9, 4)
        ([0, 1, 5, 9, 10], [4, 8, 9])
    """
    first = (shift + lo) // batch_size * batch_size + batch_size - shift  # the first boundary after lo
    return [lo, *range(first, hi, batch_size), hi]


@dataclasses.dataclass
class _ListSizes:
    """A chunk's list columns sized once per chunk, so that gathering a batch of them reads
    nothing back from the device.

    ``starts`` name -> (device) where the lists of the chunk rows ``perm[lo:hi]`` start in the
    column's values, in that order; ``cumsum`` name -> (device) the running sum of their lengths
    (``hi - lo + 1`` entries, from 0); ``at`` name -> {cut: that sum at the cut} and ``kept``
    padded name -> {cut: running sum of the values its padding keeps}, on the host.

    Why per chunk: on a GPU a batch's element count sizes its arrays, and reading it back per
    batch (``int(x)``) would stall the host until the device caught up; here the chunk's counts
    at every cut come back in one copy (a chunk is up to millions of rows, a batch thousands).
    """

    lo: int
    starts: dict[str, Any]
    cumsum: dict[str, Any]
    at: dict[str, dict[int, int]]
    kept: dict[str, dict[int, int]]

    @classmethod
    def of(cls, chunk: Chunk, cuts: list[int], padded: dict, same_lengths: Sequence[tuple[str, str]] = ()
           ) -> "_ListSizes":
        if not chunk.lists:
            return cls(cuts[0], {}, {}, {}, {})
        lo, hi = cuts[0], cuts[-1]
        xp = backend.array_lib(chunk.perm)
        idx = chunk.perm[lo:hi]
        starts, cumsum, sums = {}, {}, []
        for name, (_, offsets) in chunk.lists.items():
            starts[name] = offsets[idx]
            lengths = offsets[idx + 1] - starts[name]
            cumsum[name] = _running_sum(xp, lengths)
            sums.append(cumsum[name])
            if name in padded:
                sums.append(_running_sum(xp, xp.minimum(lengths, padded[name].pad_to)))
        cut_rows = xp.asarray(cuts) - lo
        picked = [s[cut_rows] for s in sums]
        for a, b in same_lengths:  # where their offsets differ, counted on the device, read with the sums
            differ = xp.count_nonzero(chunk.lists[a][1] != chunk.lists[b][1])
            picked.append(xp.zeros(len(cuts), dtype=xp.int64) + differ)
        at_cuts = backend.to_host(xp.stack(picked)).tolist()  # the chunk's one read
        for (a, b), differ in zip(same_lengths, at_cuts[len(at_cuts) - len(same_lengths):]):
            if differ[0]:
                partitions = sorted({s.partition for s in chunk.spec.segments})
                raise ValueError(f"list columns {a!r} and {b!r} must have lists of the same length in every row; "
                                 f"they differ in the rows of partition(s) {partitions}")
        rows = iter(dict(zip(cuts, row)) for row in at_cuts)
        at, kept = {}, {}
        for name in chunk.lists:
            at[name] = next(rows)
            if name in padded:
                kept[name] = next(rows)
        return cls(lo, starts, cumsum, at, kept)

    def rows(self, name: str, a: int, b: int) -> tuple[Any, Any, int]:
        """The lists of the chunk rows ``perm[a:b]``: where they start in the column's values
        and their offsets from 0 (on the device), and their total length (on the host)."""
        first = self.at[name][a]
        i, j = a - self.lo, b - self.lo
        return self.starts[name][i:j], self.cumsum[name][i:j + 1] - first, self.at[name][b] - first


def _running_sum(xp: Any, lengths: Any) -> Any:
    """``[0, l0, l0 + l1, ...]`` (int64), one longer than ``lengths``."""
    out = xp.zeros(len(lengths) + 1, dtype=xp.int64)
    xp.cumsum(lengths, out=out[1:])
    return out


def _gather_lists(values: Any, starts: Any, new_offsets: Any, total: int) -> tuple[Any, Any]:
    """Rows of a list column, each row's list kept whole: (values, offsets). The rows' lists
    start at ``starts`` in ``values``, ``new_offsets`` are their offsets in the result (from 0)
    and ``total`` its length (see :meth:`_ListSizes.rows`)."""
    xp = backend.array_lib(values)
    lengths = new_offsets[1:] - new_offsets[:-1]
    positions = backend.repeat(starts - new_offsets[:-1], lengths, total) + xp.arange(total, dtype=xp.int64)
    return values[positions], new_offsets
