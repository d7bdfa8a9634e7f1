"""benchmarks/parquet_write.py runs end to end on a few rows: every system's files are checked
against the frame it wrote (by the script), and the table names each system."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))


def test_parquet_write_benchmark_runs(tmp_path, capsys):
    pytest.importorskip("polars")
    import parquet_write

    parquet_write.main(["--rows", "20000", "--repeat", "1", "--work", str(tmp_path)])
    out = capsys.readouterr().out
    for system in ("tabloader", "pandas", "polars"):
        assert f"| dense      | {system}" in out and f"| counts     | {system}" in out
    assert os.listdir(tmp_path) == []  # each output removed once measured


def test_a_wrong_output_is_refused(tmp_path):
    import parquet_write

    frame = parquet_write.preprocessed_frame(100, "dense")
    frame.iloc[:50].to_parquet(tmp_path / "half.parquet")
    with pytest.raises(AssertionError, match="other values in column 'C1'"):
        parquet_write.check_written(str(tmp_path / "half.parquet"), frame, "half")
