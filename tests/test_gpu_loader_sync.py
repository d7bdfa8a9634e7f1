"""On a GPU, the loader's per-batch path never waits for the device (issue 13).

The loader on ``device="cuda"`` (CuPy end to end, DLPack to torch) is iterated with host
synchronisation forbidden on the consuming thread, where the batcher and the torch adapter run:

* CuPy: ``cupyx.allow_synchronize(False)``. Deprecated since CuPy 10 (it warns) but still in
  CuPy 14: ``ndarray.get()`` -- behind ``int(x)``, ``float(x)``, ``x.item()``, ``x.tolist()``,
  ``cupy.asnumpy``, boolean masks and ``nonzero`` (which read their count back) -- and
  ``Device.synchronize()`` raise ``cupyx.DeviceSynchronized`` while it is off. It does not see
  ``Stream.synchronize()``, ``runtime.deviceSynchronize()`` or syncs inside CUDA libraries.
  The batcher's one legitimate read per chunk goes through ``backend.to_host``, which the test
  wraps to allow it and count it.
* torch: ``torch.cuda.set_sync_debug_mode("error")`` makes torch raise on its own syncing
  operations (``.item()``, ``.tolist()``, ``nonzero``, ``torch.equal``...).

Chunks are built on the prefetch thread (per chunk: they wait for their own host-to-device
copy), which neither check covers. Batches are compared with the rows by hand afterwards.
Skipped where no CUDA device is usable (``tests/conftest.py``); ``tools/gpu_checks.sh`` runs it.
"""

from __future__ import annotations

import contextlib
import os
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tabloader as tl
from tabloader import backend
from tabloader.schema import ColumnSchema, Schema, Tags

pytestmark = pytest.mark.gpu

FILES, ROWS, BATCH, PAD_TO = 4, 300, 64, 3  # 300 rows per chunk: batches straddle chunks


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    """``id``, ``x``, ``items`` and ``hist`` int64 lists (empty ones included), ``w`` float32
    lists as long as ``items`` (its weights), ``y``; one parquet file (written by pyarrow, no
    pandas metadata) per chunk."""
    rng = np.random.default_rng(3)
    n = FILES * ROWS
    items = [rng.integers(1, 1000, rng.integers(0, 6)).tolist() for _ in range(n)]
    hist = [rng.integers(1, 1000, rng.integers(0, 8)).tolist() for _ in range(n)]
    table = pa.table({"id": np.arange(n), "x": np.arange(n, dtype="float32"),
                      "items": pa.array(items, pa.list_(pa.int64())), "hist": pa.array(hist, pa.list_(pa.int64())),
                      "w": pa.array([[0.5] * len(x) for x in items], pa.list_(pa.float32())),
                      "y": np.zeros(n, "float32")})
    path = tmp_path_factory.mktemp("sync")
    for i in range(FILES):
        pq.write_table(table.slice(i * ROWS, ROWS), os.path.join(path, f"part_{i}.parquet"))
    schema = Schema([ColumnSchema("id", "int64", {Tags.CATEGORICAL}), ColumnSchema("x", "float32", {Tags.CONTINUOUS}),
                     ColumnSchema("items", "int64", {Tags.CATEGORICAL, Tags.LIST}, is_list=True),
                     ColumnSchema("hist", "int64", {Tags.CONTINUOUS, Tags.LIST}, is_list=True),
                     ColumnSchema("w", "float32", {Tags.CONTINUOUS, Tags.LIST}, is_list=True),
                     ColumnSchema("y", "float32", {Tags.TARGET})])
    return tl.Dataset(str(path), schema=schema, part_size=4000), items, hist  # a partition per file


@pytest.fixture
def no_sync(monkeypatch):
    """A context that forbids host syncs in this thread (CuPy, and torch when imported), except
    the counted reads through ``backend.to_host``; yields the list of those reads."""
    cupyx = pytest.importorskip("cupyx")
    cupy = pytest.importorskip("cupy")
    reads = []
    to_host = backend.to_host

    def counted(data):
        reads.append(getattr(data, "shape", None))
        with cupyx.allow_synchronize(True):
            return to_host(data)

    monkeypatch.setattr(backend, "to_host", counted)

    @contextlib.contextmanager
    def forbid(torch=None):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # allow_synchronize's deprecation warning
            with cupyx.allow_synchronize(False):
                with pytest.raises(cupyx.DeviceSynchronized):  # the check still works in this CuPy
                    int(cupy.arange(3)[-1])
                if torch is not None:
                    torch.cuda.set_sync_debug_mode("error")
                try:
                    yield reads
                finally:
                    if torch is not None:
                        torch.cuda.set_sync_debug_mode(0)

    return forbid


def host(array):
    """The test's own copy of a CuPy array or torch tensor (after the loop)."""
    if hasattr(array, "cpu"):
        return array.cpu().numpy()
    return backend.cupy().asnumpy(array) if backend.is_gpu_object(array) else np.asarray(array)


def padded(lst):
    return lst[:PAD_TO] + [0] * (PAD_TO - len(lst[:PAD_TO]))


def check_rows(batches, items, hist):
    """Every id once; its ``items`` list whole and ``hist`` padded as by hand."""
    seen = []
    for features in batches:
        ids = host(features["id"]).tolist()
        values, offsets = (host(a) for a in features["items"])
        assert [values[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == [items[i] for i in ids]
        assert host(features["hist"]).tolist() == [padded(hist[i]) for i in ids]
        seen += ids
    assert sorted(seen) == list(range(FILES * ROWS))


def test_cuda_loader_reads_the_host_once_per_chunk(sessions, no_sync):
    ds, items, hist = sessions
    loader = tl.Loader(ds, batch_size=BATCH, device="cuda", parts_per_chunk=1, lists={"hist": PAD_TO}, seed=1)
    chunks = len(loader.plan.chunks(0))
    with no_sync() as reads:
        batches = [features for features, _ in loader]
    check_rows(batches, items, hist)
    assert chunks == FILES and len(batches) == -(-FILES * ROWS // BATCH)
    assert len(reads) == chunks


def test_torch_loader_dict_and_jagged_make_no_sync(sessions, no_sync):
    """The torch adapter, as a dict of tensors (padded lists too) and as a keyed jagged batch
    with weights (their lengths checked in the chunk's read, not per batch)."""
    torch = pytest.importorskip("torch")
    import tabloader.torch  # noqa: F401
    from tabloader.torch.jagged import jagged_feature, jagged_parts

    ds, items, hist = sessions
    common = dict(batch_size=BATCH, device="cuda", parts_per_chunk=1, seed=2)
    as_dict = tl.torch.Loader(ds, lists={"hist": PAD_TO}, **common)
    jagged = tl.torch.Loader(ds, output="jagged", categorical=["id", "items"], continuous=["x", "w"], target="y",
                             sparse_weights={"items": "w"}, **common)
    with no_sync(torch) as reads:
        dict_batches = [features for features, _ in as_dict]
        jagged_batches = list(jagged)
    check_rows(dict_batches, items, hist)
    assert len(reads) == 2 * FILES  # one per chunk and loader
    seen = []
    for sparse, dense, target in jagged_batches:
        ids = host(jagged_feature(sparse, "id")[0]).tolist()
        values, offsets = (host(a) for a in jagged_feature(sparse, "items"))
        assert [values[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == [items[i] for i in ids]
        assert host(dense["x"]).tolist() == ids and target.device.type == "cuda"
        assert host(jagged_parts(sparse)[3]).tolist() == [1.0] * len(ids) + [0.5] * len(values)
        seen += ids
    assert sorted(seen) == list(range(FILES * ROWS))


def test_batches_on_a_stream_of_the_consumers_own_are_whole(sessions):
    """The consumer iterates on a non-blocking CuPy stream of its own (as torch users do with
    ``cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream).use()``): the chunks
    built on the prefetch thread's stream must be waited for on it, or batches could read rows
    that are not gathered yet. Every row comes out once, whole, as by hand."""
    cp = backend.cupy()
    ds, items, hist = sessions
    loader = tl.Loader(ds, batch_size=BATCH, device="cuda", parts_per_chunk=1, lists={"hist": PAD_TO}, seed=4)
    with cp.cuda.Stream(non_blocking=True) as stream:
        copies = [{"id": features["id"].copy(), "items": tuple(a.copy() for a in features["items"]),
                   "hist": features["hist"].copy()} for features, _ in loader]  # each read at once, on this stream
        stream.synchronize()
    check_rows(copies, items, hist)


_SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}
"""


def test_batches_read_late_on_the_consumers_own_stream_are_whole(sessions):
    """The consumer's stream runs far behind (a spin kernel before each batch is read): the
    chunks it let go of must not be overwritten by the next chunks' builds before its queued
    reads ran. Their memory comes back to CuPy's pool on the prefetch thread's stream, which
    does not know the consumer's; the builds wait for a mark of the consumer's work."""
    cp = backend.cupy()
    spin = cp.RawKernel(_SPIN, "spin")
    ds, items, hist = sessions
    loader = tl.Loader(ds, batch_size=BATCH, device="cuda", parts_per_chunk=1, lists={"hist": PAD_TO}, seed=5)
    with cp.cuda.Stream(non_blocking=True) as stream:
        copies = []
        for features, _ in loader:
            spin((1,), (1,), (np.int64(5_000_000),))  # ~3 ms of this stream's time before the reads below
            copies.append({"id": features["id"].copy(), "items": tuple(a.copy() for a in features["items"]),
                           "hist": features["hist"].copy()})
        stream.synchronize()
    check_rows(copies, items, hist)
