"""List columns as dense padded arrays (the loader's ``lists=``): every batch row is compared with
a row padded and truncated by hand in plain Python, for both sides, both truncation ends, empty
lists, lists longer than ``pad_to``, several columns, ranks, resume, and the torch and Keras
adapters. The data is parquet written by pyarrow (no pandas metadata), in several files."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tabloader as tl
from tabloader.loader import Loader, LoaderReadError
from tabloader.schema import ColumnSchema, Schema, Tags

N = 120


def by_hand(lst: list, pad_to: int, side: str = "right", truncate: str = "right", value=0) -> list:
    """One row padded and truncated the plain Python way."""
    if len(lst) > pad_to:
        lst = lst[:pad_to] if truncate == "right" else lst[len(lst) - pad_to:]
    padding = [value] * (pad_to - len(lst))
    return lst + padding if side == "right" else padding + lst


def host(array) -> np.ndarray:
    return array.get() if type(array).__module__.startswith("cupy") else np.asarray(array)


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    """Session data: ``items`` int64 lists of 0..9 values (empty ones included), ``scores``
    float32 lists, an ``id`` and a target, in three parquet files written by pyarrow."""
    rng = np.random.default_rng(5)
    items = [rng.integers(1, 1000, rng.integers(0, 10)).tolist() for _ in range(N)]
    items[3], items[4] = [], list(range(1, 10))
    scores = [rng.random(rng.integers(0, 4)).astype(np.float32).tolist() for _ in range(N)]
    table = pa.table({"id": np.arange(N), "items": pa.array(items, pa.list_(pa.int64())),
                      "scores": pa.array(scores, pa.list_(pa.float32())), "y": np.zeros(N, np.float32)})
    path = tmp_path_factory.mktemp("sessions")
    for i, (start, stop) in enumerate([(0, 50), (50, 51), (51, N)]):
        pq.write_table(table.slice(start, stop - start), os.path.join(path, f"part_{i}.parquet"), row_group_size=20)
    schema = Schema([ColumnSchema("id", "int64", {Tags.CATEGORICAL}),
                     ColumnSchema("items", "int64", {Tags.CATEGORICAL, Tags.LIST}, is_list=True,
                                  properties={"value_count": {"min": 0, "max": 9}}),
                     ColumnSchema("scores", "float32", {Tags.CONTINUOUS, Tags.LIST}, is_list=True),
                     ColumnSchema("y", "float32", {Tags.TARGET})])
    return tl.Dataset(str(path), schema=schema, part_size=2000), items, scores


def on_device(ds: tl.Dataset, device: str) -> tl.Dataset:
    """The same files and schema as ``ds``, read on ``device`` (cuDF frames on "cuda")."""
    return tl.Dataset(ds.paths, schema=ds.schema, part_size=2000, device=device)


def rows_of(batches, column: str) -> dict[int, list]:
    """``{id: row}`` of a padded column over the batches, checking each batch's shape."""
    out = {}
    for features, _ in batches:
        ids, dense = host(features["id"]), host(features[column])
        assert dense.ndim == 2 and dense.shape[0] == len(ids) and dense.flags.c_contiguous
        out.update({int(i): row.tolist() for i, row in zip(ids, dense)})
    return out


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("truncate", ["left", "right"])
def test_padded_rows_match_padding_by_hand(sessions, device, side, truncate):
    ds, items, scores = sessions
    lists = {"items": dict(pad_to=4, side=side, truncate=truncate, value=-7), "scores": 2}
    loader = Loader(ds, 16, seed=3, buffer_size=2000, device=device, lists=lists)
    batches = list(loader)
    got = rows_of(batches, "items")
    assert got == {i: by_hand(items[i], 4, side, truncate, -7) for i in range(N)}
    assert rows_of(batches, "scores") == {i: by_hand(scores[i], 2) for i in range(N)}
    assert got[3] == [-7] * 4  # an empty list: padding only
    assert got[4] == ([1, 2, 3, 4] if truncate == "right" else [6, 7, 8, 9])  # longer than pad_to
    assert host(batches[0][0]["items"]).dtype == np.int64 and host(batches[0][0]["scores"]).dtype == np.float32


def test_columns_not_named_keep_values_and_offsets(sessions):
    ds, items, scores = sessions
    loader = Loader(ds, 32, shuffle=False, lists={"items": "schema", "scores": None})
    features, _ = next(iter(loader))
    assert features["items"].shape == (32, 9)  # value_count max from the schema
    assert features["items"].tolist() == [by_hand(items[i], 9) for i in range(32)]
    values, offsets = features["scores"]
    assert [values[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == scores[:32]


def test_pad_to_schema_from_a_fitted_value_count(sessions):
    from tabloader.ops.lists import ValueCount

    ds, items, _ = sessions
    wf = tl.Workflow(["id", "y"] + (["items"] >> ValueCount()), progress=False).fit(ds)
    longest = max(len(row) for row in items)
    loader = Loader(wf.transform(ds), 50, shuffle=False, categorical=["id", "items"], target="y",
                    lists={"items": dict(pad_to="schema", side="left")})
    assert rows_of(loader, "items") == {i: by_hand(items[i], longest, "left") for i in range(N)}


def test_ranks_split_the_padded_rows_and_resume_continues(sessions):
    ds, items, _ = sessions
    lists = {"items": dict(pad_to=3, side="left", truncate="left")}
    expected = {i: by_hand(items[i], 3, "left", "left") for i in range(N)}
    ranks = [rows_of(Loader(ds, 10, seed=2, global_rank=r, global_size=2, lists=lists), "items") for r in (0, 1)]
    assert not set(ranks[0]) & set(ranks[1]) and {**ranks[0], **ranks[1]} == expected

    whole = list(Loader(ds, 10, seed=2, lists=lists))
    first = Loader(ds, 10, seed=2, lists=lists)
    it = iter(first)
    head = [next(it) for _ in range(3)]
    resumed = Loader(ds, 10, seed=2, lists=lists)
    resumed.load_state_dict(first.state_dict())
    for (a, _), (b, _) in zip(head + list(resumed), whole, strict=True):
        assert np.array_equal(a["items"], b["items"]) and np.array_equal(a["id"], b["id"])

    resident, plain = Loader(ds, 10, seed=2, lists=lists, resident=True), Loader(ds, 10, seed=2, lists=lists)
    for _ in range(2):  # the second epoch from the kept partitions
        for (a, _), (b, _) in zip(resident, plain, strict=True):
            assert np.array_equal(a["items"], b["items"])


def test_null_lists_are_refused_as_without_padding(tmp_path):
    pq.write_table(pa.table({"l": pa.array([[1], None, [2, 3]], pa.list_(pa.int64())), "y": np.zeros(3, np.float32)}),
                   tmp_path / "nulls.parquet")
    ds = tl.Dataset(str(tmp_path / "nulls.parquet"))
    with pytest.raises(LoaderReadError, match="'l'"):
        list(Loader(ds, 2, categorical=["l"], target="y", lists={"l": 2}))


def test_list_columns_of_a_dataset_on_either_device_are_the_rows_by_hand(sessions, device):
    """On "cuda" the partitions are cuDF frames and their list columns go to the chunk buffer
    from the device (several partitions per chunk, batches spanning chunks): every row of a
    plain and of a padded list column is the one written, whole or padded by hand."""
    ds, items, scores = sessions
    loader = Loader(on_device(ds, device), 16, device=device, seed=4, parts_per_chunk=2, lists={"items": 5})
    seen = {}
    for features, _ in loader:
        ids, dense = host(features["id"]), host(features["items"])
        values, offsets = (host(a) for a in features["scores"])
        for k, i in enumerate(ids.tolist()):
            seen[i] = (dense[k].tolist(), values[offsets[k]:offsets[k + 1]].tolist())
    assert seen == {i: (by_hand(items[i], 5), scores[i]) for i in range(N)}


def test_null_elements_are_refused_naming_the_column_and_file_on_either_device(tmp_path, device):
    path = tmp_path / "elements.parquet"
    pq.write_table(pa.table({"l": pa.array([[1], [None, 2], [3]], pa.list_(pa.int64())),
                             "y": np.zeros(3, np.float32)}), path)
    ds = tl.Dataset(str(path), device=device)  # on "cuda", the loader takes cuDF frames
    with pytest.raises(LoaderReadError, match=r"'l' has 1 null value.*elements\.parquet"):
        list(Loader(ds, 2, categorical=["l"], target="y", device=device))


@pytest.mark.parametrize("lists, message", [
    ({"nope": 3}, r"lists\['nope'\]: column 'nope' is not in the dataset"),
    ({"id": 3}, r"lists\['id'\]: column 'id' is not a list column"),
    ({"items": 0}, r"lists\['items'\]: pad_to must be an integer >= 1"),
    ({"items": dict(pad_to=3, side="middle")}, r"lists\['items'\]: side must be 'left' or 'right', got 'middle'"),
    ({"items": dict(pad_to=3, truncate=1)}, r"truncate must be 'left' or 'right'"),
    ({"items": dict(pad_to=3, pad=1)}, r"lists\['items'\]: .*'pad'"),
    ({"items": dict(pad_to=3, value=0.5)}, r"padding value=0.5 does not fit column 'items' of int64"),
    ({"items": dict(pad_to=3, value=2**63)}, r"does not fit column 'items'"),
    ({"scores": "schema"}, r"lists\['scores'\]: pad_to='schema' needs the schema's value_count max of column "
                           r"'scores'.*ValueCount"),
    (["items"], r"lists must map list column names"),
])
def test_bad_options_are_refused_naming_column_and_option(sessions, lists, message):
    ds, _, _ = sessions
    with pytest.raises(ValueError, match=message):
        Loader(ds, 8, lists=lists)


def test_float_lists_take_a_nan_padding_value(sessions):
    ds, _, scores = sessions
    features, _ = next(iter(Loader(ds, N, shuffle=False, lists={"scores": dict(pad_to=3, value=float("nan"))})))
    expected = np.array([by_hand(s, 3, value=np.nan) for s in scores], dtype=np.float32)
    np.testing.assert_array_equal(features["scores"], expected)  # NaNs compare equal here


def test_torch_adapter_yields_padded_tensors(sessions):
    torch = pytest.importorskip("torch")
    import tabloader.torch as tlt

    ds, items, _ = sessions
    loader = tlt.Loader(ds, 25, shuffle=False, lists={"items": dict(pad_to=5, side="left")})
    features, target = next(iter(loader))
    assert isinstance(features["items"], torch.Tensor) and features["items"].dtype == torch.int64
    assert features["items"].tolist() == [by_hand(items[i], 5, "left") for i in range(25)]


def test_keras_adapter_and_tf_data_yield_padded_tensors(sessions):
    tf_loader = pytest.importorskip("tabloader.tf.loader")
    import tensorflow as tf

    ds, items, _ = sessions
    lists = {"items": dict(pad_to=5, truncate="left")}
    seq = tf_loader.KerasSequenceLoader(ds, 25, shuffle=False, lists=lists)
    features, _ = seq[0]
    assert isinstance(features["items"], tf.Tensor) and features["items"].shape == (25, 5)
    assert features["items"].numpy().tolist() == [by_hand(items[i], 5, truncate="left") for i in range(25)]
    assert seq.output_signature[0]["items"] == tf.TensorSpec([None, 5], tf.int64)
    data = tf_loader.to_tf_dataset(ds, 40, shuffle=False, lists=lists)
    rows = np.concatenate([f["items"].numpy() for f, _ in data]).tolist()
    assert rows == [by_hand(row, 5, truncate="left") for row in items]


@pytest.mark.parametrize("writer", ["pyarrow", "polars"])
def test_vectors_of_a_fixed_size_are_dense_rows(tmp_path, writer, device):
    """Embedding vectors stored as fixed-size lists (pyarrow's ``fixed_size_list``, polars'
    ``Array``) are list columns whose width is the schema's value_count: ``lists={"emb":
    "schema"}`` hands them on as a (rows, width) array."""
    n, width = 30, 8
    vectors = np.arange(n * width, dtype=np.float32).reshape(n, width)
    if writer == "pyarrow":
        emb = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), width)
        pq.write_table(pa.table({"id": np.arange(n), "emb": emb}), tmp_path / "v.parquet")
    else:
        pl = pytest.importorskip("polars")  # not on the GPU machines' image
        pl.DataFrame({"id": np.arange(n), "emb": vectors}, schema={"id": pl.Int64, "emb": pl.Array(pl.Float32, width)}
                     ).write_parquet(tmp_path / "v.parquet")
    assert pa.types.is_fixed_size_list(pq.read_schema(tmp_path / "v.parquet").field("emb").type)
    ds = tl.Dataset(str(tmp_path / "v.parquet"), device=device)
    assert ds.schema["emb"].properties["value_count"] == {"min": width, "max": width}
    rows = {}
    for features, _ in Loader(ds, 7, continuous=["id", "emb"], lists={"emb": "schema"}, device=device, seed=1):
        for i, row in zip(host(features["id"]).tolist(), host(features["emb"])):
            rows[i] = row
    assert sorted(rows) == list(range(n)) and all(np.array_equal(rows[i], vectors[i]) for i in range(n))
