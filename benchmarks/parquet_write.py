"""Writing preprocessed rows as parquet: tabloader's ``to_parquet`` against pandas and polars.

The rows are a preprocessing workflow's output: 26 int64 ids (skewed, up to 1M values), 13
float32 continuous columns and a float32 label, in two flavours of continuous columns:
``dense`` (standardized real values, nearly all distinct: prices, durations, Normalize's output
of such columns) and ``counts`` (standardized logs of small counts, a few thousand values, as
Criteo's I columns). Every system writes snappy-compressed files from the same in-memory
pandas frame, best of ``--repeat``:

* ``tabloader``: ``tl.Dataset(frame).to_parquet(out)`` (its partitions written in parallel by
  Dask, one file each; float columns of mostly distinct values without a dictionary);
* ``pandas``: ``frame.to_parquet(path)``, pyarrow's defaults (one file, one thread);
* ``polars``: ``pl.from_pandas(frame).write_parquet(path, compression="snappy")`` (one file,
  its own threads; the conversion from pandas is not timed).

Usage::

    python benchmarks/parquet_write.py --rows 2000000
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import CRITEO_CATEGORICAL, CRITEO_CONTINUOUS, CRITEO_LABEL, print_table  # noqa: E402


def preprocessed_frame(rows: int, floats: str, seed: int = 0):
    """The rows to write: ids, continuous columns of the ``floats`` flavour, a label."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    columns = {}
    for i, name in enumerate(CRITEO_CATEGORICAL):
        columns[name] = (rng.zipf(1.2, rows) % [10, 1_000, 100_000, 1_000_000][i % 4]).astype(np.int64)
    for name in CRITEO_CONTINUOUS:
        if floats == "dense":
            columns[name] = rng.standard_normal(rows).astype(np.float32)
        else:
            logs = np.log1p(rng.zipf(1.5, rows) % 5_000)
            columns[name] = ((logs - logs.mean()) / logs.std()).astype(np.float32)
    columns[CRITEO_LABEL] = rng.integers(0, 2, rows).astype(np.float32)
    return pd.DataFrame(columns)


def written_bytes(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def check_written(path: str, frame, system: str) -> None:
    """Refuse a system whose files do not hold ``frame``'s rows (compared as sorted columns:
    tabloader's files may come back in another order)."""
    import pyarrow.parquet as pq

    back = pq.read_table(path).to_pandas()
    for name in frame.columns:
        if not np.array_equal(np.sort(back[name].to_numpy()), np.sort(frame[name].to_numpy())):
            raise AssertionError(f"{system} wrote other values in column {name!r} than it was given")


def writers(frame, part_size: str) -> dict[str, Callable[[str], None]]:
    """system -> a function writing ``frame`` to the path it is given."""
    import tabloader as tl

    systems = {
        "tabloader": lambda path: tl.Dataset(frame, part_size=part_size).to_parquet(path, progress=False),
        "pandas": lambda path: frame.to_parquet(path, index=False, compression="snappy"),
    }
    try:
        import polars as pl

        polars_frame = pl.from_pandas(frame)
        systems["polars"] = lambda path: polars_frame.write_parquet(path, compression="snappy")
    except ImportError:
        print("polars is not installed: left out", flush=True)
    return systems


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--part-size", default="128MB", help="tabloader's partitions (files)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", default=None, help="where the files are written (a temporary folder)")
    args = parser.parse_args(argv)

    work = args.work or tempfile.mkdtemp(prefix="tabloader-write-")
    table = []
    try:
        for floats in ("dense", "counts"):
            frame = preprocessed_frame(args.rows, floats)
            best: dict[str, tuple[float, int]] = {}
            for _ in range(args.repeat):  # rounds alternate between the systems
                for system, write in writers(frame, args.part_size).items():
                    path = os.path.join(work, f"{system}-{floats}" + ("" if system == "tabloader" else ".parquet"))
                    start = time.perf_counter()
                    write(path)
                    seconds = time.perf_counter() - start
                    size = written_bytes(path)
                    check_written(path, frame, system)
                    shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
                    if system not in best or seconds < best[system][0]:
                        best[system] = (seconds, size)
            for system, (seconds, size) in best.items():
                table.append((floats, system, seconds, f"{args.rows / seconds / 1e6:.2f}M", f"{size / 2**20:.0f}",
                              f"{best['pandas'][0] / seconds:.2f}x"))
            print(f"{floats}: " + ", ".join(f"{s} {t:.2f} s" for s, (t, _) in best.items()), flush=True)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\nWriting {args.rows:,} preprocessed rows (26 ids, 13 continuous, label) as snappy parquet, "
          f"{os.cpu_count()} CPU(s), best of {args.repeat}:")
    print_table(["continuous", "system", "write s", "rows/s", "MB", "vs pandas"], table)


if __name__ == "__main__":
    main()
