"""Shared helpers of the benchmark scripts: cached synthetic data, timing, a table printer.

Kept small and generic so every benchmark can reuse it.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from typing import Any, Callable, Sequence

import numpy as np

CRITEO_CATEGORICAL = [f"C{i}" for i in range(1, 27)]
CRITEO_CONTINUOUS = [f"I{i}" for i in range(1, 14)]
CRITEO_LABEL = "label"
BENCH_MARKER = "_bench.json"  # beside generated benchmark data: the spec it was written with


def written_before(path: str, spec: dict[str, Any]) -> bool:
    """True when ``path`` holds benchmark data written with ``spec`` (its ``_bench.json`` marker
    records that spec), so a run can reuse it instead of writing it again."""
    marker = os.path.join(path, BENCH_MARKER)
    if not os.path.exists(marker):
        return False
    with open(marker) as f:
        return json.load(f) == spec


def must_write(path: str, spec: dict[str, Any], what: str) -> bool:
    """False when ``path`` holds data written with ``spec`` (see :func:`written_before`); else
    says it writes ``what`` there, empties ``path`` and returns True (the caller writes, then
    :func:`mark_written`)."""
    if written_before(path, spec):
        return False
    print(f"writing {what} to {path} (once) ...", flush=True)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return True


def mark_written(path: str, spec: dict[str, Any]) -> None:
    """Record that ``path`` now holds the data ``spec`` describes (see :func:`written_before`)."""
    with open(os.path.join(path, BENCH_MARKER), "w") as f:
        json.dump(spec, f)


def preprocessed_criteo(path: str, rows: int, files: int = 10, seed: int = 0,
                        row_group_size: int = 131_072) -> str:
    """Write (once) ``rows`` preprocessed Criteo-like rows as ``files`` parquet files.

    The rows look like the output of a preprocessing workflow: 26 int64 categorical ids in
    ``[0, cardinality)`` (skewed towards small ids, as frequency-ordered encodings are), 13
    float32 continuous values (standardized, no nulls) and a float32 ``label``; a
    ``_schema.json`` gives the tags and cardinalities. Reused when ``path`` already holds data
    of the same size (a ``_bench.json`` marker records it).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tabloader.schema import ColumnSchema, Schema, Tags
    from tabloader.synthetic import criteo_cardinalities

    spec = {"rows": rows, "files": files, "seed": seed, "row_group_size": row_group_size, "kind": "criteo-pre"}
    if written_before(path, spec):
        return path
    os.makedirs(path, exist_ok=True)
    for name in os.listdir(path):
        if name.endswith(".parquet"):
            os.remove(os.path.join(path, name))
    cards = criteo_cardinalities(len(CRITEO_CATEGORICAL))
    bounds = np.linspace(0, rows, files + 1).astype(np.int64)
    for i in range(files):
        n = int(bounds[i + 1] - bounds[i])
        rng = np.random.default_rng([seed, i])
        cols: dict[str, Any] = {CRITEO_LABEL: (rng.random(n) < 0.25).astype(np.float32)}
        for name in CRITEO_CONTINUOUS:
            cols[name] = rng.standard_normal(n, dtype=np.float32)
        for name, card in zip(CRITEO_CATEGORICAL, cards):
            cols[name] = np.floor(card * rng.random(n) ** 3).astype(np.int64)
        pq.write_table(pa.table(cols), os.path.join(path, f"part_{i:05d}.parquet"), row_group_size=row_group_size)
    schema = Schema([ColumnSchema(CRITEO_LABEL, "float32", {Tags.TARGET, Tags.BINARY})]
                    + [ColumnSchema(c, "float32", {Tags.CONTINUOUS}) for c in CRITEO_CONTINUOUS]
                    + [ColumnSchema(c, "int64", {Tags.CATEGORICAL}, {"cardinality": k})
                       for c, k in zip(CRITEO_CATEGORICAL, cards)])
    schema.save(os.path.join(path, "_schema.json"))
    mark_written(path, spec)
    return path


def timed(function: Callable[[], Any], repeat: int = 1) -> tuple[float, Any]:
    """Best wall time of ``repeat`` calls of ``function`` and the last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return best, result


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Print (and return) a Markdown table."""
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in cells]
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


# --- raw (unprocessed) Criteo-like data, peak memory -----------------------------------------
DEFAULT_RAW_CRITEO = "/tmp/tabloader-bench/criteo-5M-10"


def raw_criteo(path: str, rows: int, files: int = 10, seed: int = 0, **criteo_kwargs: Any) -> str:
    """Write (once) ``rows`` raw Criteo-like rows (:func:`tabloader.synthetic.write_criteo`, with
    ``criteo_kwargs`` such as ``max_cardinality``) as ``files`` parquet files in ``path``; reused
    when a ``_bench.json`` marker in ``path`` records the same arguments."""
    from tabloader.synthetic import write_criteo

    spec = {"rows": rows, "files": files, "seed": seed, "kind": "criteo-raw", **criteo_kwargs}
    if written_before(path, spec):
        return path
    print(f"writing {rows:,} synthetic Criteo rows in {files} files to {path} (once) ...", flush=True)
    write_criteo(path, rows, num_files=files, seed=seed, overwrite=True, **criteo_kwargs)
    mark_written(path, spec)
    return path


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (MB).

    On Linux the high-water mark of the process's own memory (``VmHWM``): ``getrusage``'s
    ``ru_maxrss`` survives ``exec``, so a benchmark child started by a parent holding 2 GB
    would report 2 GB whatever it used itself. Elsewhere ``getrusage``.
    """
    import resource
    import sys

    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 1024


class RSSSampler:
    """Samples the resident memory of this process and its children in a thread; ``peak_mb``.

    Use as a context manager. Unlike ``getrusage`` it counts child processes (Dask workers)
    together, as they are at the same moment.
    """

    def __init__(self, interval: float = 0.05) -> None:
        self.interval, self.peak_mb = interval, 0.0
        self._stop = None
        self._thread = None

    def _run(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.wait(self.interval):
            try:
                procs = [me] + me.children(recursive=True)
                rss = sum(p.memory_info().rss for p in procs if p.is_running())
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            self.peak_mb = max(self.peak_mb, rss / 2**20)

    def __enter__(self) -> "RSSSampler":
        import threading

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


# --- torch benchmarks: Zipf ids and step timing (torch imported by the callers) ---------------
def zipf_ids(n: int, cardinality: int, exponent: float, gen: Any) -> Any:
    """``n`` int64 ids in ``[1, cardinality)`` with P(rank k) ~ 1/k**exponent (inverse CDF of
    the continuous law), drawn on the CPU from the ``torch.Generator`` ``gen``."""
    import torch

    u = torch.rand(n, generator=gen, dtype=torch.float64)
    m = cardinality - 1
    if abs(exponent - 1.0) < 1e-9:
        ranks = torch.exp(u * torch.log(torch.tensor(m + 1.0)))
    else:
        a = 1.0 - exponent
        ranks = (((m + 1.0) ** a - 1.0) * u + 1.0) ** (1.0 / a)
    return torch.clamp(ranks.floor().to(torch.int64), 1, m)


def sync(device: str) -> None:
    """Wait for queued CUDA work, so a timer measures it."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def run_step_seconds(step: Callable[[int], None], steps: int, warmup: int, device: str,
                     finish: Callable[[], None] | None = None) -> float:
    """Mean seconds per call of ``step(i)`` over a run of ``steps`` calls after ``warmup`` untimed
    ones, the clock stopped after ``finish()`` (work a step leaves to a background thread, which a
    per-step clock would not see) and a wait for the device."""
    for i in range(warmup):
        step(i)
    if finish is not None:
        finish()
    sync(device)
    start = time.perf_counter()
    for i in range(steps):
        step(warmup + i)
    if finish is not None:
        finish()
    sync(device)
    return (time.perf_counter() - start) / steps


def median_step_seconds(step: Callable[[int], None], steps: int, warmup: int, device: str) -> float:
    """Median seconds of ``step(i)`` over ``steps`` calls after ``warmup`` untimed ones."""
    for i in range(warmup):
        step(i)
    sync(device)
    times = []
    for i in range(steps):
        start = time.perf_counter()
        step(warmup + i)
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)
