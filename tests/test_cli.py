"""The command line, called in-process: `tabloader inspect` and argument errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tabloader import cli
from tabloader.schema import ColumnSchema, Schema, Tags


@pytest.fixture
def data_dir(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    df = pd.DataFrame({"user_id": np.arange(50, dtype=np.int64), "rating": np.linspace(0, 5, 50),
                       "genres": [[i % 3, i % 5] for i in range(50)]})
    for i, part in enumerate(np.array_split(np.arange(50), 2)):
        pq.write_table(pa.Table.from_pandas(df.iloc[part], preserve_index=False), d / f"part_{i}.parquet")
    Schema([ColumnSchema("user_id", "int64", {Tags.CATEGORICAL, Tags.USER}, {"cardinality": 50}),
            ColumnSchema("rating", "float64", {Tags.TARGET})]).save(str(d / "_schema.json"))
    return d


def test_inspect_prints_columns(data_dir, capsys):
    assert cli.main(["inspect", str(data_dir)]) == 0
    out, err = capsys.readouterr()
    assert "rows: 50" in out and "partitions: 1" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert list(lines) == ["user_id", "rating", "genres"]
    assert "int64" in lines["user_id"] and "categorical,user" in lines["user_id"]
    assert "cardinality=50" in lines["user_id"]
    assert "float64" in lines["rating"] and "target" in lines["rating"]
    assert "list<int64>" in lines["genres"]
    assert err == ""


def test_inspect_single_file_and_csv(tmp_path, capsys):
    pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]}).to_csv(tmp_path / "t.csv", index=False)
    assert cli.main(["inspect", str(tmp_path / "t.csv")]) == 0
    out = capsys.readouterr().out
    assert "rows: 3" in out
    assert [line.split()[:2] for line in out.splitlines() if line.startswith("  ")] == [["a", "int64"],
                                                                                      ["b", "string"]]


def test_inspect_missing_path(tmp_path, capsys):
    assert cli.main(["inspect", "/nonexistent"]) == 2
    out, err = capsys.readouterr()
    assert "/nonexistent" in err and "error" in err
    assert out == ""
    missing = str(tmp_path / "nope")
    assert cli.main(["inspect", missing]) == 2
    assert missing in capsys.readouterr().err


def test_inspect_not_parquet(tmp_path, capsys):
    bad = tmp_path / "bad.parquet"
    bad.write_text("hello")
    assert cli.main(["inspect", str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err


def test_inspect_empty_directory(tmp_path, capsys):
    assert cli.main(["inspect", str(tmp_path)]) == 2
    assert str(tmp_path) in capsys.readouterr().err


@pytest.mark.parametrize("argv, expected", [
    ([], "required"),
    (["frobnicate"], "invalid choice"),
    (["inspect"], "path"),
    (["inspect", "a", "b"], "unrecognized arguments"),
    (["synth", "criteo", "out", "--rows", "0"], "must be >= 1"),
    (["synth", "criteo", "out", "--rows", "many"], "not a number"),
    (["synth", "imagenet", "out"], "invalid choice"),
    (["demo", "--files", "-3"], "must be >= 1"),
    (["demo", "--seed", "x"], "invalid int"),
])
def test_bad_arguments_exit_with_code_2(argv, expected, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: tabloader" in err and expected in err


def test_help_exits_with_code_0(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in ("demo", "synth", "inspect"):
        assert command in out


def test_parser_knows_every_command():
    parser = cli.build_parser()
    assert set(cli.COMMANDS) <= set(parser._subparsers._group_actions[0].choices)
