"""Embedding layers and the fused collection's reference backend, against nn.Embedding,
torch.optim and numpy computed by hand. (The Triton kernels are compared with the reference
in test_torch_kernels.py.)"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tabloader.schema import ColumnSchema, Schema, Tags  # noqa: E402
from tabloader.torch import dispatch  # noqa: E402
from tabloader.torch import fused as fused_mod  # noqa: E402
from tabloader.torch.fused import FusedEmbeddingCollection  # noqa: E402
from tabloader.torch.jagged import keyed_jagged  # noqa: E402
from tabloader.torch.layers import (  # noqa: E402
    ConcatenatedEmbeddings,
    EmbeddingConfig,
    MultiHotEmbeddings,
    configs_from_schema,
)

pytestmark = pytest.mark.torch

D = 6


def ids(n, card, seed, low=0):
    g = torch.Generator().manual_seed(seed)
    return (low + (torch.rand(n, generator=g) ** 2 * (card - low))).long().clamp(low, card - 1)


def list_feature(batch, card, seed, max_len=4, pad_every=5):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(0, max_len + 1, (batch,), generator=g)
    offsets = torch.zeros(batch + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(lens, 0)
    values = torch.randint(1, card, (int(offsets[-1]),), generator=g)
    if pad_every:
        values[::pad_every] = 0
    return values, offsets


def pool_numpy(weight, values, offsets, mode, padding_idx=0):
    """Pooled lookup by hand: padding left out of the sum and of the mean's count."""
    w, v, o = weight.detach().numpy(), values.numpy(), offsets.numpy()
    out = np.zeros((len(o) - 1, w.shape[1]), np.float64)
    for b in range(len(o) - 1):
        bag = [i for i in v[o[b]:o[b + 1]] if i != padding_idx]
        if bag:
            s = w[bag].astype(np.float64).sum(0)
            out[b] = s / len(bag) if mode == "mean" else s
    return out


# --------------------------------------------------------------------------------------------
# configs
# --------------------------------------------------------------------------------------------
def test_embedding_config_defaults_and_validation():
    c = EmbeddingConfig("C1", 10, 4)
    assert c.features == ("C1",) and c.pooling == "sum" and c.padding_idx == 0 and c.init == "normal"
    assert EmbeddingConfig("t", np.int64(5), 3, features="f").features == ("f",)
    with pytest.raises(ValueError, match="pooling"):
        EmbeddingConfig("C1", 10, 4, pooling="max")
    with pytest.raises(ValueError, match="padding_idx 10"):
        EmbeddingConfig("C1", 10, 4, padding_idx=10)
    with pytest.raises(ValueError, match="num_embeddings must be >= 1"):
        EmbeddingConfig("C1", 0, 4)
    with pytest.raises(ValueError, match="init"):
        EmbeddingConfig("C1", 10, 4, init="kaiming")
    with pytest.raises(TypeError, match="embedding_dim"):
        EmbeddingConfig("C1", 10, 4.5)


def test_configs_from_schema():
    schema = Schema([
        ColumnSchema("label", "float32", {Tags.TARGET}),
        ColumnSchema("I1", "float32", {Tags.CONTINUOUS}),
        ColumnSchema("C1", "int64", {Tags.CATEGORICAL}, {"cardinality": 1000, "embedding_dim": 32}),
        ColumnSchema("C2", "int64", {Tags.CATEGORICAL}, {"cardinality": 50}),
        ColumnSchema("genres", "int64", {Tags.CATEGORICAL, Tags.LIST}, {"cardinality": 21, "embedding_dim": 8},
                     is_list=True),
    ])
    cfgs = configs_from_schema(schema)
    assert [(c.name, c.num_embeddings, c.embedding_dim, c.features) for c in cfgs] == [
        ("C1", 1000, 32, ("C1",)), ("C2", 50, round(1.6 * 50 ** 0.56), ("C2",)), ("genres", 21, 8, ("genres",))]
    assert {c.embedding_dim for c in configs_from_schema(schema, dim=16)} == {16}
    assert [c.embedding_dim for c in configs_from_schema(schema, dim=lambda card: 4 if card < 100 else 8)] == [8, 4, 4]
    assert configs_from_schema(schema, dim={"C2": 3}, columns=["C2"])[0].embedding_dim == 3
    assert configs_from_schema(schema, pooling="mean")[2].pooling == "mean"
    with pytest.raises(ValueError, match="'C3' has no 'cardinality'"):
        configs_from_schema(schema.replace(ColumnSchema("C3", "int64", {Tags.CATEGORICAL})))
    with pytest.raises(ValueError, match="no column tagged 'categorical'"):
        configs_from_schema(Schema([ColumnSchema("I1", "float32", {Tags.CONTINUOUS})]))


def test_torch_sizes_tables_by_the_schema_rule():
    """One embedding-size rule: a column without embedding_dim gets what the encoder would record
    (cardinality 0 -> 1, no more 2 from a clamp of its own); nonsense is refused, naming it."""
    import tabloader.torch as tlt
    from tabloader import schema as schema_mod

    assert tlt.suggested_embedding_dim(0) == 1
    assert tlt.suggested_embedding_dim(3) == round(1.6 * 3 ** 0.56) == 3
    assert tlt.suggested_embedding_dim(10**6, max_dim=40) == 40
    with pytest.raises(ValueError, match="cardinality must be >= 0, got -1"):
        tlt.suggested_embedding_dim(-1)
    assert tlt.suggested_embedding_dim is schema_mod.suggested_embedding_dim
    s = Schema([ColumnSchema("C", "int64", {Tags.CATEGORICAL}, {"cardinality": 777})])
    assert configs_from_schema(s, max_dim=20)[0].embedding_dim == 20
    assert configs_from_schema(s)[0].embedding_dim == round(1.6 * 777 ** 0.56)


# --------------------------------------------------------------------------------------------
# ConcatenatedEmbeddings / MultiHotEmbeddings
# --------------------------------------------------------------------------------------------
def test_concatenated_embeddings_lookup_and_gradients():
    torch.manual_seed(0)
    cfgs = [EmbeddingConfig("C1", 20, 3), EmbeddingConfig("C2", 7, 2, features=("C2a", "C2b"))]
    emb = ConcatenatedEmbeddings(cfgs, sparse_columns=["C1"])
    feats = {"C1": ids(9, 20, 1), "C2a": ids(9, 7, 2), "C2b": ids(9, 7, 3), "I1": torch.ones(9)}
    out = emb(feats)
    w1 = emb.embeddings["C1"].weight.detach().numpy()
    w2 = emb.embeddings["C2"].weight.detach().numpy()
    expect = np.concatenate([w1[feats["C1"].numpy()], w2[feats["C2a"].numpy()], w2[feats["C2b"].numpy()]], 1)
    np.testing.assert_allclose(out.detach().numpy(), expect, rtol=0, atol=0)
    assert emb.output_dim == out.shape[1] == 7
    out.sum().backward()
    assert emb.embeddings["C1"].weight.grad.is_sparse
    assert not emb.embeddings["C2"].weight.grad.is_sparse
    assert np.allclose(emb.embeddings["C2"].weight.grad[0].numpy(), 0)  # padding row gets no gradient
    assert all(p.shape[0] == 20 for p in emb.sparse_parameters())
    assert all(p.shape[0] == 7 for p in emb.dense_parameters())
    assert torch.count_nonzero(emb.embeddings["C1"].weight[0]) == 0  # padding row starts at zero


def test_concatenated_feature_names_is_deprecated():
    emb = ConcatenatedEmbeddings([EmbeddingConfig("C1", 5, 2), EmbeddingConfig("C2", 7, 2, features=("a", "b"))])
    with pytest.warns(DeprecationWarning, match="feature_names is deprecated"):
        assert emb.feature_names == ["C1", "a", "b"]


def test_concatenated_embeddings_dropout_and_list_feature():
    torch.manual_seed(0)
    emb = ConcatenatedEmbeddings([EmbeddingConfig("C1", 20, 4), EmbeddingConfig("g", 9, 4, pooling="mean")],
                                 dropout=0.5, sparse_columns=True)
    values, offsets = list_feature(6, 9, 0)
    feats = {"C1": ids(6, 20, 1), "g": (values, offsets)}
    emb.eval()
    out = emb(feats)
    np.testing.assert_allclose(out[:, 4:].detach().numpy(),
                               pool_numpy(emb.embeddings["g"].weight, values, offsets, "mean"), rtol=1e-6, atol=1e-7)
    emb.train()
    dropped = emb(feats)
    assert (dropped == 0).float().mean() > 0.2


def test_multihot_embeddings_match_numpy():
    torch.manual_seed(0)
    cfgs = [EmbeddingConfig("genres", 12, 5, pooling="mean"), EmbeddingConfig("tags", 30, 3, pooling="sum")]
    emb = MultiHotEmbeddings(cfgs, sparse_columns=["tags"])
    g_values, g_offsets = list_feature(8, 12, 1)
    t_values, t_offsets = list_feature(8, 30, 2, pad_every=3)
    out = emb({"genres": (g_values, g_offsets), "tags": (t_values, t_offsets)})
    expect = np.concatenate([pool_numpy(emb.bags["genres"].weight, g_values, g_offsets, "mean"),
                             pool_numpy(emb.bags["tags"].weight, t_values, t_offsets, "sum")], 1)
    np.testing.assert_allclose(out.detach().numpy(), expect, rtol=1e-5, atol=1e-6)
    out.sum().backward()
    assert emb.bags["tags"].weight.grad.is_sparse and not emb.bags["genres"].weight.grad.is_sparse
    # a padded (B, L) id tensor gives the same as (values, offsets) without the padding
    padded = torch.tensor([[3, 4, 0], [0, 0, 0], [5, 0, 0]])
    out2 = emb.lookup({"genres": padded, "tags": (t_values, t_offsets)})["genres"]
    w = emb.bags["genres"].weight.detach()
    torch.testing.assert_close(out2, torch.stack([(w[3] + w[4]) / 2, torch.zeros(5), w[5]]))
    with pytest.raises(ValueError, match="single-hot"):
        emb({"genres": g_values, "tags": (t_values, t_offsets)})


ODD_NAMES = ["a b", "a_b", "x/y", "p.q", "type"]  # "type" is an attribute of nn.ModuleDict


def test_layers_take_any_column_name_and_keep_it_outside():
    """Spaces, '/', '.', a ModuleDict attribute name, and two names that clean to the same
    module name ("a b", "a_b"): build, forward, backward and a state_dict round trip."""
    torch.manual_seed(0)
    cfgs = [EmbeddingConfig(n, 10 + i, 2 + i) for i, n in enumerate(ODD_NAMES)]
    emb = ConcatenatedEmbeddings(cfgs, sparse_columns=["p.q"])
    feats = {n: ids(7, 10 + i, i) for i, n in enumerate(ODD_NAMES)}
    out = emb(feats)
    weights = {n: emb.table(n).weight.detach().numpy() for n in ODD_NAMES}
    assert len({id(w) for w in weights.values()}) == len(ODD_NAMES)  # one table each
    expect = np.concatenate([weights[n][feats[n].numpy()] for n in ODD_NAMES], 1)
    np.testing.assert_array_equal(out.detach().numpy(), expect)
    assert list(emb.lookup(feats)) == ODD_NAMES  # the user's names outside
    out.sum().backward()
    assert emb.table("p.q").weight.grad.is_sparse and not emb.table("a b").weight.grad.is_sparse
    assert len(emb.sparse_parameters()) == 1 and len(emb.dense_parameters()) == 4
    state = emb.state_dict()
    assert len(state) == len(ODD_NAMES) and emb.table("a_b") is emb.embeddings["a_b"]  # plain names unchanged
    torch.manual_seed(1)
    again = ConcatenatedEmbeddings(cfgs, sparse_columns=["p.q"])
    again.load_state_dict(state)
    np.testing.assert_array_equal(again(feats).detach().numpy(), expect)

    bags = MultiHotEmbeddings([EmbeddingConfig(n, 12, 3, pooling="mean") for n in ODD_NAMES], sparse_columns=True)
    lists = {n: list_feature(5, 12, i) for i, n in enumerate(ODD_NAMES)}
    pooled = bags(lists)
    np.testing.assert_allclose(pooled.detach().numpy(), np.concatenate(
        [pool_numpy(bags.table(n).weight, *lists[n], "mean") for n in ODD_NAMES], 1), rtol=1e-6, atol=1e-7)
    pooled.sum().backward()
    assert all(bags.table(n).weight.grad.is_sparse for n in ODD_NAMES)
    torch.manual_seed(1)
    bags_again = MultiHotEmbeddings([EmbeddingConfig(n, 12, 3, pooling="mean") for n in ODD_NAMES])
    bags_again.load_state_dict(bags.state_dict())
    torch.testing.assert_close(bags_again(lists), pooled.detach())
    with pytest.raises(KeyError, match="no embedding table 'nope'"):
        emb.table("nope")


def test_fused_collection_takes_any_column_name():
    cfgs = [EmbeddingConfig(n, 10, D) for n in ODD_NAMES]
    coll = FusedEmbeddingCollection(cfgs, optimizer="sgd", lr=0.1, output="dict", backend="reference")
    feats = {n: ids(7, 10, i) for i, n in enumerate(ODD_NAMES)}
    before = {n: coll.table_weight(n).detach().clone() for n in ODD_NAMES}
    out = coll(feats)
    assert list(out) == ODD_NAMES
    for n in ODD_NAMES:
        torch.testing.assert_close(out[n], before[n][feats[n]], rtol=0, atol=0)
    sum(o.sum() for o in out.values()).backward()
    again = FusedEmbeddingCollection(cfgs, optimizer="sgd", output="dict", backend="reference")
    again.load_state_dict(coll.state_dict())
    assert all(torch.equal(again.table_weight(n), coll.table_weight(n)) for n in ODD_NAMES)


def test_layers_bad_input():
    cfgs = [EmbeddingConfig("C1", 10, 2), EmbeddingConfig("C2", 5, 2)]
    with pytest.raises(ValueError, match="duplicate embedding table name 'C1'"):
        ConcatenatedEmbeddings([EmbeddingConfig("C1", 10, 2), EmbeddingConfig("C1", 5, 2)])
    with pytest.raises(ValueError, match="feature 'x' is configured in two tables"):
        MultiHotEmbeddings([EmbeddingConfig("a", 10, 2, features=["x"]), EmbeddingConfig("b", 5, 2, features=["x"])])
    with pytest.raises(ValueError, match="sparse column 'C9' has no configured embedding table"):
        ConcatenatedEmbeddings(cfgs, sparse_columns=["C9"])
    emb = ConcatenatedEmbeddings(cfgs)
    good = {"C1": torch.tensor([1, 2]), "C2": torch.tensor([3, 4])}
    with pytest.raises(IndexError, match=r"table 'C2' \(feature 'C2'\): index 5 is out of range \[0, 5\)"):
        emb({**good, "C2": torch.tensor([3, 5])})
    with pytest.raises(IndexError, match="table 'C1'.*index -1"):
        emb({**good, "C1": torch.tensor([-1, 2])})
    with pytest.raises(KeyError, match="feature 'C2' .* is not in the batch"):
        emb({"C1": good["C1"]})
    with pytest.raises(TypeError, match="feature 'C1' .*must be int64 or int32.*float32"):
        emb({**good, "C1": torch.tensor([1.0, 2.0])})
    multi = MultiHotEmbeddings([EmbeddingConfig("g", 5, 2)])
    with pytest.raises(ValueError, match="offsets must start at 0"):
        multi({"g": (torch.tensor([1, 2, 3]), torch.tensor([0, 1, 2]))})


# --------------------------------------------------------------------------------------------
# FusedEmbeddingCollection, reference backend
# --------------------------------------------------------------------------------------------
def fused_and_embeddings(cfgs, optimizer, sparse=False, **kwargs):
    """A reference-backend collection and one nn.Embedding per table holding the same weights."""
    torch.manual_seed(0)
    coll = FusedEmbeddingCollection(cfgs, optimizer=optimizer, backend="reference", **kwargs)
    embs = torch.nn.ModuleDict({
        c.name: torch.nn.Embedding(c.num_embeddings, c.embedding_dim, padding_idx=c.padding_idx, sparse=sparse)
        for c in cfgs})
    with torch.no_grad():
        for c in cfgs:
            embs[c.name].weight.copy_(coll.table_weight(c.name))
    return coll, embs


def concat_lookup(embs, cfgs, feats):
    return torch.cat([embs[c.name](feats[f]) for c in cfgs for f in c.features], dim=1)


CFGS = [EmbeddingConfig("C1", 40, D), EmbeddingConfig("C2", 9, D, features=("C2a", "C2b")),
        EmbeddingConfig("C3", 300, D, padding_idx=None)]


def batch(seed, n=32, hot=0):
    feats = {"C1": ids(n, 40, seed), "C2a": ids(n, 9, seed + 1), "C2b": ids(n, 9, seed + 2), "C3": ids(n, 300, seed + 3)}
    feats["C1"][:3] = 0  # padding ids
    if hot:
        feats = {k: torch.cat([v, torch.full((hot,), 7)]) for k, v in feats.items()}
    return feats


def upstream(shape, seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def test_fused_forward_equals_nn_embedding():
    coll, embs = fused_and_embeddings(CFGS, "sgd")
    feats = batch(0)
    torch.testing.assert_close(coll(feats), concat_lookup(embs, CFGS, feats), rtol=0, atol=0)
    assert coll.output_dim == 4 * D
    stacked = FusedEmbeddingCollection(CFGS, output="stack", backend="reference")(feats)
    assert stacked.shape == (32, 4, D)
    as_dict = FusedEmbeddingCollection(CFGS, output="dict", backend="reference")(feats)
    assert list(as_dict) == ["C1", "C2a", "C2b", "C3"] and as_dict["C3"].shape == (32, D)


@pytest.mark.parametrize("hot", [0, 3000])
def test_fused_sgd_equals_nn_embedding_and_sgd(hot):
    """Duplicates, padding ids, a row with thousands of repeats: same as torch.optim.SGD."""
    coll, embs = fused_and_embeddings(CFGS, "sgd", lr=0.1)
    opt = torch.optim.SGD(embs.parameters(), lr=0.1)
    for step in range(3):
        feats = batch(step, hot=hot)
        out = coll(feats)
        up = upstream(out.shape, step)
        (out * up).sum().backward()
        (concat_lookup(embs, CFGS, feats) * up).sum().backward()
        opt.step()
        opt.zero_grad()
        assert coll.weight.grad is None
    for c in CFGS:
        torch.testing.assert_close(coll.table_weight(c.name), embs[c.name].weight.detach(), rtol=1e-4, atol=1e-5)
    assert torch.count_nonzero(coll.table_weight("C1")[0]) == 0


def train_beside_sparse_adam(coll, embs, steps: int, first_batch: int) -> "torch.optim.SparseAdam":
    """``steps`` steps of the fused collection and of ``embs`` + SparseAdam on the same batches;
    the tables are then equal. Returns the SparseAdam optimizer."""
    opt = torch.optim.SparseAdam(list(embs.parameters()), lr=0.01)
    for step in range(steps):
        feats = batch(first_batch + step, hot=50 * step)
        out = coll(feats)
        up = upstream(out.shape, step)
        (out * up).sum().backward()
        (concat_lookup(embs, CFGS, feats) * up).sum().backward()
        opt.step()
        opt.zero_grad()
    for c in CFGS:
        torch.testing.assert_close(coll.table_weight(c.name), embs[c.name].weight.detach(), rtol=1e-5, atol=1e-6)
    return opt


def test_fused_adam_equals_sparse_adam():
    """Lazy Adam == nn.Embedding(sparse=True) + SparseAdam (global step, touched rows only)."""
    coll, embs = fused_and_embeddings(CFGS, "adam", sparse=True, lr=0.01)
    opt = train_beside_sparse_adam(coll, embs, steps=4, first_batch=10)
    start = coll.table_offsets["C3"]
    torch.testing.assert_close(coll.exp_avg_sq[start:start + 300],
                               opt.state[embs["C3"].weight]["exp_avg_sq"].to_dense(), rtol=1e-5, atol=1e-9)
    assert coll.step == 4


@pytest.mark.parametrize("cast", ["half", "bfloat16", "double"])
def test_a_cast_model_keeps_the_fused_rows_fp32_and_trains_as_before(cast):
    """``model.half()`` over a model holding the collection: the rows and Adam's moments stay
    fp32 (the update adds fp32 gradients to them; ``dtype`` sets the outputs' precision) and
    training goes on equal to SparseAdam."""
    coll, embs = fused_and_embeddings(CFGS, "adam", sparse=True, lr=0.01)
    getattr(coll, cast)()
    assert coll.weight.dtype == coll.exp_avg.dtype == coll.exp_avg_sq.dtype == torch.float32
    train_beside_sparse_adam(coll, embs, steps=2, first_batch=20)


def test_fused_adam_equals_dense_adam_when_every_row_is_touched():
    cfg = [EmbeddingConfig("t", 10, D, padding_idx=None)]
    coll, embs = fused_and_embeddings(cfg, "adam", lr=0.01, eps=1e-8)
    opt = torch.optim.Adam(embs.parameters(), lr=0.01, eps=1e-8)
    for step in range(3):
        feats = {"t": torch.cat([torch.arange(10), ids(20, 10, step)])}
        out = coll(feats)
        up = upstream(out.shape, step)
        (out * up).sum().backward()
        (concat_lookup(embs, cfg, feats) * up).sum().backward()
        opt.step()
        opt.zero_grad()
    # Adam and SparseAdam place eps differently (eps vs eps * sqrt(1 - beta2**t)): tiny difference
    torch.testing.assert_close(coll.table_weight("t"), embs["t"].weight.detach(), rtol=1e-4, atol=1e-6)


def test_fused_rowwise_adagrad_matches_numpy():
    lr, eps = 0.1, 1e-8
    coll, _ = fused_and_embeddings(CFGS, "adagrad", lr=lr, eps=eps, initial_accumulator_value=0.1)
    w = coll.weight.detach().numpy().astype(np.float64).copy()
    state = np.full(coll.total_rows, 0.1)
    offsets = [coll.table_offsets[c.name] for c in CFGS for _ in c.features]
    names = [f for c in CFGS for f in c.features]
    pads = {coll.table_offsets[c.name] + c.padding_idx for c in CFGS if c.padding_idx is not None}
    for step in range(3):
        feats = batch(20 + step, hot=100)
        out = coll(feats)
        up = upstream(out.shape, step)
        (out * up).sum().backward()
        g = up.numpy().reshape(len(feats["C1"]), len(names), D)
        gsum = {}
        for f, (name, off) in enumerate(zip(names, offsets)):
            for b, i in enumerate(feats[name].numpy()):
                gsum.setdefault(off + int(i), np.zeros(D))
                gsum[off + int(i)] += g[b, f]
        for row, gr in gsum.items():
            if row in pads:
                continue
            state[row] += np.mean(gr ** 2)
            w[row] -= lr * gr / (np.sqrt(state[row]) + eps)
    np.testing.assert_allclose(coll.weight.detach().numpy(), w, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(coll.state_sum.numpy(), state, rtol=1e-5)


@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_fused_pooled_equals_embedding_bag_and_sgd(pooling):
    cfgs = [EmbeddingConfig("g", 15, D, pooling=pooling), EmbeddingConfig("C1", 40, D)]
    torch.manual_seed(0)
    coll = FusedEmbeddingCollection(cfgs, optimizer="sgd", lr=0.1, backend="reference")
    bag = torch.nn.EmbeddingBag(15, D, mode=pooling, padding_idx=0, include_last_offset=True)
    emb = torch.nn.Embedding(40, D, padding_idx=0)
    with torch.no_grad():
        bag.weight.copy_(coll.table_weight("g"))
        emb.weight.copy_(coll.table_weight("C1"))
    opt = torch.optim.SGD([bag.weight, emb.weight], lr=0.1)
    for step in range(3):
        values, offsets = list_feature(16, 15, step)
        values[1::3] = 4  # duplicates
        feats = {"g": (values, offsets), "C1": ids(16, 40, step)}
        out = coll(feats)
        ref = torch.cat([bag(values, offsets), emb(feats["C1"])], 1)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
        up = upstream(out.shape, step)
        (out * up).sum().backward()
        (ref * up).sum().backward()
        opt.step()
        opt.zero_grad()
    torch.testing.assert_close(coll.table_weight("g"), bag.weight.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(coll.table_weight("C1"), emb.weight.detach(), rtol=1e-5, atol=1e-6)


def padded_lists(batch, card, length, seed):
    """A list column padded to ``length`` with id 0 (the loader's ``lists={"col": length}``): lists
    of 0 to ``length`` ids, padding on the right, a row of padding only among them."""
    g = torch.Generator().manual_seed(seed)
    out = torch.randint(1, card, (batch, length), generator=g)
    lens = torch.randint(0, length + 1, (batch,), generator=g)
    lens[0] = 0
    return out.masked_fill(torch.arange(length)[None, :] >= lens[:, None], 0)


@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_fused_collection_pools_padded_lists_as_multihot_embeddings(pooling):
    """A list column padded to a fixed length, ``(B, L)`` ids as the loader's ``lists=`` gives it,
    is pooled as ``MultiHotEmbeddings`` pools it (padding ids left out of the sum and of the
    mean's count, a row of padding only gives zeros) and trains as it does with SGD;
    ``ConcatenatedEmbeddings`` pools it the same way."""
    cfgs = [EmbeddingConfig("genres", 10, D, pooling=pooling), EmbeddingConfig("C1", 40, D)]
    torch.manual_seed(0)
    coll = FusedEmbeddingCollection(cfgs, optimizer="sgd", lr=0.1, backend="reference")
    bags, embs = MultiHotEmbeddings(cfgs[:1]), ConcatenatedEmbeddings(cfgs)
    with torch.no_grad():
        bags.table("genres").weight.copy_(coll.table_weight("genres"))
        for cfg in cfgs:
            embs.table(cfg.name).weight.copy_(coll.table_weight(cfg.name))
    opt = torch.optim.SGD([bags.table("genres").weight, embs.table("C1").weight], lr=0.1)
    for step in range(3):
        feats = {"genres": padded_lists(16, 10, 3, step), "C1": ids(16, 40, step)}
        out = coll(feats)
        ref = torch.cat([bags(feats), embs.table("C1")(feats["C1"])], 1)
        torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-7)
        assert torch.count_nonzero(out[0, :D]) == 0  # padding only
        with torch.no_grad():
            torch.testing.assert_close(embs(feats), ref, rtol=1e-6, atol=1e-7)
        up = upstream(out.shape, step)
        (out * up).sum().backward()
        (ref * up).sum().backward()
        opt.step()
        opt.zero_grad()
        with torch.no_grad():
            embs.table("genres").weight.copy_(bags.table("genres").weight)
    torch.testing.assert_close(coll.table_weight("genres"), bags.table("genres").weight.detach(), rtol=1e-5,
                               atol=1e-6)
    torch.testing.assert_close(coll.table_weight("C1"), embs.table("C1").weight.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
def test_fused_padding_rows_and_states_never_change(optimizer):
    cfgs = [EmbeddingConfig("g", 6, D), EmbeddingConfig("C1", 5, D, padding_idx=2)]
    coll = FusedEmbeddingCollection(cfgs, optimizer=optimizer, backend="reference")
    states = {n: b.clone() for n, b in coll.named_buffers() if not n.startswith("_")}
    feats = {"g": (torch.tensor([0, 0, 1, 0]), torch.tensor([0, 2, 4])), "C1": torch.tensor([2, 2])}
    out = coll(feats)
    assert torch.count_nonzero(out[0]) == 0  # a bag of padding only pools to zeros
    torch.testing.assert_close(out[1, :D], coll.table_weight("g")[1])  # padding left out of the pool
    out.sum().backward()
    assert torch.count_nonzero(coll.table_weight("g")[0]) == 0
    assert torch.count_nonzero(coll.table_weight("C1")[2]) == 0
    for n, b in coll.named_buffers():
        if n in states:
            pad_rows = [0, coll.table_offsets["C1"] + 2]
            assert torch.equal(b[pad_rows], states[n][pad_rows]), n
            assert not torch.equal(b, states[n]), f"{n}: row g[1] should have been updated"


def test_fused_empty_batch():
    coll = FusedEmbeddingCollection(CFGS + [EmbeddingConfig("g", 5, D)], optimizer="adam", backend="reference")
    before = coll.weight.detach().clone()
    feats = {k: v[:0] for k, v in batch(0).items()}
    feats["g"] = (torch.zeros(0, dtype=torch.long), torch.zeros(1, dtype=torch.long))
    out = coll(feats)
    assert out.shape == (0, 5 * D)
    out.sum().backward()
    assert torch.equal(coll.weight, before) and coll.step == 1


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fused_half_activations(dtype):
    coll32, _ = fused_and_embeddings(CFGS, "adagrad")
    coll16, _ = fused_and_embeddings(CFGS, "adagrad", dtype=dtype)
    feats = batch(3)
    out = coll16(feats)
    assert out.dtype == dtype and coll16.weight.dtype == torch.float32
    torch.testing.assert_close(out.float(), coll32(feats), rtol=1e-2, atol=1e-3)
    up = upstream(out.shape, 0)
    (out * up.to(dtype)).sum().backward()
    (coll32(feats) * up).sum().backward()
    torch.testing.assert_close(coll16.weight, coll32.weight, rtol=1e-2, atol=1e-3)
    auto = FusedEmbeddingCollection(CFGS, dtype=None, backend="reference")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert auto(feats).dtype == torch.bfloat16
    assert auto(feats).dtype == torch.float32


def test_fused_trains_with_the_rest_of_the_model():
    """Only the dense part has gradients; its ordinary optimizer skips the tables."""
    torch.manual_seed(0)
    coll = FusedEmbeddingCollection(CFGS, optimizer="adagrad", lr=0.05, backend="reference")
    head = torch.nn.Linear(coll.output_dim, 1)
    opt = torch.optim.AdamW(list(head.parameters()) + list(coll.parameters()), lr=0.01)
    feats = batch(0, n=256)
    target = (feats["C1"] % 2).float()
    losses = []
    for _ in range(30):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(head(coll(feats))[:, 0], target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        assert coll.weight.grad is None and head.weight.grad is not None
    assert losses[-1] < 0.8 * losses[0]
    state = coll.state_dict()
    assert "state_sum" in state and state["_extra_state"]["step"] == 30
    again = FusedEmbeddingCollection(CFGS, optimizer="adagrad", backend="reference")
    again.load_state_dict(state)
    assert again.step == 30 and torch.equal(again.weight, coll.weight)


@pytest.mark.parametrize("other", [
    [EmbeddingConfig("user", 20, 4), EmbeddingConfig("item", 10, 4)],  # the same total rows, sizes swapped
    [EmbeddingConfig("item", 20, 4), EmbeddingConfig("user", 10, 4)],  # the same sizes, names swapped
    [EmbeddingConfig("a", 10, 4), EmbeddingConfig("b", 20, 4)],  # renamed tables
    [EmbeddingConfig("user", 10, 4, padding_idx=None), EmbeddingConfig("item", 20, 4)],  # another padding row
])
def test_a_fused_state_dict_is_refused_by_other_tables_and_leaves_them_unchanged(other):
    """The state dict holds one flat weight over all tables: loaded into other tables with the
    same total of rows, a row of one table would land in another (as nn.Embedding layers would
    refuse). The load is refused before any row is copied, naming both layouts."""
    torch.manual_seed(0)
    saved = FusedEmbeddingCollection([EmbeddingConfig("user", 10, 4), EmbeddingConfig("item", 20, 4)],
                                     backend="reference")
    target = FusedEmbeddingCollection(other, backend="reference")
    before = {name: t.clone() for name, t in target.state_dict().items() if isinstance(t, torch.Tensor)}
    with pytest.raises(ValueError, match=r"saved by tables \[\('user', 10, 4, 0\), \('item', 20, 4, 0\)\]"
                                         r".*this collection has \[\('" + other[0].name):
        target.load_state_dict(saved.state_dict())
    for name, t in target.state_dict().items():
        if name in before:
            assert torch.equal(t, before[name]), name


def test_a_fused_state_dict_saved_without_its_layout_loads_as_before():
    """State dicts saved before the layout was part of them hold the step only: they still load."""
    torch.manual_seed(0)
    saved = FusedEmbeddingCollection(CFGS, optimizer="adagrad", backend="reference")
    saved.step = 7
    state = saved.state_dict()
    assert state["_extra_state"]["tables"] == [(c.name, c.num_embeddings, c.embedding_dim, c.padding_idx)
                                               for c in CFGS]
    state["_extra_state"] = {"step": 7}
    again = FusedEmbeddingCollection(CFGS, optimizer="adagrad", backend="reference")
    again.load_state_dict(state)
    assert again.step == 7 and torch.equal(again.weight, saved.weight)


@pytest.mark.parametrize("optimizer", ["adagrad", "adam"])
def test_a_fused_collection_built_on_the_meta_device_is_whole_after_to_empty_and_reset(optimizer):
    """Built on the meta device (no memory), ``to_empty(device="cpu")``, ``reset_parameters()``
    (``to_empty`` leaves every tensor uninitialized): the layout the lookups read (table offsets,
    padding rows and ids, table sizes, mean bags) is made from the configs and the optimizer
    state starts as in a collection built on the CPU; after ``load_state_dict``, single-hot,
    pooled and keyed jagged lookups and a training step equal the trained collection's."""
    cfgs = CFGS + [EmbeddingConfig("g", 15, D, pooling="mean", padding_idx=3)]
    kw = dict(optimizer=optimizer, lr=0.1, initial_accumulator_value=0.5, backend="reference")
    torch.manual_seed(0)
    trained = FusedEmbeddingCollection(cfgs, **kw)
    fresh = FusedEmbeddingCollection(cfgs, **kw)
    feats = {**batch(0), "g": list_feature(32, 15, 1, pad_every=3)}
    jagged = keyed_jagged(feats, trained.features, as_torchrec=False)
    (trained(feats) * upstream((32, 5 * D), 0)).sum().backward()

    built = FusedEmbeddingCollection(cfgs, device="meta", **kw).to_empty(device="cpu")
    built.reset_parameters()
    for name, buf in fresh.named_buffers():
        assert torch.equal(dict(built.named_buffers())[name], buf), name
    assert built.step == 0
    assert torch.count_nonzero(built.table_weight("g")[3]) == 0 and torch.count_nonzero(built.table_weight("C1")[0]) == 0

    built.load_state_dict(trained.state_dict())
    for inputs in (feats, jagged):
        torch.testing.assert_close(built(inputs), trained(inputs), rtol=0, atol=0)
    for coll in (built, trained):
        (coll(jagged) * upstream((32, 5 * D), 1)).sum().backward()
    assert torch.equal(built.weight, trained.weight) and built.step == trained.step == 2


def test_a_second_backward_through_the_same_lookups_is_refused_not_applied_twice():
    """The update runs inside the backward: a second one (``retain_graph=True``) would apply it
    again, so it raises a RuntimeError and the rows keep the first update alone."""
    coll = FusedEmbeddingCollection([EmbeddingConfig("t", 5, 2)], optimizer="sgd", lr=1.0, backend="reference")
    before = coll.table_weight("t")[1].clone()
    loss = coll({"t": torch.tensor([1])}).sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="second backward"):
        loss.backward()
    torch.testing.assert_close(coll.table_weight("t")[1], before - 1.0)
    assert coll.step == 1


@pytest.mark.slow
@pytest.mark.parametrize("setup", ["excluded", "outside"])
def test_under_ddp_each_rank_trains_its_own_shard_in_the_documented_setups(tmp_path, setup):
    """docs/scale.md's two setups for the collections under DistributedDataParallel, in 2 gloo
    processes: ``exclude_from_ddp(model)`` before wrapping, or the collections outside the
    wrapped module. Each rank keeps its own rows when DDP wraps the model (DDP broadcasts rank
    0's parameters) and its own optimizer state at each forward (DDP broadcasts rank 0's buffers),
    and its fused and offloaded shards train exactly as a replay of the same steps without DDP
    (tests/ddp_embeddings_train.py); the head stays synchronized."""
    import json

    from _gloo import run_two_ranks

    run_two_ranks("ddp_embeddings_train.py", setup, str(tmp_path))
    results = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(2)]
    for rank, result in enumerate(results):
        assert result["kept"], f"rank {rank}: DDP replaced its shard when wrapping"
        assert result["changed"] and result["trained_as_replay"], f"rank {rank}: its shard did not train on its own"
    assert results[0]["head"] == results[1]["head"]


def test_exclude_from_ddp_names_every_parameter_and_buffer_of_the_collections_only():
    """The names DDP reads (``_ddp_params_and_buffers_to_ignore``, fully qualified): every
    parameter and buffer of each collection in the model, after the names already there; the
    head's are not among them; a model without a collection is refused."""
    from tabloader.torch import OffloadedEmbeddingCollection, exclude_from_ddp

    model = torch.nn.ModuleDict({"emb": FusedEmbeddingCollection(CFGS, optimizer="adam"), "head": torch.nn.Linear(2, 1),
                                 "cold": OffloadedEmbeddingCollection(CFGS, hot_rows=3, optimizer="adagrad")})
    model._ddp_params_and_buffers_to_ignore = ["head.bias"]
    added = exclude_from_ddp(model)
    expected = [f"{prefix}.{name}" for prefix in ("emb", "cold")
                for name, _ in [*model[prefix].named_parameters(), *model[prefix].named_buffers()]]
    assert sorted(added) == sorted(expected) and model._ddp_params_and_buffers_to_ignore == ["head.bias", *added]
    assert {"emb.weight", "emb.exp_avg", "emb.exp_avg_sq", "cold.hot_weight", "cold.hot_state_sum"} <= set(added)
    assert not any(name.startswith("head") for name in added)
    with pytest.raises(ValueError, match="Linear holds no FusedEmbeddingCollection"):
        exclude_from_ddp(torch.nn.Linear(2, 1))


def test_fused_lr_is_schedulable():
    coll = FusedEmbeddingCollection([EmbeddingConfig("t", 5, 2)], optimizer="sgd", lr=1.0, backend="reference")
    before = coll.table_weight("t")[1].clone()
    coll.lr = 0.5
    coll({"t": torch.tensor([1])}).sum().backward()
    torch.testing.assert_close(coll.table_weight("t")[1], before - 0.5)


def test_fused_bad_input():
    with pytest.raises(ValueError, match="duplicate embedding table name 'C1'"):
        FusedEmbeddingCollection([EmbeddingConfig("C1", 5, 2), EmbeddingConfig("C1", 6, 2)])
    with pytest.raises(ValueError, match="one embedding_dim"):
        FusedEmbeddingCollection([EmbeddingConfig("a", 5, 2), EmbeddingConfig("b", 6, 3)])
    with pytest.raises(ValueError, match="unknown optimizer"):
        FusedEmbeddingCollection([EmbeddingConfig("a", 5, 2)], optimizer="lamb")
    with pytest.raises(TypeError, match="dtype"):
        FusedEmbeddingCollection([EmbeddingConfig("a", 5, 2)], dtype=torch.float64)
    coll = FusedEmbeddingCollection(CFGS, backend="reference")
    feats = batch(0)
    with pytest.raises(IndexError, match=r"table 'C2' \(feature 'C2b'\): index 9 is out of range \[0, 9\)"):
        coll({**feats, "C2b": torch.full((32,), 9)})
    with pytest.raises(IndexError, match="table 'C3'.*index -4"):
        coll({**feats, "C3": torch.full((32,), -4)})
    with pytest.raises(KeyError, match="feature 'C2a' \\(embedding table 'C2'\\) is not in the batch"):
        coll({k: v for k, v in feats.items() if k != "C2a"})
    with pytest.raises(TypeError, match="feature 'C3'.*int64 or int32.*float32"):
        coll({**feats, "C3": feats["C3"].float()})
    with pytest.raises(ValueError, match="batch size 5"):
        coll({**feats, "C3": feats["C3"][:5]})
    multi = FusedEmbeddingCollection([EmbeddingConfig("g", 5, 2)], backend="reference")
    with pytest.raises(ValueError, match="offsets must start at 0"):
        multi({"g": (torch.tensor([1, 2]), torch.tensor([0, 2, 1]))})
    if not fused_mod.triton_interpreting():
        with pytest.raises(RuntimeError, match="backend='triton' needs CUDA"):
            FusedEmbeddingCollection([EmbeddingConfig("g", 5, 2)], backend="triton")({"g": torch.tensor([1])})
    unchecked = FusedEmbeddingCollection(CFGS, backend="reference", validate_indices=False)
    assert unchecked(feats).shape == (32, 4 * D)


def test_triton_is_never_imported_after_tensorflow(monkeypatch):
    """With TensorFlow loaded, the kernels are not imported and the reference runs, warned once."""
    monkeypatch.setitem(sys.modules, "tensorflow", type(sys)("tensorflow"))
    monkeypatch.delitem(sys.modules, "tabloader.torch.kernels", raising=False)
    monkeypatch.delitem(sys.modules, "triton", raising=False)  # as if Triton had never been imported
    monkeypatch.setattr(dispatch, "_kernels", None)
    monkeypatch.setattr(dispatch, "_warned", set())
    assert fused_mod.load_kernels() is None
    assert "TensorFlow" in dispatch._kernels_error
    assert "tabloader.torch.kernels" not in sys.modules
    monkeypatch.setattr(dispatch, "triton_interpreting", lambda: True)  # as if kernels were wanted here
    coll = FusedEmbeddingCollection(CFGS, optimizer="sgd")
    ref = FusedEmbeddingCollection(CFGS, optimizer="sgd", backend="reference")
    ref.load_state_dict(coll.state_dict())
    with pytest.warns(RuntimeWarning, match="falls back to the PyTorch reference"):
        out = coll(batch(0))
    torch.testing.assert_close(out, ref(batch(0)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        coll(batch(1)).sum().backward()  # no second warning
    with pytest.raises(RuntimeError, match="backend='triton' is not available"):
        FusedEmbeddingCollection(CFGS, backend="triton")(batch(0))


# --------------------------------------------------------------------------------------------
# training over tabloader.torch.Loader
# --------------------------------------------------------------------------------------------
def _loader_data(n=2000):
    import pandas as pd

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"user": rng.integers(2, 60, n), "item": rng.integers(2, 25, n),
                       "x": rng.standard_normal(n).astype("float32"),
                       "tags": [list(rng.integers(0, 12, rng.integers(0, 4))) for _ in range(n)]})
    df["y"] = ((df.user % 2) ^ (df.item % 3 == 0)).astype("float32")
    return df


def _epochs(model, loader, step, epochs):
    losses = []
    for _ in range(epochs):
        total, count = 0.0, 0
        for feats, target in loader:
            logits = model(feats)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, target)
            step(loss)
            total, count = total + loss.item() * len(target), count + len(target)
        losses.append(total / count)
    return losses


def test_concatenated_sparse_embeddings_train_over_the_loader():
    """Sparse tables with SparseAdam, the rest (dense table, list table, MLP) with AdamW."""
    import tabloader as tl
    from tabloader.torch.loader import Loader

    torch.manual_seed(0)
    loader = Loader(tl.Dataset(_loader_data()), batch_size=256, categorical=["user", "item", "tags"],
                    continuous=["x"], target="y", seed=0)
    emb = ConcatenatedEmbeddings([EmbeddingConfig("user", 60, 8), EmbeddingConfig("item", 25, 8),
                                  EmbeddingConfig("tags", 12, 4, pooling="mean")],
                                 sparse_columns=["user"], dropout=0.0)
    mlp = torch.nn.Sequential(torch.nn.Linear(emb.output_dim + 1, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

    def model(feats):
        return mlp(torch.cat([emb(feats), feats["x"][:, None]], 1))[:, 0]

    sparse_opt = torch.optim.SparseAdam(emb.sparse_parameters(), lr=0.05)
    dense_opt = torch.optim.AdamW(emb.dense_parameters() + list(mlp.parameters()), lr=0.01)
    user_before = emb.embeddings["user"].weight.detach().clone()

    def step(loss):
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        loss.backward()
        assert emb.embeddings["user"].weight.grad.is_sparse
        sparse_opt.step()
        dense_opt.step()

    losses = _epochs(model, loader, step, epochs=6)
    assert losses[-1] < 0.5 * losses[0], losses
    assert not torch.equal(user_before, emb.embeddings["user"].weight)


def test_fused_collection_trains_over_the_loader():
    import tabloader as tl
    from tabloader.torch.loader import Loader

    torch.manual_seed(0)
    loader = Loader(tl.Dataset(_loader_data()), batch_size=256, categorical=["user", "item", "tags"],
                    continuous=["x"], target="y", seed=0)
    coll = FusedEmbeddingCollection([EmbeddingConfig("user", 60, 8), EmbeddingConfig("item", 25, 8),
                                     EmbeddingConfig("tags", 12, 8)], optimizer="adam", lr=0.05)
    mlp = torch.nn.Sequential(torch.nn.Linear(coll.output_dim + 1, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.AdamW(mlp.parameters(), lr=0.01)

    def model(feats):
        return mlp(torch.cat([coll(feats), feats["x"][:, None]], 1))[:, 0]

    def step(loss):
        opt.zero_grad()
        loss.backward()  # updates the tables
        opt.step()

    losses = _epochs(model, loader, step, epochs=6)
    assert losses[-1] < 0.5 * losses[0], losses
    assert coll.step == 6 * len(loader)
