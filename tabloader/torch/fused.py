"""All embedding tables in one buffer, with the optimizer update fused into the backward pass.

:class:`FusedEmbeddingCollection` keeps every table in one fp32 weight buffer
``[total_rows, D]``, looks up all features with one gather kernel, and in the backward pass
runs one kernel for all tables that sums each touched row's gradient and applies the
optimizer update to that row in place (FBGEMM's table-batched-embedding design). No
gradient tensor for the tables -- dense or sparse -- exists at any time; the weight's
``.grad`` stays None, so the rest of the model keeps its ordinary optimizer (which skips
parameters without a gradient).

Backends (see :mod:`tabloader.torch.dispatch`): ``"triton"`` -- the kernels of
:mod:`tabloader.torch.kernels`; ``"reference"`` -- plain PyTorch with the same semantics
(:mod:`tabloader.torch.reference`, the CPU path and the tests' oracle for the kernels);
``"auto"`` (default) -- Triton where it can run, else the reference.

Update semantics (``g`` is the sum of the gradients of all lookups of a row in the batch,
pooling scales included; only rows looked up in the batch are touched; padding rows never):

* ``sgd``: ``w -= lr * g``  (equal to ``torch.optim.SGD`` on ``nn.Embedding``).
* ``adagrad`` (row-wise, one accumulator per row as in FBGEMM):
  ``state += mean(g ** 2)``; ``w -= lr * g / (sqrt(state) + eps)``.
* ``adam`` (lazy, the semantics of ``torch.optim.SparseAdam``): for touched rows only,
  ``m += (1 - beta1) * (g - m)``; ``v += (1 - beta2) * (g**2 - v)``;
  ``w -= lr * sqrt(1 - beta2**t) / (1 - beta1**t) * m / (sqrt(v) + eps)`` with ``t`` the
  *global* step: the number of backward passes of the collection so far (like SparseAdam's
  per-parameter step, which counts optimizer steps, not per-row touches).

Scheduling: ``lr``, ``eps``, ``betas`` are plain attributes read at each backward; set them
between steps, e.g. ``coll.lr = base_lr * scheduler.get_last_lr()[0] / dense_base_lr``. The
update happens *inside* ``loss.backward()``: one backward per forward (no gradient
accumulation over several backwards; a second backward through the same lookups, with
``retain_graph=True``, raises a RuntimeError rather than apply the update twice), and ``step``
counts the updates (it is saved in the state dict for Adam's bias
correction).

State dict: the weight, the optimizer states, ``step`` and the tables' layout (each table's
name, ``num_embeddings``, ``embedding_dim`` and ``padding_idx``, in config order). A collection
with another layout refuses it with a ValueError naming both, before any row is copied (the flat
rows would land in other tables, even where the total of rows agrees).

DistributedDataParallel: the update applies to each rank's own rows, which DDP must leave alone
(it would overwrite them, and the optimizer state, with rank 0's): keep the collection outside
the wrapped module, or call :func:`~tabloader.torch.table_batched.exclude_from_ddp` on the model
before wrapping it (docs/scale.md).

CUDA graphs: with ``capturable=True`` (and ``validate_indices=False``) nothing in a training
step reads a value back from the device or bakes a per-step value into a launch, so the whole
step -- forward, ``loss.backward()`` with the fused update, the dense optimizer's step -- can be
captured once and replayed, which removes the launch overhead of the step's ~30 small launches.
The batch must then have the same shapes at every replay (single-hot columns, or list columns
padded to a fixed length).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

from tabloader.torch import dispatch
from tabloader.torch.config import EmbeddingConfig, init_embedding_
from tabloader.torch.dispatch import BACKENDS, load_kernels, segments, triton_interpreting  # noqa: F401 -- as before
from tabloader.torch.reference import (  # noqa: F401 -- importable from here, as before
    OPTIMIZERS,
    LookupPlan,
    adam_step_size,
    reference_forward,
    reference_update,
)
from tabloader.torch.table_batched import (  # noqa: F401 -- importable from here, as before
    ALL_STATE_NAMES,
    MAX_DIM,
    STATE_NAMES,
    TableBatchedCollection,
    entries_plan,
    int64_tensor,
    output_dtype,
    shape_output,
)

__all__ = [
    "FusedEmbeddingCollection",
    "LookupPlan",
    "reference_forward",
    "reference_update",
    "load_kernels",
    "OPTIMIZERS",
]


class FusedEmbeddingCollection(TableBatchedCollection):
    """Embedding tables in one buffer; the optimizer update runs inside the backward pass.

    Args:
        configs: the tables (:class:`~tabloader.torch.layers.EmbeddingConfig`). All tables
            need the same ``embedding_dim`` (one buffer ``[total_rows, D]``, one kernel); for
            tables of several dims build one collection per dim.
        optimizer: ``"sgd"``, ``"adagrad"`` (row-wise) or ``"adam"`` (lazy, SparseAdam
            semantics); see the module docstring for the exact update rules.
        lr, eps, betas: hyper-parameters (attributes, read at every backward: set them to
            schedule). ``eps`` defaults to 1e-8.
        initial_accumulator_value: starting value of the row-wise Adagrad accumulator.
        output: ``"concat"`` -> ``(B, F * D)``; ``"stack"`` -> ``(B, F, D)``; ``"dict"`` ->
            feature name -> ``(B, D)``. Features are ordered as in the configs.
        dtype: dtype of the output (activations): float32 (default), float16 or bfloat16. With
            None, the autocast dtype is used inside ``torch.autocast`` and float32 elsewhere.
            Weights and optimizer states are always fp32; gradients of any of these dtypes
            are accumulated in fp32. The update applies the gradient as it reaches the
            backward: a loss scaled by ``torch.amp.GradScaler`` scales the embedding updates
            too, and a step the scaler skips for inf/NaN is applied here all the same: use
            bfloat16 outputs (no scaler needed) or float32 ones, not a GradScaler, with it.
        validate_indices: before the kernels run, check every id is inside its table and
            every offsets array is well-formed, raising an ``IndexError`` that names the table
            and the value (a min/max reduction per feature and one device synchronization per
            batch: a few percent of the step; False skips it, and a bad id is then undefined
            behaviour: a wrong row or a memory fault).
        backend: ``"auto"``, ``"triton"`` or ``"reference"`` (see the module docstring).
        chunk_size: the number of lookups summed per partial sum for hot rows; rows looked up
            at most this many times in a batch are summed by one program directly.
        device: where to allocate the weights.
        capturable: keep the step count and the learning rate on the device, where the update
            kernel reads them, so that a training step can be captured in a CUDA graph
            (``torch.cuda.graph``, ``torch.cuda.make_graphed_callables``) and replayed: the
            idiom of ``torch.optim.Adam(capturable=True)``. Needs ``validate_indices=False`` (the
            check reads ids back) and the Triton backend; ``lr`` may still be set between
            replays, ``eps`` and ``betas`` are frozen in a captured graph. Reading ``step``
            then waits for the device. Off by default: it adds a few tiny launches per step.

    Padding: a table's ``padding_idx`` row (default 0) starts at zero, is never updated (no
    optimizer state change either) and is left out of pooled sums and means (like
    ``nn.EmbeddingBag``); a single-hot lookup of it returns the row as it is (zeros).

    ``forward(features)`` takes the loader's feature dict: single-hot features as ``(B,)``
    int tensors, list features as ``(values, offsets)`` with ``B + 1`` offsets or padded to a
    fixed length as ``(B, L)`` ids (the loader's ``lists=``; its padding ids left out, as
    ``MultiHotEmbeddings`` does), pooled with the table's ``pooling``. Columns of the dict that
    no table names are ignored. A keyed jagged batch (:mod:`tabloader.torch.jagged`) may carry
    per-value weights, which scale their rows; weights that require grad get their gradient
    (``<grad of the bag, the value's row>``, through the mean's division), from the rows the
    forward read (kept until the backward: values x D floats).

    Example:
        >>> import torch
        >>> from tabloader.torch.layers import EmbeddingConfig
        >>> _ = torch.manual_seed(0)
        >>> coll = FusedEmbeddingCollection(
        ...     [EmbeddingConfig("C1", 10, 4), EmbeddingConfig("C2", 20, 4)], optimizer="sgd", lr=0.1)
        >>> batch = {"C1": torch.tensor([1, 2, 2]), "C2": torch.tensor([5, 6, 7])}
        >>> before = coll.table_weight("C1")[2].clone()
        >>> out = coll(batch)
        >>> out.shape
        torch.Size([3, 8])
        >>> out.sum().backward()            # updates the rows in place: w -= lr * g
        >>> torch.allclose(coll.table_weight("C1")[2], before - 0.1 * 2), coll.weight.grad is None
        (True, True)
    """

    _fp32_rows = ("weight", *ALL_STATE_NAMES)

    def __init__(self, configs: Sequence[EmbeddingConfig], optimizer: str = "adagrad", lr: float = 0.01,
                 eps: float = 1e-8, betas: tuple[float, float] = (0.9, 0.999),
                 initial_accumulator_value: float = 0.0, output: str = "concat",
                 dtype: torch.dtype | None = torch.float32, validate_indices: bool = True,
                 backend: str = "auto", chunk_size: int = 128, device: Any = None, capturable: bool = False) -> None:
        super().__init__(configs, optimizer, lr, eps, betas, output, dtype, validate_indices, backend, chunk_size,
                         device, capturable, initial_accumulator_value)
        self._register_layout(device)
        self.weight = nn.Parameter(torch.empty((self.total_rows, self.embedding_dim), dtype=torch.float32,
                                               device=device))
        for name, state in zip(STATE_NAMES[optimizer], self._new_states(self.total_rows, device=device)):
            self.register_buffer(name, state)
        self.reset_parameters()

    def _layout_buffers(self) -> dict[str, torch.Tensor]:
        pads = [self.table_offsets[c.name] + c.padding_idx for c in self.configs if c.padding_idx is not None]
        return {**super()._layout_buffers(), "_padding_rows": int64_tensor(pads)}

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Initialize every table by its config's ``init`` (the padding rows zero); the optimizer
        state and ``step`` start again: the collection is as built (after ``to_empty()`` of one
        built on the meta device, every value is set)."""
        for cfg in self.configs:
            init_embedding_(self.table_weight(cfg.name), cfg.init, cfg.padding_idx)
        for name in STATE_NAMES[self.optimizer]:
            getattr(self, name).fill_(self._state_start())
        self.step = 0

    def table_weight(self, name: str) -> torch.Tensor:
        """The rows of table ``name``: a view into the shared weight buffer (no gradient)."""
        cfg = self.configs[self._table_index(name)]
        start = self.table_offsets[name]
        return self.weight.detach()[start:start + cfg.num_embeddings]

    def extra_repr(self) -> str:
        return (f"tables={len(self.configs)}, features={len(self.features)}, rows={self.total_rows}, "
                f"dim={self.embedding_dim}, optimizer={self.optimizer!r}, lr={self.lr}, backend={self.backend!r}")

    @property
    def _parameter(self) -> nn.Parameter:
        return self.weight

    def _prepare(self, plan: LookupPlan, training: bool) -> LookupPlan:
        return plan

    def _lookup(self, plan: LookupPlan, dtype: torch.dtype) -> torch.Tensor:
        weight = self.weight.detach()
        return dispatch.lookup(self._kernels_for(weight.device), weight, plan, dtype)

    def _entry_rows(self, plan: LookupPlan) -> torch.Tensor:
        return self._lookup(entries_plan(plan), torch.float32)

    def _update(self, plan: LookupPlan, grad: torch.Tensor) -> None:
        states = [getattr(self, name) for name in STATE_NAMES[self.optimizer]] + [None, None]
        self._update_rows(self.weight.detach(), states[0], states[1], plan, grad, self._padding_rows)
