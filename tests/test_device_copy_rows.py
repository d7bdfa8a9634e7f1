"""``backend.host_staging`` + ``backend.copy_rows``, the loader's host-to-GPU copy, on the CPU.

On a GPU, ``copy_rows`` issues one ``cudaMemcpy2DAsync`` per buffer and row range, its line
width and count taken from the destination's layout and its pitch from each side's. The staging
must therefore have the destination's layout whatever its shape: a chunk buffer is the
transposed view of a column-major ``(columns, rows)`` CuPy array, and with one row that view is
C- and F-contiguous at once. Here ``backend.cupy()`` is a stand-in whose ``memcpy2DAsync`` does
what CUDA's does, line by line on host memory, and refuses what CUDA refuses (a width beyond
either pitch) or would read outside the pinned staging; the results are compared with the
rows copied by numpy.
"""

from __future__ import annotations

import ctypes
import types

import numpy as np
import pytest

from tabloader import backend


class DeviceArray(np.ndarray):
    """A numpy array playing a CuPy one (``backend.is_gpu_object`` goes by the module name),
    with CuPy's ``data.ptr``: the address of its first element."""

    __module__ = "cupy.copy_rows_standin"

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)


class StandInCuda:
    """The part of ``cupy.cuda`` that ``copy_rows`` and ``host_staging`` use."""

    class Stream:
        ptr = 0

        def __init__(self, non_blocking: bool = False) -> None:
            pass

        def record(self):
            return object()

        def wait_event(self, event) -> None:
            pass

        def synchronize(self) -> None:
            pass

    Stream.null = Stream()

    def __init__(self) -> None:
        self.pinned: list[np.ndarray] = []
        self.pooled: list[int] = []  # sizes of the pinned blocks taken from the pool
        self.runtime = types.SimpleNamespace(getDevice=lambda: 0, memcpyHostToDevice=1,
                                             memcpy2DAsync=self.memcpy2d)

    def get_current_stream(self):
        return self.Stream.null

    def alloc_pinned_memory(self, nbytes: int) -> np.ndarray:
        self.pooled.append(nbytes)
        return self.PinnedMemory(nbytes)

    def PinnedMemory(self, nbytes: int) -> np.ndarray:  # noqa: N802 (CuPy's class, unpooled)
        memory = np.zeros(nbytes, dtype=np.uint8)
        self.pinned.append(memory)
        return memory

    def PinnedMemoryPointer(self, memory: np.ndarray, offset: int) -> np.ndarray:  # noqa: N802
        return memory[offset:]

    def memcpy2d(self, dst, dpitch, src, spitch, width, height, kind, stream) -> None:
        assert kind == self.runtime.memcpyHostToDevice
        assert width <= dpitch and width <= spitch, "cudaErrorInvalidPitchValue"
        last = src + (height - 1) * spitch + width
        assert any(m.ctypes.data <= src and last <= m.ctypes.data + m.nbytes for m in self.pinned), \
            "the copy reads outside the pinned staging"
        for line in range(height):
            ctypes.memmove(dst + line * dpitch, src + line * spitch, width)


@pytest.fixture
def cuda(monkeypatch):
    standin = StandInCuda()
    monkeypatch.setattr(backend, "cupy", lambda: types.SimpleNamespace(cuda=standin))
    monkeypatch.setattr("tabloader.device._STREAMS", {})
    return standin


def chunk_buffer(columns: int, rows: int, dtype) -> DeviceArray:
    """A chunk buffer as the loader makes it on a GPU: the ``(rows, columns)`` transposed view
    of a column-major ``(columns, rows)`` array."""
    return np.zeros((columns, rows), dtype=dtype).view(DeviceArray).T


@pytest.mark.parametrize("columns", [1, 3])
@pytest.mark.parametrize("rows", [1, 2, 7])
def test_rows_reach_a_column_major_buffer_whatever_its_shape(cuda, columns, rows):
    destination = chunk_buffer(columns, rows, np.float32)
    staging = backend.host_staging(destination)
    assert staging.shape == destination.shape
    values = np.arange(1, rows * columns + 1, dtype=np.float32).reshape(rows, columns)
    staging[:] = values
    ranges = [(0, rows)] if rows < 3 else [(0, 2), (rows - 2, rows)]
    backend.copy_rows({"float32": destination}, {"float32": staging}, ranges)
    expected = np.zeros_like(values)
    for start, stop in ranges:
        expected[start:stop] = values[start:stop]
    assert np.asarray(destination).tolist() == expected.tolist()


def test_rows_reach_a_row_major_buffer(cuda):
    destination = np.zeros((5, 3), dtype=np.int64).view(DeviceArray)
    staging = backend.host_staging(destination)
    staging[:] = np.arange(15).reshape(5, 3)
    backend.copy_rows({"int64": destination}, {"int64": staging}, [(1, 4)])
    expected = np.arange(15).reshape(5, 3)
    expected[[0, 4]] = 0
    assert np.asarray(destination).tolist() == expected.tolist()


@pytest.mark.gpu
@pytest.mark.parametrize("columns", [1, 3])
@pytest.mark.parametrize("rows", [1, 7])
def test_rows_reach_a_cupy_chunk_buffer(columns, rows):
    """The same copies into a real CuPy chunk buffer from real pinned staging."""
    cp = backend.cupy()
    destination = cp.zeros((columns, rows), dtype=np.float32).T
    staging = backend.host_staging(destination)
    values = np.arange(1, rows * columns + 1, dtype=np.float32).reshape(rows, columns)
    staging[:] = values
    backend.copy_rows({"float32": destination}, {"float32": staging}, [(0, rows)])
    assert cp.asnumpy(destination).tolist() == values.tolist()


def test_resident_partitions_are_staged_outside_the_pinned_pool(cuda):
    """A resident partition is staged once, at its own size: from CuPy's pool, every one would stay
    locked in host memory after its copy (the pool keeps a freed block for the next request of its
    size); the chunk slots' staging, reused chunk after chunk, comes from the pool."""
    import pyarrow as pa

    from tabloader.loader.buffer import ChunkBuffer
    from tabloader.loader.layout import ColumnLayout
    from tabloader.loader.plan import ChunkSpec, Segment

    layout = ColumnLayout(("a", "b"), (), {"int64": ("a", "b")}, {})
    buffer = ChunkBuffer(layout, 8)  # then made a GPU's: column-major buffers of the stand-in device
    buffer.column_major = True
    buffer.xp = types.SimpleNamespace(empty=lambda shape, dtype: np.zeros(shape, dtype=dtype).view(DeviceArray),
                                      asarray=np.asarray)
    tables = [pa.table({"a": np.arange(n), "b": np.arange(n) * 10}) for n in (3, 5)]
    packed = [buffer.pack_partition(t) for t in tables]
    assert cuda.pooled == [] and len(cuda.pinned) == 2
    assert [np.asarray(p.groups["int64"]).tolist() for p in packed] == \
        [[[i, 10 * i] for i in range(n)] for n in (3, 5)]
    chunk = buffer.fill(ChunkSpec(0, (Segment(0, 0, 3),), 0), [tables[0]])
    assert len(cuda.pooled) == 1 and np.asarray(chunk.groups["int64"]).tolist() == [[i, 10 * i] for i in range(3)]


@pytest.mark.gpu
def test_resident_epochs_leave_no_pinned_block_in_the_pool(tmp_path):
    """On a GPU: after a resident epoch over partitions of different sizes, CuPy's pinned pool holds
    no more free blocks than before (each partition's staging went back to the system)."""
    import pandas as pd

    import tabloader as tl

    cp = backend.cupy()
    frames = [pd.DataFrame({"a": np.arange(n, dtype=np.int64), "x": np.ones(n, np.float32)}) for n in (3000, 5000, 7000)]
    for i, frame in enumerate(frames):
        frame.to_parquet(tmp_path / f"part_{i}.parquet")
    pool = cp.get_default_pinned_memory_pool()
    pool.free_all_blocks()
    # decoded by pyarrow on the host (so staged in pinned memory), a file per partition
    loader = tl.Loader(tl.Dataset(str(tmp_path), device="cpu", part_size=1), 1024, categorical=["a"],
                       continuous=["x"], device="cuda", resident=True, shuffle=False)
    for _ in range(2):
        seen = np.concatenate([cp.asnumpy(f["a"]) for f, _ in loader])
    assert sorted(seen.tolist()) == sorted(np.concatenate([f["a"].to_numpy() for f in frames]).tolist())
    assert loader.resident is not None and len(loader.resident) == 3
    import gc

    gc.collect()
    assert pool.n_free_blocks() <= 2, f"{pool.n_free_blocks()} free pinned blocks kept"
