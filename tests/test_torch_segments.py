"""The fused update's segments (``tabloader.torch.dispatch.segments``) and its host synchronizations.

The segments are sized by bounds known on the host, so that a training step never waits for the
device to tell the host a size: on the CPU, their contents are compared with a sort by hand in
numpy; on a GPU (``gpu`` marker), a whole forward + backward + update of the fused collection runs
under ``torch.cuda.set_sync_debug_mode("error")``.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tabloader.torch.dispatch import segments  # noqa: E402

pytestmark = pytest.mark.torch


def expected_segments(rows, padding, chunk_size):
    """Per non-padding row touched: its entries in batch order, and its chunks (by hand)."""
    out = {}
    for r in sorted(set(rows.tolist()) - set(padding)):
        entries = np.flatnonzero(rows == r).tolist()
        n = len(entries)
        chunks = [(s, min(chunk_size, n - s)) for s in range(0, n, chunk_size)] if n > chunk_size else []
        out[r] = (entries, chunks)
    return out


def actual_segments(seg):
    """The segments with entries, as ``expected_segments`` lays them out (positions made relative)."""
    perm = seg["perm"].numpy()
    out = {}
    for s in np.flatnonzero(seg["count"].numpy()):
        start, count = int(seg["start"][s]), int(seg["count"][s])
        first, n = int(seg["chunk"][s]), int(seg["nchunks"][s])
        chunks = [(int(seg["chunk_start"][c]) - start, int(seg["chunk_count"][c])) for c in range(first, first + n)]
        out[int(seg["row"][s])] = (perm[start:start + count].tolist(), chunks)
    return out


@pytest.mark.parametrize("chunk_size", [1, 3, 128])
@pytest.mark.parametrize("total_rows", [None, 50])
def test_segments_match_a_sort_by_hand(chunk_size, total_rows):
    rng = np.random.default_rng(chunk_size)
    rows = np.concatenate([rng.zipf(1.3, 700) % 50, np.full(300, 7), np.zeros(40, np.int64)])
    rng.shuffle(rows)
    padding = [0, 31]
    seg = segments(torch.from_numpy(rows), torch.tensor(padding), chunk_size, total_rows)
    expected = expected_segments(rows, padding, chunk_size)
    assert actual_segments(seg) == expected
    # the kernels read the first used_chunks chunks: those of the hot segments, one after another
    assert seg["used_chunks"].tolist() == [sum(len(chunks) for _, chunks in expected.values())]
    hot = seg["nchunks"] > 0
    assert seg["chunk"][hot].tolist() == (seg["nchunks"][hot].cumsum(0) - seg["nchunks"][hot]).tolist()


@pytest.mark.parametrize("rows", [
    [9, 3, 9, 0, 3, 3, 31, 12, 0],  # padding rows 0 and 31 among others
    [4] * 7,  # one segment
    list(range(20, 0, -1)),  # every entry its own segment
    [0, 31, 0, 0],  # padding only
    [],  # no entries
])
@pytest.mark.parametrize("total_rows", [None, 50])
def test_segment_bounds_match_numpy_unique(rows, total_rows):
    """``start``/``count``/``row`` of every segment slot, and ``used_segments``, against
    ``np.unique`` of the sorted rows: the used slots hold the distinct rows in order (padding
    rows with count 0); the slots past them start at ``n`` with count 0."""
    rows = np.asarray(rows, dtype=np.int64)
    padding = [0, 31]
    seg = segments(torch.from_numpy(rows), torch.tensor(padding), chunk_size=2, total_rows=total_rows)
    n = rows.size
    uniq, first, counts = np.unique(np.sort(rows, kind="stable"), return_index=True, return_counts=True)
    used = uniq.size
    counts = np.where(np.isin(uniq, padding), 0, counts)
    assert seg["used_segments"].tolist() == ([used] if n else [])
    assert seg["row"][:used].tolist() == uniq.tolist()
    assert seg["start"].tolist() == first.tolist() + [n] * (n - used)
    assert seg["count"].tolist() == counts.tolist() + [0] * (n - used)


def test_segments_are_sized_by_the_number_of_entries_not_read_back():
    """One segment slot per entry and ``max_chunks`` chunk slots, whatever the ids: sizes the
    host knows without asking the device (the kernels read how many are used on the device)."""
    for rows in ([4, 4, 4, 4, 4, 4], [1, 2, 3, 4, 5, 6], [0, 0, 9, 9, 9, 0]):
        seg = segments(torch.tensor(rows), torch.tensor([0]), chunk_size=2)
        assert {k: v.numel() for k, v in seg.items()} == {
            "perm": 6, "row": 6, "start": 6, "count": 6, "nchunks": 6, "chunk": 6, "chunk_start": 6, "chunk_count": 6,
            "used_segments": 1, "used_chunks": 1}
    seg = segments(torch.tensor([0, 0, 9, 9, 9, 0]), torch.tensor([0]), chunk_size=2)
    assert seg["count"].tolist() == [0, 3, 0, 0, 0, 0]  # padding row 0 and the empty slots: no entries


def test_segments_of_no_entries():
    seg = segments(torch.zeros(0, dtype=torch.int64), torch.tensor([0]), chunk_size=4)
    assert all(v.numel() == 0 for v in seg.values())


@pytest.mark.parametrize("chunk_size", [1, 2, 5, 128])
def test_max_chunks_bounds_the_worst_batches(chunk_size):
    """The most chunks come from rows just over ``chunk_size`` lookups each: 2 chunks per
    ``chunk_size + 1`` entries; every count of entries, split every way tried, stays under it."""
    from tabloader.torch.dispatch import max_chunks

    for n in range(4 * chunk_size + 9):
        worst = 0
        for hot in range(chunk_size + 1, n + 1):  # rows of `hot` lookups each, the rest light
            k = n // hot
            worst = max(worst, k * -(-hot // chunk_size))
        assert worst <= max_chunks(n, chunk_size), (n, worst)


@pytest.mark.gpu
@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
@pytest.mark.parametrize("pooled", [False, True])
def test_cuda_fused_step_makes_no_host_synchronization(optimizer, pooled):
    """After a warm-up step (Triton compiles the kernels), a forward + backward + update of the
    fused collection issues no device-to-host synchronization (id validation off: checking ids
    is one deliberate synchronization per batch)."""
    from tabloader.torch.fused import FusedEmbeddingCollection
    from tabloader.torch.layers import EmbeddingConfig

    g = torch.Generator().manual_seed(0)
    configs = [EmbeddingConfig("a", 1000, 128, pooling="mean"), EmbeddingConfig("b", 50, 128)]
    coll = FusedEmbeddingCollection(configs, optimizer=optimizer, backend="triton", validate_indices=False,
                                    device="cuda")
    batch = 4096
    a = (torch.rand(batch, generator=g) ** 3 * 1000).long()  # skewed: hot rows, and padding row 0
    if pooled:
        lengths = torch.randint(0, 4, (batch,), generator=g)
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
        values = (torch.rand(int(offsets[-1]), generator=g) ** 3 * 1000).long()
        feats = {"a": (values.cuda(), offsets.cuda())}
    else:
        feats = {"a": a.cuda()}
    feats["b"] = torch.randint(0, 50, (batch,), generator=g).cuda()

    def step():
        (coll(feats).float() ** 2).sum().backward()

    step()
    torch.cuda.synchronize()
    before = coll.weight.detach().clone()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert coll.step == 2 and not torch.equal(before, coll.weight.detach())
    assert torch.equal(before[0], coll.weight.detach()[0])  # the padding row is never updated
