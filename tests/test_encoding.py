"""The encoding primitives (tabloader.encoding) against an independent pure-Python/pandas
reference of the contract: random columns with nulls, split into partitions, counted, merged in
random trees, turned into vocabularies and looked up. The property tests run each
implementation: the CPU one everywhere, the GPU one (cuDF columns, marked ``gpu``) where a CUDA
device is usable -- the same cases, so CPU and GPU give the same ids."""

from __future__ import annotations

import random
import struct

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from tabloader import backend, ops
from tabloader.workflow import Workflow
from tabloader.encoding import cpu, gpu
from tabloader.encoding.contract import NULL_HASH
from tabloader.backend import STRING_DTYPE

from encoding_reference import expected_ids, is_null, py_cross, py_hash, reference_vocabulary, splitmix64

OP = "Test"

IMPLEMENTATIONS = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]


def implementation(name: str):
    return {"cpu": cpu, "gpu": gpu}[name]


def host(array):
    """A CuPy array's values on the host (the test's copy); numpy arrays as they are."""
    return array.get() if backend.is_gpu_object(array) else array


# --- random columns -------------------------------------------------------------------------
# (pandas dtype, strategy of one non-null value); values repeat because they come from a small pool
VALUE_KINDS = {
    "Int64 small range": ("Int64", st.integers(-3, 40)),
    "Int64 wide range": ("Int64", st.integers(-(2**63), 2**63 - 1)),
    "UInt64 above 2**63": ("UInt64", st.integers(2**63 - 3, 2**64 - 1) | st.integers(0, 5)),
    "float64": ("float64", st.integers(-5, 5).map(float) | st.floats(-1e20, 1e20, allow_nan=False)),
    "str": ("str", st.text(max_size=4)),
}


@st.composite
def columns(draw, kinds=tuple(VALUE_KINDS)):
    """(pandas dtype, list of values with None for null): a column drawn from a pool of values."""
    dtype, value = VALUE_KINDS[draw(st.sampled_from(kinds))]
    pool = draw(st.lists(value, min_size=1, max_size=12, unique_by=lambda v: (type(v), v)))
    values = draw(st.lists(st.sampled_from(pool) | st.none(), min_size=0, max_size=60))
    return dtype, values


def series(dtype: str, values: list) -> pd.Series:
    if dtype == "float64":
        return pd.Series([np.nan if v is None else v for v in values], dtype="float64")
    if dtype in ("Int64", "UInt64"):  # through arrow: pd.Series(list, dtype="UInt64") rounds some values >= 2**63
        arrow_type, pandas_type = (pa.int64(), pd.Int64Dtype()) if dtype == "Int64" else (pa.uint64(), pd.UInt64Dtype())
        return pa.array(values, type=arrow_type).to_pandas(types_mapper={arrow_type: pandas_type}.get)
    return pd.Series(values, dtype=dtype)


def series_for(impl: str, dtype: str, values: list):
    """:func:`series` as the implementation takes it: pandas, or cuDF (through arrow) for the GPU."""
    out = series(dtype, values)
    if impl == "cpu":
        return out
    return backend.from_arrow(pa.table({"c": pa.Array.from_pandas(out.array if dtype != "float64" else out)}),
                              "cuda")["c"]


def split(values: list, cuts: list[int]) -> list[list]:
    """``values`` cut at the given positions (any of them may give empty partitions)."""
    bounds = [0] + sorted(min(c, len(values)) for c in cuts) + [len(values)]
    return [values[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def merge_in_random_tree(partials: list, rng: random.Random, impl: str = "cpu"):
    """Merge partials pairwise, always two neighbours picked at random: every tree shape a tree
    reduction could take (merges are associative, neighbours keep the partition order)."""
    partials = list(partials)
    while len(partials) > 1:
        i = rng.randrange(len(partials) - 1)
        partials[i:i + 2] = [implementation(impl).merge_counts(partials[i], partials[i + 1], OP, "c")]
    return partials[0]


def count(dtype: str, values: list, impl: str = "cpu") -> dict:
    enc = implementation(impl)
    col = enc.normalize_column(OP, "c", series_for(impl, dtype, values))
    return enc.count_values([col], col.mask)


def python_values(keys, impl: str = "cpu") -> list:
    """Vocabulary keys (numpy or pyarrow; CuPy or cuDF) as Python values."""
    return implementation(impl).keys_to_pandas(keys).tolist()


def lookup_for(keys: list, impl: str = "cpu"):
    """The lookup Categorify builds: from the vocabulary as pandas columns."""
    enc = implementation(impl)
    return enc.ValueLookup([pd.Series(enc.keys_to_pandas(k)) for k in keys], OP, "c")


# --- counting, merging, vocabulary, lookup ----------------------------------------------------
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=150, deadline=None)
@given(column=columns(), cuts=st.lists(st.integers(0, 60), max_size=5), seed=st.integers(0, 2**32 - 1),
       freq_threshold=st.integers(0, 3), max_size=st.integers(0, 4), num_buckets=st.integers(1, 4))
def test_partitions_merged_in_any_tree_give_the_reference_vocabulary_and_ids(impl, column, cuts, seed, freq_threshold,
                                                                              max_size, num_buckets):
    enc = implementation(impl)
    dtype, values = column
    partials = [count(dtype, part, impl) for part in split(values, cuts)]
    merged = merge_in_random_tree(partials, random.Random(seed), impl)
    assert merged["nulls"] == sum(v is None for v in values)
    reference = reference_vocabulary(values, freq_threshold, max_size)
    if merged["keys"] is None:  # no value at all
        assert reference == []
        return
    keys, counts = enc.vocabulary(merged, freq_threshold, max_size)
    assert list(zip(python_values(keys[0], impl), host(counts).tolist())) == reference

    # every row of every partition gets the reference id; values unseen at fit are OOV
    lookup = lookup_for(keys, impl)
    for part in split(values, cuts) + [values[::-1]]:
        col = enc.normalize_column(OP, "c", series_for(impl, dtype, part))
        ids = enc.assign_ids(lookup.positions([col]), col.mask, num_buckets, [col], "int64")
        assert host(ids).tolist() == expected_ids(part, values, freq_threshold, max_size, num_buckets)[0]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=60, deadline=None)
@given(a=columns(("Int64 small range", "str")), b=columns(("Int64 small range", "float64")),
       cuts=st.lists(st.integers(0, 60), max_size=3), seed=st.integers(0, 2**32 - 1), num_buckets=st.integers(1, 3))
def test_combinations_of_columns_give_the_reference_vocabulary_and_ids(impl, a, b, cuts, seed, num_buckets):
    enc = implementation(impl)
    n = min(len(a[1]), len(b[1]))
    (dtype_a, values_a), (dtype_b, values_b) = (a[0], a[1][:n]), (b[0], b[1][:n])

    def normalized(lo: int, hi: int) -> list:
        return [enc.normalize_column(OP, c, series_for(impl, dtype, vals[lo:hi]))
                for c, (dtype, vals) in zip("ab", [(dtype_a, values_a), (dtype_b, values_b)])]

    bounds = [0] + sorted(min(c, n) for c in cuts) + [n]
    partials = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        cols = normalized(lo, hi)
        partials.append(enc.count_values(cols, enc.null_mask(cols, "any")))
    merged = merge_in_random_tree(partials, random.Random(seed), impl)
    rows = list(zip(values_a, values_b))
    reference = reference_vocabulary(rows)
    assert merged["nulls"] == sum(x is None or y is None for x, y in rows)
    if merged["keys"] is None:
        assert reference == []
        return
    keys, counts = enc.vocabulary(merged, 0, 0)
    assert list(zip(zip(*[python_values(k, impl) for k in keys]), host(counts).tolist())) == reference

    cols = normalized(0, n)
    ids = enc.assign_ids(lookup_for(keys, impl).positions(cols), enc.null_mask(cols, "any"), num_buckets,
                         cols, "int64")
    assert host(ids).tolist() == expected_ids(rows, num_buckets=num_buckets)[0]


def test_merging_counts_of_strings_and_numbers_is_a_clear_error():
    with pytest.raises(TypeError, match="Test: column 'c' holds strings in some partitions and numbers in others"):
        cpu.merge_counts(count("str", ["a"]), count("Int64", [1]), OP, "c")


def test_strings_are_not_found_by_numbers_and_the_error_names_the_column():
    lookup = lookup_for([pa.array(["1", "2"])])
    with pytest.raises(TypeError, match="Test: column 'c' was fit on strings but now holds numbers"):
        lookup.positions([cpu.normalize_column(OP, "c", pd.Series([1, 2]))])


@pytest.mark.parametrize("keys", [[-(2**63), -(2**63) + 2], [2**63 - 1, 2**63 - 3], [0, 1, 2, 3], [-(2**63), 5], [2**40, 7]])
def test_integer_keys_dense_or_sparse_at_the_ends_of_int64(keys):
    lookup = lookup_for([np.array(keys, dtype=np.int64)])
    query = [2**63 - 1, -(2**63), -(2**63) + 1, 2**63 - 3, 5, 3, 2**40, -1, 7]
    col = cpu.normalize_column(OP, "c", series("Int64", query + [None]))
    assert lookup.positions([col]).tolist() == [keys.index(q) if q in keys else -1 for q in query] + [-1]


def test_integers_match_by_value_whatever_their_width():
    lookup = lookup_for([np.array([2**64 - 1, 7, 0], dtype=np.uint64)])
    query = pd.Series([-1, 7, 0, 2**62, 5], dtype="int64")  # -1 has the bits of 2**64 - 1, but is not it
    assert lookup.positions([cpu.normalize_column(OP, "c", query)]).tolist() == [-1, 1, 2, -1, -1]
    floats = pd.Series([7.0, 7.5, float(2**64 - 1), -0.0])
    assert lookup.positions([cpu.normalize_column(OP, "c", floats)]).tolist() == [1, -1, -1, 2]


# --- keys of several columns: grouping rows, uniting partials ---------------------------------
@settings(max_examples=60, deadline=None)
@given(a=columns(("Int64 small range", "str", "UInt64 above 2**63")), b=columns(("Int64 wide range", "str")))
def test_group_rows_and_union_keys_match_pandas_groupby(a, b):
    n = min(len(a[1]), len(b[1]))
    half = n // 2
    frames = [pd.DataFrame({"a": series(a[0], a[1][lo:hi]), "b": series(b[0], b[1][lo:hi])})
              for lo, hi in [(0, half), (half, n)]]
    partials = []
    for frame in frames:
        cols = [cpu.normalize_column(OP, c, frame[c]) for c in "ab"]
        mask, codes, keys, kinds = cpu.group_rows(cols)
        valid = frame[~mask] if mask is not None else frame
        assert mask is None or mask.tolist() == [is_null(x) or is_null(y) for x, y in zip(frame["a"], frame["b"])]
        if keys is None:
            assert len(valid) == 0
            continue
        # rows of one group hold one key, and the key is theirs
        key_rows = list(zip(*[python_values(k) for k in keys]))
        assert [key_rows[c] for c in codes] == list(zip(valid["a"].tolist(), valid["b"].tolist()))
        assert len(set(key_rows)) == len(key_rows)
        partials.append({"keys": keys, "kinds": kinds})
    if len(partials) == 2:
        codes, unique, _ = cpu.union_keys(partials[0], partials[1], OP, "a_b")
        unique_rows = list(zip(*[python_values(k) for k in unique]))
        both = [row for p in partials for row in zip(*[python_values(k) for k in p["keys"]])]
        assert [unique_rows[c] for c in codes] == both
        assert sorted(set(both), key=repr) == sorted(unique_rows, key=repr)


# --- hashing ------------------------------------------------------------------------------
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=60, deadline=None)
@given(column=columns())
def test_hashes_match_the_python_reference(impl, column):
    enc = implementation(impl)
    dtype, values = column
    col = enc.normalize_column(OP, "c", series_for(impl, dtype, values))
    expected = [NULL_HASH if v is None else py_hash(v) for v in values]
    assert [int(h) for h in host(enc.hash_values(col))] == expected


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_integral_floats_at_the_64_bit_edges_hash_as_the_same_integers(impl):
    """-2**63 and the integral floats in [2**63, 2**64) hashed by their float bits, unlike every other
    integral float, so a float column disagreed with the same ids as Int64 / UInt64 there."""
    enc = implementation(impl)
    signed = [-(2**63), -(2**63) + 1024, 2**63 - 1024, 0]
    unsigned = [2**63, 2**63 + 2048, 2**64 - 2048, 5]
    for ints, dtype in ((signed, "Int64"), (unsigned, "UInt64")):
        floats = [float(v) for v in ints]
        assert [int(f) for f in floats] == ints  # exactly those integers
        by_float = host(enc.hash_values(enc.normalize_column(OP, "c", series_for(impl, "float64", floats))))
        by_int = host(enc.hash_values(enc.normalize_column(OP, "c", series_for(impl, dtype, ints))))
        assert by_float.tolist() == by_int.tolist() == [py_hash(v) for v in ints], dtype
    beyond = [-(2.0**63) - 2048, 2.0**64]  # no 64-bit integer: their float64 bits
    got = host(enc.hash_values(enc.normalize_column(OP, "c", series_for(impl, "float64", beyond))))
    assert got.tolist() == [splitmix64(struct.unpack("<Q", struct.pack("<d", v))[0]) for v in beyond]


def test_cross_hash_matches_the_python_reference():
    a = pd.Series([1, None, 3, None], dtype="Int64")
    b = pd.Series(["x", "y", None, None], dtype=STRING_DTYPE)
    cols = [cpu.normalize_column(OP, c, s) for c, s in [("a", a), ("b", b)]]
    expected = [py_cross([x, y]) for x, y in zip(a.tolist(), b.tolist())]
    assert [int(h) for h in cpu.cross_hash(cols)] == expected


# --- lists ----------------------------------------------------------------------------------
def test_list_elements_are_counted_and_encoded_keeping_the_lists():
    lists = pd.Series([[3, 1], None, [], [1, 1, None], [2]], dtype=pd.ArrowDtype(pa.list_(pa.int64())))
    elements = [3, 1, 1, 1, None, 2]
    col = cpu.normalize_elements(OP, "l", lists)
    merged = cpu.count_values([col], col.mask)
    keys, counts = cpu.vocabulary(merged, 0, 0)
    assert list(zip(python_values(keys[0]), counts.tolist())) == reference_vocabulary(elements)
    lookup = lookup_for(keys)

    def encode(c):
        return cpu.assign_ids(lookup.positions([c]), c.mask, 1, [c], "int64")

    out = cpu.map_column(OP, "l", lists, encode)
    ids = iter(expected_ids(elements)[0])
    assert out.tolist() == [row if row is pd.NA else [next(ids) for _ in row] for row in lists.tolist()]


# --- the implementation seam --------------------------------------------------------------
def test_backend_picks_the_cpu_implementation_for_host_data():
    assert backend.encoding_for(pd.DataFrame({"a": [1]})) is cpu
    assert backend.encoding_for(np.zeros(3)) is cpu


def test_gpu_implementation_offers_every_cpu_primitive():
    for name in cpu.__all__:
        assert callable(getattr(gpu, name)), name


# --- the device's group sums (CuPy before 14 refuses int64 in add.at) -------------------------
SCATTER_ARRAYS = ["numpy", pytest.param("cupy", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("xp_name", SCATTER_ARRAYS)
def test_device_group_sums_are_exact_int64(xp_name):
    from tabloader.encoding.gpu import counting

    xp = np if xp_name == "numpy" else backend.cupy()
    codes = np.array([2, 0, 2, 3, 0, 2], dtype=np.int64)
    weights = np.array([2**62, -5, 2**62, 7, -(2**63), -1], dtype=np.int64)
    want_sums = [0] * 5
    for code, weight in zip(codes.tolist(), weights.tolist()):  # by hand, wrapping as int64 does
        want_sums[code] = (want_sums[code] + weight + 2**63) % 2**64 - 2**63
    sums = counting.sum_int(xp.asarray(codes), xp.asarray(weights), 5)
    assert sums.dtype == np.int64
    assert host(sums).tolist() == want_sums


def test_a_fresh_lookup_queried_by_many_threads_at_once_finds_every_key():
    """pandas 2 builds an Index's hash table on first use without a lock: threads sharing a fresh
    lookup saw duplicates (InvalidIndexError). Lookups are built once, then shared by threads."""
    import threading

    from tabloader.encoding.cpu.lookup import FloatKeys, IntKeys

    rng = np.random.default_rng(0)
    for _ in range(20):
        keys = rng.choice(2**40, 5000, replace=False)  # sparse: a hash index, not a direct table
        query = rng.permutation(keys)
        expected = pd.Series(np.arange(len(keys)), index=keys)[query].to_numpy()
        for lookup in (IntKeys(keys), FloatKeys(keys.astype(np.float64))):
            barrier, found, errors = threading.Barrier(8), [], []

            def find(lookup=lookup, barrier=barrier, found=found, errors=errors):
                barrier.wait()
                try:
                    found.append(lookup.find(query))
                except Exception as exc:  # noqa: BLE001  (reported below, with its type)
                    errors.append(exc)

            threads = [threading.Thread(target=find) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors, errors[0]
            for positions in found:
                np.testing.assert_array_equal(positions, expected)


@pytest.mark.parametrize("values", [["", "\x00"], ["a", "a\x00b", "a"]])
def test_strings_differing_after_a_nul_byte_stay_apart_through_merges(values):
    """pandas 2 hashes a Python string only up to its first NUL byte: the merge of partials (and
    a combination's grouping) must not see "a" and "a\\x00b" as one key."""
    partials = []
    for value in values:
        col = cpu.normalize_column("op", "c", pd.Series([value], dtype=STRING_DTYPE))
        partials.append(cpu.count_values([col], col.mask))
    merged = partials[0]
    for partial in partials[1:]:
        merged = cpu.merge_counts(merged, partial, "op", "c")
    counted = dict(zip(merged["keys"][0].to_pylist(), merged["counts"].tolist()))
    assert counted == {v: values.count(v) for v in values}


# --- lookups shared by a transform's threads are built once ----------------------------------------
def test_a_lookup_of_sorted_keys_has_its_hash_table_before_threads_share_it():
    """pandas builds an Index's hash table on first lookup, without a lock; ``is_unique`` alone
    does not build it for sorted keys (a vocabulary of values seen once each), and the threads
    of a first transform each built one (8 threads: 2.4 GB for 8M keys instead of 0.5)."""
    keys = cpu.lookup.IntKeys(np.arange(0, 7 * 300_000, 7, dtype=np.int64) * 1000)  # sorted, sparse: hashed
    assert keys.index is not None
    assert keys.index._engine.is_mapping_populated


def test_threads_asking_for_a_lookup_at_once_share_one(tmp_path):
    """The first partitions of a transform ask for a Categorify's lookup together: one builds
    it, the others wait for it (each built its own before, all alive at once)."""
    import threading

    from tabloader.ops.base import lookup_key

    frame = pd.DataFrame({"c": np.random.default_rng(0).permutation(1_000_000) * 3})
    op = Workflow(["c"] >> ops.Categorify(), progress=False).fit(frame).output_node.op
    op._lookup = {}
    start, got = threading.Barrier(8), []

    def ask():
        start.wait()
        got.append(op._get_lookup(cpu, "single", "c", ("c",)))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(lookup) for lookup in got}) == 1 and op._lookup[lookup_key(cpu, "c")] is got[0]
