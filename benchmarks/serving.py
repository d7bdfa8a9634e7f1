"""Benchmark: serving the Criteo workflow, the fast path against Workflow.transform on a DataFrame.

The workflow is the classic Criteo one (``Categorify(freq_threshold=2)`` on ``C1..C26``,
``FillMissing(0) >> Clip(min_value=0) >> LogOp >> Normalize`` on ``I1..I13``, ``label`` passed
through), fit on synthetic Criteo rows. Requests are rows of a held-out file (other seed, so
some values were never seen at fit), given as a serving endpoint gets them from JSON: a dict
of Python lists, None where a value is missing.

For requests of 1, 100 and 1000 rows it times, one request after another in this process:

* ``fast``: ``tabloader.serving.Server(wf).transform(request)`` (request dict -> numpy arrays);
* ``DataFrame``: ``wf.transform(frame)``, ``frame`` being the request already built as the
  pandas DataFrame it stands for (``Server.frame``: that construction is not timed, to the
  DataFrame path's advantage),

and prints the p50 / p99 latency of each and the ratio of the p50s. Before timing, the two
outputs are compared on every size (equal values and dtypes).

    python benchmarks/serving.py                        # 100K fit rows, sizes 1 100 1000
    python benchmarks/serving.py --rows 1000000 --requests 2000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]  # _common, and tabloader from this checkout

from _common import CRITEO_CATEGORICAL, CRITEO_CONTINUOUS, CRITEO_LABEL, print_table, raw_criteo  # noqa: E402


def criteo_workflow(data: str):
    import tabloader as tl
    from tabloader import ops

    cats = CRITEO_CATEGORICAL >> ops.Categorify(freq_threshold=2)
    conts = CRITEO_CONTINUOUS >> ops.FillMissing(0) >> ops.Clip(min_value=0) >> ops.LogOp >> ops.Normalize()
    return tl.Workflow(cats + conts + [CRITEO_LABEL], progress=False).fit(tl.Dataset(data))


def json_requests(frame, columns: list[str], size: int, count: int, seed: int) -> list[dict]:
    """``count`` requests of ``size`` random rows of ``frame``, decoded from JSON as an endpoint
    gets them: dicts of Python lists, None for nulls."""
    rng = np.random.default_rng(seed)
    plain = {c: frame[c].astype(object).where(frame[c].notna(), None).tolist() for c in columns}
    requests = []
    for _ in range(count):
        rows = rng.integers(0, len(frame), size)
        requests.append(json.loads(json.dumps({c: [plain[c][r] for r in rows] for c in columns})))
    return requests


def latencies_ms(function, inputs: list) -> np.ndarray:
    function(inputs[0])  # warm up: lookup tables, first-call imports
    out = np.empty(len(inputs))
    for i, x in enumerate(inputs):
        start = time.perf_counter()
        function(x)
        out[i] = time.perf_counter() - start
    return out * 1e3


def check_equal(server, wf, request: dict) -> None:
    fast = server.transform(request)
    frame = wf.transform(server.frame(request))
    for name in frame.columns:
        expected = frame[name].to_numpy(dtype=frame[name].dtype.numpy_dtype if hasattr(frame[name].dtype,
                                                                                         "numpy_dtype") else None)
        if fast[name].dtype != expected.dtype or not np.array_equal(fast[name], expected, equal_nan=True):
            raise AssertionError(f"column {name}: the fast path and Workflow.transform differ")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000, help="Criteo rows to fit the workflow on")
    parser.add_argument("--data", default=None, help="where the synthetic rows are written (once)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 100, 1000], help="rows per request")
    parser.add_argument("--requests", type=int, default=1000,
                        help="requests timed per size on the fast path (a fifth of them, at least 20, on the "
                             "DataFrame path; sizes above 100 rows a fifth of these)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from tabloader.serving import Server
    import tabloader as tl

    data = raw_criteo(args.data or f"/tmp/tabloader-bench/criteo-{args.rows}-2", args.rows, files=2)
    valid = raw_criteo(f"{data}-valid", 20_000, files=1, seed=args.seed + 1)
    wf = criteo_workflow(data)
    server = Server(wf)
    held_out = tl.Dataset(valid).compute()

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"Criteo workflow fit on {args.rows:,} rows; requests from {len(held_out):,} held-out rows; "
          f"load average {load:.2f}", flush=True)
    rows = []
    for size in args.sizes:
        count = args.requests if size <= 100 else max(20, args.requests // 5)
        requests = json_requests(held_out, wf.input_columns, size, count, args.seed + size)
        check_equal(server, wf, requests[0])
        frames = [server.frame(r) for r in requests[:max(20, count // 5)]]
        fast = latencies_ms(server.transform, requests)
        frame_path = latencies_ms(wf.transform, frames)
        rows.append([size, float(np.median(fast)), float(np.percentile(fast, 99)), float(np.median(frame_path)),
                     float(np.percentile(frame_path, 99)), float(np.median(frame_path) / np.median(fast))])
    print_table(["rows/request", "fast p50 ms", "fast p99 ms", "DataFrame p50 ms", "DataFrame p99 ms",
                 "p50 ratio"], rows)
    print(f"fallbacks to the DataFrame path: {dict(server.fallbacks) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
