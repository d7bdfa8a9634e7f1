"""Resident partitions: decoded rows the loader keeps on its device between epochs.

With ``Loader(..., resident=...)`` a partition read in one epoch is kept packed on the loader's
device -- GPU memory with ``device="cuda"``, host memory on the CPU -- up to a byte budget, so
later epochs skip reading and decoding it and only copy, shuffle and slice its rows. Chunks,
permutations and batches are the same as without it: exactly-once, determinism and resume are
untouched, and what does not fit is read as usual.

In host memory (scalar columns only) the kept partitions are packed one after the other into a
store, one array per dtype reserved when the first epoch starts (room for the rank's rows), and
a chunk made of kept partitions only is not copied at all, from the first epoch on: its batches
are gathered from the store in place, by the chunk's permutation mapped to store rows
(:meth:`ResidentPartitions.in_place`). Copying each chunk into the chunk buffer first took a
third of a resident epoch's work on the CPU.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator

import numpy as np

from tabloader.loader.buffer import Chunk
from tabloader.loader.plan import ChunkSpec


class ResidentPartitions:
    """Packed partitions kept on the loader's device, up to ``budget`` bytes (None: no limit).

    A partition is kept the first time it is read if its packed rows fit in what is left of the
    budget (first read, first kept; nothing is evicted); one that did not fit is not packed
    again. Which partitions an epoch takes from here is decided when the epoch starts
    (:meth:`snapshot`), so that the partitions it reads are known in advance.

    Example:
        >>> import numpy as np
        >>> from tabloader.loader.buffer import PackedRows
        >>> resident = ResidentPartitions(budget=100)
        >>> pack = lambda table, into: PackedRows({"int64": np.zeros((len(table), 1), "int64")}, {})
        >>> type(resident.keep(0, [1, 2], pack)).__name__, resident.keep(1, list(range(20)), pack)[:2]
        ('PackedRows', [0, 1])
        >>> resident.snapshot(), resident.nbytes
        (frozenset({0}), 16)
    """

    def __init__(self, budget: int | None = None) -> None:
        self.budget = budget
        self.nbytes = 0
        self._packed: dict[int, Any] = {}
        self._refused: set[int] = set()
        self.store: dict[str, Any] | None = None  # dtype -> (rows, columns) array: see reserve()
        self._store_rows = 0  # rows of the store in use
        self._first_row: dict[int, int] = {}  # partition -> its first row in the store

    def reserve(self, empty: Callable[[int], dict[str, Any]], rows: int, row_bytes: float) -> None:
        """Pack the partitions kept from now on into one store of ``rows`` rows (at most what
        the budget holds at ``row_bytes`` a row), made by ``empty(rows)``. Host memory is
        reserved, not touched, until rows are packed; without the memory for it (or once
        partitions were kept) the partitions keep arrays of their own, as on a GPU."""
        if self.store is not None or self._packed:
            return
        if self.budget is not None:
            rows = min(rows, int(self.budget // max(row_bytes, 1.0)))
        try:
            self.store = empty(max(rows, 0)) or None  # no scalar column: nothing to store
        except MemoryError:
            self.store = None

    def __len__(self) -> int:
        return len(self._packed)

    def __getitem__(self, partition: int) -> Any:
        return self._packed[partition]

    def snapshot(self) -> frozenset[int]:
        """The partitions resident now (those an epoch starting now takes from here)."""
        return frozenset(self._packed)

    def keep(self, partition: int, table: Any, pack: Callable[[Any, Any], Any]) -> Any:
        """The resident rows of ``partition`` -- packed by ``pack(table, into)`` the first time,
        when they fit in the budget (``into``: their rows of the store, or None for arrays of
        their own) -- else ``table`` itself."""
        if partition in self._packed:
            return self._packed[partition]
        if partition in self._refused:
            return table
        start = self._store_rows
        stop = start + _num_rows(table)
        in_store = self.store is not None and stop <= len(next(iter(self.store.values())))
        # its rows of the store, or arrays of its own (no store, or the store is full)
        packed = pack(table, {d: array[start:stop] for d, array in self.store.items()} if in_store else None)
        if self.budget is not None and self.nbytes + packed.nbytes > self.budget:
            self._refused.add(partition)  # rows packed into the store are left free for the next
            return table
        if in_store:  # taken once packed and within the budget
            self._store_rows, self._first_row[partition] = stop, start
        self._packed[partition] = packed
        self.nbytes += packed.nbytes
        return packed

    def in_place(self, spec: ChunkSpec, sources: Iterator[Any]) -> tuple[Iterator[Any], Chunk | None]:
        """``spec``'s chunk gathered from the store in place, as ``(sources, chunk)``, when every
        one of its segments' partitions is in the store once its rows (``sources``: one per
        segment, kept as they are produced) are taken; else ``(rows, None)``, the rows taken so
        far followed by the rest, for the chunk buffer. It stops taking at the first partition
        outside the store, so that at most one decoded partition is held. A chunk in place has
        the whole store as ``groups`` and the store rows of its rows, in order, as ``rows``."""
        if self.store is None:
            return sources, None
        taken = []
        for segment, source in zip(spec.segments, sources):
            taken.append(source)
            if segment.partition not in self._first_row:
                return itertools.chain(taken, sources), None
        rows = [np.arange(self._first_row[s.partition] + s.start, self._first_row[s.partition] + s.stop, dtype=np.int64)
                for s in spec.segments]
        return iter(()), Chunk(spec, self.store, {}, rows=np.concatenate(rows or [np.zeros(0, np.int64)]))

    def __repr__(self) -> str:
        budget = "no limit" if self.budget is None else f"{self.budget} bytes"
        return f"ResidentPartitions({len(self)} partitions, {self.nbytes} bytes of {budget})"


def _num_rows(table: Any) -> int:
    return table.num_rows if hasattr(table, "num_rows") else len(table)
