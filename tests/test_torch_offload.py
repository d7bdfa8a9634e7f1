"""OffloadedEmbeddingCollection: the same results as the all-in-one FusedEmbeddingCollection.

The oracle is the fused collection (itself checked against ``nn.Embedding`` + ``torch.optim``
in test_torch_embeddings.py) and, for SGD and SparseAdam, ``nn.Embedding`` directly. Both
collections start from the same weights; several training steps with duplicates, a very hot
row, padding ids and ids on both sides of every table's threshold must leave the same
outputs, weights and optimizer states -- with the cold rows staged per batch and with the
kernels reaching them in host memory (``cold_access="direct"``).
"""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from tabloader.torch.fused import FusedEmbeddingCollection
from tabloader.torch.layers import EmbeddingConfig
from tabloader.torch.offload import COLD_ACCESS, OffloadedEmbeddingCollection, bytes_per_row, hot_rows_for_budget

CARDS = [30, 50, 12]
DIM = 8
STATES = {"sgd": [], "adagrad": ["state_sum"], "adam": ["exp_avg", "exp_avg_sq"]}


def _configs(pooled=False, pooling="sum", cards=CARDS, dim=DIM):
    return [
        EmbeddingConfig("t0", cards[0], dim),
        EmbeddingConfig("t1", cards[1], dim, pooling=pooling) if pooled else EmbeddingConfig("t1", cards[1], dim),
        EmbeddingConfig("t2", cards[2], dim, features=("f2a", "f2b")),
    ]


def _batch(seed, batch=24, pooled=False, cards=CARDS, device="cpu", hot_repeats=40):
    """Skewed ids (many small, some large), one very hot row, padding ids (0), empty bags."""
    g = torch.Generator().manual_seed(seed)

    def ids(card, n):
        return (torch.rand(n, generator=g) ** 2 * card).long().clamp(0, card - 1)

    t0 = torch.cat([ids(cards[0], batch), torch.full((hot_repeats,), 3), torch.tensor([cards[0] - 1] * 3)])
    b = t0.numel()
    feats = {"t0": t0, "f2a": ids(cards[2], b), "f2b": ids(cards[2], b)}
    feats["f2a"][:2] = 0
    feats["f2b"][-5:] = cards[2] - 1  # a cold row looked up several times
    if pooled:
        lens = torch.randint(0, 4, (b,), generator=g)
        offsets = torch.zeros(b + 1, dtype=torch.long)
        offsets[1:] = torch.cumsum(lens, 0)
        values = ids(cards[1], int(offsets[-1]))
        values[::3] = cards[1] - 2
        values[1::5] = 0
        feats["t1"] = (values.to(device), offsets.to(device))
    else:
        feats["t1"] = ids(cards[1], b)
        feats["t1"][::4] = cards[1] - 1
    return {k: (v if isinstance(v, tuple) else v.to(device)) for k, v in feats.items()}


def _pair(optimizer, hot_rows, pooled=False, pooling="sum", device="cpu", lr=0.05, configs=None,
          cold_access="staged", **kw):
    configs = configs or _configs(pooled, pooling)
    torch.manual_seed(0)
    fused = FusedEmbeddingCollection(configs, optimizer=optimizer, lr=lr, device=device, **kw)
    off = OffloadedEmbeddingCollection(configs, hot_rows=hot_rows, optimizer=optimizer, lr=lr, device=device,
                                       cold_access=cold_access, **kw)
    off.load_from_fused(fused)
    _assert_same(fused, off, optimizer, "initial")
    return fused, off


def _assert_same(fused, off, optimizer, what, atol=1e-6):
    assert fused.step == off.step
    for cfg in fused.configs:
        a, b = fused.table_weight(cfg.name).cpu(), off.table_weight(cfg.name)
        torch.testing.assert_close(b, a, rtol=0, atol=atol, msg=lambda m: f"{what}, {cfg.name} weight: {m}")
        start = fused.table_offsets[cfg.name]
        for key in STATES[optimizer]:
            s = getattr(fused, key)[start:start + cfg.num_embeddings].cpu()
            torch.testing.assert_close(off.table_state(cfg.name, key), s, rtol=0, atol=atol,
                                       msg=lambda m: f"{what}, {cfg.name} {key}: {m}")


def _train_step(collections, feats, step, device):
    """One training step of each collection on ``feats``, with the same output gradient; their outputs."""
    outs = []
    for coll in collections:
        out = coll(feats)
        up = torch.randn(out.shape, generator=torch.Generator().manual_seed(step)).to(device)
        (out * up).sum().backward()
        outs.append(out.detach())
    return outs


def _train(fused, off, optimizer, steps=4, pooled=False, device="cpu", batch=24, cards=CARDS, atol=1e-6):
    for step in range(steps):
        feats = _batch(100 + step, batch=batch, pooled=pooled, cards=cards, device=device)
        outs = _train_step((fused, off), feats, step, device)
        torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=atol, msg=lambda m: f"step {step} output: {m}")
        _assert_same(fused, off, optimizer, f"after step {step}", atol=atol)


@pytest.mark.parametrize("cold_access", COLD_ACCESS)
@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
@pytest.mark.parametrize("hot_rows", [5, 0.3, {"t0": 0, "t1": 50, "t2": 1}, 10**6, 0])
def test_single_hot_matches_fused(optimizer, hot_rows, cold_access):
    fused, off = _pair(optimizer, hot_rows, cold_access=cold_access)
    _train(fused, off, optimizer, atol=0.0)  # single-hot: bit-for-bit


@pytest.mark.parametrize("cold_access", COLD_ACCESS)
@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_pooled_matches_fused(optimizer, pooling, cold_access):
    fused, off = _pair(optimizer, [7, 20, 4], pooled=True, pooling=pooling, cold_access=cold_access)
    _train(fused, off, optimizer, pooled=True)


@pytest.mark.parametrize("cold_access", COLD_ACCESS)
def test_padding_row_in_the_cold_part_stays_zero(cold_access):
    fused, off = _pair("adagrad", 0, pooled=True, cold_access=cold_access)  # every row, padding included, on the host
    _train(fused, off, "adagrad", pooled=True)
    for cfg in off.configs:
        assert torch.count_nonzero(off.table_weight(cfg.name)[0]) == 0
        assert off.table_state(cfg.name, "state_sum")[0] == 0


@pytest.mark.parametrize("cold_access", COLD_ACCESS)
def test_interleaved_forwards_match_fused(cold_access):
    """Two forwards, then their backwards in reverse order: the backward reads the current rows."""
    fused, off = _pair("adam", [3, 10, 2], cold_access=cold_access)
    f1, f2 = _batch(1), _batch(2)
    for coll in (fused, off):
        o1, o2 = coll(f1), coll(f2)
        o2.pow(2).sum().backward()
        o1.sum().backward()
    _assert_same(fused, off, "adam", "interleaved", atol=0.0)


def test_eval_and_dtype_and_outputs():
    fused, off = _pair("adagrad", 4, output="dict", dtype=torch.bfloat16)
    feats = _batch(3)
    with torch.no_grad():
        a, b = fused(feats), off(feats)
    assert a.keys() == b.keys()
    for k in a:
        assert b[k].dtype == torch.bfloat16
        assert torch.equal(a[k], b[k]), k
    _assert_same(fused, off, "adagrad", "after eval")  # no update in eval
    assert off.output_dim == fused.output_dim


def test_sgd_and_sparse_adam_match_nn_embedding():
    """Independent oracle: one table as nn.Embedding(sparse=True) with torch.optim.SGD / SparseAdam."""
    for optimizer in ("sgd", "adam"):
        cfg = EmbeddingConfig("t", 40, 4, padding_idx=None)
        off = OffloadedEmbeddingCollection([cfg], hot_rows=10, optimizer=optimizer, lr=0.1, device="cpu")
        emb = nn.Embedding(40, 4, sparse=True)
        with torch.no_grad():
            emb.weight.copy_(off.table_weight("t"))
        opt = torch.optim.SGD(emb.parameters(), lr=0.1) if optimizer == "sgd" else \
            torch.optim.SparseAdam(emb.parameters(), lr=0.1)
        for step in range(3):
            ids = torch.tensor([1, 2, 2, 15, 15, 15, 39, 9, 10][step:])
            up = torch.randn(ids.numel(), 4, generator=torch.Generator().manual_seed(step))
            (off({"t": ids}) * up).sum().backward()
            opt.zero_grad()
            (emb(ids) * up).sum().backward()
            opt.step()
        torch.testing.assert_close(off.table_weight("t"), emb.weight.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("saved_by, loaded_by", [("staged", "staged"), ("staged", "direct"), ("direct", "staged")])
def test_state_dict_round_trip_and_resume(saved_by, loaded_by):
    """A state dict loads into a collection of either cold access (the same keys and layout)."""
    fused, off = _pair("adam", [5, 5, 5], cold_access=saved_by)
    _train(fused, off, "adam", steps=2)
    sd = off.state_dict()
    assert {"hot_weight", "cold_weight", "hot_exp_avg", "cold_exp_avg", "cold_exp_avg_sq"} <= set(sd)
    other = OffloadedEmbeddingCollection(_configs(), hot_rows=[5, 5, 5], optimizer="adam", lr=0.05, device="cpu",
                                         cold_access=loaded_by)
    other.load_state_dict(sd)  # strict
    _assert_same(fused, other, "adam", "loaded", atol=0.0)
    _train(fused, other, "adam", steps=2)
    mismatched = OffloadedEmbeddingCollection(_configs(), hot_rows=[6, 5, 5], optimizer="adam", device="cpu")
    with pytest.raises((ValueError, RuntimeError), match="hot_rows|size mismatch"):
        mismatched.load_state_dict(sd)


def test_an_offloaded_state_dict_is_refused_by_other_tables_and_leaves_them_unchanged():
    """Tables of other sizes with the same hot and cold totals have state dict tensors of the same
    shapes: a row of one table would land in another. The load is refused before the hot rows or
    the host store are written, naming both layouts."""
    torch.manual_seed(0)
    saved = OffloadedEmbeddingCollection([EmbeddingConfig("user", 10, 4), EmbeddingConfig("item", 20, 4)],
                                         hot_rows=5, device="cpu")
    other = OffloadedEmbeddingCollection([EmbeddingConfig("user", 20, 4), EmbeddingConfig("item", 10, 4)],
                                         hot_rows=5, device="cpu")
    before = {name: t.clone() for name, t in other.state_dict().items() if isinstance(t, torch.Tensor)}
    with pytest.raises(ValueError, match=r"saved by tables \[\('user', 10, 4, 0\), .*this collection has "
                                         r"\[\('user', 20, 4, 0\)"):
        other.load_state_dict(saved.state_dict())
    for name, t in other.state_dict().items():
        if name in before:
            assert torch.equal(t, before[name]), name


@pytest.mark.parametrize("cold_access", COLD_ACCESS)
def test_an_offloaded_collection_built_on_the_meta_device_is_whole_after_to_empty_and_reset(cold_access):
    """The hot rows built on the meta device, ``to_empty(device="cpu")`` (every device tensor
    uninitialized), ``reset_parameters()``: the layout of the hot and cold stores is made from
    the configs and the optimizer state starts as in a collection built on the CPU; after
    ``load_state_dict`` training goes on equal to the fused collection."""
    fused, off = _pair("adagrad", [5, 0, 3], cold_access=cold_access, initial_accumulator_value=0.5)
    _train(fused, off, "adagrad", steps=1)
    fresh = OffloadedEmbeddingCollection(_configs(), hot_rows=[5, 0, 3], optimizer="adagrad",
                                         initial_accumulator_value=0.5, device="cpu", cold_access=cold_access)
    built = OffloadedEmbeddingCollection(_configs(), hot_rows=[5, 0, 3], optimizer="adagrad", lr=0.05,
                                         initial_accumulator_value=0.5, device="meta", cold_access=cold_access)
    built.to_empty(device="cpu").reset_parameters()
    for name, buf in fresh.named_buffers():
        assert torch.equal(dict(built.named_buffers())[name], buf), name
    assert torch.equal(built.cold_state1, fresh.cold_state1)
    built.load_state_dict(off.state_dict())
    _assert_same(fused, built, "adagrad", "loaded", atol=0.0)
    _train(fused, built, "adagrad", steps=2)


@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_padded_lists_match_fused(pooling):
    """A list column padded to a fixed length, ``(B, L)`` ids with padding id 0 (the loader's
    ``lists=``), pooled over rows on both sides of the threshold: the same outputs, weights and
    states as the fused collection, which pools it as ``MultiHotEmbeddings`` does
    (test_torch_embeddings.py)."""
    fused, off = _pair("adagrad", [5, 20, 3], pooled=True, pooling=pooling)
    for step in range(3):
        feats = _batch(200 + step)
        g = torch.Generator().manual_seed(step)
        lists = torch.randint(0, CARDS[1], (feats["t0"].numel(), 4), generator=g)
        feats["t1"] = lists.masked_fill(torch.rand(lists.shape, generator=g) < 0.3, 0)
        outs = _train_step((fused, off), feats, step, "cpu")
        torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=1e-6)
        _assert_same(fused, off, "adagrad", f"after step {step}")


def test_hot_rows_for_budget():
    assert bytes_per_row(8, "sgd") == 32 and bytes_per_row(8, "adagrad") == 36 and bytes_per_row(8, "adam") == 96
    # 100 rows of 32 bytes over tables of 10, 1000, 1000: the small table whole, 45 + 45 the rest
    assert hot_rows_for_budget([1000, 10, 1000], 100 * 32, 8, "sgd") == [45, 10, 45]
    assert hot_rows_for_budget([5, 7], 10**9, 8, "adam") == [5, 7]
    assert hot_rows_for_budget([5, 7], 0, 8, "adam") == [0, 0]
    coll = OffloadedEmbeddingCollection(_configs(), gpu_budget_bytes=30 * 36, optimizer="adagrad", device="cpu")
    assert coll.hot_rows == [10, 10, 10]  # 30 rows: equal shares, none larger than its table
    assert coll.hot_weight.shape == (30, DIM) and coll.cold_weight.shape == (62, DIM)


def test_bad_arguments_and_ids():
    with pytest.raises(ValueError, match="exactly one"):
        OffloadedEmbeddingCollection(_configs(), device="cpu")
    with pytest.raises(ValueError, match="exactly one"):
        OffloadedEmbeddingCollection(_configs(), hot_rows=3, gpu_budget_bytes=10, device="cpu")
    with pytest.raises(ValueError, match="fraction"):
        OffloadedEmbeddingCollection(_configs(), hot_rows=1.5, device="cpu")
    with pytest.raises(KeyError, match="t9"):
        OffloadedEmbeddingCollection(_configs(), hot_rows={"t9": 1}, device="cpu")
    with pytest.raises(ValueError, match="'t1'"):
        OffloadedEmbeddingCollection(_configs(), hot_rows=[1, -1, 1], device="cpu")
    with pytest.raises(ValueError, match="cold_access='uvm'"):
        OffloadedEmbeddingCollection(_configs(), hot_rows=3, device="cpu", cold_access="uvm")
    coll = OffloadedEmbeddingCollection(_configs(), hot_rows=5, device="cpu")
    feats = _batch(0)
    feats["f2b"] = feats["f2b"].clone()
    feats["f2b"][3] = 12
    with pytest.raises(IndexError, match="table 't2'.*index 12"):
        coll(feats)
    feats = _batch(0)
    feats["t0"] = feats["t0"].clone()
    feats["t0"][0] = -1
    with pytest.raises(IndexError, match="table 't0'"):
        coll(feats)
    with pytest.raises(KeyError, match="t1"):
        coll({k: v for k, v in _batch(0).items() if k != "t1"})


def test_offloaded_and_fused_share_one_base_and_plan():
    """Both collections are table-batched: the same row layout, the same plan of a batch."""
    from tabloader.torch.table_batched import TableBatchedCollection

    fused, off = _pair("adagrad", [3, 10, 2], pooled=True)
    assert isinstance(fused, TableBatchedCollection) and isinstance(off, TableBatchedCollection)
    feats = _batch(5, pooled=True)
    a, b = fused.plan(feats), off.plan(feats)
    starts = {"t0": 0, "t1": CARDS[0], "t2": CARDS[0] + CARDS[1]}
    assert off.table_offsets == fused.table_offsets == starts
    for name in ("rows", "bag", "scale", "offsets"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    # the flat rows by hand: each feature's ids plus its table's start, feature after feature
    values, offsets = feats["t1"]
    expect = torch.cat([feats["t0"], values + starts["t1"], feats["f2a"] + starts["t2"], feats["f2b"] + starts["t2"]])
    assert torch.equal(b.rows, expect)
    assert torch.equal(b.offsets[len(feats["t0"]):len(feats["t0"]) + len(offsets)], offsets + len(feats["t0"]))


def test_offloaded_falls_back_to_the_reference_with_one_warning(monkeypatch):
    """Where the kernels are wanted but cannot be loaded (here: TensorFlow already imported), the
    offloaded collection warns once, like the fused one, and runs the reference."""
    import sys
    import warnings

    from tabloader.torch import dispatch

    monkeypatch.setitem(sys.modules, "tensorflow", type(sys)("tensorflow"))
    monkeypatch.delitem(sys.modules, "tabloader.torch.kernels", raising=False)
    monkeypatch.delitem(sys.modules, "triton", raising=False)
    monkeypatch.setattr(dispatch, "_kernels", None)
    monkeypatch.setattr(dispatch, "_warned", set())
    monkeypatch.setattr(dispatch, "triton_interpreting", lambda: True)  # as if kernels were wanted here
    fused, off = _pair("adam", [5, 5, 5], backend="reference")
    auto = OffloadedEmbeddingCollection(_configs(), hot_rows=[5, 5, 5], optimizer="adam", lr=0.05, device="cpu")
    auto.load_from_fused(fused)
    with pytest.warns(RuntimeWarning, match="OffloadedEmbeddingCollection falls back to the PyTorch reference"):
        _train(fused, auto, "adam", steps=1, atol=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _train(fused, auto, "adam", steps=1, atol=0.0)  # no second warning
    with pytest.raises(RuntimeError, match="backend='triton' is not available"):
        OffloadedEmbeddingCollection(_configs(), hot_rows=5, backend="triton", device="cpu")(_batch(0)).sum().backward()


# --------------------------------------------------------------------------------------------
# On every device: hot rows on the device, cold rows in host memory
# --------------------------------------------------------------------------------------------
# sizes per device: realistic on a GPU, small on the CPU (where the same path runs with the host as "device")
DEVICE_CASES = {"cuda": {"cards": [100_000, 1_000_000, 5_000], "dim": 128, "hot": [2_000, 50_000, 5_000],
                         "batch": 16384},
                "cpu": {"cards": [300, 1_000, 50], "dim": 16, "hot": [20, 100, 50], "batch": 256}}


@pytest.mark.parametrize("cold_access", COLD_ACCESS)
@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
@pytest.mark.parametrize("pooled", [False, True])
def test_matches_fused_on_device(device, optimizer, pooled, cold_access):
    case = DEVICE_CASES[device]
    configs = _configs(pooled, cards=case["cards"], dim=case["dim"])
    fused, off = _pair(optimizer, case["hot"], pooled=pooled, device=device, configs=configs, cold_access=cold_access)
    assert off.hot_weight.device.type == device and off.cold_weight.device.type == "cpu"
    # a GPU reads host memory only where it is pinned; direct access pins the store, staging does not
    assert off.cold_weight.is_pinned() == (device == "cuda" and cold_access == "direct")
    _train(fused, off, optimizer, steps=3, pooled=pooled, device=device, batch=case["batch"], cards=case["cards"],
           atol=1e-5)


def _cold_rows_of(off, feats):
    """The host-store rows of a batch's cold lookups, computed here from the thresholds."""
    rows = set()
    for cfg, hot, cold_start in zip(off.configs, off.hot_rows, off._cold_offsets.tolist()):
        for feature in cfg.features:
            ids = feats[feature][0] if isinstance(feats[feature], tuple) else feats[feature]
            rows |= {cold_start + i - hot for i in ids.tolist() if i >= hot}
    return rows


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
@pytest.mark.parametrize("pooled", [False, True])
def test_prefetch_gives_the_same_training_as_no_prefetch(device, optimizer, pooled):
    """prefetch(next batch) before each forward: the prefetched rows were gathered before the current
    backward updated the rows both batches share, so they must be patched -- same bits as without
    (on a GPU up to the kernels' atomic summation order)."""
    atol = 0.0 if device == "cpu" else 1e-5
    fused, plain = _pair(optimizer, [7, 20, 4], pooled=pooled, device=device)
    _, pre = _pair(optimizer, [7, 20, 4], pooled=pooled, device=device)
    batches = [_batch(100 + s, pooled=pooled, device=device) for s in range(5)]
    shared = [_cold_rows_of(pre, a) & _cold_rows_of(pre, b) for a, b in zip(batches, batches[1:])]
    assert all(shared), "consecutive batches must share cold rows for this test to mean anything"
    for step, feats in enumerate(batches):
        if step + 1 < len(batches):
            pre.prefetch(batches[step + 1])
        outs = _train_step((fused, plain, pre), feats, step, device)
        torch.testing.assert_close(outs[2], outs[1], rtol=0, atol=atol)
        for cfg in pre.configs:
            torch.testing.assert_close(pre.table_weight(cfg.name), plain.table_weight(cfg.name), rtol=0, atol=atol)
            for key in STATES[optimizer]:
                torch.testing.assert_close(pre.table_state(cfg.name, key), plain.table_state(cfg.name, key),
                                           rtol=0, atol=atol)
    _assert_same(fused, pre, optimizer, "prefetch vs fused", atol=0.0 if device == "cpu" and not pooled else 1e-5)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_rows_staged_while_earlier_updates_are_still_being_written_back(device, optimizer, monkeypatch):
    """Steps back to back, the worker's scatter into the host store slowed down: each forward
    gathers its cold rows before the previous backward's updated rows are in the store, and must
    patch them from the device -- same training as the fused collection."""
    atol = 0.0 if device == "cpu" else 1e-5
    fused, off = _pair(optimizer, [7, 20, 4], device=device)
    batches = [_batch(200 + s, device=device) for s in range(5)]
    shared = [_cold_rows_of(off, a) & _cold_rows_of(off, b) for a, b in zip(batches, batches[1:])]
    assert all(shared), "consecutive batches must share cold rows for this test to mean anything"
    scatter, pending_seen = off._scatter, []

    def slow_scatter(*args):
        time.sleep(0.05)
        scatter(*args)

    def pending_writes(real=off._pending_writes):
        pending = real()
        pending_seen.append(len(pending))
        return pending

    monkeypatch.setattr(off, "_scatter", slow_scatter)
    monkeypatch.setattr(off, "_pending_writes", pending_writes)
    for step, feats in enumerate(batches):
        outs = _train_step((fused, off), feats, step, device)
        torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=atol, msg=lambda m: f"step {step} output: {m}")
    assert max(pending_seen) >= 1, f"no forward staged rows while a write-back was pending: {pending_seen}"
    _assert_same(fused, off, optimizer, "after steps staged over pending write-backs", atol=atol)


def test_prefetch_of_other_rows_or_before_a_reload_is_not_used():
    """A forward whose cold rows differ from the prefetched ones stages its own; a load_state_dict
    after the prefetch makes the prefetched rows stale."""
    fused, off = _pair("adam", [3, 10, 2])
    off.prefetch(_batch(7))
    for coll in (fused, off):
        coll(_batch(1)).sum().backward()
    _assert_same(fused, off, "adam", "after a mismatched prefetch", atol=0.0)
    fresh = FusedEmbeddingCollection(off.configs, optimizer="adam", lr=0.05)
    off.prefetch(_batch(2))
    off.load_from_fused(fresh)
    for coll in (fresh, off):
        coll(_batch(2)).sum().backward()
    _assert_same(fresh, off, "adam", "after a reload", atol=0.0)


def test_training_with_prefetch_keeps_no_finished_write_back():
    """A forward that takes a prefetch stages nothing, so the write-backs must be let go elsewhere:
    each step's device rows would otherwise be kept for the whole training (a GPU runs out)."""
    _, off = _pair("adam", [7, 20, 4])
    batches = [_batch(100 + s) for s in range(8)]
    for step, feats in enumerate(batches):
        if step + 1 < len(batches):
            off.prefetch(batches[step + 1])
        off(feats).sum().backward()
        for task in list(off._tasks):
            task.result()  # this step's scatter done: the next backward must let it go
        assert len(off._writes) <= 1, f"step {step}: {len(off._writes)} write-backs kept"


def test_a_prefetch_no_forward_takes_is_dropped():
    """A prefetch of rows no forward asks for stops collecting write-backs (and their device rows)
    once backwards have passed it over; training is unchanged."""
    fused, off = _pair("adam", [3, 10, 2])
    off.prefetch(_batch(999))
    for step in range(5):
        _train_step((fused, off), _batch(step), step, "cpu")
        assert sum(len(pre.writes) for pre in off._prefetched) <= 2, f"step {step}"
    assert not off._prefetched
    _assert_same(fused, off, "adam", "after a prefetch no forward took", atol=0.0)


def test_a_failed_prefetch_does_not_stop_the_next_write_back(monkeypatch):
    """The worker's gather of a prefetch fails: the error must not keep the next backward's rows
    from being queued for the host store (the forward that would take the prefetch reports it)."""
    fused, off = _pair("adam", [3, 10, 2])

    def failing_gather(*args):
        raise MemoryError("no pinned memory left")

    monkeypatch.setattr(off, "_gather_to_device", failing_gather)
    off.prefetch(_batch(999))
    for task in list(off._tasks):
        task.exception()  # the prefetch has failed before the step
    for step in range(3):
        _train_step((fused, off), _batch(step), step, "cpu")
    _assert_same(fused, off, "adam", "after a failed prefetch", atol=0.0)
    off.prefetch(_batch(5))
    with pytest.raises(MemoryError, match="pinned"):
        off(_batch(5))


def test_a_failed_write_back_is_raised_after_every_queued_task_finished(monkeypatch):
    """A scatter into the host store fails while later ones are queued: waiting for the queue
    (state_dict, table_weight ...) raises the error only once the later ones are done, so none
    is still writing into the store after the caller saw it."""
    _, off = _pair("sgd", [3, 10, 2])
    scatter, finished = off._scatter, []

    def scatter_first_fails(*args):
        if not finished:
            finished.append("failed")
            raise OSError("scatter failed")
        time.sleep(0.2)
        scatter(*args)
        finished.append("done")

    monkeypatch.setattr(off, "_scatter", scatter_first_fails)
    monkeypatch.setattr(off, "_pending_writes", lambda: [])  # keeps the backwards from reporting it first
    for step in range(2):
        off(_batch(step)).sum().backward()
    with pytest.raises(OSError, match="scatter failed"):
        off.table_weight("t0")
    assert finished == ["failed", "done"]


@pytest.mark.parametrize("cold_access", COLD_ACCESS)
def test_deepcopy_after_prefetch_and_training(cold_access):
    import copy

    fused, off = _pair("adagrad", [3, 10, 2], cold_access=cold_access)
    off.prefetch(_batch(1))
    for coll in (fused, off):
        coll(_batch(0)).sum().backward()
    twin = copy.deepcopy(off)
    for coll in (fused, twin):
        coll(_batch(1)).sum().backward()
    _assert_same(fused, twin, "adagrad", "deep copy", atol=0.0)


@pytest.mark.gpu
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_cuda_forward_waits_for_the_gpu_at_most_twice(optimizer):
    """The offloaded forward's host syncs, counted by torch's sync debug mode: the one torch.unique
    that splits the batch (its output size) and the copy of its rows to the host -- not one per
    nonzero, unique and copy as before."""
    import warnings

    configs = [EmbeddingConfig("a", 100_000, 64), EmbeddingConfig("b", 5_000, 64)]
    coll = OffloadedEmbeddingCollection(configs, hot_rows=[2_000, 5_000], optimizer=optimizer,
                                        validate_indices=False, device="cuda")
    g = torch.Generator().manual_seed(0)
    feats = [{"a": (torch.rand(4096, generator=g) ** 3 * 100_000).long().cuda(),
              "b": torch.randint(0, 5_000, (4096,), generator=g).cuda()} for _ in range(3)]
    for batch in feats[:2]:  # warm-up: Triton compiles, the worker and the side stream start
        coll(batch).sum().backward()
    coll._flush()
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            out = coll(feats[2])
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [str(w.message).splitlines()[0] for w in caught if "synchroniz" in str(w.message).lower()]
    assert 1 <= len(syncs) <= 2, syncs
    out.sum().backward()
    torch.cuda.synchronize()
    assert coll.step == 3


# --------------------------------------------------------------------------------------------
# Direct access: the kernels read and update the cold rows in host memory
# --------------------------------------------------------------------------------------------
def test_direct_access_takes_no_prefetch_and_reads_the_store_in_place():
    """prefetch does nothing (nothing is staged), training matches the fused collection, and the
    host store itself holds each step's updated cold rows when the backward returns."""
    fused, off = _pair("adam", [3, 10, 2], cold_access="direct")
    for step in range(3):
        off.prefetch(_batch(200 + step))
        assert not off._prefetched and not off._tasks
        _train_step((fused, off), _batch(100 + step), step, "cpu")
        start = fused.table_offsets["t0"]
        cold_t0 = fused.weight.detach()[start + 3:start + CARDS[0]]
        assert torch.equal(off.cold_weight[:CARDS[0] - 3], cold_t0)  # no write-back queue in between
    _assert_same(fused, off, "adam", "direct", atol=0.0)


def test_a_collection_pickled_before_direct_access_still_loads_and_trains():
    """A pickle of the collection from before ``cold_access`` existed has neither attribute: the
    class defaults (staged access) stand in."""
    fused, off = _pair("adam", [3, 10, 2])
    state = off.__getstate__()
    for name in ("cold_access", "_cold_locked"):
        del state[name]
    old = OffloadedEmbeddingCollection.__new__(OffloadedEmbeddingCollection)
    old.__setstate__(state)
    assert old.cold_access == "staged"
    _train(fused, old, "adam", steps=2, atol=0.0)


@pytest.mark.parametrize("cold_access", COLD_ACCESS)
def test_half_keeps_the_rows_in_fp32(cold_access):
    """``.half()`` (of a whole model, say) leaves the rows and their state fp32, what the kernels
    and the host store keep; the outputs follow ``dtype``."""
    fused, off = _pair("adam", [3, 10, 2], cold_access=cold_access)
    off.half()
    assert off.hot_weight.dtype == off.hot_exp_avg.dtype == torch.float32 and off.cold_weight.dtype == torch.float32
    _train(fused, off, "adam", steps=2, atol=0.0)


@pytest.mark.parametrize("optimizer", ["adagrad", "adam"])
def test_a_locked_store_starts_and_trains_like_an_ordinary_one(monkeypatch, optimizer):
    """The layout and initial state of the store direct access allocates locked (on a GPU) --
    checked here with the locking itself, which needs CUDA, left out: ordinary memory."""
    import tabloader.torch.offload as offload_module
    import tabloader.torch.page_locked as page_locked

    allocated = []

    def ordinary(shape, dtype=torch.float32):
        allocated.append(tuple(shape))
        return torch.empty(shape, dtype=dtype)

    monkeypatch.setattr(offload_module, "pins_host_memory", lambda device: True)
    monkeypatch.setattr(page_locked, "page_locked_empty", ordinary)
    configs = _configs()
    torch.manual_seed(0)
    fused = FusedEmbeddingCollection(configs, optimizer=optimizer, lr=0.05, initial_accumulator_value=0.1)
    off = OffloadedEmbeddingCollection(configs, hot_rows=[3, 10, 2], optimizer=optimizer, lr=0.05,
                                       initial_accumulator_value=0.1, cold_access="direct")
    cold_rows = sum(CARDS) - 15
    assert allocated == [(cold_rows, DIM)] + ([(cold_rows,)] if optimizer == "adagrad" else [(cold_rows, DIM)] * 2)
    for cfg in configs:  # the states start as the fused collection's
        for key in STATES[optimizer]:
            start = fused.table_offsets[cfg.name]
            torch.testing.assert_close(off.table_state(cfg.name, key),
                                       getattr(fused, key)[start:start + cfg.num_embeddings], rtol=0, atol=0)
    off.load_from_fused(fused)
    _train(fused, off, optimizer, steps=2, atol=0.0)


@pytest.mark.gpu
def test_page_locked_memory_is_registered_for_its_size_and_released():
    """page_locked_empty: pinned host memory a GPU copies from, registered again after being freed
    (the registration ends with the tensor), empty tensors included."""
    from tabloader.torch.page_locked import page_locked_copy, page_locked_empty

    for _ in range(3):  # the same addresses come back from the allocator: no "already registered"
        store = page_locked_empty((1000, 33), torch.float32)
        assert store.is_pinned() and store.shape == (1000, 33) and store.is_contiguous()
        store.copy_(torch.arange(33_000, dtype=torch.float32).view(1000, 33))
        assert torch.equal(store.to("cuda", non_blocking=True).cpu(), store)
        del store
    assert page_locked_empty((0, 4)).shape == (0, 4)
    source = torch.randn(7, 3)
    assert torch.equal(page_locked_copy(source), source)


@pytest.mark.gpu
@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
def test_cuda_direct_access_never_waits_for_the_gpu(optimizer):
    """With the cold rows read in host memory by the kernels, a training step (forward, backward,
    update of hot and cold rows) runs without one host synchronization (torch's sync debug mode),
    and the host store reads back the updated rows afterwards (table_weight waits for the kernels)."""
    import warnings

    configs = [EmbeddingConfig("a", 100_000, 64), EmbeddingConfig("b", 5_000, 64)]
    torch.manual_seed(0)
    fused = FusedEmbeddingCollection(configs, optimizer=optimizer, validate_indices=False, device="cuda")
    coll = OffloadedEmbeddingCollection(configs, hot_rows=[2_000, 1_000], optimizer=optimizer,
                                        validate_indices=False, device="cuda", cold_access="direct")
    coll.load_from_fused(fused)
    g = torch.Generator().manual_seed(0)
    feats = [{"a": (torch.rand(4096, generator=g) ** 3 * 100_000).long().cuda(),
              "b": torch.randint(0, 5_000, (4096,), generator=g).cuda()} for _ in range(3)]
    for batch in feats[:2]:  # warm-up: Triton compiles
        for c in (fused, coll):
            c(batch).sum().backward()
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            coll(feats[2]).sum().backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [str(w.message).splitlines()[0] for w in caught if "synchroniz" in str(w.message).lower()]
    assert syncs == []
    fused(feats[2]).sum().backward()
    _assert_same(fused, coll, optimizer, "direct on cuda", atol=1e-5)


@pytest.mark.gpu
def test_cuda_direct_access_needs_the_kernels_and_pins_a_deep_copy():
    import copy

    with pytest.raises(RuntimeError, match="cold_access='direct' on cuda"):
        OffloadedEmbeddingCollection(_configs(), hot_rows=3, device="cuda", backend="reference", cold_access="direct")
    on_host = OffloadedEmbeddingCollection(_configs(), hot_rows=3, backend="reference", cold_access="direct")
    with pytest.raises(RuntimeError, match="cold_access='direct' on cuda"):
        on_host.cuda()  # moved where the reference cannot reach the host rows
    fused, off = _pair("adam", [3, 10, 2], device="cuda", cold_access="direct")
    twin = copy.deepcopy(off)
    for coll in (fused, twin):
        coll(_batch(1, device="cuda")).sum().backward()
    assert twin.cold_weight.is_pinned() and twin.cold_state1.is_pinned() and twin.cold_state2.is_pinned()
    _assert_same(fused, twin, "adam", "deep copy on cuda", atol=1e-5)


def test_a_fraction_of_hot_rows_is_rounded_up_from_its_written_value():
    """0.07 of 100 rows is 7 (0.07 * 100 is 7.000000000000001 in binary floats, whose ceiling is
    8); 0.071 of 100 rounds up to 8."""
    from tabloader.torch.hot_rows import resolve_hot_rows

    for fraction, rows, expected in ((0.07, 100, 7), (0.14, 100, 14), (0.28, 100, 28), (0.29, 1000, 290),
                                     (0.071, 100, 8), (1.0, 37, 37), (0.0, 37, 0), (1e-9, 37, 1)):
        assert resolve_hot_rows(fraction, None, ["t"], [rows], 4, "sgd") == [expected], fraction


def test_hot_rows_given_as_numpy_integers_are_taken_as_ints():
    """Thresholds computed with NumPy (an array, a list or a mapping of ``np.int64``, one
    ``np.int64`` for all tables) are row counts like Python ints, as ``EmbeddingConfig`` takes
    NumPy sizes; a bool is still refused."""
    np = pytest.importorskip("numpy")
    sizes = np.array(CARDS)
    expected = [min(int(n), 20) for n in CARDS]
    for hot_rows in (np.minimum(sizes, 20), list(np.minimum(sizes, 20)), np.int64(20),
                     {"t0": np.int64(20), "t1": np.int32(20), "t2": np.uint8(20)}):
        coll = OffloadedEmbeddingCollection(_configs(), hot_rows=hot_rows, device="cpu")
        assert coll.hot_rows == expected and all(type(h) is int for h in coll.hot_rows), repr(hot_rows)
        assert coll.hot_weight.shape == (sum(expected), DIM)
    with pytest.raises(ValueError, match="'t1'.*True"):
        OffloadedEmbeddingCollection(_configs(), hot_rows=[1, True, 1], device="cpu")
