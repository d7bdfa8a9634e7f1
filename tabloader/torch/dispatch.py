"""Where a table-batched collection's lookups and updates run: the Triton kernels or the reference.

Backends (the collections' ``backend`` argument):

* ``"triton"`` -- the kernels of :mod:`tabloader.torch.kernels` (CUDA tensors, or CPU tensors
  through Triton's interpreter when ``TRITON_INTERPRET=1`` was set before the first use);
* ``"reference"`` -- plain PyTorch with the same semantics (:mod:`tabloader.torch.reference`);
* ``"auto"`` -- Triton where it can run, else the reference. When Triton is wanted (CUDA
  tensors) but cannot be used -- not installed, or TensorFlow already imported (importing Triton
  after TensorFlow kills the process) -- a warning is given once and the reference runs.

:func:`kernels_for` makes that choice; :func:`lookup` and :func:`update` run a
:class:`~tabloader.torch.reference.LookupPlan` on what it chose, so the kernels are launched
from this one place.

Example:
    >>> import torch
    >>> kernels_for("reference", torch.device("cpu"), "MyCollection") is None
    True
"""

from __future__ import annotations

import contextlib

import os
import sys
import warnings
from typing import Any

import torch

from tabloader.backend import is_host
from tabloader.torch.reference import ColdRows, LookupPlan, adam_step_size, reference_forward, reference_update

__all__ = ["BACKENDS", "kernels_for", "load_kernels", "triton_interpreting", "lookup", "update", "device_hyper",
           "segments", "max_chunks"]

BACKENDS = ("auto", "triton", "reference")
TRITON_DEVICE_TYPE = "cuda"  # the torch device type of the GPUs Triton compiles for (NVIDIA and AMD)
INT32_ROWS = 2 ** 31  # below this many rows, the update sorts its keys as int32 (faster)

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


def kernels_for(backend: str, device: torch.device, owner: str) -> Any:
    """The kernels module to run ``owner``'s tensors on ``device`` with, or None for the reference.

    ``backend="triton"`` raises a RuntimeError where the kernels cannot run; ``"auto"`` falls
    back to the reference there (with a warning, once, when the device wanted the kernels).
    """
    if backend == "reference":
        return None
    runnable = triton_interpreting() if is_host(device) else device.type == TRITON_DEVICE_TYPE
    if not runnable:
        if backend == "triton":
            raise RuntimeError(f"backend='triton' needs CUDA tensors (or TRITON_INTERPRET=1 on CPU); the weights "
                               f"of {owner} are on {device}")
        return None
    kernels = load_kernels()
    if kernels is None:
        if backend == "triton":
            raise RuntimeError(f"backend='triton' is not available: {_kernels_error}")
        _warn_once(f"{owner} falls back to the PyTorch reference implementation: {_kernels_error}")
    return kernels


def lookup(kernels: Any, weight: torch.Tensor, plan: LookupPlan, dtype: torch.dtype,
           cold: ColdRows | None = None) -> torch.Tensor:
    """The ``(batch * num_features, D)`` lookups of ``plan`` in ``dtype``, by the kernels or the
    reference; the rows from ``cold.split`` on are read from ``cold``."""
    if kernels is None:
        return reference_forward(weight, plan, dtype, cold)
    n_out = plan.batch * plan.num_features
    # bf16 conversion in the interpreter truncates instead of rounding: write fp32 there
    kdtype = torch.float32 if (dtype == torch.bfloat16 and is_host(weight.device)) else dtype
    out = torch.empty((n_out, weight.shape[1]), dtype=kdtype, device=weight.device)
    with _on_device_of(weight):
        if plan.single_hot:
            kernels.gather(weight, plan.rows, out, cold=cold)
        else:
            kernels.pooled_gather(weight, plan.rows, plan.scale, plan.offsets, out, plan.batch, plan.num_features,
                                  cold=cold)
    return out.to(dtype)


def _on_device_of(tensor: torch.Tensor) -> Any:
    """The context that makes ``tensor``'s GPU the current one: Triton launches a kernel on the
    current device and its current stream, whatever device the tensors are on (a collection on
    ``cuda:1`` used while ``cuda:0`` is current would fault or race)."""
    return torch.cuda.device(tensor.device) if tensor.device.type == "cuda" else contextlib.nullcontext()


def update(kernels: Any, weight: torch.Tensor, state1: torch.Tensor | None, state2: torch.Tensor | None,
           plan: LookupPlan, grad: torch.Tensor, padding_rows: torch.Tensor, *, optimizer: str, lr: float,
           eps: float, betas: tuple[float, float], step: int, chunk_size: int, programs: int | None = None,
           device_lr: torch.Tensor | None = None, device_step: torch.Tensor | None = None,
           cold: ColdRows | None = None) -> None:
    """Backward + optimizer update of ``plan``'s rows of ``weight`` (and states) in place, by the
    kernels or the reference; ``step`` is the already incremented global step, ``programs`` the
    kernels' grid (see :func:`tabloader.torch.kernels.fused_backward_update`). The rows from
    ``cold.split`` on are those of ``cold``, updated there (``padding_rows`` count in that row space).

    ``device_lr`` and ``device_step`` (one-element float64 tensors on the weight's device), when
    given, replace ``lr`` and ``step``: the kernels then take the learning rate and Adam's bias
    correction from device memory (:func:`device_hyper`), so that the update can be captured in
    a CUDA graph and replayed step after step (the reference reads them back: not capturable).
    """
    if kernels is None:
        if device_step is not None:
            lr, step = float(device_lr), int(device_step)
        reference_update(weight, plan, grad, optimizer, lr, state1, state2, padding_rows, eps, betas, step, cold)
        return
    with _on_device_of(weight):
        _kernel_update(kernels, weight, state1, state2, plan, grad, padding_rows, optimizer, lr, eps, betas, step,
                       chunk_size, programs, device_lr, device_step, cold)


def _kernel_update(kernels: Any, weight: torch.Tensor, state1: torch.Tensor | None, state2: torch.Tensor | None,
                   plan: LookupPlan, grad: torch.Tensor, padding_rows: torch.Tensor, optimizer: str, lr: float,
                   eps: float, betas: tuple[float, float], step: int, chunk_size: int, programs: int | None,
                   device_lr: torch.Tensor | None, device_step: torch.Tensor | None, cold: ColdRows | None) -> None:
    total_rows = weight.shape[0] if cold is None else cold.split + cold.weight.shape[0]
    seg = segments(plan.rows, padding_rows, chunk_size, total_rows)
    hyper = None if device_step is None else device_hyper(optimizer, device_lr, device_step, betas)
    step_size = adam_step_size(lr, betas, step) if optimizer == "adam" and hyper is None else 0.0
    kernels.fused_backward_update(
        weight, state1, state2, grad, seg["perm"], plan.bag, plan.scale,
        seg["row"], seg["start"], seg["count"], seg["chunk"], seg["nchunks"], seg["used_segments"],
        seg["chunk_start"], seg["chunk_count"], seg["used_chunks"], optimizer=optimizer, lr=lr, eps=eps,
        beta1=betas[0], beta2=betas[1], step_size=step_size, programs=programs, hyper=hyper, cold=cold)


def device_hyper(optimizer: str, lr: torch.Tensor, step: torch.Tensor, betas: tuple[float, float]) -> torch.Tensor:
    """``[lr, step_size]`` (float32) computed on the device of the one-element float64 tensors
    ``lr`` and ``step``, in the operations :func:`~tabloader.torch.reference.adam_step_size` does
    on the host (``step_size`` is Adam's bias-corrected step, 0 for the other optimizers).

    Example:
        >>> hyper = device_hyper("adam", torch.tensor([0.1], dtype=torch.float64),
        ...                      torch.tensor([1.0], dtype=torch.float64), (0.9, 0.999))
        >>> hyper.dtype, round(hyper[1].item(), 6) == round(adam_step_size(0.1, (0.9, 0.999), 1), 6)
        (torch.float32, True)
    """
    if optimizer == "adam":
        b1, b2 = betas
        step_size = lr * torch.sqrt(1.0 - torch.pow(b2, step)) / (1.0 - torch.pow(b1, step))
    else:
        step_size = torch.zeros_like(lr)
    return torch.cat([lr, step_size]).to(torch.float32)


def max_chunks(n_entries: int, chunk_size: int) -> int:
    """An upper bound, known on the host, of the chunks :func:`segments` cuts ``n_entries`` into.

    A hot segment has ``count > chunk_size`` entries and ``ceil(count / chunk_size) < 2 * count /
    chunk_size`` chunks, so all of them have fewer than ``2 * n_entries / chunk_size``.

    Example:
        >>> max_chunks(1000, 128), max_chunks(3, 2)
        (15, 3)
    """
    return 2 * n_entries // chunk_size


def segments(rows: torch.Tensor, padding_rows: torch.Tensor | None, chunk_size: int,
             total_rows: int | None = None) -> dict[str, torch.Tensor]:
    """Sort the entries by row and describe the segments (one per touched row) for the kernel.

    Returns ``perm`` (entry order), per segment ``row``, ``start``, ``count``, ``nchunks`` (0
    for a light row, ``ceil(count / chunk_size)`` for a hot one) and ``chunk`` (its first
    chunk), per chunk ``chunk_start``/``chunk_count`` (positions into ``perm``), and the numbers
    of segments and chunks used, ``used_segments``/``used_chunks`` (one-element tensors). The
    sort is stable, so each row's lookups are summed in batch order. Keys are sorted as int32
    when ``total_rows < INT32_ROWS``.

    Nothing is read back from the device (a host synchronization per step costs more than the
    kernels): the arrays are sized by bounds known on the host -- one segment per entry,
    :func:`max_chunks` chunks -- and the kernels read only the used ones. The segments of
    padding rows, and those past the used ones, have ``count`` 0; what the other arrays hold
    past the used segments and chunks is undefined.

    Example:
        >>> seg = segments(torch.tensor([5, 2, 5, 5, 0]), torch.tensor([0]), chunk_size=2)
        >>> seg["used_segments"].item(), seg["row"][:3].tolist(), seg["count"].tolist()
        (3, [0, 2, 5], [0, 1, 3, 0, 0])
        >>> seg["nchunks"].tolist(), seg["used_chunks"].item(), seg["chunk_count"][:2].tolist()
        ([0, 0, 2, 0, 0], 2, [2, 1])
    """
    n, device = rows.numel(), rows.device
    keys = rows.to(torch.int32) if total_rows is not None and total_rows < INT32_ROWS else rows
    sorted_rows, perm = torch.sort(keys, stable=True)
    first = torch.ones(n, dtype=torch.bool, device=device)
    torch.ne(sorted_rows[1:], sorted_rows[:-1], out=first[1:])
    begun = torch.cumsum(first, 0)  # segments begun up to each sorted entry; the last: segments used
    # Segment s starts at the sorted entry whose `begun` is s + 1 and that begins a segment: scatter
    # the positions of those to slot s + 1 of a buffer prefilled with n, the other entries to the
    # dump slot 0 (an O(n) pass where a binary search for every segment takes O(n log n)).
    slot = begun * first
    bounds = torch.full((n + 2,), n, dtype=torch.int64, device=device)
    bounds.scatter_(0, slot, torch.arange(n, device=device))
    start, count = bounds[1:-1], bounds[1:].diff()  # slots past the used segments: start n, count 0
    row = torch.empty(n + 1, dtype=keys.dtype, device=device).scatter_(0, slot, sorted_rows)[1:]
    if padding_rows is not None and padding_rows.numel():
        count.masked_fill_(_is_padding(row, padding_rows), 0)
    nchunks = torch.where(count > chunk_size, (count + (chunk_size - 1)) // chunk_size, 0)
    chunk_end = torch.cumsum(nchunks, 0)
    chunk = chunk_end - nchunks
    chunk_start, chunk_count = _chunks(start, count, chunk, chunk_end, max_chunks(n, chunk_size), chunk_size)
    return {"perm": perm, "row": row, "start": start, "count": count, "nchunks": nchunks, "chunk": chunk,
            "chunk_start": chunk_start, "chunk_count": chunk_count, "used_segments": begun[-1:],
            "used_chunks": chunk_end[-1:]}


def _is_padding(row: torch.Tensor, padding_rows: torch.Tensor) -> torch.Tensor:
    """Which of ``row`` are padding rows: those whose left and right insertion points into the
    sorted padding rows differ (binary searches: ``torch.isin`` may read sizes back)."""
    pads = torch.sort(padding_rows.to(row.dtype)).values
    return torch.searchsorted(pads, row) != torch.searchsorted(pads, row, right=True)


def _chunks(start: torch.Tensor, count: torch.Tensor, chunk: torch.Tensor, chunk_end: torch.Tensor,
            n_chunks: int, chunk_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``chunk_start``/``chunk_count`` of ``n_chunks`` chunks (a bound): chunk ``c`` belongs to the
    first segment whose chunks end after it, and is its ``c - chunk[owner]``-th; what the chunks
    past the used ones hold is undefined (the kernel does not read them)."""
    if n_chunks == 0:
        empty = torch.zeros(0, dtype=torch.int64, device=start.device)
        return empty, empty
    c = torch.arange(n_chunks, device=start.device)
    owner = torch.searchsorted(chunk_end, c, right=True).clamp_(max=start.numel() - 1)
    k = c - chunk.index_select(0, owner)
    chunk_start = start.index_select(0, owner).add_(k, alpha=chunk_size)
    chunk_count = count.index_select(0, owner).sub_(k, alpha=chunk_size).clamp_(max=chunk_size)
    return chunk_start, chunk_count
