"""Sparse features as one keyed jagged batch, in TorchRec's ``KeyedJaggedTensor`` layout.

TorchRec's embedding modules (and :class:`~tabloader.torch.FusedEmbeddingCollection`) take all
sparse features of a batch at once: ``keys`` (the feature names), ``values`` (every key's ids,
key after key), ``lengths`` (``len(keys) * B`` list lengths, key-major) and ``offsets`` (their
running sum, one longer), optionally ``weights`` (one per value). Single-hot columns are lists
of length 1. :func:`keyed_jagged` builds that layout from the loader's per-column tensors with a
fixed number of tensor operations whatever the number of columns (one ``cat`` for the values,
one stacked ``diff`` for the lengths), on the tensors' device.

With ``torchrec`` importable, :func:`keyed_jagged` returns a real
``torchrec.KeyedJaggedTensor``; without it, a :class:`KeyedJaggedBatch`.

Example:
    >>> import torch
    >>> features = {"user": torch.tensor([7, 8]), "items": (torch.tensor([1, 2, 3]), torch.tensor([0, 2, 3]))}
    >>> batch = keyed_jagged(features, ["user", "items"], as_torchrec=False)
    >>> batch.values.tolist(), batch.lengths.tolist(), batch.offsets.tolist()
    ([7, 8, 1, 2, 3], [1, 1, 2, 1], [0, 1, 2, 4, 5])
    >>> [t.tolist() for t in batch["items"]]
    [[1, 2, 3], [0, 2, 3]]
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from typing import Any, Mapping, Sequence

import torch

__all__ = ["KeyedJaggedBatch", "keyed_jagged", "jagged_parts", "jagged_feature", "is_keyed_jagged",
           "torchrec_available"]


@dataclasses.dataclass
class KeyedJaggedBatch:
    """The sparse features of a batch in ``KeyedJaggedTensor`` layout (see the module docstring).

    ``keys``: feature names; ``values``: ``(N,)`` ids, key-major; ``lengths``: ``(len(keys) * B,)``
    int64; ``offsets``: ``(len(keys) * B + 1,)`` int64, ``offsets[0] == 0``; ``weights``: ``(N,)``
    float or None; ``stride``: the batch size ``B``.

    Example:
        >>> b = KeyedJaggedBatch(["a"], torch.tensor([5, 6]), torch.tensor([2, 0]), torch.tensor([0, 2, 2]), stride=2)
        >>> [t.tolist() for t in b["a"]], b.to("cpu").stride
        ([[5, 6], [0, 2, 2]], 2)
    """

    keys: list[str]
    values: torch.Tensor
    lengths: torch.Tensor
    offsets: torch.Tensor
    weights: torch.Tensor | None = None
    stride: int = 0

    def __getitem__(self, key: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Key ``key`` as the loader's ``(values, offsets)`` pair (offsets rebased to 0: a view
        of the values, one subtraction for the offsets)."""
        try:
            k = self.keys.index(key)
        except ValueError:
            raise KeyError(f"no key {key!r} in the batch; keys: {self.keys}") from None
        offsets = self.offsets[k * self.stride:(k + 1) * self.stride + 1]
        start, end = offsets[0], offsets[-1]
        return self.values[start:end], offsets - start

    def to(self, device: Any, non_blocking: bool = False) -> "KeyedJaggedBatch":
        """The batch with every tensor on ``device``."""
        move = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)  # noqa: E731
        return dataclasses.replace(self, values=move(self.values), lengths=move(self.lengths),
                                   offsets=move(self.offsets), weights=move(self.weights))


def keyed_jagged(features: Mapping[str, Any], keys: Sequence[str],
                 weights: Mapping[str, str] | None = None, as_torchrec: bool | None = None,
                 check_lengths: bool = True) -> Any:
    """``features[k]`` for ``k`` in ``keys`` as one keyed jagged batch.

    Args:
        features: the loader's batch: column -> ``(B,)`` int tensor (single-hot) or
            ``(values, offsets)`` (list column, ``B + 1`` offsets).
        keys: the sparse features, in the batch's key order.
        weights: key -> the list column of its per-value weights (same lengths as the key's
            lists); the keys without one get weight 1. None: no weights.
        as_torchrec: a ``torchrec.KeyedJaggedTensor`` (True), a :class:`KeyedJaggedBatch`
            (False), or the former when torchrec can be imported (None).
        check_lengths: compare each weight column's offsets with its key's (a wait for the
            device on a GPU); False where the caller has checked them already (the loader
            does, once per chunk).
    """
    if not keys:
        raise ValueError("a keyed jagged batch needs at least one sparse feature (keys is empty)")
    columns = [_column(features, k) for k in keys]
    batch = _batch_size(columns, keys)
    device = columns[0][0].device
    steps = torch.arange(batch + 1, dtype=torch.int64, device=device)  # a single-hot column's offsets
    values = torch.cat([ids.to(torch.int64) for ids, _ in columns])
    lengths = torch.stack([steps if off is None else off.to(torch.int64) for _, off in columns]).diff(dim=1).reshape(-1)
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64, device=device)
    torch.cumsum(lengths, 0, out=offsets[1:])
    value_weights = None if weights is None else _weights(features, keys, columns, weights, check_lengths)
    if as_torchrec or (as_torchrec is None and torchrec_available()):
        from torchrec import KeyedJaggedTensor

        return KeyedJaggedTensor(list(keys), values, value_weights, lengths=lengths, offsets=offsets, stride=batch)
    return KeyedJaggedBatch(list(keys), values, lengths, offsets, value_weights, batch)


def _column(features: Mapping[str, Any], key: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    if key not in features:
        raise KeyError(f"sparse feature {key!r} is not in the batch; batch columns: {sorted(features)}")
    value = features[key]
    if isinstance(value, tuple):
        return value
    if value.dim() != 1 or value.dtype.is_floating_point:
        raise TypeError(f"sparse feature {key!r} must be integer ids of shape (batch,) or a (values, offsets) "
                        f"list column; got {value.dtype} of shape {tuple(value.shape)}")
    return value, None


def _batch_size(columns: list, keys: Sequence[str]) -> int:
    sizes = {k: (len(ids) if off is None else len(off) - 1) for k, (ids, off) in zip(keys, columns)}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"sparse features have different batch sizes: {sizes}")
    return next(iter(sizes.values()))


def _weights(features: Mapping[str, Any], keys: Sequence[str], columns: list, weights: Mapping[str, str],
             check_lengths: bool = True) -> torch.Tensor:
    """Per-value weights in the values' order: the weight column's values, or ones."""
    unknown = sorted(set(weights) - set(keys))
    if unknown:
        raise ValueError(f"weights for {unknown}, which are not sparse keys {list(keys)}")
    parts = []
    for key, (ids, off) in zip(keys, columns):
        if key not in weights:
            parts.append(torch.ones(ids.shape[0], dtype=torch.float32, device=ids.device))
            continue
        w, w_off = _column(features, weights[key]) if weights[key] in features else (None, None)
        if w is None or w_off is None or off is None or (check_lengths and not torch.equal(w_off, off)):
            raise ValueError(f"weights of {key!r}: column {weights[key]!r} must be a list column of the batch with "
                             f"the same list lengths as {key!r}")
        parts.append(w.to(torch.float32))
    return torch.cat(parts)


def jagged_parts(batch: Any) -> tuple[list[str], torch.Tensor, torch.Tensor, torch.Tensor | None, int]:
    """``(keys, values, offsets, weights, stride)`` of a :class:`KeyedJaggedBatch` or a
    ``torchrec.KeyedJaggedTensor``."""
    if isinstance(batch, KeyedJaggedBatch):
        return batch.keys, batch.values, batch.offsets, batch.weights, batch.stride
    return list(batch.keys()), batch.values(), batch.offsets(), batch.weights_or_none(), batch.stride()


def jagged_feature(batch: Any, key: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Key ``key`` of a :class:`KeyedJaggedBatch` or ``KeyedJaggedTensor`` as ``(values, offsets)``."""
    if isinstance(batch, KeyedJaggedBatch):
        return batch[key]
    jagged = batch[key]
    return jagged.values(), jagged.offsets()


def select_keys(batch: Any, keys: Sequence[str]) -> KeyedJaggedBatch:
    """The keys ``keys`` of a :class:`KeyedJaggedBatch` or ``KeyedJaggedTensor``, in that order,
    with their weights, as a :class:`KeyedJaggedBatch` (one read of the keys' bounds).

    Example:
        >>> b = KeyedJaggedBatch(["a", "b"], torch.tensor([5, 6, 7]), torch.tensor([2, 1]), torch.tensor([0, 2, 3]),
        ...                      torch.tensor([0.5, 0.25, 2.0]), stride=1)
        >>> s = select_keys(b, ["b"])
        >>> s.keys, s.values.tolist(), s.offsets.tolist(), s.weights.tolist()
        (['b'], [7], [0, 1], [2.0])
    """
    all_keys, values, offsets, weights, stride = jagged_parts(batch)
    missing = [k for k in keys if k not in all_keys]
    if missing:
        raise KeyError(f"no key {missing[0]!r} in the batch; keys: {all_keys}")
    positions = [all_keys.index(k) for k in keys]
    bounds = offsets[[p * stride for p in positions] + [(p + 1) * stride for p in positions]].tolist()
    spans = list(zip(bounds[:len(keys)], bounds[len(keys):]))
    lengths = torch.cat([offsets[p * stride + 1:(p + 1) * stride + 1] - offsets[p * stride:(p + 1) * stride]
                         for p in positions]) if keys else offsets[:0]
    new_offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64, device=offsets.device)
    torch.cumsum(lengths, 0, out=new_offsets[1:])
    take = lambda t: None if t is None else torch.cat([t[a:b] for a, b in spans]) if spans else t[:0]  # noqa: E731
    return KeyedJaggedBatch(list(keys), take(values), lengths.to(torch.int64), new_offsets, take(weights), stride)


def is_keyed_jagged(batch: Any) -> bool:
    """True for a :class:`KeyedJaggedBatch` or a ``torchrec.KeyedJaggedTensor``."""
    if isinstance(batch, KeyedJaggedBatch):
        return True
    kjt = sys.modules.get("torchrec.sparse.jagged_tensor")
    return kjt is not None and isinstance(batch, kjt.KeyedJaggedTensor)


_torchrec: list[bool] = []  # the answer of torchrec_available(), once known


def torchrec_available() -> bool:
    """Whether ``torchrec`` can be imported here (it is then, once).

    torchrec imports Triton, and importing Triton for the first time after TensorFlow crashes
    the process: with TensorFlow loaded and Triton not, torchrec is not imported (a warning
    says so) and :class:`KeyedJaggedBatch` is used.
    """
    if not _torchrec:
        if "triton" not in sys.modules and ("tensorflow" in sys.modules or "keras" in sys.modules):
            warnings.warn("torchrec is not imported: it imports Triton, which crashes the process when TensorFlow "
                          "is already loaded; import torchrec before tensorflow to get KeyedJaggedTensor batches",
                          RuntimeWarning, stacklevel=3)
            _torchrec.append(False)  # decided for this process: every batch has the same type
        else:
            try:
                import torchrec  # noqa: F401
            except ImportError:
                _torchrec.append(False)
            else:
                _torchrec.append(True)
    return _torchrec[0]
