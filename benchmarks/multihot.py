"""Benchmark: Categorify over multi-hot string columns (tags, genres), tabloader vs pandas and polars.

Recommender data holds list columns of string ids: a user's or item's tags, an item's genres.
The data: ``--rows`` rows in ``--files`` parquet files written by pyarrow (no pandas metadata,
128K-row row groups, snappy): ``tags``, 0-6 strings per row drawn (Zipf 1.2) from 200,000 ids
(``"tag-000123"``), ``genres``, 1-3 of 20 strings, a few null lists and null elements, and an
int8 ``label``. The workflow: ``Categorify(freq_threshold)`` on ``tags`` and ``genres``, label
kept; fit + transform + write snappy parquet. Ids: 0 padding, 1 null, 2 out of vocabulary, then
3, 4, ... by descending count (ties by value); null lists stay null. Every system runs in this
process, in turn, ``--repeat`` rounds; the best round of each is shown and the outputs are
checked to agree:

* ``tabloader``: ``Workflow.fit`` and ``transform(...).to_parquet`` (the lists' elements read
  as parquet's dictionary codes where the files store them so);
* ``pandas``: hand-written, one file at a time: pyarrow reads and flattens the lists, pandas
  counts (``value_counts``) and looks the elements up (``Index.get_indexer``), pyarrow rebuilds
  the lists and writes;
* ``polars``: ``scan_parquet`` + ``explode`` + ``group_by().len()`` to fit, and
  ``list.eval(replace_strict)`` over the whole data to transform, on all its threads.

Usage::

    python benchmarks/multihot.py                      # 2M rows, freq_threshold 2
    python benchmarks/multihot.py --rows 200000 --repeat 1
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import time
from typing import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import mark_written, must_write, print_table  # noqa: E402

LISTS = ["tags", "genres"]
TAG_VALUES, GENRE_VALUES = 200_000, 20
DEFAULT_DATA = "/tmp/tabloader-bench/multihot"


# --- data --------------------------------------------------------------------------------------
def string_lists(rng: np.random.Generator, names: list[str], lengths: np.ndarray, picks: np.ndarray):
    """A pyarrow list<string> array: row i holds ``lengths[i]`` of ``names`` (``picks`` in order),
    with 2% null lists (spanning no element: older pyarrow cannot write others) and 1% null
    elements."""
    import pyarrow as pa

    null_lists = rng.random(len(lengths)) < 0.02
    spans = np.where(null_lists, 0, lengths)
    offsets = np.concatenate([[0], np.cumsum(spans)]).astype(np.int32)
    kept = np.repeat(~null_lists, lengths)  # the picks of the rows that stay lists
    values = pa.array(names).take(pa.array(picks[kept], mask=rng.random(int(kept.sum())) < 0.01))
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=pa.array(null_lists))


def write_data(path: str, rows: int, files: int, seed: int = 0) -> str:
    """Write (once) the benchmark's parquet files; reused when ``path`` holds the same spec."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    spec = {"rows": rows, "files": files, "seed": seed, "kind": "multihot", "version": 2}
    if not must_write(path, spec, f"{rows:,} rows of multi-hot strings in {files} files"):
        return path
    rng = np.random.default_rng(seed)
    tags = [f"tag-{i:06d}" for i in range(TAG_VALUES)]
    genres = [f"genre-{i:02d}" for i in range(GENRE_VALUES)]
    for f, n in enumerate(np.diff(np.linspace(0, rows, files + 1).astype(int))):
        tag_lengths, genre_lengths = rng.integers(0, 7, n), rng.integers(1, 4, n)
        table = pa.table({
            "tags": string_lists(rng, tags, tag_lengths, (rng.zipf(1.2, tag_lengths.sum()) - 1) % TAG_VALUES),
            "genres": string_lists(rng, genres, genre_lengths, rng.integers(0, GENRE_VALUES, genre_lengths.sum())),
            "label": rng.integers(0, 2, n).astype(np.int8)})
        pq.write_table(table, os.path.join(path, f"part_{f:03d}.parquet"), row_group_size=131_072)
    mark_written(path, spec)
    return path


def data_files(path: str) -> list[str]:
    return sorted(glob.glob(os.path.join(path, "*.parquet")))


# --- the systems -------------------------------------------------------------------------------
def run_tabloader(data: str, out: str, freq_threshold: int) -> float:
    import tabloader as tl
    from tabloader import ops

    start = time.perf_counter()
    wf = tl.Workflow((LISTS >> ops.Categorify(freq_threshold=freq_threshold)) + ["label"], progress=False)
    wf.fit(tl.Dataset(data))
    wf.transform(tl.Dataset(data)).to_parquet(out, overwrite=True, progress=False)
    return time.perf_counter() - start


def ordered_vocabulary(values, counts, freq_threshold: int):
    """The values kept (count >= freq_threshold), in id order: descending count, ties by value."""
    import pandas as pd

    counts = pd.Series(counts, index=values)
    counts = counts[counts >= max(freq_threshold, 1)].sort_index()
    return counts.sort_values(ascending=False, kind="stable").index


def run_pandas(data: str, out: str, freq_threshold: int) -> float:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    start = time.perf_counter()
    files = data_files(data)
    totals = {c: pd.Series(dtype=np.int64) for c in LISTS}
    for path in files:  # fit: count the elements, one file at a time
        table = pq.read_table(path, columns=LISTS)
        for c in LISTS:
            counts = pc.list_flatten(table.column(c)).to_pandas().value_counts()
            totals[c] = totals[c].add(counts, fill_value=0)
    vocabs = {c: ordered_vocabulary(totals[c].index, totals[c].to_numpy(), freq_threshold) for c in LISTS}
    os.makedirs(out, exist_ok=True)
    for path in files:  # transform: look the elements up, rebuild the lists
        table = pq.read_table(path)
        columns = {}
        for c in LISTS:
            lists = table.column(c).combine_chunks()
            elements = lists.flatten().to_pandas()
            ids = vocabs[c].get_indexer(elements)
            ids = np.where(ids < 0, 2, ids + 3)
            ids[elements.isna().to_numpy()] = 1
            offsets = pc.subtract(lists.offsets, lists.offsets[0])
            columns[c] = pa.ListArray.from_arrays(offsets, pa.array(ids), mask=lists.is_null())
        columns["label"] = table.column("label")
        pq.write_table(pa.table(columns), os.path.join(out, os.path.basename(path)))
    return time.perf_counter() - start


def run_polars(data: str, out: str, freq_threshold: int) -> float:
    import polars as pl

    start = time.perf_counter()
    files = data_files(data)
    lookups = {}
    for c in LISTS:  # fit
        counts = pl.scan_parquet(files).select(pl.col(c).explode().drop_nulls()).group_by(c).len().collect()
        vocab = ordered_vocabulary(counts[c].to_numpy(), counts["len"].to_numpy(), freq_threshold)
        lookups[c] = (list(vocab), list(range(3, 3 + len(vocab))))
    os.makedirs(out, exist_ok=True)
    element = pl.element()
    frame = pl.scan_parquet(files).with_columns(  # a null element gives 1 (replace_strict would give the default)
        pl.col(c).list.eval(pl.when(element.is_null()).then(pl.lit(1, pl.Int64))
                            .otherwise(element.replace_strict(keys, ids, default=2, return_dtype=pl.Int64)))
        for c, (keys, ids) in lookups.items())
    frame.sink_parquet(os.path.join(out, "part.parquet"), compression="snappy")
    return time.perf_counter() - start


RUNNERS: dict[str, Callable[[str, str, int], float]] = {"tabloader": run_tabloader, "pandas": run_pandas,
                                                       "polars": run_polars}


# --- checking and the table --------------------------------------------------------------------
def read_lists(out: str, column: str):
    """A system's output column: its list lengths (-1 for a null list) and its elements."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    lists = pa.concat_arrays([chunk for path in data_files(out)
                              for chunk in pq.read_table(path, columns=[column]).column(column).chunks])
    lengths = pc.fill_null(pc.list_value_length(lists), -1).to_numpy()
    return lengths, pc.list_flatten(lists).to_numpy(zero_copy_only=False).astype(np.int64)


def check_agreement(outputs: dict[str, str]) -> str:
    names = list(outputs)
    for c in LISTS:
        reference = read_lists(outputs[names[0]], c)
        for name in names[1:]:
            got = read_lists(outputs[name], c)
            for what, a, b in (("list lengths", reference[0], got[0]), ("ids", reference[1], got[1])):
                if not np.array_equal(a, b):
                    raise AssertionError(f"{name} differs from {names[0]} on {c}'s {what}")
    return f"outputs agree on {', '.join(LISTS)} ({len(names)} systems)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--freq-threshold", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--systems", default=",".join(RUNNERS))
    parser.add_argument("--data", default=None, help=f"data directory (default: {DEFAULT_DATA}-ROWS-FILES)")
    parser.add_argument("--work", default="/tmp/tabloader-bench/multihot-out")
    args = parser.parse_args(argv)
    systems = [s for s in args.systems.split(",") if s]
    data = write_data(args.data or f"{DEFAULT_DATA}-{args.rows}-{args.files}", args.rows, args.files)
    outputs = {s: os.path.join(args.work, s) for s in systems}
    best: dict[str, float] = {}
    for round_ in range(args.repeat):
        for system in systems:
            shutil.rmtree(outputs[system], ignore_errors=True)
            seconds = RUNNERS[system](data, outputs[system], args.freq_threshold)
            print(f"  round {round_ + 1}: {system} {seconds:.2f} s", flush=True)
            best[system] = min(best.get(system, float("inf")), seconds)
    if len(outputs) > 1:
        print(check_agreement(outputs), flush=True)
    base, polars = best.get("pandas"), best.get("polars")
    print(f"\nCategorify(freq_threshold={args.freq_threshold}) on multi-hot string columns, {args.rows:,} rows in "
          f"{args.files} files, {os.cpu_count()} CPU cores, fit + transform + write, best of {args.repeat}:")
    print_table(["system", "seconds", "rows/s", "vs pandas", "vs polars"],
                [[s, t, f"{args.rows / t / 1e6:.2f}M", f"{base / t:.2f}x" if base else "-",
                  f"{polars / t:.2f}x" if polars else "-"] for s, t in best.items()])
    shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
