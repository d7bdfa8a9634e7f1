"""Datasets on the GPU (issue 14): cuDF's parquet reader and writer, dask-cudf collections and
sources, and a workflow on a ``dask_cuda.LocalCUDACluster``.

Every cuDF result is compared with what the CPU path gives for the same files (a cuDF partition
must equal the pandas partition converted) or with a computation by hand in pandas. The tests
marked ``cudf`` (``gpu`` tests needing cuDF) skip where no CUDA device or no cuDF is usable; the
others check the CPU side of the same code (option checks, dtype conforming) and run everywhere.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tabloader as tl
from tabloader import ops
from tabloader.dataset.source import conform_dtypes
from tabloader.dataset.writing import cudf_compression

# --- data written by pyarrow, without pandas' metadata -------------------------------------------
def write_files(root) -> str:
    """Two hive folders (``day=1``, ``day=2``), files whose columns come in different orders,
    an integer column with nulls, strings, a dictionary-encoded column, lists, timestamps;
    several row groups per file."""
    rng = np.random.default_rng(0)
    for day in (1, 2):
        for k in range(2):
            n = 40
            ids = pa.array([None if i % 7 == 0 else int(v) for i, v in enumerate(rng.integers(0, 2**40, n))],
                           pa.int64())
            columns = {
                "id": ids,
                "s": pa.array([f"v{v}" for v in rng.integers(0, 9, n)]),
                "f": pa.array(rng.normal(size=n).astype(np.float32)),
                "d": pa.array([f"k{v}" for v in rng.integers(0, 3, n)]).dictionary_encode(),
                "l": pa.array([list(range(v)) for v in rng.integers(0, 4, n)], pa.list_(pa.int64())),
                "t": pa.array(rng.integers(0, 10**12, n), pa.timestamp("ms")),
            }
            names = list(columns) if k == 0 else list(reversed(columns))
            folder = os.path.join(root, f"day={day}")
            os.makedirs(folder, exist_ok=True)
            table = pa.table({name: columns[name] for name in names})
            pq.write_table(table.replace_schema_metadata(None), os.path.join(folder, f"part{k}.parquet"),
                           row_group_size=15)
    return str(root)


def arrow_of(frame) -> pa.Table:
    """A pandas or cuDF frame as an arrow table (the test's own conversion)."""
    if type(frame).__module__.startswith("cudf"):
        return frame.to_arrow()
    return pa.Table.from_pandas(frame, preserve_index=False)


def plain_type(arrow_type: pa.DataType) -> str:
    """An arrow type without the differences that are none (string widths, list field names)."""
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return f"list<{plain_type(arrow_type.value_type)}>"
    if pa.types.is_large_string(arrow_type) or pa.types.is_string_view(arrow_type):
        return "string"
    return str(arrow_type)


def assert_same_rows(actual: pa.Table, expected: pa.Table) -> None:
    assert actual.column_names == expected.column_names
    assert [plain_type(f.type) for f in actual.schema] == [plain_type(f.type) for f in expected.schema]
    assert actual.to_pylist() == expected.to_pylist()


# --- reading -------------------------------------------------------------------------------------
@pytest.mark.cudf
def test_cudf_partitions_equal_the_pandas_partitions_converted(tmp_path):
    import cudf

    path = write_files(tmp_path / "raw")
    on_cpu = tl.Dataset(path, device="cpu", part_size=1500)
    on_gpu = tl.Dataset(path, device="cuda", part_size=1500)
    assert on_gpu.npartitions == on_cpu.npartitions > 2
    assert on_gpu.partition_sizes() == on_cpu.partition_sizes()
    expected_dtypes = cudf.DataFrame.from_arrow(arrow_of(on_cpu.meta())).dtypes
    assert on_gpu.meta().dtypes.to_dict() == expected_dtypes.to_dict()
    for i in range(on_cpu.npartitions):
        cpu, gpu_part = on_cpu.read_partition(i), on_gpu.read_partition(i)
        assert isinstance(gpu_part, cudf.DataFrame)
        converted = cudf.DataFrame.from_arrow(arrow_of(cpu))
        assert gpu_part.dtypes.to_dict() == converted.dtypes.to_dict(), on_gpu.describe_partition(i)
        assert_same_rows(arrow_of(gpu_part), arrow_of(cpu))
    subset = tl.Dataset(path, device="cuda", columns=["t", "day", "id"]).read_partition(0)
    assert list(subset.columns) == ["t", "day", "id"]


@pytest.mark.cudf
def test_cudf_partitions_of_files_on_an_fsspec_file_system_equal_the_pandas_ones(tmp_path):
    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"/test-gpu-dataset-{os.getpid()}"
    fs.put(write_files(tmp_path / "raw"), root, recursive=True)
    try:  # paths without the protocol: cuDF must be given the dataset's file system to find them
        on_cpu = tl.Dataset(f"memory://{root}", device="cpu", part_size=1500)
        on_gpu = tl.Dataset(f"memory://{root}", device="cuda", part_size=1500)
        assert on_gpu.npartitions == on_cpu.npartitions > 2
        for i in range(on_cpu.npartitions):
            assert_same_rows(arrow_of(on_gpu.read_partition(i)), arrow_of(on_cpu.read_partition(i)))
    finally:
        fs.rm(root, recursive=True)


@pytest.mark.cudf
def test_cudf_dataset_refuses_nested_types_naming_the_column(tmp_path):
    pq.write_table(pa.table({"a": [1, 2], "st": [{"x": 1}, {"x": 2}]}), tmp_path / "f.parquet")
    with pytest.raises(TypeError, match="column 'st' has type struct"):
        tl.Dataset(str(tmp_path), device="cuda")
    assert tl.Dataset(str(tmp_path), device="cuda", columns=["a"]).compute()["a"].to_arrow().to_pylist() == [1, 2]


# --- writing -------------------------------------------------------------------------------------
def forbid_host_copies(monkeypatch) -> None:
    """Make every way a cuDF partition reaches the host fail (an empty frame may: it is a meta)."""
    import cudf

    from tabloader import backend

    real_to_host = backend.to_host

    def to_host(data):
        if backend.is_gpu_object(data) and len(data):
            raise AssertionError("a partition was copied to the host")
        return real_to_host(data)

    monkeypatch.setattr(backend, "to_host", to_host)
    for name in ("to_pandas", "to_arrow"):
        real = getattr(cudf.DataFrame, name)

        def refuse(self, *args, _real=real, **kwargs):
            if len(self):
                raise AssertionError("a partition was copied to the host")
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(cudf.DataFrame, name, refuse)


@pytest.mark.cudf
@pytest.mark.parametrize("shuffle", [False, True])
def test_cudf_dataset_is_written_by_cudf_from_the_device_like_the_cpu_writes_it(tmp_path, monkeypatch, shuffle):
    path = write_files(tmp_path / "raw")
    cpu_out, gpu_out = str(tmp_path / "cpu"), str(tmp_path / "gpu")
    options = dict(output_files=3, shuffle=shuffle, seed=7, row_group_size=20, progress=False)
    tl.Dataset(path, device="cpu", part_size=1500).to_parquet(cpu_out, **options)
    with monkeypatch.context() as patch, pytest.warns(UserWarning, match="5,000-row page fragments"):
        forbid_host_copies(patch)
        tl.Dataset(path, device="cuda", part_size=1500).to_parquet(gpu_out, **options)
    assert sorted(os.listdir(gpu_out)) == sorted(os.listdir(cpu_out))
    with open(os.path.join(gpu_out, "_schema.json")) as a, open(os.path.join(cpu_out, "_schema.json")) as b:
        assert json.load(a) == json.load(b)
    files = sorted(f for f in os.listdir(cpu_out) if f.endswith(".parquet"))
    for name in files:  # pyarrow reads the same rows, in the same order (the shuffle's seed included)
        assert_same_rows(pq.read_table(os.path.join(gpu_out, name)), pq.read_table(os.path.join(cpu_out, name)))
    by_pandas = pd.read_parquet(gpu_out)  # pandas reads it too, every value
    source = pq.read_table(path).to_pandas()
    assert len(by_pandas) == len(source)
    assert sorted(by_pandas["id"].dropna().astype("int64")) == sorted(source["id"].dropna().astype("int64"))
    back = tl.Dataset(gpu_out, device="cpu").compute()
    assert_same_rows(arrow_of(back), arrow_of(tl.Dataset(cpu_out, device="cpu").compute()))


@pytest.mark.cudf
def test_cudf_writer_honours_a_row_group_size_of_whole_fragments(tmp_path):
    """cuDF's row groups are whole 5,000-row fragments: a row_group_size of 10,000 is honoured."""
    frame = pd.DataFrame({"id": np.arange(32_000, dtype=np.int64), "x": np.linspace(0, 1, 32_000)})
    out = str(tmp_path / "out")
    dataset = tl.Dataset(frame, device="cuda")  # one partition: cuDF's chunked writer groups rows within a write
    assert dataset.npartitions == 1
    dataset.to_parquet(out, output_files=1, row_group_size=10_000, progress=False)
    (name,) = [f for f in os.listdir(out) if f.endswith(".parquet")]
    meta = pq.ParquetFile(os.path.join(out, name)).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [10_000, 10_000, 10_000, 2_000]
    assert pq.read_table(out)["id"].to_pylist() == list(range(32_000))


@pytest.mark.cudf
def test_cudf_writer_refuses_a_codec_it_lacks_naming_the_option(tmp_path):
    ds = tl.Dataset(pd.DataFrame({"a": [1, 2]}), device="cuda")
    with pytest.raises(ValueError, match="compression='brotli'"):
        ds.to_parquet(str(tmp_path / "out"), compression="brotli", progress=False)
    assert not os.path.exists(tmp_path / "out")
    ds.to_parquet(str(tmp_path / "out"), compression="zstd", progress=False)
    assert pq.read_table(str(tmp_path / "out")).column("a").to_pylist() == [1, 2]


def test_cudf_codec_names():
    assert [cudf_compression(c) for c in ("snappy", "ZSTD", "lz4", None, "none")] == ["snappy", "ZSTD", "LZ4", None,
                                                                                     None]
    with pytest.raises(ValueError, match=r"compression='gzip'.*cuDF"):
        cudf_compression("gzip")


def test_conform_dtypes_casts_to_the_dataset_dtypes_and_names_the_file_and_column():
    frame = pd.DataFrame({"b": ["x", "y"], "a": np.array([1, 2], dtype="int32")})
    dtypes = pd.Series({"a": np.dtype("int64"), "b": np.dtype("float64")})
    out = conform_dtypes(frame[["a"]], dtypes[["a"]], "f.parquet")
    assert out.dtypes.tolist() == [np.dtype("int64")] and out["a"].tolist() == [1, 2]
    with pytest.raises(TypeError, match=r"f\.parquet: column 'b' .*float64"):
        conform_dtypes(frame, dtypes, "f.parquet")


# --- Dask ----------------------------------------------------------------------------------------
@pytest.mark.cudf
def test_to_ddf_of_a_cudf_dataset_is_a_dask_cudf_collection(tmp_path):
    dask_cudf = pytest.importorskip("dask_cudf")

    path = write_files(tmp_path / "raw")
    ddf = tl.Dataset(path, device="cuda", part_size=1500).to_ddf(["id", "s", "day"])
    assert isinstance(ddf, dask_cudf.DataFrame)
    expected = tl.Dataset(path, device="cpu", part_size=1500).compute()[["id", "s", "day"]]
    assert_same_rows(arrow_of(ddf.compute().reset_index(drop=True)), arrow_of(expected))


@pytest.mark.cudf
def test_a_dask_cudf_dataframe_is_a_source_on_either_device():
    import cudf

    dask_cudf = pytest.importorskip("dask_cudf")

    frame = pd.DataFrame({"c": ["a", "b", None, "a", "c", "a"], "x": [1.0, 2.0, None, 4.0, 5.0, 6.0]})
    ddf = dask_cudf.from_cudf(cudf.from_pandas(frame), npartitions=3)
    on_gpu = tl.Dataset(ddf, device="cuda")
    assert on_gpu.npartitions == 3 and type(on_gpu.read_partition(1)).__module__.startswith("cudf")
    assert on_gpu.to_ddf() is ddf
    on_cpu = tl.Dataset(ddf, device="cpu")
    assert isinstance(on_cpu.read_partition(0), pd.DataFrame) and isinstance(on_cpu.meta(), pd.DataFrame)
    wf = tl.Workflow(["c"] >> ops.Categorify(), progress=False).fit(on_gpu)
    ids = wf.transform(on_gpu).compute()["c"].to_arrow().to_pylist()
    assert ids == [3, 4, 1, 3, 5, 3]  # null 1, then by descending frequency (a: 3 times), ties by value
    transformed = wf.transform(ddf)  # a Dask-cuDF DataFrame in, one out
    assert isinstance(transformed, dask_cudf.DataFrame)
    assert transformed.compute()["c"].to_arrow().to_pylist() == ids
    import dask.dataframe as dd

    wf_cpu = tl.Workflow(["c"] >> ops.Categorify(), progress=False).fit(tl.Dataset(frame, device="cpu"))
    on_host = wf_cpu.transform(dd.from_pandas(frame, npartitions=2))  # a pandas Dask DataFrame stays on the host
    assert isinstance(on_host.compute(), pd.DataFrame) and on_host.compute()["c"].tolist() == ids


@pytest.mark.cudf
def test_frames_of_either_device_are_moved_to_the_dataset_device():
    import cudf

    frame = pd.DataFrame({"a": [1, 2, 3], "s": ["x", None, "z"]})
    from_gpu = tl.Dataset(cudf.from_pandas(frame), device="cpu", part_size=16)
    assert isinstance(from_gpu.read_partition(0), pd.DataFrame) and isinstance(from_gpu.meta(), pd.DataFrame)
    assert from_gpu.compute()["s"].tolist()[::2] == ["x", "z"]
    from_host = tl.Dataset(frame, device="cuda", part_size=16)
    assert isinstance(from_host.read_partition(0), cudf.DataFrame)
    assert from_host.compute()["a"].to_arrow().to_pylist() == [1, 2, 3]


def expected_criteo_like(frame: pd.DataFrame, freq_threshold: int) -> pd.DataFrame:
    """Categorify(freq_threshold) on ``c`` and FillMissing(0) >> Normalize on ``x``, by hand."""
    counts = frame["c"].value_counts()
    counts = counts[counts >= freq_threshold]
    vocab = sorted(counts.index, key=lambda v: (-counts[v], v))
    ids = {v: i + 3 for i, v in enumerate(vocab)}
    c = [1 if pd.isna(v) else ids.get(v, 2) for v in frame["c"]]
    x = frame["x"].fillna(0).to_numpy(dtype=np.float64)
    return pd.DataFrame({"c": c, "x": (x - x.mean()) / x.std(), "label": frame["label"]})


@pytest.mark.cudf
def test_workflow_on_a_local_cuda_cluster_equals_pandas(tmp_path):
    import distributed

    LocalCUDACluster = pytest.importorskip("dask_cuda").LocalCUDACluster

    rng = np.random.default_rng(1)
    n = 3000
    frame = pd.DataFrame({"c": pd.array(rng.integers(0, 50, n), dtype="Int64"),
                          "x": rng.exponential(3, n), "label": rng.integers(0, 2, n)})
    frame.loc[frame.index % 11 == 0, "c"] = pd.NA
    frame.loc[frame.index % 13 == 0, "x"] = np.nan
    raw = str(tmp_path / "raw")
    os.makedirs(raw)
    table = pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(None)
    for k, start in enumerate(range(0, n, 1000)):
        pq.write_table(table.slice(start, 1000), os.path.join(raw, f"part{k}.parquet"), row_group_size=250)
    graph = (["c"] >> ops.Categorify(freq_threshold=55)) + (["x"] >> ops.FillMissing(0) >> ops.Normalize())
    wf = tl.Workflow(graph + ["label"], progress=False)
    out = str(tmp_path / "out")
    with LocalCUDACluster(n_workers=1, dashboard_address=None) as cluster, distributed.Client(cluster):
        dataset = tl.Dataset(raw, device="cuda", part_size=8000)
        assert dataset.npartitions > 4  # a tree of merges, on the cluster's worker
        wf.fit(dataset)
        wf.transform(dataset).to_parquet(out, progress=False)
    result = pd.read_parquet(out)
    expected = expected_criteo_like(frame, 55)
    assert result["c"].tolist() == expected["c"].tolist()
    assert result["label"].tolist() == expected["label"].tolist()
    np.testing.assert_allclose(result["x"].to_numpy(np.float64), expected["x"], rtol=1e-6, atol=1e-5)  # float32 out


@pytest.mark.cudf
def test_arrow_schema_of_a_cudf_frame_with_an_index_names_only_its_columns():
    import cudf

    from tabloader import backend

    dask_cudf = pytest.importorskip("dask_cudf")
    frame = pd.DataFrame({"a": [1, 2, 3], "s": ["x", None, "z"]}, index=pd.Index([7, 9, 11], name="k"))
    want = pa.Schema.from_pandas(frame, preserve_index=False).names
    assert want == ["a", "s"]
    assert backend.frame_arrow_schema(cudf.from_pandas(frame)).names == want
    assert backend.frame_arrow_schema(dask_cudf.from_cudf(cudf.from_pandas(frame), npartitions=2)).names == want


@pytest.mark.cudf
def test_a_key_column_pandas_wrote_as_the_index_is_a_column_on_the_gpu_too(tmp_path):
    """Files pandas wrote after ``set_index`` (or a groupby) record their key column as the
    index: cuDF moves such a column into the index even without ``use_pandas_metadata``; the
    dataset gives it as a column on both devices, with the same rows."""
    for i, users in enumerate(([7, 2, 9], [4, 8, 5])):  # not ranges: pandas writes those as metadata only
        pd.DataFrame({"user": users, "x": np.arange(len(users), dtype="float32")}).set_index("user").to_parquet(
            tmp_path / f"part_{i}.parquet")
    on_cpu, on_gpu = tl.Dataset(str(tmp_path), device="cpu"), tl.Dataset(str(tmp_path), device="cuda")
    assert on_gpu.schema.column_names == on_cpu.schema.column_names == ["x", "user"]  # pandas writes the index last
    for i in range(on_cpu.npartitions):
        cpu, gpu = on_cpu.read_partition(i), on_gpu.read_partition(i).to_pandas()
        assert list(gpu.columns) == ["x", "user"] and gpu["user"].tolist() == cpu["user"].tolist() == [7, 2, 9, 4, 8, 5]


@pytest.mark.cudf
def test_dates_and_zoned_timestamps_written_from_the_gpu_keep_their_types(tmp_path):
    """cuDF holds dates as timestamps and its writer would write them so, and zoned timestamps
    without their zone (or as naive beside a naive one): such a dataset is written from the
    host, and pyarrow reads the types and rows the CPU writes."""
    table = pa.table({"day": pa.array([0, 19000, None], pa.date32()),
                      "at": pa.array([0, 10**15, 2 * 10**15], pa.timestamp("us", tz="Europe/Berlin")),
                      "naive": pa.array([1, 2, 3], pa.timestamp("ms")), "x": [1.0, 2.0, 3.0]})
    pq.write_table(table, tmp_path / "in.parquet")
    outputs = {}
    for device in ("cpu", "cuda"):
        outputs[device] = str(tmp_path / device)
        tl.Dataset(str(tmp_path / "in.parquet"), device=device).to_parquet(outputs[device], progress=False)
    gpu, cpu = pq.read_table(outputs["cuda"]), pq.read_table(outputs["cpu"])
    assert gpu.schema.field("day").type == pa.date32() and gpu.schema.field("at").type.tz == "Europe/Berlin"
    assert_same_rows(gpu, cpu)


def test_the_host_schema_of_a_gpu_meta_keeps_dates_as_dates():
    """What cuDF's meta holds for a date column (``datetime64[s]``) is written as the date the
    dataset's schema records, with the host writer's types for the rest."""
    import pandas as pd

    from tabloader.dataset.writing import _host_arrow_schema, _written_from_the_host
    from tabloader.schema import ColumnSchema, Schema

    schema = Schema([ColumnSchema("day", "date32[day]"), ColumnSchema("at", "datetime64[us, UTC]"),
                     ColumnSchema("naive", "datetime64[us]"), ColumnSchema("x", "float64")])
    meta = pd.DataFrame({"day": pd.Series([], dtype="datetime64[s]"),
                         "at": pd.Series([], dtype=pd.DatetimeTZDtype("us", "UTC")),
                         "naive": pd.Series([], dtype="datetime64[us]"), "x": pd.Series([], dtype="float64")})
    arrow_schema = _host_arrow_schema(meta, schema)
    assert [str(f.type) for f in arrow_schema] == ["date32[day]", "timestamp[us, tz=UTC]", "timestamp[us]", "double"]
    pandas_types = {c["name"]: c["pandas_type"] for c in arrow_schema.pandas_metadata["columns"]}
    assert pandas_types["day"] == "date"  # pandas reads the date back as a date, as from the CPU's files
    assert _written_from_the_host(meta, schema) == ["day", "at"]  # naive timestamps: cuDF's writer
    assert _written_from_the_host(meta[["naive", "x"]], schema) == []
