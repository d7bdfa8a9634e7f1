"""String columns as codes into a dictionary of their distinct values, as parquet stores them.

A parquet writer dictionary-encodes a string column: each column chunk holds its distinct
strings once (the dictionary page) and an integer code per row. Decoding that into a string per
row, then counting or looking the strings up again, rebuilds what the file had already. Read as
codes (``read_dictionary``, see :mod:`tabloader.dataset.parquet`), a column is counted by a
``bincount`` of the codes, grouped by its codes, and looked up or hashed by its dictionary's
distinct strings, taken by the codes: on 5M rows of 26 hex-id columns (one thread), reading
them took 1.7 s instead of 3.7 and counting 1.2 s instead of 3.9 (docs/benchmarks.md).

:class:`CodedStrings` is the normalized form of such a column (and of a pandas Categorical of
strings). It stands wherever a string :class:`~tabloader.encoding.cpu.columns.NormalizedColumn`
does: a consumer that knows nothing of codes reads ``values``, the strings, decoded on first use.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class CodedStrings:
    """A string column as ``codes`` (a numpy integer array: row -> position in ``dictionary``)
    and ``dictionary`` (a pyarrow string array of distinct strings, no null), with ``mask``
    True at the null rows (None when there are none). The codes of null rows are arbitrary
    positions in ``dictionary``: honour the mask. Of kind ``"str"``, like the
    :class:`~tabloader.encoding.cpu.columns.NormalizedColumn` of the same strings.

    Example:
        >>> import pyarrow as pa
        >>> col = CodedStrings(np.array([1, 0, 0]), pa.array(["a", "b"]), np.array([False, False, True]))
        >>> col.values.to_pylist(), col.take(np.array([0])).values.to_pylist()
        (['b', 'a', None], ['b'])
    """

    kind = "str"

    def __init__(self, codes: np.ndarray, dictionary: Any, mask: np.ndarray | None) -> None:
        self.codes, self.dictionary, self.mask = codes, dictionary, mask
        self._values: Any = None

    def __len__(self) -> int:
        return len(self.codes)

    @property
    def values(self) -> Any:
        """The strings, a pyarrow string array null exactly where ``mask`` is True (decoded on
        first use; not a ``functools.cached_property``, which up to Python 3.11 holds one lock
        for every instance, so partitions on threads would decode one at a time)."""
        import pyarrow as pa

        if self._values is None:
            self._values = self.dictionary.take(pa.array(self.codes, mask=self.mask))
        return self._values

    def filter(self, keep: np.ndarray) -> "CodedStrings":
        """The rows where the boolean array ``keep`` is True."""
        return CodedStrings(self.codes[keep], self.dictionary, None if self.mask is None else self.mask[keep])

    def take(self, positions: np.ndarray) -> "CodedStrings":
        return CodedStrings(self.codes[positions], self.dictionary,
                            None if self.mask is None else self.mask[positions])

    def code_counts(self, mask: np.ndarray | None) -> np.ndarray:
        """How many rows outside ``mask`` (True: left out; None: none) hold each dictionary
        entry, int64 by position in ``dictionary``.

        Example:
            >>> import pyarrow as pa
            >>> CodedStrings(np.array([1, 1, 0]), pa.array(["a", "b"]), None).code_counts(np.array([0, 1, 0], bool))
            array([1, 1])
        """
        size = len(self.dictionary)
        # left-out rows: one past the end (an intp, which any code dtype's values fit beside)
        codes = self.codes if mask is None else np.where(mask, np.intp(size), self.codes)
        return np.bincount(codes, minlength=size + 1)[:size].astype(np.int64, copy=False)

    def decode(self, per_entry: np.ndarray) -> np.ndarray:
        """``per_entry`` (one value per dictionary entry) for each row: what the row's string maps to."""
        return per_entry.take(self.codes)


def from_dictionary_array(values: Any) -> "CodedStrings | None":
    """The :class:`CodedStrings` of a pyarrow dictionary array (or chunked array) of strings,
    or None for any other array, or a dictionary holding a null or no string. The chunks of a
    chunked array (one per row group read) have dictionaries of their own: they are unified
    into one dictionary of distinct strings first, and their codes rewritten to point into it.

    Example:
        >>> import pyarrow as pa
        >>> chunks = pa.chunked_array([pa.array(["x", None, "y"]).dictionary_encode(),
        ...                            pa.array(["y", "z"]).dictionary_encode()])
        >>> col = from_dictionary_array(chunks)
        >>> col.dictionary.to_pylist(), col.codes.tolist(), col.mask.tolist()
        (['x', 'y', 'z'], [0, 0, 1, 1, 2], [False, True, False, False, False])
    """
    import pyarrow as pa

    kind = values.type
    if not (pa.types.is_dictionary(kind) and (pa.types.is_string(kind.value_type)
                                              or pa.types.is_large_string(kind.value_type))):
        return None
    chunks = values.unify_dictionaries().chunks if isinstance(values, pa.ChunkedArray) else [values]
    dictionary = chunks[0].dictionary if chunks else pa.array([], kind.value_type)
    if not len(dictionary) or dictionary.null_count:
        return None
    codes = np.concatenate([_codes(chunk) for chunk in chunks]) if chunks else np.zeros(0, np.int32)
    masks = [_null_rows(chunk) for chunk in chunks]
    mask = None if all(m is None for m in masks) else np.concatenate(
        [np.zeros(len(chunk), bool) if m is None else m for chunk, m in zip(chunks, masks)])
    if len(chunks) == 1:  # unified dictionaries are distinct; a file's own need not be
        codes, dictionary = _distinct(codes, dictionary)
    return CodedStrings(codes, dictionary, mask)


def _distinct(codes: np.ndarray, dictionary: Any) -> tuple[np.ndarray, Any]:
    """``codes`` and ``dictionary`` with every string once in the dictionary: parquet does not
    forbid a writer to repeat one, and a repeated string would be counted as two values."""
    import pyarrow.compute as pc

    if pc.count_distinct(dictionary).as_py() == len(dictionary):
        return codes, dictionary
    encoded = pc.dictionary_encode(dictionary)
    return encoded.indices.to_numpy().take(codes), encoded.dictionary


def _codes(chunk: Any) -> np.ndarray:
    """The codes of a dictionary array, its null rows 0 (a valid position)."""
    indices = chunk.indices
    if indices.null_count:
        indices = indices.fill_null(0)
    return indices.to_numpy(zero_copy_only=False)


def _null_rows(chunk: Any) -> np.ndarray | None:
    from tabloader.encoding.cpu.columns import arrow_null_mask

    return arrow_null_mask(chunk.indices) if chunk.null_count else None
