"""Benchmark: a Dask worker's peak memory against the Dataset ``part_size``.

Runs the Criteo workflow of ``tests/test_dask_scale.py`` (``Categorify(freq_threshold=2)`` on
``C1..C26``, ``FillMissing(0) >> Normalize()`` on ``I1..I13``, ``label`` passed through) on a
``distributed.LocalCluster`` (worker processes, one thread each, no memory limit), once per
``part_size``: ``Workflow.fit``, then ``Workflow.transform(...).to_parquet(...)``. A thread
samples every worker's resident memory (RSS) every 0.1 s through ``client.run``; per phase the
table gives the largest RSS any worker reached, next to the workers' RSS right after start and
the decoded (pandas) size of one partition. If workers hold about one partition at a time, the
peak should grow as ``start + k x partition`` with a small ``k``.

    python benchmarks/dask_memory.py                        # 2.5M rows in 80 files (written once)
    python benchmarks/dask_memory.py --rows 200000 --files 8 --part-sizes 1MB,4MB
    python benchmarks/dask_memory.py --workers 1 --part-sizes 32MB,128MB,512MB

A fresh cluster per ``part_size``, so no run inherits another's memory.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import threading
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]  # _common, and tabloader from this checkout (workers inherit it)

from _common import CRITEO_CATEGORICAL, CRITEO_CONTINUOUS, CRITEO_LABEL, print_table, raw_criteo  # noqa: E402

MB = 2**20


def worker_rss(client) -> dict[str, int]:
    """Resident bytes of each worker process, by worker address."""
    import psutil

    return client.run(lambda: psutil.Process().memory_info().rss)


class WorkerRSSSampler:
    """Peak RSS per worker while the ``with`` block runs, sampled every ``interval`` s.

    Goes through ``client.run``, so a sample waits for the worker's event loop; a task holding
    the GIL for long can delay (not lose) it. ``peak_mb`` is the max over workers."""

    def __init__(self, client, interval: float = 0.1) -> None:
        self.client, self.interval, self.peaks = client, interval, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        try:
            for address, rss in worker_rss(self.client).items():
                self.peaks[address] = max(self.peaks.get(address, 0), rss)
        except Exception:  # a worker (re)starting; the next sample will do
            pass

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    @property
    def peak_mb(self) -> float:
        return max(self.peaks.values(), default=0) / MB

    def __enter__(self) -> "WorkerRSSSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()  # one last look, after the phase's last task


def workflow():
    import tabloader as tl
    from tabloader import ops

    cats = CRITEO_CATEGORICAL >> ops.Categorify(freq_threshold=2)
    conts = CRITEO_CONTINUOUS >> ops.FillMissing(0) >> ops.Normalize()
    return tl.Workflow(cats + conts + [CRITEO_LABEL], progress=False)


def measure(raw: str, part_size: str, workers: int, workdir: str) -> list:
    """One table row: partitions, partition MB, worker RSS at start, per-phase peak RSS and time."""
    import distributed

    import tabloader as tl

    ds = tl.Dataset(raw, part_size=part_size)
    part_mb = ds.read_partition(0).memory_usage(deep=True).sum() / MB
    # memory_limit=0: no limit, so Dask neither spills, pauses nor kills -- we see the raw peak
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, memory_limit=0,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        client.run(lambda: __import__("tabloader.workflow"))  # the start figure includes pandas, pyarrow, tabloader
        start_mb = max(worker_rss(client).values()) / MB
        wf = workflow()
        with WorkerRSSSampler(client) as fit_rss:
            t0 = time.perf_counter()
            wf.fit(ds)
            fit_s = time.perf_counter() - t0
        with tempfile.TemporaryDirectory(dir=workdir) as out, WorkerRSSSampler(client) as write_rss:
            t0 = time.perf_counter()
            wf.transform(ds).to_parquet(os.path.join(out, "out"), progress=False)
            write_s = time.perf_counter() - t0
    row = [part_size, ds.npartitions, part_mb, start_mb, fit_rss.peak_mb, write_rss.peak_mb, fit_s, write_s]
    print(f"  {part_size}: {ds.npartitions} partitions of ~{part_mb:.0f} MB; worker RSS {start_mb:.0f} MB at "
          f"start, peak {fit_rss.peak_mb:.0f} MB in fit ({fit_s:.1f} s), {write_rss.peak_mb:.0f} MB in "
          f"transform+write ({write_s:.1f} s)", flush=True)
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_500_000)
    parser.add_argument("--files", type=int, default=80)
    parser.add_argument("--max-cardinality", type=int, default=20_000)
    parser.add_argument("--part-sizes", default="16MB,64MB,256MB", help="comma-separated Dataset part_size values")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--workdir", default="/tmp/tabloader-bench/dask-memory",
                        help="raw data (written once) and temporary outputs")
    args = parser.parse_args(argv)

    import psutil

    raw = raw_criteo(os.path.join(args.workdir, f"criteo-{args.rows}-{args.files}-{args.max_cardinality}"),
                     args.rows, args.files, max_cardinality=args.max_cardinality)
    rows = [measure(raw, ps.strip(), args.workers, args.workdir) for ps in args.part_sizes.split(",") if ps.strip()]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nDask worker memory vs part_size: Criteo workflow, {args.rows:,} rows in {args.files} files "
          f"(max cardinality {args.max_cardinality:,}), LocalCluster of {args.workers} worker processes x 1 thread, "
          f"no memory limit; {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, "
          f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM (load average {load:.1f}); RSS sampled every 0.1 s, "
          "max over workers:")
    print_table(["part_size", "partitions", "MB per partition in memory", "worker RSS at start (MB)",
                 "peak worker RSS fit (MB)", "peak worker RSS transform+write (MB)", "fit s", "transform+write s"],
                rows)
    if len(rows) > 1:  # least-squares line peak = a + k * partition MB, per phase
        import numpy as np

        part = np.array([r[2] for r in rows])
        for name, column in (("fit", 4), ("transform+write", 5)):
            k, a = np.polyfit(part, [r[column] for r in rows], 1)
            print(f"{name}: peak worker RSS = {a:.0f} MB + {k:.2f} x partition size")


if __name__ == "__main__":  # worker processes are spawned and re-import this module
    main()
