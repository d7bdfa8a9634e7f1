"""Stage 4 of the loader, the shuffle: a seeded permutation of each chunk's rows.

Rows are shuffled within a chunk, on the chunk's device, by a generator keyed on
``(seed, epoch, rank, chunk)`` -- never the global RNG -- so a seeded loader is reproducible,
and a resumed one recomputes exactly the permutation it was in the middle of. Where chunks are
column-major (a GPU) the whole chunk is gathered into that order here, one kernel per dtype,
so that the batcher only slices it.
"""

from __future__ import annotations

from typing import Any

from tabloader import backend
from tabloader.loader.buffer import Chunk


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
        if not self.shuffle:
            xp = backend.array_lib(self.device)
            return xp.arange(n, dtype=xp.int64)
        return backend.permutation(n, [self.seed, epoch, rank, chunk], self.device)

    def shuffle_chunk(self, chunk: Chunk, epoch: int, rank: int) -> Chunk:
        """Give ``chunk`` its permutation (and, where chunks are column-major, its rows gathered
        in that order into ``chunk.shuffled``, so that the chunk buffer can be refilled while
        the batches are still in use)."""
        chunk.perm = self.permutation(chunk.num_rows, epoch, rank, chunk.spec.index)
        if chunk.rows is not None:  # gathered in place from resident rows: the permutation of their rows
            chunk.perm = chunk.rows[chunk.perm]
        if backend.column_major_chunks(self.device):
            chunk.shuffled = {d: backend.gather_columns(rows.T, chunk.perm) for d, rows in chunk.groups.items()}
        return chunk
