"""Host-offloaded embedding tables: hot rows on the accelerator, the rest in host memory.

:class:`OffloadedEmbeddingCollection` is a table-batched collection
(:mod:`tabloader.torch.table_batched`) like :class:`~tabloader.torch.fused.FusedEmbeddingCollection`,
for tables that do not fit on the GPU. Categorify numbers values by descending frequency, so the
hot rows of a table are its small ids: each table ``t`` is split at a row threshold ``hot[t]``;
rows ``[0, hot[t])`` (and their optimizer state) live in one device buffer, rows ``[hot[t], n_t)``
(and their state) in one host buffer. Per batch:

* forward -- ids below the threshold gather from the device buffer; for the others the unique
  cold rows are found (``torch.unique`` on the device), gathered on the host into a pinned
  staging buffer (weights and, when training, their optimizer state), copied to the device
  (``non_blocking``) and gathered there;
* backward (inside ``loss.backward()``, like the fused collection) -- the same optimizer
  update is applied in place to the hot rows and to the staged cold rows (and states), with
  the same reference functions / Triton kernels as the fused collection; the updated cold rows
  and states are then copied back to pinned host memory on a side stream (after an event of
  the compute stream) and scattered into the host buffer by the collection's worker thread,
  so neither the copy nor the scatter holds up the next batch's compute. The next forward
  does not wait for them either: it gathers its cold rows from the host buffer as they are and
  patches, on the device, the rows that a still-pending write-back updates. Every other access
  to the host buffer (``state_dict``, ``table_weight`` ...) first waits for the worker's queue.

Per batch the forward (and ``prefetch``) waits for the GPU once: one ``torch.unique`` gives the
cold rows to stage and the split into hot and cold lookups.

*Direct access* (``cold_access="direct"``): the cold rows and their states live in page-locked
host memory, which a GPU addresses directly (CUDA's unified addressing), and the Triton kernels
read and update them there, in the same launches as the hot rows: the hot and the cold rows form
one row space (hot rows first), whose rows from ``total_hot`` on are in host memory. Nothing is
staged, copied back or waited for: no ``torch.unique``, no worker thread, no host
synchronization per batch (beyond ``validate_indices``'s). Over the bus go, per step, the
forward's cold lookups (a row per lookup: a row looked up twice is read twice) and the update's
reads and writes of each touched cold row and its state. The whole store is locked, at its
exact size (:mod:`tabloader.torch.page_locked`): that much host memory is taken from the OS
while the collection lives, and locking it takes time (once, at construction, after unpickling
or a deep copy, and on a move to a GPU). On a GPU it needs the Triton kernels; ``prefetch``
does nothing in this mode. ``state_dict()`` holds the live host tensors, as it holds a module's
live parameters: the GPU goes on updating them with the next steps (clone them to keep a
snapshot while training goes on). The staged mode stays the default until the direct one has
been timed on a GPU (``benchmarks/offload.py`` times both).

*Prefetch*: ``coll.prefetch(next_features)`` before the current batch's forward hands the next
batch early: its unique cold rows are found at once, and the worker thread gathers them (and
their states) into pinned memory and copies them to the device on the side stream, while the
current batch computes. The forward whose cold rows are the prefetched ones takes them (its
compute stream waits for the copy's event); the collection keeps the two newest prefetches. The worker runs its queue in order, so the gather sees every
write-back queued before it; rows that a later backward (typically the current batch's)
updates are patched into the prefetched rows on the device from that backward's updated rows.
The results are therefore identical to the non-prefetched path. A forward with other cold rows
stages its own; a change of the host store by ``load_state_dict`` / ``load_from_fused`` /
``reset_parameters`` discards the prefetches.

Because every update is per touched row and independent of the other rows (row-wise Adagrad
state per row; Adam moments per row with the *global* step shared by all rows), the split gives
the same results as the all-in-one fused collection: bit-for-bit for single-hot features, and up
to float summation order (~1e-7) for pooled (multi-hot) features, whose bag sums add the hot
and the cold part separately. If the cold store changed between a forward and its backward
(several forwards before their backwards), the backward re-stages the current rows, so the
update reads the same weights and states as the fused collection's would.

Device: ``device="cuda"`` keeps the hot rows on the GPU; on ``device="cpu"`` everything runs
the same path with the host as "device" (correct, slower; the tests run there).

The threshold, per table or from a device budget (``gpu_budget_bytes``), and what a resident
row costs: see :mod:`tabloader.torch.hot_rows`.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from tabloader.backend import is_host, pins_host_memory
from tabloader.torch import dispatch
from tabloader.torch.config import EmbeddingConfig, init_embedding_
from tabloader.torch.fused import FusedEmbeddingCollection
from tabloader.torch.hot_rows import bytes_per_row, hot_rows_for_budget, resolve_hot_rows
from tabloader.torch.reference import ColdRows, LookupPlan
from tabloader.torch.table_batched import (
    ALL_STATE_NAMES,
    STATE_NAMES,
    TableBatchedCollection,
    entries_plan,
    int64_tensor,
)

__all__ = ["OffloadedEmbeddingCollection", "hot_rows_for_budget", "bytes_per_row", "COLD_ACCESS"]

#: How the cold rows are reached: staged to the device per batch, or read in host memory by the kernels.
COLD_ACCESS = ("staged", "direct")

#: Prefetches kept: the current batch's and the next one's (``prefetch(next)`` before the forward).
_PREFETCHES = 2
#: A prefetch passed over by more write-backs than this was not for the next forwards: it is
#: dropped, with its device rows and the write-backs it would have patched in.
_PREFETCH_MAX_WRITES = 2


class _Staged:
    """The unique cold rows of one batch, on the device."""

    def __init__(self, uniq_host: torch.Tensor, inverse: torch.Tensor, weight: torch.Tensor,
                 state1: torch.Tensor | None, state2: torch.Tensor | None, pad_local: torch.Tensor,
                 version: int) -> None:
        self.uniq_host, self.inverse = uniq_host, inverse
        self.weight, self.state1, self.state2 = weight, state1, state2
        self.pad_local, self.version = pad_local, version


class _Prefetch:
    """A batch's cold rows handed early: the worker's future of ``(device tensors, copy event)``,
    and the write-backs queued after it (their rows are patched in when it is taken)."""

    def __init__(self, uniq_host: torch.Tensor, with_state: bool, future: Future) -> None:
        self.uniq_host, self.with_state, self.future = uniq_host, with_state, future
        self.writes: list[_Staged] = []


class _Split:
    """A batch's lookups split into the hot part and the cold part (sub-plans on local rows), and
    the positions of each part's lookups in the batch's plan."""

    def __init__(self, plan: LookupPlan, hot: LookupPlan, cold: LookupPlan, staged: _Staged | None,
                 hot_idx: torch.Tensor, cold_idx: torch.Tensor) -> None:
        self.plan, self.hot, self.cold, self.staged = plan, hot, cold, staged
        self.hot_idx, self.cold_idx = hot_idx, cold_idx


class OffloadedEmbeddingCollection(TableBatchedCollection):
    """Embedding tables split between device (hot rows) and host memory (cold rows).

    Same semantics, optimizers, arguments and outputs as
    :class:`~tabloader.torch.fused.FusedEmbeddingCollection` (the update runs inside the
    backward; see that module for the exact update rules), plus:

    Args:
        hot_rows: the per-table row threshold: an int (the same cap for every table), a float
            in ``[0, 1]`` (that fraction of each table, rounded up), a sequence (one per table,
            in config order; a NumPy array too) or a mapping ``table name -> rows``. Each is
            capped at the table's size. Row counts may be NumPy integers. Exclusive with
            ``gpu_budget_bytes``.
        gpu_budget_bytes: device bytes for the resident hot rows and their optimizer state; the
            threshold is derived by :func:`~tabloader.torch.hot_rows.hot_rows_for_budget`.
        device: where the hot rows live (``"cuda"``, ``"cpu"``, ...). The cold rows always live
            in host memory.
        pin_cold: allocate the host store itself in pinned memory (default False: the host
            gathers a batch's rows into a pinned staging buffer anyway, and pinning hundreds of
            GB is slow and takes them from the OS).
        cold_access: ``"staged"`` (default: a batch's cold rows are copied to the device and
            back) or ``"direct"`` (the kernels read and update the cold rows in page-locked host
            memory; see the module's text). ``"direct"`` locks the whole host store (``pin_cold``
            is for staging only).

    Attributes: ``hot_rows`` (list, per table), ``hot_weight`` (the device parameter
    ``[sum hot, D]``), ``cold_weight`` (host ``[sum cold, D]``), optimizer states ``hot_*`` /
    ``cold_*``; ``step``, ``lr``, ``eps``, ``betas`` as in the fused collection.

    Example:
        >>> import torch
        >>> from tabloader.torch.layers import EmbeddingConfig
        >>> coll = OffloadedEmbeddingCollection([EmbeddingConfig("C1", 100, 4)], hot_rows=10,
        ...                                     optimizer="sgd", lr=0.1, device="cpu")
        >>> coll.hot_rows
        [10]
        >>> out = coll({"C1": torch.tensor([1, 50, 50])})
        >>> out.sum().backward()   # hot row 1 and cold row 50 are updated in place
        >>> out.shape, coll.table_weight("C1").shape
        (torch.Size([3, 4]), torch.Size([100, 4]))
    """

    _fp32_rows = ("hot_weight", *("hot_" + name for name in ALL_STATE_NAMES))

    # defaults of a collection pickled before these attributes existed
    cold_access = "staged"
    _cold_locked = False

    def __init__(self, configs: Sequence[EmbeddingConfig], hot_rows: Any = None,
                 gpu_budget_bytes: int | None = None, optimizer: str = "adagrad", lr: float = 0.01,
                 eps: float = 1e-8, betas: tuple[float, float] = (0.9, 0.999),
                 initial_accumulator_value: float = 0.0, output: str = "concat",
                 dtype: torch.dtype | None = torch.float32, validate_indices: bool = True,
                 backend: str = "auto", chunk_size: int = 128, device: Any = None,
                 pin_cold: bool = False, cold_access: str = "staged") -> None:
        device = torch.device(device if device is not None else "cpu")
        if cold_access not in COLD_ACCESS:
            raise ValueError(f"cold_access={cold_access!r}: expected one of {COLD_ACCESS}")
        super().__init__(configs, optimizer, lr, eps, betas, output, dtype, validate_indices, backend, chunk_size,
                         device, initial_accumulator_value=initial_accumulator_value)
        self.cold_access = cold_access
        d = self.embedding_dim
        self.hot_rows = resolve_hot_rows(hot_rows, gpu_budget_bytes, [c.name for c in self.configs],
                                         [c.num_embeddings for c in self.configs], d, optimizer)
        # the hot and the cold layout beside the all-in-one one (the fused collection's)
        h = self.total_hot = sum(self.hot_rows)
        c = self.total_cold = self.total_rows - h
        self._register_layout(device)
        self._cold_padding_host = int64_tensor(self._store_padding_rows()[1])  # found among a batch's rows on the host

        # device part: a parameter (so autograd calls our backward) and buffers
        self.hot_weight = nn.Parameter(torch.empty((h, d), dtype=torch.float32, device=device))
        self._check_direct_access()
        for name, state in zip(STATE_NAMES[optimizer], self._new_states(h, device=device)):
            self.register_buffer("hot_" + name, state)
        # host part: plain tensors (module.to() must not move them); saved by _save_to_state_dict
        self._cold_locked = cold_access == "direct" and pins_host_memory(device)  # in memory the GPU addresses
        if self._cold_locked:
            from tabloader.torch.page_locked import page_locked_empty

            self.cold_weight = page_locked_empty((c, d))
            # each state's initial row, repeated into locked memory (no second store-sized copy)
            states = [page_locked_empty((c,) + tuple(t.shape[1:])).copy_(t.expand((c,) + tuple(t.shape[1:])))
                      for t in self._new_states(1)]
        else:
            pin = bool(pin_cold) and pins_host_memory(device)
            self.cold_weight = torch.empty((c, d), dtype=torch.float32, pin_memory=pin)
            states = self._new_states(c, pin_memory=pin)
        self.cold_state1, self.cold_state2 = (states + [None, None])[:2]
        self._tasks: list[Future] = []  # the worker's queue: write-backs and prefetch gathers, in order
        self._writes: list[tuple[Future, _Staged]] = []  # write-backs whose scatter may not have run, oldest first
        self._worker: ThreadPoolExecutor | None = None
        self._side_stream: Any = None
        # prefetches not yet taken, oldest first: the current batch's and the next one's when
        # prefetch(next) is called before the current forward
        self._prefetched: collections.deque[_Prefetch] = collections.deque(maxlen=_PREFETCHES)
        self._cold_version = 0
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Initialize every table by its config's ``init`` (on the host, as one table; the padding
        rows zero); the optimizer state and ``step`` start again: the collection is as built."""
        self._flush()
        for cfg in self.configs:
            full = torch.empty((cfg.num_embeddings, self.embedding_dim), dtype=torch.float32)
            init_embedding_(full, cfg.init, cfg.padding_idx)
            self._set_table(cfg.name, self.hot_weight.detach(), self.cold_weight, full)
        for _, hot, cold in self._states():
            hot.fill_(self._state_start())
            cold.fill_(self._state_start())
        self.step = 0
        self._store_changed()

    def _store_starts(self) -> tuple[list[int], list[int]]:
        """Each table's first row in the hot store and in the cold store (on the host: no device read)."""
        cold_rows = [cfg.num_embeddings - k for cfg, k in zip(self.configs, self.hot_rows)]
        return (list(itertools.accumulate(self.hot_rows, initial=0))[:-1],
                list(itertools.accumulate(cold_rows, initial=0))[:-1])

    def _store_padding_rows(self) -> tuple[list[int], list[int]]:
        """The padding rows of the tables in the hot store and in the cold store."""
        hot_off, cold_off = self._store_starts()
        hot_pads = [hot_off[i] + cfg.padding_idx for i, cfg in enumerate(self.configs)
                    if cfg.padding_idx is not None and cfg.padding_idx < self.hot_rows[i]]
        cold_pads = [cold_off[i] + cfg.padding_idx - self.hot_rows[i] for i, cfg in enumerate(self.configs)
                     if cfg.padding_idx is not None and cfg.padding_idx >= self.hot_rows[i]]
        return hot_pads, cold_pads

    def _layout_buffers(self) -> dict[str, torch.Tensor]:
        hot_off, cold_off = self._store_starts()
        hot_pads, cold_pads = self._store_padding_rows()
        return {
            **super()._layout_buffers(),
            "_table_starts": int64_tensor([self.table_offsets[c.name] for c in self.configs]),
            "_table_hot": int64_tensor(self.hot_rows),
            "_hot_offsets": int64_tensor(hot_off),
            "_cold_offsets": int64_tensor(cold_off),
            "_hot_padding_rows": int64_tensor(hot_pads),
            "_cold_padding_rows": int64_tensor(cold_pads),
            # direct access's row space: the hot rows, then the cold ones from total_hot on
            "_direct_padding_rows": int64_tensor(hot_pads + [self.total_hot + r for r in cold_pads]),
        }

    def _parts(self, name: str, hot: torch.Tensor, cold: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        i = self._table_index(name)
        hot_off, cold_off = self._store_starts()
        h0, c0, k = hot_off[i], cold_off[i], self.hot_rows[i]
        return hot[h0:h0 + k], cold[c0:c0 + self.configs[i].num_embeddings - k]

    def _get_table(self, name: str, hot: torch.Tensor, cold: torch.Tensor) -> torch.Tensor:
        self._flush()
        a, b = self._parts(name, hot, cold)
        return torch.cat([a.detach().cpu(), b])

    def _set_table(self, name: str, hot: torch.Tensor, cold: torch.Tensor, value: torch.Tensor) -> None:
        a, b = self._parts(name, hot, cold)
        k = a.shape[0]
        with torch.no_grad():
            a.copy_(value[:k])
            b.copy_(value[k:])

    def _states(self) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
        """``(name, hot part, cold part)`` of each optimizer state."""
        names = STATE_NAMES[self.optimizer]
        return [(n, getattr(self, "hot_" + n), cold) for n, cold in zip(names, (self.cold_state1, self.cold_state2))]

    def table_weight(self, name: str) -> torch.Tensor:
        """All rows of table ``name`` as one host tensor (a copy: hot rows then cold rows)."""
        return self._get_table(name, self.hot_weight, self.cold_weight)

    def table_state(self, name: str, which: str) -> torch.Tensor:
        """Optimizer state ``which`` (``state_sum`` / ``exp_avg`` / ``exp_avg_sq``) of a table, as a host copy."""
        for key, hot, cold in self._states():
            if key == which:
                return self._get_table(name, hot, cold)
        raise KeyError(f"optimizer {self.optimizer!r} has no state {which!r}")

    @torch.no_grad()
    def load_from_fused(self, fused: FusedEmbeddingCollection) -> "OffloadedEmbeddingCollection":
        """Copy weights, optimizer states and step of a fused collection with the same tables."""
        if [(c.name, c.num_embeddings, c.embedding_dim) for c in fused.configs] != \
                [(c.name, c.num_embeddings, c.embedding_dim) for c in self.configs]:
            raise ValueError("load_from_fused needs a FusedEmbeddingCollection with the same tables")
        if fused.optimizer != self.optimizer:
            raise ValueError(f"optimizer mismatch: fused {fused.optimizer!r}, offloaded {self.optimizer!r}")
        self._flush()
        for cfg in self.configs:
            start = fused.table_offsets[cfg.name]
            sl = slice(start, start + cfg.num_embeddings)
            self._set_table(cfg.name, self.hot_weight.detach(), self.cold_weight, fused.weight.detach()[sl].cpu())
            for key, hot, cold in self._states():
                self._set_table(cfg.name, hot, cold, getattr(fused, key)[sl].cpu())
        self.step = fused.step
        self._store_changed()
        return self

    def extra_repr(self) -> str:
        return (f"tables={len(self.configs)}, features={len(self.features)}, rows={self.total_rows}, "
                f"hot_rows={self.hot_rows}, dim={self.embedding_dim}, optimizer={self.optimizer!r}, "
                f"lr={self.lr}, device={self.hot_weight.device}")

    def _cold_tensors(self) -> dict[str, torch.Tensor]:
        out = {"cold_weight": self.cold_weight}
        for key, _, cold in self._states():
            out["cold_" + key] = cold
        return out

    def _save_to_state_dict(self, destination: Any, prefix: str, keep_vars: bool) -> None:
        self._flush()
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for key, t in self._cold_tensors().items():
            destination[prefix + key] = t if keep_vars else t.detach()

    def _load_from_state_dict(self, state_dict: Any, prefix: str, local_metadata: Any, strict: bool,
                              missing_keys: list, unexpected_keys: list, error_msgs: list) -> None:
        self._flush()
        self._check_saved_layout(state_dict, prefix)  # before the host store is written
        for key, t in self._cold_tensors().items():
            full = prefix + key
            if full not in state_dict:
                missing_keys.append(full)
                continue
            value = state_dict[full]
            if tuple(value.shape) != tuple(t.shape):
                error_msgs.append(f"size mismatch for {full}: copying a param with shape {tuple(value.shape)}, "
                                  f"the shape in current model is {tuple(t.shape)}")
                continue
            with torch.no_grad():
                t.copy_(value)
        self._store_changed()
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        ours = {prefix + key for key in self._cold_tensors()}
        unexpected_keys[:] = [k for k in unexpected_keys if k not in ours]

    def get_extra_state(self) -> dict[str, Any]:
        return {**super().get_extra_state(), "hot_rows": list(self.hot_rows)}

    def _check_extra_state(self, state: Mapping[str, Any]) -> None:
        super()._check_extra_state(state)
        if "hot_rows" in state and list(state["hot_rows"]) != list(self.hot_rows):
            raise ValueError(f"state dict was saved with hot_rows {list(state['hot_rows'])}, this collection has "
                             f"{self.hot_rows}")

    def __getstate__(self) -> dict[str, Any]:
        """Pickling / ``copy.deepcopy``: finish the worker's queue; the copy starts without worker or prefetch."""
        self._flush()
        state = self.__dict__.copy()
        state.update(_worker=None, _side_stream=None, _prefetched=collections.deque(maxlen=_PREFETCHES), _tasks=[],
                     _writes=[], _cold_locked=False)  # a copy's store is ordinary memory until locked again
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickling / ``copy.deepcopy``: direct access locks the copy's host store at once."""
        super().__setstate__(state)
        self._lock_cold_store()

    def _apply(self, fn: Any, recurse: bool = True) -> "OffloadedEmbeddingCollection":
        """``module.to(...)``, ``.cuda()``, ``.half()`` ...: the host store stays where it is; the
        hot rows and their state stay fp32 (the kernels and the host store keep fp32 rows: set
        ``dtype`` for the outputs' precision); direct access checks the new device and locks the
        store for it."""
        super()._apply(fn, recurse)  # the hot rows and their state kept fp32 (_fp32_rows)
        self._check_direct_access()
        self._lock_cold_store()
        return self

    def _check_direct_access(self) -> None:
        device = self.hot_weight.device
        if device.type == "meta":
            return  # nothing runs there: checked on the move off it (_apply)
        if self.cold_access == "direct" and not is_host(device) and self._kernels_for(device) is None:
            raise RuntimeError(f"cold_access='direct' on {device} needs the Triton kernels (backend={self.backend!r} "
                               "runs the PyTorch reference there, which cannot read host rows from the device)")

    def _lock_cold_store(self) -> None:
        """Direct access with the hot rows on a GPU: move the host store (weights and states) into
        page-locked memory of its exact size, which the GPU addresses (see
        :mod:`tabloader.torch.page_locked`; done once, at construction, after unpickling or on a
        move to a GPU). Takes the store's size again in host memory while it copies."""
        if self.cold_access != "direct" or self._cold_locked or not pins_host_memory(self.hot_weight.device):
            return
        from tabloader.torch.page_locked import page_locked_copy

        self.cold_weight = page_locked_copy(self.cold_weight)
        self.cold_state1, self.cold_state2 = (None if t is None else page_locked_copy(t)
                                              for t in (self.cold_state1, self.cold_state2))
        self._cold_locked = True

    def _store_changed(self) -> None:
        """The host store was rewritten (not by a write-back): staged and prefetched rows are stale."""
        self._cold_version += 1
        self._prefetched.clear()

    def _flush(self) -> None:
        """Wait for the worker's queue (write-backs into the host store, prefetch gathers from it),
        then re-raise the first error of a task. Every task is waited for first: one still running
        after the error was raised would write into the store unseen. With direct access, wait for
        the GPU: its kernels read and write the host store, on whichever streams they were launched."""
        if self.cold_access == "direct" and self.hot_weight.device.type == "cuda":
            torch.cuda.synchronize(self.hot_weight.device)
        tasks = list(dict.fromkeys([*self._tasks, *(task for task, _ in self._writes)]))
        self._tasks, self._writes = [], []
        errors = [task.exception() for task in tasks]  # waits for each
        first = next((error for error in errors if error is not None), None)
        if first is not None:
            raise first

    def _pending_writes(self) -> list[_Staged]:
        """The write-backs whose scatter into the host store may not have finished, oldest first."""
        for task, _ in self._writes:
            if task.done():
                task.result()  # re-raises a worker's error here
        self._writes = [(task, staged) for task, staged in self._writes if not task.done()]
        return [staged for _, staged in self._writes]

    def _submit(self, fn: Any, *args: Any) -> Future:
        """Queue ``fn(*args)`` on the worker, after the tasks queued before it; the finished ones
        leave the queue (and free their tensors). Their errors are not raised here, so that an
        earlier failure never keeps this task from being queued: a write-back's surfaces from
        ``_writes`` (:meth:`_pending_writes`, :meth:`_flush`), a prefetch's where it is taken."""
        if self._worker is None:
            self._side()  # made in this thread, before the worker may need it
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="tabloader-offload")
        task = self._worker.submit(fn, *args)
        self._tasks = [t for t in self._tasks if not t.done()] + [task]
        return task

    def _side(self) -> Any:
        """The CUDA stream of the host<->device copies (``None`` elsewhere: copies on the current stream)."""
        device = self.hot_weight.device
        if device.type != "cuda":
            return None
        if self._side_stream is None or self._side_stream.device != device:  # made again after .to(another GPU)
            self._side_stream = torch.cuda.Stream(device=device)
        return self._side_stream

    def _cold_sources(self, with_state: bool) -> list[torch.Tensor]:
        sources = [self.cold_weight]
        if with_state:
            sources += [t for t in (self.cold_state1, self.cold_state2) if t is not None]
        return sources

    def _gather(self, uniq_host: torch.Tensor, with_state: bool) -> list[torch.Tensor]:
        """The rows ``uniq_host`` of the host store (and states), in (pinned, from a GPU) staging buffers."""
        pin = pins_host_memory(self.hot_weight.device)
        out = []
        for src in self._cold_sources(with_state):
            buf = torch.empty((uniq_host.numel(),) + tuple(src.shape[1:]), dtype=src.dtype, pin_memory=pin)
            torch.index_select(src, 0, uniq_host, out=buf)
            out.append(buf)
        return out

    def _to_device(self, t: torch.Tensor) -> torch.Tensor:
        """A small host tensor on the device without waiting for the GPU (a copy from pinned memory)."""
        device = self.hot_weight.device
        if not pins_host_memory(device):
            return t.to(device)
        return t.pin_memory().to(device, non_blocking=True)

    def _pad_local(self, uniq_host: torch.Tensor) -> torch.Tensor:
        """Which of the staged rows ``uniq_host`` are padding rows (found on the host: no wait for the GPU)."""
        if self._cold_padding_host.numel():
            return self._to_device(torch.nonzero(torch.isin(uniq_host, self._cold_padding_host)).squeeze(1))
        return self._cold_padding_rows

    def _staged(self, uniq_host: torch.Tensor, inverse: torch.Tensor, tensors: list[torch.Tensor]) -> _Staged:
        s1 = tensors[1] if len(tensors) > 1 else None
        s2 = tensors[2] if len(tensors) > 2 else None
        return _Staged(uniq_host, inverse, tensors[0], s1, s2, self._pad_local(uniq_host), self._cold_version)

    def _stage(self, uniq_host: torch.Tensor, inverse: torch.Tensor, with_state: bool) -> _Staged:
        """Copy the cold rows ``uniq_host`` (sorted host-store indices) and their states to the device.

        The worker may still be scattering earlier batches' updated rows into the host store: rather
        than wait for it (the copy back and the scatter would then be on every step's critical path),
        the rows are gathered as they are and those that a pending write-back updates are patched
        from its rows on the device, oldest write-back first, so the newest value wins."""
        pending = self._pending_writes()
        device = self.hot_weight.device
        tensors = [buf.to(device, non_blocking=True) for buf in self._gather(uniq_host, with_state)]
        for written in pending:
            self._patch(uniq_host, tensors, written)
        return self._staged(uniq_host, inverse, tensors)

    @torch.no_grad()
    def prefetch(self, features: Mapping[str, Any]) -> None:
        """Start staging the cold rows of ``features``, the batch of the *next* forward.

        Call it before the current batch's forward: a worker thread gathers the next batch's
        cold rows (with their optimizer state when the collection trains) into pinned memory
        and copies them to the device on a side stream while the current batch computes.
        A forward takes the prefetch of its cold rows (the two newest are kept: the current
        batch's and the next one's; older ones than the one taken are dropped, and so is one
        that more than two backwards passed over); without one it stages as usual. Rows that
        the current batch's backward updates are patched in, so results are identical to
        calling no ``prefetch`` at all. Call it from the thread of the training loop, as the
        forward and the backward: the collection's queues take no lock.

        Example:
            >>> import torch
            >>> from tabloader.torch.layers import EmbeddingConfig
            >>> coll = OffloadedEmbeddingCollection([EmbeddingConfig("C1", 100, 4)], hot_rows=10,
            ...                                     optimizer="adam", device="cpu")
            >>> batches = [{"C1": torch.tensor([1, 50, 60])}, {"C1": torch.tensor([50, 70])}]
            >>> for i, feats in enumerate(batches):
            ...     if i + 1 < len(batches):
            ...         coll.prefetch(batches[i + 1])   # row 50 is read again: patched after this backward
            ...     coll(feats).sum().backward()
            >>> coll.step
            2
        """
        if self.cold_access == "direct":
            return  # the kernels read the cold rows where they are: nothing to stage
        uniq_host = self._split_lookups(self.plan(features))[0]
        if not uniq_host.numel():
            return  # the next forward has no cold rows: it takes no prefetch
        with_state = self.hot_weight.requires_grad and self.optimizer != "sgd"
        future = self._submit(self._gather_to_device, uniq_host, with_state)
        self._prefetched.append(_Prefetch(uniq_host, with_state, future))

    def _gather_to_device(self, uniq_host: torch.Tensor, with_state: bool) -> tuple[list[torch.Tensor], Any]:
        """(worker thread) Gather rows into pinned buffers and copy them to the device on the side stream."""
        host = self._gather(uniq_host, with_state)
        device, side = self.hot_weight.device, self._side()
        if side is None:
            return [buf.to(device, non_blocking=True) for buf in host], None
        with torch.cuda.stream(side):
            tensors = [buf.to(device, non_blocking=True) for buf in host]
            event = torch.cuda.Event()
            event.record(side)
        return tensors, event

    def _take_prefetched(self, uniq_host: torch.Tensor, inverse: torch.Tensor, training: bool) -> _Staged | None:
        """The prefetch of rows ``uniq_host`` (with the states ``training`` needs), brought up to date, or None.
        It and the prefetches older than it are used up."""
        needs_state = training and self.optimizer != "sgd"
        matches = [i for i, p in enumerate(self._prefetched)
                   if torch.equal(p.uniq_host, uniq_host) and (p.with_state or not needs_state)]
        if not matches:
            return None
        for _ in range(matches[0]):
            self._prefetched.popleft()
        pre = self._prefetched.popleft()
        tensors, event = pre.future.result()
        if event is not None:
            compute = torch.cuda.current_stream(self.hot_weight.device)
            compute.wait_event(event)
            for t in tensors:
                t.record_stream(compute)  # allocated on the side stream, used on this one
        for written in pre.writes:
            self._patch(uniq_host, tensors, written)
        return self._staged(uniq_host, inverse, tensors)

    def _patch(self, uniq_host: torch.Tensor, tensors: list[torch.Tensor], written: _Staged) -> None:
        """Overwrite the rows of ``tensors`` (rows ``uniq_host``) that ``written`` (a later write-back) updated.
        The rows are matched on the host; only the copies run on the device."""
        theirs = written.uniq_host
        if not theirs.numel() or not uniq_host.numel():
            return
        pos = torch.searchsorted(theirs, uniq_host).clamp_(max=theirs.numel() - 1)
        mine = torch.nonzero(theirs[pos] == uniq_host).squeeze(1)
        if not mine.numel():
            return
        mine, pos = self._to_device(mine), self._to_device(pos.index_select(0, mine))
        sources = [written.weight] + [t for t in (written.state1, written.state2) if t is not None]
        for target, source in zip(tensors, sources):
            target.index_copy_(0, mine, source.index_select(0, pos))

    def _write_back(self, staged: _Staged) -> None:
        """Queue the staged (updated) rows' return to the host store: from a GPU an asynchronous copy
        into pinned memory on the side stream; the worker thread scatters them into the store."""
        tensors = [staged.weight] + [t for t in (staged.state1, staged.state2) if t is not None]
        side, event = self._side(), None
        if side is not None:
            side.wait_stream(torch.cuda.current_stream(staged.weight.device))
            with torch.cuda.stream(side):
                copies = [t.to("cpu", non_blocking=True) for t in tensors]  # pinned
                event = torch.cuda.Event()
                event.record(side)
            for t in tensors:
                t.record_stream(side)  # freed after this backward: not reused before the copy ran
        else:
            copies = [t.to("cpu") for t in tensors]  # the tensors themselves on the host; else a blocking copy
        task = self._submit(self._scatter, event, staged.uniq_host, copies)
        self._writes.append((task, staged))
        for pre in self._prefetched:
            pre.writes.append(staged)
        self._prefetched = collections.deque((pre for pre in self._prefetched
                                              if len(pre.writes) <= _PREFETCH_MAX_WRITES), maxlen=_PREFETCHES)
        self._cold_version += 1
        self._pending_writes()  # the finished write-backs leave _writes (a prefetched forward stages none)

    def _scatter(self, event: Any, uniq_host: torch.Tensor, copies: list[torch.Tensor]) -> None:
        """(worker thread) Write updated rows into the host store once their copy is complete."""
        if event is not None:
            event.synchronize()
        targets = [self.cold_weight] + [t for t in (self.cold_state1, self.cold_state2) if t is not None]
        for target, buf in zip(targets, copies):
            target.index_copy_(0, uniq_host, buf)

    @property
    def _parameter(self) -> nn.Parameter:
        return self.hot_weight

    def _locate(self, plan: LookupPlan) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per lookup: its table, its row in the table, the table's threshold, and whether it is hot."""
        rows = plan.rows
        t = torch.searchsorted(self._table_starts, rows, right=True) - 1
        local = rows - self._table_starts.index_select(0, t)
        limit = self._table_hot.index_select(0, t)
        return t, local, limit, local < limit

    def _split_lookups(self, plan: LookupPlan) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        """``(uniq_host, cold_rows, hot_idx, cold_idx, located)`` of a batch, with one wait for the GPU.

        ``uniq_host``: the sorted unique host-store rows of the cold lookups (on the host);
        ``cold_rows``: each cold lookup's position among them; ``hot_idx`` / ``cold_idx``: the
        positions of the hot and of the cold lookups, each in order; ``located``: :meth:`_locate`'s
        answer. A single ``torch.unique`` over every lookup's store row, the hot lookups all given
        one key past the last cold row, yields the cold rows, their positions and (the last key's
        count) how many lookups are hot; a stable sort of the hot/cold flags, sliced at that count,
        gives both lists of positions."""
        located = t, local, limit, is_hot = self._locate(plan)
        hot_key = self.total_cold  # past every cold row: sorted last by unique
        keys = torch.where(is_hot, hot_key, self._cold_offsets.index_select(0, t) + local - limit)
        order = torch.argsort((~is_hot).to(torch.uint8), stable=True)  # hot lookups first, each side in order
        uniq, inverse, counts = torch.unique(keys, sorted=True, return_inverse=True, return_counts=True)
        host = torch.cat([uniq, counts[-1:]]).cpu()  # the unique rows and the last key's count, in one copy
        uniq_host, n_hot = host[:-1], 0
        if uniq_host.numel() and int(uniq_host[-1]) == hot_key:
            uniq_host, n_hot = uniq_host[:-1], int(host[-1])
        hot_idx, cold_idx = order[:n_hot], order[n_hot:]
        return uniq_host, inverse.index_select(0, cold_idx), hot_idx, cold_idx, located

    def _direct_plan(self, plan: LookupPlan) -> LookupPlan:
        """``plan`` over direct access's row space: hot rows first, then the cold ones from ``total_hot`` on."""
        t, local, limit, is_hot = self._locate(plan)
        hot_row = self._hot_offsets.index_select(0, t) + local
        cold_row = self._cold_offsets.index_select(0, t).add_(local - limit + self.total_hot)
        return dataclasses.replace(plan, rows=torch.where(is_hot, hot_row, cold_row))

    def _cold_rows(self) -> ColdRows:
        """The host store as the kernels' cold rows (direct access)."""
        return ColdRows(self.total_hot, self.cold_weight, self.cold_state1, self.cold_state2)

    def _prepare(self, plan: LookupPlan, training: bool) -> _Split | LookupPlan:
        """Split ``plan`` into its hot and cold part; stage the cold rows (and, training, their states).
        With direct access, ``plan`` over the direct row space instead."""
        if self.cold_access == "direct":
            return self._direct_plan(plan)
        uniq_host, cold_rows, hot_idx, cold_idx, (t, local, _, _) = self._split_lookups(plan)
        if plan.single_hot:
            bag_h, bag_c, sc_h, sc_c = hot_idx, cold_idx, None, None
        else:
            bag_h, bag_c = plan.bag.index_select(0, hot_idx), plan.bag.index_select(0, cold_idx)
            sc_h, sc_c = plan.scale.index_select(0, hot_idx), plan.scale.index_select(0, cold_idx)
        th = t.index_select(0, hot_idx)
        hot_rows = self._hot_offsets.index_select(0, th) + local.index_select(0, hot_idx)
        hot = LookupPlan(hot_rows, plan.batch, plan.num_features, bag_h, sc_h)
        staged = None
        if uniq_host.numel():
            staged = (self._take_prefetched(uniq_host, cold_rows, training)
                      or self._stage(uniq_host, cold_rows, with_state=training))
        cold = LookupPlan(cold_rows, plan.batch, plan.num_features, bag_c, sc_c)
        return _Split(plan, hot, cold, staged, hot_idx, cold_idx)

    def _lookup(self, split: _Split | LookupPlan, dtype: torch.dtype) -> torch.Tensor:
        if isinstance(split, LookupPlan):  # direct access
            kernels = self._kernels_for(self.hot_weight.device)
            return dispatch.lookup(kernels, self.hot_weight.detach(), split, dtype, cold=self._cold_rows())
        plan, d = split.plan, self.embedding_dim
        n_out = plan.batch * plan.num_features
        hot_w = self.hot_weight.detach()
        parts = [(split.hot, hot_w)]
        if split.staged is not None:
            parts.append((split.cold, split.staged.weight))
        if plan.single_hot:
            out = torch.empty((n_out, d), dtype=torch.float32, device=hot_w.device)
            for sub, w in parts:
                out.index_copy_(0, sub.bag, w.index_select(0, sub.rows))
        else:
            out = torch.zeros((n_out, d), dtype=torch.float32, device=hot_w.device)
            for sub, w in parts:
                out.index_add_(0, sub.bag, w.index_select(0, sub.rows) * sub.scale[:, None])
        return out.to(dtype)

    def _entry_rows(self, split: _Split | LookupPlan) -> torch.Tensor:
        if isinstance(split, LookupPlan):  # direct access
            return self._lookup(entries_plan(split), torch.float32)
        entries = entries_plan(split.plan)  # each lookup its own output row: its position in the plan
        hot = LookupPlan(split.hot.rows, entries.batch, 1, split.hot_idx)
        cold = LookupPlan(split.cold.rows, entries.batch, 1, split.cold_idx)
        return self._lookup(_Split(entries, hot, cold, split.staged, split.hot_idx, split.cold_idx), torch.float32)

    def _update(self, split: _Split | LookupPlan, grad: torch.Tensor) -> None:
        hot_states = [h for _, h, _ in self._states()] + [None, None]
        if isinstance(split, LookupPlan):  # direct access: one update over both parts of the row space
            self._update_rows(self.hot_weight.detach(), hot_states[0], hot_states[1], split, grad,
                              self._direct_padding_rows, cold=self._cold_rows())
            return
        self._update_rows(self.hot_weight.detach(), hot_states[0], hot_states[1], split.hot, grad,
                          self._hot_padding_rows)
        staged = split.staged
        if staged is None:
            return
        if staged.version != self._cold_version or (self.optimizer != "sgd" and staged.state1 is None):
            # the host store changed since the forward (or the forward ran without states): re-read
            staged = self._stage(staged.uniq_host, staged.inverse, with_state=True)
        self._update_rows(staged.weight, staged.state1, staged.state2, split.cold, grad, staged.pad_local)
        self._write_back(staged)
