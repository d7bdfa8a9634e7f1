"""tabloader.torch.Loader: tensors by DLPack, IterableDataset use, resume, DDP over 2 processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import weakref

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch")

import tabloader as tl  # noqa: E402
import tabloader.torch  # noqa: E402,F401
from _gloo import run_two_ranks  # noqa: E402
from test_loader import (ROW_BYTES, abandon_an_epoch, freed_with_its_threads, threads_since,  # noqa: E402
                         write_dataset)

pytestmark = pytest.mark.torch
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def data(tmp_path):
    return write_dataset(tmp_path / "d", [300, 123, 77], row_group_size=50)


def test_batches_are_tensors(data, device):
    loader = tl.torch.Loader(tl.Dataset(data), batch_size=64, seed=0, device=device)
    assert isinstance(loader, torch.utils.data.IterableDataset) and len(loader) == 8
    ids = []
    for features, target in loader:
        assert features["id"].dtype == torch.int64 and features["x"].dtype == torch.float32
        assert target.dtype == torch.float32 and target.device.type == features["id"].device.type == device
        torch.testing.assert_close(features["x"], features["id"].float() * 0.5)
        ids.append(features["id"].cpu())
    assert sorted(torch.cat(ids).tolist()) == list(range(500))


def test_columns_of_one_dtype_come_from_one_dlpack_import(tmp_path, device):
    """A batch's same-dtype columns are views of one imported (columns, rows) tensor (one DLPack
    import per dtype, not per column: each import costs tens of microseconds on a GPU), each
    a contiguous 1-D tensor, with the rows' values."""
    n = 200
    pq.write_table(pa.table({"a": np.arange(n), "b": np.arange(n) * 10, "c": np.arange(n) * 100,
                             "x": np.arange(n, dtype="float32"), "y": np.ones(n, "float32")}),
                   os.path.join(tmp_path, "part.parquet"))
    loader = tl.torch.Loader(tl.Dataset(str(tmp_path)), batch_size=64, seed=0, device=device,
                             categorical=["a", "b", "c"], continuous=["x"], target="y")
    for features, target in loader:
        storages = {features[c].untyped_storage().data_ptr() for c in "abc"}
        assert len(storages) == 1 and all(features[c].is_contiguous() for c in "abcx")
        torch.testing.assert_close(features["b"], features["a"] * 10)
        torch.testing.assert_close(features["c"], features["a"] * 100)
        torch.testing.assert_close(features["x"], features["a"].float())
        assert target.tolist() == [1.0] * len(target)


def test_conversion_is_zero_copy():
    array = np.arange(4)
    tensor = tl.torch.Loader._tensor(type("L", (), {"device": torch.device("cpu")})(), array)
    array[0] = 42
    assert tensor[0].item() == 42


def test_tensors_are_the_core_loaders_arrays(data, device):
    """The hand-off is zero-copy on every device: each tensor starts at its array's address."""
    loader = tl.torch.Loader(tl.Dataset(data), batch_size=64, seed=0, device=device)
    features, target = next(iter(loader.loader))  # the core loader's arrays (numpy / CuPy)
    for array in [*features.values(), target]:
        tensor = loader._tensor(array)
        address = array.data.ptr if device == "cuda" else array.ctypes.data
        assert tensor.device.type == device and tensor.data_ptr() == address
    loader.close()


def test_dataloader_wrapper_and_workers_refused(data):
    loader = tl.torch.Loader(tl.Dataset(data), batch_size=100, shuffle=False)
    batches = list(torch.utils.data.DataLoader(loader, batch_size=None))
    assert torch.cat([f["id"] for f, _ in batches]).tolist() == list(range(500))
    with pytest.raises(RuntimeError, match="num_workers=0"):
        list(torch.utils.data.DataLoader(loader, batch_size=None, num_workers=1))


def test_list_columns_as_tensor_pairs(tmp_path):
    os.makedirs(tmp_path / "l")
    lists = [[i] * (i % 3) for i in range(20)]
    pq.write_table(pa.table({"id": np.arange(20), "tags": pa.array(lists, pa.list_(pa.int64()))}), tmp_path / "l" / "a.parquet")
    schema = tl.Schema([tl.ColumnSchema("id", "int64", {"categorical"}),
                        tl.ColumnSchema("tags", "int64", {"categorical", "list"}, is_list=True)])
    features, target = next(iter(tl.torch.Loader(tl.Dataset(str(tmp_path / "l"), schema=schema), 20, seed=2)))
    values, offsets = features["tags"]
    assert target is None and offsets.dtype == torch.int64 and len(offsets) == 21
    for k, row in enumerate(features["id"].tolist()):
        assert values[offsets[k]:offsets[k + 1]].tolist() == lists[row]


def test_train_loop_and_resume(data):
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = tl.torch.Loader(tl.Dataset(data), batch_size=50, seed=4, buffer_size=200 * ROW_BYTES)
    seen = []
    for step, (features, target) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(features["x"][:, None]).squeeze(1), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        seen.append(features["id"])
        if step == 3:
            state = loader.state_dict()
            break
    loader.close()
    fresh = tl.torch.Loader(tl.Dataset(data), batch_size=50, seed=4, buffer_size=200 * ROW_BYTES)
    fresh.load_state_dict(state)
    seen += [f["id"] for f, _ in fresh]
    assert sorted(torch.cat(seen).tolist()) == list(range(500))


@pytest.mark.parametrize("how", ["break", "exception", "next(iter(loader))"])
def test_a_dropped_loader_whose_epoch_stopped_early_is_freed_and_its_threads_end(data, how):
    """As for the core loader (tests/test_loader.py): leaving an epoch early and dropping the
    torch loader frees the core loader and ends its threads, without ``close()``."""
    before = set(threading.enumerate())
    loader = tl.torch.Loader(tl.Dataset(data, part_size=100 * ROW_BYTES), batch_size=10, parts_per_chunk=1)
    abandon_an_epoch(loader, how, before)
    core = weakref.ref(loader.loader)
    del loader
    assert freed_with_its_threads(core, before), threads_since(before)


def test_a_second_iter_makes_the_first_raise(data):
    """The torch loader runs the core loader's epochs, one at a time: a superseded epoch's
    iterator raises rather than stopping short (tests/test_loader.py)."""
    loader = tl.torch.Loader(tl.Dataset(data), batch_size=64)
    with pytest.raises(RuntimeError, match=r"new iter\(loader\)"):
        list(zip(loader, loader))
    assert sum(len(target) for _, target in loader) == 500
    first = iter(loader)
    next(first)
    iter(loader)  # ends the running epoch at once, before its own first batch
    with pytest.raises(RuntimeError, match=r"new iter\(loader\)"):
        next(first)


def test_bad_arguments_and_random_seed(data):
    with pytest.raises(ValueError, match="global_size must be an integer >= 1, got 0"):
        tl.torch.Loader(tl.Dataset(data), batch_size=64, global_size=0)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        tl.torch.Loader(tl.Dataset(data), batch_size=0)
    loader = tl.torch.Loader(tl.Dataset(data), batch_size=64, seed=None)  # None: a random seed, recorded
    assert sorted(torch.cat([f["id"] for f, _ in loader]).tolist()) == list(range(500))
    assert loader.state_dict()["seed"] == loader.loader.seed
    with pytest.raises(ValueError, match=r"state\['rows'\]=501 is more than the 500 rows"):
        loader.load_state_dict({**loader.state_dict(), "rows": 501})


def test_import_does_not_pull_tensorflow():
    code = "import sys, tabloader.torch; assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(HERE),
                   env={**os.environ, "PYTHONPATH": os.path.dirname(HERE)})


def test_the_rank_or_size_not_given_comes_from_the_process_group(tmp_path, data):
    """Under torch.distributed, global_size alone made every rank rank 0 (all read the same
    rows), and global_rank alone a one-rank loader: the one not given is the group's."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        sized = tl.torch.Loader(tl.Dataset(data), batch_size=64, global_size=2)
        assert (sized.loader.global_rank, sized.loader.global_size) == (0, 2)
        ranked = tl.torch.Loader(tl.Dataset(data), batch_size=64, global_rank=0)
        assert (ranked.loader.global_rank, ranked.loader.global_size) == (0, 1)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_two_processes_gloo(tmp_path):
    rows = 1000 + 37  # uneven over 2 ranks and many partitions
    df = pd.DataFrame({"id": np.arange(rows), "x": np.linspace(0, 1, rows, dtype=np.float32),
                       "cat_f": (np.arange(rows) % 5).astype(np.float32), "y": np.ones(rows, np.float32)})
    os.makedirs(tmp_path / "d")
    for i, part in enumerate(np.array_split(np.arange(rows), 3)):
        pq.write_table(pa.Table.from_pandas(df.iloc[part], preserve_index=False), tmp_path / "d" / f"p{i}.parquet",
                       row_group_size=100)
    out = tmp_path / "out"
    os.makedirs(out)
    run_two_ranks("ddp_loader_train.py", str(tmp_path / "d"), str(out))
    results = [json.load(open(out / f"rank{r}.json")) for r in range(2)]
    assert results[0]["steps"] == results[1]["steps"] == results[0]["len"] == -(-519 // 64)
    ids0, ids1 = set(results[0]["ids"]), set(results[1]["ids"])
    assert ids0 | ids1 == set(range(rows))
    assert len(results[0]["ids"]) + len(results[1]["ids"]) == 2 * 519  # one padded row repeats
    assert len(ids0 & ids1) <= 1
