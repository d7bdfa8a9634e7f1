"""A partition of several parquet files is read by one cuDF call (issue 13: the loader's first epoch).

On the GPU a partition spans many files (1/64 of the GPU's memory: ~5 files of the loader
benchmark); reading them one call each cost a libcudf call per file and a copy of every column
to concatenate them. ``ParquetSource`` cuts a partition's pieces into runs that one call reads
(files of one parquet schema on the local disk, no hive keys) and ``backend.read_parquet_files``
reads a run. The CPU tests check which pieces go together and the rows a run reads (against
pyarrow by hand); the ``gpu`` ones count cuDF's calls and compare the frames with the files.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tabloader as tl
from tabloader import backend
from tabloader.dataset.files import FileSet
from tabloader.dataset.parquet import ParquetSource, _merge_pieces, read_together

ROWS, GROUP = 30, 10  # rows per file, rows per row group


def write(folder, name, first, reverse=False, extra=None):
    """``ROWS`` rows (ids from ``first``) in row groups of ``GROUP``, written by pyarrow without
    pandas' metadata; ``reverse`` stores the columns in the other order."""
    ids = np.arange(first, first + ROWS, dtype=np.int64)
    columns = {"id": ids, "x": (ids * 0.5).astype(np.float32)}
    if reverse:
        columns = dict(reversed(list(columns.items())))
    os.makedirs(folder, exist_ok=True)
    pq.write_table(pa.table(columns), os.path.join(folder, name), row_group_size=GROUP)


def runs_of(source, partition=0):
    """The files of each run of a partition's pieces."""
    runs = read_together(_merge_pieces(source.partitions[partition]), source._reads_together)
    return [[os.path.basename(piece.path) for piece in run] for run in runs]


def test_files_of_one_schema_are_read_together_and_a_schema_change_starts_a_new_run(tmp_path):
    for i, name in enumerate(["a.parquet", "b.parquet", "c.parquet", "d.parquet"]):
        write(tmp_path, name, i * ROWS, reverse=name == "c.parquet")  # c: the same columns, stored in another order
    source = ParquetSource(FileSet.find(str(tmp_path)), part_size=10**9)
    assert source.npartitions == 1
    assert runs_of(source) == [["a.parquet", "b.parquet"], ["c.parquet"], ["d.parquet"]]


def test_files_in_hive_folders_are_read_one_by_one(tmp_path):
    """Each file's keys are added to its own rows: no run spans two files."""
    for day in (1, 2):
        write(tmp_path / f"day={day}", "part.parquet", day * ROWS)
    source = ParquetSource(FileSet.find(str(tmp_path)), part_size=10**9)
    assert runs_of(source) == [["part.parquet"], ["part.parquet"]]


def test_read_parquet_files_reads_the_row_groups_of_each_file_in_order(tmp_path, device):
    write(tmp_path, "a.parquet", 0)
    write(tmp_path, "b.parquet", 100)
    paths = [str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]
    frame = backend.to_host(backend.read_parquet_files(paths, ["x", "id"], [[2, 0], [1]], device=device))
    by_hand = pd.concat([pq.ParquetFile(paths[0]).read_row_group(2).to_pandas(),
                         pq.ParquetFile(paths[0]).read_row_group(0).to_pandas(),
                         pq.ParquetFile(paths[1]).read_row_group(1).to_pandas()], ignore_index=True)[["x", "id"]]
    pd.testing.assert_frame_equal(frame, by_hand, check_dtype=False)
    assert frame.index.tolist() == list(range(len(by_hand)))


@pytest.fixture
def cudf_reads(monkeypatch):
    """The paths of every ``cudf.read_parquet`` call (a spy: each call still reads)."""
    cudf = pytest.importorskip("cudf")
    calls = []
    real = cudf.read_parquet

    def counted(paths, *args, **kwargs):
        calls.append([os.path.basename(p) for p in ([paths] if isinstance(paths, str) else paths)])
        return real(paths, *args, **kwargs)

    monkeypatch.setattr(cudf, "read_parquet", counted)
    return calls


@pytest.mark.gpu
def test_a_cudf_partition_of_several_files_is_one_read_with_the_rows_of_the_files(tmp_path, cudf_reads):
    for i, name in enumerate(["a.parquet", "b.parquet", "c.parquet", "d.parquet"]):
        write(tmp_path, name, i * ROWS, reverse=name == "d.parquet")
    dataset = tl.Dataset(str(tmp_path), device="cuda", part_size=10**9)
    frame = dataset.read_partition(0).to_pandas()
    assert cudf_reads == [["a.parquet", "b.parquet", "c.parquet"], ["d.parquet"]]
    ids = np.arange(4 * ROWS)
    by_hand = pd.DataFrame({"id": ids, "x": (ids * 0.5).astype(np.float32)})
    pd.testing.assert_frame_equal(frame, by_hand)


@pytest.mark.gpu
def test_the_cudf_loader_reads_each_partition_of_several_files_once(tmp_path, cudf_reads):
    """Every id exactly once per epoch, one cuDF read per partition (two partitions here)."""
    for i in range(4):
        write(tmp_path, f"part{i}.parquet", i * ROWS)
    row_group_bytes = ParquetSource(FileSet.find(str(tmp_path)), part_size=1).partitions[0][0].nbytes
    dataset = tl.Dataset(str(tmp_path), device="cuda", part_size=2 * ROWS // GROUP * row_group_bytes)  # two files each
    assert dataset.npartitions == 2
    loader = tl.Loader(dataset, batch_size=16, categorical=["id"], continuous=["x"], device="cuda", seed=0,
                       buffer_size=ROWS * 16)
    ids = np.concatenate([backend.to_host(features["id"]) for features, _ in loader])
    assert sorted(ids.tolist()) == list(range(4 * ROWS))
    assert sorted(map(sorted, cudf_reads)) == [["part0.parquet", "part1.parquet"], ["part2.parquet", "part3.parquet"]]


@pytest.mark.gpu
def test_cudf_partitions_are_packed_into_chunks_without_slicing_the_frame(tmp_path, monkeypatch):
    """Slicing a cuDF frame makes libcudf count the nulls of each column's slice (parquet's
    optional columns have a validity mask even without a null): a wait for the device per
    column. The chunk buffer slices the columns' arrays instead. Chunks of 25 rows cut every
    partition (two files, 60 rows) in several places."""
    plc = pytest.importorskip("pylibcudf")
    for i in range(4):
        write(tmp_path, f"part{i}.parquet", i * ROWS)
    row_group_bytes = ParquetSource(FileSet.find(str(tmp_path)), part_size=1).partitions[0][0].nbytes
    dataset = tl.Dataset(str(tmp_path), device="cuda", part_size=2 * ROWS // GROUP * row_group_bytes)
    loader = tl.Loader(dataset, batch_size=8, categorical=["id"], continuous=["x"], device="cuda", seed=1,
                       buffer_size=25 * 12)  # 12 bytes a row: 25 rows a chunk
    slices = []
    real = plc.copying.slice
    monkeypatch.setattr(plc.copying, "slice", lambda *args, **kwargs: slices.append(1) or real(*args, **kwargs))
    batches = [(backend.to_host(f["id"]), backend.to_host(f["x"])) for f, _ in loader]
    assert slices == []
    ids, xs = np.concatenate([i for i, _ in batches]), np.concatenate([x for _, x in batches])
    assert sorted(ids.tolist()) == list(range(4 * ROWS))
    assert xs.tolist() == (ids * 0.5).astype(np.float32).tolist()  # each row's values stay together


@pytest.mark.gpu
def test_float_nulls_of_a_cudf_partition_come_out_as_nan(tmp_path):
    ids = np.arange(40)
    x = pa.array([None if i % 3 == 0 else float(i) for i in ids], pa.float32())
    pq.write_table(pa.table({"id": ids, "x": x}), str(tmp_path / "a.parquet"), row_group_size=GROUP)
    loader = tl.Loader(tl.Dataset(str(tmp_path), device="cuda"), batch_size=16, categorical=["id"], continuous=["x"],
                       device="cuda", seed=2, buffer_size=15 * 12)  # chunks of 15 rows cut the partition
    got = {int(i): float(v) for f, _ in loader for i, v in zip(backend.to_host(f["id"]), backend.to_host(f["x"]))}
    assert sorted(got) == ids.tolist()
    assert all(np.isnan(got[i]) if i % 3 == 0 else got[i] == i for i in got)
