"""Comparison cases of the fused-embedding Triton kernels, shared by two runners.

* On CPU, ``tests/test_torch_kernels.py`` runs this file as a script in a subprocess with
  ``TRITON_INTERPRET=1`` (it must be set before the kernels are decorated, so it cannot run in
  the pytest process, where other modules may already have imported them), at small shapes.
* On CUDA, the ``gpu`` tests of the same file call the cases natively at realistic shapes.

Each case of ``CASES`` (the ``case_*`` functions, plus ``update_<optimizer>_<dtype>`` for every
optimizer and activation dtype; on the host, ``HOST_GRID_CASES`` runs the update cases again with
the persistent kernels on grids of 1 and 3 programs) takes ``device`` and a ``size`` ("small" | "large") and raises
AssertionError on a mismatch. Oracles: the PyTorch reference backend (which the CPU tests
check against ``nn.Embedding`` + ``torch.optim``) and, directly, ``nn.Embedding`` + ``SGD`` /
``SparseAdam``. Importing this module has no side effects.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
import traceback

SIZES = {
    # tables (rows), batch, dim, hot repeats, chunk_size
    "small": {"cards": [30, 50, 12], "batch": 24, "dim": 8, "hot": 300, "chunk": 8, "bags": 3},
    "large": {"cards": [100_000, 1_000_000, 5_000], "batch": 16384, "dim": 128, "hot": 5000, "chunk": 128, "bags": 5},
}


def _torch():
    import torch

    return torch


def _configs(size, pooled=False, pooling="sum"):
    from tabloader.torch.layers import EmbeddingConfig

    s = SIZES[size]
    cards, d = s["cards"], s["dim"]
    return [
        EmbeddingConfig("t0", cards[0], d),
        EmbeddingConfig("t1", cards[1], d, pooling=pooling) if pooled else EmbeddingConfig("t1", cards[1], d),
        EmbeddingConfig("t2", cards[2], d, features=("f2a", "f2b")),
    ]


def _batch(size, device, seed, pooled=False, hot=True, empty=False):
    """A batch with duplicates, one very hot row, padding ids (0) and, pooled, empty bags."""
    torch = _torch()
    s = SIZES[size]
    g = torch.Generator().manual_seed(seed)
    b = 0 if empty else s["batch"]
    cards = s["cards"]

    def ids(card, n):
        # skewed: many repeats of small ids
        x = (torch.rand(n, generator=g) ** 3 * card).long().clamp(0, card - 1)
        return x

    t0 = ids(cards[0], b)
    if hot and b and not pooled:  # pooled batches get their hot row inside the bags instead
        t0 = torch.cat([t0, torch.full((s["hot"],), 3, dtype=torch.long)])
        b = t0.numel()
    feats = {"t0": t0, "f2a": ids(cards[2], b), "f2b": ids(cards[2], b)}
    if b:
        feats["f2a"][:2] = 0  # padding id in a single-hot feature
    if pooled:
        lens = torch.randint(0, s["bags"] + 1, (b,), generator=g)
        offsets = torch.zeros(b + 1, dtype=torch.long)
        offsets[1:] = torch.cumsum(lens, 0)
        values = ids(cards[1], int(offsets[-1]))
        if values.numel() > 4:
            values[1::2] = 5  # a hot row: more lookups than chunk_size
            values[::4] = 0  # padding inside bags
        feats["t1"] = (values.to(device), offsets.to(device))
    else:
        feats["t1"] = ids(cards[1], b)
    return {k: (v if isinstance(v, tuple) else v.to(device)) for k, v in feats.items()}


def _pair(size, device, optimizer, pooled=False, pooling="sum", dtype=None, lr=0.05):
    """The same collection twice: Triton backend and reference backend, equal weights."""
    torch = _torch()
    from tabloader.torch.fused import FusedEmbeddingCollection

    out = []
    for backend in ("triton", "reference"):
        torch.manual_seed(0)
        out.append(FusedEmbeddingCollection(
            _configs(size, pooled, pooling), optimizer=optimizer, lr=lr, backend=backend, device=device,
            chunk_size=SIZES[size]["chunk"], dtype=dtype or torch.float32))
    assert torch.equal(out[0].weight, out[1].weight)
    return out


def _close(a, b, what, rtol=1e-5, atol=1e-6, order=None):
    """``a`` == ``b`` within ``atol + rtol * |b|``, plus ``order`` (per element) where ``a`` and
    ``b`` sum the same float32 gradients in different orders (see :class:`SumOrder`)."""
    a, b = a.detach().float().cpu(), b.detach().float().cpu()  # offloaded tables live on the host
    allowed = atol + rtol * b.abs() + (0.0 if order is None else order.cpu())
    excess = (a - b).abs() - allowed
    if (excess > 0).any():
        diff = (a - b).abs().max().item()
        where = divmod(int(excess.argmax()), a.shape[1]) if a.dim() == 2 else int(excess.argmax())
        raise AssertionError(f"{what}: max abs difference {diff:.3g}; {int((excess > 0).sum())} elements outside "
                             f"the tolerance, the worst at {where}")


U = 2.0 ** -24  # float32's unit roundoff


def sum_order_tolerance(n, magnitude):
    """How far two float32 sums of the same ``n`` terms, ``magnitude`` the sum of their absolute
    values, can lie apart by the order of their additions alone.

    Each sum is within ``n * U * magnitude`` of the exact one, so ``2 (n + 1) U magnitude``
    bounds the difference; past a few terms the rounding errors add up as a random walk, and
    ``4 sqrt(n + 1) U magnitude`` is still far in its tail. It stays small enough that one lost
    or doubled term of average size (``magnitude / n``) is outside it for rows of up to ~26,000
    lookups.
    """
    torch = _torch()
    n = n.float()
    return 2 * U * magnitude * torch.minimum(n + 1, 2 * (n + 1).sqrt())


class SumOrder:
    """Per-element tolerances of a kernel's update against an oracle's, when the two sum each
    row's gradients in a different float32 order (the kernel: fixed tiles and chunks; the oracle:
    float atomics or a sequential sum), carried through the optimizer from the oracle's values.

    * ``sgd``: ``w - lr * sum g`` is one sum of ``n + 1`` terms.
    * ``adagrad`` (row-wise): ``lr * g / sqrt(state)``, differentiated; never more than the
      largest step, ``lr * sqrt(D)``, either way.
    * ``adam``: ``m / sqrt(v)`` moves by at most ``((1 - b1) dG + r (sqrt(1 - b2) dG + ...)) / sqrt(v)``
      for a total uncertainty ``dG`` of the row's gradient sums so far and ``|m / sqrt(v)| <= r``,
      and by at most ``2 r`` either way: where ``v`` is near zero (a gradient summing to almost
      nothing out of large terms) the step's direction is rounding noise, and only that bound holds.

    Call :meth:`step` after every backward with the batch's lookups and the oracle's state.
    """

    def __init__(self, weight, optimizer, lr, betas=(0.9, 0.999)):
        torch = _torch()
        self.optimizer, self.lr, self.betas, self.t = optimizer, lr, betas, 0
        zeros = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        self.weight, self.state1, self.state2, self.grads = zeros, zeros.clone(), zeros.clone(), zeros.clone()

    def step(self, rows, entry_grads, weight, state1=None, state2=None):
        """``rows[j]`` got the (pooling-scaled) gradient ``entry_grads[j]``; ``weight`` and the
        states are the oracle's after the update.

        Computed on the touched rows only (neither side writes the others: their tolerance stays
        0), so that its temporaries are the size of the batch's rows, not of the tables (26
        tables of 6.2M rows x 128: each table-sized temporary is 3.2 GB of GPU memory)."""
        torch = _torch()
        self.t += 1
        if rows.numel() == 0:
            return
        entry_grads = entry_grads.detach().float()
        d = weight.shape[1]
        touched, inverse = torch.unique(rows, return_inverse=True)
        n = torch.bincount(inverse, minlength=touched.numel())[:, None]
        g = entry_grads.new_zeros((touched.numel(), d)).index_add_(0, inverse, entry_grads)
        mag = entry_grads.new_zeros((touched.numel(), d)).index_add_(0, inverse, entry_grads.abs())
        dg = sum_order_tolerance(n, mag)
        w = weight.detach().float()[touched].abs()
        if self.optimizer == "sgd":
            # the oracle adds each lr * g_j into the weight: partial sums within |w_before| + lr * mag
            self.weight[touched] += sum_order_tolerance(n, w + 2 * self.lr * mag)
            return
        if self.optimizer == "adagrad":
            st = state1.detach().float()[touched][:, None]
            dst = (2 * g.abs() * dg + dg * dg).mean(1, keepdim=True)
            s = st.sqrt().clamp(min=1e-12)
            moved = self.lr * (dg / s + g.abs() * dst / (2 * s ** 3))
            self.weight[touched] += moved.clamp(max=self.lr * d ** 0.5) + 4 * U * w
            self.state1[touched] += dst + 4 * U * st
            return
        b1, b2 = self.betas
        v = state2.detach().float()[touched]
        self.grads[touched] += dg
        grads = self.grads[touched]
        self.state1[touched] = (b1 * self.state1[touched] + (1 - b1) * dg
                                + 2 * U * state1.detach().float()[touched].abs())
        self.state2[touched] = b2 * self.state2[touched] + (1 - b2) * (2 * g.abs() * dg + dg * dg) + 2 * U * v
        ratio = (1 - b1) / (1 - b2) ** 0.5 * sum((b1 / b2 ** 0.5) ** k for k in range(self.t))  # >= |m / sqrt(v)|
        size = self.lr * (1 - b2 ** self.t) ** 0.5 / (1 - b1 ** self.t)
        s = v.sqrt().clamp(min=1e-30)
        dr = ((1 - b1) * grads + ratio * ((1 - b2) ** 0.5 * grads + (1 - b2) * grads ** 2 / (2 * s))) / s
        self.weight[touched] += size * dr.clamp(max=2 * ratio) + 4 * U * w

    def of(self, name):
        """The tolerance of the buffer ``name`` ("weight", "state_sum", "exp_avg", "exp_avg_sq")."""
        return {"weight": self.weight, "state_sum": self.state1[:, 0], "exp_avg": self.state1,
                "exp_avg_sq": self.state2}[name]


def _entries(coll, feats, out_grad):
    """The flat rows of ``coll``'s lookups of ``feats`` and each one's (pooling-scaled) gradient."""
    plan = coll.plan(feats)
    g = out_grad.reshape(-1, coll.embedding_dim)
    if plan.bag is not None:
        g = g.index_select(0, plan.bag) * plan.scale[:, None]
    return plan.rows, g


# --------------------------------------------------------------------------------------------
# cases
# --------------------------------------------------------------------------------------------
def case_forward_single(device, size):
    torch = _torch()
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        tri, ref = _pair(size, device, "sgd", dtype=dtype)
        feats = _batch(size, device, 1)
        a, b = tri(feats), ref(feats)
        assert a.dtype == b.dtype == dtype, (a.dtype, b.dtype)
        assert torch.equal(a, b), f"single-hot forward differs for {dtype}"
        # and equals plain indexing of the table views
        for f, feat in enumerate(tri.features):
            cfg = tri._by_feature[feat]
            expect = tri.table_weight(cfg.name)[feats[feat]].to(dtype)
            assert torch.equal(a.view(a.shape[0], -1, tri.embedding_dim)[:, f], expect), feat


def case_forward_pooled(device, size):
    torch = _torch()
    for pooling in ("sum", "mean"):
        for dtype in (torch.float32, torch.bfloat16):
            tri, ref = _pair(size, device, "sgd", pooled=True, pooling=pooling, dtype=dtype)
            feats = _batch(size, device, 2, pooled=True)
            tol = 1e-5 if dtype == torch.float32 else 1e-2
            _close(tri(feats), ref(feats), f"pooled {pooling} {dtype} forward", rtol=tol, atol=tol)


def case_padded_lists(device, size):
    """A list column padded to a fixed length (``(B, L)`` ids, padding id 0, the loader's
    ``lists=``): the kernels' pooled forward and update equal the reference's."""
    torch = _torch()
    s = SIZES[size]
    for pooling in ("sum", "mean"):
        tri, ref = _pair(size, device, "adagrad", pooled=True, pooling=pooling)
        order = SumOrder(ref.weight, "adagrad", ref.lr)
        feats = _batch(size, device, 4)
        g = torch.Generator().manual_seed(5)
        lists = torch.randint(0, s["cards"][1], (feats["t0"].numel(), s["bags"]), generator=g)
        lists[1::2, 0] = 5  # a hot row: more lookups than chunk_size
        feats["t1"] = lists.masked_fill(torch.rand(lists.shape, generator=g) < 0.3, 0).to(device)
        outs = [coll(feats) for coll in (tri, ref)]
        _close(outs[0], outs[1], f"padded {pooling} forward")
        upstream = torch.randn(outs[1].shape, generator=torch.Generator().manual_seed(6)).to(device)
        for out in outs:
            (out * upstream).sum().backward()
        order.step(*_entries(ref, feats, upstream), ref.weight, ref.state_sum)
        _close(tri.weight, ref.weight, f"padded {pooling} weights", rtol=1e-4, atol=1e-6, order=order.of("weight"))


def _train_both(size, device, optimizer, pooled, pooling="sum", steps=3, dtype=None):
    """Train the pair on the same batches; (triton, reference, :class:`SumOrder` of the two)."""
    torch = _torch()
    tri, ref = _pair(size, device, optimizer, pooled=pooled, pooling=pooling, dtype=dtype)
    order = SumOrder(ref.weight, optimizer, ref.lr, ref.betas)
    for step in range(steps):
        feats = _batch(size, device, 10 + step, pooled=pooled, empty=(step == 1))
        for coll in (tri, ref):
            out = coll(feats)
            upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(step)).to(device, out.dtype)
            (out * upstream).sum().backward()
        order.step(*_entries(ref, feats, upstream), ref.weight, *_states(ref))
        assert tri.weight.grad is None and ref.weight.grad is None
    return tri, ref, order


def _states(coll):
    return [getattr(coll, name) for name in ("state_sum", "exp_avg", "exp_avg_sq") if hasattr(coll, name)]


def case_update(device, size):
    """Triton update == reference update: every optimizer, single-hot and pooled, 3 steps."""
    torch = _torch()
    combos = [("sgd", False, "sum"), ("adagrad", False, "sum"), ("adam", False, "sum"),
              ("sgd", True, "sum"), ("adagrad", True, "mean"), ("adam", True, "sum")]
    if size == "large":
        combos += [("sgd", True, "mean"), ("adagrad", True, "sum"), ("adam", True, "mean")]
    for optimizer, pooled, pooling in combos:
        tri, ref, order = _train_both(size, device, optimizer, pooled, pooling)
        what = f"{optimizer} pooled={pooled} {pooling}"
        _close(tri.weight, ref.weight, what + " weights", rtol=1e-4, atol=1e-6, order=order.of("weight"))
        for name, buf in ref.named_buffers():
            if name.startswith("_"):
                continue
            _close(dict(tri.named_buffers())[name], buf, f"{what} {name}", rtol=1e-4, atol=1e-7, order=order.of(name))
        assert tri.step == ref.step == 3
        for cfg in tri.configs:  # padding rows untouched (zero)
            assert torch.count_nonzero(tri.table_weight(cfg.name)[0]) == 0, f"{what}: padding row of {cfg.name} moved"


def _update_in_dtype(device, size, optimizer, dtype_name):
    """Triton update == reference update for one optimizer with activations (outputs and
    upstream gradients) in one dtype: single-hot and pooled, 2 steps, weights and states."""
    torch = _torch()
    dtype = getattr(torch, dtype_name)
    rtol, atol = (1e-4, 1e-6) if dtype == torch.float32 else (1e-3, 1e-5)
    for pooled in (False, True):
        tri, ref, order = _train_both(size, device, optimizer, pooled, dtype=dtype, steps=2)
        what = f"{optimizer} {dtype_name} pooled={pooled}"
        _close(tri.weight, ref.weight, what + " weights", rtol=rtol, atol=atol, order=order.of("weight"))
        for name, buf in ref.named_buffers():
            if not name.startswith("_"):
                _close(dict(tri.named_buffers())[name], buf, f"{what} {name}", rtol=rtol, atol=atol,
                       order=order.of(name))


def case_half_gradients(device, size):
    """fp16 / bf16 activations: gradients are accumulated in fp32, like the reference."""
    torch = _torch()
    for dtype in (torch.float16, torch.bfloat16):
        tri, ref, order = _train_both(size, device, "adagrad", pooled=True, dtype=dtype, steps=2)
        _close(tri.weight, ref.weight, f"adagrad {dtype} weights", rtol=1e-3, atol=1e-5, order=order.of("weight"))


def case_sgd_equals_torch(device, size):
    """Triton SGD == nn.Embedding + torch.optim.SGD on the same batches (hot row, duplicates)."""
    torch = _torch()
    from tabloader.torch.fused import FusedEmbeddingCollection
    from tabloader.torch.layers import EmbeddingConfig

    s = SIZES[size]
    card, d = s["cards"][1], s["dim"]
    torch.manual_seed(0)
    coll = FusedEmbeddingCollection([EmbeddingConfig("t", card, d, padding_idx=None)], optimizer="sgd", lr=0.1,
                                    backend="triton", device=device, chunk_size=s["chunk"])
    emb = torch.nn.Embedding(card, d, device=device)
    with torch.no_grad():
        emb.weight.copy_(coll.weight)
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    order = SumOrder(emb.weight, "sgd", 0.1)
    for step in range(3):
        ids = _batch(size, device, 20 + step)["t0"].clamp(max=card - 1)
        up = torch.randn(ids.numel(), d, generator=torch.Generator().manual_seed(step)).to(device)
        (coll({"t": ids}) * up).sum().backward()
        (emb(ids) * up).sum().backward()
        opt.step()
        opt.zero_grad()
        order.step(ids, up, emb.weight)
    _close(coll.weight, emb.weight, "SGD vs torch.optim.SGD", rtol=1e-5, atol=1e-6, order=order.of("weight"))


def case_adam_equals_sparseadam(device, size):
    """Triton lazy Adam == nn.Embedding(sparse=True) + torch.optim.SparseAdam."""
    torch = _torch()
    from tabloader.torch.fused import FusedEmbeddingCollection
    from tabloader.torch.layers import EmbeddingConfig

    s = SIZES[size]
    card, d = s["cards"][1], s["dim"]
    torch.manual_seed(0)
    coll = FusedEmbeddingCollection([EmbeddingConfig("t", card, d, padding_idx=None)], optimizer="adam", lr=0.01,
                                    backend="triton", device=device, chunk_size=s["chunk"])
    emb = torch.nn.Embedding(card, d, sparse=True, device=device)
    with torch.no_grad():
        emb.weight.copy_(coll.weight)
    opt = torch.optim.SparseAdam(emb.parameters(), lr=0.01)
    order = SumOrder(emb.weight, "adam", 0.01, coll.betas)
    for step in range(3):
        ids = _batch(size, device, 30 + step)["t0"].clamp(max=card - 1)
        up = torch.randn(ids.numel(), d, generator=torch.Generator().manual_seed(step)).to(device)
        (coll({"t": ids}) * up).sum().backward()
        (emb(ids) * up).sum().backward()
        opt.step()
        opt.zero_grad()
        state = opt.state[emb.weight]
        order.step(ids, up, emb.weight, state["exp_avg"].to_dense(), state["exp_avg_sq"].to_dense())
    _close(coll.weight, emb.weight, "Adam vs SparseAdam", rtol=1e-4, atol=1e-6, order=order.of("weight"))
    _close(coll.exp_avg, opt.state[emb.weight]["exp_avg"].to_dense(), "Adam m vs SparseAdam", rtol=1e-4, atol=1e-7,
           order=order.of("exp_avg"))


def case_offloaded_update(device, size):
    """The offloaded collection's Triton update (hot rows in place, cold rows staged, or read and
    updated in host memory by the kernels with ``cold_access="direct"``) == the fused collection's
    reference update: weights and optimizer states, 3 steps with an empty batch."""
    torch = _torch()
    from tabloader.torch.fused import FusedEmbeddingCollection
    from tabloader.torch.offload import COLD_ACCESS, OffloadedEmbeddingCollection

    s = SIZES[size]
    states = {"sgd": [], "adagrad": ["state_sum"], "adam": ["exp_avg", "exp_avg_sq"]}
    runs = [(o, p, a, 0.3) for o, p in (("sgd", False), ("adagrad", True), ("adam", False), ("adam", True))
            for a in COLD_ACCESS]
    # direct access with every row cold (split 0, the padding rows cold) and with none (an empty host store)
    runs += [("adagrad", True, "direct", 0), ("adam", False, "direct", 1.0)]
    for optimizer, pooled, cold_access, hot_rows in runs:
        torch.manual_seed(0)
        ref = FusedEmbeddingCollection(_configs(size, pooled), optimizer=optimizer, lr=0.05, backend="reference",
                                       device=device, chunk_size=s["chunk"])
        off = OffloadedEmbeddingCollection(_configs(size, pooled), hot_rows=hot_rows, optimizer=optimizer, lr=0.05,
                                           backend="triton", device=device, chunk_size=s["chunk"],
                                           cold_access=cold_access)
        off.load_from_fused(ref)
        order = SumOrder(ref.weight, optimizer, ref.lr, ref.betas)
        what = f"offloaded {cold_access} {optimizer} pooled={pooled} hot_rows={hot_rows}"
        for step in range(3):
            feats = _batch(size, device, 40 + step, pooled=pooled, empty=(step == 1))
            outs = []
            for coll in (off, ref):
                outs.append(coll(feats))
                up = torch.randn(outs[-1].shape, generator=torch.Generator().manual_seed(step)).to(device,
                                                                                                outs[-1].dtype)
                (outs[-1] * up).sum().backward()
            if outs[1].numel():
                _close(outs[0], outs[1], f"{what} step {step} output")  # forwards read the same rows
            order.step(*_entries(ref, feats, up), ref.weight, *_states(ref))
        assert off.step == ref.step == 3, what
        for cfg in ref.configs:
            rows = slice(ref.table_offsets[cfg.name], ref.table_offsets[cfg.name] + cfg.num_embeddings)
            _close(off.table_weight(cfg.name), ref.table_weight(cfg.name), f"{what} {cfg.name}", rtol=1e-4, atol=1e-6,
                   order=order.of("weight")[rows])
            for key in states[optimizer]:
                _close(off.table_state(cfg.name, key), getattr(ref, key)[rows], f"{what} {cfg.name} {key}",
                       rtol=1e-4, atol=1e-7, order=order.of(key)[rows])


def case_weights_gradient(device, size):
    """Per-value weights of a keyed jagged batch that require grad: the gradient the Triton
    collections give them (the fused one, and the offloaded one staged and with direct access)
    == the reference's (itself checked against ``F.embedding_bag(per_sample_weights=...)`` in
    tests/test_torch_jagged.py), while the update runs in the same backward."""
    torch = _torch()
    from tabloader.torch.fused import FusedEmbeddingCollection
    from tabloader.torch.jagged import keyed_jagged
    from tabloader.torch.offload import OffloadedEmbeddingCollection

    s = SIZES[size]
    torch.manual_seed(0)
    ref = FusedEmbeddingCollection(_configs(size, True, "mean"), optimizer="adagrad", lr=0.05, backend="reference",
                                   device=device, chunk_size=s["chunk"])
    colls = {"reference": ref}
    colls["triton"] = FusedEmbeddingCollection(_configs(size, True, "mean"), optimizer="adagrad", lr=0.05,
                                               backend="triton", device=device, chunk_size=s["chunk"])
    colls["triton"].load_state_dict(ref.state_dict())
    for cold_access in ("staged", "direct"):
        colls[cold_access] = OffloadedEmbeddingCollection(
            _configs(size, True, "mean"), hot_rows=0.3, optimizer="adagrad", lr=0.05, backend="triton",
            device=device, chunk_size=s["chunk"], cold_access=cold_access).load_from_fused(ref)
    feats = _batch(size, device, 60, pooled=True)
    batch = keyed_jagged(feats, ref.features, as_torchrec=False)
    weights = torch.rand(batch.values.numel(), generator=torch.Generator().manual_seed(61)).to(device) - 0.25
    grads = {}
    for name, coll in colls.items():
        w = weights.clone().requires_grad_(True)
        out = coll(dataclasses.replace(batch, weights=w))
        up = torch.randn(out.shape, generator=torch.Generator().manual_seed(62)).to(device)
        (out * up).sum().backward()
        grads[name] = w.grad
    assert grads["reference"].abs().sum() > 0
    for name in ("triton", "staged", "direct"):
        _close(grads[name], grads["reference"], f"{name} weights gradient", rtol=1e-4, atol=1e-5)


def case_deterministic(device, size):
    """Two identical runs give bitwise-identical weights (no atomics on the weights)."""
    torch = _torch()
    results = []
    for _ in range(2):
        tri, _ref, _order = _train_both(size, device, "adagrad", pooled=True, steps=2)
        results.append(tri.weight.detach().clone())
    assert torch.equal(results[0], results[1]), "fused update is not deterministic"


def case_bounds(device, size):
    """An out-of-range id is refused before any kernel runs, naming the table."""
    torch = _torch()
    tri, _ = _pair(size, device, "sgd")
    feats = _batch(size, device, 3)
    feats["f2b"] = feats["f2b"].clone()
    feats["f2b"][-1] = SIZES[size]["cards"][2]
    before = tri.weight.detach().clone()
    try:
        tri(feats)
    except IndexError as exc:
        assert "'t2'" in str(exc) and "f2b" in str(exc), str(exc)
    else:
        raise AssertionError("no IndexError for an out-of-range id")
    assert torch.equal(before, tri.weight)


def case_grid_does_not_change_results(device, size):
    """The persistent update kernels give the same weights and states bit for bit on every grid:
    1 and 3 programs (each looping over many segments and chunks), the default, and one program
    per segment slot (the launch before the persistent one): every optimizer (each with another
    activation dtype), single-hot and pooled, with hot rows split into chunks and padding rows."""
    torch = _torch()
    from tabloader.torch import dispatch

    for optimizer, dtype in (("sgd", torch.float32), ("adagrad", torch.float16), ("adam", torch.bfloat16)):
        for pooled in (False, True):
            coll, _ = _pair(size, device, optimizer, pooled=pooled, pooling="mean", dtype=dtype)
            feats = _batch(size, device, 50, pooled=pooled, hot=False)
            if not pooled:  # a hot row, with more lookups than chunk_size (the pooled bags have one)
                feats["t1"][::2] = 5
            plan = coll.plan(feats)
            seg = dispatch.segments(plan.rows, coll._padding_rows, coll.chunk_size)
            assert seg["used_chunks"].item() > 0, "no hot row: the chunks would go untested"
            grad = torch.randn(plan.batch * plan.num_features, coll.embedding_dim,
                               generator=torch.Generator().manual_seed(1)).to(device, dtype)
            results = {}
            for programs in (1, 3, None, plan.rows.numel()):
                weight = coll.weight.detach().clone()
                states = [getattr(coll, name).clone() for name in ("state_sum", "exp_avg", "exp_avg_sq")
                          if hasattr(coll, name)]
                s1, s2 = (states + [None, None])[:2]
                dispatch.update(coll._kernels_for(weight.device), weight, s1, s2, plan, grad, coll._padding_rows,
                                optimizer=optimizer, lr=0.05, eps=coll.eps, betas=coll.betas, step=1,
                                chunk_size=coll.chunk_size, programs=programs)
                results[programs] = [weight] + states
            one_per_slot = results.pop(plan.rows.numel())
            assert not torch.equal(one_per_slot[0], coll.weight), "the update changed nothing"
            for programs, got in results.items():
                for a, b in zip(got, one_per_slot):
                    assert torch.equal(a, b), f"{optimizer} {dtype} pooled={pooled}: programs={programs} differs"


def case_capturable_equals_eager(device, size):
    """``capturable=True`` (learning rate and step count on the device, read by the update kernel)
    trains exactly as the default: every optimizer, single-hot and pooled, 3 steps with the
    learning rate changed between steps, the step counted; its state dict loads into a default
    collection and back."""
    torch = _torch()
    from tabloader.torch.fused import FusedEmbeddingCollection

    for optimizer in ("sgd", "adagrad", "adam"):
        for pooled in (False, True):
            colls = []
            for capturable in (False, True):
                torch.manual_seed(0)
                colls.append(FusedEmbeddingCollection(
                    _configs(size, pooled), optimizer=optimizer, lr=0.05, backend="triton", device=device,
                    chunk_size=SIZES[size]["chunk"], validate_indices=False, capturable=capturable))
            eager, graphable = colls
            start = eager.weight.detach().clone()
            for step in range(3):
                feats = _batch(size, device, 20 + step, pooled=pooled)
                for coll in colls:
                    coll.lr = 0.05 / (step + 1)
                    out = coll(feats)
                    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(step)).to(device)
                    (out * upstream).sum().backward()
            what = f"{optimizer} pooled={pooled}"
            assert not torch.equal(eager.weight, start), f"{what}: the updates changed nothing"
            assert graphable.step == eager.step == 3, f"{what}: step {graphable.step}, expected 3"
            for (name, a), (_, b) in zip(graphable.state_dict().items(), eager.state_dict().items()):
                if isinstance(a, torch.Tensor):  # the learning rate and bias correction: computed apart, same float32
                    _close(a, b, f"{what} {name}", rtol=1e-6, atol=0.0)
            restored = FusedEmbeddingCollection(_configs(size, pooled), optimizer=optimizer, backend="triton",
                                                device=device, capturable=True)
            restored.load_state_dict(eager.state_dict())
            assert restored.step == 3 and restored._device_step.item() == 3.0, f"{what}: step not restored"


def zipf_batch(device):
    """26 tables, 65536 x Zipf ids, dim 128, 2 steps: triton == reference for every optimizer;
    SGD == nn.Embedding + torch.optim.SGD table by table (CUDA only: 6.2M rows)."""
    torch = _torch()
    from tabloader.torch.fused import FusedEmbeddingCollection
    from tabloader.torch.layers import EmbeddingConfig

    cards = [1000 * (i + 1) ** 2 for i in range(26)]
    configs = [EmbeddingConfig(f"C{i}", c, 128) for i, c in enumerate(cards)]
    g = torch.Generator().manual_seed(0)
    batch = 65536
    feats = {f"C{i}": (torch.rand(batch, generator=g) ** 4 * c).long().clamp(1, c - 1).to(device)
             for i, c in enumerate(cards)}
    up = torch.randn(batch, 26 * 128, generator=g).to(device)
    for optimizer in ("sgd", "adagrad", "adam"):
        colls = []
        for backend in ("triton", "reference"):
            torch.manual_seed(0)
            coll = FusedEmbeddingCollection(configs, optimizer=optimizer, lr=0.01, backend=backend, device=device)
            colls.append(coll)
        order = SumOrder(colls[1].weight, optimizer, 0.01, colls[1].betas)
        for _ in range(2):
            for coll in colls:
                (coll(feats) * up).sum().backward()
            order.step(*_entries(colls[1], feats, up), colls[1].weight, *_states(colls[1]))
        _close(colls[0].weight, colls[1].weight, f"zipf {optimizer}", rtol=1e-4, atol=1e-5, order=order.of("weight"))
        del colls, order
    # SGD against nn.Embedding + torch.optim.SGD, table by table
    torch.manual_seed(0)
    coll = FusedEmbeddingCollection(configs, optimizer="sgd", lr=0.01, device=device)
    embs = torch.nn.ModuleList(torch.nn.Embedding(c, 128, padding_idx=0, device=device) for c in cards)
    with torch.no_grad():
        for i, e in enumerate(embs):
            e.weight.copy_(coll.table_weight(f"C{i}"))
    opt = torch.optim.SGD(embs.parameters(), lr=0.01)
    (coll(feats) * up).sum().backward()
    (torch.cat([e(feats[f"C{i}"]) for i, e in enumerate(embs)], 1) * up).sum().backward()
    opt.step()
    for i, e in enumerate(embs):
        order = SumOrder(e.weight, "sgd", 0.01)
        order.step(feats[f"C{i}"], up[:, i * 128:(i + 1) * 128], e.weight)
        _close(coll.table_weight(f"C{i}"), e.weight, f"zipf SGD vs torch.optim.SGD C{i}", rtol=1e-4, atol=1e-5,
               order=order.of("weight"))


CASES = {name[5:]: fn for name, fn in sorted(globals().items()) if name.startswith("case_")}
# every optimizer in every activation dtype, one case each (natively on CUDA; the interpreter on CPU)
CASES.update({f"update_{optimizer}_{dtype}": functools.partial(_update_in_dtype, optimizer=optimizer, dtype_name=dtype)
              for optimizer in ("sgd", "adagrad", "adam") for dtype in ("float32", "float16", "bfloat16")})


def _on_host_grid(case, device, size, programs):
    """``case`` with the persistent kernels' grid off the GPU set to ``programs``."""
    from tabloader.torch import kernels

    default, kernels.HOST_PROGRAMS = kernels.HOST_PROGRAMS, programs
    try:
        case(device, size)
    finally:
        kernels.HOST_PROGRAMS = default


# the interpreter's cases again with tiny grids, each program looping over many segments and chunks
# (on a GPU, the grid is the device's; case_grid_does_not_change_results sets it there)
HOST_GRID_CASES = {f"{name}_programs{programs}": functools.partial(_on_host_grid, CASES[name], programs=programs)
                   for name in CASES if name.startswith("update_") for programs in (1, 3)}


def run_all(device: str, size: str, names=None) -> dict[str, str]:
    """Run the cases (by default all of ``CASES``, and ``HOST_GRID_CASES`` on the host); map
    name -> "ok" or the formatted failure."""
    results = {}
    for name in names or (list(CASES) + (list(HOST_GRID_CASES) if device == "cpu" else [])):
        try:
            {**CASES, **HOST_GRID_CASES}[name](device, size)
            results[name] = "ok"
        except Exception:  # report every case, not only the first failure
            results[name] = traceback.format_exc()
    return results


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("run with TRITON_INTERPRET=1 (the kernels must be decorated in interpreter mode)")
    import torch

    torch.set_num_threads(1)
    names = sys.argv[1:] or None
    print(json.dumps(run_all("cpu", "small", names)))
