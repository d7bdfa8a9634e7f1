"""The base of the table-batched embedding collections.

A table-batched collection lays all its tables out in one row space (table ``t`` owns the rows
``[table_offsets[t], table_offsets[t] + num_embeddings)``, FBGEMM's table-batched-embedding
design), looks every feature of a batch up at once, and applies the optimizer update to the
touched rows inside the backward pass. :class:`TableBatchedCollection` holds what
:class:`~tabloader.torch.fused.FusedEmbeddingCollection` (all rows in one device buffer) and
:class:`~tabloader.torch.offload.OffloadedEmbeddingCollection` (hot rows on the device, the
rest in host memory) share:

* the options (optimizer, ``lr``, ``eps``, ``betas``, output form, dtype, backend, ...), and
  the step count and the tables' layout, saved in the state dict (a state dict of other tables
  is refused: its flat rows would land in the wrong tables);
* the row layout, and turning a batch into one :class:`~tabloader.torch.reference.LookupPlan`
  over it (with the checks of ids and offsets, one device synchronization);
* the forward pass, and the autograd function that runs the update in the backward pass (and
  gives per-value weights that require grad their gradient);
* updating a set of rows by the Triton kernels or the PyTorch reference
  (:mod:`tabloader.torch.dispatch`).

A subclass decides where the rows live by implementing ``_parameter`` (the parameter autograd
tracks; its device is the collection's), ``_prepare(plan, training)`` (what its lookup and update
need for a batch), ``_lookup(prepared, dtype)`` (the ``(B * F, D)`` lookups),
``_entry_rows(prepared)`` (the row each lookup reads, for the weights' gradient) and
``_update(prepared, grad)`` (the in-place update; the step is already counted); it adds its own
layout buffers to ``_layout_buffers()`` and calls ``_register_layout(device)`` once its layout is
set. Its ``reset_parameters()`` initializes the tables and starts the optimizer state and the
step again (:meth:`TableBatchedCollection._state_start`), so that a collection built on the meta
device, ``to_empty()`` and ``reset_parameters()`` holds no uninitialized value.

Example:
    >>> from tabloader.torch.config import EmbeddingConfig
    >>> from tabloader.torch.fused import FusedEmbeddingCollection
    >>> coll = FusedEmbeddingCollection([EmbeddingConfig("a", 10, 4), EmbeddingConfig("b", 5, 4)])
    >>> isinstance(coll, TableBatchedCollection), coll.table_offsets, coll.output_dim
    (True, {'a': 0, 'b': 10}, 8)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from tabloader.torch import dispatch
from tabloader.torch.config import EmbeddingConfig, check_configs
from tabloader.torch.inputs import check_id_bounds, get_feature, split_feature
from tabloader.torch.jagged import is_keyed_jagged, jagged_feature, jagged_parts, select_keys
from tabloader.torch.reference import OPTIMIZERS, ColdRows, LookupPlan

__all__ = ["TableBatchedCollection", "STATE_NAMES", "MAX_DIM", "output_dtype", "shape_output", "int64_tensor",
           "entries_plan", "exclude_from_ddp"]

MAX_DIM = 1024  # the widest row the kernels hold in registers (one row per program)
MAX_TOTAL_ROWS = 2 ** 62  # flat row ids (table offset + id) stay far from int64 overflow
OUTPUTS = ("concat", "stack", "dict")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # of the lookups and their gradient
STATE_NAMES = {"sgd": (), "adagrad": ("state_sum",), "adam": ("exp_avg", "exp_avg_sq")}
EXTRA_STATE_KEY = "_extra_state"  # the state dict key of get_extra_state (torch.nn.Module's)
ALL_STATE_NAMES = tuple(dict.fromkeys(name for names in STATE_NAMES.values() for name in names))


class TableBatchedCollection(nn.Module):
    """Tables in one row space; the optimizer update runs inside the backward pass.

    Takes the arguments the subclasses document (see
    :class:`~tabloader.torch.fused.FusedEmbeddingCollection`); all tables need the same
    ``embedding_dim``. Attributes: ``configs``, ``features`` (every table's features, in
    config order: the order of the output), ``table_offsets``, ``total_rows``,
    ``embedding_dim``, ``optimizer``, ``lr``, ``eps``, ``betas`` (read at each backward: set
    them to schedule), ``output``, ``dtype``, ``backend``, ``validate_indices``, ``chunk_size``,
    ``capturable``, ``initial_accumulator_value`` and ``step`` (the number of updates so far).
    """

    def __init__(self, configs: Sequence[EmbeddingConfig], optimizer: str, lr: float, eps: float,
                 betas: tuple[float, float], output: str, dtype: torch.dtype | None, validate_indices: bool,
                 backend: str, chunk_size: int, device: Any, capturable: bool = False,
                 initial_accumulator_value: float = 0.0) -> None:
        super().__init__()
        self._by_feature = check_configs(configs)
        self.configs = list(configs)
        self.capturable = bool(capturable)
        self.initial_accumulator_value = float(initial_accumulator_value)
        self._set_options(optimizer, lr, eps, betas, output, dtype, validate_indices, backend, chunk_size)
        self._set_layout(device)
        if self.capturable:
            # the learning rate and the step count the update reads on the device (see `lr`, `step`)
            self.register_buffer("_device_lr", torch.tensor([self._lr], dtype=torch.float64, device=device),
                                 persistent=False)
            self.register_buffer("_device_step", torch.tensor([float(self._step)], dtype=torch.float64,
                                                              device=device), persistent=False)

    #: The parameter and buffers holding rows and their optimizer state, kept fp32 (subclasses).
    _fp32_rows: tuple[str, ...] = ()
    #: the default of a collection pickled before the attribute existed
    initial_accumulator_value = 0.0

    def _apply(self, fn: Any, recurse: bool = True) -> "TableBatchedCollection":
        """``module.to(...)``, ``.half()`` ... move the rows, their optimizer state, the capturable
        step and learning rate with the module but keep their dtypes: the rows and states fp32
        (the update adds fp32 gradients to them and the kernels read fp32 rows: ``dtype`` sets
        the outputs' precision), the step and learning rate float64 (in bf16 the step count would
        stop at 256, Adam's bias correction frozen there, and the learning rate be rounded). Each
        is moved from its own values (a round trip through fp16 would round them). The layout
        buffers are made again from the configs, and the step and learning rate of a collection
        built on the meta device written from the host's (``to_empty()`` leaves them uninitialized)."""
        names = [n for n in self._fp32_rows if n in self._parameters or n in self._buffers]
        names += [n for n in ("_device_lr", "_device_step") if n in self._buffers]
        before = {name: self._tensor(name).data for name in names}
        from_meta = "_device_step" in before and before["_device_step"].is_meta
        super()._apply(fn, recurse)
        for name, kept in before.items():
            moved = self._tensor(name)
            if moved.dtype != kept.dtype:
                self._set_tensor(name, kept.to(device=moved.device))
        # the layout, made again from the configs on the new device: never the moved buffers, which
        # to_empty() leaves uninitialized
        device = self._parameter.device
        for name, tensor in self._layout_buffers().items():
            self._buffers[name] = tensor.to(device)
        if from_meta:  # no step ran on the meta device: the host's learning rate and step are exact
            self.lr, self.step = self._lr, self._step
        return self

    def _tensor(self, name: str) -> torch.Tensor:
        return self._parameters[name] if name in self._parameters else self._buffers[name]

    def _set_tensor(self, name: str, value: torch.Tensor) -> None:
        if name in self._parameters:
            self._parameters[name].data = value
        else:
            self._buffers[name] = value

    def _set_options(self, optimizer: str, lr: float, eps: float, betas: tuple[float, float], output: str,
                     dtype: torch.dtype | None, validate_indices: bool, backend: str, chunk_size: int) -> None:
        name = type(self).__name__
        dims = {c.embedding_dim for c in self.configs}
        if len(dims) != 1:
            raise ValueError(
                f"{name} needs one embedding_dim for all its tables (one buffer, one kernel); got "
                f"{ {c.name: c.embedding_dim for c in self.configs} }. Build one collection per dim.")
        self.embedding_dim = dims.pop()
        if self.embedding_dim > MAX_DIM:
            raise ValueError(f"embedding_dim {self.embedding_dim} > {MAX_DIM} is not supported by the fused kernels")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {OPTIMIZERS}")
        if output not in OUTPUTS:
            raise ValueError(f"output must be 'concat', 'stack' or 'dict', got {output!r}")
        if backend not in dispatch.BACKENDS:
            raise ValueError(f"backend must be one of {dispatch.BACKENDS}, got {backend!r}")
        if dtype is not None and dtype not in DTYPES:
            raise TypeError(f"dtype must be float32, float16 or bfloat16 (weights stay float32), got {dtype}")
        if int(chunk_size) < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.optimizer = optimizer
        self.lr, self.eps, self.betas = float(lr), float(eps), (float(betas[0]), float(betas[1]))
        self.output, self.dtype, self.backend = output, dtype, backend
        self.validate_indices = validate_indices
        self.chunk_size = int(chunk_size)
        self.step = 0

    @property
    def lr(self) -> float:
        """The learning rate of the update (set it between steps to schedule; with ``capturable``
        it is written to the device, where a replayed CUDA graph reads it)."""
        return self._lr

    @lr.setter
    def lr(self, value: float) -> None:
        self._lr = float(value)
        if self.capturable and "_device_lr" in self._buffers:
            self._device_lr.fill_(self._lr)

    @property
    def step(self) -> int:
        """The number of updates so far (Adam's bias correction counts them). With ``capturable``
        it is counted on the device (replays of a captured step count too), and reading it waits
        for the device."""
        if self.capturable and "_device_step" in self._buffers:
            return int(self._device_step.item())
        return self._step

    @step.setter
    def step(self, value: int) -> None:
        self._step = int(value)
        if self.capturable and "_device_step" in self._buffers:
            self._device_step.fill_(float(self._step))

    def _set_layout(self, device: Any) -> None:
        self.table_offsets, total = {}, 0
        for cfg in self.configs:
            self.table_offsets[cfg.name] = total
            total += cfg.num_embeddings
        if total >= MAX_TOTAL_ROWS:
            raise ValueError(f"too many rows in total: {total}")
        self.total_rows = total
        self.features = [f for cfg in self.configs for f in cfg.features]
        self._feature_cfg = [self._by_feature[f] for f in self.features]
        pads = self._feature_padding_ids()
        self._padding_id = pads[0] if len(set(pads)) == 1 else None  # one padding id for all: no gather
        means = [c.pooling == "mean" for c in self._feature_cfg]
        self._any_mean, self._all_mean = any(means), all(means)

    def _feature_padding_ids(self) -> list[int]:
        """Per feature, the padding id of its table (-1: none)."""
        return [-1 if c.padding_idx is None else c.padding_idx for c in self._feature_cfg]

    def _layout_buffers(self) -> dict[str, torch.Tensor]:
        """The buffers the lookups read the row layout from, made on the host from the configs
        (subclasses add theirs). Non-persistent: :meth:`_register_layout` registers them at
        construction and :meth:`_apply` makes them again on every move, so that they never hold
        what ``to_empty()`` leaves (a collection built on the meta device has no values to move)."""
        cfgs = self._feature_cfg
        return {
            "_feature_offsets": int64_tensor([self.table_offsets[c.name] for c in cfgs]),
            # per feature, for keyed jagged batches: the padding id, the table's size, whether bags are means
            "_feature_padding": int64_tensor(self._feature_padding_ids()),
            "_feature_rows": int64_tensor([c.num_embeddings for c in cfgs]),
            "_feature_mean": torch.tensor([c.pooling == "mean" for c in cfgs], dtype=torch.bool),
        }

    def _register_layout(self, device: Any) -> None:
        """Register :meth:`_layout_buffers` on ``device`` (a subclass calls it once its layout is set)."""
        for name, tensor in self._layout_buffers().items():
            self.register_buffer(name, tensor.to(device), persistent=False)

    def _new_states(self, rows: int, **factory: Any) -> list[torch.Tensor]:
        """The optimizer's fresh state for ``rows`` rows, one tensor per name of :data:`STATE_NAMES`."""
        if self.optimizer == "adagrad":  # row-wise: one accumulator per row
            return [torch.full((rows,), self._state_start(), **factory)]
        return [torch.zeros((rows, self.embedding_dim), **factory) for _ in STATE_NAMES[self.optimizer]]

    def _state_start(self) -> float:
        """The value every optimizer state starts at: Adagrad's ``initial_accumulator_value``, Adam's 0."""
        return self.initial_accumulator_value if self.optimizer == "adagrad" else 0.0

    def _table_index(self, name: str) -> int:
        for i, cfg in enumerate(self.configs):
            if cfg.name == name:
                return i
        raise KeyError(f"no embedding table {name!r}; tables: {[c.name for c in self.configs]}")

    @property
    def output_dim(self) -> int:
        return len(self.features) * self.embedding_dim

    def _tables_layout(self) -> list[tuple[str, int, int, int | None]]:
        """``(name, num_embeddings, embedding_dim, padding_idx)`` of every table, in the order of the
        row space: saved in the state dict, whose flat rows mean nothing under another layout."""
        return [(c.name, c.num_embeddings, c.embedding_dim, c.padding_idx) for c in self.configs]

    def get_extra_state(self) -> dict[str, Any]:
        return {"step": self.step, "tables": self._tables_layout()}

    def set_extra_state(self, state: Mapping[str, Any]) -> None:
        self._check_extra_state(state)
        self.step = int(state.get("step", 0))

    def _check_extra_state(self, state: Mapping[str, Any]) -> None:
        """Refuse a state saved by other tables: the flat rows of one table would land in
        another. (A state dict saved before the layout was saved has none: it loads as before.)"""
        if "tables" not in state:
            return
        saved = [tuple(t) for t in state["tables"]]
        if saved != self._tables_layout():
            raise ValueError(f"{type(self).__name__}: the state dict was saved by tables {saved}, this collection "
                             f"has {self._tables_layout()} ((name, num_embeddings, embedding_dim, padding_idx), in "
                             "the order of the configs): its rows would land in other tables")

    def _load_from_state_dict(self, state_dict: Any, prefix: str, *args: Any) -> None:
        """Check the saved layout before any row is copied (``set_extra_state`` runs after the copies)."""
        self._check_saved_layout(state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, *args)

    def _check_saved_layout(self, state_dict: Any, prefix: str) -> None:
        extra = state_dict.get(prefix + EXTRA_STATE_KEY)
        if isinstance(extra, Mapping):
            self._check_extra_state(extra)

    @property
    def _parameter(self) -> nn.Parameter:
        raise NotImplementedError

    def _prepare(self, plan: LookupPlan, training: bool) -> Any:
        raise NotImplementedError

    def _lookup(self, prepared: Any, dtype: torch.dtype) -> torch.Tensor:
        raise NotImplementedError

    def _update(self, prepared: Any, grad: torch.Tensor) -> None:
        raise NotImplementedError

    def plan(self, features: Any) -> LookupPlan:
        """Validate the batch's ids and flatten them into one :class:`LookupPlan`.

        ``features`` is the loader's feature dict, or a keyed jagged batch
        (:class:`~tabloader.torch.jagged.KeyedJaggedBatch` or ``torchrec.KeyedJaggedTensor``),
        whose values already lie in the plan's order when its keys are this collection's
        features in order (else each feature is taken from it by key).
        """
        device = self._parameter.device
        if self.validate_indices and _capturing(device):
            raise RuntimeError(f"{type(self).__name__}: validate_indices=True reads the ids back to the host, which "
                               "a CUDA graph cannot capture; build the collection with validate_indices=False (and "
                               "capturable=True) to capture its steps, and check the ids before")
        if is_keyed_jagged(features):
            return self._jagged_plan(features)
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
        if all(off is None for _, _, _, off in parts):
            return self._single_hot_plan(parts, batch)
        if self.validate_indices:
            self._validate(parts)
        return self._pooled_plan(parts, batch, device)

    def _single_hot_plan(self, parts: list, batch: int) -> LookupPlan:
        ids = torch.stack([p[2].to(torch.int64) for p in parts], dim=1)  # (B, F)
        if self.validate_indices and batch:
            # two reductions over the (B, F) ids and one synchronization for all features
            lo, hi = torch.aminmax(ids, dim=0)
            for (feat, cfg, _, _), a, b in zip(parts, *torch.stack([lo, hi]).tolist()):
                check_id_bounds(a, b, feat, cfg)
        rows = (ids + self._feature_offsets[None, :]).reshape(-1)
        return LookupPlan(rows, batch, len(parts))

    def _pooled_plan(self, parts: list, batch: int, device: torch.device) -> LookupPlan:
        n_feat = len(parts)
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
                keep = keep / _bag_divisor(count).index_select(0, owner)
            rows.append(ids.to(torch.int64) + off)
            bags.append(owner * n_feat + f)
            scales.append(keep)
            lens.append(length)
        lens_all = torch.cat(lens)
        csr = torch.zeros(lens_all.numel() + 1, dtype=torch.int64, device=device)
        torch.cumsum(lens_all, 0, out=csr[1:])
        return LookupPlan(torch.cat(rows), batch, n_feat, torch.cat(bags), torch.cat(scales), csr)

    def _jagged_plan(self, batch: Any) -> LookupPlan:
        """The plan of a keyed jagged batch: its key-major values are the plan's feature-major
        entries and its offsets the plan's CSR, so no tensor is restacked per feature."""
        keys, values, offsets, weights, batch_size = jagged_parts(batch)
        if keys != self.features and _capturing(self._parameter.device):
            raise RuntimeError(f"{type(self).__name__}: a keyed jagged batch with keys {keys} (not this collection's "
                               f"features {self.features} in order) is split key by key, reading its bounds back, "
                               "which a CUDA graph cannot capture; capture steps whose batch holds exactly these "
                               "keys (tabloader.torch.jagged.select_keys before the graph)")
        if keys != self.features and weights is not None:  # the dict path has no weights: keep them
            return self._jagged_plan(select_keys(batch, self.features))
        if keys != self.features:
            return self.plan({f: jagged_feature(batch, f) for f in self.features if f in keys})
        device, n_feat = self._parameter.device, len(keys)
        if values.device != device:
            raise ValueError(f"the keyed jagged batch is on {values.device}, the embedding weights on {device}")
        if values.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"keyed jagged batch: values must be int64 or int32 (encoded category ids), got {values.dtype}")
        if offsets.numel() != n_feat * batch_size + 1:
            raise ValueError(f"keyed jagged batch: {offsets.numel()} offsets for {n_feat} keys x stride {batch_size}; "
                             f"expected {n_feat * batch_size + 1}")
        offsets, n = offsets.to(torch.int64), values.numel()
        # perhaps single-hot columns only: finding out reads the offsets back, which a graph being
        # captured cannot; a capturable collection that does not validate (so reads nothing back)
        # always takes the pooled plan below, right for lists of length 1 too -- eagerly as well, so
        # that the kernels a capture launches were compiled and loaded by the warm-up steps before it
        # (an empty batch takes the pooled plan: nothing to tell single-hot by)
        single_hot_shape = batch_size and n == n_feat * batch_size
        if weights is None and single_hot_shape and not (self.capturable and not self.validate_indices):
            plan = self._jagged_single_hot_plan(values, offsets, batch_size)
            if plan is not None:
                return plan
        feature = _key_of_values(offsets, n_feat, batch_size, n)
        if self.validate_indices:
            self._validate_jagged(values, offsets, feature)
        bag = torch.repeat_interleave(torch.arange(n_feat * batch_size, device=device), offsets.diff(), output_size=n)
        padding = self._padding_id if self._padding_id is not None else self._feature_padding[feature]
        keep = (values != padding).float()
        if weights is not None:
            keep = keep * weights.to(torch.float32)
        scale = keep
        if self._any_mean:
            count = torch.zeros(n_feat * batch_size, dtype=torch.float32, device=device).index_add_(0, bag, keep)
            scale = keep / _bag_divisor(count).index_select(0, bag)
            if not self._all_mean:
                scale = torch.where(self._feature_mean[feature], scale, keep)
        rows = values.to(torch.int64) + self._feature_offsets[feature]
        return LookupPlan(rows, batch_size, n_feat, (bag - feature * batch_size) * n_feat + feature, scale, offsets)

    def _jagged_single_hot_plan(self, values: torch.Tensor, offsets: torch.Tensor, batch_size: int) -> LookupPlan | None:
        """The single-hot plan (one transpose of the ``(F, B)`` values) when every list has
        length 1, else None; the ids are checked in the same synchronization."""
        ids = values.to(torch.int64).view(len(self.features), batch_size)
        ragged = (offsets[0] != 0) | (offsets.diff() != 1).any()
        if self.validate_indices:
            lo, hi = torch.aminmax(ids, dim=1)
            stats = torch.cat([ragged[None].to(torch.int64), lo, hi]).tolist()
            if stats[0]:
                return None
            for feat, cfg, a, b in zip(self.features, self._feature_cfg, stats[1:], stats[1 + len(self.features):]):
                check_id_bounds(a, b, feat, cfg)
        elif bool(ragged):
            return None
        return LookupPlan((ids + self._feature_offsets[:, None]).t().reshape(-1), batch_size, len(self.features))

    def _validate_jagged(self, values: torch.Tensor, offsets: torch.Tensor, feature: torch.Tensor) -> None:
        """Every id inside its key's table and well-formed offsets, with one synchronization (a
        second one, on error only, finds the table and the value to name)."""
        ids = values.to(torch.int64)
        out_of_range = ((ids < 0) | (ids >= self._feature_rows[feature])).any()
        bad = (offsets[0] != 0) | (offsets[-1] != ids.numel()) | (offsets.diff() < 0).any()
        out_of_range, bad, last = torch.stack([out_of_range.to(torch.int64), bad.to(torch.int64), offsets[-1]]).tolist()
        if bad:
            raise ValueError(f"keyed jagged batch: offsets must start at 0, be non-decreasing and end at "
                             f"len(values)={ids.numel()} (last offset is {last})")
        for f, (feat, cfg) in enumerate(zip(self.features, self._feature_cfg) if out_of_range else ()):
            mine = ids[feature == f]
            if mine.numel():
                check_id_bounds(int(mine.min()), int(mine.max()), feat, cfg)

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
                check_id_bounds(a, b, feat, cfg)
            elif a:
                raise ValueError(
                    f"feature {feat!r} (table {cfg.name!r}): offsets must start at 0, be non-decreasing "
                    f"and end at len(values)={ids.numel()} (last offset is {b})")

    def forward(self, features: Mapping[str, Any]) -> Any:
        plan = self.plan(features)
        parameter = self._parameter
        training = torch.is_grad_enabled() and parameter.requires_grad
        # per-value weights that need a gradient: the lookups' scales, a function of them, are an input
        # of the lookup (the kernels get them detached)
        scale = plan.scale if torch.is_grad_enabled() and plan.scale is not None and plan.scale.requires_grad else None
        if scale is not None:
            plan = dataclasses.replace(plan, scale=scale.detach())
        prepared = self._prepare(plan, training)
        dtype = output_dtype(self.dtype, parameter.device)
        if training or scale is not None:
            entries = None
            if scale is not None:
                with torch.no_grad():
                    entries = (plan.bag, self._entry_rows(prepared))
            out = _LookupWithGradients.apply(parameter, scale, self, prepared, dtype, training, entries)
        else:
            out = self._lookup(prepared, dtype)
        return shape_output(out, self, plan)

    def _entry_rows(self, prepared: Any) -> torch.Tensor:
        """The fp32 row each lookup of the plan reads, ``(entries, D)`` (for the scales' gradient)."""
        raise NotImplementedError

    @torch.no_grad()
    def _backward(self, prepared: Any, grad: torch.Tensor) -> None:
        if grad.dtype not in DTYPES:
            raise TypeError(f"{type(self).__name__}: gradient dtype {grad.dtype} is not supported")
        if _capturing(grad.device) and not self.capturable:
            raise RuntimeError(f"{type(self).__name__}: a CUDA graph is capturing its update, but its step count and "
                               "learning rate live on the host and would be frozen in the graph; build it with "
                               "capturable=True to capture its steps")
        if self.capturable:
            self._device_step.add_(1.0)  # on the device: a captured step counts at every replay
        else:
            self._step += 1
        self._update(prepared, grad.reshape(-1, self.embedding_dim).contiguous())

    def _kernels_for(self, device: torch.device) -> Any:
        return dispatch.kernels_for(self.backend, device, type(self).__name__)

    def _update_rows(self, weight: torch.Tensor, state1: torch.Tensor | None, state2: torch.Tensor | None,
                     plan: LookupPlan, grad: torch.Tensor, padding_rows: torch.Tensor,
                     cold: ColdRows | None = None) -> None:
        """Apply this step's update to ``plan``'s rows of ``weight`` and its states (and ``cold``'s), in place."""
        if plan.rows.numel() == 0:
            return
        device_hyper = {"device_lr": self._device_lr, "device_step": self._device_step} if self.capturable else {}
        dispatch.update(self._kernels_for(weight.device), weight, state1, state2, plan, grad, padding_rows,
                        optimizer=self.optimizer, lr=self._lr, eps=self.eps, betas=self.betas, step=self._step,
                        chunk_size=self.chunk_size, cold=cold, **device_hyper)


def exclude_from_ddp(model: nn.Module) -> list[str]:
    """Make ``DistributedDataParallel(model)`` leave ``model``'s table-batched collections alone.

    A collection updates its rows inside each rank's backward, so DDP must not synchronize it:
    left to itself, DDP overwrites every rank's rows with rank 0's when it wraps the model, and
    every rank's optimizer state with rank 0's at each forward (``broadcast_buffers``). This
    names every parameter and buffer of the collections in ``model`` in
    ``model._ddp_params_and_buffers_to_ignore`` (PyTorch's way to exclude them from DDP's
    broadcasts and all-reduces; the names already there are kept), so that each rank trains its
    own rows. Call it before wrapping; returns the names added. (The other way: keep the
    collection outside the module DDP wraps.)

    Example:
        >>> from tabloader.torch.config import EmbeddingConfig
        >>> from tabloader.torch.fused import FusedEmbeddingCollection
        >>> model = nn.Sequential(FusedEmbeddingCollection([EmbeddingConfig("a", 10, 4)], optimizer="adagrad"),
        ...                       nn.Linear(4, 1))
        >>> names = exclude_from_ddp(model)   # then DistributedDataParallel(model)
        >>> [n for n in names if not n.startswith("0._")], model._ddp_params_and_buffers_to_ignore == names
        (['0.weight', '0.state_sum'], True)
    """
    from torch.nn.parallel import DistributedDataParallel

    names = [f"{prefix}.{name}" if prefix else name
             for prefix, module in model.named_modules() if isinstance(module, TableBatchedCollection)
             for name, _ in [*module.named_parameters(), *module.named_buffers()]]
    if not names:
        raise ValueError(f"exclude_from_ddp: {type(model).__name__} holds no FusedEmbeddingCollection or "
                         "OffloadedEmbeddingCollection")
    ignored = list(getattr(model, "_ddp_params_and_buffers_to_ignore", ()))
    added = [name for name in names if name not in ignored]
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, ignored + added)
    return added


def entries_plan(plan: LookupPlan) -> LookupPlan:
    """The single-hot plan reading every entry of ``plan`` into an output row of its own."""
    return LookupPlan(plan.rows, plan.rows.numel(), 1)


def int64_tensor(values: Sequence[int]) -> torch.Tensor:
    """``values`` as an int64 host tensor (a layout buffer)."""
    return torch.tensor(list(values), dtype=torch.int64)


def _capturing(device: torch.device) -> bool:
    """True while the current CUDA stream of ``device`` is capturing a graph."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _bag_divisor(count: torch.Tensor) -> torch.Tensor:
    """What mean pooling divides a bag's sum by: its weight (its number of non-padding values,
    or the sum of its values' weights), 1 for a bag of none (its sum is 0 anyway). Not
    ``clamp(min=1)``: weights may sum to less than 1."""
    return count.masked_fill(count == 0, 1.0)


def _key_of_values(offsets: torch.Tensor, n_keys: int, batch_size: int, n: int) -> torch.Tensor:
    """The key index of each of the ``n`` values of a keyed jagged batch (key-major): a cumulative
    count of the key starts passed, so that malformed offsets give wrong keys (that validation
    then reports), never an error or an out-of-range index."""
    starts = offsets[batch_size:n_keys * batch_size:batch_size] if batch_size else offsets[:0]
    marks = torch.zeros(n + 1, dtype=torch.int64, device=offsets.device)
    marks.index_add_(0, starts.clamp(0, n), torch.ones_like(starts))
    return marks[:n].cumsum(0).clamp_(max=n_keys - 1)


class _LookupWithGradients(torch.autograd.Function):
    """Forward: the collection's lookup. Backward: its update, in place (``updates``; no gradient is
    returned for the rows), and the gradient of the lookups' scales when they need one (per-value
    weights that require grad): ``<grad of the entry's bag, the entry's row>``, from ``entries``,
    the plan's bags and the rows read (kept from the forward: the backward's update changes them)."""

    @staticmethod
    def forward(ctx: Any, parameter: torch.Tensor, scale: torch.Tensor | None, module: TableBatchedCollection,
                prepared: Any, dtype: torch.dtype, updates: bool,
                entries: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        ctx.module, ctx.prepared, ctx.owner = module, prepared, type(module).__name__
        ctx.updates, ctx.entries = updates, entries
        return module._lookup(prepared, dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        if ctx.updates and ctx.module is None:
            raise RuntimeError(f"{ctx.owner}: a second backward through the same lookup "
                               "would apply the update twice")
        grad_scale = None
        if ctx.entries is not None:
            bag, rows = ctx.entries
            grad_scale = (grad.float().index_select(0, bag) * rows).sum(1)
        if ctx.updates:
            module, prepared = ctx.module, ctx.prepared
            ctx.module = ctx.prepared = ctx.entries = None
            module._backward(prepared, grad)
        return None, grad_scale, None, None, None, None, None


def output_dtype(dtype: torch.dtype | None, device: torch.device) -> torch.dtype:
    """The lookups' dtype: ``dtype`` if given, else autocast's on ``device`` when enabled, else fp32."""
    if dtype is not None:
        return dtype
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return torch.float32


def shape_output(out: torch.Tensor, module: TableBatchedCollection, plan: LookupPlan) -> Any:
    """Lookups ``(B * F, D)`` in the form ``module.output`` asks for: ``"concat"`` ``(B, F * D)``,
    ``"stack"`` ``(B, F, D)`` or ``"dict"`` (feature name -> ``(B, D)``)."""
    out = out.view(plan.batch, plan.num_features, module.embedding_dim)
    if module.output == "stack":
        return out
    if module.output == "dict":
        return {feat: out[:, f] for f, feat in enumerate(module.features)}
    return out.reshape(plan.batch, plan.num_features * module.embedding_dim)
