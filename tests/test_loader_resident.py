"""The loader's resident mode (``resident=``): partitions kept on the device between epochs.

The oracle is the same loader without it (itself checked against numpy in test_loader.py) and,
for exactly-once, the ids written to the files: with any budget the batches, their order and
resuming are the same, every row comes once per epoch per rank, later epochs read only what did
not fit, and the kept bytes stay within the budget. Each test runs on every device of the
``device`` fixture (the CPU here; CUDA, marked ``gpu``, on a GPU).
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tabloader as tl
from tabloader.loader import Loader
from tabloader.schema import ColumnSchema, Schema, Tags
from test_loader import ROW_BYTES, host, write_dataset


def batches(loader) -> list[dict[str, np.ndarray]]:
    """One epoch as host arrays: every feature, list columns as values and offsets, and the target."""
    out = []
    for features, target in loader:
        batch = {"target": host(target)}
        for name, value in features.items():
            if isinstance(value, tuple):
                batch[name + ".values"], batch[name + ".offsets"] = (host(v) for v in value)
            else:
                batch[name] = host(value)
        out.append(batch)
    return out


def assert_same_epochs(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def counting_reads(loader) -> list[int]:
    """The partitions ``loader`` decodes from now on, in order (read_uncached wrapped)."""
    reads = []
    original = loader.reader.read_uncached
    loader.reader.read_uncached = lambda i: reads.append(i) or original(i)
    return reads


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 50), min_size=1, max_size=5), batch_size=st.integers(1, 40),
       chunk_rows=st.integers(1, 120), shuffle=st.booleans(), prefetch=st.booleans(), world=st.integers(1, 3),
       kept=st.sampled_from([True, 0.0, 0.5, 1.0]), seed=st.integers(0, 3))
def test_same_batches_as_reading_every_epoch(tmp_path_factory, device, sizes, batch_size, chunk_rows, shuffle,
                                             prefetch, world, kept, seed):
    path = write_dataset(tmp_path_factory.mktemp("k"), sizes, row_group_size=8)
    total = sum(sizes)
    budget = kept if kept is True else max(1, int(kept * total * ROW_BYTES))
    seen = []
    for rank in range(world):
        args = dict(shuffle=shuffle, seed=seed, buffer_size=chunk_rows * ROW_BYTES, prefetch=prefetch,
                    global_rank=rank, global_size=world, device=device)
        ds = tl.Dataset(path, part_size=8 * ROW_BYTES)  # a row group per partition
        plain, resident = Loader(ds, batch_size, **args), Loader(ds, batch_size, resident=budget, **args)
        for epoch in range(3):
            want, got = batches(plain), batches(resident)
            assert_same_epochs(got, want)
            if epoch == 0:
                seen.append(np.concatenate([b["id"] for b in got]))
        assert budget is True or resident.resident.nbytes <= budget
    ids = np.concatenate(seen)
    assert set(ids.tolist()) == set(range(total)) and len(ids) == world * -(-total // world)


def test_later_epochs_read_only_what_did_not_fit(tmp_path, device):
    path = write_dataset(tmp_path / "d", [100, 100, 100, 100])
    ds = tl.Dataset(path, part_size=100 * ROW_BYTES)
    assert ds.npartitions == 4
    loader = Loader(ds, 64, seed=1, buffer_size=150 * ROW_BYTES, resident=True, device=device)
    reads = counting_reads(loader)
    first = batches(loader)
    assert sorted(reads) == [0, 1, 2, 3] and len(loader.resident) == 4
    assert loader.resident.nbytes == 400 * ROW_BYTES  # the packed rows, nothing else
    reads.clear()
    second = batches(loader)
    assert reads == [] and sorted(np.concatenate([b["id"] for b in second]).tolist()) == list(range(400))
    assert not np.array_equal(first[0]["id"], second[0]["id"])  # a new shuffle each epoch

    partial = Loader(ds, 64, seed=1, buffer_size=150 * ROW_BYTES, device=device,
                     resident=250 * ROW_BYTES)  # room for two partitions of four
    reads = counting_reads(partial)
    batches(partial)
    kept = partial.resident.snapshot()
    assert len(kept) == 2 and partial.resident.nbytes == 200 * ROW_BYTES
    reads.clear()
    batches(partial)
    assert sorted(reads) == sorted(set(range(4)) - kept)


def counting_fills(monkeypatch) -> list[int]:
    """The chunks packed into a chunk buffer from now on (their index), by any loader."""
    from tabloader.loader.buffer import ChunkBuffer

    fills, original = [], ChunkBuffer.fill
    monkeypatch.setattr(ChunkBuffer, "fill", lambda self, spec, sources: fills.append(spec.index)
                        or original(self, spec, sources))
    return fills


@pytest.mark.parametrize("budget_partitions", [None, 2])
def test_host_chunks_of_kept_partitions_are_gathered_in_place(tmp_path, monkeypatch, budget_partitions):
    """On the CPU the kept partitions share one store, and a chunk of kept partitions only is
    not copied into the chunk buffer, from the first epoch on (kept as it is read): its batches
    come from the store, the same as read."""
    path = write_dataset(tmp_path / "d", [100, 100, 100, 100])
    ds = tl.Dataset(path, part_size=100 * ROW_BYTES)
    budget = True if budget_partitions is None else budget_partitions * 100 * ROW_BYTES + ROW_BYTES
    args = dict(seed=3, buffer_size=150 * ROW_BYTES)  # chunks of one and two partitions, a partition in two chunks
    plain, loader = Loader(ds, 48, **args), Loader(ds, 48, resident=budget, **args)
    fills = counting_fills(monkeypatch)
    for epoch in range(3):
        fills.clear()
        got, want = batches(loader), batches(plain)
        assert_same_epochs(got, want)
        kept = loader.resident.snapshot()
        assert len(kept) == (4 if budget_partitions is None else budget_partitions)
        chunks = loader.plan.chunks(epoch)
        copied = [spec.index for spec in chunks if any(s.partition not in kept for s in spec.segments)]
        assert sorted(fills) == sorted(copied + [spec.index for spec in chunks])  # the resident loader's, the plain one's
        assert len(copied) < len(chunks)
    assert set(next(iter(loader.resident.store.values())).shape[:1]) == {400 if budget_partitions is None else 201}


def test_without_memory_for_the_store_partitions_keep_arrays_of_their_own(tmp_path, monkeypatch):
    from tabloader.loader.buffer import ChunkBuffer

    path = write_dataset(tmp_path / "d", [60, 70, 80], row_group_size=30)
    ds = tl.Dataset(path, part_size=30 * ROW_BYTES)
    original = ChunkBuffer.empty_rows
    monkeypatch.setattr(ChunkBuffer, "empty_rows", lambda self, rows: (_ for _ in ()).throw(MemoryError(rows))
                        if rows == 210 else original(self, rows))
    plain, loader = Loader(ds, 32, seed=5), Loader(ds, 32, seed=5, resident=True)
    for _ in range(3):
        assert_same_epochs(batches(loader), batches(plain))
    assert loader.resident.store is None and len(loader.resident) == ds.npartitions
    assert loader.resident.nbytes == 210 * ROW_BYTES


@pytest.mark.parametrize("stop_after", [1, 5])
def test_resume_mid_epoch(tmp_path, device, stop_after):
    path = write_dataset(tmp_path / "d", [90, 60, 110], row_group_size=30)
    args = dict(seed=4, buffer_size=100 * ROW_BYTES, device=device, resident=True)
    reference = Loader(tl.Dataset(path, part_size=30 * ROW_BYTES), 32, **{**args, "resident": False})
    batches(reference)
    full = batches(reference)  # epoch 1, read as usual
    loader = Loader(tl.Dataset(path, part_size=30 * ROW_BYTES), 32, **args)
    batches(loader)  # epoch 0 keeps every partition
    it = iter(loader)
    head = [host(next(it)[0]["id"]) for _ in range(stop_after)]
    state = loader.state_dict()
    loader.close()
    for resumed in (Loader(tl.Dataset(path, part_size=30 * ROW_BYTES), 32, **args), loader):  # cold, warm
        resumed.load_state_dict(state)
        tail = [b["id"] for b in batches(resumed)]
        assert len(head) + len(tail) == len(full)
        for got, want in zip(head + tail, full):
            np.testing.assert_array_equal(got, want["id"])


def test_list_columns(tmp_path, device):
    rng = np.random.default_rng(0)
    n = 200
    lists = [rng.integers(0, 50, rng.integers(0, 5)).tolist() for _ in range(n)]
    os.makedirs(tmp_path / "l")
    table = pa.table({"id": np.arange(n), "tags": pa.array(lists, pa.list_(pa.int64())), "y": np.zeros(n, np.float32)})
    for i, start in enumerate(range(0, n, 70)):
        pq.write_table(table.slice(start, 70), tmp_path / "l" / f"p{i}.parquet", row_group_size=35)
    schema = Schema([ColumnSchema("id", "int64", {Tags.CATEGORICAL}),
                     ColumnSchema("tags", "int64", {Tags.CATEGORICAL, Tags.LIST}, is_list=True),
                     ColumnSchema("y", "float32", {Tags.TARGET})])
    ds = tl.Dataset(str(tmp_path / "l"), schema=schema, part_size=1000)
    plain = Loader(ds, 16, seed=2, buffer_size=1200, device=device)
    resident = Loader(ds, 16, seed=2, buffer_size=1200, device=device, resident=True)
    for _ in range(2):
        got = batches(resident)
        assert_same_epochs(got, batches(plain))
    for batch in got:  # and the lists are the written ones
        values, offsets = batch["tags.values"], batch["tags.offsets"]
        assert [values[offsets[k]:offsets[k + 1]].tolist() for k in range(len(batch["id"]))] == \
            [lists[i] for i in batch["id"]]


@pytest.mark.parametrize("resident, match", [("lots", "resident='lots' is not a size"), ([1], "resident="),
                                             (0, "resident must be positive"), (-5, "resident must be positive")])
def test_bad_budget_names_the_argument(tmp_path, resident, match):
    path = write_dataset(tmp_path / "d", [10])
    with pytest.raises(ValueError, match=match):
        Loader(tl.Dataset(path), 4, resident=resident)
