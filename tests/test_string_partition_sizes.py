"""Partitions of parquet string columns are planned by their decoded size: a dictionary-encoded
column of short ids (raw Criteo's hex strings) is 4-30x smaller in the file than in memory, and
counting it by its encoded size made partitions several times ``part_size`` (1M-row partitions
of 450 MB at the default 128MB for the Criteo strings)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import tabloader as tl


def test_partitions_of_dictionary_encoded_hex_ids_stay_near_part_size(tmp_path):
    rng = np.random.default_rng(0)
    pool = np.array([f"{v:08x}" for v in rng.choice(2**32, 50, replace=False)], dtype=object)
    rows = 160_000
    table = pa.table({"C1": pa.array(pool[rng.integers(0, 50, rows)], pa.string()),
                      "I1": rng.integers(0, 100, rows)})
    pq.write_table(table, tmp_path / "part_0.parquet", row_group_size=20_000)  # pyarrow: no pandas metadata
    assert pq.ParquetFile(tmp_path / "part_0.parquet").metadata.row_group(0).column(0).total_uncompressed_size < 40_000

    part_size = 1_000_000  # bytes: about 40K rows of 16 (string: offset + 8 characters) + 9 (nullable int64) bytes
    dataset = tl.Dataset(str(tmp_path), part_size=part_size)
    sizes = dataset.partition_sizes()
    assert sum(sizes) == rows and len(sizes) == 4  # counted by their encoded size: 2 partitions of twice part_size
    for i in range(len(sizes)):
        frame = dataset.read_partition(i)
        assert frame["C1"].tolist() == table.column("C1").to_pylist()[sum(sizes[:i]):sum(sizes[:i + 1])]
        assert frame.memory_usage(deep=True, index=False).sum() <= 1.25 * part_size


def test_partitions_of_list_columns_of_short_strings_stay_near_part_size(tmp_path):
    """Multi-hot tags (lists of 0-6 strings drawn from 50): each element counts an offset and
    its characters, each row its list's offset; by their encoded size (a few bits per element)
    a partition held 4x part_size."""
    rng = np.random.default_rng(1)
    pool = np.array([f"tag-{v:04d}" for v in range(50)], dtype=object)
    rows = 120_000
    lengths = rng.integers(0, 7, rows)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    tags = pa.ListArray.from_arrays(pa.array(offsets), pa.array(pool[rng.integers(0, 50, lengths.sum())]))
    pq.write_table(pa.table({"tags": tags}), tmp_path / "part_0.parquet", row_group_size=5_000)
    part_size = 1_000_000  # about 20K rows of 3 elements of (4 + 8) bytes and a 4-byte list offset
    dataset = tl.Dataset(str(tmp_path), part_size=part_size)
    sizes = dataset.partition_sizes()
    assert sum(sizes) == rows and len(sizes) >= 4
    for i in range(len(sizes)):
        decoded = dataset.read_partition_arrow(i).nbytes
        assert 0.4 * part_size <= decoded <= 1.25 * part_size, (i, decoded)


def test_statistics_of_text_that_is_not_utf8_still_size_the_partitions(tmp_path):
    """Hive and Impala may leave Latin-1 bytes in a string column: its min/max statistics are not
    UTF-8, and only their byte lengths are needed; the other columns read as they are."""
    latin1 = pa.array([b"ok", b"caf\xe9", b"ok"], pa.binary()).view(pa.string())
    pq.write_table(pa.table({"id": [1, 2, 3], "c": latin1}), tmp_path / "part-0.parquet")
    assert tl.Dataset(str(tmp_path)).num_rows == 3
    assert tl.Dataset(str(tmp_path), columns=["id"]).compute()["id"].tolist() == [1, 2, 3]
    assert tl.Dataset(str(tmp_path)).read_partition_arrow(0).column("c").cast(pa.binary()).to_pylist()[1] == b"caf\xe9"
