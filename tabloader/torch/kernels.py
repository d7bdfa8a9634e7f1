"""Triton kernels of the table-batched embedding collections (:mod:`tabloader.torch.table_batched`).

Never import this module directly from library code: :func:`tabloader.torch.dispatch.load_kernels`
imports it lazily, and only when TensorFlow is not loaded (importing Triton after TensorFlow
kills the process). ``TRITON_INTERPRET=1`` must be set before this module is first imported
for the kernels to run on CPU through Triton's interpreter.

All tables live in one fp32 weight buffer ``W[total_rows, D]``; a lookup *entry* ``j`` reads
the flat row ``rows[j]`` (table offset + id) into the output row ``bag[j]`` (``b * F + f`` for
sample ``b`` and feature ``f``) with the weight ``scale[j]`` (1 for single-hot and sum
pooling, ``1 / n`` for mean pooling, 0 for padding entries of pooled lookups).

Kernels:

* :func:`gather` -- single-hot forward: ``out[i] = W[rows[i]]`` (the entries are the output rows).
* :func:`pooled_gather` -- multi-hot forward over a CSR of bags (in feature-major order, so the
  entries of every bag are contiguous): ``out[bag] = sum_j scale[j] * W[rows[j]]``.
* :func:`fused_backward_update` -- the backward pass and the optimizer step in one:

  1. (torch) sort the entries by row (stable), find the segments of equal rows -- sized by
     bounds known on the host (one segment per entry), so that no size is read back from the
     device: the kernels skip the segments without entries;
  2. (kernel 1, only for *hot* rows with more than ``chunk_size`` entries) split each hot
     segment into fixed-size chunks of ``chunk_size`` entries and write the sum of each chunk
     to a small ``partial[n_chunks, D]`` buffer, all chunks in parallel;
  3. (kernel 2, per unique touched row) sum the row's gradient -- from its entries directly for
     a light row, from its chunk partials for a hot row -- and apply the optimizer update to
     that row of ``W`` (and its state) in place.

  Both kernels are *persistent*: a bounded grid (a few programs per streaming multiprocessor)
  whose programs loop over the chunks / segments ``pid, pid + G, ...`` up to the number of
  them actually used, which they read from the device (written there by the segments step).
  The arrays are sized for the worst case (one segment per lookup, mostly unused), and one
  program per slot would start ~8 programs per used segment that exit at once.

  Every sum is taken in a fixed order (no atomics), so results are deterministic run to run;
  no gradient tensor of the tables' size exists at any time.

bf16 arithmetic is wrong in the interpreter, so every value is converted to fp32 before any
arithmetic.
"""

from __future__ import annotations

import functools
import os
import sys

# Importing Triton for the first time after TensorFlow kills the process (LLVM options
# registered twice); once Triton is loaded, TensorFlow may come and go.
if "triton" not in sys.modules and ("tensorflow" in sys.modules or "keras" in sys.modules):  # pragma: no cover
    raise ImportError(
        "tabloader.torch.kernels imports Triton, which crashes the process once TensorFlow is "
        "loaded; import torch/triton before tensorflow"
    )

import torch
import triton
import triton.language as tl

from tabloader.torch.reference import ColdRows

__all__ = ["gather", "pooled_gather", "fused_backward_update", "persistent_programs", "OPTIMIZERS"]

OPTIMIZERS = {"sgd": 0, "adagrad": 1, "adam": 2}

_NUM_WARPS = 4  # of the forward kernels
_THREADS_PER_WARP = 32
_MIN_BLOCK_D = 16  # the smallest row tile Triton lays out well
_GATHER_TILE = 4096  # elements of W one gather program moves (rows x padded dim) ...
_GATHER_MAX_ROWS = 128  # ... in at most this many rows
_POOLED_BLOCK_L = 16  # entries of a bag summed per loop iteration
_UPDATE_REGISTERS = 32  # fp32 registers per thread for the update kernels' gradient tile
_UPDATE_MAX_ENTRIES = 32  # entries per loop iteration of the update kernels, at most
# Registers per thread of the persistent update kernels: without a cap, ptxas kept their loops to 40 registers
# in some builds and spilled to local memory; at 64, the pooled fp32 builds of Triton 3.6 spilled; at 72,
# none of Triton 3.6's or 3.7's (an option of NVIDIA's backend only: AMD's rejects it).
_UPDATE_MAX_REGISTERS = 72
_UPDATE_REGISTER_CAP = {} if torch.version.hip else {"maxnreg": _UPDATE_MAX_REGISTERS}
_SM_REGISTERS = 65536  # 32-bit registers of a streaming multiprocessor (A100, H100, H200)
# warps of the persistent kernels per SM: as many as its registers hold at once (28 of the 64 an H100 SM
# can run), so that the whole grid is resident in one wave
_PERSISTENT_WARPS_PER_SM = _SM_REGISTERS // (_THREADS_PER_WARP * _UPDATE_MAX_REGISTERS)
HOST_PROGRAMS = 4  # programs of the persistent kernels off the GPU, where the interpreter runs them in turn
UPDATE_WARPS_ENV = "TABLOADER_UPDATE_WARPS"  # warps per program of the update kernels, for measuring (see _update_launch)


def _block_d(dim: int) -> int:
    return max(_MIN_BLOCK_D, triton.next_power_of_2(dim))


def _update_launch(block_d: int) -> tuple[int, int]:
    """(entries per loop iteration, warps) of the update kernels: ``_UPDATE_REGISTERS`` fp32
    registers per thread for the gradient tile; small rows get one or two warps so that many
    rows are in flight. ``TABLOADER_UPDATE_WARPS=n`` sets the warps for rows of up to 128 values
    instead, for measuring (``tools/gpu_checks.sh embedding_warps``): one warp per 128-wide row
    compiles for an H100 without barriers, spills or narrower loads, but has never been timed."""
    if block_d > 128:
        warps = 4  # one warp for 512-wide Adam rows spills registers
    else:
        warps = _warps_setting() or (1 if block_d <= 32 else 2)
    entries = (_UPDATE_REGISTERS * _THREADS_PER_WARP * warps) // block_d
    return max(1, min(_UPDATE_MAX_ENTRIES, entries)), warps


def _warps_setting() -> int | None:
    """``TABLOADER_UPDATE_WARPS`` (1, 2, 4 or 8: Triton takes powers of two), or None when unset."""
    value = os.environ.get(UPDATE_WARPS_ENV, "").strip()
    if not value:
        return None
    if value not in ("1", "2", "4", "8"):
        raise ValueError(f"{UPDATE_WARPS_ENV}={value!r}: the warps per program of the update kernels must be "
                         "1, 2, 4 or 8")
    return int(value)


def persistent_programs(device: torch.device, dim: int) -> int:
    """The default grid of the persistent update kernels on ``device`` for rows of ``dim``:
    ``_PERSISTENT_WARPS_PER_SM`` warps on each streaming multiprocessor of a GPU, ``HOST_PROGRAMS``
    elsewhere.

    Example:
        >>> persistent_programs(torch.device("cpu"), 128) == HOST_PROGRAMS
        True
    """
    if device.type != "cuda":
        return HOST_PROGRAMS
    warps = _update_launch(_block_d(dim))[1]
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _multiprocessors(index) * max(1, _PERSISTENT_WARPS_PER_SM // warps)


@functools.cache
def _multiprocessors(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


@triton.jit
def _load_rows(W, C, r, split, stride_w, offs_d, mask, SPLIT: tl.constexpr):
    """The rows ``r`` (a vector) of the row space as fp32 ``[len(r), BLOCK_D]``: from ``W``, or with
    ``SPLIT`` those from ``split`` on from ``C`` (the cold rows, also ``stride_w`` apart). Each
    side loads only its own rows, at offsets kept in range for the other's (masked) lanes."""
    if SPLIT:
        hot = r < split
        x = tl.load(W + tl.where(hot, r, 0)[:, None] * stride_w + offs_d[None, :],
                    mask=mask & hot[:, None], other=0.0).to(tl.float32)
        xc = tl.load(C + tl.where(hot, 0, r - split)[:, None] * stride_w + offs_d[None, :],
                     mask=mask & (r >= split)[:, None], other=0.0).to(tl.float32)
        x = tl.where(hot[:, None], x, xc)
    else:
        x = tl.load(W + r[:, None] * stride_w + offs_d[None, :], mask=mask, other=0.0).to(tl.float32)
    return x


@triton.jit
def _gather_kernel(W, C, rows, out, N, D, stride_w, split,
                   SPLIT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    pid = tl.program_id(0)
    offs_n = pid.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    r = tl.load(rows + offs_n, mask=mask_n, other=0).to(tl.int64)
    m = mask_n[:, None] & mask_d[None, :]
    x = _load_rows(W, C, r, split, stride_w, offs_d, m, SPLIT)
    tl.store(out + offs_n[:, None] * D + offs_d[None, :], x.to(out.dtype.element_ty), mask=m)


@triton.jit
def _pooled_kernel(W, C, rows, scale, offsets, out, B, F, D, stride_w, split,
                   SPLIT: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr):
    pid = tl.program_id(0)  # feature-major bag: pid = f * B + b
    start = tl.load(offsets + pid)
    end = tl.load(offsets + pid + 1)
    f = pid // B
    b = pid - f * B
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for s in range(start, end, BLOCK_L):
        e = s + tl.arange(0, BLOCK_L)
        me = e < end
        r = tl.load(rows + e, mask=me, other=0).to(tl.int64)
        sc = tl.load(scale + e, mask=me, other=0.0).to(tl.float32)
        x = _load_rows(W, C, r, split, stride_w, offs_d, me[:, None] & mask_d[None, :], SPLIT)
        acc += tl.sum(x * sc[:, None], axis=0)
    o = b.to(tl.int64) * F + f
    tl.store(out + o * D + offs_d, acc.to(out.dtype.element_ty), mask=mask_d)


def _cold_args(weight: torch.Tensor, cold: ColdRows | None) -> tuple[torch.Tensor, int]:
    """``(C, split)`` of the kernels for ``cold``: its weight (rows ``weight``'s stride apart) and
    split, or ``weight`` itself and 0 without cold rows (the ``SPLIT=False`` builds ignore them)."""
    if cold is None:
        return weight, 0
    if cold.weight.shape[0] and cold.weight.stride(0) != weight.stride(0):
        raise ValueError(f"the cold rows' stride {cold.weight.stride(0)} differs from the weight's "
                         f"{weight.stride(0)}: both must be contiguous [rows, D]")
    return cold.weight, int(cold.split)


def gather(weight: torch.Tensor, rows: torch.Tensor, out: torch.Tensor, block_n: int | None = None,
           cold: ColdRows | None = None) -> torch.Tensor:
    """``out[i, :] = weight[rows[i], :]`` for a contiguous ``out[N, D]`` (any float dtype); the
    rows from ``cold.split`` on are read from ``cold`` (:class:`~tabloader.torch.reference.ColdRows`)."""
    n, d = out.shape
    if block_n is None:
        block_n = max(1, min(_GATHER_MAX_ROWS, _GATHER_TILE // _block_d(d)))
    if n:
        c, split = _cold_args(weight, cold)
        _gather_kernel[(triton.cdiv(n, block_n),)](
            weight, c, rows, out, n, d, weight.stride(0), split,
            SPLIT=cold is not None, BLOCK_N=block_n, BLOCK_D=_block_d(d), num_warps=_NUM_WARPS)
    return out


def pooled_gather(weight: torch.Tensor, rows: torch.Tensor, scale: torch.Tensor, offsets: torch.Tensor,
                  out: torch.Tensor, batch: int, features: int, block_l: int = _POOLED_BLOCK_L,
                  cold: ColdRows | None = None) -> torch.Tensor:
    """Pooled lookup over a feature-major CSR of bags; ``out`` is ``[batch * features, D]``; the
    rows from ``cold.split`` on are read from ``cold``."""
    n_bags, d = out.shape
    if n_bags:
        c, split = _cold_args(weight, cold)
        _pooled_kernel[(n_bags,)](
            weight, c, rows, scale, offsets, out, batch, features, d, weight.stride(0), split,
            SPLIT=cold is not None, BLOCK_L=block_l, BLOCK_D=_block_d(d), num_warps=_NUM_WARPS)
    return out


@triton.jit
def _sum_entries(acc, grad, perm, bag, scale, start, count, D, offs_d, mask_d,
                 HAS_BAG: tl.constexpr, HAS_SCALE: tl.constexpr, BLOCK_E: tl.constexpr):
    for e0 in range(0, count, BLOCK_E):
        k = e0 + tl.arange(0, BLOCK_E)
        me = k < count
        j = tl.load(perm + start + k, mask=me, other=0).to(tl.int64)
        if HAS_BAG:
            o = tl.load(bag + j, mask=me, other=0).to(tl.int64)
        else:
            o = j
        g = tl.load(grad + o[:, None] * D + offs_d[None, :],
                    mask=me[:, None] & mask_d[None, :], other=0.0).to(tl.float32)
        if HAS_SCALE:
            sc = tl.load(scale + j, mask=me, other=0.0).to(tl.float32)
            g = g * sc[:, None]
        acc += tl.sum(g, axis=0)
    return acc


@triton.jit
def _partial_kernel(grad, perm, bag, scale, chunk_start, chunk_count, used_chunks, partial, D, programs,
                    HAS_BAG: tl.constexpr, HAS_SCALE: tl.constexpr,
                    BLOCK_E: tl.constexpr, BLOCK_D: tl.constexpr):
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    # the chunk slots are sized by a bound known on the host: only the first used_chunks hold chunks;
    # int32 loop counters (fewer registers: an int64 one made ptxas spill), int64 element offsets
    for c in range(tl.program_id(0), tl.load(used_chunks).to(tl.int32), programs):
        start = tl.load(chunk_start + c)
        count = tl.load(chunk_count + c)
        acc = tl.zeros([BLOCK_D], dtype=tl.float32)
        acc = _sum_entries(acc, grad, perm, bag, scale, start, count, D, offs_d, mask_d,
                           HAS_BAG, HAS_SCALE, BLOCK_E)
        tl.store(partial + tl.cast(c, tl.int64) * D + offs_d, acc, mask=mask_d)


@triton.jit
def _update_segment(W, state1, state2, grad, perm, bag, scale, partial, row, start, count, c0, nch,
                    D, stride_w, lr, eps, beta1, beta2, step_size,
                    OPT: tl.constexpr, HAS_BAG: tl.constexpr, HAS_SCALE: tl.constexpr,
                    BLOCK_E: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_D: tl.constexpr):
    """Sum the gradient of one segment's row and apply the optimizer step to it (row ``row`` of
    ``W`` and of the states)."""
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    if nch == 0:
        acc = _sum_entries(acc, grad, perm, bag, scale, start, count, D, offs_d, mask_d,
                           HAS_BAG, HAS_SCALE, BLOCK_E)
    else:
        for c in range(0, nch, BLOCK_C):
            k = c + tl.arange(0, BLOCK_C)
            mc = k < nch
            p = tl.load(partial + (c0 + k).to(tl.int64)[:, None] * D + offs_d[None, :],
                        mask=mc[:, None] & mask_d[None, :], other=0.0)
            acc += tl.sum(p, axis=0)
    w_ptr = W + row * stride_w + offs_d
    w = tl.load(w_ptr, mask=mask_d, other=0.0)
    if OPT == 0:  # SGD
        w = w - lr * acc
    elif OPT == 1:  # row-wise Adagrad: one accumulator per row
        st = tl.load(state1 + row) + tl.sum(acc * acc, axis=0) / D
        # One thread stores the scalar, but every thread that updates elements of the row reads it:
        # all of them must have read the old value before it is overwritten, or a late warp adds
        # this step's mean(g**2) twice and moves its elements by 1/sqrt(2) of the step (seen on an H100).
        tl.debug_barrier()
        tl.store(state1 + row, st)
        w = w - lr * acc / (tl.sqrt(st) + eps)
    else:  # lazy Adam (SparseAdam semantics, global step folded into step_size)
        m_ptr = state1 + row * D + offs_d
        v_ptr = state2 + row * D + offs_d
        m = tl.load(m_ptr, mask=mask_d, other=0.0)
        v = tl.load(v_ptr, mask=mask_d, other=0.0)
        m = m + (acc - m) * (1.0 - beta1)
        v = v + (acc * acc - v) * (1.0 - beta2)
        tl.store(m_ptr, m, mask=mask_d)
        tl.store(v_ptr, v, mask=mask_d)
        w = w - step_size * (m / (tl.sqrt(v) + eps))
    tl.store(w_ptr, w, mask=mask_d)


@triton.jit
def _update_kernel(W, state1, state2, C, cold1, cold2, grad, perm, bag, scale,
                   seg_row, seg_start, seg_count, seg_chunk, seg_nchunks, used_segments, partial, hyper,
                   D, stride_w, split, lr, eps, beta1, beta2, step_size, programs,
                   OPT: tl.constexpr, HAS_BAG: tl.constexpr, HAS_SCALE: tl.constexpr, HYPER_ON_DEVICE: tl.constexpr,
                   SPLIT: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_D: tl.constexpr):
    if HYPER_ON_DEVICE:  # read at every launch, so that a replayed CUDA graph uses this step's values
        lr = tl.load(hyper)
        step_size = tl.load(hyper + 1)
    # the segment slots are sized by a bound known on the host: only the first used_segments hold
    # segments, and those of padding rows have no entries (their rows and states are left alone)
    for s in range(tl.program_id(0), tl.load(used_segments).to(tl.int32), programs):
        count = tl.load(seg_count + s)
        if count > 0:
            row = tl.load(seg_row + s).to(tl.int64)
            w, s1, s2 = W, state1, state2
            if SPLIT:
                if row >= split:  # a cold row: row - split of C and its states
                    w, s1, s2, row = C, cold1, cold2, row - split
            _update_segment(w, s1, s2, grad, perm, bag, scale, partial, row,
                            tl.load(seg_start + s), count, tl.load(seg_chunk + s), tl.load(seg_nchunks + s),
                            D, stride_w, lr, eps, beta1, beta2, step_size,
                            OPT, HAS_BAG, HAS_SCALE, BLOCK_E, BLOCK_C, BLOCK_D)


def fused_backward_update(weight: torch.Tensor, state1: torch.Tensor | None, state2: torch.Tensor | None,
                          grad: torch.Tensor, perm: torch.Tensor, bag: torch.Tensor | None,
                          scale: torch.Tensor | None, seg_row: torch.Tensor, seg_start: torch.Tensor,
                          seg_count: torch.Tensor, seg_chunk: torch.Tensor, seg_nchunks: torch.Tensor,
                          used_segments: torch.Tensor, chunk_start: torch.Tensor, chunk_count: torch.Tensor,
                          used_chunks: torch.Tensor, *, optimizer: str, lr: float, eps: float = 0.0,
                          beta1: float = 0.0, beta2: float = 0.0, step_size: float = 0.0,
                          block_e: int | None = None, block_c: int | None = None,
                          programs: int | None = None, hyper: torch.Tensor | None = None,
                          cold: ColdRows | None = None) -> None:
    """Sum the gradient of every touched row and update it (and its optimizer state) in place.

    ``grad[n_out, D]`` is the output gradient (fp32/fp16/bf16, contiguous); ``perm`` orders
    the entries by row; segment ``s`` covers ``perm[seg_start[s]:seg_start[s]+seg_count[s]]``
    and updates row ``seg_row[s]``; a hot segment (``seg_nchunks[s] > 0``) owns the chunks
    ``seg_chunk[s] .. seg_chunk[s]+seg_nchunks[s]-1`` described by ``chunk_start/chunk_count``.
    Only the first ``used_segments[0]`` segments and ``used_chunks[0]`` chunks are read (one-element
    device tensors: the host never learns them), and segments with ``seg_count[s] == 0`` are
    skipped, so the arrays may be sized by an upper bound (:func:`tabloader.torch.dispatch.segments`).

    ``programs`` is the grid of both kernels, whose programs loop over the segments (chunks)
    ``pid, pid + programs, ...``: by default :func:`persistent_programs`; the number of segment
    slots (or more) launches one program per slot instead, each running at most one segment.
    The results are the same bit for bit whatever the grid: every sum has a fixed order.

    ``hyper`` (float32 ``[lr, step_size]`` on the weight's device), when given, replaces the
    ``lr`` and ``step_size`` arguments: the kernel reads them from device memory at every launch,
    so that a launch captured in a CUDA graph takes the values of the step it is replayed for.

    ``cold`` (:class:`~tabloader.torch.reference.ColdRows`): the rows from ``cold.split`` on are
    those of ``cold.weight`` and its states, updated there in place (pinned host memory, which
    the GPU reads and writes over the bus: the offloaded collection's direct mode).
    """
    n_seg = seg_row.numel()
    if n_seg == 0:
        return
    if n_seg >= 2 ** 31:  # the kernels count segments and chunks in int32
        raise ValueError(f"fused_backward_update takes fewer than 2**31 lookups per step, got {n_seg}")
    d = weight.shape[1]
    bd = _block_d(d)
    auto_e, warps = _update_launch(bd)
    block_e = block_e or auto_e
    block_c = block_c or block_e
    programs = programs or persistent_programs(weight.device, d)
    has_bag, has_scale = bag is not None, scale is not None
    bag_arg = bag if has_bag else perm
    scale_arg = scale if has_scale else grad
    n_chunks = chunk_start.numel()
    partial = torch.empty((max(n_chunks, 1), d), dtype=torch.float32, device=weight.device)
    if n_chunks:
        grid = min(programs, n_chunks)
        _partial_kernel[(grid,)](
            grad, perm, bag_arg, scale_arg, chunk_start, chunk_count, used_chunks, partial, d, grid,
            HAS_BAG=has_bag, HAS_SCALE=has_scale, BLOCK_E=block_e, BLOCK_D=bd, num_warps=warps,
            **_UPDATE_REGISTER_CAP)
    s1 = state1 if state1 is not None else weight
    s2 = state2 if state2 is not None else weight
    c, split = _cold_args(weight, cold)
    c1, c2 = (cold.state1, cold.state2) if cold is not None else (None, None)
    grid = min(programs, n_seg)
    _update_kernel[(grid,)](
        weight, s1, s2, c, c1 if c1 is not None else c, c2 if c2 is not None else c, grad, perm, bag_arg, scale_arg,
        seg_row, seg_start, seg_count, seg_chunk, seg_nchunks, used_segments, partial,
        weight if hyper is None else hyper,
        d, weight.stride(0), split, float(lr), float(eps), float(beta1), float(beta2), float(step_size), grid,
        OPT=OPTIMIZERS[optimizer], HAS_BAG=has_bag, HAS_SCALE=has_scale, HYPER_ON_DEVICE=hyper is not None,
        SPLIT=cold is not None, BLOCK_E=block_e, BLOCK_C=block_c, BLOCK_D=bd, num_warps=warps,
        **_UPDATE_REGISTER_CAP)
