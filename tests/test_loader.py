"""The core batch loader: exactly-once epochs, determinism, resume, sharding, bounded memory,
column roles, list columns and bad input. Expected values are computed here with numpy/pandas.

The properties (exactly once, ranks, determinism, resume, list columns) run on every device of
the ``device`` fixture (tests/conftest.py): the CPU here, and CUDA, marked ``gpu``, on a GPU."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
import weakref

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tabloader as tl
from tabloader.loader import Loader, LoaderReadError, PartitionPlan, ReadAhead
from tabloader.schema import ColumnSchema, Schema, Tags

ROW_BYTES = 8 + 8 + 4 + 4  # id, cat (int64), x, y (float32)


def frame(start: int, n: int) -> pd.DataFrame:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pd.DataFrame({"id": ids, "cat": ids % 7, "x": (ids * 0.5).astype(np.float32),
                         "y": (ids % 2).astype(np.float32)})


SCHEMA = Schema([ColumnSchema("id", "int64", {Tags.CATEGORICAL}), ColumnSchema("cat", "int64", {Tags.CATEGORICAL}),
                 ColumnSchema("x", "float32", {Tags.CONTINUOUS}), ColumnSchema("y", "float32", {Tags.TARGET})])


def write_dataset(path, sizes, row_group_size=None, schema=SCHEMA) -> str:
    """One parquet file per entry of ``sizes`` (row ids consecutive) plus ``_schema.json``."""
    os.makedirs(path, exist_ok=True)
    start = 0
    for i, n in enumerate(sizes):
        pq.write_table(pa.Table.from_pandas(frame(start, n), preserve_index=False),
                       os.path.join(path, f"part_{i:03d}.parquet"), row_group_size=row_group_size)
        start += n
    schema.save(os.path.join(path, "_schema.json"))
    return str(path)


def host(array) -> np.ndarray:
    """A numpy copy of a batch array, numpy or CuPy (by CuPy's own call, not the seam's)."""
    return array.get() if type(array).__module__.startswith("cupy") else np.asarray(array)


def epoch_ids(loader) -> list[np.ndarray]:
    return [host(f["id"]) for f, _ in loader]


@pytest.fixture
def data(tmp_path):
    return write_dataset(tmp_path / "d", [100, 37, 250, 13], row_group_size=40)


# --- every row exactly once ----------------------------------------------------------------
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 60), min_size=1, max_size=5), row_group=st.integers(5, 64),
       batch_size=st.integers(1, 70), chunk_rows=st.integers(1, 200), shuffle=st.booleans(),
       prefetch=st.booleans(), parts=st.one_of(st.none(), st.integers(1, 3)), seed=st.integers(0, 3))
def test_every_row_exactly_once(tmp_path_factory, device, sizes, row_group, batch_size, chunk_rows, shuffle, prefetch,
                                parts, seed):
    path = write_dataset(tmp_path_factory.mktemp("p"), sizes, row_group_size=row_group)
    ds = tl.Dataset(path, part_size=row_group * ROW_BYTES)  # about one row group per partition
    loader = Loader(ds, batch_size, shuffle=shuffle, seed=seed, buffer_size=chunk_rows * ROW_BYTES,
                    parts_per_chunk=parts, prefetch=prefetch, device=device)
    expected = pd.concat([pd.read_parquet(os.path.join(path, f)) for f in sorted(os.listdir(path))
                          if f.endswith(".parquet")])["id"].to_numpy()
    for _ in range(2):
        batches = [({k: host(v) for k, v in f.items()}, host(y)) for f, y in loader]
        ids = np.concatenate([f["id"] for f, _ in batches])
        assert sorted(ids.tolist()) == sorted(expected.tolist())
        assert len(batches) == len(loader) == -(-len(expected) // batch_size)
        assert all(len(y) == batch_size for _, y in batches[:-1])
        for f, y in batches:  # the columns of a row stay together
            np.testing.assert_array_equal(f["cat"], f["id"] % 7)
            np.testing.assert_array_equal(f["x"], (f["id"] * 0.5).astype(np.float32))
            np.testing.assert_array_equal(y, (f["id"] % 2).astype(np.float32))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=4), world=st.integers(1, 5),
       batch_size=st.integers(1, 30), chunk_rows=st.integers(1, 100), drop_last=st.booleans())
def test_ranks_disjoint_balanced(tmp_path_factory, device, sizes, world, batch_size, chunk_rows, drop_last):
    path = write_dataset(tmp_path_factory.mktemp("r"), sizes)
    total = sum(sizes)
    if drop_last and total < world:
        with pytest.raises(ValueError, match="ranks"):
            Loader(tl.Dataset(path), batch_size, global_rank=0, global_size=world, drop_last=True, device=device)
        return
    loaders = [Loader(tl.Dataset(path), batch_size, seed=5, buffer_size=chunk_rows * ROW_BYTES, global_rank=r,
                      global_size=world, drop_last=drop_last, device=device) for r in range(world)]
    per_rank = [epoch_ids(ld) for ld in loaders]
    counts = {len(b) for b in per_rank}
    assert len(counts) == 1 and counts == {len(loaders[0])}  # same number of batches everywhere
    ids = np.concatenate([np.concatenate(b) for b in per_rank if b] or [np.empty(0, np.int64)])
    if drop_last:
        per = total // world
        assert len(ids) == world * (per // batch_size * batch_size)
        assert len(set(ids.tolist())) == len(ids)  # disjoint
    else:
        per = -(-total // world)
        assert len(ids) == world * per
        assert set(ids.tolist()) == set(range(total))  # complete
        assert len(ids) - len(set(ids.tolist())) == world * per - total  # only the padding repeats
        assert world * per - total < world


def test_more_ranks_than_partitions_split_rows(tmp_path):
    path = write_dataset(tmp_path / "d", [10])
    seen = [np.concatenate(epoch_ids(Loader(tl.Dataset(path), 2, global_rank=r, global_size=4))) for r in range(4)]
    assert [len(s) for s in seen] == [3, 3, 3, 3]
    assert set(np.concatenate(seen).tolist()) == set(range(10))



def test_unshuffled_ranks_read_contiguous_rows_padding_last(tmp_path):
    # the documented layout that lets a DDP evaluation drop the padding exactly
    path = write_dataset(tmp_path / "d", [4, 3, 3])
    seen = [np.concatenate(epoch_ids(Loader(tl.Dataset(path), 3, shuffle=False, global_rank=r, global_size=3)))
            for r in range(3)]
    assert [s.tolist() for s in seen] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]


# --- determinism and resume -----------------------------------------------------------------
def test_same_seed_same_batches_epochs_differ(data, device):
    a, b = (Loader(tl.Dataset(data), 32, seed=7, buffer_size=120 * ROW_BYTES, device=device) for _ in range(2))
    a0, b0 = epoch_ids(a), epoch_ids(b)
    assert all(np.array_equal(x, y) for x, y in zip(a0, b0)) and len(a0) == len(b0)
    a1 = epoch_ids(a)
    assert not np.array_equal(np.concatenate(a0), np.concatenate(a1))
    assert sorted(np.concatenate(a1).tolist()) == list(range(400))
    c0 = epoch_ids(Loader(tl.Dataset(data), 32, seed=8, buffer_size=120 * ROW_BYTES, device=device))
    assert not np.array_equal(np.concatenate(a0), np.concatenate(c0))


def test_no_shuffle_keeps_order(data, device):
    loader = Loader(tl.Dataset(data), 64, shuffle=False, device=device)
    assert np.concatenate(epoch_ids(loader)).tolist() == list(range(400))


def test_no_shuffle_keeps_the_order_of_partitions_of_many_row_groups(tmp_path, device):
    """The loader's reader (pyarrow's dataset reader, into the loader's memory pool) reads a
    partition's row groups in the file's order: pyarrow's make_fragment alone may read row groups
    24..35 as 32..35, 24..31."""
    pq.write_table(pa.table({"id": np.arange(1000), "x": np.zeros(1000, np.float32)}), tmp_path / "a.parquet",
                   row_group_size=7)
    ds = tl.Dataset(str(tmp_path), part_size="4KB")
    assert ds.npartitions > 5
    loader = Loader(ds, 100, shuffle=False, categorical=["id"], continuous=["x"], target=[], device=device)
    assert np.concatenate([np.asarray(f["id"].tolist()) for f, _ in loader]).tolist() == list(range(1000))


@pytest.mark.parametrize("stop_after", [0, 1, 3, 7, 12])
def test_state_dict_resumes_mid_epoch(data, device, stop_after):
    reference = Loader(tl.Dataset(data), 33, seed=3, buffer_size=90 * ROW_BYTES, device=device)
    epoch_ids(reference)  # epoch 0
    full = epoch_ids(reference)  # epoch 1, uninterrupted
    loader = Loader(tl.Dataset(data), 33, seed=3, buffer_size=90 * ROW_BYTES, device=device)
    epoch_ids(loader)
    it = iter(loader)
    head = [host(next(it)[0]["id"]) for _ in range(stop_after)]
    state = loader.state_dict()
    assert state["epoch"] == 1 and state["rows"] == 33 * stop_after and state["batches"] == stop_after
    loader.close()
    resumed = Loader(tl.Dataset(data), 33, seed=999, buffer_size=90 * ROW_BYTES, device=device)
    resumed.load_state_dict(state)
    tail = epoch_ids(resumed)
    assert len(head) + len(tail) == len(full)
    for got, want in zip(head + tail, full):
        np.testing.assert_array_equal(got, want)
    assert resumed.state_dict()["epoch"] == 2 and resumed.state_dict()["rows"] == 0


@pytest.mark.parametrize("stop_after", [2, 3])
def test_resuming_with_drop_last_and_a_larger_batch_size_yields_the_epoch_s_other_rows_in_full_batches(stop_after):
    """10 rows in batches of 3 (drop_last: 9 rows an epoch), resumed in batches of 4: after 2
    batches, one batch of the 4 rows left; after the whole epoch (9 rows, more than the 8 an
    epoch of 4s yields), nothing more in that epoch, then whole epochs of 4s."""
    ds = tl.Dataset(pd.DataFrame({"id": np.arange(10)}))
    first = Loader(ds, 3, seed=0, drop_last=True, categorical=["id"], target=[])
    it = iter(first)
    head = [next(it)[0]["id"].tolist() for _ in range(stop_after)]
    state = first.state_dict()
    first.close()
    resumed = Loader(ds, 4, seed=0, drop_last=True, categorical=["id"], target=[])
    resumed.load_state_dict(state)
    tail = [f["id"].tolist() for f, _ in resumed]
    seen = [i for batch in head + tail for i in batch]
    assert [len(b) for b in tail] == ([4] if stop_after == 2 else []) and len(set(seen)) == len(seen)
    assert [len(f["id"]) for f, _ in resumed] == [4, 4]  # the next epoch


def test_state_dict_checks_settings(data):
    state = Loader(tl.Dataset(data), 10, buffer_size=90 * ROW_BYTES).state_dict()
    with pytest.raises(ValueError, match="rows_per_chunk"):
        Loader(tl.Dataset(data), 10, buffer_size=50 * ROW_BYTES).load_state_dict(state)


def test_resume_skips_consumed_chunks_without_reading(data):
    loader = Loader(tl.Dataset(data, part_size=100 * ROW_BYTES), 50, shuffle=False, parts_per_chunk=1)
    assert loader.dataset.npartitions >= 3
    reads = []
    original = loader.reader.read_uncached
    loader.reader.read_uncached = lambda i: reads.append(i) or original(i)
    loader.load_state_dict({**loader.state_dict(), "rows": 350})
    assert np.concatenate(epoch_ids(loader)).tolist() == list(range(350, 400))
    needed = [s.partition for c in loader.plan.chunks(0) if c.row_start + c.num_rows > 350 for s in c.segments]
    assert reads == needed and len(needed) < loader.dataset.npartitions


# --- batches as frameworks take them ---------------------------------------------------------
def test_batches_spanning_chunks_are_aligned_contiguous_columns(data):
    """Chunks of 120 rows and batches of 32: most batches take rows from two chunks. Every
    feature and target of every batch (those, and the short last one included) is a contiguous
    1-D array starting 64-byte aligned -- what TensorFlow imports without a copy -- and its
    rows belong together (cat, x and y recomputed from the id by hand)."""
    loader = Loader(tl.Dataset(data), 32, seed=3, buffer_size=120 * ROW_BYTES)
    assert [c.num_rows for c in loader.plan.chunks(0)] == [120, 120, 120, 40]
    ids = []
    for features, target in loader:
        for name, array in [*features.items(), ("y", target)]:
            assert array.ndim == 1 and array.flags.c_contiguous, name
            assert array.ctypes.data % 64 == 0, (name, len(array))
        ids.append(features["id"])
        np.testing.assert_array_equal(features["cat"], features["id"] % 7)
        np.testing.assert_array_equal(features["x"], (features["id"] * 0.5).astype(np.float32))
        np.testing.assert_array_equal(target, (features["id"] % 2).astype(np.float32))
    assert [len(i) for i in ids] == [32] * 12 + [16]
    assert sorted(np.concatenate(ids).tolist()) == list(range(400))


# --- memory ---------------------------------------------------------------------------------
def test_memory_bounded_by_buffer(tmp_path):
    path = write_dataset(tmp_path / "d", [5000] * 8, row_group_size=1000)
    ds = tl.Dataset(path, part_size=1000 * ROW_BYTES)
    assert ds.npartitions >= 40
    budget_rows = 1500
    loader = Loader(ds, 256, buffer_size=budget_rows * ROW_BYTES)
    tracemalloc.start()
    rows = sum(len(y) for _, y in loader)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert rows == 40_000
    assert loader._buffer.max_rows <= budget_rows and loader._buffer.max_rows_filled == budget_rows
    assert loader._buffer.slots == 2
    # two chunk buffers + a decoded partition + batches: far below the 40k rows of the dataset
    assert peak < 8 * budget_rows * ROW_BYTES + 2_000_000, peak



def test_a_chunk_of_lists_longer_than_the_first_partitions_stays_within_the_buffer(tmp_path):
    """Chunks are sized from the lists' mean length: taken from the first partition alone, data
    whose lists grow over time (1 element first, 30 later) filled chunks 9x buffer_size."""
    n = 20_000
    for f, length in enumerate([1, 30, 30, 30]):
        elements = pa.array(np.ones(n * length, np.int64))
        tags = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * length), elements)
        pq.write_table(pa.table({"x": np.arange(n), "tags": tags}), tmp_path / f"p{f}.parquet")
    budget = 2_000_000
    loader = Loader(tl.Dataset(str(tmp_path), part_size="1MB"), 1024, buffer_size=budget, categorical=["x", "tags"])
    rows = max(spec.num_rows for spec in loader.plan.chunks(0))
    assert rows * (8 + 8 + 8 * 30) <= budget  # x, the offsets and 30 elements a row

def test_chunk_of_many_partitions_holds_few_decoded_at_once(tmp_path):
    """Chunks spanning 8 partitions: each decoded partition is packed as it comes and freed, so
    arrow's memory pool (the partitions are decoded into it) peaks at a few partitions -- the one
    being packed and the one decoded ahead -- never at the chunk's eight. Run in a fresh
    interpreter, whose pool peak is the loader's alone."""
    path = write_dataset(tmp_path / "d", [20_000] * 12, row_group_size=5_000)
    code = textwrap.dedent("""
        import json, sys
        import tabloader as tl
        from tabloader.loader.reader import memory_pool
        ds = tl.Dataset(sys.argv[1], part_size=int(sys.argv[2]))
        loader = tl.Loader(ds, 4096, buffer_size=int(sys.argv[3]), seed=0)
        rows = sum(len(y) for _, y in loader)
        print(json.dumps({"rows": rows, "sizes": ds.partition_sizes(), "peak": memory_pool().max_memory(),
                          "segments": [len(c.segments) for c in loader.plan.chunks(0)]}))
    """)
    proc = subprocess.run([sys.executable, "-c", code, path, str(20_000 * ROW_BYTES), str(120_000 * ROW_BYTES)],
                          capture_output=True, text=True, check=True)
    r = json.loads(proc.stdout)
    assert r["rows"] == 240_000 and min(r["segments"]) >= 6, r
    partition_bytes = max(r["sizes"]) * ROW_BYTES  # decoded: 4 columns of fixed width, no nulls
    assert r["peak"] < 5 * partition_bytes, (r, partition_bytes)


# --- columns --------------------------------------------------------------------------------
def test_roles_from_tags_and_overrides(data):
    loader = Loader(tl.Dataset(data), 16, shuffle=False)
    features, target = next(iter(loader))
    assert list(features) == ["id", "cat", "x"] and target.dtype == np.float32 and target.shape == (16,)
    assert features["id"].dtype == np.int64 and features["x"].dtype == np.float32
    assert all(a.flags.c_contiguous for a in features.values())
    features, target = next(iter(Loader(tl.Dataset(data), 16, shuffle=False, categorical=["cat"], continuous=[],
                                        target=["y", "x"])))
    assert list(features) == ["cat"] and target.shape == (16, 2)
    np.testing.assert_array_equal(target[:, 1], np.arange(16) * 0.5)
    features, target = next(iter(Loader(tl.Dataset(data), 16, target=[])))
    assert target is None


def test_untagged_numeric_columns_are_features():
    df = pd.DataFrame({"a": np.arange(5), "b": np.ones(5)})
    features, target = next(iter(Loader(tl.Dataset(df), 5)))
    assert set(features) == {"a", "b"} and target is None


def test_list_columns_keep_rows_whole(tmp_path, device):
    rng = np.random.default_rng(0)
    n = 300
    lists = [rng.integers(0, 50, rng.integers(0, 5)).tolist() for _ in range(n)]
    table = pa.table({"id": np.arange(n), "tags": pa.array(lists, pa.list_(pa.int64())),
                      "y": np.zeros(n, np.float32)})
    os.makedirs(tmp_path / "l")
    pq.write_table(table.slice(0, 170), tmp_path / "l" / "a.parquet", row_group_size=50)
    pq.write_table(table.slice(170), tmp_path / "l" / "b.parquet", row_group_size=50)
    schema = Schema([ColumnSchema("id", "int64", {Tags.CATEGORICAL}),
                     ColumnSchema("tags", "int64", {Tags.CATEGORICAL, Tags.LIST}, is_list=True),
                     ColumnSchema("y", "float32", {Tags.TARGET})])
    ds = tl.Dataset(str(tmp_path / "l"), schema=schema, part_size=2000)
    seen = []
    for features, _ in Loader(ds, 32, seed=1, buffer_size=1500, device=device):
        (values, offsets), ids = (host(a) for a in features["tags"]), host(features["id"])
        assert offsets.dtype == np.int64 and len(offsets) == len(ids) + 1 and offsets[0] == 0
        for k, row in enumerate(ids):
            assert values[offsets[k]:offsets[k + 1]].tolist() == lists[row]
            seen.append(int(row))
    assert sorted(seen) == list(range(n))


def test_transformed_dataset_is_transformed_on_read(data):
    ds = tl.Dataset(data)

    def double(df):
        df = df.copy()
        df["x"] = df["x"] * 2
        return df

    loader = Loader(ds.with_transform(double, ds.schema), 50, shuffle=False)
    features, _ = next(iter(loader))
    np.testing.assert_array_equal(features["x"], np.arange(50, dtype=np.float32))


def test_transform_that_drops_rows_counts_them(data):
    ds = tl.Dataset(data)
    odd = ds.with_transform(lambda df: df[df["id"] % 2 == 1], ds.schema, preserves_rows=False)
    loader = Loader(odd, 64)
    ids = np.concatenate(epoch_ids(loader))
    assert sorted(ids.tolist()) == list(range(1, 400, 2)) and len(loader) == -(-200 // 64)


# --- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_size", [0, -3, 2.5, "8"])
def test_bad_batch_size(data, batch_size):
    with pytest.raises(ValueError, match="batch_size"):
        Loader(tl.Dataset(data), batch_size)


@pytest.mark.parametrize("prefetch", [True, False])
def test_corrupt_file_mid_epoch_names_file_and_recovers(tmp_path, prefetch):
    path = write_dataset(tmp_path / "d", [200, 200, 200, 200])
    loader = Loader(tl.Dataset(path, part_size=200 * ROW_BYTES), 50, shuffle=False, parts_per_chunk=1,
                    prefetch=prefetch)
    assert loader.dataset.npartitions == 4
    victim = os.path.join(path, "part_002.parquet")
    good = open(victim, "rb").read()
    with open(victim, "wb") as f:
        f.write(good[: len(good) // 2])
    got = []
    with pytest.raises(LoaderReadError, match="part_002.parquet"):
        for features, _ in loader:
            got.append(features["id"])
    assert np.concatenate(got).tolist() == list(range(400))  # everything before the bad file came out
    state = loader.state_dict()
    loader.close()
    assert not any(t.name == "tabloader-prefetch" for t in threading.enumerate())
    with open(victim, "wb") as f:
        f.write(good)
    assert sorted(np.concatenate(epoch_ids(loader)).tolist()) == list(range(800))  # a new epoch works
    loader.load_state_dict(state)  # and so does resuming where it failed
    assert np.concatenate(epoch_ids(loader)).tolist() == list(range(400, 800))


def test_column_missing_from_a_file_names_column_and_file(tmp_path):
    path = write_dataset(tmp_path / "d", [30, 30])
    loader = Loader(tl.Dataset(path, part_size=30 * ROW_BYTES), 10, shuffle=False)
    pq.write_table(pa.Table.from_pandas(frame(30, 30).drop(columns=["x"]), preserve_index=False),
                   os.path.join(path, "part_001.parquet"))
    with pytest.raises(LoaderReadError, match=r"part_001\.parquet.*'x'|'x'.*part_001\.parquet"):
        epoch_ids(loader)


def test_files_disagreeing_on_columns_fail_at_dataset(tmp_path):
    path = write_dataset(tmp_path / "d", [30, 30])
    pq.write_table(pa.Table.from_pandas(frame(30, 30).drop(columns=["x"]), preserve_index=False),
                   os.path.join(path, "part_001.parquet"))
    with pytest.raises(ValueError, match="part_001.parquet"):
        tl.Dataset(path)


def test_nulls_raise_naming_column_and_file(tmp_path):
    os.makedirs(tmp_path / "n")
    df = frame(0, 20)
    table = pa.Table.from_pandas(df, preserve_index=False)
    cat = pa.array([None if i == 5 else v for i, v in enumerate(df["cat"])], pa.int64())
    table = table.set_column(table.schema.get_field_index("cat"), "cat", cat)
    pq.write_table(table, tmp_path / "n" / "f.parquet")
    with pytest.raises(LoaderReadError, match=r"'cat'.*f\.parquet"):
        epoch_ids(Loader(tl.Dataset(str(tmp_path / "n"), schema=SCHEMA), 8))


def test_float_nulls_and_nan_become_nan(tmp_path):
    os.makedirs(tmp_path / "n")
    table = pa.Table.from_pandas(frame(0, 10), preserve_index=False)
    x = pa.array([None if i == 3 else (float("nan") if i == 6 else i * 0.5) for i in range(10)], pa.float32())
    pq.write_table(table.set_column(table.schema.get_field_index("x"), "x", x), tmp_path / "n" / "f.parquet")
    for ds in (tl.Dataset(str(tmp_path / "n"), schema=SCHEMA), tl.Dataset(pd.read_parquet(tmp_path / "n"), schema=SCHEMA)):
        x = np.concatenate([f["x"] for f, _ in Loader(ds, 4, shuffle=False)])
        assert np.isnan(x[[3, 6]]).all() and np.isnan(x).sum() == 2


def test_string_column_refused():
    with pytest.raises(TypeError, match="'s'"):
        Loader(tl.Dataset(pd.DataFrame({"s": ["a", "b"], "y": [0.0, 1.0]})), 2, categorical=["s"], target="y")


def test_unknown_column_and_bad_rank(data):
    with pytest.raises(KeyError, match="nope"):
        Loader(tl.Dataset(data), 2, categorical=["nope"])
    with pytest.raises(ValueError, match="global_rank"):
        Loader(tl.Dataset(data), 2, global_rank=2, global_size=2)


@pytest.mark.parametrize("kwargs, match", [
    ({"global_size": 0}, r"global_size must be an integer >= 1, got 0"),
    ({"global_size": 2.5}, r"global_size must be an integer >= 1, got 2.5"),
    ({"global_rank": -1, "global_size": 2}, r"global_rank must be an integer >= 0, got -1"),
    ({"global_rank": 1}, r"global_rank must be below global_size=1 \(not given\), got global_rank=1"),
    ({"global_size": 2}, r"global_size=2 needs this process's global_rank as well \(0 to 1\)"),
    ({"seed": -1}, r"seed must be an integer >= 0, got -1"),
    ({"seed": 1.5}, r"seed must be an integer >= 0, got 1.5"),
    ({"seed": None, "global_rank": 0, "global_size": 2}, r"seed=None .* global_size=2 ranks"),
    ({"shuffle": "no"}, r"shuffle must be True or False, got 'no'"),
    ({"drop_last": 1}, r"drop_last must be True or False, got 1"),
    ({"parts_per_chunk": 1.5}, r"parts_per_chunk must be an integer >= 1, got 1.5"),
])
def test_bad_arguments_name_the_argument(data, kwargs, match):
    with pytest.raises(ValueError, match=match):
        Loader(tl.Dataset(data), 2, **kwargs)


def test_seed_none_draws_a_seed_that_resumes(data):
    """seed=None: a random seed per loader, recorded so that a resumed run reads the same epoch."""
    a, b = Loader(tl.Dataset(data), 50, seed=None), Loader(tl.Dataset(data), 50, seed=None)
    assert a.seed != b.seed  # 32-bit draws: equal once in four billion
    assert sorted(np.concatenate(epoch_ids(a)).tolist()) == list(range(400))
    it = iter(a)  # epoch 1
    head = [np.asarray(next(it)[0]["id"]) for _ in range(3)]
    state = a.state_dict()
    a.close()
    assert state["seed"] == a.seed
    b.load_state_dict(state)
    same = Loader(tl.Dataset(data), 50, seed=a.seed)  # the drawn seed, given explicitly
    epoch_ids(same)
    want = epoch_ids(same)
    for got, expect in zip(head + epoch_ids(b), want):
        np.testing.assert_array_equal(got, expect)
    unshuffled_ranks = Loader(tl.Dataset(data), 50, shuffle=False, seed=None, global_rank=1, global_size=2)
    assert np.concatenate(epoch_ids(unshuffled_ranks)).tolist() == list(range(200, 400))


@pytest.mark.parametrize("change, match", [
    ({"rows": -4}, r"state\['rows'\] must be an integer >= 0, got -4"),
    ({"rows": 401}, r"state\['rows'\]=401 is more than the 400 rows"),
    ({"rows": "4"}, r"state\['rows'\] must be an integer >= 0, got '4'"),
    ({"epoch": -1}, r"state\['epoch'\] must be an integer >= 0, got -1"),
    ({"epoch": 1.0}, r"state\['epoch'\] must be an integer >= 0, got 1.0"),
    ({"seed": None}, r"state\['seed'\] must be an integer >= 0, got None"),
    ({"rows": None}, r"state\['rows'\] must be an integer"),
])
def test_load_state_dict_refuses_bad_values(data, change, match):
    loader = Loader(tl.Dataset(data), 10)
    with pytest.raises(ValueError, match=match):
        loader.load_state_dict({**loader.state_dict(), **change})
    loader.load_state_dict({**loader.state_dict(), "rows": 400})  # the epoch fully read: allowed, and empty
    assert list(loader) == [] and len(list(loader)) == 40


def test_load_state_dict_refuses_missing_keys_and_non_dicts(data):
    loader = Loader(tl.Dataset(data), 10)
    state = loader.state_dict()
    del state["rows"]
    with pytest.raises(ValueError, match=r"missing the key\(s\) \['rows'\]"):
        loader.load_state_dict(state)
    with pytest.raises(ValueError, match="state must be a dict returned by state_dict"):
        loader.load_state_dict([("epoch", 0), ("rows", 0)])


def test_close_mid_epoch_stops_thread_and_next_epoch_starts(data):
    loader = Loader(tl.Dataset(data, part_size=100 * ROW_BYTES), 10, parts_per_chunk=1)
    it = iter(loader)
    next(it)
    loader.close()
    assert not any(t.name == "tabloader-prefetch" and t.is_alive() for t in threading.enumerate())
    assert loader.epoch == 0 and loader.state_dict()["rows"] == 10
    assert sorted(np.concatenate(epoch_ids(loader)).tolist()) == list(range(400))
    with Loader(tl.Dataset(data), 10) as again:
        assert len(list(again)) == 40


def threads_since(before: set) -> list[str]:
    """The loader threads (``tabloader-*``) alive now that were not in ``before``."""
    return [t.name for t in threading.enumerate() if t not in before and t.name.startswith("tabloader-")]


def freed_with_its_threads(loader_ref, before: set, seconds: float = 30) -> bool:
    """Whether the loader behind ``loader_ref`` is freed and the threads it started have ended,
    waiting up to ``seconds`` (collecting reference cycles meanwhile)."""
    deadline = time.monotonic() + seconds
    while loader_ref() is not None or threads_since(before):
        if time.monotonic() > deadline:
            return False
        gc.collect()
        time.sleep(0.02)
    return True


def abandon_an_epoch(loader, how: str, before: set) -> None:
    """Stop iterating ``loader`` part-way, without closing it, as a training loop does (checking
    that the epoch runs on threads of its own, started after ``before``)."""
    if how == "break":
        for i, _ in enumerate(loader):
            if i == 2:
                assert threads_since(before)
                break
    elif how == "exception":
        with pytest.raises(ZeroDivisionError):
            for i, _ in enumerate(loader):
                if i == 2:
                    assert threads_since(before)
                    1 / 0
    else:  # the docs' idiom for a look at one batch
        assert next(iter(loader))[0]["id"].shape == (10,)


@pytest.mark.parametrize("how", ["break", "exception", "next(iter(loader))"])
def test_a_dropped_loader_whose_epoch_stopped_early_is_freed_and_its_threads_end(tmp_path, device, how):
    """Leaving an epoch early (``break``, an exception, one ``next``) and dropping the loader
    frees it, its chunk buffers and its prefetch and read threads, without ``close()``: the loader
    held its running epoch, which the prefetch thread kept reachable, so every such loader lived
    (and polled) until the process ended."""
    path = write_dataset(tmp_path / "d", [500] * 4)
    before = set(threading.enumerate())
    loader = Loader(tl.Dataset(path, part_size=100 * ROW_BYTES), 10, parts_per_chunk=1, device=device)
    abandon_an_epoch(loader, how, before)
    loader_ref = weakref.ref(loader)
    del loader
    assert freed_with_its_threads(loader_ref, before), threads_since(before)


def test_a_loader_in_a_reference_cycle_with_its_running_epoch_is_collected(data):
    """The prefetch thread holds the loader only weakly: a loader that refers to its own running
    epoch (here stored on it) is garbage once dropped, and collecting it ends the epoch's threads.
    A thread is a root for the garbage collector, so a strong reference from it would keep the
    cycle alive for ever."""
    before = set(threading.enumerate())
    loader = Loader(tl.Dataset(data, part_size=40 * ROW_BYTES), 10, parts_per_chunk=1)
    loader.running = iter(loader)
    next(loader.running)
    loader_ref = weakref.ref(loader)
    del loader
    assert freed_with_its_threads(loader_ref, before), threads_since(before)


def test_a_new_iter_ends_the_running_epoch_and_its_iterator_raises_instead_of_stopping_short(data):
    """A loader runs one epoch at a time (its epochs share the chunk buffer): a second
    ``iter(loader)`` ends the first epoch, whose next ``next()`` raises -- it used to stop, so
    ``zip(loader, loader)`` gave nothing and a loop running an evaluation pass over its own
    loader silently skipped the rest of its epoch. The new epoch is whole and the loader's
    position (``state_dict``) is the new epoch's. Only an unfinished epoch's iterator raises: a
    finished one stays finished, and after a ``break`` the next epoch runs whole."""
    loader = Loader(tl.Dataset(data, part_size=40 * ROW_BYTES), 10, shuffle=False, parts_per_chunk=1)
    superseded = iter(loader)
    assert host(next(superseded)[0]["id"]).tolist() == list(range(10))
    running = iter(loader)
    for _ in range(2):  # and stays so
        with pytest.raises(RuntimeError, match=r"epoch 0 was ended by a new iter\(loader\).*use two Loaders"):
            next(superseded)
    assert host(next(running)[0]["id"]).tolist() == list(range(10))
    assert loader.state_dict()["epoch"] == 1 and loader.state_dict()["rows"] == 10
    assert np.concatenate([host(f["id"]) for f, _ in running]).tolist() == list(range(10, 400))

    with pytest.raises(RuntimeError, match="one epoch at a time"):
        list(zip(loader, loader))
    with pytest.raises(RuntimeError, match="one epoch at a time"):
        for i, _ in enumerate(loader):
            if i == 1:
                assert len(epoch_ids(loader)) == 40  # an evaluation pass over the same loader

    finished = iter(loader)
    assert len(list(finished)) == 40
    for i, _ in enumerate(loader):
        if i == 1:
            break
    assert next(finished, None) is None
    assert np.concatenate(epoch_ids(loader)).tolist() == list(range(400))


def test_reading_partitions_ahead_on_several_threads_gives_the_same_batches(data, device, monkeypatch):
    """``TABLOADER_READ_AHEAD=3`` decodes three partitions at once: the same batches, in the
    same order, as one at a time; every row once."""
    def batches():
        loader = Loader(tl.Dataset(data, part_size=40 * ROW_BYTES), 32, seed=3, buffer_size=64 * ROW_BYTES,
                        device=device)
        return [ids.tolist() for ids in epoch_ids(loader)]

    one = batches()
    monkeypatch.setenv("TABLOADER_READ_AHEAD", "3")
    assert batches() == one
    assert sorted(sum(one, [])) == list(range(400))


def test_read_ahead_decodes_that_many_partitions_at_once():
    """Each read returns only once another one runs beside it: with ``ahead=2`` they do."""
    together = threading.Barrier(2, timeout=20)

    class Reader:
        def read_uncached(self, index):
            together.wait()
            return index

    with ReadAhead(Reader(), [0, 1, 2, 3], ahead=2) as reads:
        assert [reads.get(i) for i in range(4)] == [0, 1, 2, 3]


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_a_bad_read_ahead_names_the_variable(data, monkeypatch, value):
    monkeypatch.setenv("TABLOADER_READ_AHEAD", value)
    with pytest.raises(ValueError, match=f"TABLOADER_READ_AHEAD='{value}'"):
        list(Loader(tl.Dataset(data), 64))


def test_plan_is_deterministic_and_covers():
    plan = PartitionPlan([5, 3, 8], seed=4, rows_per_chunk=4)
    for epoch in range(3):
        segs = plan.rank_segments(epoch)
        covered = sorted((s.partition, r) for s in segs for r in range(s.start, s.stop))
        assert covered == sorted((p, r) for p, n in enumerate([5, 3, 8]) for r in range(n))
        assert all(c.num_rows <= 4 for c in plan.chunks(epoch))
    assert [s for s in plan.rank_segments(1)] == [s for s in PartitionPlan([5, 3, 8], seed=4).rank_segments(1)]


def test_the_prefetcher_hands_a_slot_back_after_telling_the_consumer_s_release():
    """``released`` runs on the consumer's thread before the producer may build into the slot the
    consumer let go of: result i + 2 is produced only after the consumer's i-th release."""
    from tabloader.loader.prefetch import Prefetcher

    events, consumer = [], threading.get_ident()

    def produce(i):
        events.append(("produce", i))
        return i

    def released():
        assert threading.get_ident() == consumer
        events.append(("released", sum(e[0] == "released" for e in events)))

    with Prefetcher(produce, range(6), depth=1, released=released) as results:
        assert list(results) == list(range(6))
    for i in range(2, 6):
        assert events.index(("released", i - 2)) < events.index(("produce", i)), events
