"""The batcher reads values back from the device once per chunk, never per batch (issue 13).

On a GPU, reading a device value into Python (``int(x)``, ``x.item()``, ``x.tolist()``,
``cupy.asnumpy``, ``if x.any():``, a boolean mask...) stalls the host until the device has caught
up; once per batch, that throttles the loader. There is no GPU here, so these tests run the real
:class:`~tabloader.loader.Batcher` -- and through it the GPU branches of ``tabloader.backend``
(``take_rows``, ``repeat``, ``empty_columns``, ``to_host``...) -- on a numpy-backed stand-in for
CuPy: ``backend.cupy()`` returns :class:`StandInCupy`, whose arrays are :class:`DeviceArray`, a
numpy subclass that ``backend.is_gpu_object`` takes for a CuPy array. A ``DeviceArray`` refuses
every way of reading a value into Python (it raises :class:`HostRead`); the one legitimate way,
``cupy.asnumpy`` (what ``backend.to_host`` calls), is counted. The batches are compared with the
rows gathered and padded by hand in plain Python.

What it catches: ``int``/``float``/``bool``/``complex``/``operator.index`` of an array,
``item``/``tolist``/``tobytes``, a truth test (``if x.any():``), boolean-mask indexing, and
``nonzero``/``flatnonzero``/``argwhere``/``unique``/``extract``/``compress``/``repeat`` (whose
result size depends on the data: on CuPy they read a count back) through numpy's function
protocol; arrays made by the stand-in's ``zeros``/``empty``/``arange``... are device arrays too,
so a count read from a fresh array is caught as well.
What it cannot catch: ``np.asarray(x)`` of a device array (on CuPy a TypeError, not a silent
sync: only the GPU test sees it), explicit stream or device synchronisation, copies to the
device (``cupy.asarray`` of a host list), synchronisation inside CuPy's or CUDA's own routines
(sorting, cuRAND), and work on the chunk-building thread (per chunk by design: it waits for its
own host-to-device copy). ``tests/test_gpu_loader_sync.py`` checks the real thing on a GPU.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from tabloader import backend
from tabloader.loader import Batcher, Chunk, ChunkSpec, ColumnLayout, ListPadding, Segment, Shuffler
from tabloader.loader.buffer import ChunkBuffer, PackedRows, _pack_rows


class HostRead(AssertionError):
    """A device value was read into Python outside the counted per-chunk reads."""


def _refuse(self, *args, **kwargs):
    raise HostRead("a device value was read into Python (a host synchronisation on a GPU)")


class DeviceArray(np.ndarray):
    """A numpy array playing a CuPy array: values never reach Python except through
    :meth:`StandInCupy.asnumpy` (scalar indexing and reductions give 0-d device arrays)."""

    __module__ = "cupy.host_read_standin"  # backend.is_gpu_object goes by the top-level module name

    __int__ = __float__ = __complex__ = __bool__ = __index__ = item = tolist = tobytes = nonzero = _refuse

    def __getitem__(self, key):
        keys = key if isinstance(key, tuple) else (key,)
        if any(isinstance(k, np.ndarray) and k.dtype == bool for k in keys):
            raise HostRead("boolean-mask indexing: the result size is read back from the device")
        return _device(super().__getitem__(key))

    def __array_wrap__(self, array, context=None, return_scalar=False):
        return _device(array)  # reductions too: no numpy scalar escapes

    def __array_function__(self, func, types, args, kwargs):
        if func in _DATA_SIZED:
            raise HostRead(f"np.{func.__name__}: its result size is read back from the device")
        return super().__array_function__(func, types, args, kwargs)


_DATA_SIZED = {np.nonzero, np.flatnonzero, np.argwhere, np.unique, np.extract, np.compress, np.repeat}


def _device(value):
    """``value`` (an array or a numpy scalar) as a DeviceArray."""
    return np.asarray(value).view(DeviceArray)


class StandInCupy:
    """numpy whose functions return :class:`DeviceArray`; ``asnumpy`` (a counted host read)
    returns a plain numpy copy."""

    ndarray = DeviceArray
    cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDevice=lambda: 0))  # one GPU, the current one

    def __init__(self) -> None:
        self.reads = 0

    def asnumpy(self, array):
        self.reads += 1
        return np.array(array.view(np.ndarray))

    def __getattr__(self, name):
        attr = getattr(np, name)
        if isinstance(attr, type) or not callable(attr):
            return attr  # dtypes, constants

        def on_device(*args, **kwargs):
            out = attr(*args, **kwargs)
            return _device(out) if isinstance(out, (np.ndarray, np.generic)) else out

        if isinstance(attr, np.ufunc):
            on_device.at = attr.at  # in place (cupy.add.at, cupy.minimum.at): the arrays stay device arrays
        return on_device


@pytest.fixture
def cupy(monkeypatch):
    standin = StandInCupy()
    monkeypatch.setattr(backend, "cupy", lambda: standin)
    return standin


def host(array) -> np.ndarray:
    """The test's own look at a device array (not counted: the batcher is done with it)."""
    assert isinstance(array, DeviceArray), f"a {type(array).__name__} left the device"
    return np.asarray(array.view(np.ndarray))


# --- the data: chunks of rows with a scalar, two list columns and a target ----------------------
PAD = ListPadding(3, side="left", truncate="left", value=-1)
LAYOUT = ColumnLayout(("id", "items", "hist"), ("y",), {"int64": ("id",), "float32": ("y",)},
                      {"items": "int64", "hist": "int64"}, {"hist": PAD})
SCALARS = ColumnLayout(("id",), ("y",), {"int64": ("id",), "float32": ("y",)}, {})


def make_chunks(sizes, with_lists=True, seed=0):
    """Chunks of ``sizes`` rows on the stand-in device, and every row by hand (stream order)."""
    rng = np.random.default_rng(seed)
    chunks, rows, row_start = [], [], 0
    for index, n in enumerate(sizes):
        ids = np.arange(row_start, row_start + n)
        items = [rng.integers(1, 100, rng.integers(0, 5)).tolist() for _ in range(n)]
        hist = [rng.integers(1, 100, rng.integers(0, 6)).tolist() for _ in range(n)]
        perm = rng.permutation(n)
        groups = {"int64": _device(ids.reshape(-1, 1)),
                  "float32": _device((ids * 0.5).astype("float32").reshape(-1, 1))}
        lists = {"items": _packed(items), "hist": _packed(hist)} if with_lists else {}
        spec = ChunkSpec(index, (Segment(index, 0, n),), row_start)
        chunks.append(Chunk(spec, groups, lists, _device(perm)))
        rows += [(int(ids[p]), items[p], hist[p]) for p in perm]
        row_start += n
    return chunks, rows


def _packed(lists):
    offsets = np.zeros(len(lists) + 1, np.int64)
    np.cumsum([len(x) for x in lists], out=offsets[1:])
    return _device(np.array([v for x in lists for v in x], np.int64)), _device(offsets)


def padded_by_hand(lst):
    lst = lst[-PAD.pad_to:]  # truncate="left": the last pad_to values
    return [PAD.value] * (PAD.pad_to - len(lst)) + lst  # side="left"


def check_batches(batches, rows, batch_size):
    """Each batch holds the next ``batch_size`` rows, lists whole and padded, all on the device."""
    assert [n for _, _, n in batches] == [len(rows[i:i + batch_size]) for i in range(0, len(rows), batch_size)]
    for k, (features, target, _) in enumerate(batches):
        expect = rows[k * batch_size:(k + 1) * batch_size]
        assert host(features["id"]).tolist() == [r[0] for r in expect]
        assert host(target).tolist() == [r[0] * 0.5 for r in expect]
        if "items" in features:
            values, offsets = (host(a) for a in features["items"])
            assert [values[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == [r[1] for r in expect]
            assert host(features["hist"]).tolist() == [padded_by_hand(r[2]) for r in expect]


# --- the tests ----------------------------------------------------------------------------------
def test_list_columns_read_the_host_once_per_chunk(cupy):
    """Batches of 4 over chunks of 7, 5 and 9 rows (batches straddle chunks): three reads."""
    chunks, rows = make_chunks([7, 5, 9])
    batches = list(Batcher(LAYOUT, 4).batches(chunks, 0, 21))
    check_batches(batches, rows, 4)
    assert cupy.reads == len(chunks)


def test_resumed_mid_chunk_with_drop_last_reads_once_per_chunk_read(cupy):
    """Resuming at row 9 (in chunk 1) with drop_last; as the Loader does, chunk 0 (wholly
    before the resume point) is not passed."""
    chunks, rows = make_chunks([7, 5, 9, 6])
    batches = list(Batcher(LAYOUT, 4, drop_last=True).batches(chunks[1:], 9, 27))
    check_batches(batches, rows[9:9 + 16], 4)
    assert cupy.reads == 3


def test_one_batch_per_chunk_and_batches_larger_than_chunks(cupy):
    chunks, rows = make_chunks([3, 1, 4, 2])
    check_batches(list(Batcher(LAYOUT, 5).batches(chunks, 0, 10)), rows, 5)
    assert cupy.reads == len(chunks)


def test_scalar_columns_never_read_the_host(cupy):
    chunks, rows = make_chunks([7, 5, 9], with_lists=False)
    check_batches(list(Batcher(SCALARS, 4).batches(chunks, 0, 21)), rows, 4)
    assert cupy.reads == 0


@pytest.mark.parametrize("read", [
    int, float, bool, lambda x: x.item(), lambda x: x.tolist(), lambda x: x[x > 1], np.nonzero, np.unique,
    lambda x: [0, 1][x], lambda x: 1 if (x > 1).any() else 0, lambda x: np.repeat(x, x)])
def test_the_stand_in_refuses_host_reads(cupy, read):
    """The harness itself: every read the module docstring lists is refused, including on an
    element, a reduction, and arrays the stand-in makes."""
    fresh = backend.cupy().zeros(3, dtype=np.int64)
    fresh[1:] = backend.cupy().cumsum(backend.cupy().arange(1, 3))
    for x in (fresh, fresh[-1], fresh.sum()):
        with pytest.raises(HostRead):
            read(x)


def test_same_lengths_is_checked_in_the_chunk_read(cupy):
    """Lists that must match in length (values and their weights) are compared once per chunk,
    in the same host read; a mismatch names both columns."""
    chunks, rows = make_chunks([7, 5, 9])
    for chunk in chunks:
        chunk.lists["weights"] = chunk.lists["items"]
    layout = ColumnLayout(("id", "items", "hist", "weights"), ("y",), LAYOUT.groups,
                          {**LAYOUT.lists, "weights": "int64"}, LAYOUT.padded)
    batches = list(Batcher(layout, 4, same_lengths=[("items", "weights")]).batches(chunks, 0, 21))
    check_batches(batches, rows, 4)
    assert cupy.reads == len(chunks)
    chunks[1].lists["weights"] = chunks[1].lists["hist"]
    mismatch = r"'items' and 'weights' must have lists of the same length.*partition\(s\) \[1\]"
    with pytest.raises(ValueError, match=mismatch):
        list(Batcher(layout, 4, same_lengths=[("items", "weights")]).batches(chunks, 0, 21))


# --- column-major chunks, shuffled once (the GPU layout): batches are views of them ---------------
def column_major_chunks(sizes, with_lists=True, seed=0):
    """:func:`make_chunks` with the GPU's layout: each dtype's rows a view of a (columns, rows)
    array, then shuffled by :meth:`Shuffler.shuffle_chunk` (its permutation and one gather per
    dtype). Returns the chunks and every row by hand, in the order the shuffle gave."""
    chunks, _ = make_chunks(sizes, with_lists, seed)
    rows = []
    for chunk in chunks:
        chunk.groups = {d: _device(np.ascontiguousarray(host(g).T)).T for d, g in chunk.groups.items()}
        Shuffler(True, seed, "cuda").shuffle_chunk(chunk, 0, 0)
        chunk.perm = _device(chunk.perm)  # the stand-in's random module is numpy's own
        perm = host(chunk.perm)
        ids = host(chunk.groups["int64"])[:, 0]
        if with_lists:
            values, offsets = (host(a) for a in chunk.lists["items"])
            hvalues, hoffsets = (host(a) for a in chunk.lists["hist"])
            rows += [(int(ids[p]), values[offsets[p]:offsets[p + 1]].tolist(),
                      hvalues[hoffsets[p]:hoffsets[p + 1]].tolist()) for p in perm]
        else:
            rows += [(int(ids[p]),) for p in perm]
    return chunks, rows


def test_shuffled_chunks_are_gathered_once_and_batches_are_views_of_them(cupy):
    """Chunks of 7, 5 and 9 rows, batches of 4: a batch inside one chunk is a view of the
    chunk's shuffled columns (no gather, no allocation per batch); a batch straddling two
    chunks is copied into place; the list columns still read the host once per chunk."""
    chunks, rows = column_major_chunks([7, 5, 9])
    assert all(c.shuffled["int64"].shape == (1, c.num_rows) for c in chunks)
    batches = list(Batcher(LAYOUT, 4).batches(chunks, 0, 21))
    check_batches(batches, rows, 4)
    assert cupy.reads == len(chunks)
    features = batches[0][0]  # rows 0-3 of chunk 0
    assert np.shares_memory(features["id"], chunks[0].shuffled["int64"])
    assert not np.shares_memory(batches[1][0]["id"], chunks[0].shuffled["int64"])  # rows 4-7: two chunks


def test_a_shuffled_chunk_is_converted_once_not_per_batch(cupy):
    """``convert`` (the torch adapter's DLPack import) runs once per dtype of a shuffled chunk;
    its batches are slices of the result (torch tensors sharing one storage per dtype)."""
    import torch

    chunks, rows = column_major_chunks([8, 8, 8], with_lists=False)
    calls = []

    def convert(array):
        calls.append(array.shape)
        return torch.from_dlpack(np.asarray(array.view(np.ndarray)))

    batches = list(Batcher(SCALARS, 4).batches(chunks, 0, 24, convert))
    assert len(batches) == 6 and len(calls) == 3 * 2  # 3 chunks x 2 dtypes, whatever the batches
    for k, (features, target, n) in enumerate(batches):
        expect = [r[0] for r in rows[4 * k:4 * k + 4]]
        assert isinstance(features["id"], torch.Tensor) and features["id"].tolist() == expect
        assert target.tolist() == [x * 0.5 for x in expect]
    first, second = batches[0][0]["id"], batches[1][0]["id"]
    assert first.untyped_storage().data_ptr() == second.untyped_storage().data_ptr()


def test_pack_rows_fills_column_major_staging_whole_columns():
    """Pinned staging of a GPU chunk is column-major: each column is written whole, large ones
    on several threads; the result is the rows by hand."""
    n = 300_000
    columns = [np.arange(n, dtype=np.int64) * (j + 1) for j in range(4)]
    staging = np.zeros((4, n + 10), dtype=np.int64).T  # (rows, columns), column-major
    assert backend.block_rows(staging, n, 4096) == n
    _pack_rows(staging, 10, columns)
    assert staging[:10].sum() == 0
    assert np.array_equal(staging[10:], np.stack(columns, axis=1))
    row_major = np.zeros((n, 4), dtype=np.int64)
    assert backend.block_rows(row_major, n, 4096) == 4096  # the CPU's own buffers stay cache-blocked


def test_chunks_of_rows_already_on_the_device_allocate_no_pinned_memory(cupy, monkeypatch):
    """Pinned host staging is for rows decoded on the host: rows on the device (resident, or
    decoded by cuDF) are copied into the chunk buffer there, and pinned memory takes long to
    allocate (the driver locks every page), so a GPU chunk buffer allocates it on first use."""
    monkeypatch.setattr(backend, "cuda_available", lambda: True)  # the stand-in is the device
    pinned = []
    cupy.cuda = types.SimpleNamespace(alloc_pinned_memory=lambda nbytes: pinned.append(nbytes) or bytearray(nbytes))
    ids = np.arange(8)
    rows = PackedRows({"int64": _device(ids.reshape(-1, 1)), "float32": _device((ids * 0.5).astype("float32")[:, None])},
                      {})
    buffer = ChunkBuffer(SCALARS, max_rows=8, device="cuda")
    chunk = buffer.fill(ChunkSpec(0, (Segment(0, 2, 6), Segment(0, 0, 2)), 0), [rows, rows])
    assert pinned == []
    assert host(chunk.groups["int64"]).ravel().tolist() == [2, 3, 4, 5, 0, 1]
    assert host(chunk.groups["float32"]).ravel().tolist() == [1.0, 1.5, 2.0, 2.5, 0.0, 0.5]


def test_a_frame_segment_is_packed_from_its_columns_values():
    """The rows of a segment of a decoded frame (cuDF on a GPU; pandas takes the same path) are
    its columns' values sliced: a NaN (pandas' float null) is kept, the rows stay whole."""
    import pandas as pd

    ids = np.arange(10)
    frame = pd.DataFrame({"id": ids, "y": np.where(ids % 3 == 0, np.nan, ids * 0.5).astype("float32")})
    chunk = ChunkBuffer(SCALARS, max_rows=10).fill(ChunkSpec(0, (Segment(0, 6, 9), Segment(0, 1, 3)), 0),
                                                   [frame, frame])
    assert chunk.groups["int64"].ravel().tolist() == [6, 7, 8, 1, 2]
    assert np.array_equal(chunk.groups["float32"].ravel(), np.array([np.nan, 3.5, 4.0, 0.5, 1.0], "float32"),
                          equal_nan=True)
