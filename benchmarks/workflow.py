"""Benchmark: the Criteo preprocessing workflow, tabloader vs hand-written pandas vs polars.

The pipeline (the classic Criteo one):

* ``Categorify(freq_threshold=2)`` on ``C1..C26``: 1 = null, 2 = out of vocabulary (seen fewer
  than 2 times), then the vocabulary from 3 in descending frequency (ties by value);
* ``FillMissing(0) >> Clip(min_value=0) >> LogOp >> Normalize`` on ``I1..I13`` (float32 out);
* ``label`` passed through.

Each system fits the statistics over the whole data set, transforms it and writes parquet,
streaming (memory is meant to be bounded by a partition or a file, not by the data set). Each
runs in a fresh subprocess, so the peak resident memory (max RSS) is measured per system. The
outputs are compared on a sample of columns (same ids, continuous values close) so that the
comparison is fair, and a table of times, throughput, peak memory and the ratio to the pandas
time is printed.

    python benchmarks/workflow.py                       # 5M rows in 10 files (written once)
    python benchmarks/workflow.py --rows 200000 --files 4 --data /tmp/criteo-small
    python benchmarks/workflow.py --systems tabloader    # one system only

A system can be run alone with ``--system NAME --out DIR`` (what the driver does): it prints
one JSON line with its timings.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]  # _common, and tabloader from this checkout

from _common import DEFAULT_RAW_CRITEO, peak_rss_mb, print_table, raw_criteo  # noqa: E402

CATS = [f"C{i}" for i in range(1, 27)]
CONTS = [f"I{i}" for i in range(1, 14)]
LABEL = "label"
FREQ_THRESHOLD = 2
NULL_ID, OOV_ID, FIRST_ID = 1, 2, 3
SYSTEMS = ("tabloader", "pandas", "polars")


def data_files(data: str) -> list[str]:
    return sorted(glob.glob(os.path.join(data, "*.parquet")))


# --- (a) tabloader ------------------------------------------------------------------------------
def run_tabloader(data: str, out: str, part_size: str | None = None) -> tuple[float, float]:
    import tabloader as tl
    from tabloader import ops

    cats = CATS >> ops.Categorify(freq_threshold=FREQ_THRESHOLD)
    conts = CONTS >> ops.FillMissing(0) >> ops.Clip(min_value=0) >> ops.LogOp >> ops.Normalize()
    wf = tl.Workflow(cats + conts + [LABEL], progress=False)
    kwargs = {"part_size": part_size} if part_size else {}
    start = time.perf_counter()
    wf.fit(tl.Dataset(data, **kwargs))
    fitted = time.perf_counter()
    wf.transform(tl.Dataset(data, **kwargs)).to_parquet(out, overwrite=True, progress=False)
    return fitted - start, time.perf_counter() - fitted


# --- (b) hand-written pandas, one file at a time --------------------------------------------------
def _pandas_conts(frame):
    """FillMissing(0) >> Clip(min_value=0) >> log1p, float32 (as read)."""
    x = frame[CONTS].fillna(0).clip(lower=0)
    return np.log1p(x)


def run_pandas(data: str, out: str) -> tuple[float, float]:
    import pandas as pd

    files = data_files(data)
    start = time.perf_counter()
    # pass 1: value counts per categorical column; sums and sums of squares of the continuous ones
    counts: dict[str, list] = {c: [] for c in CATS}
    sums = np.zeros(len(CONTS))
    sumsq = np.zeros(len(CONTS))
    rows = 0
    for path in files:
        frame = pd.read_parquet(path, columns=CATS + CONTS)
        for c in CATS:
            counts[c].append(frame[c].value_counts(dropna=True))
        x = _pandas_conts(frame).to_numpy(dtype=np.float64)
        sums += x.sum(axis=0)
        sumsq += np.einsum("ij,ij->j", x, x)
        rows += len(frame)
        del frame, x
    vocabs = {}
    for c in CATS:
        total = pd.concat(counts[c]).groupby(level=0).sum()
        total = total[total >= FREQ_THRESHOLD]
        # descending frequency, ties by value
        order = np.lexsort((total.index.to_numpy(), -total.to_numpy()))
        vocabs[c] = pd.Index(total.index.to_numpy()[order])
    del counts
    mean = sums / rows
    std = np.sqrt(np.maximum(sumsq / rows - mean ** 2, 0))  # population std, as Normalize
    fitted = time.perf_counter()

    # pass 2: encode, normalize and write, one file at a time
    os.makedirs(out, exist_ok=True)
    for i, path in enumerate(files):
        frame = pd.read_parquet(path)
        result = {}
        for c in CATS:
            col = frame[c]
            values = col.to_numpy(dtype=np.int64, na_value=-1)
            ids = vocabs[c].get_indexer(values)
            ids = np.where(ids < 0, OOV_ID, ids + FIRST_ID)
            ids[col.isna().to_numpy()] = NULL_ID
            result[c] = ids
        x = _pandas_conts(frame).to_numpy(dtype=np.float64)
        x = ((x - mean) / std).astype(np.float32)
        for j, c in enumerate(CONTS):
            result[c] = x[:, j]
        result[LABEL] = frame[LABEL].to_numpy()
        pd.DataFrame(result).to_parquet(os.path.join(out, f"part_{i:05d}.parquet"), index=False)
        del frame, result, x
    return fitted - start, time.perf_counter() - fitted


# --- (c) polars, lazy ------------------------------------------------------------------------------
def _polars_cont(c: str):
    import polars as pl

    return pl.col(c).fill_null(0).fill_nan(0).clip(lower_bound=0).log1p()


def run_polars(data: str, out: str) -> tuple[float, float]:
    import polars as pl

    files = data_files(data)
    start = time.perf_counter()
    lf = pl.scan_parquet(files)
    queries = [lf.select(pl.col(c)).drop_nulls().group_by(c).len()
               .filter(pl.col("len") >= FREQ_THRESHOLD)
               .sort(["len", c], descending=[True, False]) for c in CATS]
    queries.append(lf.select([_polars_cont(c).cast(pl.Float64).mean().alias(f"{c}_mean") for c in CONTS]
                             + [_polars_cont(c).cast(pl.Float64).std(ddof=0).alias(f"{c}_std") for c in CONTS]))
    *vocabs, stats = pl.collect_all(queries, engine="streaming")
    fitted = time.perf_counter()

    exprs = []
    for c, vocab in zip(CATS, vocabs):
        ids = pl.Series(np.arange(FIRST_ID, FIRST_ID + len(vocab), dtype=np.int64))
        mapped = pl.col(c).replace_strict(vocab[c], ids, default=OOV_ID, return_dtype=pl.Int64)
        exprs.append(pl.when(pl.col(c).is_null()).then(NULL_ID).otherwise(mapped).cast(pl.Int64).alias(c))
    for c in CONTS:
        mean, std = stats[f"{c}_mean"][0], stats[f"{c}_std"][0]
        exprs.append(((_polars_cont(c).cast(pl.Float64) - mean) / std).cast(pl.Float32).alias(c))
    exprs.append(pl.col(LABEL))
    os.makedirs(out, exist_ok=True)
    lf.select(exprs).sink_parquet(os.path.join(out, "part_00000.parquet"), engine="streaming")
    return fitted - start, time.perf_counter() - fitted


RUNNERS = {"tabloader": run_tabloader, "pandas": run_pandas, "polars": run_polars}


# --- driver ------------------------------------------------------------------------------------
def run_system(system: str, data: str, out: str, part_size: str | None) -> dict:
    """Run one system in a fresh subprocess; its JSON line of timings and peak memory."""
    cmd = [sys.executable, os.path.abspath(__file__), "--system", system, "--data", data, "--out", out]
    if part_size:
        cmd += ["--part-size", part_size]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{system} failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_agreement(outputs: dict[str, str], columns=("C1", "C7", "C14", "C20", "C26", "I1", "I5", "I13", LABEL)):
    """The outputs agree on a sample of columns (all rows): same ids, continuous values close."""
    import pyarrow.parquet as pq

    def read(out):
        tables = [pq.read_table(p, columns=list(columns)) for p in data_files(out)]
        return {c: np.concatenate([t.column(c).to_numpy() for t in tables]) for c in columns}

    names = list(outputs)
    reference = read(outputs[names[0]])
    for name in names[1:]:
        other = read(outputs[name])
        for c in columns:
            a, b = reference[c], other[c]
            if len(a) != len(b):
                raise AssertionError(f"{name} wrote {len(b)} rows, {names[0]} {len(a)}")
            if c in CONTS:
                err = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
                if err > 1e-4:
                    raise AssertionError(f"{name} differs from {names[0]} on {c}: max abs difference {err:.2e}")
            elif not np.array_equal(a.astype(np.int64), b.astype(np.int64)):
                bad = int(np.flatnonzero(a.astype(np.int64) != b.astype(np.int64))[0])
                raise AssertionError(f"{name} differs from {names[0]} on {c}, row {bad}: {b[bad]} vs {a[bad]}")
    return f"outputs agree on {', '.join(columns)} ({len(reference[columns[0]]):,} rows, {len(names)} systems)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--data", default=DEFAULT_RAW_CRITEO, help="raw data directory (written once)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per system; the best is reported")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset of " + ",".join(SYSTEMS))
    parser.add_argument("--part-size", default=None, help="tabloader Dataset part_size (default: the library's)")
    parser.add_argument("--work", default="/tmp/tabloader-bench/workflow-out", help="where outputs are written")
    parser.add_argument("--keep", action="store_true", help="keep the outputs")
    parser.add_argument("--system", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.system:  # child process: run one system, print one JSON line
        if args.system == "tabloader":
            fit_s, transform_s = run_tabloader(args.data, args.out, args.part_size)
        else:
            fit_s, transform_s = RUNNERS[args.system](args.data, args.out)
        import resource

        cpu = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                  for f in ("ru_utime", "ru_stime"))
        print(json.dumps({"fit_s": fit_s, "transform_s": transform_s, "peak_rss_mb": peak_rss_mb(), "cpu_s": cpu}))
        return

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown system(s) {sorted(unknown)}; choose from {SYSTEMS}")
    data = raw_criteo(args.data, args.rows, args.files)
    rows = args.rows
    os.makedirs(args.work, exist_ok=True)
    results, outputs = {}, {}
    for system in systems:
        out = os.path.join(args.work, system)
        best = None
        for _ in range(args.repeat):
            shutil.rmtree(out, ignore_errors=True)
            r = run_system(system, data, out, args.part_size)
            r["total_s"] = r["fit_s"] + r["transform_s"]
            print(f"{system}: fit {r['fit_s']:.2f} s, transform+write {r['transform_s']:.2f} s, "
                  f"peak RSS {r['peak_rss_mb']:.0f} MB, CPU time {r['cpu_s']:.1f} s (whole process)", flush=True)
            best = r if best is None or r["total_s"] < best["total_s"] else best
        results[system], outputs[system] = best, out
    if len(outputs) > 1:
        print(check_agreement(outputs), flush=True)
    base = results.get("pandas", {}).get("total_s")
    table = [[s, r["fit_s"], r["transform_s"], r["total_s"], f"{rows / r['total_s'] / 1e6:.2f}M",
              round(r["peak_rss_mb"]), r["cpu_s"], f"{base / r['total_s']:.2f}x" if base else "-"]
             for s, r in results.items()]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nCriteo workflow, {rows:,} rows in {args.files} files, {os.cpu_count()} CPU cores"
          f"{', best of ' + str(args.repeat) if args.repeat > 1 else ', one run'} (load average {load:.1f}; "
          "CPU s: user+sys of the whole process, imports included):")
    print_table(["system", "fit s", "transform+write s", "total s", "rows/s", "peak RSS MB", "CPU s",
                 "speed-up vs pandas"],
                table)
    if not args.keep:
        for out in outputs.values():
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
