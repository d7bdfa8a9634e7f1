"""Where a fused-embedding training step spends its time on a GPU, phase by phase.

Usage (repo root, CUDA device): ``python tools/embedding_phases.py OUT_DIR [--optimizer sgd]``

``benchmarks/embedding.py`` times whole steps: fused SGD, Adagrad and Adam all take ~2.5 ms on
an H100 although Adam moves three times the bytes of SGD, so the update kernel's bandwidth is not
what bounds the step. This script times, on the benchmark's batches (26 Criteo-like tables, batch
65536, dim 128), each phase alone: building the lookup plan (id validation included), the
forward gather, the row sort and segments of :func:`tabloader.torch.dispatch.segments`, and the
update kernels -- persistent on their default grid (``update_kernels``), on grids of 2 to 32
programs per SM (``update_kernels_by_grid``, keyed by programs), and with one program per
segment slot as before them (``update_kernels_one_per_segment``); the whole step with id validation (one synchronization per batch, as the
benchmark runs it) and without; whether a step without validation runs under
``torch.cuda.set_sync_debug_mode("error")`` (no host synchronization at all); and each kernel's
bytes moved as a share of the device's peak. Writes ``OUT_DIR/phases.json`` and prints it.

``graphed_ms`` times the same phases, and the whole ``capturable=True`` step (the benchmark's
"graphed" rows), each captured alone in a CUDA graph and replayed: no launch overhead and no
host synchronization in the figures, so that they add up to the graphed step's time (the
segments' share of the 1.70 ms graphed Adam step on an H100 is what decides whether to rewrite
their bookkeeping).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.embedding import cardinalities, make_batches  # noqa: E402
from tabloader.torch import dispatch  # noqa: E402
from tabloader.torch.fused import FusedEmbeddingCollection  # noqa: E402
from tabloader.torch.layers import EmbeddingConfig  # noqa: E402


def median_ms(fn, repeats=20):
    """Median wall time of ``fn()`` in ms, synchronized (phases include their own host syncs)."""
    times = []
    for _ in range(repeats + 3):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    return sorted(times[3:])[repeats // 2]


def graphed_ms(fn, replays=50):
    """Median milliseconds of one replay of ``fn`` captured in a CUDA graph (after two warm-up
    calls on a side stream: Triton compiles, the allocator settles), timed by CUDA events."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    times = []
    for _ in range(replays + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    del graph
    torch.cuda.empty_cache()  # the graph's private memory pool
    return sorted(times[3:])[replays // 2]


def graphed_phases(optimizer, cards, feats, dim):
    """The graphed step's phases, each captured alone (see the module's text)."""
    coll = FusedEmbeddingCollection([EmbeddingConfig(f"C{i + 1}", c, dim) for i, c in enumerate(cards)],
                                    optimizer=optimizer, lr=0.01, backend="triton", device="cuda",
                                    validate_indices=False, capturable=True)
    kernels = dispatch.load_kernels()
    weight = coll.weight.detach()
    plan = coll.plan(feats)
    grad = torch.randn(plan.rows.numel(), dim, device="cuda")
    out = torch.empty(plan.rows.numel(), dim, device="cuda")
    seg = dispatch.segments(plan.rows, coll._padding_rows, coll.chunk_size, weight.shape[0])
    states = [getattr(coll, n) for n in ("state_sum", "exp_avg", "exp_avg_sq") if hasattr(coll, n)] + [None, None]
    hyper = dispatch.device_hyper(optimizer, coll._device_lr, coll._device_step, coll.betas)

    def update():
        kernels.fused_backward_update(
            weight, states[0], states[1], grad, seg["perm"], None, None, seg["row"], seg["start"], seg["count"],
            seg["chunk"], seg["nchunks"], seg["used_segments"], seg["chunk_start"], seg["chunk_count"],
            seg["used_chunks"], optimizer=optimizer, lr=1e-9, eps=1e-8, beta1=0.9, beta2=0.999, hyper=hyper)

    def step():
        (coll(feats) * 1.0).sum().backward()

    return {"plan": graphed_ms(lambda: coll.plan(feats)),
            "gather": graphed_ms(lambda: kernels.gather(weight, plan.rows, out)),
            "segments": graphed_ms(lambda: dispatch.segments(plan.rows, coll._padding_rows, coll.chunk_size,
                                                             weight.shape[0])),
            "update_kernels": graphed_ms(update),
            "whole_step": graphed_ms(step)}


def sync_free(step):
    """True if ``step()`` makes no device-to-host synchronization, else the error naming the first."""
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    except RuntimeError as exc:
        return str(exc).splitlines()[0]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return True


def phases(optimizer, batch=65536, dim=128):
    """The eager phases, then the graphed ones: one collection at a time (Adam's takes 51 GB)."""
    cards = cardinalities(1.0, 26)
    feats = make_batches(cards, batch, 1, 1.05, "cuda")[0]
    report = eager_phases(optimizer, cards, feats, dim)
    torch.cuda.empty_cache()
    report["graphed_ms"] = graphed_phases(optimizer, cards, feats, dim)
    return report


def eager_phases(optimizer, cards, feats, dim):
    coll = FusedEmbeddingCollection([EmbeddingConfig(f"C{i + 1}", c, dim) for i, c in enumerate(cards)],
                                    optimizer=optimizer, lr=0.01, backend="triton", device="cuda")
    kernels = dispatch.load_kernels()
    weight = coll.weight.detach()
    plan = coll.plan(feats)
    grad = torch.randn(plan.rows.numel(), dim, device="cuda")
    seg = dispatch.segments(plan.rows, coll._padding_rows, coll.chunk_size, weight.shape[0])
    states = [getattr(coll, n) for n in ("state_sum", "exp_avg", "exp_avg_sq") if hasattr(coll, n)] + [None, None]

    def update(programs=None):
        kernels.fused_backward_update(
            weight, states[0], states[1], grad, seg["perm"], None, None, seg["row"], seg["start"], seg["count"],
            seg["chunk"], seg["nchunks"], seg["used_segments"], seg["chunk_start"], seg["chunk_count"],
            seg["used_chunks"], optimizer=optimizer, lr=1e-9, eps=1e-8, beta1=0.9, beta2=0.999, step_size=1e-9,
            programs=programs)

    def step():
        (coll(feats) * 1.0).sum().backward()

    out = torch.empty(plan.rows.numel(), dim, device="cuda")
    unique_rows = int((seg["count"] > 0).sum())  # the segments used, less those of padding rows
    sms = torch.cuda.get_device_properties(weight.device).multi_processor_count
    report = {"optimizer": optimizer, "lookups": plan.rows.numel(), "unique_rows": unique_rows,
              "chunks": int(seg["used_chunks"]), "multiprocessors": sms,
              "default_programs": kernels.persistent_programs(weight.device, dim), "ms": {
                  "plan": median_ms(lambda: coll.plan(feats)),
                  "gather": median_ms(lambda: kernels.gather(weight, plan.rows, out)),
                  "segments": median_ms(lambda: dispatch.segments(plan.rows, coll._padding_rows, coll.chunk_size,
                                                                  weight.shape[0])),
                  "update_kernels": median_ms(update),
                  "update_kernels_one_per_segment": median_ms(lambda: update(plan.rows.numel())),
                  "whole_step": median_ms(step)}}
    report["ms"]["update_kernels_by_grid"] = {
        sms * per_sm: median_ms(lambda: update(sms * per_sm)) for per_sm in (2, 4, 8, 16, 32)}
    coll.validate_indices = False
    report["ms"]["whole_step_unvalidated"] = median_ms(step)
    report["sync_free_step"] = sync_free(step)
    row_bytes = dim * 4 * (1 + {"sgd": 0, "adagrad": 0, "adam": 2}[optimizer])  # weight (+ m, v) per row
    update_bytes = plan.rows.numel() * dim * 4 + 2 * unique_rows * row_bytes
    ms = report["ms"]
    report["GB_per_s"] = {"gather": 2 * plan.rows.numel() * dim * 4 / ms["gather"] / 1e6,  # rows read + out written
                          "update_kernels": update_bytes / ms["update_kernels"] / 1e6,
                          "update_kernels_one_per_segment": update_bytes / ms["update_kernels_one_per_segment"] / 1e6,
                          "update_kernels_by_grid": {k: update_bytes / v / 1e6
                                                     for k, v in ms["update_kernels_by_grid"].items()}}
    return report


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir")
    p.add_argument("--optimizer", action="append", choices=("sgd", "adagrad", "adam"))
    args = p.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    results = [phases(o) for o in args.optimizer or ("sgd", "adam")]
    text = json.dumps({"device": torch.cuda.get_device_name(), "results": results}, indent=1)
    print(text)
    tmp = os.path.join(args.out_dir, "phases.json.tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, os.path.join(args.out_dir, "phases.json"))


if __name__ == "__main__":
    main()
