"""Host-offloaded embeddings vs all-GPU vs the forum's answer (``nn.Embedding`` on CPU + SparseAdam).

One table of ``--rows-per-table`` rows x ``--dim`` (``--tables`` of them, default 1), Zipf ids
(exponent ``--zipf``; id 0 is padding and never drawn), batch ``--batch``. One step = lookup,
backward of a fixed random output gradient, optimizer update (Adam semantics by default, lazy
like ``torch.optim.SparseAdam``). The GPU-memory budget defaults to a quarter of the tables'
bytes (weights + optimizer state), so the table is 4x the budget. Compared:

* ``cpu nn.Embedding+SparseAdam`` -- the tables as ``nn.Embedding(sparse=True)`` kept on the
  host, ids on the host, the output copied to the device and the gradient back; SparseAdam step.
* ``offloaded`` -- :class:`OffloadedEmbeddingCollection` with ``gpu_budget_bytes=--budget-mb``,
  staging each batch's cold rows when its forward needs them.
* ``offloaded + prefetch`` -- the same, calling ``prefetch(next batch)`` before each forward, so
  the next batch's cold rows are gathered (worker thread) and copied (side stream) while the
  current batch computes.
* ``offloaded, direct`` -- ``cold_access="direct"``: the cold rows stay in pinned host memory,
  and the kernels read and update them there over the bus, in the hot rows' launches (no
  staging, no host synchronization). Pinning the host store takes a while; it is not timed.
* ``all-GPU fused`` -- :class:`FusedEmbeddingCollection` with every row on the device (skipped
  when it does not fit).

Usage::

    python benchmarks/offload.py --device cuda        # batch 65536, 20M rows x 128 (~30 GB w/ Adam)
    python benchmarks/offload.py --device cpu         # small scale, < 1 min
    python benchmarks/offload.py --device cuda --trace-dir /tmp/offload-trace   # + torch.profiler traces

With ``--trace-dir DIR``, 5 steps of each offloaded variant also run under ``torch.profiler``:
``DIR/trace_<variant>.json`` (chrome trace: where the copies, the host gather and the waits sit)
and ``DIR/ops_<variant>.txt`` (the top operators by self time).

The collections are timed over a whole run of steps (mean ms/step), the offloaded one's
background write-backs included (its worker's queue is waited for before the clock stops); the
CPU answer by the median step. The hot rows are the smallest ids, which the Zipf draw makes the
most frequent: a frequency-ordered encoding (Categorify's) is assumed.

Not a test: it prints a Markdown table (method, ms/step, rows/s, speed-up vs the CPU answer).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
try:  # Triton before anything could import TensorFlow
    import triton  # noqa: F401
except ImportError:
    pass

import torch  # noqa: E402
from torch import nn  # noqa: E402

from tabloader.torch.fused import FusedEmbeddingCollection  # noqa: E402
from tabloader.torch.layers import EmbeddingConfig  # noqa: E402
from tabloader.torch.offload import OffloadedEmbeddingCollection, bytes_per_row  # noqa: E402

try:
    from benchmarks._common import print_table, median_step_seconds, run_step_seconds, zipf_ids  # noqa: E402
except ImportError:  # run from inside benchmarks/
    from _common import print_table, median_step_seconds, run_step_seconds, zipf_ids  # type: ignore  # noqa: E402

DEFAULTS = {  # device -> rows per table, dim, batch, steps
    "cuda": (20_000_000, 128, 65536, 20),
    "cpu": (400_000, 32, 8192, 5),
}


def trace(out_dir: str, name: str, step: Callable[[int], None], device: str, steps: int = 5) -> None:
    """Write a torch.profiler chrome trace and an operator table of ``steps`` calls of ``step``."""
    os.makedirs(out_dir, exist_ok=True)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for i in range(steps):
            step(i)
        if device == "cuda":
            torch.cuda.synchronize()
    prof.export_chrome_trace(os.path.join(out_dir, f"trace_{name}.json"))
    with open(os.path.join(out_dir, f"ops_{name}.txt"), "w") as f:
        f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))


def _release(device: str) -> None:
    """Free a collection's host and device memory before the next one is built."""
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        if hasattr(torch._C, "_host_emptyCache"):  # pinned blocks are cached too (torch >= 2.5)
            torch._C._host_emptyCache()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rows-per-table", type=int, default=None)
    parser.add_argument("--tables", type=int, default=1)
    parser.add_argument("--dim", type=int, default=None)
    parser.add_argument("--budget-mb", type=float, default=None,
                        help="device budget for the hot rows (default: a quarter of the tables' bytes)")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--zipf", type=float, default=1.05)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--optimizer", choices=["adam", "adagrad", "sgd"], default="adam")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--skip-cpu-baseline", action="store_true")
    parser.add_argument("--trace-dir", default=None, help="also write torch.profiler traces of the offloaded steps here")
    args = parser.parse_args(argv)

    dev = args.device
    rows, dim, batch, steps = DEFAULTS[dev]
    rows = args.rows_per_table or rows
    dim = args.dim or dim
    batch = args.batch or batch
    steps = args.steps or steps
    bpr = bytes_per_row(dim, args.optimizer)
    table_bytes = args.tables * rows * bpr
    budget = int(args.budget_mb * 2**20) if args.budget_mb is not None else table_bytes // 4
    configs = [EmbeddingConfig(f"C{i + 1}", rows, dim) for i in range(args.tables)]
    names = [c.name for c in configs]

    gen = torch.Generator().manual_seed(0)
    n_batches = 8
    host_batches = [{n: zipf_ids(batch, rows, args.zipf, gen) for n in names} for _ in range(n_batches)]
    dev_batches = [{n: v.to(dev) for n, v in b.items()} for b in host_batches]
    upstream = torch.randn(batch, args.tables * dim, generator=gen).to(dev)
    print(f"# offload benchmark: device={dev} ({torch.cuda.get_device_name() if dev == 'cuda' else 'host'}), "
          f"{args.tables} table(s) x {rows:,} rows x dim {dim}, {args.optimizer}, "
          f"table {table_bytes / 2**20:,.0f} MB, budget {budget / 2**20:,.0f} MB, batch {batch}, zipf {args.zipf}, "
          f"torch threads {torch.get_num_threads()}", flush=True)

    results: list[tuple[str, float, str]] = []

    # --- the forum's answer: nn.Embedding(sparse=True) on the host + SparseAdam ------------------
    if not args.skip_cpu_baseline:
        embs = nn.ModuleList([nn.Embedding(rows, dim, sparse=True) for _ in names])
        opt: Any
        if args.optimizer == "adam":
            opt = torch.optim.SparseAdam(embs.parameters(), lr=args.lr)
        elif args.optimizer == "sgd":
            opt = torch.optim.SGD(embs.parameters(), lr=args.lr)
        else:
            opt = torch.optim.Adagrad(embs.parameters(), lr=args.lr)

        def cpu_step(i: int) -> None:
            b = host_batches[i % n_batches]
            out = torch.cat([e(b[n]) for e, n in zip(embs, names)], dim=1)
            out_dev = out.to(dev)
            opt.zero_grad(set_to_none=True)
            (out_dev * upstream).sum().backward()
            opt.step()

        results.append((f"cpu nn.Embedding+{type(opt).__name__}", median_step_seconds(cpu_step, steps, args.warmup, dev), ""))
        del embs, opt
        gc.collect()

    # --- offloaded -------------------------------------------------------------------------------
    off = OffloadedEmbeddingCollection(configs, gpu_budget_bytes=budget, optimizer=args.optimizer, lr=args.lr,
                                       device=dev, validate_indices=False)
    hot = off.hot_rows
    flat = torch.cat([b[n] for b in host_batches for n in names])
    hit = float((flat < hot[0]).double().mean()) if args.tables == 1 else float("nan")
    uniq_cold = statistics.mean(int(torch.unique(b[n][b[n] >= h]).numel())
                                for b in host_batches for n, h in zip(names, hot))

    def coll_step(coll: Any, prefetch: bool = False) -> Callable[[int], None]:
        def step(i: int) -> None:
            if prefetch:
                coll.prefetch(dev_batches[(i + 1) % n_batches])
            out = coll(dev_batches[i % n_batches])
            (out * upstream).sum().backward()
        return step

    # A whole run, the worker's queue of write-backs waited for before the clock stops: a step
    # leaves its scatter into the host store to that thread, which a per-step clock would not see.
    results.append((f"offloaded (hot {sum(hot):,} rows, {hit:.0%} of lookups; {uniq_cold:,.0f} unique cold "
                    "rows/table/batch)", run_step_seconds(coll_step(off), steps, args.warmup, dev, off._flush), ""))
    off.prefetch(dev_batches[0])  # the first timed-loop batch's rows, like a training loop's first prefetch
    results.append(("offloaded + prefetch of the next batch",
                     run_step_seconds(coll_step(off, prefetch=True), steps, args.warmup, dev, off._flush), ""))
    if args.trace_dir:
        trace(args.trace_dir, "offloaded", coll_step(off), dev)
        off.prefetch(dev_batches[0])
        trace(args.trace_dir, "offloaded_prefetch", coll_step(off, prefetch=True), dev)
    del off
    _release(dev)

    direct = OffloadedEmbeddingCollection(configs, gpu_budget_bytes=budget, optimizer=args.optimizer, lr=args.lr,
                                          device=dev, validate_indices=False, cold_access="direct")
    results.append(("offloaded, direct (the kernels read and update the cold rows in host memory)",
                    run_step_seconds(coll_step(direct), steps, args.warmup, dev, direct._flush), ""))
    if args.trace_dir:
        trace(args.trace_dir, "offloaded_direct", coll_step(direct), dev)
    del direct
    _release(dev)

    # --- all on the device -----------------------------------------------------------------------
    try:
        fused = FusedEmbeddingCollection(configs, optimizer=args.optimizer, lr=args.lr, device=dev,
                                         validate_indices=False)
        results.append(("all-GPU fused" if dev == "cuda" else "all-on-device fused (host)",
                        run_step_seconds(coll_step(fused), steps, args.warmup, dev), ""))
        del fused
    except torch.OutOfMemoryError:
        results.append(("all-GPU fused", float("nan"), "does not fit"))

    base = results[0][1] if not args.skip_cpu_baseline else float("nan")
    rows_out = []
    for name, sec, note in results:
        rows_out.append([name, sec * 1e3, batch / sec if sec == sec else note,
                         f"{base / sec:.2f}x" if sec == sec and base == base else "-"])
    print_table(["method", "ms/step", "rows/s", "speed-up vs CPU nn.Embedding"], rows_out)


if __name__ == "__main__":
    main()
