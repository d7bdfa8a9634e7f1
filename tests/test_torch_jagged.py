"""Keyed jagged batches (TorchRec's KeyedJaggedTensor layout) from ``tabloader.torch.Loader(output=
"jagged")``, and the table-batched embedding collections taking them directly.

The layout of every batch is compared with one built row by row in plain Python from the parquet
data; the collections' lookups and in-backward updates with a plain PyTorch computation (a Python
loop over the bags). With torchrec importable, the batch is a real ``KeyedJaggedTensor`` and goes
through a ``torchrec.EmbeddingBagCollection``."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import tabloader as tl
import tabloader.torch as tlt
from tabloader.schema import ColumnSchema, Schema, Tags
from tabloader.torch.jagged import KeyedJaggedBatch, jagged_parts, keyed_jagged, torchrec_available
from tabloader.torch.layers import EmbeddingConfig

N = 90
KEYS = ["user", "genres", "item"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Single-hot ``user`` / ``item``, a list column ``genres`` (empty lists too), its weights
    ``genre_weights``, a continuous ``x`` and a target, in two parquet files written by pyarrow."""
    rng = np.random.default_rng(11)
    genres = [rng.integers(0, 12, rng.integers(0, 4)).tolist() for _ in range(N)]
    columns = {"user": rng.integers(0, 10, N), "genres": genres, "item": rng.integers(0, 30, N),
               "genre_weights": [rng.random(len(g)).astype(np.float32).tolist() for g in genres],
               "x": rng.random(N).astype(np.float32), "y": np.arange(N, dtype=np.float32)}
    table = pa.table({"user": columns["user"], "genres": pa.array(genres, pa.list_(pa.int64())),
                      "item": columns["item"], "genre_weights": pa.array(columns["genre_weights"], pa.list_(pa.float32())),
                      "x": columns["x"], "y": columns["y"]})
    path = tmp_path_factory.mktemp("jagged")
    pq.write_table(table.slice(0, 40), os.path.join(path, "a.parquet"), row_group_size=15)
    pq.write_table(table.slice(40), os.path.join(path, "b.parquet"), row_group_size=15)
    schema = Schema([ColumnSchema("user", "int64", {Tags.CATEGORICAL}),
                     ColumnSchema("genres", "int64", {Tags.CATEGORICAL, Tags.LIST}, is_list=True),
                     ColumnSchema("item", "int64", {Tags.CATEGORICAL}),
                     ColumnSchema("genre_weights", "float32", {Tags.CONTINUOUS, Tags.LIST}, is_list=True),
                     ColumnSchema("x", "float32", {Tags.CONTINUOUS}), ColumnSchema("y", "float32", {Tags.TARGET})])
    return tl.Dataset(str(path), schema=schema, part_size=2000), columns


def lists_of(columns, key, rows) -> list[list]:
    """Each row's list of ``key``: a one-element list for a single-hot column."""
    col = columns[key]
    return [list(col[r]) if isinstance(col[r], list) else [int(col[r])] for r in rows]


def expected_layout(columns, rows, keys=KEYS):
    """KeyedJaggedTensor layout built by hand: values key after key, lengths key-major."""
    values, lengths = [], []
    for key in keys:
        for lst in lists_of(columns, key, rows):
            values += lst
            lengths.append(len(lst))
    return values, lengths, np.concatenate([[0], np.cumsum(lengths)]).tolist()


def test_loader_yields_the_keyed_jagged_layout(data):
    ds, columns = data
    loader = tlt.Loader(ds, 16, seed=4, output="jagged")
    seen = []
    for sparse, dense, target in loader:
        rows = target.to(torch.int64).tolist()  # y is the row number
        keys, values, offsets, weights, stride = jagged_parts(sparse)
        lengths = (sparse.lengths if isinstance(sparse, KeyedJaggedBatch) else sparse.lengths()).tolist()
        assert keys == KEYS and stride == len(rows) and weights is None
        assert (values.tolist(), lengths, offsets.tolist()) == expected_layout(columns, rows)
        assert set(dense) == {"x", "genre_weights"}
        np.testing.assert_array_equal(dense["x"].numpy(), columns["x"][rows])
        seen += rows
    assert sorted(seen) == list(range(N))


def test_own_batch_by_key_and_to_device(data):
    ds, columns = data
    features, target = next(iter(tlt.Loader(ds, 20, shuffle=False)))
    batch = keyed_jagged(features, KEYS, as_torchrec=False)
    rows = list(range(20))
    for key in KEYS:
        values, offsets = batch[key]
        assert [values[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == lists_of(columns, key, rows)
    moved = batch.to("cpu")
    assert moved.keys == KEYS and torch.equal(moved.offsets, batch.offsets)
    with pytest.raises(KeyError, match="no key 'nope' in the batch; keys: \\['user', 'genres', 'item'\\]"):
        batch["nope"]


def test_sparse_weights_follow_the_values(data):
    ds, columns = data
    loader = tlt.Loader(ds, 25, shuffle=False, output="jagged", sparse_weights={"genres": "genre_weights"})
    sparse, dense, _ = next(iter(loader))
    weights = jagged_parts(sparse)[3]
    rows = range(25)
    expected = [1.0] * 25 + [w for r in rows for w in columns["genre_weights"][r]] + [1.0] * 25
    np.testing.assert_allclose(weights.numpy(), expected)
    assert "genre_weights" not in dense


def reference_pooled(weights: dict, configs, batch_lists: dict, B: int) -> torch.Tensor:
    """(B, F * D): each bag's rows summed (or averaged) by a Python loop, the padding id left out."""
    out = []
    for b in range(B):
        row = []
        for cfg in configs:
            ids = [i for i in batch_lists[cfg.name][b] if i != cfg.padding_idx]
            vecs = [weights[cfg.name][i] for i in ids]
            total = torch.stack(vecs).sum(0) if vecs else torch.zeros(cfg.embedding_dim)
            row.append(total / max(len(ids), 1) if cfg.pooling == "mean" else total)
        out.append(torch.cat(row))
    return torch.stack(out)


CONFIGS = [EmbeddingConfig("user", 10, 4), EmbeddingConfig("genres", 12, 4, pooling="mean"),
           EmbeddingConfig("item", 30, 4)]


@pytest.mark.parametrize("order", [KEYS, ["item", "user", "genres", "x_unused"]])
def test_fused_collection_takes_the_batch_directly(data, order):
    ds, columns = data
    features, _ = next(iter(tlt.Loader(ds, 32, shuffle=False)))
    features["x_unused"] = torch.zeros(32, dtype=torch.int64)
    batch = keyed_jagged(features, order, as_torchrec=False)
    torch.manual_seed(0)
    coll = tlt.FusedEmbeddingCollection(CONFIGS, optimizer="sgd", lr=0.5, backend="reference")
    before = {c.name: coll.table_weight(c.name).clone() for c in CONFIGS}
    lists = {k: lists_of(columns, k, range(32)) for k in KEYS}
    out = coll(batch)
    torch.testing.assert_close(out, reference_pooled(before, CONFIGS, lists, 32))

    # the update in backward equals SGD on plain tensors through the same Python-loop forward
    grad = torch.randn_like(out)
    plain = {name: w.clone().requires_grad_(True) for name, w in before.items()}
    (reference_pooled(plain, CONFIGS, lists, 32) * grad).sum().backward()
    (out * grad).sum().backward()
    for cfg in CONFIGS:
        expected = before[cfg.name] - 0.5 * plain[cfg.name].grad
        expected[cfg.padding_idx] = before[cfg.name][cfg.padding_idx]  # padding rows never move
        torch.testing.assert_close(coll.table_weight(cfg.name), expected)


def test_offloaded_collection_takes_the_batch_too(data):
    ds, columns = data
    features, _ = next(iter(tlt.Loader(ds, 32, shuffle=False)))
    coll = tlt.OffloadedEmbeddingCollection(CONFIGS, hot_rows=[3, 4, 5], optimizer="sgd", lr=0.5, device="cpu")
    lists = {k: lists_of(columns, k, range(32)) for k in KEYS}
    weights = {c.name: coll.table_weight(c.name).clone() for c in CONFIGS}
    out = coll(keyed_jagged(features, KEYS, as_torchrec=False))
    torch.testing.assert_close(out, reference_pooled(weights, CONFIGS, lists, 32))


@pytest.mark.parametrize("validate", [True, False])
@pytest.mark.parametrize("lengths", [[1, 1, 1, 1], [2, 0, 1, 1], [0, 2, 3, 0]])
def test_single_hot_and_ragged_batches_of_the_same_size(lengths, validate):
    """All lists of length 1 take the single-hot plan; as many values but ragged lists must not."""
    configs = [EmbeddingConfig("a", 10, 3), EmbeddingConfig("b", 10, 3, pooling="mean")]
    values = torch.tensor([3, 4, 5, 6, 7][:sum(lengths)])
    offsets = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]))
    batch = KeyedJaggedBatch(["a", "b"], values, torch.tensor(lengths), offsets, stride=2)
    coll = tlt.FusedEmbeddingCollection(configs, backend="reference", validate_indices=validate)
    bags = [values[offsets[k]:offsets[k + 1]].tolist() for k in range(4)]
    lists = {"a": bags[:2], "b": bags[2:]}
    weights = {c.name: coll.table_weight(c.name) for c in configs}
    torch.testing.assert_close(coll(batch), reference_pooled(weights, configs, lists, 2))


def test_bad_batches_are_refused_naming_table_or_offsets(data):
    coll = tlt.FusedEmbeddingCollection(CONFIGS[:1], backend="reference")
    bad_id = KeyedJaggedBatch(["user"], torch.tensor([3, 10]), torch.tensor([1, 1]), torch.tensor([0, 1, 2]), stride=2)
    with pytest.raises(IndexError, match="table 'user'.*index 10 is out of range \\[0, 10\\)"):
        coll(bad_id)
    bad_offsets = KeyedJaggedBatch(["user"], torch.tensor([3, 4]), torch.tensor([1, 0]), torch.tensor([0, 1, 1]), stride=2)
    with pytest.raises(ValueError, match="offsets must start at 0.*end at len\\(values\\)=2"):
        coll(bad_offsets)
    short = KeyedJaggedBatch(["user"], torch.tensor([3]), torch.tensor([1]), torch.tensor([0, 1]), stride=2)
    with pytest.raises(ValueError, match="2 offsets for 1 keys x stride 2; expected 3"):
        coll(short)


@pytest.mark.parametrize("kwargs, message", [
    (dict(output="ragged"), "output must be 'dict' or 'jagged', got 'ragged'"),
    (dict(output="jagged", categorical=[]), "output='jagged' needs categorical features"),
    (dict(output="jagged", categorical=["user", "x"]), "categorical feature 'x' has dtype float32"),
    (dict(output="jagged", lists={"genres": 3}), "categorical feature 'genres' is padded by lists="),
    (dict(output="jagged", sparse_weights={"x": "genre_weights"}), r"sparse_weights\['x'\]: 'x' is not a categorical"),
    (dict(output="jagged", sparse_weights={"genres": "x"}), r"sparse_weights\['genres'\]: 'x' must be a list feature"),
    (dict(sparse_weights={"genres": "genre_weights"}), "sparse_weights= needs output='jagged'"),
])
def test_bad_loader_options_are_refused(data, kwargs, message):
    ds, _ = data
    with pytest.raises(ValueError, match=message):
        tlt.Loader(ds, 8, **kwargs)


def test_real_keyed_jagged_tensor_through_an_embedding_bag_collection(data):
    if not torchrec_available():
        pytest.skip("torchrec is not importable here (see docs/user-guide.md, TorchRec)")
    import torchrec

    ds, columns = data
    sparse, _, target = next(iter(tlt.Loader(ds, 24, seed=2, output="jagged")))
    assert isinstance(sparse, torchrec.KeyedJaggedTensor)
    rows = target.to(torch.int64).tolist()
    tables = [torchrec.EmbeddingBagConfig(name=f"t_{k}", embedding_dim=4, num_embeddings=n, feature_names=[k])
              for k, n in [("user", 10), ("genres", 12), ("item", 30)]]
    ebc = torchrec.EmbeddingBagCollection(tables=tables, device=torch.device("cpu"))
    pooled = ebc(sparse)
    for key in KEYS:
        weight = ebc.embedding_bags[f"t_{key}"].weight.detach()
        expected = torch.stack([weight[lst].sum(0) if lst else torch.zeros(4) for lst in lists_of(columns, key, rows)])
        torch.testing.assert_close(pooled[key], expected)
    coll = tlt.FusedEmbeddingCollection([EmbeddingConfig(k, n, 4) for k, n in [("user", 10), ("genres", 12),
                                                                                ("item", 30)]], backend="reference")
    lists = {k: lists_of(columns, k, rows) for k in KEYS}
    weights = {c.name: coll.table_weight(c.name) for c in coll.configs}
    torch.testing.assert_close(coll(sparse), reference_pooled(weights, coll.configs, lists, 24))


def test_torchrec_is_not_imported_after_tensorflow_without_triton(tmp_path):
    """torchrec imports Triton, which crashes a process that loaded TensorFlow first: the loader
    warns and keeps its own batch type instead (checked in a fresh process)."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("tensorflow") is None:  # asked without importing it here
        pytest.skip("needs TensorFlow")
    script = tmp_path / "tf_first.py"
    script.write_text(
        "import sys, warnings\n"
        "import tensorflow\n"
        "from tabloader.torch.jagged import torchrec_available\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    assert not torchrec_available() and not torchrec_available()\n"
        "assert 'triton' not in sys.modules and 'torchrec' not in sys.modules\n"
        "assert len(caught) == 1 and 'import torchrec before tensorflow' in str(caught[0].message)\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0",
           "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_sparse_weights_of_other_lengths_are_refused(tmp_path):
    """A weight list longer than its key's list in one row: the loader names both columns (it
    checks once per chunk, not per batch: on a GPU a per-batch check would wait for the device)."""
    genres = [[1, 2], [3], [], [4, 5]]
    weights = [[0.5, 0.5], [1.0], [], [1.0, 1.0, 1.0]]  # row 3: one weight too many
    pq.write_table(pa.table({"genres": pa.array(genres, pa.list_(pa.int64())),
                             "w": pa.array(weights, pa.list_(pa.float32())), "y": np.zeros(4, np.float32)}),
                   os.path.join(tmp_path, "part.parquet"))
    schema = Schema([ColumnSchema("genres", "int64", {Tags.CATEGORICAL, Tags.LIST}, is_list=True),
                     ColumnSchema("w", "float32", {Tags.CONTINUOUS, Tags.LIST}, is_list=True),
                     ColumnSchema("y", "float32", {Tags.TARGET})])
    loader = tlt.Loader(tl.Dataset(str(tmp_path), schema=schema), 2, output="jagged", sparse_weights={"genres": "w"})
    with pytest.raises(ValueError, match="'genres' and 'w' must have lists of the same length"):
        list(loader)


def _weighted_batch(keys, stride=2):
    """Keys ``keys`` (each a list feature of 2 rows) with per-value weights: ``a`` rows [1, 2], [3];
    ``b`` rows [4], []; ``extra`` rows [0], [0] -- and weights that sum to less than 1 in a bag."""
    lists = {"a": [[1, 2], [3]], "b": [[4], []], "extra": [[0], [0]]}
    weights = {"a": [[0.2, 0.3], [0.5]], "b": [[2.0], []], "extra": [[1.0], [1.0]]}
    values = [v for k in keys for row in lists[k] for v in row]
    w = [x for k in keys for row in weights[k] for x in row]
    lengths = [len(row) for k in keys for row in lists[k]]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return KeyedJaggedBatch(list(keys), torch.tensor(values), torch.tensor(lengths), torch.tensor(offsets),
                            torch.tensor(w), stride=stride)


@pytest.mark.parametrize("keys", [["a", "b"], ["b", "extra", "a"]])
def test_weights_count_whatever_other_keys_the_batch_holds(keys):
    """A batch holding other collections' keys too (or in another order) is taken key by key,
    its weights with it; mean pooling divides by the bag's weight even below 1 (0.2 + 0.3)."""
    from tabloader.torch.jagged import select_keys

    configs = [EmbeddingConfig("a", 6, 4, pooling="mean"), EmbeddingConfig("b", 6, 4)]
    torch.manual_seed(0)
    coll = tlt.FusedEmbeddingCollection(configs, optimizer="sgd", backend="reference")
    wa, wb = coll.table_weight("a"), coll.table_weight("b")
    expected = torch.stack([torch.cat([(0.2 * wa[1] + 0.3 * wa[2]) / 0.5, 2.0 * wb[4]]),
                            torch.cat([0.5 * wa[3] / 0.5, torch.zeros(4)])])
    torch.testing.assert_close(coll(_weighted_batch(keys)), expected)
    chosen = select_keys(_weighted_batch(keys), ["a", "b"])
    assert chosen.keys == ["a", "b"] and chosen.values.tolist() == [1, 2, 3, 4]
    assert chosen.offsets.tolist() == [0, 2, 3, 4, 4]
    torch.testing.assert_close(chosen.weights, torch.tensor([0.2, 0.3, 0.5, 2.0]))


@pytest.mark.parametrize("validate", [True, False])
def test_an_empty_keyed_batch_in_the_collection_s_own_order_gives_no_rows(validate):
    """Stride 0, keys in the features' order: the single-hot check (a min/max per feature) has
    nothing to look at; the batch gives a (0, F*D) output and an update of nothing."""
    from tabloader.torch.jagged import keyed_jagged
    from tabloader.torch.layers import EmbeddingConfig

    coll = tlt.FusedEmbeddingCollection([EmbeddingConfig("a", 10, 4), EmbeddingConfig("b", 7, 4)], optimizer="sgd",
                                        validate_indices=validate)
    before = coll.weight.detach().clone()
    empty = {"a": torch.tensor([], dtype=torch.int64), "b": torch.tensor([], dtype=torch.int64)}
    out = coll(keyed_jagged(empty, ["a", "b"], as_torchrec=False))
    assert out.shape == (0, 8)
    out.sum().backward()
    assert torch.equal(coll.weight, before)


WEIGHTED_CONFIGS = [EmbeddingConfig("a", 6, 4, pooling="mean"), EmbeddingConfig("b", 7, 4)]
# 3 rows: a padding id (0) inside a bag, a bag of padding only, an empty bag, weights of any sign and 0
WEIGHTED_LISTS = {"a": [[1, 2, 0], [3], [0]], "b": [[4, 4, 6], [], [5]]}
WEIGHTED_VALUES = {"a": [[0.2, 0.3, 0.7], [0.5], [0.4]], "b": [[2.0, -1.0, 0.5], [], [0.0]]}


def _weights_batch():
    """The keyed jagged batch of WEIGHTED_LISTS, with its weights as a leaf that requires grad."""
    keys = list(WEIGHTED_LISTS)
    values = [v for k in keys for row in WEIGHTED_LISTS[k] for v in row]
    lengths = [len(row) for k in keys for row in WEIGHTED_LISTS[k]]
    weights = torch.tensor([w for k in keys for row in WEIGHTED_VALUES[k] for w in row], requires_grad=True)
    offsets = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]))
    return KeyedJaggedBatch(keys, torch.tensor(values), torch.tensor(lengths), offsets, weights, stride=3)


def weighted_pooled_by_hand(tables, batch):
    """(B, F * D): per bag, the sum of its non-padding values' rows times their weights (mean: divided
    by the sum of those weights, by 1 where it is 0), written out value by value: differentiable in
    the batch's weights."""
    out = []
    for b in range(batch.stride):
        row = []
        for k, cfg in enumerate(WEIGHTED_CONFIGS):
            lo, hi = int(batch.offsets[k * batch.stride + b]), int(batch.offsets[k * batch.stride + b + 1])
            total, weight = torch.zeros(cfg.embedding_dim), torch.zeros(())
            for j in range(lo, hi):
                if int(batch.values[j]) != cfg.padding_idx:
                    total = total + batch.weights[j] * tables[cfg.name][int(batch.values[j])]
                    weight = weight + batch.weights[j]
            row.append(total / weight if cfg.pooling == "mean" and weight != 0 else total)
        out.append(torch.cat(row))
    return torch.stack(out)


def _weights_collection(kind, trains):
    torch.manual_seed(0)
    kw = dict(optimizer="sgd", lr=0.5, backend="reference")
    if kind == "fused":
        coll = tlt.FusedEmbeddingCollection(WEIGHTED_CONFIGS, **kw)
    else:
        coll = tlt.OffloadedEmbeddingCollection(WEIGHTED_CONFIGS, hot_rows=[2, 5], device="cpu", cold_access=kind,
                                                **kw)
    coll.requires_grad_(trains)
    return coll


@pytest.mark.parametrize("trains", [True, False])
@pytest.mark.parametrize("kind", ["fused", "staged", "direct"])
def test_per_value_weights_that_require_grad_get_their_gradient(kind, trains):
    """Weights of a keyed jagged batch that require grad (made by a learned module) get the
    gradient of the pooled output: ``<grad of the bag, the value's row>`` for sum pooling (as
    ``F.embedding_bag(per_sample_weights=...)`` gives it), through the division by the bag's weight
    for mean pooling, 0 for padding values -- from the rows as the forward read them, though the
    update in the backward moves them (``trains``; a frozen collection only looks up)."""
    coll = _weights_collection(kind, trains)
    before = {c.name: coll.table_weight(c.name).clone() for c in WEIGHTED_CONFIGS}
    batch, oracle = _weights_batch(), _weights_batch()
    out = coll(batch)
    expected = weighted_pooled_by_hand(before, oracle)
    torch.testing.assert_close(out, expected)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    (out * grad).sum().backward()
    (expected * grad).sum().backward()
    torch.testing.assert_close(batch.weights.grad, oracle.weights.grad)
    assert batch.weights.grad[2].item() == 0 and batch.weights.grad[4].item() == 0  # padding values
    assert (coll.table_weight("b") != before["b"]).any() == trains

    # the sum-pooled key against torch's own embedding_bag gradient
    b_values, b_offsets = batch["b"]
    b_weights = _weights_batch().weights[5:].detach().requires_grad_(True)
    bag = torch.nn.functional.embedding_bag(b_values, before["b"], b_offsets, mode="sum", per_sample_weights=b_weights,
                                            include_last_offset=True, padding_idx=0)
    (bag * grad[:, 4:]).sum().backward()
    torch.testing.assert_close(batch.weights.grad[5:], b_weights.grad)
