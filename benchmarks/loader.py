"""Batch loader throughput: one shuffled epoch over preprocessed Criteo-like rows.

Compares, from one run:

* ``tabloader``: ``tabloader.Loader`` (numpy batches; CuPy with ``--device cuda``), one epoch
  of a fresh loader (``first``) and the next epoch (``steady``);
* ``ceiling``: pyarrow reads every file into numpy, then each batch gathers every column by a
  random permutation -- nothing else (the work any shuffling loader must do);
* ``torch batched``: the usual hand-written PyTorch approach: all rows already in memory as
  tensors, ``randperm`` and one index per tensor per batch (loading time not counted);
* ``torch DataLoader``: a map-style ``Dataset`` returning one row at a time, batched by
  ``torch.utils.data.DataLoader`` (num_workers 0 and 2), timed on a subset and extrapolated.

Usage::

    python benchmarks/loader.py --rows 5000000 --files 10 --batch-sizes 4096 65536 --data /tmp/bench
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import (CRITEO_CATEGORICAL, CRITEO_CONTINUOUS, CRITEO_LABEL, preprocessed_criteo,  # noqa: E402
                     print_table)


def run_tabloader(path: str, batch_size: int, device: str, buffer_size: str) -> tuple[float, float]:
    """rows/s of the first epoch of a fresh loader and of the following epoch."""
    import tabloader as tl

    loader = tl.Loader(tl.Dataset(path), batch_size=batch_size, shuffle=True, seed=0, device=device,
                       buffer_size=buffer_size)
    rates = []
    for _ in range(2):
        start = time.perf_counter()
        rows = 0
        for features, target in loader:
            rows += len(target)
        if device == "cuda":
            from tabloader import backend

            backend.cupy().cuda.runtime.deviceSynchronize()
        rates.append(rows / (time.perf_counter() - start))
    loader.close()
    return rates[0], rates[1]


def run_ceiling(path: str, batch_size: int) -> float:
    """pyarrow read of all files to numpy + a per-column permutation gather per batch."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    start = time.perf_counter()
    tables = [pq.read_table(f) for f in sorted(glob.glob(os.path.join(path, "*.parquet")))]
    table = pa.concat_tables(tables)
    columns = {name: table.column(name).to_numpy() for name in table.column_names}
    del tables, table
    n = len(columns[CRITEO_LABEL])
    perm = np.random.default_rng(0).permutation(n)
    for s in range(0, n, batch_size):
        idx = perm[s:s + batch_size]
        batch = {name: np.take(col, idx) for name, col in columns.items()}  # noqa: F841
    return n / (time.perf_counter() - start)


def run_torch_batched(path: str, batch_size: int) -> float:
    """In-memory tensors (loading not timed), randperm, one index_select per tensor per batch."""
    import pyarrow.parquet as pq
    import torch

    table = pq.read_table(path)
    cat = torch.from_numpy(np.stack([table.column(c).to_numpy() for c in CRITEO_CATEGORICAL], axis=1))
    cont = torch.from_numpy(np.stack([table.column(c).to_numpy() for c in CRITEO_CONTINUOUS], axis=1))
    label = torch.from_numpy(table.column(CRITEO_LABEL).to_numpy().copy())
    del table
    n = len(label)
    start = time.perf_counter()
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    for s in range(0, n, batch_size):
        idx = perm[s:s + batch_size]
        batch = (cat[idx], cont[idx], label[idx])  # noqa: F841
    return n / (time.perf_counter() - start)


class _RowDataset:
    """A map-style dataset returning one row: the item-by-item PyTorch pattern."""

    def __init__(self, cat: np.ndarray, cont: np.ndarray, label: np.ndarray) -> None:
        self.cat, self.cont, self.label = cat, cont, label

    def __len__(self) -> int:
        return len(self.label)

    def __getitem__(self, i: int):
        return self.cat[i], self.cont[i], self.label[i]


def run_torch_dataloader(path: str, batch_size: int, workers: int, subset: int) -> float:
    import pyarrow.parquet as pq
    import torch

    files = sorted(glob.glob(os.path.join(path, "*.parquet")))
    table = pq.read_table(files[0]).slice(0, subset)
    cat = np.stack([table.column(c).to_numpy() for c in CRITEO_CATEGORICAL], axis=1)
    cont = np.stack([table.column(c).to_numpy() for c in CRITEO_CONTINUOUS], axis=1)
    label = table.column(CRITEO_LABEL).to_numpy().copy()
    dataset = _RowDataset(cat, cont, label)
    loader = torch.utils.data.DataLoader(dataset, batch_size=min(batch_size, len(dataset)), shuffle=True,
                                         num_workers=workers, generator=torch.Generator().manual_seed(0),
                                         persistent_workers=False)
    start = time.perf_counter()
    rows = sum(len(batch[2]) for batch in loader)
    return rows / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[4096, 65536])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--data", default=os.path.join("/tmp", "tabloader_bench", "criteo_pre"))
    parser.add_argument("--buffer-size", default="256MB", help="tabloader chunk buffer (bytes)")
    parser.add_argument("--subset", type=int, default=200_000, help="rows for the item-by-item DataLoader")
    parser.add_argument("--skip-dataloader", action="store_true", help="skip the slow item-by-item baseline")
    args = parser.parse_args(argv)

    path = os.path.join(args.data, f"rows{args.rows}_files{args.files}")
    start = time.perf_counter()
    preprocessed_criteo(path, args.rows, args.files)
    print(f"data: {path} ({args.rows:,} rows, {args.files} files; ready in {time.perf_counter() - start:.1f} s); "
          f"device={args.device}; {os.cpu_count()} CPU(s)", flush=True)
    try:
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
    except ImportError:
        torch = None

    rows = []
    for bs in args.batch_sizes:
        first, steady = run_tabloader(path, bs, args.device, args.buffer_size)
        ceiling = run_ceiling(path, bs)
        results = [("tabloader (first epoch)", first), ("tabloader (next epoch)", steady), ("ceiling: pyarrow + numpy gather", ceiling)]
        if torch is not None:
            results.append(("torch batched, in-memory tensors", run_torch_batched(path, bs)))
            if not args.skip_dataloader:
                for workers in (0, 2):
                    results.append((f"torch DataLoader item-by-item, {workers} workers",
                                    run_torch_dataloader(path, bs, workers, args.subset)))
        for name, rate in results:
            rows.append([bs, name, f"{rate / 1e6:.2f}M", f"{rate / ceiling:.2f}", f"{first / rate:.1f}x"])
            print(f"  batch {bs}: {name}: {rate / 1e6:.3f}M rows/s", flush=True)
    print()
    print_table(["batch", "method", "rows/s", "vs ceiling", "tabloader (first epoch) speed-up"], rows)


if __name__ == "__main__":
    main()
