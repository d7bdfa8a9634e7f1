"""Arrow data in memory as a Dataset: a pyarrow Table or RecordBatch, a polars DataFrame, a DuckDB
result. Each must read as the same columns written to a parquet file and read back do (dtypes and
values), with the values compared to what the library itself holds."""

from __future__ import annotations

import datetime

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tabloader as tl
from tabloader import backend, ops
from tabloader.backend import STRING_DTYPE


def mixed_table(n: int = 50) -> pa.Table:
    rng = np.random.default_rng(3)
    return pa.table({
        "id": pa.array(np.arange(n), pa.int64()),
        "count": pa.array([None if i % 7 == 0 else int(i) for i in range(n)], pa.int32()),
        "score": pa.array(rng.random(n)),
        "flag": pa.array([None if i % 5 == 0 else i % 2 == 0 for i in range(n)]),
        "city": pa.array([["berlin", "paris", None][i % 3] for i in range(n)]).dictionary_encode(),
        "day": pa.array([datetime.date(2024, 1, 1 + i % 28) for i in range(n)], pa.date32()),
        "items": pa.array([list(range(i % 4)) for i in range(n)], pa.list_(pa.int64())),
    })


def test_a_table_reads_as_the_same_columns_from_a_parquet_file(tmp_path, device):
    table = mixed_table()
    pq.write_table(table, tmp_path / "same.parquet")
    in_memory = tl.Dataset(table, part_size=512, device=device)
    from_file = tl.Dataset(str(tmp_path / "same.parquet"), device=device)
    assert in_memory.npartitions > 1
    pd.testing.assert_series_equal(in_memory.meta().dtypes, from_file.meta().dtypes)
    got = backend.to_host(in_memory.compute())
    pd.testing.assert_frame_equal(got, backend.to_host(from_file.compute()))
    for name in table.column_names:  # against arrow's own values (the dictionary decoded)
        values = [as_python(v) for v in got[name].tolist()]
        expected = table.column(name).to_pylist()
        assert values == expected or name == "items" and [list(v) for v in values] == expected, name


def as_python(value):
    """A value of a partition brought to the host as arrow's ``to_pylist`` gives it: None for a
    null, a date for a date (cuDF has no date type: its dates are datetime64[s] at midnight)."""
    if pd.api.types.is_scalar(value) and pd.isna(value):
        return None
    return value.date() if isinstance(value, pd.Timestamp) else value


def test_a_record_batch_and_selected_columns():
    batch = mixed_table().to_batches()[0]
    ds = tl.Dataset(batch, columns=["score", "id"])
    assert list(ds.compute().columns) == ["score", "id"]
    assert ds.compute()["id"].tolist() == list(range(50))
    with pytest.raises(KeyError, match=r"columns=\['nope'\] are not in the Arrow table"):
        tl.Dataset(batch, columns=["nope"])


def test_a_polars_frame_with_categoricals_and_string_views():
    pl = pytest.importorskip("polars")  # not on the GPU machines' image
    frame = pl.DataFrame({"user": pl.Series(["a", "b", None, "a"], dtype=pl.Categorical),
                          "name": ["x", None, "z", "x"], "n": [1, 2, None, 4]})
    assert pa.table(frame).schema.field("name").type == pa.string_view()  # what this test is about
    ds = tl.Dataset(frame)
    assert [str(d) for d in ds.meta().dtypes] == [str(STRING_DTYPE), str(STRING_DTYPE), "Int64"]
    got = ds.compute()
    for name in frame.columns:
        assert [None if pd.isna(v) else v for v in got[name].tolist()] == frame[name].to_list(), name


def as_is(col):
    return col


def test_a_duckdb_result_feeds_a_workflow_and_the_loader():
    """DuckDB's ``i * 0.5`` is a DECIMAL: the loader refuses it, saying to cast it to a float
    first, and the cast it suggests works."""
    duckdb = pytest.importorskip("duckdb")  # not on the GPU machines' image
    result = duckdb.sql("SELECT i AS id, 'c' || (i % 3) AS city, i * 0.5 AS x FROM range(20) t(i)")
    assert pa.types.is_decimal(pa.table(result).schema.field("x").type)
    with pytest.raises(TypeError, match=r"column 'x' has dtype 'decimal128\(21, 1\)'.*cast it to a float"):
        tl.Loader(tl.Dataset(result), 6, continuous=["x"])
    graph = ["id"] + (["x"] >> ops.LambdaOp(as_is, dtype="float64")) + (["city"] >> ops.Categorify())
    out = tl.Workflow(graph, progress=False).fit_transform(tl.Dataset(result))
    rows = pd.concat([pd.DataFrame(f) for f, _ in tl.Loader(out, 6, categorical=["id", "city"], continuous=["x"],
                                                              shuffle=False)])
    assert rows["id"].tolist() == list(range(20)) and rows["x"].tolist() == [i * 0.5 for i in range(20)]
    # Categorify's ids: one per city, in the order of their counts (the encoding contract's)
    assert rows.groupby("city")["id"].apply(lambda ids: sorted(i % 3 for i in ids)).map(len).sum() == 20
    assert rows.groupby(rows["id"] % 3)["city"].nunique().tolist() == [1, 1, 1]


def test_a_polars_array_column_is_a_list_column_of_its_width():
    pl = pytest.importorskip("polars")  # not on the GPU machines' image
    frame = pl.DataFrame({"emb": [[1.0, 2.0], [3.0, 4.0]]}, schema={"emb": pl.Array(pl.Float32, 2)})
    ds = tl.Dataset(frame)
    assert ds.schema["emb"].is_list and ds.schema["emb"].properties["value_count"] == {"min": 2, "max": 2}
    assert [list(v) for v in ds.compute()["emb"]] == [[1.0, 2.0], [3.0, 4.0]]


def test_nested_columns_are_refused_naming_the_column():
    table = pa.table({"id": [1], "address": pa.array([{"street": "x"}])})
    with pytest.raises(TypeError, match=r"the Arrow table: column 'address' has type struct"):
        tl.Dataset(table)
