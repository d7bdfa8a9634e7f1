"""The lookups of one batch, and their plain PyTorch math: the reference of the Triton kernels.

A table-batched collection (:mod:`tabloader.torch.table_batched`) flattens a batch into one
:class:`LookupPlan` over its single row space; :func:`reference_forward` looks the plan up and
:func:`reference_update` applies the backward pass and the optimizer update in place, with the
update rules stated in :mod:`tabloader.torch.fused`. They are the CPU path of the collections
(``backend="reference"``, or ``"auto"`` where the kernels cannot run) and the oracle the tests
compare the kernels of :mod:`tabloader.torch.kernels` with.

Example:
    >>> import torch
    >>> weight = torch.arange(12.0).view(6, 2)
    >>> plan = LookupPlan(rows=torch.tensor([1, 4, 1]), batch=3, num_features=1)
    >>> reference_forward(weight, plan).tolist()
    [[2.0, 3.0], [8.0, 9.0], [2.0, 3.0]]
    >>> reference_update(weight, plan, torch.ones(3, 2), "sgd", lr=0.5)   # row 1 looked up twice
    >>> weight[1].tolist(), weight[4].tolist()
    ([1.0, 2.0], [7.5, 8.5])
"""

from __future__ import annotations

import dataclasses
import math

import torch

__all__ = ["LookupPlan", "ColdRows", "reference_forward", "reference_update", "adam_step_size", "OPTIMIZERS"]

OPTIMIZERS = ("sgd", "adagrad", "adam")


@dataclasses.dataclass
class LookupPlan:
    """The flattened lookups of one batch over a collection's single row space.

    Entry ``j`` reads flat row ``rows[j]`` (table offset + id), scaled by ``scale[j]``, into
    output row ``bag[j]`` of the ``(batch * num_features, D)`` output (row ``b * F + f``).
    ``bag``/``scale``/``offsets`` are None when every feature is single-hot: then entry ``j``
    *is* output row ``j`` with scale 1. ``offsets`` is the CSR of the entries over the bags in
    feature-major order (bag ``f * B + b``), which is the order the entries are stored in.
    """

    rows: torch.Tensor
    batch: int
    num_features: int
    bag: torch.Tensor | None = None
    scale: torch.Tensor | None = None
    offsets: torch.Tensor | None = None

    @property
    def single_hot(self) -> bool:
        return self.bag is None


@dataclasses.dataclass
class ColdRows:
    """The rows from ``split`` on of a row space, kept in tensors of their own.

    The host-offloaded collection's direct mode keeps its cold rows in page-locked host memory, which
    the kernels read and update in place. The functions that take a ``cold`` argument read
    row ``r`` of the row space from the tensors they are given when ``r < split``, and row
    ``r - split`` of ``weight`` (and of ``state1`` / ``state2``, the optimizer states) otherwise.

    Example:
        >>> hot, cold = torch.zeros(2, 2), torch.ones(3, 2)
        >>> plan = LookupPlan(rows=torch.tensor([1, 2, 4]), batch=3, num_features=1)
        >>> reference_forward(hot, plan, cold=ColdRows(2, cold))[:, 0].tolist()
        [0.0, 1.0, 1.0]
    """

    split: int
    weight: torch.Tensor
    state1: torch.Tensor | None = None
    state2: torch.Tensor | None = None


def reference_forward(weight: torch.Tensor, plan: LookupPlan, dtype: torch.dtype = torch.float32,
                      cold: ColdRows | None = None) -> torch.Tensor:
    """Plain PyTorch forward: ``(batch * num_features, D)`` in ``dtype`` (fp32 accumulation);
    the rows from ``cold.split`` on are read from ``cold`` (see :class:`ColdRows`)."""
    d = weight.shape[1]
    if cold is not None:
        # every entry's row, then the plan over those rows: entry j reads row j
        weight = _entry_rows(weight, cold, plan.rows)
        plan = dataclasses.replace(plan, rows=torch.arange(plan.rows.numel(), device=weight.device))
    if plan.single_hot:
        return weight.index_select(0, plan.rows).to(dtype)
    n_out = plan.batch * plan.num_features
    pooled = torch.nn.functional.embedding_bag(
        plan.rows, weight, plan.offsets, mode="sum", per_sample_weights=plan.scale, include_last_offset=True)
    # feature-major bags -> (batch, feature) rows
    pooled = pooled.view(plan.num_features, plan.batch, d).transpose(0, 1).reshape(n_out, d)
    return pooled.to(dtype)


def _entry_rows(weight: torch.Tensor, cold: ColdRows, rows: torch.Tensor) -> torch.Tensor:
    """``[len(rows), D]``: each entry's row, from ``weight`` below ``cold.split`` and from ``cold`` above."""
    is_cold = rows >= cold.split
    out = torch.empty((rows.numel(), weight.shape[1]), dtype=weight.dtype, device=weight.device)
    for source, at, low in ((weight, torch.nonzero(~is_cold), 0), (cold.weight, torch.nonzero(is_cold), cold.split)):
        at = at.squeeze(1)
        out.index_copy_(0, at, source.index_select(0, rows.index_select(0, at) - low))
    return out


def reference_update(weight: torch.Tensor, plan: LookupPlan, grad: torch.Tensor, optimizer: str, lr: float,
                     state1: torch.Tensor | None = None, state2: torch.Tensor | None = None,
                     padding_rows: torch.Tensor | None = None, eps: float = 1e-8,
                     betas: tuple[float, float] = (0.9, 0.999), step: int = 1, cold: ColdRows | None = None) -> None:
    """Plain PyTorch backward + optimizer update, in place (rules in :mod:`tabloader.torch.fused`).

    ``grad`` is the gradient of the ``(batch * num_features, D)`` output; ``state1`` is the
    row-wise Adagrad accumulator ``[rows]`` or Adam's ``m`` ``[rows, D]``; ``state2`` Adam's
    ``v``; ``step`` the (already incremented) global step used by Adam's bias correction. The
    rows from ``cold.split`` on (``padding_rows`` among them) are those of ``cold``.
    """
    if cold is not None:
        # every row's update depends on that row alone: the rows below the split and those above
        # are updated apart, each with the entries that look it up, in their order
        for side, low in (("hot", 0), ("cold", cold.split)):
            part = (plan.rows >= cold.split) if side == "cold" else (plan.rows < cold.split)
            at = torch.nonzero(part).squeeze(1)
            sub = LookupPlan(plan.rows.index_select(0, at) - low, plan.batch, plan.num_features,
                             at if plan.bag is None else plan.bag.index_select(0, at),
                             None if plan.scale is None else plan.scale.index_select(0, at))
            pads = None
            if padding_rows is not None:
                pads = padding_rows[(padding_rows >= cold.split) == (side == "cold")] - low
            tensors = (cold.weight, cold.state1, cold.state2) if side == "cold" else (weight, state1, state2)
            reference_update(tensors[0], sub, grad, optimizer, lr, tensors[1], tensors[2], pads, eps, betas, step)
        return
    d = weight.shape[1]
    g = grad.reshape(-1, d).float().contiguous()
    rows = plan.rows
    if rows.numel() == 0:
        return
    has_pad = padding_rows is not None and padding_rows.numel() > 0
    if optimizer == "sgd":
        ge = g if plan.bag is None else g.index_select(0, plan.bag)
        if plan.scale is not None:
            ge = ge * plan.scale[:, None]
        # scatter-add straight into the weight (the sum over duplicates is the same g_row_sum);
        # padding rows are restored afterwards: no sort needed on this path
        saved = weight.index_select(0, padding_rows) if has_pad else None
        weight.index_add_(0, rows, ge, alpha=-lr)
        if has_pad:
            weight.index_copy_(0, padding_rows, saved)
        return
    # segment sum: sort the entries by row, then sum each run of equal rows (embedding_bag over
    # the sorted entries is a fast segmented sum on CPU and GPU alike)
    sorted_rows, perm = torch.sort(rows, stable=True)
    uniq, counts = torch.unique_consecutive(sorted_rows, return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    source = perm if plan.bag is None else plan.bag.index_select(0, perm)
    weights = None if plan.scale is None else plan.scale.index_select(0, perm)
    gsum = torch.nn.functional.embedding_bag(source, g, starts, mode="sum", per_sample_weights=weights)
    if has_pad:
        keep = ~torch.isin(uniq, padding_rows)
        uniq, gsum = uniq[keep], gsum[keep]
    if optimizer == "adagrad":
        st = state1.index_select(0, uniq) + gsum.pow(2).mean(dim=1)
        state1.index_copy_(0, uniq, st)
        upd = gsum / (st.sqrt() + eps)[:, None]
        weight.index_add_(0, uniq, upd, alpha=-lr)
    elif optimizer == "adam":
        b1, b2 = betas
        m = state1.index_select(0, uniq)
        v = state2.index_select(0, uniq)
        m = m + (gsum - m) * (1.0 - b1)
        v = v + (gsum * gsum - v) * (1.0 - b2)
        state1.index_copy_(0, uniq, m)
        state2.index_copy_(0, uniq, v)
        step_size = adam_step_size(lr, betas, step)
        weight.index_add_(0, uniq, m / (v.sqrt() + eps), alpha=-step_size)
    else:
        raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {OPTIMIZERS}")


def adam_step_size(lr: float, betas: tuple[float, float], step: int) -> float:
    """``lr * sqrt(1 - beta2**step) / (1 - beta1**step)`` (SparseAdam's bias correction).

    Example:
        >>> round(adam_step_size(0.1, (0.9, 0.999), 1), 6)
        0.031623
    """
    b1, b2 = betas
    return lr * math.sqrt(1.0 - b2 ** step) / (1.0 - b1 ** step)
