"""Benchmark: the Criteo preprocessing workflow, tabloader vs hand-written pandas vs polars.

The pipeline (the classic Criteo one):

* ``Categorify(freq_threshold=F)`` on the categorical columns ``C*``: 1 = null, 2 = out of
  vocabulary (seen fewer than F times), then the vocabulary from 3 in descending frequency
  (ties by value); F = 0 (NVTabular's default: every value gets an id) and F = 2 by default;
* ``FillMissing(0) >> Clip(min_value=0) >> LogOp >> Normalize`` on the continuous columns
  ``I*`` (float32 out);
* ``label`` passed through.

Each system fits the statistics over the whole data set, transforms it and writes parquet
(snappy for every system), streaming (memory is meant to be bounded by a partition or a
file, not by the data set). Each run is a fresh subprocess, so the peak resident memory (max
RSS) is per system; the systems run in turn (tabloader, pandas, polars, tabloader, ...) so
that a change of machine load hits them alike, and each run prints the load average at its
start. The outputs are compared (same ids, continuous values close) before the table of
times, throughput, peak memory and ratios is printed. Each run's setup -- importing the
system's libraries and, on the GPU, creating the CUDA context and the memory pool (RMM's
``cudaMallocAsync`` resource for both tabloader and hand-written cuDF) -- is timed apart
(``setup s``) and left out of the totals and rates: it is paid once per job whatever its size,
and at 5M rows it would otherwise weigh on the GPU systems more than their work.

    python benchmarks/workflow.py                       # 5M rows in 10 files, freq_threshold 0 and 2
    python benchmarks/workflow.py --freq-threshold 2 --repeat 3
    python benchmarks/workflow.py --rows 200000 --files 4 --data /tmp/criteo-small
    python benchmarks/workflow.py --systems tabloader   # one system only
    python benchmarks/workflow.py --scaling             # time and memory against rows and vocabulary size

``--device cuda`` runs the same comparison with tabloader on the GPU (``tabloader-cuda``: a
``Dataset(..., device="cuda")``, cuDF partitions), against hand-written cuDF (``cudf``:
``cudf.read_parquet`` + ``value_counts`` + ``merge``, the strongest GPU baseline), cudf-polars
(``polars-gpu``, when it is installed) and, on the CPU in the same run, hand-written pandas and
polars. After the table it prints each system's projected time for Criteo-1TB (its rows/s
scaled to 4.4B rows; goal for tabloader on an H100/H200: under 5 minutes, against NVTabular's
13.8 min on an A100) and tabloader's ratio to pandas (goal at 50M rows: at least 20x).

    python benchmarks/workflow.py --device cuda --rows 50000000 --freq-threshold 2

``--string-categoricals`` gives the ``C*`` columns as raw Criteo has them (the Kaggle and 1TB
TSVs; and many users' parquet holds string ids): 8-character lowercase hex strings, one per
integer id of the integer data (the same Zipf ids and nulls, through a fixed 32-bit bijection,
:func:`hex_ids`), written once to a directory of their own (default
``/tmp/tabloader-bench/criteo-strings-5M-10``) by pyarrow, without pandas metadata. Every system
runs unchanged in meaning: the ids (frequency order, ties by value -- code point order, the same
for every system) are compared as for integers. Hand-written pandas factorizes a string column
before looking its distinct values up in the vocabulary (``pd.factorize`` + ``get_indexer``);
polars and cuDF take strings in the same queries as integers (``replace_strict``; ``merge``).

    python benchmarks/workflow.py --string-categoricals --freq-threshold 2
    python benchmarks/workflow.py --string-categoricals --device cuda --systems tabloader-cuda,cudf,pandas,polars

``--scaling`` runs the workflow over 1M / 5M / 20M Criteo rows (``--scaling-rows``), then over
``--vocab-rows`` rows of one categorical column holding 100K / 1M / 10M distinct values
(``--vocab-sizes``; every value equally often, spread over 31 bits), and prints the
exponents of least-squares fits ``time ~ rows**a`` and ``time ~ vocabulary**b`` per system.

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

from _common import (DEFAULT_RAW_CRITEO, mark_written, must_write, peak_rss_mb, print_table, raw_criteo,  # noqa: E402
                     written_before)

LABEL = "label"
NULL_ID, OOV_ID = 1, 2  # the first vocabulary id is 3 (one OOV bucket)
COMPRESSION = "snappy"
SYSTEMS = ("tabloader", "pandas", "polars")
GPU_SYSTEMS = ("tabloader-cuda", "cudf", "polars-gpu", "pandas", "polars")  # --device cuda
CRITEO_1TB_ROWS = 4_373_472_329  # the 24 days of Criteo's 1TB click logs
CUDF_GROUP_ROWS = 4_000_000  # hand-written cuDF reads about this many rows at once (a GPU wants large reads)
NVTABULAR_1TB_MINUTES = 13.8  # NVTabular's Criteo-1TB ETL on one A100 (the seed's figure)


def data_files(data: str) -> list[str]:
    return sorted(glob.glob(os.path.join(data, "*.parquet")))


def column_roles(data: str) -> tuple[list[str], list[str]]:
    """The categorical (``C*``) and continuous (``I*``) columns of the data, in file order."""
    import pyarrow.parquet as pq

    names = pq.read_schema(data_files(data)[0]).names
    return [c for c in names if c.startswith("C")], [c for c in names if c.startswith("I")]


# --- (a) tabloader ------------------------------------------------------------------------------
def run_tabloader(data: str, out: str, freq_threshold: int, part_size: str | None = None) -> tuple[float, float]:
    import tabloader as tl
    from tabloader import ops

    cats, conts = column_roles(data)
    graph = cats >> ops.Categorify(freq_threshold=freq_threshold)
    graph = graph + (conts >> ops.FillMissing(0) >> ops.Clip(min_value=0) >> ops.LogOp >> ops.Normalize())
    wf = tl.Workflow(graph + [LABEL], progress=False)
    kwargs = {"part_size": part_size} if part_size else {}
    start = time.perf_counter()
    wf.fit(tl.Dataset(data, **kwargs))
    fitted = time.perf_counter()
    wf.transform(tl.Dataset(data, **kwargs)).to_parquet(out, overwrite=True, progress=False, compression=COMPRESSION)
    return fitted - start, time.perf_counter() - fitted


# --- (b) hand-written pandas, one file at a time --------------------------------------------------
def _pandas_conts(frame, conts):
    """FillMissing(0) >> Clip(min_value=0) >> log1p, float32 (as read)."""
    x = frame[conts].fillna(0).clip(lower=0)
    return np.log1p(x)


def _pandas_ids(col, vocab):
    """Categorify's ids of a column given its vocabulary (a ``pd.Index`` in id order).

    Integers are looked up row by row (``get_indexer`` on int64 values); strings are
    factorized first and only their distinct values looked up (``pd.factorize``: hashing a
    string column once costs less than probing the vocabulary's object hash table per row,
    2.5x faster on the Criteo strings)."""
    import pandas as pd

    if pd.api.types.is_string_dtype(col.dtype):
        codes, uniques = pd.factorize(col)  # nulls get code -1
        ids = vocab.get_indexer(uniques)[codes]
    else:
        ids = vocab.get_indexer(col.to_numpy(dtype=np.int64, na_value=-1))
    ids = np.where(ids < 0, OOV_ID, ids + OOV_ID + 1)
    ids[col.isna().to_numpy()] = NULL_ID
    return ids


def run_pandas(data: str, out: str, freq_threshold: int) -> tuple[float, float]:
    import pandas as pd

    cats, conts = column_roles(data)
    files = data_files(data)
    start = time.perf_counter()
    # pass 1: value counts per categorical column; sums and sums of squares of the continuous ones
    counts: dict[str, list] = {c: [] for c in cats}
    sums = np.zeros(len(conts))
    sumsq = np.zeros(len(conts))
    rows = 0
    for path in files:
        frame = pd.read_parquet(path, columns=cats + conts)
        for c in cats:
            counts[c].append(frame[c].value_counts(dropna=True))
        x = _pandas_conts(frame, conts).to_numpy(dtype=np.float64)
        sums += x.sum(axis=0)
        sumsq += np.einsum("ij,ij->j", x, x)
        rows += len(frame)
        del frame, x
    vocabs = {}
    for c in cats:
        total = pd.concat(counts[c]).groupby(level=0).sum()
        total = total[total >= freq_threshold]
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
        for c in cats:
            result[c] = _pandas_ids(frame[c], vocabs[c])
        x = _pandas_conts(frame, conts).to_numpy(dtype=np.float64)
        x = ((x - mean) / std).astype(np.float32)
        for j, c in enumerate(conts):
            result[c] = x[:, j]
        result[LABEL] = frame[LABEL].to_numpy()
        pd.DataFrame(result).to_parquet(os.path.join(out, f"part_{i:05d}.parquet"), index=False,
                                        compression=COMPRESSION)
        del frame, result, x
    return fitted - start, time.perf_counter() - fitted


# --- (c) polars, lazy ------------------------------------------------------------------------------
def _polars_cont(c: str):
    import polars as pl

    return pl.col(c).fill_null(0).fill_nan(0).clip(lower_bound=0).log1p()


def _polars_fit_queries(lf, cats: list[str], conts: list[str], freq_threshold: int) -> list:
    """One query per vocabulary (descending frequency, ties by value) and one for the moments."""
    import polars as pl

    queries = [lf.select(pl.col(c)).drop_nulls().group_by(c).len()
               .filter(pl.col("len") >= freq_threshold)
               .sort(["len", c], descending=[True, False]) for c in cats]
    queries.append(lf.select([_polars_cont(c).cast(pl.Float64).mean().alias(f"{c}_mean") for c in conts]
                             + [_polars_cont(c).cast(pl.Float64).std(ddof=0).alias(f"{c}_std") for c in conts]))
    return queries


def _polars_transform(lf, cats: list[str], conts: list[str], vocabs: list, stats) -> object:
    """The transformed rows of ``lf`` (lazy), from the fitted vocabularies and moments."""
    import polars as pl

    exprs = []
    for c, vocab in zip(cats, vocabs):
        ids = pl.Series(np.arange(OOV_ID + 1, OOV_ID + 1 + len(vocab), dtype=np.int64))
        mapped = pl.col(c).replace_strict(vocab[c], ids, default=OOV_ID, return_dtype=pl.Int64)
        exprs.append(pl.when(pl.col(c).is_null()).then(NULL_ID).otherwise(mapped).cast(pl.Int64).alias(c))
    for c in conts:
        mean, std = stats[f"{c}_mean"][0], stats[f"{c}_std"][0]
        exprs.append(((_polars_cont(c).cast(pl.Float64) - mean) / std).cast(pl.Float32).alias(c))
    exprs.append(pl.col(LABEL))
    return lf.select(exprs)


def run_polars(data: str, out: str, freq_threshold: int) -> tuple[float, float]:
    import polars as pl

    cats, conts = column_roles(data)
    files = data_files(data)
    start = time.perf_counter()
    lf = pl.scan_parquet(files)
    *vocabs, stats = pl.collect_all(_polars_fit_queries(lf, cats, conts, freq_threshold), engine="streaming")
    fitted = time.perf_counter()
    os.makedirs(out, exist_ok=True)
    _polars_transform(lf, cats, conts, vocabs, stats).sink_parquet(
        os.path.join(out, "part_00000.parquet"), compression=COMPRESSION, engine="streaming")
    return fitted - start, time.perf_counter() - fitted


# --- (d) GPU: tabloader on cuDF, hand-written cuDF, cudf-polars (--device cuda) -------------------
def run_tabloader_cuda(data: str, out: str, freq_threshold: int, part_size: str | None = None) -> tuple[float, float]:
    """The workflow of :func:`run_tabloader` over cuDF partitions (read, transformed and written on the GPU)."""
    import tabloader as tl
    from tabloader import ops

    cats, conts = column_roles(data)
    graph = cats >> ops.Categorify(freq_threshold=freq_threshold)
    graph = graph + (conts >> ops.FillMissing(0) >> ops.Clip(min_value=0) >> ops.LogOp >> ops.Normalize())
    wf = tl.Workflow(graph + [LABEL], progress=False)
    kwargs = {"part_size": part_size} if part_size else {}
    start = time.perf_counter()
    wf.fit(tl.Dataset(data, device="cuda", **kwargs))
    fitted = time.perf_counter()
    wf.transform(tl.Dataset(data, device="cuda", **kwargs)).to_parquet(out, overwrite=True, progress=False,
                                                                       compression=COMPRESSION)
    return fitted - start, time.perf_counter() - fitted


def _cudf_conts(frame, conts):
    """FillMissing(0) >> Clip(min_value=0) >> log1p as a float64 CuPy matrix (rows x columns)."""
    import cupy as cp

    return cp.log1p(frame[conts].fillna(0).clip(lower=0).to_cupy(dtype=cp.float64))


def _cudf_vocabulary(counts: list, column: str, freq_threshold: int):
    """The partial value counts of ``column`` merged: a frame of values and their ids (3, 4, ...
    in descending frequency, ties by value)."""
    import cudf
    import cupy as cp

    total = cudf.concat([c.rename("count") for c in counts])
    total.index.name = column
    total = total.reset_index()
    total = total.groupby(column, sort=False)["count"].sum().reset_index()
    total = total[total["count"] >= freq_threshold].sort_values(["count", column], ascending=[False, True])
    total = total.reset_index(drop=True)  # a Series, not .values: CuPy has no strings
    return cudf.DataFrame({column: total[column],
                           "id": cp.arange(OOV_ID + 1, OOV_ID + 1 + len(total), dtype=cp.int64)})


def _cudf_encode(values, vocabulary):
    """Ids of a cuDF column by a left merge with its vocabulary (merges do not keep the row
    order: a row number goes along)."""
    import cudf
    import cupy as cp

    n = len(values)
    left = cudf.DataFrame({vocabulary.columns[0]: values, "_row": cp.arange(n, dtype=cp.int64)})
    matched = left.merge(vocabulary, on=vocabulary.columns[0], how="inner")
    ids = cp.full(n, OOV_ID, dtype=cp.int64)
    ids[matched["_row"].values] = matched["id"].values
    ids[values.isna().values] = NULL_ID
    return ids


def _file_groups(files: list[str], max_rows: int = CUDF_GROUP_ROWS) -> list[list[str]]:
    """Consecutive files in groups of at most ``max_rows`` rows (a file more is a group of its own)."""
    import pyarrow.parquet as pq

    groups: list[list[str]] = []
    rows = max_rows
    for path in files:
        n = pq.read_metadata(path).num_rows
        if rows + n > max_rows:
            groups.append([])
            rows = 0
        groups[-1].append(path)
        rows += n
    return groups


def run_cudf(data: str, out: str, freq_threshold: int) -> tuple[float, float]:
    """Hand-written cuDF: the pandas baseline's passes on the GPU, several files per read (about
    :data:`CUDF_GROUP_ROWS` rows: one cuDF read of a few files, as tabloader's GPU partitions)."""
    import cudf
    import cupy as cp

    cats, conts = column_roles(data)
    files = _file_groups(data_files(data))  # a read takes a list of files
    start = time.perf_counter()
    counts: dict[str, list] = {c: [] for c in cats}
    sums = cp.zeros(len(conts))
    sumsq = cp.zeros(len(conts))
    rows = 0
    for path in files:
        frame = cudf.read_parquet(path, columns=cats + conts)
        for c in cats:
            counts[c].append(frame[c].value_counts(dropna=True))
        x = _cudf_conts(frame, conts)
        sums += x.sum(axis=0)
        sumsq += (x * x).sum(axis=0)
        rows += len(frame)
        del frame, x
    vocabs = {c: _cudf_vocabulary(counts[c], c, freq_threshold) for c in cats}
    del counts
    mean = sums / rows
    std = cp.sqrt(cp.maximum(sumsq / rows - mean ** 2, 0))  # population std, as Normalize
    cp.cuda.Device().synchronize()
    fitted = time.perf_counter()

    os.makedirs(out, exist_ok=True)
    for i, path in enumerate(files):
        frame = cudf.read_parquet(path)
        result = cudf.DataFrame({c: _cudf_encode(frame[c], vocabs[c]) for c in cats})
        x = ((_cudf_conts(frame, conts) - mean) / std).astype(cp.float32)
        for j, c in enumerate(conts):
            result[c] = cp.ascontiguousarray(x[:, j])
        result[LABEL] = frame[LABEL]
        result.to_parquet(os.path.join(out, f"part_{i:05d}.parquet"), index=False, compression=COMPRESSION)
        del frame, result, x
    return fitted - start, time.perf_counter() - fitted


def run_polars_gpu(data: str, out: str, freq_threshold: int) -> tuple[float, float]:
    """The polars queries of :func:`run_polars` on cudf-polars' GPU engine: the fit's queries
    one by one (``collect_all`` is not supported for the GPU engine; each query reads only its
    columns), the transform collected on the GPU, then written by polars (its GPU engine has no
    streaming sink).

    The in-memory executor: cudf-polars' streaming executor needs rapidsmpf and UCX, which the
    lent GPU machine does not have, and the data of these runs fits in GPU memory.
    ``raise_on_fail``: a query the GPU engine cannot run fails the run rather than finishing on
    the CPU unseen."""
    import polars as pl

    engine = pl.GPUEngine(executor="in-memory", raise_on_fail=True)
    cats, conts = column_roles(data)
    start = time.perf_counter()
    lf = pl.scan_parquet(data_files(data))
    *vocabs, stats = [query.collect(engine=engine) for query in _polars_fit_queries(lf, cats, conts, freq_threshold)]
    fitted = time.perf_counter()
    os.makedirs(out, exist_ok=True)
    _polars_transform(lf, cats, conts, vocabs, stats).collect(engine=engine).write_parquet(
        os.path.join(out, "part_00000.parquet"), compression=COMPRESSION)
    return fitted - start, time.perf_counter() - fitted


RUNNERS = {"tabloader": run_tabloader, "pandas": run_pandas, "polars": run_polars,
           "tabloader-cuda": run_tabloader_cuda, "cudf": run_cudf, "polars-gpu": run_polars_gpu}


# --- data for the vocabulary scaling ------------------------------------------------------------
def vocabulary_data(path: str, rows: int, vocabulary: int, files: int = 10, seed: int = 0) -> str:
    """Write (once) ``rows`` rows of ``C1`` (``vocabulary`` distinct int64 values, each equally
    often, in random order, spread over 31 bits), ``I1`` (float32) and ``label``, with
    pyarrow (no pandas metadata); reused when a ``_bench.json`` marker records the same spec."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    spec = {"rows": rows, "vocabulary": vocabulary, "files": files, "seed": seed, "kind": "vocabulary"}
    if not must_write(path, spec, f"{rows:,} rows with {vocabulary:,} distinct values"):
        return path
    rng = np.random.default_rng(seed)
    ranks = rng.permutation(np.arange(rows, dtype=np.int64) % vocabulary)  # every value rows // vocabulary times
    values = (ranks * 2654435761 + 12345) % 2**31  # a bijection on [0, 2**31): ids are not sorted by rank
    bounds = np.linspace(0, rows, files + 1).astype(np.int64)
    for i in range(files):
        lo, hi = bounds[i], bounds[i + 1]
        table = pa.table({LABEL: rng.integers(0, 2, hi - lo).astype(np.int32),
                          "I1": rng.exponential(10, hi - lo).astype(np.float32), "C1": values[lo:hi]})
        pq.write_table(table, os.path.join(path, f"part_{i:05d}.parquet"), row_group_size=131_072)
    mark_written(path, spec)
    return path


# --- raw Criteo with string categoricals (--string-categoricals) ----------------------------------
DEFAULT_RAW_CRITEO_STRINGS = "/tmp/tabloader-bench/criteo-strings-5M-10"
HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def hex_ids(ids: np.ndarray) -> np.ndarray:
    """The 8-character lowercase hex strings of raw Criteo for integer ids in ``[0, 2**32)``, as
    an ``(n, 8)`` uint8 array of ASCII digits: the hex of ``fmix32(id)`` (MurmurHash3's 32-bit
    finalizer, a bijection on 32 bits), so distinct ids give distinct strings and the strings
    look as random as Criteo's (``"68fd1e64"``).

    Example:
        >>> hex_ids(np.array([0, 1])).tobytes()
        b'00000000514e28b7'
    """
    h = ids.astype(np.uint32)
    with np.errstate(over="ignore"):
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h *= np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    shifts = np.arange(28, -4, -4, dtype=np.uint32)  # the most significant nibble first
    return HEX_DIGITS[(h[:, None] >> shifts) & np.uint32(0xF)]


def hex_string_array(ids: np.ndarray, mask: np.ndarray) -> object:
    """A pyarrow string array of :func:`hex_ids` of ``ids``, null where ``mask`` is True, built
    from its buffers (8 bytes a row, no Python string per row)."""
    import pyarrow as pa

    n = len(ids)
    offsets = np.arange(0, 8 * (n + 1), 8, dtype=np.int32)
    validity = pa.array(~mask).buffers()[1] if mask.any() else None
    return pa.Array.from_buffers(pa.string(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(hex_ids(ids))],
                                 null_count=int(mask.sum()))


def raw_criteo_strings(path: str, rows: int, files: int = 10, seed: int = 0) -> str:
    """Write (once) ``rows`` raw Criteo rows whose ``C*`` columns are 8-character hex strings,
    as the Kaggle and 1TB click logs have them: file ``i`` holds the rows of file ``i`` of
    :func:`~_common.raw_criteo` (same seed: the same Zipf ids, nulls in the same rows) with each
    id replaced by its :func:`hex_ids` string. Written by pyarrow (no pandas metadata) into a
    temporary directory renamed when complete; reused when a ``_bench.json`` marker records the
    same arguments."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tabloader.atomic_files import atomic_directory
    from tabloader.synthetic import criteo
    from tabloader.synthetic.files import ROW_GROUP_SIZE
    from tabloader.synthetic.world import file_seed, split_rows

    spec = {"rows": rows, "files": files, "seed": seed, "kind": "criteo-raw-hex-strings"}
    if written_before(path, spec):
        return path
    print(f"writing {rows:,} synthetic Criteo rows with hex string categoricals in {files} files to {path} (once) ...",
          flush=True)
    with atomic_directory(path, overwrite=True) as tmp:
        for i, n in enumerate(split_rows(rows, files)):
            frame = criteo(n, seed=file_seed(seed, i))
            columns = {}
            for name, series in frame.items():
                if name.startswith("C"):
                    columns[name] = hex_string_array(series.to_numpy(np.int64, na_value=0), series.isna().to_numpy())
                else:
                    columns[name] = pa.array(series.to_numpy())
            pq.write_table(pa.table(columns), os.path.join(tmp, f"part_{i:05d}.parquet"),
                           row_group_size=ROW_GROUP_SIZE, compression="snappy")
        mark_written(tmp, spec)
    return path


# --- setup: imports, CUDA context and memory pool, before the clock -------------------------------
SETUP_IMPORTS = {"tabloader": ("tabloader", "tabloader.workflow", "pandas", "pyarrow.parquet", "dask.dataframe"),
                 "pandas": ("pandas", "pyarrow.parquet"),
                 "polars": ("polars",),
                 "tabloader-cuda": ("tabloader", "tabloader.workflow", "tabloader.encoding.gpu", "cudf", "cupy",
                                    "dask.dataframe"),
                 "cudf": ("cudf", "cupy", "rmm"),
                 "polars-gpu": ("polars", "cudf_polars")}


def setup_system(system: str) -> float:
    """Seconds to import ``system``'s libraries and, for a GPU system, to create the CUDA context
    and give it a ``cudaMallocAsync`` memory pool (tabloader's own for tabloader, RMM's for
    hand-written cuDF, as a cuDF user sets one): the setup every job pays once."""
    import importlib

    start = time.perf_counter()
    for name in SETUP_IMPORTS[system]:
        importlib.import_module(name)
    if system == "tabloader-cuda":
        from tabloader import backend

        backend.cupy().zeros(1).sum().item()  # the CUDA context
        backend.ensure_rmm_pool()
    elif system == "cudf":
        import cupy as cp
        import rmm

        cp.zeros(1).sum().item()
        rmm.mr.set_current_device_resource(rmm.mr.CudaAsyncMemoryResource())
    return time.perf_counter() - start


# --- driver ------------------------------------------------------------------------------------
def load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def run_system(system: str, data: str, out: str, freq_threshold: int, part_size: str | None) -> dict:
    """Run one system in a fresh subprocess; its JSON line of timings and peak memory."""
    cmd = [sys.executable, os.path.abspath(__file__), "--system", system, "--data", data, "--out", out,
           "--freq-threshold", str(freq_threshold)]
    if part_size:
        cmd += ["--part-size", part_size]
    load = load_average()
    shutil.rmtree(out, ignore_errors=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{system} failed:\n{proc.stdout}\n{proc.stderr}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["total_s"] = result["fit_s"] + result["transform_s"]
    result["load"] = load
    print(f"  {system} (freq_threshold={freq_threshold}, load average {load:.1f}): setup {result['setup_s']:.2f} s, "
          f"fit {result['fit_s']:.2f} s, "
          f"transform+write {result['transform_s']:.2f} s, peak RSS {result['peak_rss_mb']:.0f} MB, "
          f"CPU time {result['cpu_s']:.1f} s (whole process)", flush=True)
    return result


def run_alternating(systems: list[str], data: str, work: str, freq_threshold: int, repeat: int,
                    part_size: str | None) -> tuple[dict, dict]:
    """``repeat`` rounds of every system in turn; the best run of each, and its output directory.

    A baseline that fails (cudf-polars refusing a query, say) is reported with the end of its
    error and left out of the later rounds and the table; a tabloader system's failure stops the
    benchmark."""
    best: dict[str, dict] = {}
    outputs = {s: os.path.join(work, s) for s in systems}
    for _ in range(repeat):
        for system in [s for s in systems if s in outputs]:
            try:
                r = run_system(system, data, outputs[system], freq_threshold, part_size)
            except RuntimeError as exc:
                if system.startswith("tabloader"):
                    raise
                print(f"  {system} left out, it failed: ...{str(exc)[-1500:]}", flush=True)
                del outputs[system]
                best.pop(system, None)
                continue
            if system not in best or r["total_s"] < best[system]["total_s"]:
                best[system] = r
    return best, outputs


def check_agreement(outputs: dict[str, str], data: str) -> str:
    """The outputs agree on every column (all rows): same ids, continuous values close. Read one
    column at a time, so that 50M rows of every system are never in memory together."""
    import pyarrow.parquet as pq

    cats, conts = column_roles(data)
    columns = cats + conts + [LABEL]

    def read(out, column):
        return np.concatenate([pq.read_table(p, columns=[column]).column(column).to_numpy() for p in data_files(out)])

    names = list(outputs)
    rows = 0
    for c in columns:
        reference = read(outputs[names[0]], c)
        rows = len(reference)
        for name in names[1:]:
            a, b = reference, read(outputs[name], c)
            if len(a) != len(b):
                raise AssertionError(f"{name} wrote {len(b)} rows, {names[0]} {len(a)}")
            if c in conts:
                err = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if len(a) else 0.0
                if err > 1e-4:
                    raise AssertionError(f"{name} differs from {names[0]} on {c}: max abs difference {err:.2e}")
            elif not np.array_equal(a.astype(np.int64), b.astype(np.int64)):
                bad = int(np.flatnonzero(a.astype(np.int64) != b.astype(np.int64))[0])
                raise AssertionError(f"{name} differs from {names[0]} on {c}, row {bad}: {b[bad]} vs {a[bad]}")
    return f"outputs agree on all {len(columns)} columns ({rows:,} rows, {len(names)} systems)"


def compare(args: argparse.Namespace, systems: list[str]) -> None:
    """The comparison table at each freq_threshold."""
    write = raw_criteo_strings if args.string_categoricals else raw_criteo
    data = write(args.data, args.rows, args.files)
    for freq_threshold in args.freq_threshold:
        print(f"\nfreq_threshold={freq_threshold}: {args.repeat} round(s) of {', '.join(systems)}", flush=True)
        results, outputs = run_alternating(systems, data, args.work, freq_threshold, args.repeat, args.part_size)
        if len(outputs) > 1:
            print(check_agreement(outputs, data), flush=True)
        base = results.get("pandas", {}).get("total_s")
        polars = results.get("polars", {}).get("total_s")
        table = [[s, r["setup_s"], r["fit_s"], r["transform_s"], r["total_s"],
                  f"{args.rows / r['total_s'] / 1e6:.2f}M",
                  round(r["peak_rss_mb"]), r["cpu_s"], r["load"], f"{base / r['total_s']:.2f}x" if base else "-",
                  f"{polars / r['total_s']:.2f}x" if polars else "-"]
                 for s, r in results.items()]
        kind = ", categoricals as 8-char hex strings" if args.string_categoricals else ""
        print(f"\nCriteo workflow{kind}, Categorify(freq_threshold={freq_threshold}), {args.rows:,} rows in {args.files} "
              f"files, {os.cpu_count()} CPU cores, {COMPRESSION} output, best of {args.repeat} alternating run(s) "
              "(setup s: imports, and on the GPU the CUDA context and memory pool, left out of total and rows/s; "
              "CPU s: user+sys of the whole process, imports included; load: load average at the run's start):")
        print_table(["system", "setup s", "fit s", "transform+write s", "total s", "rows/s", "peak RSS MB", "CPU s",
                     "load", "vs pandas", "vs polars"], table)
        if args.device == "cuda":
            print_gpu_goals(results, args.rows)
        if not args.keep:
            for out in outputs.values():
                shutil.rmtree(out, ignore_errors=True)


def gpu_name() -> str:
    import cupy as cp

    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def print_gpu_goals(results: dict, rows: int) -> None:
    """Each system's projected Criteo-1TB time (its rows/s over 4.4B rows) and tabloader's
    standing against the goals of issue 14 (20x hand-written pandas at 50M rows, 1TB under 5 min)."""
    print(f"\nOn {gpu_name()}: projected Criteo-1TB ({CRITEO_1TB_ROWS / 1e9:.1f}B rows) at each system's rate over "
          f"{rows:,} rows (NVTabular: {NVTABULAR_1TB_MINUTES} min on an A100):")
    print_table(["system", "rows/s", "projected 1TB min"],
                [[s, f"{rows / r['total_s'] / 1e6:.2f}M", CRITEO_1TB_ROWS / (rows / r["total_s"]) / 60]
                 for s, r in results.items()])
    ours, pandas = results.get("tabloader-cuda"), results.get("pandas")
    if ours is None:
        return
    minutes = CRITEO_1TB_ROWS / (rows / ours["total_s"]) / 60
    print(f"goal, projected 1TB under 5 min: {minutes:.1f} min, {'met' if minutes < 5 else 'NOT met'}")
    if pandas is not None:
        ratio = pandas["total_s"] / ours["total_s"]
        print(f"goal, at least 20x hand-written pandas at 50M rows: {ratio:.1f}x at {rows:,} rows, "
              f"{'met' if ratio >= 20 else 'NOT met'}{'' if rows >= 50_000_000 else ' (the goal is set at 50M rows)'}")


def default_systems(device: str) -> list[str]:
    """The CPU systems, or on ``cuda`` the GPU ones (cudf-polars where it is installed) and the CPU baselines."""
    import importlib.util

    if device == "cpu":
        return list(SYSTEMS)
    if importlib.util.find_spec("cudf_polars") is None:
        print("polars-gpu left out: cudf-polars is not installed (pip install cudf-polars-cu12 or -cu13)", flush=True)
        return [s for s in GPU_SYSTEMS if s != "polars-gpu"]
    return list(GPU_SYSTEMS)


def fitted_exponent(sizes: list[int], seconds: list[float]) -> float:
    """The slope of the least-squares line through (log size, log seconds)."""
    return float(np.polyfit(np.log(sizes), np.log(seconds), 1)[0]) if len(sizes) > 1 else float("nan")


def scaling(args: argparse.Namespace, systems: list[str]) -> None:
    """Time and peak memory against the number of rows and the vocabulary size, with fitted exponents."""
    freq_threshold = args.freq_threshold[-1]
    cases = [("rows", n, raw_criteo(f"{args.data}-scaling-{n}", n, args.files)) for n in args.scaling_rows]
    cases += [("vocabulary", v, vocabulary_data(f"{args.data}-vocabulary-{v}", args.vocab_rows, v, args.files))
              for v in args.vocab_sizes]
    measured: dict[tuple[str, str, int], dict] = {}
    for axis, size, data in cases:
        what = f"{size:,} Criteo rows" if axis == "rows" else f"{args.vocab_rows:,} rows, {size:,} distinct values"
        print(f"\n{what}, freq_threshold={freq_threshold}:", flush=True)
        results, outputs = run_alternating(systems, data, args.work, freq_threshold, args.repeat, args.part_size)
        if len(outputs) > 1:
            print(check_agreement(outputs, data), flush=True)
        for system, r in results.items():
            measured[(system, axis, size)] = r
        for out in outputs.values():
            shutil.rmtree(out, ignore_errors=True)
    table = []
    for axis, size, _ in cases:
        label = f"{size / 1e6:g}M rows" if axis == "rows" else f"{size / 1e6:g}M values ({args.vocab_rows / 1e6:g}M rows)"
        for system in systems:
            r = measured[(system, axis, size)]
            table.append([label, system, r["total_s"], round(r["peak_rss_mb"]), r["load"]])
    print(f"\nScaling, Categorify(freq_threshold={freq_threshold}), best of {args.repeat} alternating run(s):")
    print_table(["data", "system", "total s", "peak RSS MB", "load"], table)
    exponents = []
    for system in systems:
        a = fitted_exponent(args.scaling_rows, [measured[(system, "rows", n)]["total_s"] for n in args.scaling_rows])
        b = fitted_exponent(args.vocab_sizes, [measured[(system, "vocabulary", v)]["total_s"] for v in args.vocab_sizes])
        exponents.append([system, f"{a:.2f}", f"{b:.2f}"])
    print("\nFitted exponents (least squares on logs): time ~ rows**a, time ~ vocabulary**b")
    print_table(["system", "a (rows)", "b (vocabulary)"], exponents)


def int_list(text: str) -> list[int]:
    return [int(float(v)) for v in text.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--data", default=None, help="raw data directory (written once; default "
                        f"{DEFAULT_RAW_CRITEO}, with --string-categoricals {DEFAULT_RAW_CRITEO_STRINGS})")
    parser.add_argument("--string-categoricals", action="store_true",
                        help="the C columns as 8-char lowercase hex strings, as raw Criteo has them")
    parser.add_argument("--freq-threshold", type=int_list, default=[0, 2],
                        help="Categorify freq_threshold, comma-separated (default 0,2; --scaling uses the last)")
    parser.add_argument("--repeat", type=int, default=1, help="alternating rounds of all systems; the best is reported")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: tabloader on cuDF against hand-written cuDF, cudf-polars, pandas and polars")
    parser.add_argument("--systems", default=None,
                        help="comma-separated subset of " + ",".join(dict.fromkeys(SYSTEMS + GPU_SYSTEMS))
                        + " (default: " + ",".join(SYSTEMS) + "; with --device cuda: " + ",".join(GPU_SYSTEMS) + ")")
    parser.add_argument("--part-size", default=None, help="tabloader Dataset part_size (default: the library's)")
    parser.add_argument("--work", default="/tmp/tabloader-bench/workflow-out", help="where outputs are written")
    parser.add_argument("--keep", action="store_true", help="keep the outputs")
    parser.add_argument("--scaling", action="store_true", help="time and memory against rows and vocabulary size")
    parser.add_argument("--scaling-rows", type=int_list, default=[1_000_000, 5_000_000, 20_000_000])
    parser.add_argument("--vocab-sizes", type=int_list, default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--vocab-rows", type=int, default=20_000_000)
    parser.add_argument("--system", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.system:  # child process: run one system, print one JSON line
        kwargs = {"part_size": args.part_size} if args.system.startswith("tabloader") else {}
        setup_s = setup_system(args.system)
        fit_s, transform_s = RUNNERS[args.system](args.data, args.out, args.freq_threshold[0], **kwargs)
        import resource

        cpu = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                  for f in ("ru_utime", "ru_stime"))
        print(json.dumps({"setup_s": setup_s, "fit_s": fit_s, "transform_s": transform_s,
                          "peak_rss_mb": peak_rss_mb(), "cpu_s": cpu}))
        return

    if args.systems is None:
        systems = default_systems(args.device)
    else:
        systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(systems) - set(RUNNERS)
    if unknown:
        parser.error(f"unknown system(s) {sorted(unknown)}; choose from {sorted(RUNNERS)}")
    if args.scaling and args.string_categoricals:
        parser.error("--scaling measures integer categoricals only; leave out --string-categoricals")
    if args.data is None:
        args.data = DEFAULT_RAW_CRITEO_STRINGS if args.string_categoricals else DEFAULT_RAW_CRITEO
    if args.repeat < 1 or not args.freq_threshold:
        parser.error("--repeat must be >= 1 and --freq-threshold must name at least one value")
    os.makedirs(args.work, exist_ok=True)
    (scaling if args.scaling else compare)(args, systems)


if __name__ == "__main__":
    main()
