"""Embedding forward + backward + optimizer update: fused kernel vs PyTorch baselines.

26 tables with Criteo-like cardinalities (the Kaggle Criteo vocabularies, the largest capped
at 10M rows) x dim 128, batch 65536, Zipf-distributed ids (hot ids small, as a
frequency-ordered encoding makes them). One step = lookup of all tables, backward of a fixed
random output gradient, optimizer update of the tables. Compared:

* ``dense+Adam``        -- ``nn.Embedding`` per table, dense gradients, ``torch.optim.Adam(fused=True)``
* ``sparse+SparseAdam`` -- ``nn.Embedding(sparse=True)`` per table + ``torch.optim.SparseAdam``
* ``sparse+SGD``        -- ``nn.Embedding(sparse=True)`` per table + ``torch.optim.SGD``
* ``sparse+Adagrad``    -- ``nn.Embedding(sparse=True)`` per table + ``torch.optim.Adagrad`` (element-wise
  state where the fused collection keeps one value per row: the closest torch has)
* ``reference <opt>``   -- :class:`FusedEmbeddingCollection` with the PyTorch reference backend
* ``fused <opt>``       -- :class:`FusedEmbeddingCollection` with the Triton kernels (CUDA only)
* ``graphed <opt>``     -- the fused collection with ``capturable=True``, its whole step captured
  once in a CUDA graph and replayed (CUDA only; no id check): the step without its launch
  overhead. Its speed-up is against ``fused <opt>``.
* ``jagged <opt>``      -- the same collection (Triton on CUDA, the reference on CPU) fed the batch
  as one keyed jagged batch (``tabloader.torch.Loader(output="jagged")``) instead of the
  dict of per-column tensors: no per-batch restacking of the columns in the collection. The
  time the loader spends building the keyed jagged batch (one ``cat``, one stacked ``diff``)
  is measured apart and printed under the table, with the collection's plan (the step's
  restacking and id checks) per input form.

Effective bandwidth = bytes of embedding rows, output/gradient rows and optimizer states
read and written per step (forward: N rows read + N output rows written; backward: N
gradient rows read, U touched rows read and written, their states read and written; N =
batch x tables lookups, U = unique rows touched) / step time. Index traffic and scratch
buffers are not counted. A forward that reads a row once per lookup counts the repeats of a
hot row, which the GPU's cache serves: the "once" columns count each distinct row read once
in the forward too (U, not N) -- the least memory traffic a step can make, and the figure a
bandwidth goal should be held to. The speed-ups are against the matching torch baseline
(``sparse+SGD``, ``sparse+Adagrad``, ``sparse+SparseAdam``) and, for Adam, the faster of
sparse+SparseAdam and dense+Adam is printed after the table.

Usage::

    python benchmarks/embedding.py --device cuda                 # full size (H100/H200)
    python benchmarks/embedding.py --device cpu                  # CPU-sized: --scale 0.01, batch 8192
    python benchmarks/embedding.py --device cpu --scale 0.001 --batch 4096 --steps 5

Not a test: it prints a Markdown table (and, with ``--json``, writes the numbers).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
try:  # Triton before anything could import TensorFlow
    import triton  # noqa: F401
except ImportError:
    pass

import torch  # noqa: E402
from torch import nn  # noqa: E402

from tabloader.torch.fused import FusedEmbeddingCollection  # noqa: E402
from tabloader.torch.jagged import keyed_jagged  # noqa: E402
from tabloader.torch.layers import EmbeddingConfig  # noqa: E402

try:
    from benchmarks._common import print_table, median_step_seconds, sync, zipf_ids  # noqa: E402
except ImportError:  # run from inside benchmarks/
    from _common import print_table, median_step_seconds, sync, zipf_ids  # type: ignore  # noqa: E402

# Kaggle Criteo (Display Advertising Challenge) vocabulary sizes of C1..C26.
CRITEO_KAGGLE_CARDINALITIES = [
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992,
    5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
]
MAX_ROWS = 10_000_000

# Peak HBM bandwidth (bytes/s) by device-name fragment, for the "% of peak" column.
PEAK_BANDWIDTH = {"H200": 4.8e12, "H100 PCIe": 2.0e12, "H100 NVL": 3.9e12, "H100": 3.35e12, "A100": 2.0e12}


def cardinalities(scale: float, tables: int) -> list[int]:
    cards = [min(MAX_ROWS, c) for c in CRITEO_KAGGLE_CARDINALITIES]
    cards = (cards * ((tables + len(cards) - 1) // len(cards)))[:tables]
    # +2: row 0 padding, row 1 null, as the encoding contract lays tables out
    return [max(4, int(round(c * scale))) + 2 for c in cards]


def make_batches(cards: list[int], batch: int, count: int, exponent: float, device: str, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        batches.append({f"C{i + 1}": zipf_ids(batch, c, exponent, gen).to(device) for i, c in enumerate(cards)})
    return batches


class PerTable(nn.Module):
    """The baseline: one nn.Embedding per table, outputs concatenated."""

    def __init__(self, cards: list[int], dim: int, sparse: bool, device: str) -> None:
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(c, dim, sparse=sparse, padding_idx=0, device=device) for c in cards)
        for t in self.tables:
            nn.init.normal_(t.weight, 0, 0.05)

    def forward(self, feats: dict) -> torch.Tensor:
        return torch.cat([t(feats[f"C{i + 1}"]) for i, t in enumerate(self.tables)], dim=1)


def make_baseline(kind: str, cards, dim, grad_out, args) -> Callable[[dict], None]:
    model = PerTable(cards, dim, sparse=kind != "dense+Adam", device=args.device)
    params = list(model.parameters())
    if kind == "dense+Adam":
        opt = torch.optim.Adam(params, lr=1e-3, fused=True)
    elif kind == "sparse+SparseAdam":
        opt = torch.optim.SparseAdam(params, lr=1e-3)
    elif kind == "sparse+Adagrad":
        opt = torch.optim.Adagrad(params, lr=0.01)
    else:
        opt = torch.optim.SGD(params, lr=0.01)

    def step(feats):
        out = model(feats)
        out.backward(grad_out)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def make_fused(backend: str, optimizer: str, cards, dim, grad_out, args) -> Callable[[dict], None]:
    configs = [EmbeddingConfig(f"C{i + 1}", c, dim) for i, c in enumerate(cards)]
    coll = FusedEmbeddingCollection(configs, optimizer=optimizer, lr=1e-3 if optimizer == "adam" else 0.01,
                                    backend=backend, device=args.device,
                                    validate_indices=not args.no_validate)

    def step(feats):
        out = coll(feats)
        out.backward(grad_out)

    return step


def make_graphed(optimizer: str, cards, dim, grad_out, args, batches: list[dict]) -> Callable[[dict], None]:
    """The fused step captured once in a CUDA graph and replayed (``capturable=True``, no id
    check): what ``torch.cuda.graph`` around a training step, or ``torch.compile(mode=
    "reduce-overhead")``, gives. A step copies the batch into the graph's input -- one copy, the
    columns stacked as the loader keeps them, stacked here once per batch -- and replays; the
    copy is in the time."""
    configs = [EmbeddingConfig(f"C{i + 1}", c, dim) for i, c in enumerate(cards)]
    coll = FusedEmbeddingCollection(configs, optimizer=optimizer, lr=1e-3 if optimizer == "adam" else 0.01,
                                    backend="triton", device=args.device, validate_indices=False, capturable=True)
    names = [f"C{i + 1}" for i in range(len(cards))]
    stacked = {id(b): torch.stack([b[n] for n in names]) for b in batches}
    static = torch.ones_like(next(iter(stacked.values())))
    feats = {n: static[i] for i, n in enumerate(names)}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # kernels compiled and the allocator settled before the capture
        for _ in range(2):
            coll(feats).backward(grad_out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        coll(feats).backward(grad_out)

    def step(batch):
        static.copy_(stacked[id(batch)])
        graph.replay()

    return step


def as_jagged(step: Callable[[Any], None], batches: list[dict]) -> Callable[[dict], None]:
    """``step`` fed the keyed jagged form of each batch (built once, as the loader yields it)."""
    jagged = {id(b): keyed_jagged(b, list(b), as_torchrec=False) for b in batches}
    return lambda feats: step(jagged[id(feats)])


def median_ms(works: dict[str, Callable[[int], Any]], device: str, repeats: int = 30) -> dict[str, float]:
    """Median milliseconds of each ``work(i)``, the works taking turns call by call (so that a
    machine shared with other work slows them all alike)."""
    times: dict[str, list[float]] = {name: [] for name in works}
    for i in range(repeats):
        for name, work in works.items():
            sync(device)
            t0 = time.perf_counter()
            work(i)
            sync(device)
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def with_list_columns(feats: dict, seed: int = 0) -> dict:
    """The batch with every other column turned into a list column of 0 to 3 ids per row
    (single-hot and multi-hot columns together, as in the issue's TorchRec batches)."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for k, (name, ids) in enumerate(feats.items()):
        if k % 2 == 0:
            out[name] = ids
            continue
        lengths = torch.randint(0, 4, (len(ids),), generator=gen).to(ids.device)
        offsets = torch.zeros(len(ids) + 1, dtype=torch.int64, device=ids.device)
        torch.cumsum(lengths, 0, out=offsets[1:])
        values = ids.repeat(4)[:int(offsets[-1])]  # the column's (Zipf) ids, reused
        out[name] = (values, offsets)
    return out


def report_jagged_costs(batches: list[dict], cards: list[int], dim: int, args: Any) -> None:
    """What the jagged input changes apart from the lookups and updates: the collection's plan
    (restacking the columns, checking the ids) from each input form, for the benchmark's
    single-hot batches and for the same batches with half the columns multi-hot, and the
    loader's cost of building the keyed jagged batch."""
    configs = [EmbeddingConfig(f"C{i + 1}", c, dim) for i, c in enumerate(cards)]
    coll = FusedEmbeddingCollection(configs, backend="reference", device=args.device,
                                    validate_indices=not args.no_validate)
    print()
    for label, dicts in [("single-hot", batches), ("half multi-hot", [with_list_columns(b) for b in batches])]:
        jagged = [keyed_jagged(b, list(b), as_torchrec=False) for b in dicts]
        ms = median_ms({"dict": lambda i: coll.plan(dicts[i % len(dicts)]),
                        "jagged": lambda i: coll.plan(jagged[i % len(jagged)]),
                        "build": lambda i: keyed_jagged(dicts[i % len(dicts)], list(dicts[0]), as_torchrec=False)},
                       args.device)
        print(f"per {label} batch: collection plan from the dict of columns {ms['dict']:.2f} ms, from the keyed "
              f"jagged batch {ms['jagged']:.2f} ms; building the keyed jagged batch (loader side) {ms['build']:.2f} ms")


def timed_interleaved(makers: dict, batches: list[dict], steps: int, warmup: int, device: str) -> dict:
    """Median step time of every method, the methods taking turns step by step, so that a
    machine shared with other work slows them all alike (used on CPU, where all fit at once)."""
    steppers = {name: make() for name, make in makers.items()}
    for name, step in steppers.items():
        for i in range(warmup):
            step(batches[i % len(batches)])
    times = {name: [] for name in steppers}
    for i in range(steps):
        for name, step in steppers.items():
            sync(device)
            t0 = time.perf_counter()
            step(batches[i % len(batches)])
            sync(device)
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def useful_bytes(batches: list[dict], cards: list[int], dim: int, optimizer: str, out_bytes: int = 4,
                 each_row_once: bool = False) -> float:
    """Mean bytes of rows, gradients and states moved per step (see the module docstring);
    ``each_row_once``: the forward reads each distinct row once (U rows, not N)."""
    total = 0.0
    offsets = [0]
    for c in cards[:-1]:
        offsets.append(offsets[-1] + c)
    for feats in batches:
        rows = torch.cat([feats[f"C{i + 1}"].cpu() + offsets[i] for i in range(len(cards))])
        n, u = rows.numel(), torch.unique(rows).numel()
        state = {"sgd": 0, "adagrad": 2 * 4, "adam": 4 * dim * 4}[optimizer]
        forward_rows = u if each_row_once else n
        total += forward_rows * dim * 4 + n * dim * out_bytes + n * dim * out_bytes + 2 * u * dim * 4 + u * state
    return total / len(batches)


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    return f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads"


def peak_bandwidth(name: str) -> float | None:
    for key, value in PEAK_BANDWIDTH.items():
        if key in name:
            return value
    return None


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    p.add_argument("--scale", type=float, default=None, help="multiply the cardinalities (default 1 on cuda, 0.01 on cpu)")
    p.add_argument("--batch", type=int, default=None, help="batch size (default 65536 on cuda, 8192 on cpu)")
    p.add_argument("--tables", type=int, default=26)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--zipf", type=float, default=1.05, help="Zipf exponent of the ids")
    p.add_argument("--steps", type=int, default=None, help="timed steps (median reported)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--methods", default=None,
                   help="comma list among dense+Adam,sparse+SparseAdam,sparse+SGD,sparse+Adagrad,reference,fused,"
                        "graphed,jagged")
    p.add_argument("--optimizers", default="adam,sgd,adagrad", help="optimizers of the fused collection")
    p.add_argument("--no-validate", action="store_true", help="skip the index bounds check")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--interleave", action=argparse.BooleanOptionalAction, default=None,
                   help="methods take turns step by step (default on CPU); else one after the other")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        p.error("--device cuda but no CUDA device is usable")
    if args.threads:
        torch.set_num_threads(args.threads)
    args.scale = args.scale if args.scale is not None else (1.0 if cuda else 0.01)
    args.batch = args.batch or (65536 if cuda else 8192)
    args.steps = args.steps or (20 if cuda else 7)
    args.interleave = (not cuda) if args.interleave is None else args.interleave
    methods = (args.methods or ("dense+Adam,sparse+SparseAdam,sparse+SGD,sparse+Adagrad,reference,fused,graphed,jagged"
                                if cuda else "dense+Adam,sparse+SparseAdam,sparse+SGD,sparse+Adagrad,reference,jagged")
               ).split(",")
    optimizers = args.optimizers.split(",")

    cards = cardinalities(args.scale, args.tables)
    dim = args.dim
    n_batches = max(2, min(4, args.steps))
    batches = make_batches(cards, args.batch, n_batches, args.zipf, args.device)
    grad_out = torch.randn(args.batch, args.tables * dim, generator=torch.Generator().manual_seed(1)).to(args.device)
    name = device_name(args.device)
    peak = peak_bandwidth(name) if cuda else None
    print(f"# {name}; torch {torch.__version__}; {args.tables} tables, {sum(cards):,} rows (largest "
          f"{max(cards):,}) x dim {dim}; batch {args.batch}; zipf {args.zipf}; median of {args.steps} steps", flush=True)

    makers: dict[str, Callable[[], Callable[[dict], None]]] = {}
    opt_of: dict[str, str] = {}
    for m in methods:
        if m in ("dense+Adam", "sparse+SparseAdam", "sparse+SGD", "sparse+Adagrad"):
            makers[m] = lambda m=m: make_baseline(m, cards, dim, grad_out, args)
            opt_of[m] = {"dense+Adam": "adam", "sparse+SparseAdam": "adam", "sparse+SGD": "sgd",
                         "sparse+Adagrad": "adagrad"}[m]
        elif m == "graphed":
            if not cuda:
                p.error("method 'graphed' (a CUDA graph) needs --device cuda")
            for o in optimizers:
                makers[f"{m} {o}"] = lambda o=o: make_graphed(o, cards, dim, grad_out, args, batches)
                opt_of[f"{m} {o}"] = o
        elif m in ("reference", "fused", "jagged"):
            backend = "triton" if m == "fused" or (m == "jagged" and cuda) else "reference"
            for o in optimizers:
                if m == "jagged":
                    makers[f"{m} {o}"] = lambda b=backend, o=o: as_jagged(
                        make_fused(b, o, cards, dim, grad_out, args), batches)
                else:
                    makers[f"{m} {o}"] = lambda b=backend, o=o: make_fused(b, o, cards, dim, grad_out, args)
                opt_of[f"{m} {o}"] = o
        else:
            p.error(f"unknown method {m!r}")

    seconds_of: dict[str, tuple[float, str]] = {}
    if args.interleave:
        for name, sec in timed_interleaved(makers, batches, args.steps, args.warmup, args.device).items():
            seconds_of[name] = (sec, "ok")
    else:  # one method at a time, memory freed in between (full-size GPU runs)
        for name, make in makers.items():
            try:
                step = make()
                seconds_of[name] = (median_step_seconds(lambda i: step(batches[i % len(batches)]), args.steps, args.warmup, args.device), "ok")
            except torch.cuda.OutOfMemoryError:
                seconds_of[name] = (float("nan"), "OOM")
            except RuntimeError as exc:
                if "out of memory" not in str(exc).lower():
                    raise
                seconds_of[name] = (float("nan"), "OOM")
            step = None
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
            print(f"  {name}: {seconds_of[name][1]} {seconds_of[name][0] * 1e3:.1f} ms/step", flush=True)

    results = []
    for label, (seconds, status) in seconds_of.items():
        opt = opt_of[label]
        nbytes = useful_bytes(batches, cards, dim, opt)
        once = useful_bytes(batches, cards, dim, opt, each_row_once=True)
        ok = status == "ok"
        results.append({"method": label, "optimizer": opt, "status": status, "ms_per_step": seconds * 1e3,
                        "rows_per_s": args.batch / seconds if ok else float("nan"),
                        "gb_per_s": nbytes / seconds / 1e9 if ok else float("nan"),
                        "pct_peak": 100 * nbytes / seconds / peak if (peak and ok) else None,
                        "gb_per_s_once": once / seconds / 1e9 if ok else float("nan"),
                        "pct_peak_once": 100 * once / seconds / peak if (peak and ok) else None})

    base = {r["method"]: r["ms_per_step"] for r in results}
    rows = []
    for r in results:
        ref_key = {"sgd": "sparse+SGD", "adagrad": "sparse+Adagrad"}.get(r["optimizer"], "sparse+SparseAdam")
        if r["method"].startswith("jagged"):  # against the same collection fed the dict of columns
            ref_key = f"{'fused' if cuda else 'reference'} {r['optimizer']}"
        if r["method"].startswith("graphed"):  # against the same step launched eagerly
            ref_key = f"fused {r['optimizer']}"
        speedup = base.get(ref_key, float("nan")) / r["ms_per_step"] if r["status"] == "ok" else float("nan")
        rows.append([r["method"], r["status"], r["ms_per_step"], r["rows_per_s"] / 1e6, r["gb_per_s"],
                     "-" if r["pct_peak"] is None else f"{r['pct_peak']:.0f}%", r["gb_per_s_once"],
                     "-" if r["pct_peak_once"] is None else f"{r['pct_peak_once']:.0f}%",
                     f"{speedup:.2f}x vs {ref_key}" if ref_key in base and r["method"] != ref_key else "-"])
    print()
    print_table(["method", "status", "ms/step", "M samples/s", "eff. GB/s", "% peak BW", "GB/s once",
                 "% peak once", "speed-up"], rows)
    adam_baselines = [base[k] for k in ("sparse+SparseAdam", "dense+Adam") if k in base]
    fused_adam = base.get("fused adam")
    if adam_baselines and fused_adam:
        print(f"fused adam against the faster torch Adam baseline ({min(adam_baselines):.2f} ms): "
              f"{min(adam_baselines) / fused_adam:.2f}x")
    if "jagged" in methods:
        report_jagged_costs(batches, cards, dim, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "args": vars(args), "results": results}, f, indent=2)
    return results


if __name__ == "__main__":
    main()
