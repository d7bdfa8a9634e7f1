"""Where one loader epoch spends its time, stage by stage, on a GPU (issue 13).

Drives the loader's own stage objects (reader, chunk buffer, shuffler, batcher) over one
shuffled epoch of preprocessed Criteo-like rows (``benchmarks/_common.preprocessed_criteo``),
waiting for the device at every stage boundary, so that each stage's time is its own:

* ``read``: decoding the partitions (pyarrow on the host; cuDF with ``--decode cuda``);
* ``pack``: packing the decoded columns into the chunk buffer's host staging (pinned memory on
  a GPU; the buffer itself on the CPU), or into the device buffer for cuDF frames;
* ``h2d``: the host-to-device copy of each chunk;
* ``shuffle``: the chunk's permutation (and on a GPU its one gather per dtype);
* ``batches``: cutting the chunk into batches and handing them out (the core loader's arrays,
  and ``torch``: the same through one DLPack import per dtype, as ``tabloader.torch.Loader``).

Then whole epochs, without the boundaries: a fresh loader's first epoch, the next one, and the
same with ``resident=True`` (the next epoch only copies, shuffles and slices on the device), for
the core loader and the torch adapter; and, with ``--trace``, a ``torch.profiler`` chrome trace of
the first batches of a resident epoch through the torch adapter.

First, before anything else, one epoch of the core loader (``first epoch in the process``: it
pays the libraries' start -- CUDA modules loaded on first use, cuDF's reader, CuPy's kernels).
Then the first-epoch variants of the choices only a GPU machine can settle, each a fresh core
loader (``variants``): ``--read-ahead`` (``TABLOADER_READ_AHEAD``: partitions decoded at once),
``--part-sizes`` (the dataset's partitions: fewer, larger reads against an earlier start of the
pipeline) and, with cuDF decoding, ``--kvikio-threads`` (``KVIKIO_NTHREADS``: the threads
libcudf reads files with, set once per process: each value runs in a process of its own).

Writes ``OUT_DIR/stages.json`` and ``OUT_DIR/stages.txt`` (and ``OUT_DIR/trace_*.json``).

Usage (from the repository root)::

    python tools/gpu_profile_loader.py /tmp/loader-profile --device cuda --trace
    python tools/gpu_profile_loader.py /tmp/loader-profile --device cuda --decode cuda   # cuDF decoding
    python tools/gpu_profile_loader.py /tmp/p --device cpu --rows 20000 --files 2 --batch-sizes 512
    python tools/gpu_profile_loader.py /tmp/p --device cuda --decode cuda --read-ahead 1 2 \
        --part-sizes default 256MB --kvikio-threads 4 16
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]

import tabloader as tl  # noqa: E402
from tabloader import backend  # noqa: E402
from tabloader.loader.buffer import Chunk, _pack_table  # noqa: E402  (the stages one by one)

from _common import preprocessed_criteo  # noqa: E402


def profile_stages(path: str, batch_size: int, device: str, decode_on: str, buffer_size: str) -> dict[str, Any]:
    """Seconds per stage over one epoch (the device waited for at every stage boundary)."""
    loader = tl.Loader(tl.Dataset(path, device=decode_on), batch_size=batch_size, seed=0, device=device,
                       buffer_size=buffer_size, prefetch=False)
    specs = loader.plan.chunks(0)
    buffer = loader._chunk_buffer(max(s.num_rows for s in specs))
    buffers, staging = buffer._slot(0)
    times = dict.fromkeys(["read", "pack", "h2d", "shuffle", "batches", "batches torch"], 0.0)
    batches = 0
    for spec in specs:
        row, uploads = 0, []
        for seg in spec.segments:
            # read(): a partition split between chunks is decoded once, as the loader decodes it
            table = _timed(times, "read", device, lambda: loader.reader.read(seg.partition))
            on_host = backend.on_host(table)
            _timed(times, "pack", device,
                   lambda: _pack_table(loader.layout, table, seg, staging if on_host else buffers, row))
            if on_host:
                uploads.append((row, row + seg.num_rows))
            row += seg.num_rows
            table = None  # the read table is dropped before the copy, as the loader drops it
        _timed(times, "h2d", device, lambda: backend.copy_rows(buffers, staging, uploads))
        chunk = Chunk(spec, {d: b[:spec.num_rows] for d, b in buffers.items()}, {})
        _timed(times, "shuffle", device, lambda: loader.shuffler.shuffle_chunk(chunk, 0, 0))
        one = tl.loader.ChunkSpec(0, spec.segments, 0)  # the chunk alone, as the first of a stream
        alone = Chunk(one, chunk.groups, {}, chunk.perm, chunk.shuffled)
        batches += _timed(times, "batches", device,
                          lambda: sum(1 for _ in loader.batcher.batches([alone], 0, spec.num_rows)))
        convert = _torch_import(device)
        if convert is not None:
            _timed(times, "batches torch", device,
                   lambda: sum(1 for _ in loader.batcher.batches([alone], 0, spec.num_rows, convert)))
    rows = loader.plan.rows_per_rank
    return {"seconds": times, "rows": rows, "batches": batches, "chunks": len(specs),
            "rows_per_s": {k: rows / v if v else None for k, v in times.items()},
            "us_per_batch": {k: 1e6 * times[k] / batches for k in ("batches", "batches torch")}}


def _timed(times: dict[str, float], stage: str, device: str, work: Callable[[], Any]) -> Any:
    backend.synchronize(device)
    start = time.perf_counter()
    result = work()
    backend.synchronize(device)
    times[stage] += time.perf_counter() - start
    return result


def _torch_import(device: str) -> Callable[[Any], Any] | None:
    """What the torch adapter does to a batch's arrays (None without torch)."""
    try:
        import torch
    except ImportError:
        return None
    return lambda array: torch.from_dlpack(backend.exportable(array))


def profile_epochs(path: str, batch_size: int, device: str, decode_on: str, buffer_size: str) -> dict[str, Any]:
    """rows/s of whole epochs: first and next, reading every epoch and resident, core and torch."""
    results = {}
    for resident in (False, True):
        for adapter in ("core", "torch"):
            loader = _loader(adapter, path, batch_size, device, decode_on, buffer_size, resident)
            if loader is None:
                continue
            for epoch in ("first", "next"):
                start = time.perf_counter()
                rows = sum(len(target) for _, target in loader)
                backend.synchronize(device)
                seconds = time.perf_counter() - start
                results[f"{adapter}{' resident' if resident else ''} {epoch} epoch"] = {
                    "rows_per_s": rows / seconds, "us_per_batch": 1e6 * seconds / len(loader)}
            loader.close()
    return results


def _loader(adapter: str, path: str, batch_size: int, device: str, decode_on: str, buffer_size: str,
            resident: bool) -> Any:
    kwargs = dict(batch_size=batch_size, seed=0, device=device, buffer_size=buffer_size, resident=resident)
    if adapter == "core":
        return tl.Loader(tl.Dataset(path, device=decode_on), **kwargs)
    try:
        import tabloader.torch
    except ImportError:
        return None
    return tabloader.torch.Loader(tl.Dataset(path, device=decode_on), **kwargs)


def first_epoch(path: str, batch_size: int, device: str, decode_on: str, buffer_size: str,
                part_size: str | None = None) -> dict[str, float]:
    """rows/s of a fresh core loader's first epoch and of its next one."""
    dataset = tl.Dataset(path, device=decode_on, **({} if part_size is None else {"part_size": part_size}))
    loader = tl.Loader(dataset, batch_size=batch_size, seed=0, device=device, buffer_size=buffer_size)
    rates = {}
    for epoch in ("first", "next"):
        start = time.perf_counter()
        rows = sum(len(target) for _, target in loader)
        backend.synchronize(device)
        rates[f"{epoch} epoch rows_per_s"] = rows / (time.perf_counter() - start)
    loader.close()
    rates["partitions"] = dataset.npartitions
    return rates


def profile_variants(path: str, batch_size: int, device: str, decode_on: str, buffer_size: str,
                     read_aheads: list[int], part_sizes: list[str]) -> dict[str, Any]:
    """First epochs of fresh loaders for every ``TABLOADER_READ_AHEAD`` x part size."""
    from tabloader.loader.reader import READ_AHEAD_ENV

    results = {}
    before = os.environ.get(READ_AHEAD_ENV)
    try:
        for ahead in read_aheads:
            os.environ[READ_AHEAD_ENV] = str(ahead)
            for part_size in part_sizes:
                size = None if part_size == "default" else part_size
                results[f"read_ahead={ahead} part_size={part_size}"] = first_epoch(
                    path, batch_size, device, decode_on, buffer_size, size)
    finally:
        if before is None:
            os.environ.pop(READ_AHEAD_ENV, None)
        else:
            os.environ[READ_AHEAD_ENV] = before
    return results


def kvikio_variants(out_dir: str, args: argparse.Namespace) -> dict[str, Any]:
    """The variants again in a process per ``KVIKIO_NTHREADS`` value (libcudf reads it once)."""
    results = {}
    for threads in args.kvikio_threads:
        sub_dir = os.path.join(out_dir, f"kvikio{threads}")
        command = [sys.executable, os.path.abspath(__file__), sub_dir, "--device", args.device, "--decode", args.decode,
                   "--rows", str(args.rows), "--files", str(args.files), "--buffer-size", args.buffer_size,
                   "--data", args.data, "--variants-only", "--batch-sizes", *map(str, args.batch_sizes),
                   "--read-ahead", *map(str, args.read_ahead), "--part-sizes", *args.part_sizes]
        subprocess.run(command, check=True, env={**os.environ, "KVIKIO_NTHREADS": str(threads)})
        with open(os.path.join(sub_dir, "stages.json")) as f:
            results[f"KVIKIO_NTHREADS={threads}"] = json.load(f)["runs"]
    return results


def trace(out_dir: str, path: str, batch_size: int, device: str, decode_on: str, buffer_size: str,
          batches: int) -> str | None:
    """A torch.profiler chrome trace of ``batches`` batches of a resident epoch (torch adapter)."""
    try:
        import torch
        import tabloader.torch
    except ImportError:
        return None
    loader = tabloader.torch.Loader(tl.Dataset(path, device=decode_on), batch_size=batch_size, seed=0, device=device,
                                    buffer_size=buffer_size, resident=True)
    for _ in loader:  # the first epoch makes the partitions resident
        pass
    activities = [torch.profiler.ProfilerActivity.CPU]
    if not backend.is_host(device):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for i, _ in enumerate(loader):
            if i + 1 >= batches:
                break
        backend.synchronize(device)
    loader.close()
    target = os.path.join(out_dir, f"trace_batch{batch_size}_{decode_on}.json")
    prof.export_chrome_trace(target)
    return target


def device_name(device: str) -> str:
    if backend.is_host(device):
        return f"cpu ({os.cpu_count()} cores)"
    props = backend.cupy().cuda.runtime.getDeviceProperties(backend.cupy().cuda.runtime.getDevice())
    return props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--decode", choices=["cpu", "cuda"], default="cpu",
                        help="where partitions are decoded: pyarrow on the host, or cuDF on the GPU")
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[4096, 65536])
    parser.add_argument("--buffer-size", default="256MB")
    parser.add_argument("--data", default=os.path.join("/tmp", "tabloader_bench", "criteo_pre"))
    parser.add_argument("--trace", action="store_true", help="write torch.profiler traces")
    parser.add_argument("--trace-batches", type=int, default=100)
    parser.add_argument("--read-ahead", type=int, nargs="+", default=[1, 2],
                        help="TABLOADER_READ_AHEAD values to time first epochs with")
    parser.add_argument("--part-sizes", nargs="+", default=["default"],
                        help="dataset part sizes to time first epochs with ('default': the dataset's own)")
    parser.add_argument("--kvikio-threads", type=int, nargs="*", default=[],
                        help="KVIKIO_NTHREADS values (cuDF's file reads: --decode cuda), each in a process of its own")
    parser.add_argument("--variants-only", action="store_true", help=argparse.SUPPRESS)  # a kvikio process
    args = parser.parse_args(argv)

    os.makedirs(args.out_dir, exist_ok=True)
    path = preprocessed_criteo(os.path.join(args.data, f"rows{args.rows}_files{args.files}"), args.rows, args.files)
    report: dict[str, Any] = {"device": device_name(args.device), "decode": args.decode, "rows": args.rows,
                              "files": args.files, "buffer_size": args.buffer_size, "runs": {}}
    lines = [f"device {report['device']}, decode on {args.decode}, {args.rows:,} rows in {args.files} files"]
    cold = first_epoch(path, args.batch_sizes[0], args.device, args.decode, args.buffer_size)
    report["first epoch in the process"] = cold
    lines.append(f"first epoch in the process (batch {args.batch_sizes[0]}): "
                 f"{cold['first epoch rows_per_s'] / 1e6:.2f}M rows/s")
    for bs in args.batch_sizes:
        variants = profile_variants(path, bs, args.device, args.decode, args.buffer_size, args.read_ahead,
                                    args.part_sizes)
        report["runs"][str(bs)] = {"variants": variants}
        lines += [f"batch {bs}: variant {name:38s} first epoch {r['first epoch rows_per_s'] / 1e6:7.2f}M rows/s, "
                  f"next {r['next epoch rows_per_s'] / 1e6:7.2f}M rows/s ({r['partitions']} partitions)"
                  for name, r in variants.items()]
        if args.variants_only:
            continue
        stages = profile_stages(path, bs, args.device, args.decode, args.buffer_size)
        epochs = profile_epochs(path, bs, args.device, args.decode, args.buffer_size)
        report["runs"][str(bs)].update(stages=stages, epochs=epochs)
        lines.append(f"batch {bs}: {stages['chunks']} chunks, {stages['batches']} batches")
        for stage, seconds in stages["seconds"].items():
            rate = stages["rows_per_s"][stage]
            lines.append(f"  stage {stage:14s} {seconds * 1e3:9.1f} ms  {rate / 1e6 if rate else 0:9.1f}M rows/s")
        lines += [f"  per batch: {stage} {us:.1f} us" for stage, us in stages["us_per_batch"].items()]
        lines += [f"  {name:28s} {r['rows_per_s'] / 1e6:9.2f}M rows/s  {r['us_per_batch']:9.1f} us/batch"
                  for name, r in epochs.items()]
        if args.trace:
            traced = trace(args.out_dir, path, bs, args.device, args.decode, args.buffer_size, args.trace_batches)
            if traced:
                lines.append(f"  trace: {traced}")
    if args.kvikio_threads and not args.variants_only:
        report["kvikio"] = kvikio_variants(args.out_dir, args)
        lines += [f"{setting} batch {bs}: variant {name:38s} first epoch "
                  f"{r['first epoch rows_per_s'] / 1e6:7.2f}M rows/s, next {r['next epoch rows_per_s'] / 1e6:7.2f}M rows/s"
                  for setting, runs in report["kvikio"].items() for bs, run in runs.items()
                  for name, r in run["variants"].items()]
    text = "\n".join(lines)
    print(text, flush=True)
    for name, content in (("stages.json", json.dumps(report, indent=1)), ("stages.txt", text + "\n")):
        with open(os.path.join(args.out_dir, name + ".tmp"), "w") as f:
            f.write(content)
        os.replace(os.path.join(args.out_dir, name + ".tmp"), os.path.join(args.out_dir, name))


if __name__ == "__main__":
    main()
