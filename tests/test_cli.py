"""The command line, called in-process: `tabloader inspect` and argument errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tabloader as tl
from tabloader import cli, synthetic
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
    (["synth", "criteo", "out", "--rows", "many"], "argument --rows: expected a whole number"),
    (["synth", "imagenet", "out"], "invalid choice"),
    (["demo", "--batch-size", "-3"], "must be >= 1"),
    (["synth", "criteo", "out", "--rows", "10", "--files", "1e18"], "argument --files: must be <= --rows (10), got"),
    (["fit", "spec.yaml", "data"], "required"),
    (["transform", "wf"], "required"),
    (["transform", "wf", "data", "out", "--output-files", "0"], "must be >= 1"),
    (["inspect", "x", "--", "y"], "only taken by `bench`"),
    (["demo", "--seed", "x"], "argument --seed: expected a whole number"),
    (["demo", "--device", "gpu"], "argument --device: expected auto, cpu, cuda or cuda:N, got 'gpu'"),
])
def test_bad_arguments_exit_with_code_2(argv, expected, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: tabloader" in err and expected in err


def _typed_options():
    """(command, option) for every option of every command whose value is converted (numbers, devices)."""
    commands = cli.build_parser()._subparsers._group_actions[0].choices
    return [(name, action.option_strings[-1]) for name, sub in commands.items()
            for action in sub._actions if action.option_strings and action.type is not None]


def test_every_numeric_option_is_checked():
    assert {(c, o) for c, o in _typed_options()} >= {
        ("demo", "--rows"), ("demo", "--seed"), ("demo", "--batch-size"), ("demo", "--epochs"), ("demo", "--threads"),
        ("synth", "--rows"), ("synth", "--files"), ("synth", "--seed"),
        ("transform", "--output-files"), ("transform", "--seed")}


POSITIONALS = {"synth": ["criteo", "out"], "fit": ["spec.yaml", "data", "out"], "transform": ["wf", "data", "out"],
               "inspect": ["path"], "demo": [], "bench": []}


@pytest.mark.parametrize("command, option", _typed_options())
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1.5", "1e-3", "-1", "1e30", "ten", ""])
def test_bad_numbers_are_one_line_errors_naming_the_option(command, option, value, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main([command, *POSITIONALS[command], f"{option}={value}"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith(f"tabloader {command}: error: argument {option}: "), err
    assert "Traceback" not in err


@pytest.mark.parametrize("text, expected", [("1000", 1000), ("1e6", 1_000_000), ("2.5E3", 2500), ("1_000", 1000),
                                            (" 7 ", 7), ("4096.0", 4096), (str(2**63 - 1), 2**63 - 1)])
def test_whole_numbers_are_accepted_as_the_docs_write_them(text, expected):
    args = cli.build_parser().parse_args(["synth", "criteo", "out", "--rows", text, "--seed", text])
    assert (args.rows, args.seed) == (expected, expected)
    assert type(args.rows) is int


def test_seeds_start_at_zero_and_counts_at_one(capsys):
    parser = cli.build_parser()
    assert parser.parse_args(["transform", "wf", "data", "out", "--seed", "0"]).seed == 0
    assert parser.parse_args(["demo", "--seed", "0"]).seed == 0
    with pytest.raises(SystemExit):
        parser.parse_args(["synth", "criteo", "out", "--files", "0"])
    assert "argument --files: must be >= 1, got 0" in capsys.readouterr().err


def test_threads_are_at_most_the_cpus(capsys):
    cpus = os.cpu_count()
    assert cli.build_parser().parse_args(["demo", "--threads", str(cpus)]).threads == cpus
    with pytest.raises(SystemExit) as info:
        cli.main(["demo", "--threads", str(cpus + 1)])  # torch would start them, and run out of memory
    assert info.value.code == 2
    assert f"argument --threads: must be <= {cpus} (the CPUs of this machine)" in capsys.readouterr().err


def test_library_messages_say_the_command_s_flags(tmp_path, capsys):
    out = str(tmp_path / "seed=3" / "out")  # a hive-style folder: a path, not a keyword to translate
    assert cli.main(["synth", "criteo", out, "--rows", "100"]) == 0
    capsys.readouterr()
    assert cli.main(["synth", "criteo", out, "--rows", "100"]) == 2  # the library raises "pass overwrite=True"
    err = capsys.readouterr().err
    assert err == f"tabloader synth: error: {out} already exists; pass --overwrite to replace it\n"
    assert cli.main(["synth", "criteo", out, "--rows", "100", "--overwrite"]) == 0


def _write_twice(out: str) -> None:
    for _ in range(2):
        tl.Dataset(pd.DataFrame({"a": [1]})).to_parquet(out, progress=False)


@pytest.mark.parametrize("command, call, expected", [
    ("transform", lambda out: tl.Dataset(pd.DataFrame({"a": [1]})).to_parquet(out, output_files=0),
     "--output-files must be >= 1, got 0"),
    ("transform", _write_twice, "already exists; pass --overwrite to replace it"),
    ("fit", lambda out: tl.Workflow(["a"]).fit(tl.Dataset(pd.DataFrame({"a": [1]}))).save(out, overwrite=False)
     if os.makedirs(out) is None else None, "already exists; pass --overwrite to replace it"),
    ("synth", lambda out: synthetic.write_criteo(out, 10, num_files=0), "--files must be >= 1, got 0"),
])
def test_keyword_names_in_library_errors_become_flags(command, call, expected, tmp_path):
    # Messages the library really raises, as the command prints them.
    with pytest.raises(Exception) as info:
        call(str(tmp_path / "out"))
    flags = cli._flags_of_keywords(cli.build_parser(), command)
    assert expected in cli._in_flags(str(info.value), flags)


def test_write_errors_name_the_destination(tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    out = str(tmp_path / "a-file" / "out")
    assert cli.main(["synth", "criteo", out, "--rows", "100"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tabloader synth: error: [Errno 20] cannot write {out}: Not a directory; ")
    assert len(err.splitlines()) == 1


def test_help_exits_with_code_0(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in ("demo", "synth", "fit", "transform", "inspect", "bench"):
        assert command in out


def test_parser_knows_every_command():
    parser = cli.build_parser()
    assert set(cli.COMMANDS) <= set(parser._subparsers._group_actions[0].choices)


# --- fit / transform / inspect a workflow -------------------------------------------------------
SPEC = """
groups:
  - tag: categorical
    ops:
      - Categorify: {freq_threshold: 2}
  - columns: [I1, I2]
    ops: [FillMissing: {fill_val: 0}, Clip: {min_value: 0}, LogOp, Normalize]
passthrough: [label]
"""


@pytest.fixture
def criteo_dir(tmp_path):
    from tabloader import synthetic

    return synthetic.write_criteo(str(tmp_path / "raw"), 3000, num_files=2, num_categorical=3, num_continuous=2)


def test_fit_transform_inspect_yaml(criteo_dir, tmp_path, capsys):
    import json

    (tmp_path / "spec.yaml").write_text(SPEC)
    wf_dir, out = tmp_path / "wf", tmp_path / "out"
    assert cli.main(["fit", str(tmp_path / "spec.yaml"), criteo_dir, str(wf_dir), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "fitted on 3,000 rows" in text and (wf_dir / "workflow.json").exists()
    assert cli.main(["fit", str(tmp_path / "spec.yaml"), criteo_dir, str(wf_dir), "--quiet"]) == 2
    assert "--overwrite" in capsys.readouterr().err

    assert cli.main(["transform", str(wf_dir), criteo_dir, str(out), "--output-files", "1", "--shuffle",
                     "--seed", "3", "--quiet"]) == 0
    assert "-> 3,000 rows in 1 file(s)" in capsys.readouterr().out
    raw = pd.read_parquet(criteo_dir)
    got = pd.read_parquet(out)
    assert sorted(got.columns) == sorted(["C1", "C2", "C3", "I1", "I2", "label"])
    assert got["label"].sum() == raw["label"].sum()
    # an independent check of Normalize(LogOp(Clip(FillMissing))) on I1: mean 0, std 1
    assert abs(got["I1"].mean()) < 1e-4 and abs(got["I1"].std(ddof=0) - 1) < 1e-3
    # Categorify: ids of values seen < 2 times are out-of-vocabulary (2); the rest are >= 3
    counts = raw["C3"].value_counts()
    assert (got["C3"].isin([1, 2]).sum() >= (raw["C3"].map(counts) < 2).sum())
    schema = json.loads((out / "_schema.json").read_text())
    assert schema

    assert cli.main(["inspect", str(wf_dir)]) == 0
    text = capsys.readouterr().out
    assert "input schema" in text and "output schema" in text and "fitted statistics" in text
    assert "Categorify on C1, C2, C3" in text and "cardinalities" in text
    mean_line = [line for line in text.splitlines() if line.strip().startswith("I1 ")]
    assert mean_line, text
    assert "cardinality=" in text

    assert cli.main(["inspect", str(out)]) == 0
    assert "rows: 3,000" in capsys.readouterr().out


def test_fit_python_spec(criteo_dir, tmp_path, capsys):
    spec = tmp_path / "wf_spec.py"
    spec.write_text("from tabloader import Workflow, ops\n"
                    "workflow = Workflow((['C1', 'C2'] >> ops.Categorify()) + ['label'])\n")
    assert cli.main(["fit", str(spec), criteo_dir, str(tmp_path / "wf"), "--quiet"]) == 0
    assert "C1" in capsys.readouterr().out
    bad = tmp_path / "bad_spec.py"
    bad.write_text("x = 1\n")
    assert cli.main(["fit", str(bad), criteo_dir, str(tmp_path / "wf2")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "workflow" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("spec, message", [
    ("groups: [{columns: [C1], ops: [Frobnicate]}]", "unknown operator 'Frobnicate'"),
    ("groups: [{columns: [nope], ops: [Categorify]}]", "nope"),
    ("groups: [{tag: user, ops: [Categorify]}]", "no column of the data is tagged 'user'"),
    ("groups: [{columns: [C1], ops: [{Categorify: {frequency: 2}}]}]", "bad arguments for Categorify"),
    ("groups: [{columns: [C1], tag: categorical}]", "exactly one of"),
    ("groups: [C1]\n", "list of mappings"),
    ("colums: [C1]", "unknown key"),
    ("groups: [unclosed", "not valid YAML"),
])
def test_fit_bad_specs(spec, message, criteo_dir, tmp_path, capsys):
    path = tmp_path / "spec.yaml"
    path.write_text(spec)
    assert cli.main(["fit", str(path), criteo_dir, str(tmp_path / "wf")]) == 2
    err = capsys.readouterr().err
    assert message in err and str(path) in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "wf").exists()


def test_fit_spec_with_passthrough_that_is_not_column_names(criteo_dir, tmp_path, capsys):
    path = tmp_path / "spec.yaml"
    path.write_text("passthrough: [1, 2]\n")
    assert cli.main(["fit", str(path), criteo_dir, str(tmp_path / "wf")]) == 2
    err = capsys.readouterr().err
    assert "`passthrough` must be a list of column names" in err and str(path) in err


def test_inspect_describes_any_nested_state_by_its_shape(tmp_path, capsys):
    frame = pd.DataFrame({"c": ["a", "b", "a", "c", None], "g": [1, 1, 2, 1, 1], "x": [1.0, 2.0, 3.0, 4.0, 5.0]})
    graph = (["c", "g"] >> tl.ops.Categorify()) + (["c"] >> tl.ops.JoinGroupby(cont_cols=["x"], stats=["mean"]))
    tl.Workflow(graph, progress=False).fit(frame).save(str(tmp_path / "wf"))
    assert cli.main(["inspect", str(tmp_path / "wf")]) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    sizes = {c: frame[c].nunique() for c in ["c", "g"]}  # 3 and 2 values
    assert f"vocabularies: 2 tables of 2 to 3 rows ({sum(sizes.values())} in all)" in lines
    assert f"stats: 1 table of {sizes['c']} rows" in lines
    # numbers by column, one row each: nulls seen, and ids = padding, null, out-of-vocabulary + the values
    assert lines[lines.index("Categorify on c, g") + 1].split() == ["column", "null_counts", "cardinalities"]
    for col in ["c", "g"]:
        assert [line.split() for line in lines if line.startswith(f"{col} ")][-1] == \
            [col, str(frame[col].isna().sum()), str(3 + sizes[col])]


def test_fit_and_transform_missing_inputs(criteo_dir, tmp_path, capsys):
    (tmp_path / "spec.yaml").write_text(SPEC)
    assert cli.main(["fit", str(tmp_path / "nope.yaml"), criteo_dir, str(tmp_path / "wf")]) == 2
    assert "nope.yaml" in capsys.readouterr().err
    assert cli.main(["fit", str(tmp_path / "spec.txt"), criteo_dir, str(tmp_path / "wf")]) == 2
    capsys.readouterr()
    assert cli.main(["transform", str(tmp_path / "nowf"), criteo_dir, str(tmp_path / "out")]) == 2
    assert "nowf" in capsys.readouterr().err
    # a workflow reading a column the data lacks: named
    assert cli.main(["fit", str(tmp_path / "spec.yaml"), criteo_dir, str(tmp_path / "wf"), "--quiet"]) == 0
    other = tmp_path / "other"
    other.mkdir()
    pd.DataFrame({"C1": [1, 2], "label": [0, 1]}).to_parquet(other / "x.parquet")
    capsys.readouterr()
    assert cli.main(["transform", str(tmp_path / "wf"), str(other), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "C2" in err and str(other) in err


# --- bench ----------------------------------------------------------------------------------------
@pytest.fixture
def fake_benchmarks(tmp_path, monkeypatch):
    d = tmp_path / "benchmarks"
    d.mkdir()
    (d / "_common.py").write_text("")
    (d / "alpha.py").write_text("import sys\nprint('alpha table', sys.argv[1:])\n")
    (d / "beta.py").write_text("import sys\nprint('beta ran')\nsys.exit(3)\n")
    monkeypatch.setattr(cli, "benchmarks_dir", lambda: d)
    return d


def test_bench_lists_and_runs(fake_benchmarks, capfd):
    assert cli.main(["bench", "--list"]) == 0
    assert capfd.readouterr().out.split() == ["alpha", "beta"]
    assert cli.main(["bench", "alpha", "--", "--rows", "10"]) == 0
    out = capfd.readouterr().out
    assert "alpha table ['--rows', '10']" in out
    assert cli.main(["bench"]) == 1
    out, err = capfd.readouterr()
    assert "alpha table" in out and "beta ran" in out and "beta (exit code 3)" in err
    assert cli.main(["bench", "gamma"]) == 2
    assert "unknown benchmark(s) ['gamma']" in capfd.readouterr().err


def test_bench_without_checkout(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "benchmarks_dir", lambda: tmp_path / "missing")
    assert cli.main(["bench"]) == 2
    assert "no benchmark scripts found" in capsys.readouterr().err


def test_bench_finds_the_repository_scripts():
    assert {"loader", "workflow"} <= set(cli.available_benchmarks())


# --- demo -----------------------------------------------------------------------------------------
@pytest.mark.torch
def test_demo_command_prints_report(capfd):
    pytest.importorskip("torch")
    assert cli.main(["demo", "--rows", "4000", "--batch-size", "512", "--quiet", "--device", "cpu"]) == 0
    out, err = capfd.readouterr()
    assert err == ""
    for word in ("generate", "fit", "transform", "train", "evaluate", "validation AUC", "rows/s"):
        assert word in out


def test_demo_command_rejects_too_few_rows(capsys):
    assert cli.main(["demo", "--rows", "100", "--quiet"]) == 2
    assert "--rows must be >= 2000" in capsys.readouterr().err


# --- the command as a process: closed pipes, signals ---------------------------------------------
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD_ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}  # this checkout
TABLOADER = [sys.executable, "-m", "tabloader.cli"]


@pytest.fixture
def wide_file(tmp_path):
    """A file whose `inspect` prints far more than a pipe holds (so a reader that stops early
    closes the pipe while tabloader still writes)."""
    path = tmp_path / "wide.parquet"
    pq.write_table(pa.table({f"a_rather_long_column_name_{i:05d}": [i] for i in range(2000)}), path)
    return str(path)


@pytest.mark.parametrize("args", [["--help"], ["synth", "--help"], ["inspect", "WIDE"], ["bench", "--list"]])
def test_a_closed_pipe_ends_the_command_quietly(args, wide_file):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before tabloader writes a byte: every write fails
    try:
        result = subprocess.run(TABLOADER + [wide_file if a == "WIDE" else a for a in args], stdout=write_end,
                                stderr=subprocess.PIPE, text=True, env=CHILD_ENV, timeout=120)
    finally:
        os.close(write_end)
    assert result.stderr == ""
    # 128 + SIGPIPE, as a shell reports a program that SIGPIPE ended; argparse's help ignores
    # a failed write and exits 0 where Python reports the failure at once, not at the flush
    assert result.returncode == 128 + signal.SIGPIPE or (args[-1] == "--help" and result.returncode == 0)


def test_piped_into_head_prints_the_first_line_and_nothing_on_stderr(wide_file):
    command = f"{' '.join(TABLOADER)} inspect {wide_file} | head -1"
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=CHILD_ENV, timeout=120)
    assert result.returncode == 0
    assert result.stdout.startswith("Dataset(1 parquet file(s)") and result.stdout.count("\n") == 1
    assert result.stderr == ""


def _synth_signalled_at_the_second_file(out: str, signum: int) -> subprocess.CompletedProcess:
    """`tabloader synth` into ``out`` (3 files), sending itself ``signum`` while it makes file 2."""
    code = textwrap.dedent(f"""
        import os, sys
        from tabloader import cli
        from tabloader.synthetic import clicks
        make_file = clicks.criteo
        calls = []
        def criteo(rows, seed, **kwargs):
            calls.append(rows)
            if len(calls) == 2:
                os.kill(os.getpid(), {int(signum)})
            return make_file(rows, seed=seed, **kwargs)
        clicks.criteo = criteo  # the function write_criteo calls
        sys.exit(cli.main(["synth", "criteo", {out!r}, "--rows", "3000", "--files", "3"]))
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=CHILD_ENV, timeout=120)


def test_sigterm_removes_the_temporary_at_once(tmp_path):
    result = _synth_signalled_at_the_second_file(str(tmp_path / "out"), signal.SIGTERM)
    assert result.returncode == 128 + signal.SIGTERM
    assert result.stderr == "tabloader synth: terminated\n"
    assert os.listdir(tmp_path) == []


def test_after_a_sigkill_the_next_write_succeeds_and_leaves_no_temporary(tmp_path, capsys):
    out = str(tmp_path / "out")
    result = _synth_signalled_at_the_second_file(out, signal.SIGKILL)
    assert result.returncode == -signal.SIGKILL
    (left,) = os.listdir(tmp_path)
    assert left.startswith(".out.tmp-") and os.listdir(tmp_path / left) == ["part_00000.parquet"]

    assert cli.main(["synth", "criteo", out, "--rows", "3000", "--files", "3"]) == 0
    assert os.listdir(tmp_path) == ["out"]
    assert sorted(os.listdir(out)) == ["_schema.json", "part_00000.parquet", "part_00001.parquet", "part_00002.parquet"]
    assert sum(pq.ParquetFile(os.path.join(out, f"part_{i:05d}.parquet")).metadata.num_rows for i in range(3)) == 3000


def test_fit_and_transform_read_the_days_their_filters_keep(tmp_path, capsys):
    """Fit on some days of daily folders, transform others: ``--filter KEY OP VALUE``."""
    for k in range(4):  # x is the day's number: the output says which days were read
        folder = tmp_path / "raw" / f"dt=2024-12-0{k + 1}"
        folder.mkdir(parents=True)
        pq.write_table(pa.table({"x": [float(k)] * 5}), folder / "part-0.parquet")
    (tmp_path / "spec.yaml").write_text("groups:\n  - columns: [x]\n    ops: [Clip: {min_value: 0}]\n")
    fit = ["fit", str(tmp_path / "spec.yaml"), str(tmp_path / "raw"), str(tmp_path / "wf"), "--quiet",
           "--filter", "dt", "<", "2024-12-03", "--filter", "dt", "not in", "2024-12-02,2024-12-09"]
    assert cli.main(fit) == 0
    assert "fitted on 5 rows" in capsys.readouterr().out  # only 2024-12-01
    transform = ["transform", str(tmp_path / "wf"), str(tmp_path / "raw"), str(tmp_path / "out"), "--quiet",
                 "--filter", "dt", "in", "2024-12-03,2024-12-04"]
    assert cli.main(transform) == 0
    assert sorted(pd.read_parquet(tmp_path / "out")["x"].tolist()) == [2.0] * 5 + [3.0] * 5
    assert cli.main(["fit", str(tmp_path / "spec.yaml"), str(tmp_path / "raw"), str(tmp_path / "wf2"), "--quiet",
                     "--filter", "day", "==", "1"]) == 2
    assert "filters name 'day', which is not a partition key" in capsys.readouterr().err


def test_a_number_filtering_a_text_key_is_refused_saying_the_partition_type_flag(tmp_path, capsys):
    """month=01..12 is text (leading zeros): ``--filter month '<' 7`` compared "10" < "7" as text
    and read every month; refused now, naming --partition-type, which types the key."""
    for month in ("01", "06", "07", "10", "12"):
        (tmp_path / "raw" / f"month={month}").mkdir(parents=True)
        pq.write_table(pa.table({"x": [float(month)]}), tmp_path / "raw" / f"month={month}" / "part-0.parquet")
    (tmp_path / "spec.yaml").write_text("groups:\n  - columns: [x]\n    ops: [Clip: {min_value: 0}]\n")
    fit = ["fit", str(tmp_path / "spec.yaml"), str(tmp_path / "raw"), str(tmp_path / "wf"), "--quiet",
           "--filter", "month", "<", "7"]
    assert cli.main(fit) == 2
    err = capsys.readouterr().err
    assert "the key 'month' is text" in err and "--partition-type month int32" in err
    assert cli.main(fit + ["--partition-type", "month", "int32"]) == 0
    assert "fitted on 2 rows" in capsys.readouterr().out  # 01 and 06
    assert cli.main(fit[:4] + ["--quiet", "--filter", "month", "<", "07", "--overwrite"]) == 0  # as the folders spell it
    assert "fitted on 2 rows" in capsys.readouterr().out

def test_inspect_says_which_string_columns_are_stored_as_codes(tmp_path, capsys):
    ids = np.arange(40_000)
    table = pa.table({"few": pa.array((ids % 50).astype(str)), "unique": pa.array(ids.astype(str)), "x": ids})
    pq.write_table(table, tmp_path / "a.parquet", row_group_size=10_000, use_dictionary=["few"])
    pq.write_table(table, tmp_path / "b.parquet", row_group_size=10_000, use_dictionary=False)
    assert cli.main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(out) if line.startswith("string columns stored as dictionary codes"))
    assert out[at + 1].strip() == "few 4/8, unique 0/8"
    pd.DataFrame({"n": [1, 2]}).to_parquet(tmp_path / "numbers.parquet")
    assert cli.main(["inspect", str(tmp_path / "numbers.parquet")]) == 0
    assert "dictionary codes" not in capsys.readouterr().out
