"""Resident partitions: decoded rows the loader keeps on its device between epochs.

With ``Loader(..., resident=...)`` a partition read in one epoch is kept packed on the loader's
device -- GPU memory with ``device="cuda"``, host memory on the CPU -- up to a byte budget, so
later epochs skip reading and decoding it and only copy, shuffle and slice its rows. Chunks,
permutations and batches are the same as without it: exactly-once, determinism and resume are
untouched, and what does not fit is read as usual.
"""

from __future__ import annotations

from typing import Any, Callable


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
        >>> pack = lambda table: PackedRows({"int64": np.zeros((len(table), 1), "int64")}, {})
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

    def __len__(self) -> int:
        return len(self._packed)

    def __getitem__(self, partition: int) -> Any:
        return self._packed[partition]

    def snapshot(self) -> frozenset[int]:
        """The partitions resident now (those an epoch starting now takes from here)."""
        return frozenset(self._packed)

    def keep(self, partition: int, table: Any, pack: Callable[[Any], Any]) -> Any:
        """The resident rows of ``partition`` -- packed by ``pack(table)`` the first time, when
        they fit in the budget -- else ``table`` itself."""
        if partition in self._packed:
            return self._packed[partition]
        if partition in self._refused:
            return table
        packed = pack(table)
        if self.budget is not None and self.nbytes + packed.nbytes > self.budget:
            self._refused.add(partition)
            return table
        self._packed[partition] = packed
        self.nbytes += packed.nbytes
        return packed

    def __repr__(self) -> str:
        budget = "no limit" if self.budget is None else f"{self.budget} bytes"
        return f"ResidentPartitions({len(self)} partitions, {self.nbytes} bytes of {budget})"
