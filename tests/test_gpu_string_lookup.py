"""String keys found on the GPU (``tabloader.encoding.gpu.lookup.StringKeys``, issue 14): the keys
sorted once by libcudf, each query one binary-search kernel, no join and no read back.

Every case is compared with the key rows matched by hand (a dict) and with the CPU lookup
(``tabloader.encoding.cpu.lookup.ValueLookup``); the CPU half of the table runs everywhere, the
GPU tests are marked ``cudf`` (skipped where no CUDA device or no cuDF is usable). A Categorify
fit on one device and applied on the other gives the ids of the encoding computed by hand
(``tests/encoding_reference.py``), out-of-vocabulary buckets included.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import tabloader as tl
from tabloader import backend, ops
from tabloader.encoding.cpu import columns as cpu_columns
from tabloader.encoding.cpu import lookup as cpu_lookup

from encoding_reference import expected_ids

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: (keys, queries) by name: each an edge of the search (None: a null query row).
CASES = {
    "empty vocabulary": ([], ["a", None, ""]),
    "empty query": (["a", "b"], []),
    "query all nulls": (["a", "b"], [None, None, None]),
    "empty string as key and query": (["", "a", "b"], ["", "a", "c", None, ""]),
    "only the empty string": ([""], ["", None, "x"]),
    "non-ASCII (UTF-8 multibyte)": (["é", "e", "日本", "日本語", "\U0001f600", "z", "\x7f", "\x80"],
                                    ["日", "日本", "日本語", "é", "\U0001f600", "e", "z", "\x80", "\x7f", "è"]),
    "prefixes of each other": (["abc", "a", "ab"], ["a", "ab", "abc", "abcd", "", "b", "aa"]),
    "beyond the last key": (["a", "b"], ["c", "zzz", "\xff", "\U0010ffff"]),
    "NUL bytes": (["a\x00", "a", "a\x00b", "\x00"], ["a", "a\x00", "\x00", "a\x00b", "a\x00c", "", "\x00\x00"]),
}
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cudf)]


def by_hand(keys: list, queries: list) -> list:
    """Row of ``keys`` equal to each query, -1 where none and for null queries."""
    rows = {key: i for i, key in enumerate(keys)}
    return [-1 if q is None else rows.get(q, -1) for q in queries]


def random_case(seed: int, num_keys: int, num_queries: int) -> tuple[list, list]:
    """Unique keys, half 8-character hex (raw Criteo's), half mixed-length UTF-8 with NUL bytes;
    queries half keys, half other strings, some null."""
    rng = np.random.default_rng(seed)
    alphabet = ["a", "b", "z", "0", "é", "日", "\U0001f600", "\x00"]

    def mixed(n):  # characters picked by index: a numpy string array would drop trailing NULs
        return ["".join(alphabet[i] for i in rng.integers(0, len(alphabet), rng.integers(0, 12))) for _ in range(n)]

    keys = list(dict.fromkeys([f"{v:08x}" for v in rng.integers(0, 2**32, num_keys // 2)] + mixed(num_keys // 2)))
    others = [f"{v:08x}" for v in rng.integers(0, 2**32, num_queries // 4)] + mixed(num_queries // 4)
    queries = [keys[i] for i in rng.integers(0, len(keys), num_queries - len(others))] + others
    queries = [None if rng.random() < 0.05 else q for q in queries]
    return keys, [queries[i] for i in rng.permutation(len(queries))]


def strings(values: list, device: str, offset: int = 0):
    """A string column on ``device`` (through arrow, as parquet gives it); with ``offset``, a
    slice of a longer column starting after ``offset`` rows of other strings and nulls."""
    padding = [None if i % 2 else f"pad{i}" for i in range(offset)]
    table = pa.table({"s": pa.array(padding + list(values), type=pa.string())})
    column = backend.from_arrow(table, device)["s"]
    return column.iloc[offset:] if offset else column


def positions(keys: list, query, device: str) -> list:
    """The lookup's positions of a query column through ValueLookup, as the operators call it."""
    key_series = pd.Series(keys, dtype="str")
    if device == "cpu":
        return cpu_lookup.ValueLookup([key_series], "Test", "s").positions(
            [cpu_columns.normalize_column("Test", "s", query)]).tolist()
    from tabloader.encoding.gpu import columns as gpu_columns
    from tabloader.encoding.gpu import lookup as gpu_lookup

    pos = gpu_lookup.ValueLookup([key_series], "Test", "s").positions([gpu_columns.normalize_column("Test", "s", query)])
    return backend.cupy().asnumpy(pos).tolist()


def found(keys: list, query) -> list:
    """``StringKeys.find`` itself (nulls not masked by a caller), checked to give a fresh int64 array."""
    from tabloader.encoding.gpu.lookup import StringKeys

    pos = StringKeys(pd.Series(keys, dtype="str")).find(query)
    assert isinstance(pos, backend.cupy().ndarray) and pos.dtype == np.int64 and len(pos) == len(query)
    return backend.cupy().asnumpy(pos).tolist()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(CASES))
def test_edge_cases_find_the_rows_matched_by_hand(name, device):
    keys, queries = CASES[name]
    expected = by_hand(keys, queries)
    assert positions(keys, strings(queries, device), device) == expected, name
    if device == "cuda":
        assert found(keys, strings(queries, device)) == expected, name
        assert positions(keys, strings(queries, device), device) == positions(keys, strings(queries, "cpu"), "cpu")


@pytest.mark.parametrize("device", DEVICES)
def test_many_random_strings_are_found_as_by_hand(device):
    """Thousands of keys: a search whose order differed from the sort's would miss keys here."""
    keys, queries = random_case(0, 4000, 20_000)
    expected = by_hand(keys, queries)
    assert sum(p >= 0 for p in expected) > 10_000  # most queries are keys
    assert positions(keys, strings(queries, device), device) == expected
    if device == "cuda":
        assert found(keys, strings(queries, device)) == expected


@pytest.mark.cudf
@pytest.mark.parametrize("name", ["non-ASCII (UTF-8 multibyte)", "NUL bytes", "empty string as key and query"])
def test_a_sliced_query_and_one_with_its_own_index_give_the_rows_by_hand(name):
    keys, queries = CASES[name]
    expected = by_hand(keys, queries)
    sliced = strings(queries, "cuda", offset=5)  # after 5 rows, nulls among them: offset and mask bits shifted
    assert sliced.to_pylibcudf()[0].offset() == 5 and sliced.index[0] == 5
    assert found(keys, sliced) == expected
    assert positions(keys, sliced, "cuda") == expected

    labelled = strings(queries, "cuda")
    labelled.index = backend.cudf().Index([f"row{i}" for i in range(len(queries))])
    assert found(keys, labelled) == expected


@pytest.mark.parametrize("fit_on, transform_on", [("cpu", "cpu")] + [
    pytest.param(*devices, marks=pytest.mark.cudf) for devices in [("cpu", "cuda"), ("cuda", "cpu"), ("cuda", "cuda")]])
def test_categorify_of_strings_gives_the_same_ids_on_either_device(fit_on, transform_on):
    """Fit on one device, transform on the other: ids by hand, out-of-vocabulary values hashed
    into 4 buckets (unseen ones and those below freq_threshold)."""
    fit_values = ["a", "b", "a", "", "é", "é", "日本", None, "b", "a", "\x00", "rare", "", "日本"]
    values = ["a", "é", "unseen", "", None, "rare", "日本", "\x00", "b", "日本語", "also unseen"]
    wf = tl.Workflow(["s"] >> ops.Categorify(freq_threshold=2, num_buckets=4), progress=False)
    wf.fit(backend.from_arrow(pa.table({"s": pa.array(fit_values, pa.string())}), fit_on))
    out = wf.transform(backend.from_arrow(pa.table({"s": pa.array(values, pa.string())}), transform_on))
    ids = out["s"].to_arrow().to_pylist() if transform_on == "cuda" else out["s"].tolist()
    expected, _ = expected_ids(values, fit_values, freq_threshold=2, num_buckets=4)
    assert ids == expected


# --- nothing read back, no wait for the device -----------------------------------------------------
_SPIN = r"""
extern "C" __global__ void spin(long long nanoseconds) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < nanoseconds);
}
"""


@pytest.mark.cudf
def test_a_lookup_neither_reads_back_nor_waits_for_the_device(monkeypatch):
    """Queued behind a kernel that keeps the GPU busy for 3 s, a (warm) lookup returns while that
    kernel still runs: it waited for nothing on the device. CuPy's synchronizing calls are refused
    meanwhile (``cupyx.allow_synchronize``), and so are cuDF's reductions and single-value reads."""
    cp = backend.cupy()
    cupyx = pytest.importorskip("cupyx")
    from cudf.core.column.column import ColumnBase

    from tabloader.encoding.gpu import lookup as gpu_lookup
    from tabloader.encoding.gpu.columns import normalize_column

    keys, queries = random_case(1, 2000, 50_000)
    lookup = gpu_lookup.ValueLookup([pd.Series(keys, dtype="str")], "Test", "s")
    col = normalize_column("Test", "s", strings(queries, "cuda", offset=3))
    assert col.mask is not None  # the null-mask path
    lookup.positions([col])  # warm: the kernel compiled, CuPy's pool holds the blocks
    spin = cp.RawKernel(_SPIN, "spin")
    spin((1,), (1,), (np.int64(0),))  # compiled now, not inside the check

    def refuse(*args, **kwargs):
        raise AssertionError("cuDF read a value back from the device")

    for name in ("_reduce", "element_indexing"):
        monkeypatch.setattr(ColumnBase, name, refuse)
    stream = cp.cuda.get_current_stream()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # allow_synchronize's deprecation warning
        with cupyx.allow_synchronize(False):
            spin((1,), (1,), (np.int64(3_000_000_000),))
            pos = lookup.positions([col])
            busy = not stream.done
    monkeypatch.undo()
    stream.synchronize()
    assert busy, "the lookup waited for the device"
    assert cp.asnumpy(pos).tolist() == by_hand(keys, queries)


def test_the_timing_tool_times_the_lookup_of_each_vocabulary():
    """``tools/gpu_string_lookup.py`` on the CPU (the lead runs it on the GPU, where it times the
    join beside the search and checks they agree)."""
    done = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gpu_string_lookup.py"), "--device", "cpu",
                           "--rows", "2000", "--sizes", "10", "300", "--repeats", "1"],
                          env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in done.stdout.splitlines()
            if "| tabloader" in line]
    assert [row[:2] for row in rows] == [[kind, size] for kind in ("hex", "utf8") for size in ("10", "300")]
    assert all(float(row[3].replace(",", "")) > 0 for row in rows)  # ms per lookup
