"""Time the string lookup of the categorical operators: ms per lookup and rows/s of a query column
against vocabularies of 1K to 10M strings.

On ``--device cuda`` two ways are timed in the same run, on the same data: tabloader's
``StringKeys.find`` (the keys sorted once by libcudf, one binary-search kernel per query) and,
as the baseline it replaced, cuDF's join (``cudf.Index.get_indexer``, its index built once);
their results are checked equal. On ``--device cpu``, the CPU ``StringKeys.find`` (pyarrow).
Strings: ``hex`` are 8-character hex (raw Criteo's C columns), ``utf8`` mixed-length UTF-8
(a unique hex prefix, then 0-6 characters of 1 to 4 bytes). Queries are half vocabulary keys,
half other strings, 5% null.

    python tools/gpu_string_lookup.py                          # 5M rows, 1K..10M keys, on the GPU
    python tools/gpu_string_lookup.py --device cpu --rows 100000 --sizes 1000 100000
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(_ROOT, "benchmarks"), _ROOT]  # _common and this checkout

from _common import print_table  # noqa: E402

_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)
_UNITS = [b"a", b"\xc3\xa9", b"\xe6\x97\xa5", b"\xf0\x9f\x98\x80", b"z"]  # a, é, 日, 😀, z: 1 to 4 bytes


def strings(codes: np.ndarray, kind: str, rng: np.random.Generator) -> pa.Array:
    """One string per uint32 code, unique when the codes are: its 8 hex digits, followed for
    ``utf8`` by 0-6 random characters of 1-4 UTF-8 bytes. Built as arrow buffers (no Python strings)."""
    n = len(codes)
    prefix = _HEX[(codes[:, None] >> np.arange(28, -4, -4, dtype=np.uint32)) & 15]  # (n, 8)
    if kind == "hex":
        width, cells, keep = 8, prefix, np.ones((n, 8), bool)
    else:
        units = np.zeros((len(_UNITS), 4), np.uint8)
        lengths = np.array([len(u) for u in _UNITS])
        for i, u in enumerate(_UNITS):
            units[i, :len(u)] = np.frombuffer(u, np.uint8)
        picks = rng.integers(0, len(_UNITS), (n, 6))
        used = np.arange(6) < rng.integers(0, 7, n)[:, None]
        suffix_keep = used[:, :, None] & (np.arange(4) < lengths[picks][:, :, None])
        width = 8 + 24
        cells = np.concatenate([prefix, units[picks].reshape(n, 24)], axis=1)
        keep = np.concatenate([np.ones((n, 8), bool), suffix_keep.reshape(n, 24)], axis=1)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(keep.sum(axis=1), out=offsets[1:])
    data = cells.reshape(n * width)[keep.reshape(n * width)]
    return pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]).cast(
        pa.string())


def case(size: int, rows: int, kind: str, seed: int = 0) -> tuple[pa.Array, pa.Array]:
    """(``size`` unique keys, ``rows`` queries: half keys, half other strings, 5% null)."""
    rng = np.random.default_rng(seed)
    codes = np.unique(rng.integers(0, 2**32, int(size * 1.01) + 16, dtype=np.uint32))[:size]
    codes = codes[rng.permutation(len(codes))]
    keys = strings(codes, kind, rng)
    hits = keys.take(pa.array(rng.integers(0, size, rows // 2)))
    others = strings(rng.integers(0, 2**32, rows - rows // 2, dtype=np.uint32), kind, rng)
    queries = pa.concat_arrays([hits, others]).take(pa.array(rng.permutation(rows)))
    return keys, pc.if_else(pa.array(rng.random(rows) < 0.05), pa.scalar(None, pa.string()), queries)


def per_call(lookup: Callable[[], Any], sync: Callable[[], None], repeats: int) -> tuple[float, Any]:
    """Seconds per call of ``lookup`` (after a warm-up call), the device idle before and after."""
    result = lookup()
    sync()
    start = time.perf_counter()
    for _ in range(repeats):
        lookup()
    sync()
    return (time.perf_counter() - start) / repeats, result


def measure(keys: pa.Array, queries: pa.Array, device: str, repeats: int) -> dict[str, Any]:
    """Seconds per lookup of each way on ``device`` (the keys' index built once, beforehand), the
    seconds to build tabloader's, and on the GPU whether the two ways agree."""
    from tabloader import backend
    from tabloader.encoding import cpu, gpu

    key_series = keys.to_pandas()
    if device == "cpu":
        start = time.perf_counter()
        built = cpu.lookup.StringKeys(key_series)
        build = time.perf_counter() - start
        seconds, _ = per_call(lambda: built.find(queries), lambda: None, repeats)
        return {"tabloader": seconds, "build": build}
    cudf, cp = backend.cudf(), backend.cupy()
    sync = cp.cuda.Device().synchronize
    device_queries = cudf.Series.from_arrow(queries)
    start = time.perf_counter()
    built = gpu.lookup.StringKeys(key_series)
    sync()
    build = time.perf_counter() - start
    ours, found = per_call(lambda: built.find(device_queries), sync, repeats)
    index = cudf.Index(cudf.Series.from_arrow(keys))  # the former way: a join per call
    join, joined = per_call(lambda: index.get_indexer(device_queries), sync, repeats)
    return {"tabloader": ours, "cudf join": join, "build": build, "agree": bool((found == joined).all())}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--rows", type=int, default=5_000_000, help="query rows")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 100_000, 1_000_000, 10_000_000],
                        help="vocabulary sizes")
    parser.add_argument("--kinds", nargs="+", choices=("hex", "utf8"), default=["hex", "utf8"])
    parser.add_argument("--repeats", type=int, default=5, help="timed lookups per case (after one warm-up)")
    args = parser.parse_args(argv)

    rows = []
    for kind in args.kinds:
        for size in args.sizes:
            keys, queries = case(size, args.rows, kind)
            result = measure(keys, queries, args.device, args.repeats)
            for way in ("tabloader", "cudf join"):
                if way in result:
                    rows.append([kind, size, way, 1000 * result[way], args.rows / result[way],
                                 result["build"] if way == "tabloader" else "", result.get("agree", "")])
    print(f"\nString lookup of {args.rows:,} query rows on {args.device}, ms per lookup (after a warm-up):")
    print_table(["strings", "keys", "way", "ms/lookup", "rows/s", "build s", "agree"], rows)
    if any(row[-1] is False for row in rows):
        sys.exit("the two ways disagree")


if __name__ == "__main__":
    main()
