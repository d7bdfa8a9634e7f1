"""Batch loader throughput: one shuffled epoch over preprocessed Criteo-like rows.

Compares, from one run:

* ``tabloader``: ``tabloader.Loader`` (numpy batches; CuPy with ``--device cuda``), one epoch
  of a fresh loader (``first``) and the next epoch (``next``); on CUDA decoded by pyarrow and
  copied from pinned memory, and also decoded by cuDF when cuDF is usable;
* ``tabloader resident``: the same with ``resident=True``: the first epoch keeps the decoded
  partitions on the device (host memory on the CPU), the next one only copies, shuffles and
  slices them;
* ``tabloader.torch resident``: the resident next epoch through the torch adapter
  (``tabloader.torch.Loader``), batches as torch tensors as the torch baselines give them;
* ``ceiling``: pyarrow reads every file into numpy, then each batch gathers every column by a
  random permutation -- nothing else (the work any shuffling loader must do on the host);
* ``torch batched``: the usual hand-written PyTorch approach: all rows already in memory as
  tensors on the device (GPU tensors with ``--device cuda``), ``randperm`` and one index per
  tensor per batch (loading time not counted);
* ``torch DataLoader``: a map-style ``Dataset`` returning one row at a time, batched by
  ``torch.utils.data.DataLoader`` (num_workers 0 and 2; batches copied to the GPU with
  ``--device cuda``), timed on a subset and extrapolated.

Usage::

    python benchmarks/loader.py --rows 5000000 --files 10 --batch-sizes 4096 65536 --data /tmp/bench
    python benchmarks/loader.py --device cuda ...    # on a GPU machine (tools/gpu_checks.sh)
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
                     print_table, sync)


def run_tabloader(path: str, batch_size: int, device: str, buffer_size: str, resident: bool = False,
                  decode_on: str = "cpu", torch_tensors: bool = False) -> tuple[float, float]:
    """rows/s of the first epoch of a fresh loader and of the following epoch; ``decode_on``
    is the dataset's device (``"cuda"``: cuDF decodes); ``torch_tensors``: through the torch
    adapter (``tabloader.torch.Loader``), batches as torch tensors like the torch baselines'."""
    import tabloader as tl
    from tabloader import backend

    make = tl.Loader
    if torch_tensors:
        import tabloader.torch

        make = tabloader.torch.Loader
    loader = make(tl.Dataset(path, device=decode_on), batch_size=batch_size, shuffle=True, seed=0,
                  device=device, buffer_size=buffer_size, resident=resident)
    rates = []
    for _ in range(2):
        start = time.perf_counter()
        rows = 0
        for features, target in loader:
            rows += len(target)
        backend.synchronize(device)
        rates.append(rows / (time.perf_counter() - start))
    loader.close()
    return rates[0], rates[1]


def tabloader_rows(path: str, batch_size: int, device: str, buffer_size: str) -> list[tuple[str, float]]:
    """The tabloader rows of the table: reading every epoch and resident, with cuDF decoding too
    on a GPU where cuDF is usable."""
    from tabloader import backend

    decoders = [("cpu", "")]
    if not backend.is_host(device):
        decoders = [("cpu", ", pyarrow + pinned copy")] + ([("cuda", ", cuDF decoding")]
                                                           if backend.cudf_available() else [])
    results = []
    for decode_on, how in decoders:
        for resident, kind in ((False, "tabloader"), (True, "tabloader resident")):
            first, steady = run_tabloader(path, batch_size, device, buffer_size, resident, decode_on)
            results += [(f"{kind} (first epoch{how})", first), (f"{kind} (next epoch{how})", steady)]
    if _has_torch():  # what a PyTorch user iterates, against the torch baselines: the last decoder, resident
        _, steady = run_tabloader(path, batch_size, device, buffer_size, True, decoders[-1][0], torch_tensors=True)
        results.append((f"tabloader.torch resident (next epoch{decoders[-1][1]})", steady))
    return results


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


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


def run_torch_batched(path: str, batch_size: int, device: str) -> float:
    """In-memory tensors on ``device`` (loading not timed), a permutation drawn on that device,
    one ``index_select`` per tensor per batch; the second epoch is timed (the first warms up),
    as tabloader's resident epochs are. Its shuffle is global; tabloader's is within chunks."""
    import pyarrow.parquet as pq
    import torch

    table = pq.read_table(path)
    cat = torch.from_numpy(np.stack([table.column(c).to_numpy() for c in CRITEO_CATEGORICAL], axis=1)).to(device)
    cont = torch.from_numpy(np.stack([table.column(c).to_numpy() for c in CRITEO_CONTINUOUS], axis=1)).to(device)
    label = torch.from_numpy(table.column(CRITEO_LABEL).to_numpy().copy()).to(device)
    del table
    n = len(label)
    generator = torch.Generator(device=device).manual_seed(0)

    def epoch() -> None:
        perm = torch.randperm(n, generator=generator, device=device)
        for s in range(0, n, batch_size):
            idx = perm[s:s + batch_size]
            batch = (cat.index_select(0, idx), cont.index_select(0, idx), label.index_select(0, idx))  # noqa: F841

    epoch()
    sync(device)
    start = time.perf_counter()
    epoch()
    sync(device)
    return n / (time.perf_counter() - start)


class _RowDataset:
    """A map-style dataset returning one row: the item-by-item PyTorch pattern."""

    def __init__(self, cat: np.ndarray, cont: np.ndarray, label: np.ndarray) -> None:
        self.cat, self.cont, self.label = cat, cont, label

    def __len__(self) -> int:
        return len(self.label)

    def __getitem__(self, i: int):
        return self.cat[i], self.cont[i], self.label[i]


def run_torch_dataloader(path: str, batch_size: int, workers: int, subset: int, device: str) -> float:
    """Rows one at a time, batched by DataLoader (pinned and copied to ``device`` when it is a GPU)."""
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
                                         persistent_workers=False, pin_memory=device == "cuda")
    start = time.perf_counter()
    rows = 0
    for batch in loader:
        batch = [t.to(device, non_blocking=True) for t in batch]
        rows += len(batch[2])
    sync(device)
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

    where = "GPU tensors" if args.device == "cuda" else "tensors"
    rows = []
    for bs in args.batch_sizes:
        results = tabloader_rows(path, bs, args.device, args.buffer_size)
        first = results[0][1]
        ceiling = run_ceiling(path, bs)
        results.append(("ceiling: pyarrow + numpy gather (host)", ceiling))
        if torch is not None:
            results.append((f"torch batched, in-memory {where}", run_torch_batched(path, bs, args.device)))
            if not args.skip_dataloader:
                for workers in (0, 2):
                    results.append((f"torch DataLoader item-by-item, {workers} workers",
                                    run_torch_dataloader(path, bs, workers, args.subset, args.device)))
        for name, rate in results:
            rows.append([bs, name, f"{rate / 1e6:.2f}M", f"{rate / ceiling:.2f}", f"{first / rate:.1f}x"])
            print(f"  batch {bs}: {name}: {rate / 1e6:.3f}M rows/s", flush=True)
    print()
    print_table(["batch", "method", "rows/s", "vs ceiling", "tabloader (first epoch) speed-up"], rows)


if __name__ == "__main__":
    main()
