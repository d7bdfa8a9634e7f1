"""Key lookup on the device: positions of values (or combinations) in a fixed list of keys.

The keys come from fitted state (pandas, on the host) and are copied to the device once, when
the lookup is built (once per fitted operator and process); every partition is then looked up
on the GPU, with nothing read back to the host: numbers by ``cupy.searchsorted`` in the sorted
keys and an equality check, strings by a binary search in the keys sorted by libcudf.

Strings: when the lookup is built, libcudf sorts the keys on the device (``sorted_order``, then
``gather``), keeping the permutation (sorted position -> key row). A partition is then one CuPy
kernel, a thread per query row, reading the cuDF column's offsets, chars and null mask in
place: a binary search of the row's bytes among the sorted keys with libcudf's own comparison
(``cudf::string_view::compare``: bytes as unsigned char, then the shorter string first -- the
order the keys were sorted in), giving the key's row where the bytes are equal and -1 elsewhere
and for null rows. Not a join (``cudf.Index.get_indexer``): that builds a hash table of the
whole vocabulary per call and reads the join's size back; nor libcudf's ``lower_bound``: its
Thrust search waits for the device before returning.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import numpy as np
import pandas as pd

from tabloader import backend
from tabloader.encoding.contract import NULL_ID, OOV_START
from tabloader.encoding.cpu import lookup as cpu_lookup
from tabloader.encoding.cpu.columns import exact_ints
from tabloader.encoding.gpu.columns import NormalizedColumn
from tabloader.encoding.gpu.hashing import cross_hash, span_bytes, string_buffers

__all__ = ["ValueLookup", "assign_ids"]


class ValueLookup:
    """Positions of device query columns in a fixed list of unique keys (the CPU class's
    contract: ``keys`` are pandas Series, :meth:`positions` gives the row of ``keys`` each query
    row equals, or -1, as a fresh CuPy int64 array)."""

    def __init__(self, keys: Sequence[Any], op: Any = None, what: Any = None) -> None:
        self.op, self.what = op, what
        kinds = [cpu_lookup._kind_of_dtype(k.dtype) for k in keys]
        self.size = len(keys[0]) if keys else 0
        if len(keys) == 1:
            self.levels = [_device_keys(keys[0], kinds[0])]
            self.combined = None
            return
        # Combinations: one index per column over its distinct values (the order pd.unique gives,
        # which the CPU lookup uses too), and an index of the keys' combined codes, computed once
        # on the host, where the keys are.
        host = cpu_lookup.ValueLookup(keys, op, what)
        self.levels = [_device_keys(pd.Series(cpu_lookup.level_values(k, kind)), kind) for k, kind in zip(keys, kinds)]
        self.combined = IntKeys(host.combined.to_numpy())

    def _combine(self, codes: list[Any]) -> Any:
        cp = backend.cupy()
        out = cp.zeros(len(codes[0]), dtype=cp.int64)
        missing = cp.zeros(len(codes[0]), dtype=bool)
        for code, level in zip(codes, self.levels):
            out = out * max(len(level), 1) + code
            missing |= code < 0
        return cp.where(missing, -1, out)  # not out[missing] = -1: see positions

    def _find(self, level: Any, col: NormalizedColumn) -> Any:
        if len(level) == 0 or col.kind == "null":
            return backend.cupy().full(len(col), -1, dtype=np.int64)
        cpu_lookup.check_query_kind(self.op, self.what, level.kind, col.kind)
        return level.find(col.values)

    def positions(self, cols: Sequence[NormalizedColumn]) -> Any:
        """Row of ``keys`` equal to each query row (-1 where none, and for null rows)."""
        cp = backend.cupy()
        if self.combined is None:
            pos = self._find(self.levels[0], cols[0])
        else:
            combined = self._combine([self._find(level, col) for level, col in zip(self.levels, cols)])
            pos = cp.where(combined >= 0, self.combined.find(combined), -1)
        for c in cols:
            if c.mask is not None:  # where, not pos[mask] = -1: a boolean-mask assignment reads its count back
                pos = cp.where(c.mask, -1, pos)
        return pos


def _device_keys(values: pd.Series, kind: str) -> Any:
    """The device index of one key column (unique values, no nulls) for its kind."""
    if kind == "str":
        return StringKeys(values)
    if kind == "float":
        return FloatKeys(values.to_numpy(dtype=np.float64))
    return IntKeys(values.to_numpy() if kind == "int" else np.zeros(0, np.int64))


class _SortedKeys:
    """Unique numeric keys sorted on the device; a query is a binary search and an equality check."""

    def __init__(self, keys: np.ndarray) -> None:
        cp = backend.cupy()
        device = cp.asarray(keys)
        self.order = cp.argsort(device)
        self.sorted = device[self.order]

    def __len__(self) -> int:
        return len(self.sorted)

    def _search(self, values: Any) -> Any:
        cp = backend.cupy()
        if not len(self.sorted):
            return cp.full(len(values), -1, dtype=cp.int64)
        at = cp.minimum(cp.searchsorted(self.sorted, values), len(self.sorted) - 1)
        return cp.where(self.sorted[at] == values, self.order[at], -1).astype(cp.int64, copy=False)


class IntKeys(_SortedKeys):
    """Unique integer keys (int64, or uint64 whose values >= 2**63 are no negative numbers),
    matched by value as :class:`tabloader.encoding.cpu.lookup.IntKeys` does."""

    kind = "int"

    def __init__(self, keys: np.ndarray) -> None:
        self.dtype = np.dtype(np.uint64 if keys.dtype == np.uint64 else np.int64)
        super().__init__(keys.astype(self.dtype, copy=False))

    def find(self, values: Any) -> Any:
        values, fits = exact_ints(values, self.dtype)  # a query the dtype cannot hold is unseen
        pos = self._search(values)
        return pos if fits is None else backend.cupy().where(fits, pos, -1)  # no mask assignment: see positions


class FloatKeys(_SortedKeys):
    """Unique float64 keys, found by value (an integer query equals the float of its value)."""

    kind = "float"

    def find(self, values: Any) -> Any:
        return self._search(values.astype(np.float64, copy=False))


class StringKeys:
    """Unique string keys, sorted on the device by libcudf once; a query is one kernel (see the
    module's docstring): the row of the key equal to each query row's bytes, or -1."""

    kind = "str"

    def __init__(self, keys: pd.Series) -> None:
        import pyarrow as pa

        cudf, cp, plc = backend.cudf(), backend.cupy(), backend.pylibcudf()
        strings = pa.array(pd.Series(keys, dtype=object).to_numpy(), type=pa.string())  # copied to the device once
        column, _ = cudf.Series.from_arrow(strings).to_pylibcudf()
        self.size = column.size()
        table = plc.Table([column])
        order = plc.sorting.sorted_order(table, [plc.types.Order.ASCENDING], [plc.types.NullOrder.AFTER])
        self.order = cudf.Series.from_pylibcudf(order).values.astype(cp.int64)  # size_type (int32) positions
        self.sorted = cudf.Series.from_pylibcudf(
            plc.copying.gather(table, order, plc.copying.OutOfBoundsPolicy.DONT_CHECK).columns()[0])
        self.offsets, self.chars = string_buffers(self.sorted)  # views kept with the sorted column

    def __len__(self) -> int:
        return self.size

    def find(self, values: Any) -> Any:
        """Row of the key equal to each row of the cuDF string Series ``values`` (any index,
        sliced or not), -1 where none and for null rows: a fresh CuPy int64 array."""
        cp = backend.cupy()
        column, _ = values.to_pylibcudf()  # the column only: the Series' index plays no part
        n = column.size()
        if not (n and self.size):
            return cp.full(n, -1, dtype=cp.int64)
        out = cp.empty(n, dtype=cp.int64)
        offsets, chars = string_buffers(values)
        valid, first_bit = _validity_words(column)
        if valid is None:
            valid = out  # any device pointer: the kernel reads no mask when first_bit is -1
        args = (offsets, chars, valid, np.int64(first_bit), self.offsets, self.chars, self.order,
                np.int64(self.size), out, np.int64(n))
        _find_kernel()(((n + _THREADS - 1) // _THREADS,), (_THREADS,), args)
        return out


def _validity_words(column: Any) -> tuple[Any, int]:
    """The null mask of a pylibcudf column as a CuPy uint32 view (libcudf's bitmask: row ``i``
    is valid where bit ``offset + i`` is set) and that bit of row 0; (None, -1) without a mask."""
    cp = backend.cupy()
    mask = column.null_mask()
    if mask is None:
        return None, -1
    nbytes = span_bytes(mask)  # allocated in whole 64-byte blocks
    memory = cp.cuda.UnownedMemory(mask.ptr, nbytes, mask)  # a view: the span keeps the mask alive
    return cp.ndarray((nbytes // 4,), dtype=cp.uint32, memptr=cp.cuda.MemoryPointer(memory, 0)), column.offset()


# One thread per query row: skip a null row (its bit clear in the mask, when there is one), then
# a binary search of its bytes among the sorted keys, comparing as libcudf does (the order the
# keys were sorted in; the keys are unique, so an equal key is the one match).
_FIND_SOURCE = r"""
__device__ int compare_strings(const unsigned char* a, long long a_len, const unsigned char* b, long long b_len) {
    long long n = a_len < b_len ? a_len : b_len;
    for (long long j = 0; j < n; ++j) {
        if (a[j] != b[j]) return a[j] < b[j] ? -1 : 1;
    }
    return a_len < b_len ? -1 : (a_len > b_len ? 1 : 0);
}

extern "C" __global__
void find_sorted_strings(const long long* q_offsets, const unsigned char* q_chars, const unsigned int* q_valid,
                         long long q_first_bit, const long long* k_offsets, const unsigned char* k_chars,
                         const long long* order, long long n_keys, long long* out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long found = -1;
    long long bit = q_first_bit + i;
    if (q_first_bit < 0 || ((q_valid[bit >> 5] >> (bit & 31)) & 1u)) {
        const unsigned char* query = q_chars + q_offsets[i];
        long long query_len = q_offsets[i + 1] - q_offsets[i];
        long long low = 0, high = n_keys;
        while (low < high) {
            long long mid = low + (high - low) / 2;
            int c = compare_strings(k_chars + k_offsets[mid], k_offsets[mid + 1] - k_offsets[mid], query, query_len);
            if (c == 0) { found = order[mid]; break; }
            if (c < 0) low = mid + 1; else high = mid;
        }
    }
    out[i] = found;
}
"""
_THREADS = 256


@functools.lru_cache(maxsize=None)
def _find_kernel() -> Any:
    return backend.cupy().RawKernel(_FIND_SOURCE, "find_sorted_strings")


def assign_ids(pos: Any, mask: Any, num_buckets: int, cols: Sequence[NormalizedColumn], dtype: Any) -> Any:
    """Ids of the encoding contract from vocabulary positions, on the device (see the CPU
    function: ``pos`` -1 is out of vocabulary, ``cols`` the key columns hashed into the buckets).

    With ``num_buckets > 1`` every row is hashed and the out-of-vocabulary rows take their bucket
    by ``where``: selecting those rows first (``flatnonzero``) reads their count back from the
    device, a wait per column and partition. The columns are hashed as they are (gathering a
    string column by the rows ``0..n-1`` would copy every string first). The ids are the CPU's.
    """
    cp = backend.cupy()
    ids = pos.astype(cp.int64, copy=False) + (OOV_START + num_buckets)  # position -1: the one OOV id when num_buckets == 1
    if num_buckets > 1:
        buckets = (cross_hash(cols) % cp.uint64(num_buckets)).astype(cp.int64) + OOV_START
        ids = cp.where(pos < 0, buckets, ids)
    if mask is not None:
        ids = cp.where(mask, NULL_ID, ids)  # see ValueLookup.positions: no read back
    return ids if ids.dtype == np.dtype(dtype) else ids.astype(dtype)
