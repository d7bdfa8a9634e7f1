"""benchmarks/multihot.py runs end to end on a few rows: the three systems' outputs (list
lengths, nulls, every id) are checked to agree by the script, and a disagreement is refused."""

from __future__ import annotations

import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))


def test_multihot_benchmark_runs_and_the_systems_agree(tmp_path, capsys):
    pytest.importorskip("polars")
    import multihot

    multihot.main(["--rows", "6000", "--files", "2", "--repeat", "1", "--data", str(tmp_path / "data"),
                   "--work", str(tmp_path / "work")])
    out = capsys.readouterr().out
    assert "outputs agree on tags, genres (3 systems)" in out
    for system in ("tabloader", "pandas", "polars"):
        assert f"| {system}" in out
    assert not os.path.exists(tmp_path / "work")  # outputs removed once measured


def test_outputs_that_differ_in_one_id_are_refused(tmp_path):
    import multihot

    data = multihot.write_data(str(tmp_path / "data"), 2000, 1)
    for system in ("tabloader", "pandas"):
        multihot.RUNNERS[system](data, str(tmp_path / system), 2)
    path = multihot.data_files(str(tmp_path / "pandas"))[0]
    table = pq.read_table(path)
    tags = table.column("tags").combine_chunks()
    first = next(i for i, row in enumerate(tags.to_pylist()) if row)
    rows = tags.to_pylist()
    rows[first][0] += 1
    pq.write_table(table.set_column(table.schema.get_field_index("tags"), "tags", pa.array(rows, tags.type)), path)
    with pytest.raises(AssertionError, match="pandas differs from tabloader on tags's ids"):
        multihot.check_agreement({"tabloader": str(tmp_path / "tabloader"), "pandas": str(tmp_path / "pandas")})
