"""All embedding tables in one buffer, with the optimizer update fused into the backward pass.

:class:`FusedEmbeddingCollection` keeps every table in one fp32 weight buffer
``[total_rows, D]``, looks up all features with one gather kernel, and in the backward pass
runs one kernel for all tables that sums each touched row's gradient and applies the
optimizer update to that row in place (FBGEMM's table-batched-embedding design). No
gradient tensor for the tables -- dense or sparse -- exists at any time; the weight's
``.grad`` stays None, so the rest of the model keeps its ordinary optimizer (which skips
parameters without a gradient).

Backends:

* ``"triton"`` -- the kernels of :mod:`tabloader.torch.kernels` (CUDA tensors, or CPU tensors
  through Triton's interpreter when ``TRITON_INTERPRET=1`` was set before the first use);
* ``"reference"`` -- plain PyTorch with the same semantics (:func:`reference_forward`,
  :func:`reference_update`). It is the CPU path and the tests' oracle for the kernels;
* ``"auto"`` (default) -- Triton where it can run, else the reference. When Triton is wanted
  (CUDA tensors) but cannot be used -- not installed, or TensorFlow already imported (importing
  Triton after TensorFlow kills the process) -- a warning is given once and the reference runs.

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
accumulation over several backwards; ``retain_graph`` + a second backward would update
twice), and ``step`` counts the updates (it is saved in the state dict for Adam's bias
correction).
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import warnings
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from tabloader.torch.layers import (
    EmbeddingConfig,
    _range_error,
    check_configs,
    get_feature,
    init_embedding_,
    split_feature,
)

__all__ = [
    "FusedEmbeddingCollection",
    "LookupPlan",
    "reference_forward",
    "reference_update",
    "load_kernels",
    "OPTIMIZERS",
]

OPTIMIZERS = ("sgd", "adagrad", "adam")
BACKENDS = ("auto", "triton", "reference")
MAX_DIM = 1024

_kernels: Any = None
_kernels_error: str | None = None
_warned: set[str] = set()


def triton_interpreting() -> bool:
    """True when ``TRITON_INTERPRET=1`` (kernels then run on CPU tensors, slowly)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def load_kernels() -> Any:
    """Import :mod:`tabloader.torch.kernels` lazily; None when Triton cannot be used here.

    Triton is never imported for the first time once TensorFlow is loaded (the process would
    crash); if Triton was imported before TensorFlow, it is safe to use.
    """
    global _kernels, _kernels_error
    if _kernels is not None:
        return _kernels
    if "tabloader.torch.kernels" not in sys.modules and "triton" not in sys.modules:
        if "tensorflow" in sys.modules or "keras" in sys.modules:
            _kernels_error = ("TensorFlow is already imported, and importing Triton after it crashes "
                              "the process; import tabloader.torch (or triton) before tensorflow")
            return None
    try:
        from tabloader.torch import kernels
    except ImportError as exc:
        _kernels_error = f"Triton is not usable ({exc})"
        return None
    _kernels = kernels
    return kernels


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


# --------------------------------------------------------------------------------------------
# lookup plan: what to read, where to write it
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class LookupPlan:
    """The flattened lookups of one batch over the collection's single weight buffer.

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


def reference_forward(weight: torch.Tensor, plan: LookupPlan, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Plain PyTorch forward: ``(batch * num_features, D)`` in ``dtype`` (fp32 accumulation)."""
    d = weight.shape[1]
    if plan.single_hot:
        return weight.index_select(0, plan.rows).to(dtype)
    n_out = plan.batch * plan.num_features
    pooled = torch.nn.functional.embedding_bag(
        plan.rows, weight, plan.offsets, mode="sum", per_sample_weights=plan.scale, include_last_offset=True)
    # feature-major bags -> (batch, feature) rows
    pooled = pooled.view(plan.num_features, plan.batch, d).transpose(0, 1).reshape(n_out, d)
    return pooled.to(dtype)


def reference_update(weight: torch.Tensor, plan: LookupPlan, grad: torch.Tensor, optimizer: str, lr: float,
                     state1: torch.Tensor | None = None, state2: torch.Tensor | None = None,
                     padding_rows: torch.Tensor | None = None, eps: float = 1e-8,
                     betas: tuple[float, float] = (0.9, 0.999), step: int = 1) -> None:
    """Plain PyTorch backward + optimizer update, in place (semantics in the module docstring).

    ``grad`` is the gradient of the ``(batch * num_features, D)`` output; ``state1`` is the
    row-wise Adagrad accumulator ``[rows]`` or Adam's ``m`` ``[rows, D]``; ``state2`` Adam's
    ``v``; ``step`` the (already incremented) global step used by Adam's bias correction.
    """
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
    """``lr * sqrt(1 - beta2**step) / (1 - beta1**step)`` (SparseAdam's bias correction)."""
    b1, b2 = betas
    return lr * math.sqrt(1.0 - b2 ** step) / (1.0 - b1 ** step)


def init_update_options(module: nn.Module, optimizer: str, lr: float, eps: float, betas: tuple[float, float],
                        output: str, dtype: torch.dtype | None, backend: str, validate_indices: bool,
                        chunk_size: int) -> None:
    """Validate a collection's options and set them on ``module`` (whose ``configs`` are set).

    Shared by the fused and the host-offloaded collections, which take the same options.
    """
    name = type(module).__name__
    dims = {c.embedding_dim for c in module.configs}
    if len(dims) != 1:
        raise ValueError(
            f"{name} needs one embedding_dim for all its tables (one buffer, one kernel); got "
            f"{ {c.name: c.embedding_dim for c in module.configs} }. Build one collection per dim.")
    module.embedding_dim = dims.pop()
    if module.embedding_dim > MAX_DIM:
        raise ValueError(f"embedding_dim {module.embedding_dim} > {MAX_DIM} is not supported by the fused kernels")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {OPTIMIZERS}")
    if output not in ("concat", "stack", "dict"):
        raise ValueError(f"output must be 'concat', 'stack' or 'dict', got {output!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if dtype is not None and dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"dtype must be float32, float16 or bfloat16 (weights stay float32), got {dtype}")
    if int(chunk_size) < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    module.optimizer = optimizer
    module.lr, module.eps, module.betas = float(lr), float(eps), (float(betas[0]), float(betas[1]))
    module.output, module.dtype, module.backend = output, dtype, backend
    module.validate_indices = validate_indices
    module.chunk_size = int(chunk_size)
    module.step = 0


class _FusedLookup(torch.autograd.Function):
    """Forward: the lookup. Backward: the fused update, in place; no gradient is returned.

    Serves any module with ``_lookup(plan, dtype)`` and ``_update(plan, grad)``: the fused
    collection and the host-offloaded one.
    """

    @staticmethod
    def forward(ctx: Any, weight: torch.Tensor, module: nn.Module, plan: Any, dtype: torch.dtype) -> torch.Tensor:
        ctx.module, ctx.plan, ctx.owner = module, plan, type(module).__name__
        return module._lookup(plan, dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None, None, None]:
        module, plan = ctx.module, ctx.plan
        if module is None:
            raise RuntimeError(f"{ctx.owner}: a second backward through the same lookup "
                               "would apply the update twice")
        ctx.module = ctx.plan = None
        module._update(plan, grad)
        return None, None, None, None


def output_dtype(dtype: torch.dtype | None, device: torch.device) -> torch.dtype:
    """The lookups' dtype: ``dtype`` if given, else autocast's on ``device`` when enabled, else fp32."""
    if dtype is not None:
        return dtype
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return torch.float32


def shape_output(out: torch.Tensor, module: nn.Module, plan: LookupPlan) -> Any:
    """Lookups ``(B * F, D)`` in the form ``module.output`` asks for: ``"concat"`` ``(B, F * D)``,
    ``"stack"`` ``(B, F, D)`` or ``"dict"`` (feature name -> ``(B, D)``)."""
    out = out.view(plan.batch, plan.num_features, module.embedding_dim)
    if module.output == "stack":
        return out
    if module.output == "dict":
        return {feat: out[:, f] for f, feat in enumerate(module.features)}
    return out.reshape(plan.batch, plan.num_features * module.embedding_dim)


class FusedEmbeddingCollection(nn.Module):
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
            are accumulated in fp32.
        validate_indices: before the kernels run, check every id is inside its table and
            every offsets array is well-formed, raising an ``IndexError`` that names the table
            and the value (a min/max reduction per feature and one device synchronization per
            batch: a few percent of the step; False skips it, and a bad id is then undefined
            behaviour: a wrong row or a memory fault).
        backend: ``"auto"``, ``"triton"`` or ``"reference"`` (see the module docstring).
        chunk_size: the number of lookups summed per partial sum for hot rows; rows looked up
            at most this many times in a batch are summed by one program directly.
        device: where to allocate the weights.

    Padding: a table's ``padding_idx`` row (default 0) starts at zero, is never updated (no
    optimizer state change either) and is left out of pooled sums and means (like
    ``nn.EmbeddingBag``); a single-hot lookup of it returns the row as it is (zeros).

    ``forward(features)`` takes the loader's feature dict: single-hot features as ``(B,)``
    int tensors, list features as ``(values, offsets)`` with ``B + 1`` offsets (pooled with
    the table's ``pooling``). Columns of the dict that no table names are ignored.

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

    def __init__(self, configs: Sequence[EmbeddingConfig], optimizer: str = "adagrad", lr: float = 0.01,
                 eps: float = 1e-8, betas: tuple[float, float] = (0.9, 0.999),
                 initial_accumulator_value: float = 0.0, output: str = "concat",
                 dtype: torch.dtype | None = torch.float32, validate_indices: bool = True,
                 backend: str = "auto", chunk_size: int = 128, device: Any = None) -> None:
        super().__init__()
        self._by_feature = check_configs(configs)
        self.configs = list(configs)
        init_update_options(self, optimizer, lr, eps, betas, output, dtype, backend, validate_indices, chunk_size)

        offsets, total = {}, 0
        for cfg in self.configs:
            offsets[cfg.name] = total
            total += cfg.num_embeddings
        if total >= 2 ** 62:
            raise ValueError(f"too many rows in total: {total}")
        self.table_offsets = offsets
        self.total_rows = total
        self.features = [f for cfg in self.configs for f in cfg.features]
        self._feature_cfg = [self._by_feature[f] for f in self.features]

        self.weight = nn.Parameter(torch.empty((total, self.embedding_dim), dtype=torch.float32, device=device))
        feat_off = torch.tensor([offsets[c.name] for c in self._feature_cfg], dtype=torch.int64, device=device)
        self.register_buffer("_feature_offsets", feat_off, persistent=False)
        pads = [offsets[c.name] + c.padding_idx for c in self.configs if c.padding_idx is not None]
        self.register_buffer("_padding_rows", torch.tensor(pads, dtype=torch.int64, device=device), persistent=False)
        if optimizer == "adagrad":
            self.register_buffer("state_sum", torch.full((total,), float(initial_accumulator_value), device=device))
        elif optimizer == "adam":
            self.register_buffer("exp_avg", torch.zeros((total, self.embedding_dim), device=device))
            self.register_buffer("exp_avg_sq", torch.zeros((total, self.embedding_dim), device=device))
        self.reset_parameters()

    # --- parameters -------------------------------------------------------------------------
    def reset_parameters(self) -> None:
        """Initialize every table by its config's ``init``; zero the padding rows."""
        for cfg in self.configs:
            init_embedding_(self.table_weight(cfg.name), cfg.init, cfg.padding_idx)

    def table_weight(self, name: str) -> torch.Tensor:
        """The rows of table ``name``: a view into the shared weight buffer (no gradient)."""
        cfg = self._table(name)
        start = self.table_offsets[name]
        return self.weight.detach()[start:start + cfg.num_embeddings]

    def _table(self, name: str) -> EmbeddingConfig:
        for cfg in self.configs:
            if cfg.name == name:
                return cfg
        raise KeyError(f"no embedding table {name!r}; tables: {[c.name for c in self.configs]}")

    @property
    def output_dim(self) -> int:
        return len(self.features) * self.embedding_dim

    def get_extra_state(self) -> dict[str, Any]:
        return {"step": self.step}

    def set_extra_state(self, state: Mapping[str, Any]) -> None:
        self.step = int(state.get("step", 0))

    def extra_repr(self) -> str:
        return (f"tables={len(self.configs)}, features={len(self.features)}, rows={self.total_rows}, "
                f"dim={self.embedding_dim}, optimizer={self.optimizer!r}, lr={self.lr}, backend={self.backend!r}")

    # --- backend choice ---------------------------------------------------------------------
    def _kernels_for(self, device: torch.device) -> Any:
        if self.backend == "reference":
            return None
        runnable = device.type == "cuda" or (device.type == "cpu" and triton_interpreting())
        if not runnable:
            if self.backend == "triton":
                raise RuntimeError(
                    f"backend='triton' needs CUDA tensors (or TRITON_INTERPRET=1 on CPU); the weights are on {device}")
            return None
        kernels = load_kernels()
        if kernels is None:
            if self.backend == "triton":
                raise RuntimeError(f"backend='triton' is not available: {_kernels_error}")
            _warn_once(f"FusedEmbeddingCollection falls back to the PyTorch reference implementation: {_kernels_error}")
        return kernels

    # --- plan -------------------------------------------------------------------------------
    def plan(self, features: Mapping[str, Any]) -> LookupPlan:
        """Validate the batch's ids and flatten them into one :class:`LookupPlan`."""
        device = self.weight.device
        parts = []
        batch = None
        for feat, cfg in zip(self.features, self._feature_cfg):
            ids, offsets = split_feature(get_feature(features, feat, cfg.name), feat, cfg.name)
            if ids.device != device:
                raise ValueError(f"feature {feat!r} (table {cfg.name!r}) is on {ids.device}, "
                                 f"the embedding weights on {device}")
            b = ids.shape[0] if offsets is None else offsets.shape[0] - 1
            if batch is None:
                batch = b
            elif b != batch:
                raise ValueError(f"feature {feat!r} has batch size {b}, the previous features {batch}")
            parts.append((feat, cfg, ids, offsets))
        n_feat = len(parts)
        if all(off is None for _, _, _, off in parts):
            ids = torch.stack([p[2].to(torch.int64) for p in parts], dim=1)  # (B, F)
            if self.validate_indices and batch:
                # two reductions over the (B, F) ids and one synchronization for all features
                lo, hi = torch.aminmax(ids, dim=0)
                for (feat, cfg, _, _), a, b in zip(parts, *torch.stack([lo, hi]).tolist()):
                    _range_error(a, b, feat, cfg)
            rows = (ids + self._feature_offsets[None, :]).reshape(-1)
            return LookupPlan(rows, batch, n_feat)
        if self.validate_indices:
            self._validate(parts)
        rows, bags, scales, lens = [], [], [], []
        arange_b = torch.arange(batch, device=device)
        for f, (feat, cfg, ids, offsets) in enumerate(parts):
            off = self.table_offsets[cfg.name]
            if offsets is None:
                rows.append(ids.to(torch.int64) + off)
                bags.append(arange_b * n_feat + f)
                scales.append(torch.ones(batch, dtype=torch.float32, device=device))
                lens.append(torch.ones(batch, dtype=torch.int64, device=device))
                continue
            offsets = offsets.to(torch.int64)
            length = offsets.diff()
            owner = torch.repeat_interleave(arange_b, length, output_size=ids.numel())
            keep = (ids != cfg.padding_idx).float() if cfg.padding_idx is not None else \
                torch.ones(ids.numel(), dtype=torch.float32, device=device)
            if cfg.pooling == "mean":
                count = torch.zeros(batch, dtype=torch.float32, device=device).index_add_(0, owner, keep)
                keep = keep / count.clamp(min=1.0).index_select(0, owner)
            rows.append(ids.to(torch.int64) + off)
            bags.append(owner * n_feat + f)
            scales.append(keep)
            lens.append(length)
        lens_all = torch.cat(lens)
        csr = torch.zeros(lens_all.numel() + 1, dtype=torch.int64, device=device)
        torch.cumsum(lens_all, 0, out=csr[1:])
        return LookupPlan(torch.cat(rows), batch, n_feat, torch.cat(bags), torch.cat(scales), csr)

    def _validate(self, parts: list) -> None:
        stats, owners = [], []
        for i, (feat, cfg, ids, offsets) in enumerate(parts):
            if ids.numel():
                stats += [ids.min().to(torch.int64), ids.max().to(torch.int64)]
                owners.append(("ids", i))
            if offsets is not None:
                bad = (offsets[0] != 0) | (offsets[-1] != ids.numel())
                if offsets.numel() > 1:
                    bad = bad | (offsets.diff() < 0).any()
                stats += [bad.to(torch.int64), offsets[-1].to(torch.int64)]
                owners.append(("offsets", i))
        if not stats:
            return
        values = torch.stack(stats).tolist()  # the one synchronization
        for k, (kind, i) in enumerate(owners):
            feat, cfg, ids, offsets = parts[i]
            a, b = values[2 * k], values[2 * k + 1]
            if kind == "ids":
                _range_error(a, b, feat, cfg)
            elif a:
                raise ValueError(
                    f"feature {feat!r} (table {cfg.name!r}): offsets must start at 0, be non-decreasing "
                    f"and end at len(values)={ids.numel()} (last offset is {b})")

    # --- forward / backward -----------------------------------------------------------------
    def forward(self, features: Mapping[str, Any]) -> Any:
        plan = self.plan(features)
        dtype = output_dtype(self.dtype, self.weight.device)
        if torch.is_grad_enabled() and self.weight.requires_grad:
            out = _FusedLookup.apply(self.weight, self, plan, dtype)
        else:
            out = self._lookup(plan, dtype)
        return shape_output(out, self, plan)

    def _lookup(self, plan: LookupPlan, dtype: torch.dtype) -> torch.Tensor:
        weight = self.weight.detach()
        kernels = self._kernels_for(weight.device)
        if kernels is None:
            return reference_forward(weight, plan, dtype)
        n_out = plan.batch * plan.num_features
        # bf16 conversion in the interpreter truncates instead of rounding: write fp32 there
        kdtype = torch.float32 if (dtype == torch.bfloat16 and weight.device.type == "cpu") else dtype
        out = torch.empty((n_out, self.embedding_dim), dtype=kdtype, device=weight.device)
        if plan.single_hot:
            kernels.gather(weight, plan.rows, out)
        else:
            kernels.pooled_gather(weight, plan.rows, plan.scale, plan.offsets, out, plan.batch, plan.num_features)
        return out.to(dtype)

    @torch.no_grad()
    def _update(self, plan: LookupPlan, grad: torch.Tensor) -> None:
        if grad.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(f"FusedEmbeddingCollection: gradient dtype {grad.dtype} is not supported")
        self.step += 1
        weight = self.weight.detach()
        grad = grad.reshape(-1, self.embedding_dim).contiguous()
        state1 = getattr(self, "state_sum", None) if self.optimizer == "adagrad" else getattr(self, "exp_avg", None)
        state2 = getattr(self, "exp_avg_sq", None)
        kernels = self._kernels_for(weight.device)
        if kernels is None:
            reference_update(weight, plan, grad, self.optimizer, self.lr, state1, state2, self._padding_rows,
                             self.eps, self.betas, self.step)
            return
        if plan.rows.numel() == 0:
            return
        seg = segments(plan.rows, self._padding_rows, self.chunk_size, self.total_rows)
        step_size = adam_step_size(self.lr, self.betas, self.step) if self.optimizer == "adam" else 0.0
        kernels.fused_backward_update(
            weight, state1, state2, grad, seg["perm"], plan.bag, plan.scale,
            seg["row"], seg["start"], seg["count"], seg["chunk"], seg["nchunks"],
            seg["chunk_start"], seg["chunk_count"], optimizer=self.optimizer, lr=self.lr, eps=self.eps,
            beta1=self.betas[0], beta2=self.betas[1], step_size=step_size)


def segments(rows: torch.Tensor, padding_rows: torch.Tensor | None, chunk_size: int,
             total_rows: int | None = None) -> dict[str, torch.Tensor]:
    """Sort the entries by row and describe the segments (one per touched row) for the kernel.

    Returns ``perm`` (entry order), per segment ``row``, ``start``, ``count``, ``nchunks`` (0
    for a light row, ``ceil(count / chunk_size)`` for a hot one) and ``chunk`` (its first
    chunk), and per chunk ``chunk_start``/``chunk_count`` (positions into ``perm``).
    Segments of padding rows are dropped. The sort is stable, so each row's lookups are
    summed in batch order. Three device synchronizations (the numbers of segments, of kept
    segments and of chunks). Keys are sorted as int32 when ``total_rows < 2**31`` (faster).
    """
    keys = rows.to(torch.int32) if total_rows is not None and total_rows < 2 ** 31 else rows
    sorted_rows, perm = torch.sort(keys, stable=True)
    row, count = torch.unique_consecutive(sorted_rows, return_counts=True)
    start = torch.cumsum(count, 0) - count
    if padding_rows is not None and padding_rows.numel():
        keep = torch.nonzero(~torch.isin(row, padding_rows.to(row.dtype))).squeeze(1)
        if keep.numel() != row.numel():
            row, count, start = row.index_select(0, keep), count.index_select(0, keep), start.index_select(0, keep)
    nchunks = torch.where(count > chunk_size, (count + chunk_size - 1) // chunk_size, torch.zeros_like(count))
    chunk = torch.cumsum(nchunks, 0) - nchunks
    n_chunks = int(nchunks.sum()) if nchunks.numel() else 0
    if n_chunks:
        owner = torch.repeat_interleave(torch.arange(row.numel(), device=rows.device), nchunks, output_size=n_chunks)
        local = torch.arange(n_chunks, device=rows.device) - chunk.index_select(0, owner)
        chunk_start = start.index_select(0, owner) + local * chunk_size
        chunk_count = torch.clamp(start.index_select(0, owner) + count.index_select(0, owner) - chunk_start,
                                  max=chunk_size)
    else:
        chunk_start = chunk_count = torch.zeros(0, dtype=torch.int64, device=rows.device)
    return {"perm": perm, "row": row, "start": start, "count": count, "nchunks": nchunks, "chunk": chunk,
            "chunk_start": chunk_start, "chunk_count": chunk_count}
