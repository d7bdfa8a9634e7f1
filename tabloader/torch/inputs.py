"""The loader's feature dict as embedding input: find a feature, split it, check it.

A batch from :class:`tabloader.torch.Loader` holds an int ``(B,)`` tensor per single-hot
categorical column and a ``(values, offsets)`` pair (offsets of length ``B + 1``) per list
column, or ``(B, L)`` ids for a list column padded to a fixed length (``lists=``). Every embedding layer takes its ids from there through these functions, so that a bad
batch gives the same error, naming the feature and its table, whichever layer reads it.

Example:
    >>> import torch
    >>> ids, offsets = split_feature((torch.tensor([3, 5, 7]), torch.tensor([0, 2, 3])), "genres", "g")
    >>> ids.tolist(), offsets.tolist()
    ([3, 5, 7], [0, 2, 3])
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from tabloader.torch.config import EmbeddingConfig

__all__ = ["get_feature", "split_feature", "padded_bags", "check_id_dtype", "check_index_range", "check_id_bounds",
           "check_offsets"]


def get_feature(features: Mapping[str, Any], name: str, table: str) -> Any:
    """``features[name]``, or a KeyError naming the feature, its table and the batch's columns."""
    try:
        return features[name]
    except KeyError:
        raise KeyError(
            f"feature {name!r} (embedding table {table!r}) is not in the batch; "
            f"batch columns: {sorted(features)}") from None


def split_feature(value: Any, name: str, table: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(ids, None)`` for a single-hot tensor, ``(values, offsets)`` for a list feature -- given as
    that pair, or padded to a fixed length as ``(B, L)`` ids (the loader's ``lists={"col": L}``;
    see :func:`padded_bags`); dtypes checked."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"feature {name!r}: a list feature must be a (values, offsets) pair, got {len(value)} items")
        values, offsets = value
        check_id_dtype(values, name, table, "values")
        check_id_dtype(offsets, name, table, "offsets")
        if values.dim() != 1 or offsets.dim() != 1:
            raise ValueError(f"feature {name!r}: values and offsets must be 1-D, got shapes "
                             f"{tuple(values.shape)} and {tuple(offsets.shape)}")
        if offsets.numel() < 1:
            raise ValueError(f"feature {name!r}: offsets must have batch_size + 1 entries, got 0")
        if values.device != offsets.device:
            raise ValueError(f"feature {name!r}: values on {values.device} but offsets on {offsets.device}")
        return values, offsets
    check_id_dtype(value, name, table, "ids")
    if value.dim() == 2 and value.shape[1] == 1:
        value = value[:, 0]
    if value.dim() == 2:
        return padded_bags(value)
    if value.dim() != 1:
        raise ValueError(f"feature {name!r}: ids must have shape (batch,) (single-hot) or (batch, length) (lists "
                         f"padded to a fixed length), got {tuple(value.shape)}")
    return value, None


def padded_bags(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A list column padded to a fixed length, ``(B, L)`` ids, as ``(values, offsets)``: bag ``b``
    is row ``b``, whose padding ids the pooling leaves out (as ``nn.EmbeddingBag`` does with 2-D
    input). Shapes depend on ``B`` and ``L`` alone, and nothing is read back from the device, so a
    CUDA graph captures it.

    Example:
        >>> values, offsets = padded_bags(torch.tensor([[3, 5, 0], [0, 0, 7]]))
        >>> values.tolist(), offsets.tolist()
        ([3, 5, 0, 0, 0, 7], [0, 3, 6])
    """
    batch, length = ids.shape
    offsets = torch.arange(batch + 1, dtype=torch.int64, device=ids.device) * length
    return ids.reshape(-1), offsets


def check_id_dtype(t: Any, name: str, table: str, what: str) -> None:
    """``t`` must be an int64 or int32 tensor (encoded category ids, or offsets)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"feature {name!r} (table {table!r}): {what} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in (torch.int64, torch.int32):
        raise TypeError(
            f"feature {name!r} (table {table!r}): {what} must be int64 or int32 (encoded category ids), "
            f"got {t.dtype}")


def check_index_range(ids: torch.Tensor, feature: str, cfg: EmbeddingConfig) -> None:
    """Raise an IndexError naming the table if an id is outside ``[0, num_embeddings)`` (one device sync)."""
    if ids.numel() == 0:
        return
    lo, hi = torch.stack([ids.min(), ids.max()]).tolist()
    check_id_bounds(lo, hi, feature, cfg)


def check_id_bounds(lo: int, hi: int, feature: str, cfg: EmbeddingConfig) -> None:
    """The IndexError of :func:`check_index_range`, from the ids' minimum and maximum already on the host."""
    if lo < 0 or hi >= cfg.num_embeddings:
        bad = lo if lo < 0 else hi
        raise IndexError(
            f"embedding table {cfg.name!r} (feature {feature!r}): index {bad} is out of range "
            f"[0, {cfg.num_embeddings}); encode the column with the fitted workflow, or raise "
            "num_embeddings")


def check_offsets(values: torch.Tensor, offsets: torch.Tensor, feature: str) -> None:
    """Offsets must start at 0, never decrease and end at ``len(values)`` (one device sync)."""
    n = values.numel()
    first, last, decreasing = torch.stack([
        offsets[0], offsets[-1], (offsets.diff() < 0).any().to(offsets.dtype)]).tolist()
    if first != 0 or last != n or decreasing:
        raise ValueError(
            f"feature {feature!r}: offsets must start at 0, be non-decreasing and end at len(values)={n}; "
            f"got first={first}, last={last}{', decreasing' if decreasing else ''}")
