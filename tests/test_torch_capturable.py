"""``FusedEmbeddingCollection(capturable=True)``: a training step captured in a CUDA graph.

With ``capturable=True`` the step count and the learning rate live on the device and the update
kernel reads ``[lr, step_size]`` from there, so that a captured step takes each replay's values.
On the CPU: the capturable collection trains exactly as the default one (the reference backend
here; the Triton kernels in the interpreter are ``tests/_fused_cases.py``'s
``capturable_equals_eager``), its ``step``/``lr`` and state dict behave as before, and the
device-side bias correction equals the host formula. On CUDA (``gpu``): the whole step --
forward, ``backward()`` with the fused update -- captured once with ``torch.cuda.graph`` and
replayed on new batches copied into its inputs, with the learning rate changed between replays,
equals the same steps run eagerly by a default collection; a capture the collection cannot
honour is refused with a clear error.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from tabloader.torch.dispatch import device_hyper  # noqa: E402
from tabloader.torch.fused import FusedEmbeddingCollection  # noqa: E402
from tabloader.torch.layers import EmbeddingConfig  # noqa: E402

pytestmark = pytest.mark.torch

CARDS = {"a": 50, "b": 400}
BATCH, DIM = 64, 16


def _configs():
    return [EmbeddingConfig("a", CARDS["a"], DIM), EmbeddingConfig("b", CARDS["b"], DIM, features=("b1", "b2"))]


def _collection(device, optimizer, capturable, backend="auto"):
    torch.manual_seed(0)  # the same initial weights for every collection of a test
    return FusedEmbeddingCollection(_configs(), optimizer=optimizer, lr=0.05, backend=backend, device=device,
                                    validate_indices=False, capturable=capturable, chunk_size=8)


def _batch(seed, device):
    """Skewed ids (hot rows past chunk_size, padding id 0 among them), the same shapes every time."""
    g = torch.Generator().manual_seed(seed)
    return {name: ((torch.rand(BATCH, generator=g) ** 3) * CARDS[name[0]]).long().to(device)
            for name in ("a", "b1", "b2")}


def _upstream(device):
    return torch.randn(BATCH, 3 * DIM, generator=torch.Generator().manual_seed(7)).to(device)


def _train_eagerly(coll, batches, lrs, upstream):
    for feats, lr in zip(batches, lrs):
        coll.lr = lr
        (coll(feats) * upstream).sum().backward()


def assert_trained_alike(graphed, eager) -> None:
    """The rows and optimizer state of a collection trained by graph replays equal those of one
    trained eagerly on the same batches."""
    torch.cuda.synchronize()
    got, want = _trained_state(graphed), _trained_state(eager)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-6, atol=1e-7, msg=name)


def _trained_state(coll):
    return {k: v.detach().cpu().clone() for k, v in coll.state_dict().items() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
def test_capturable_trains_as_the_default_collection(optimizer):
    batches = [_batch(s, "cpu") for s in range(4)]
    lrs = [0.05, 0.02, 0.1, 0.01]
    default, capturable = (_collection("cpu", optimizer, c, backend="reference") for c in (False, True))
    for coll in (default, capturable):
        _train_eagerly(coll, batches, lrs, _upstream("cpu"))
    got, want = _trained_state(capturable), _trained_state(default)
    assert not torch.equal(want["weight"], _trained_state(_collection("cpu", optimizer, False))["weight"])
    assert got.keys() == want.keys()
    for name in want:
        assert torch.equal(got[name], want[name]), name
    assert capturable.step == default.step == 4


def test_step_and_lr_are_kept_on_the_device_and_saved():
    coll = _collection("cpu", "adam", True)
    coll.lr = 0.25
    coll.step = 41
    assert coll.lr == 0.25 and coll._device_lr.tolist() == [0.25]
    assert coll.step == 41 and coll._device_step.tolist() == [41.0]
    assert coll.state_dict()["_extra_state"]["step"] == 41
    restored = _collection("cpu", "adam", True)
    restored.load_state_dict(coll.state_dict())
    assert restored.step == 41 and restored._device_step.tolist() == [41.0]
    default = _collection("cpu", "adam", False)
    default.load_state_dict(coll.state_dict())  # interchangeable with the default collection's
    assert default.step == 41 and not hasattr(default, "_device_step")


def test_a_capturable_collection_built_on_the_meta_device_has_its_lr_and_step_after_to_empty():
    """Built on the meta device and moved by ``to_empty`` (which leaves every tensor
    uninitialized), the learning rate and step that the update reads on the device are the
    host's; loading a state dict then sets the step, and training equals a collection built on
    the CPU."""
    coll = FusedEmbeddingCollection(_configs(), optimizer="adam", lr=0.05, device="meta", validate_indices=False,
                                    capturable=True, chunk_size=8).to_empty(device="cpu")
    coll.reset_parameters()
    assert coll._device_lr.tolist() == [0.05] and coll._device_step.tolist() == [0.0] and coll.step == 0
    trained = _collection("cpu", "adam", True)
    _train_eagerly(trained, [_batch(0, "cpu")], [0.05], _upstream("cpu"))
    coll.load_state_dict(trained.state_dict())
    assert coll.step == 1 and coll._device_step.tolist() == [1.0]
    for c in (coll, trained):
        _train_eagerly(c, [_batch(1, "cpu")], [0.05], _upstream("cpu"))
    assert torch.equal(coll.weight, trained.weight) and torch.equal(coll.exp_avg_sq, trained.exp_avg_sq)


@pytest.mark.parametrize("step", [1, 2, 10, 1000, 10**6])
def test_device_bias_correction_equals_the_host_formula(step):
    lr, (b1, b2) = 0.003, (0.9, 0.999)
    hyper = device_hyper("adam", torch.tensor([lr], dtype=torch.float64), torch.tensor([float(step)],
                         dtype=torch.float64), (b1, b2))
    expected = lr * math.sqrt(1.0 - b2 ** step) / (1.0 - b1 ** step)  # written out: SparseAdam's
    assert hyper.dtype == torch.float32
    assert hyper.tolist() == [torch.tensor(lr, dtype=torch.float32).item(),
                              torch.tensor(expected, dtype=torch.float32).item()]
    assert device_hyper("sgd", torch.tensor([lr], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64),
                        (b1, b2)).tolist()[1] == 0.0


# --- on a GPU: captured and replayed -------------------------------------------------------------

def _capture_step(coll, static, upstream):
    """Warm up on a side stream (kernels compiled, allocator settled), then capture one step."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            (coll(static) * upstream).sum().backward()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (coll(static) * upstream).sum().backward()
    return graph


@pytest.mark.gpu
@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
def test_a_captured_step_replays_as_eager_steps(optimizer):
    upstream = _upstream("cuda")
    graphed, eager = _collection("cuda", optimizer, True), _collection("cuda", optimizer, False)
    static = {name: torch.zeros(BATCH, dtype=torch.int64, device="cuda") for name in ("a", "b1", "b2")}
    graph = _capture_step(graphed, static, upstream)
    # the eager collection takes the same two warm-up steps (padding ids only: the step count moves)
    _train_eagerly(eager, [static, static], [eager.lr, eager.lr], upstream)
    batches, lrs = [_batch(s, "cuda") for s in range(5)], [0.05, 0.02, 0.1, 0.01, 0.07]
    for feats, lr in zip(batches, lrs):
        for name, ids in feats.items():
            static[name].copy_(ids)
        graphed.lr = lr
        graph.replay()
    _train_eagerly(eager, batches, lrs, upstream)
    torch.cuda.synchronize()
    assert graphed.step == eager.step == 7  # 2 warm-up steps + 5 replays (the capture itself runs nothing)
    got, want = _trained_state(graphed), _trained_state(eager)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-6, atol=0.0, msg=name)
    assert not torch.equal(want["weight"], _trained_state(_collection("cuda", optimizer, False))["weight"])


@pytest.mark.gpu
def test_a_step_on_padded_lists_is_captured():
    """A list column padded to a fixed length (``(B, L)`` ids, the loader's ``lists=``) has the
    same shapes at every batch: its bags' offsets are made on the device, nothing is read back,
    and a captured step replays as eager steps."""
    def padded(feats):  # b2 as lists of up to 3 ids, padded with 0
        lists = torch.stack([feats["b2"], feats["b1"].flip(0), torch.zeros_like(feats["b2"])], 1)
        return {**feats, "b2": lists}

    upstream = _upstream("cuda")
    graphed, eager = _collection("cuda", "adam", True), _collection("cuda", "adam", False)
    static = padded({name: torch.zeros(BATCH, dtype=torch.int64, device="cuda") for name in ("a", "b1", "b2")})
    graph = _capture_step(graphed, static, upstream)
    _train_eagerly(eager, [static, static], [eager.lr, eager.lr], upstream)
    batches = [padded(_batch(s, "cuda")) for s in range(3)]
    for feats in batches:
        for name, ids in feats.items():
            static[name].copy_(ids)
        graph.replay()
    _train_eagerly(eager, batches, [eager.lr] * 3, upstream)
    assert_trained_alike(graphed, eager)
    untrained = _trained_state(_collection("cuda", "adam", False))
    assert not torch.equal(_trained_state(eager)["weight"], untrained["weight"])


def _messages(exc):
    """The error and those it was raised during (a failed capture may add its own on exit)."""
    while exc is not None:
        yield str(exc)
        exc = exc.__context__


@pytest.mark.gpu
@pytest.mark.parametrize("capturable, validate, expected", [(False, False, "capturable=True"),
                                                             (True, True, "validate_indices=False")])
def test_a_capture_the_collection_cannot_honour_is_refused(capturable, validate, expected):
    coll = FusedEmbeddingCollection(_configs(), optimizer="adam", device="cuda", capturable=capturable,
                                    validate_indices=validate)
    feats, upstream = _batch(0, "cuda"), _upstream("cuda")
    (coll(feats) * upstream).sum().backward()  # kernels compiled outside the capture
    torch.cuda.synchronize()
    with pytest.raises(RuntimeError) as info:
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            (coll(feats) * upstream).sum().backward()
    assert any(expected in message for message in _messages(info.value)), list(_messages(info.value))


def test_casting_the_collection_keeps_its_step_and_lr_in_float64():
    """``module.to(torch.bfloat16)`` (or ``.half()``) must not round the device step count and
    learning rate: in bf16 the count stops at 256 and Adam's bias correction with it."""
    coll = _collection("cpu", "adam", True)
    coll.lr, coll.step = 0.0123, 1001
    coll.to(torch.bfloat16)
    assert coll._device_step.dtype == coll._device_lr.dtype == torch.float64
    assert coll.step == 1001 and coll.lr == 0.0123 and coll._device_lr.tolist() == [0.0123]


@pytest.mark.gpu
def test_a_step_on_a_keyed_jagged_single_hot_batch_is_captured():
    """DLRM's layout, a keyed jagged batch of single-hot keys, with ``validate_indices=False``:
    finding out that every list has length 1 would read the offsets back, so under capture the
    pooled plan is taken (right for lists of length 1); replays equal eager steps."""
    from tabloader.torch.jagged import KeyedJaggedBatch

    def jagged(feats):
        keys = ["a", "b1", "b2"]
        values = torch.cat([feats[k] for k in keys])
        lengths = torch.ones(len(keys) * BATCH, dtype=torch.int64, device="cuda")
        return KeyedJaggedBatch(keys, values, lengths, torch.arange(len(values) + 1, device="cuda"), stride=BATCH)

    upstream = _upstream("cuda")
    graphed, eager = _collection("cuda", "adam", True), _collection("cuda", "adam", False)
    static = {name: torch.zeros(BATCH, dtype=torch.int64, device="cuda") for name in ("a", "b1", "b2")}
    static_batch = jagged(static)
    graph = _capture_step(graphed, static_batch, upstream)
    _train_eagerly(eager, [static, static], [eager.lr, eager.lr], upstream)
    batches = [_batch(s, "cuda") for s in range(3)]
    for feats in batches:
        static_batch.values.copy_(jagged(feats).values)
        graph.replay()
    _train_eagerly(eager, batches, [eager.lr] * 3, upstream)
    assert_trained_alike(graphed, eager)
