"""The CPU/GPU seam: device resolution, library choice, lazy imports, parquet reading, DLPack, hashing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tabloader import backend, gpu_install
from tabloader.backend import STRING_DTYPE, BackendUnavailableError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

needs_no_gpu = pytest.mark.skipif("backend.cuda_available()", reason="checks behaviour on a machine without CUDA")


# --- devices ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["cpu", "CPU", "cpu:0"])
def test_resolve_cpu(name):
    assert backend.resolve_device(name) == "cpu"


@needs_no_gpu
@pytest.mark.parametrize("name", ["auto", None, "AUTO"])
def test_resolve_auto_without_gpu(name):
    assert backend.resolve_device(name) == "cpu"
    assert backend.resolve_device() == "cpu"


@needs_no_gpu
@pytest.mark.parametrize("name", ["cuda", "cuda:0", "CUDA:1"])
def test_resolve_cuda_without_gpu(name):
    with pytest.raises(BackendUnavailableError) as info:
        backend.resolve_device(name)
    message = str(info.value)
    assert name in message and "no CUDA device" in message
    assert isinstance(info.value, ImportError)  # callers may catch it as an ImportError


@pytest.mark.parametrize("name", ["gpu", "tpu", "", "cuda0", "mps"])
def test_resolve_unknown_device(name):
    with pytest.raises(ValueError, match="unknown device") as info:
        backend.resolve_device(name)
    assert "cpu" in str(info.value) and "cuda" in str(info.value)


def test_cuda_available_is_a_bool():
    assert backend.cuda_available() in (True, False)


def test_missing_gpu_module_gives_install_hint(monkeypatch):
    import importlib

    real_import = importlib.import_module

    def fake_import(name, *args, **kwargs):
        if name in ("cudf", "cupy", "dask_cudf"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", fake_import)
    for getter, name in [(backend.cudf, "cudf"), (backend.cupy, "cupy"), (backend.dask_cudf, "dask_cudf")]:
        with pytest.raises(BackendUnavailableError) as info:
            getter()
        assert name in str(info.value) and "pip install" in str(info.value)


@pytest.mark.parametrize("major, extra, packages", [
    (12, "gpu-cu12", ["cudf-cu12", "dask-cudf-cu12", "cupy-cuda12x", "dask-cuda"]),
    (13, "gpu-cu13", ["cudf-cu13", "dask-cudf-cu13", "cupy-cuda13x", "dask-cuda"]),
])
def test_install_hint_names_the_extra_of_the_cuda_major(monkeypatch, major, extra, packages):
    import importlib
    import pathlib
    import tomllib

    extras = tomllib.loads((pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert [p.split(">")[0] for p in extras[extra]] == packages  # the extra the hint names exists and is complete
    real_import = importlib.import_module

    def fake_import(name, *args, **kwargs):
        if name == "cudf":
            raise ModuleNotFoundError("No module named 'cudf'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", fake_import)
    monkeypatch.setattr(gpu_install, "detect_cuda_major", lambda: major)
    with pytest.raises(BackendUnavailableError) as info:
        backend.cudf()
    assert f"tabloader[{extra}]" in str(info.value) and packages[0] in str(info.value)
    other = "gpu-cu13" if extra == "gpu-cu12" else "gpu-cu12"
    assert other not in str(info.value)


def test_install_hint_without_a_known_cuda_major_names_both_extras(monkeypatch):
    monkeypatch.setattr(gpu_install, "detect_cuda_major", lambda: None)
    hint = backend.install_hint("cupy")
    assert "tabloader[gpu-cu12]" in hint and "tabloader[gpu-cu13]" in hint
    assert "CUDA 11" in backend.install_hint("cudf", 11) and "driver" in backend.install_hint("cudf", 11)
    assert backend.gpu_extra(14) == "gpu-cu13"  # newer drivers run the newest builds


def test_cuda_major_is_read_from_the_driver(monkeypatch, tmp_path):
    """No GPU library says which CUDA: the driver's version as `nvidia-smi` prints it decides."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '| NVIDIA-SMI 580.95.05   Driver Version: 580.95.05   CUDA Version: 13.0     |'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(gpu_install, "_torch_cuda_major", lambda: None)
    monkeypatch.setattr(gpu_install, "_cupy_cuda_major", lambda: None)
    assert gpu_install.detect_cuda_major() == 13
    assert "tabloader[gpu-cu13]" in backend.install_hint("dask_cudf")


# --- libraries --------------------------------------------------------------------------------
def test_dataframe_and_array_libraries_on_cpu():
    assert backend.dataframe_lib("cpu") is pd
    assert backend.array_lib("cpu") is np
    assert backend.array_lib(np.arange(3)) is np
    assert backend.array_lib(pd.Series([1, 2]).to_numpy()) is np
    assert backend.is_gpu_object(np.arange(3)) is False
    assert backend.is_gpu_object(pd.DataFrame({"a": [1]})) is False
    assert backend.frame_device(pd.DataFrame({"a": [1]})) == "cpu"


@needs_no_gpu
def test_dataframe_and_array_libraries_auto_and_cuda_without_gpu():
    assert backend.dataframe_lib("auto") is pd
    assert backend.array_lib("auto") is np
    with pytest.raises(BackendUnavailableError):
        backend.dataframe_lib("cuda")
    with pytest.raises(BackendUnavailableError):
        backend.array_lib("cuda:0")


def test_concat_to_host_to_device_asarray():
    a, b = pd.DataFrame({"x": [1, 2]}), pd.DataFrame({"x": [3]})
    pd.testing.assert_frame_equal(backend.concat([a, b], ignore_index=True), pd.DataFrame({"x": [1, 2, 3]}))
    with pytest.raises(ValueError):
        backend.concat([])
    assert backend.to_host(a) is a
    assert backend.to_device(a, "cpu") is a
    out = backend.asarray([1, 2, 3], "cpu")
    assert isinstance(out, np.ndarray) and out.tolist() == [1, 2, 3]


def test_import_tabloader_imports_no_gpu_or_framework_module():
    code = (
        "import sys, json, tabloader, tabloader.backend, tabloader.schema, tabloader.dataset, tabloader.atomic_files\n"
        "import pandas as pd\n"
        "tabloader.Dataset(pd.DataFrame({'a': [1, 2]})).compute()\n"
        "heavy = ['cupy', 'cudf', 'dask_cudf', 'torch', 'tensorflow', 'keras', 'triton', 'jax']\n"
        "print(json.dumps(sorted(m for m in heavy if m in sys.modules)))\n"
    )
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_has_module():
    assert backend.has_module("numpy") is True
    assert backend.has_module("surely_not_a_module_name_xyz") is False


# --- the device half of the seam -------------------------------------------------------------
def as_numpy(array):
    """A numpy copy of a numpy or CuPy array (by CuPy's own call, not the seam's)."""
    return array.get() if type(array).__module__.startswith("cupy") else np.asarray(array)


def test_device_names_and_where_data_lives():
    assert backend.is_host("cpu") and backend.is_host("CPU:0") and not backend.is_host("cuda:1")
    assert backend.on_host(np.zeros(2)) and backend.on_host(pd.DataFrame({"a": [1]}))
    assert backend.on_host(pa.table({"a": [1]}))
    assert backend.pins_host_memory("cuda:0") and not backend.pins_host_memory("cpu")
    assert backend.reads_frames("cpu", "cpu") is False and backend.reads_frames("cuda", "cpu") is False
    assert backend.array_device("cpu") == "cpu" and backend.array_device("mps") == "cpu"


@pytest.mark.skipif(backend.has_module("cupy"), reason="checks the fallback where CuPy is not installed")
def test_array_device_falls_back_to_the_host_without_cupy():
    assert backend.array_device("cuda:1") == "cpu"


def test_is_frame():
    import dask.dataframe as dd

    frame = pd.DataFrame({"a": [1, 2]})
    assert backend.is_frame(frame)
    assert not any(backend.is_frame(x) for x in (frame["a"], np.zeros(2), dd.from_pandas(frame, npartitions=1)))


def test_resolve_frame_device_on_the_host():
    assert backend.resolve_frame_device("cpu") == "cpu"
    if not backend.cudf_available():
        assert backend.resolve_frame_device(None) == "cpu"


def test_permutation_is_seeded_by_the_key(device):
    first = as_numpy(backend.permutation(1000, [1, 2, 3, 4], device))
    assert sorted(first.tolist()) == list(range(1000)) and first.dtype == np.int64
    assert np.array_equal(first, as_numpy(backend.permutation(1000, [1, 2, 3, 4], device)))
    assert not np.array_equal(first, as_numpy(backend.permutation(1000, [1, 2, 3, 5], device)))
    if device == "cpu":  # numpy's generator, keyed by the whole key
        assert np.array_equal(first, np.random.default_rng([1, 2, 3, 4]).permutation(1000))


def test_take_rows_into_empty_columns(device):
    xp = backend.array_lib(device)
    rows = np.arange(30, dtype=np.int64).reshape(10, 3)
    indices = np.array([3, 1, 9, 3])
    scratch = xp.empty((4, 3), dtype=np.int64)
    backend.take_rows(xp.asarray(rows), xp.asarray(indices), scratch)
    out = backend.empty_columns(3, 4, np.int64, like=scratch)
    out[:, :] = scratch.T
    assert as_numpy(out).tolist() == rows[indices].T.tolist()
    assert all(out[j].flags.c_contiguous for j in range(3))
    if device == "cpu":
        assert all(out[j].ctypes.data % backend.ALIGNMENT == 0 for j in range(3))


def test_repeat(device):
    xp = backend.array_lib(device)
    counts = np.array([2, 0, 3, 1, 0])
    values = np.array([10, 20, 30, 40, 50])
    got = backend.repeat(xp.asarray(values), xp.asarray(counts), int(counts.sum()))
    assert as_numpy(got).tolist() == [10, 10, 30, 30, 30, 40]
    assert as_numpy(backend.repeat(xp.asarray(values), xp.zeros(5, dtype=np.int64), 0)).tolist() == []


def test_block_rows(device):
    like = backend.array_lib(device).zeros(1)
    assert backend.block_rows(like, 0, 64) == 1
    assert backend.block_rows(like, 10_000, 64) == (64 if device == "cpu" else 10_000)


def test_host_staging_and_copy_rows(device):
    xp = backend.array_lib(device)
    destination = xp.zeros((6, 2), dtype=np.float32)
    staging = backend.host_staging(destination)
    assert isinstance(staging, np.ndarray) and staging.shape == (6, 2) and staging.dtype == np.float32
    assert (staging is destination) == (device == "cpu")
    staging[:] = np.arange(12, dtype=np.float32).reshape(6, 2)
    backend.copy_rows({"f": destination}, {"f": staging}, [(0, 2), (4, 6)])
    expected = np.arange(12, dtype=np.float32).reshape(6, 2)
    if device != "cpu":
        expected[2:4] = 0  # rows outside the ranges are not copied
    assert as_numpy(destination).tolist() == expected.tolist()


def test_copy_rows_without_waiting_lets_other_rows_be_filled_meanwhile(device):
    """As the chunk buffer does: a segment's rows are queued for the device, the next segment
    is packed into other rows of the staging meanwhile, and the stream is waited for once."""
    destination = backend.array_lib(device).zeros((2, 6), dtype=np.int64).T  # column-major, as a GPU chunk
    staging = backend.host_staging(destination)
    by_hand = np.arange(12, dtype=np.int64).reshape(6, 2)
    staging[:3] = by_hand[:3]
    first = backend.copy_rows({"i": destination}, {"i": staging}, [(0, 3)], wait=False)
    staging[3:] = by_hand[3:]
    second = backend.copy_rows({"i": destination}, {"i": staging}, [(3, 6)], wait=False)
    if device == "cpu":
        assert first is None and second is None  # the buffer is its own staging
    else:
        assert second is first  # one stream per GPU: waiting for it waits for both
        second.synchronize()
    assert as_numpy(destination).tolist() == by_hand.tolist()


def test_device_context_and_synchronize(device):
    import threading

    context = backend.device_context(device)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(_current_gpu(device, context)))
    thread.start()
    thread.join()
    assert seen == [_current_gpu(device, context)]
    backend.synchronize(device)


def _current_gpu(device, context):
    with context():
        return backend.cupy().cuda.runtime.getDevice() if device == "cuda" else None


def test_to_host(device):
    on_device = backend.array_lib(device).arange(3)
    host = backend.to_host(on_device)
    assert isinstance(host, np.ndarray) and host.tolist() == [0, 1, 2]


# --- arrow helpers ------------------------------------------------------------------------------
def test_frame_arrow_schema():
    import dask.dataframe as dd

    df = pd.DataFrame({"a": np.arange(3, dtype="int16"), "b": ["x", "y", None], "l": [[1], [], [2, 3]]})
    schema = backend.frame_arrow_schema(df)
    assert schema.field("a").type == pa.int16()
    assert pa.types.is_string(schema.field("b").type) or pa.types.is_large_string(schema.field("b").type)
    assert schema.field("l").type == pa.list_(pa.int64())
    ddf = dd.from_pandas(df[["a", "b"]], npartitions=2)
    assert backend.frame_arrow_schema(ddf).names == ["a", "b"]
    assert backend.frame_arrow_schema(ddf).field("a").type == pa.int16()


def test_from_arrow_keeps_pandas_conventions():
    df = pd.DataFrame({
        "n": pd.array([1, None, 3], dtype="Int64"),
        "s": pd.Series(["a", None, "c"], dtype=STRING_DTYPE),
        "f": np.array([0.5, 1.5, 2.5], dtype=np.float32),
    })
    table = pa.Table.from_pandas(df, preserve_index=False).append_column("l", pa.array([[1, 2], None, []]))
    out = backend.from_arrow(table)
    pd.testing.assert_frame_equal(out[["n", "s", "f"]], df)
    assert out["l"].dtype == pd.ArrowDtype(pa.list_(pa.int64()))
    assert pa.array(out["l"]).to_pylist() == [[1, 2], None, []]



def _table_sharing_cases():
    """Integer and float columns in every layout a partition may have: nulls at odd offsets,
    several chunks, no nulls, nullable without nulls; beside columns pyarrow converts."""
    ints = pa.array([7, None, 2**60 + 1, -4, None, 9, 10, 11, 12, None], type=pa.int64())
    return pa.table({
        "sliced": ints.slice(3),  # a validity bitmap not starting at bit 0
        "chunks": pa.chunked_array([ints.slice(0, 4), ints.slice(8, 2), pa.array([5], pa.int64())]),
        "u8": pa.array([1, 2, 3, 4, 5, 6, 255], type=pa.uint8()),
        "i32": pa.array(range(7), type=pa.int32()),
        "f32": pa.array([0.5, None, 1.5, None, 2.5, 3.5, None], type=pa.float32()),
        "f64": pa.array([0.25] * 7, type=pa.float64()),
        "b": pa.array([True, None, False, True, True, False, None]),
        "s": pa.array(["a", None, "c", "d", "e", "f", "g"]),
    })


def test_from_arrow_sharing_buffers_gives_the_same_frame():
    table = _table_sharing_cases()
    expected = pd.DataFrame({
        "sliced": pd.array([-4, None, 9, 10, 11, 12, None], dtype="Int64"),
        "chunks": pd.array([7, None, 2**60 + 1, -4, 12, None, 5], dtype="Int64"),
        "u8": pd.array([1, 2, 3, 4, 5, 6, 255], dtype="UInt8"),  # named nullable
        "i32": np.arange(7, dtype=np.int32),
        "f32": np.array([0.5, np.nan, 1.5, np.nan, 2.5, 3.5, np.nan], dtype=np.float32),
        "f64": np.full(7, 0.25),
        "b": pd.array([True, None, False, True, True, False, None], dtype="boolean"),
        "s": pd.Series(["a", None, "c", "d", "e", "f", "g"], dtype=STRING_DTYPE),
    })
    for copy in (True, False):
        out = backend.from_arrow(table, nullable=["u8"], copy=copy)
        pd.testing.assert_frame_equal(out, expected)
    empty = backend.from_arrow(table.slice(0, 0), nullable=["sliced", "chunks", "u8", "b"], copy=False)
    pd.testing.assert_frame_equal(empty, expected.iloc[:0])


def test_from_arrow_sharing_buffers_gives_a_writable_frame():
    table = _table_sharing_cases()
    out = backend.from_arrow(table, nullable=["u8"], copy=False)
    out.loc[0, "i32"] = 100
    out.loc[1, "sliced"] = 5
    assert out["i32"].tolist()[:2] == [100, 1] and out["sliced"].tolist()[:2] == [-4, 5]


# --- parquet ----------------------------------------------------------------------------------
@pytest.fixture
def parquet_file(tmp_path):
    df = pd.DataFrame({"a": np.arange(100, dtype=np.int64), "b": np.arange(100) * 0.5,
                       "c": pd.Series([f"v{i}" for i in range(100)], dtype=STRING_DTYPE)})
    path = tmp_path / "data.parquet"
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path, row_group_size=10)
    return str(path), df


@pytest.mark.parametrize("lists", [
    pd.Series([["a"], None, ["b", "c"]], dtype=pd.ArrowDtype(pa.list_(pa.string()))),
    pd.Series([[1.5], None, [2.0, 3.0]], dtype=pd.ArrowDtype(pa.list_(pa.float64()))),
    pd.Series([], dtype=pd.ArrowDtype(pa.list_(pa.string()))),
    pd.Series([[1.5], np.nan, [2.0, 3.0]], dtype=object),  # Python lists, NaN for a missing list
], ids=["strings", "floats", "empty", "object"])
def test_list_flatten_and_rebuild(lists):
    """Every pyarrow version (15 made a ChunkedArray of a list array's elements, or failed)."""
    expected = [x for row in lists if isinstance(row, list) for x in row]
    values, rebuild = backend.list_flatten(lists.iloc[1:].reset_index(drop=True))
    assert values.tolist() == expected[len(lists.iloc[0]) if len(lists) else 0:]
    values, rebuild = backend.list_flatten(lists)
    assert values.tolist() == expected
    rebuilt = rebuild(values.to_numpy())
    assert [row if isinstance(row, list) else None for row in rebuilt.tolist()] == \
        [row if isinstance(row, list) else None for row in lists.tolist()]


def test_read_parquet_whole_file(parquet_file):
    path, df = parquet_file
    pd.testing.assert_frame_equal(backend.read_parquet(path), df)
    assert backend.read_parquet_arrow(path).num_rows == 100


def test_read_parquet_row_groups_and_columns(parquet_file):
    path, df = parquet_file
    out = backend.read_parquet(path, columns=["c", "a"], row_groups=[1, 3])
    expected = pd.concat([df.iloc[10:20], df.iloc[30:40]])[["c", "a"]].reset_index(drop=True)
    pd.testing.assert_frame_equal(out, expected)
    table = backend.read_parquet_arrow(path, columns=["b"], row_groups=[9])
    assert table.column_names == ["b"] and table.column("b").to_pylist() == df["b"].iloc[90:].tolist()


def test_read_parquet_through_a_filesystem(parquet_file):
    import fsspec

    path, df = parquet_file
    fs = fsspec.filesystem("file")
    out = backend.read_parquet(path, columns=["a"], row_groups=[0], filesystem=fs)
    pd.testing.assert_frame_equal(out, df[["a"]].iloc[:10])


def test_read_parquet_errors(tmp_path, parquet_file):
    path, _ = parquet_file
    with pytest.raises(Exception):
        backend.read_parquet(path, row_groups=[99])
    with pytest.raises(Exception):
        backend.read_parquet(str(tmp_path / "missing.parquet"))


# --- DLPack -----------------------------------------------------------------------------------
class _Capsule:
    """Hands a ready-made capsule to a DLPack consumer (np.from_dlpack wants an object, not a capsule)."""

    def __init__(self, capsule, device=(1, 0)):
        self.capsule, self.device = capsule, device

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return self.device


@pytest.mark.parametrize("dtype", ["int64", "float32", "uint8", "bool", "float16"])
def test_to_dlpack_round_trip_writeable_is_zero_copy(dtype):
    a = (np.arange(12) % 3).astype(dtype).reshape(3, 4)
    capsule = backend.to_dlpack(a)
    assert "dltensor" in repr(capsule) and "versioned" not in repr(capsule)  # TensorFlow takes only these
    b = np.from_dlpack(_Capsule(capsule))
    assert b.dtype == a.dtype and b.shape == a.shape
    np.testing.assert_array_equal(b, a)
    assert np.shares_memory(a, b)


def test_to_dlpack_read_only_array_is_copied():
    a = np.arange(10, dtype=np.int64)
    a.flags.writeable = False
    capsule = backend.to_dlpack(a)
    assert "versioned" not in repr(capsule)
    b = np.from_dlpack(_Capsule(capsule))
    np.testing.assert_array_equal(b, np.arange(10))
    assert not np.shares_memory(a, b)


def test_to_dlpack_of_arrow_memory():
    arr = pa.array(np.arange(5, dtype=np.float64)).to_numpy(zero_copy_only=True)  # read-only view
    assert not arr.flags.writeable
    b = np.from_dlpack(_Capsule(backend.to_dlpack(arr)))
    np.testing.assert_array_equal(b, np.arange(5, dtype=np.float64))


def test_to_dlpack_non_contiguous_view():
    a = np.arange(20, dtype=np.int32).reshape(4, 5)[:, 1:3]
    b = np.from_dlpack(_Capsule(backend.to_dlpack(a)))
    np.testing.assert_array_equal(b, a)


@pytest.mark.torch
def test_to_dlpack_into_torch():
    torch = pytest.importorskip("torch")
    a = np.arange(6, dtype=np.float32)
    t = torch.utils.dlpack.from_dlpack(backend.to_dlpack(a))
    assert t.tolist() == a.tolist()
    a[0] = 42  # zero copy
    assert t[0].item() == 42


# --- hashing ----------------------------------------------------------------------------------
MASK = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """The reference: Vigna's splitmix64 finalizer on the value's 64-bit two's complement."""
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def test_splitmix64_reference_known_value():
    # splitmix64 seeded with 0 yields 0xE220A8397B1DCDAF as its first output
    assert splitmix64(0) == 0xE220A8397B1DCDAF


def test_hash_int64_matches_splitmix64():
    values = [0, 1, 2, 42, -1, -12345, 2**31, 2**62 + 7, 2**63 - 1, -(2**63), 123456789012345]
    out = backend.hash_int64(np.array(values, dtype=np.int64))
    assert out.dtype == np.uint64
    assert [int(v) for v in out] == [splitmix64(v & MASK) for v in values]


def test_hash_int64_other_int_dtypes_and_no_warnings():
    import warnings

    values = np.array([0, 5, 255, 1000], dtype=np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = backend.hash_int64(values)
    assert [int(v) for v in out] == [splitmix64(int(v)) for v in values]
    assert backend.hash_int64(np.array([], dtype=np.int64)).shape == (0,)


# --- GPU --------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_path(tmp_path, parquet_file):
    pytest.importorskip("cudf")
    pytest.importorskip("cupy")
    cudf = backend.cudf()
    cupy = backend.cupy()
    assert backend.resolve_device("auto") == "cuda"
    assert backend.resolve_device("cuda:0") == "cuda"
    assert backend.dataframe_lib("cuda") is cudf
    assert backend.array_lib("cuda") is cupy
    path, df = parquet_file
    gdf = backend.read_parquet(path, columns=["a", "c"], row_groups=[2, 4], device="cuda")
    assert backend.is_gpu_object(gdf) and backend.frame_device(gdf) == "cuda"
    expected = pd.concat([df.iloc[20:30], df.iloc[40:50]])[["a", "c"]].reset_index(drop=True)
    pd.testing.assert_frame_equal(backend.to_host(gdf).reset_index(drop=True), expected, check_dtype=False)
    values = np.array([0, 1, -1, 2**63 - 1], dtype=np.int64)
    on_gpu = backend.hash_int64(cupy.asarray(values))
    assert backend.array_lib(on_gpu) is cupy
    assert [int(v) for v in cupy.asnumpy(on_gpu)] == [splitmix64(int(v) & MASK) for v in values]
    x = cupy.arange(8, dtype=cupy.float32)
    y = cupy.from_dlpack(_Capsule(backend.to_dlpack(x), device=x.__dlpack_device__()))
    assert cupy.shares_memory(x, y) if hasattr(cupy, "shares_memory") else True
    assert y.tolist() == list(range(8))
