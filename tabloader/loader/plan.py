"""Stage 1 of the loader, the partition plan: which rows each rank reads in an epoch, as chunks.

The partition order comes from ``(seed, epoch)``, never from global state, so an epoch can be
recomputed (to resume mid-epoch) and every rank agrees on it without talking to the others.
Ranks get equal, disjoint row ranges of that order (partitions at the edges are split by
rows), so all ranks yield the same number of batches. The rows are then cut into chunks
(:class:`ChunkSpec`) of at most a row budget, the unit the chunk buffer packs and shuffles.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np


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
