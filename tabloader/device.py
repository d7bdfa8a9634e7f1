"""The device half of the CPU/GPU seam: where arrays live and the few operations that differ there.

:mod:`tabloader.backend` re-exports every name of this module, and only the two of them know
that CuPy and cuDF exist (CuPy comes from ``backend.cupy()``, imported on first use). The rest
of tabloader asks the seam for an array namespace (``backend.array_lib``: numpy or CuPy, the
array-API style scikit-learn uses) and, where the host and a GPU need different code, for one
of the operations below:

* where things live: :func:`is_host`, :func:`on_host`, :func:`array_device`,
  :func:`reads_frames`, :func:`pins_host_memory`, :func:`device_context`;
* memory: :func:`host_staging`, :func:`copy_rows`, :func:`empty_columns`, :func:`synchronize`,
  :func:`synchronize_device_of`, :func:`data_address`;
* order between threads: :func:`work_queued`, :func:`wait_for`;
* chunk layout: :func:`column_major_chunks`, :func:`gather_columns`;
* loops over a buffer: :func:`block_rows`, :func:`take_rows`, :func:`repeat`, :func:`permutation`;
* frames: :func:`is_frame`, :func:`resolve_frame_device`.

Device names are the seam's (``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"auto"``); functions that
take one also take a ``torch.device`` (its ``str`` is such a name).

Example:
    >>> import numpy as np
    >>> is_host("cpu"), is_host("cuda:1"), on_host(np.zeros(2)), array_device("cpu")
    (True, False, True, 'cpu')
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, ContextManager, Mapping, Sequence

import numpy as np
import pandas as pd

HOST = "cpu"  # the device name of host memory: numpy arrays, pandas frames, pyarrow tables


def _device_type(device: Any) -> str:
    return str(device).split(":")[0].lower()


def is_host(device: Any) -> bool:
    """True when ``device`` (a name such as ``"cpu"`` / ``"cuda:1"``, or a ``torch.device``)
    is host memory.

    Example:
        >>> is_host("cpu"), is_host("cuda")
        (True, False)
    """
    return _device_type(device) == HOST


def on_host(data: Any) -> bool:
    """True when ``data`` (an array, a frame, a pyarrow table...) is in host memory.

    Example:
        >>> import pyarrow as pa
        >>> on_host(pa.table({"a": [1]}))
        True
    """
    return not backend.is_gpu_object(data)


def array_device(device: Any) -> str:
    """The device the loader's arrays can live on when tensors are wanted on ``device``:
    ``device`` itself (index kept) for a CUDA device when CuPy is importable, else the host
    (batches are then copied to the device by the framework).

    Example:
        >>> array_device("cpu"), array_device("mps")
        ('cpu', 'cpu')
    """
    if _device_type(device) == "cuda" and backend.has_module("cupy"):
        return str(device)
    return HOST


def reads_frames(data_device: str, device: str) -> bool:
    """True when a loader on ``device`` takes the partitions of a dataset on ``data_device``
    as frames decoded on that device (cuDF on the GPU) rather than as pyarrow tables decoded
    on the host (the fast path for the host: no pandas).

    Example:
        >>> reads_frames("cpu", "cpu")
        False
    """
    return not is_host(device) and _device_type(data_device) == _device_type(device)


def pins_host_memory(device: Any) -> bool:
    """True when host buffers that feed ``device`` should be page-locked (pinned): for CUDA
    devices, where copies from pinned memory are asynchronous DMA transfers.

    Example:
        >>> pins_host_memory("cpu")
        False
    """
    return _device_type(device) == "cuda"


def device_context(device: Any) -> Callable[[], ContextManager]:
    """A function returning a context manager that makes ``device`` current in the thread that
    enters it: GPU ``N`` for ``"cuda:N"``, for ``"cuda"`` the GPU current in the calling thread
    now (background threads start on GPU 0, whatever the thread that made them uses); a no-op
    on the host. The previous device is restored on exit.

    Example:
        >>> with device_context("cpu")():
        ...     pass
    """
    if is_host(backend.resolve_device(device)):
        return contextlib.nullcontext
    cuda = backend.cupy().cuda
    name = str(device)
    index = int(name.split(":")[1]) if ":" in name else current_gpu()
    return functools.partial(cuda.Device, index)


def current_gpu(on_gpu: bool = True) -> int | None:
    """The calling thread's current GPU (its index), or None when ``on_gpu`` is False (without
    touching CUDA): part of the key of a cache whose entries live on a device, so that an entry
    copied to one GPU is never handed to work on another.

    Example:
        >>> current_gpu(on_gpu=False) is None
        True
    """
    return backend.cupy().cuda.runtime.getDevice() if on_gpu else None


def synchronize(device: Any) -> None:
    """Wait until the work queued on ``device`` (the calling thread's current GPU) is done;
    nothing to wait for on the host."""
    if not is_host(device):
        backend.cupy().cuda.runtime.deviceSynchronize()


def data_address(array: Any) -> int:
    """The address of the first element of a numpy or CuPy array (host or device memory).

    Example:
        >>> a = np.arange(4)
        >>> data_address(a[1:]) - data_address(a) == a.itemsize
        True
    """
    return array.ctypes.data if isinstance(array, np.ndarray) else array.data.ptr


def synchronize_device_of(array: Any) -> None:
    """Wait until the work queued on the GPU holding ``array`` is done (whichever GPU is current);
    nothing to wait for with host memory."""
    if not on_host(array):
        with array.device:
            backend.cupy().cuda.runtime.deviceSynchronize()


ALIGNMENT = 64  # bytes; TensorFlow aborts on tensors imported from less aligned memory


def aligned_empty(shape: Any, dtype: Any, alignment: int = ALIGNMENT) -> np.ndarray:
    """An uninitialized C-contiguous numpy array whose data starts on an ``alignment`` boundary.

    Example:
        >>> aligned_empty((2, 3), "int64").ctypes.data % 64
        0
    """
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def aligned_columns(ncols: int, rows: int, dtype: Any, alignment: int = ALIGNMENT) -> np.ndarray:
    """A ``(ncols, rows)`` array whose every row (a column of a batch) starts aligned.

    Rows are padded to a multiple of ``alignment`` bytes, so ``out[j]`` is a contiguous,
    aligned 1-D array that TensorFlow and PyTorch can import by DLPack without a copy.
    """
    itemsize = np.dtype(dtype).itemsize
    per_row = -(-rows * itemsize // alignment) * alignment // itemsize
    return aligned_empty((ncols, max(per_row, 1)), dtype, alignment)[:, :rows]


def column_major_chunks(device: Any) -> bool:
    """True where the loader keeps a chunk's columns column-major (``(columns, rows)``, each
    column contiguous) and shuffles the whole chunk with one gather per dtype, its batches
    being views of the result: on a GPU, where every operation is a kernel launch and Python
    call, so the work per batch must not grow with the number of columns, and where the
    columns copy from arrow to pinned memory contiguously. False on the host, where chunks are
    row-major and each batch gathers its rows in cache-sized blocks (one contiguous span per row).

    Example:
        >>> column_major_chunks("cpu")
        False
    """
    return not is_host(device)


def gather_columns(columns: Any, indices: Any) -> Any:
    """A new ``(columns, len(indices))`` C-contiguous array: ``out[:, i] = columns[:, indices[i]]``
    (one kernel on a GPU; indices must be in range).

    Example:
        >>> gather_columns(np.array([[1, 2, 3], [4, 5, 6]]), np.array([2, 0])).tolist()
        [[3, 1], [6, 4]]
    """
    return backend.array_lib(columns).take(columns, indices, axis=1)


def host_staging(array: Any, pooled: bool = True) -> Any:
    """Host memory to build the contents of ``array`` in before :func:`copy_rows` puts them
    there: ``array`` itself when it is in host memory (nothing to copy), else an uninitialized
    numpy array of its shape, dtype and memory order (C, or F for the transposed view of a
    column-major buffer) in page-locked (pinned) memory, from which the copy to the GPU is an
    asynchronous DMA transfer.

    ``pooled``: from CuPy's pinned memory pool, which keeps a freed block for the next request
    of its size -- right for staging reused at one size, wrong for staging used once per size
    (the pool would keep every one of them locked): with ``pooled=False`` the memory goes back
    to the system when the array is freed.

    Example:
        >>> a = np.zeros((2, 3))
        >>> host_staging(a) is a
        True
    """
    if on_host(array):
        return array
    dtype = np.dtype(array.dtype)
    count = int(np.prod(array.shape, dtype=np.int64))
    cuda, nbytes = backend.cupy().cuda, max(1, count * dtype.itemsize)
    memory = cuda.alloc_pinned_memory(nbytes) if pooled else cuda.PinnedMemoryPointer(cuda.PinnedMemory(nbytes), 0)
    order = "F" if _column_major(array) else "C"  # as copy_rows reads both: the same layout
    return np.frombuffer(memory, dtype=dtype, count=count).reshape(array.shape, order=order)


def copy_rows(destinations: Mapping[str, Any], sources: Mapping[str, Any],
              ranges: Sequence[tuple[int, int]], wait: bool = True) -> Any:
    """Copy rows ``[a, b)`` of every range from each 2-D array of ``sources`` (from
    :func:`host_staging`, same layout) into the same-key array of ``destinations``, and return
    when done -- or, with ``wait=False``, as soon as the copies are queued: the caller then
    calls ``synchronize()`` on the returned stream before the rows are read, and may meanwhile
    fill other rows of the staging (the loader packs a chunk's next partition while the rows of
    the one before travel). Returns the stream the copies were queued on, None when nothing was
    copied: every copy to a GPU goes to one stream of its own, so waiting for it after the last
    copy waits for all of them.

    Host destinations are their own staging: nothing is copied. GPU destinations are written
    by one 2-D DMA copy per array and range (a column-major buffer's rows ``[a, b)`` are one
    strided span per column) on a side stream that first waits for the work already queued on
    the device on this thread's current stream (which may still read the rows about to be
    overwritten) and does not hold up the work queued after it.

    Example:
        >>> a = {"x": np.zeros((3, 1))}
        >>> copy_rows(a, a, [(0, 3)]) is None  # host memory: already in place
        True
    """
    pairs = [(destinations[key], source) for key, source in sources.items() if source is not destinations[key]]
    if not pairs or not ranges:
        return None
    cuda = backend.cupy().cuda
    stream = _copy_stream()
    stream.wait_event(cuda.get_current_stream().record())
    for destination, source in pairs:
        for start, stop in ranges:
            offset, width, height, dpitch = _row_span(destination, start, stop)
            source_offset, _, _, spitch = _row_span(source, start, stop)
            cuda.runtime.memcpy2DAsync(destination.data.ptr + offset, dpitch, source.ctypes.data + source_offset,
                                       spitch, width, height, cuda.runtime.memcpyHostToDevice, stream.ptr)
    if wait:
        stream.synchronize()
    return stream


def work_queued(device: Any) -> Any:
    """A mark of the GPU work this thread has queued so far on ``device`` (an event on its
    current CuPy stream), for :func:`wait_for` in another thread; None on the host.

    CuPy's current stream is per thread: work a loader's prefetch thread queued is ordered
    before the consumer's only if the consumer waits for it (both threads on the legacy default
    stream serialize anyway; a stream set in the consumer's thread, or per-thread default
    streams, do not).

    Example:
        >>> work_queued("cpu") is None
        True
    """
    if is_host(device):
        return None
    return backend.cupy().cuda.get_current_stream().record()


def wait_for(mark: Any) -> None:
    """Make this thread's current CuPy stream wait (on the GPU, without blocking the host) for
    the work before a :func:`work_queued` mark; nothing for None."""
    if mark is not None:
        backend.cupy().cuda.get_current_stream().wait_event(mark)


def _row_span(array: Any, start: int, stop: int) -> tuple[int, int, int, int]:
    """Rows ``[start, stop)`` of a C- or F-ordered 2-D array as a 2-D memory span: (byte offset,
    bytes per line, lines, bytes between lines)."""
    item, columns = array.itemsize, array.shape[1]
    if _column_major(array):  # one line per column
        return start * item, (stop - start) * item, columns, array.strides[1]
    width = (stop - start) * columns * item  # row-major: the rows are one line
    return start * columns * item, width, 1, max(width, 1)


def _column_major(array: Any) -> bool:
    """True for a 2-D array of several columns whose rows are adjacent (each column one line
    in memory). Decided by the strides, not the contiguity flags: with one row, an array is C-
    and F-contiguous at once, and its staging must still be laid out as :func:`_row_span` reads it."""
    return array.ndim == 2 and array.shape[1] > 1 and array.strides[0] == array.itemsize


_STREAMS: dict[int, Any] = {}


def _copy_stream() -> Any:
    """The side stream of the current GPU for host-to-device copies (created once: creating a
    stream per chunk costs a driver call)."""
    cuda = backend.cupy().cuda
    device = current_gpu()
    if device not in _STREAMS:
        _STREAMS[device] = cuda.Stream(non_blocking=True)
    return _STREAMS[device]


def empty_columns(ncols: int, rows: int, dtype: Any, like: Any) -> Any:
    """An uninitialized ``(ncols, rows)`` array on the device of ``like`` whose every row (a
    column of a batch) is one contiguous 1-D array that frameworks import by DLPack without a
    copy; on the host each starts 64-byte aligned, as TensorFlow requires.

    Example:
        >>> empty_columns(2, 3, "int64", np.zeros(1))[1].ctypes.data % 64
        0
    """
    if on_host(like):
        return aligned_columns(ncols, rows, dtype)
    return backend.cupy().empty((ncols, rows), dtype=dtype)


def block_rows(array: Any, rows: int, block: int) -> int:
    """Rows per block for a loop that works through ``rows`` rows of ``array``: ``block`` in
    row-major host memory (a block's working set stays in the CPU cache), all of them on a GPU
    (each block costs kernel launches there) or when ``array``'s columns are contiguous (each
    is written in one pass); at least 1.

    Example:
        >>> block_rows(np.zeros(1), 10_000, 1024), block_rows(np.zeros(1), 10, 1024)
        (1024, 10)
    """
    row_major = array.ndim < 2 or array.shape[1] < 2 or array.strides[0] != array.itemsize
    return max(1, min(rows, block) if on_host(array) and row_major else rows)


def take_rows(array: Any, indices: Any, out: Any) -> Any:
    """``out[i] = array[indices[i]]`` along the first axis, in place, on the arrays' device
    (indices must be in range: the host skips the bounds check).

    Example:
        >>> out = np.empty(2, "int64")
        >>> take_rows(np.array([5, 6, 7]), np.array([2, 0]), out).tolist()
        [7, 5]
    """
    if on_host(array):
        return np.take(array, indices, axis=0, out=out, mode="clip")  # "clip": no bounds check, no buffering
    return backend.cupy().take(array, indices, axis=0, out=out)


def repeat(values: Any, counts: Any, total: int) -> Any:
    """Each ``values[i]`` ``counts[i]`` times, in order (``total`` is ``counts.sum()``): numpy's
    ``repeat``; CuPy's takes no array of counts, so on a GPU each output position looks its
    value up in the running sum of the counts.

    Example:
        >>> repeat(np.array([7, 8, 9]), np.array([2, 0, 1]), 3).tolist()
        [7, 7, 9]
    """
    if on_host(values):
        return np.repeat(values, counts)
    cp = backend.cupy()
    source = cp.searchsorted(cp.cumsum(counts), cp.arange(total), side="right")
    return values[source]


def flatnonzero(keep: Any, total: int) -> Any:
    """The positions (int64) where the bool array ``keep`` is True, in order (``total`` is how
    many are): numpy's ``flatnonzero``; CuPy's reads that count back from the device (a wait),
    so on a GPU each kept position is found by a binary search in the running count.

    Example:
        >>> flatnonzero(np.array([False, True, True, False]), 2).tolist()
        [1, 2]
    """
    if on_host(keep):
        return np.flatnonzero(keep)
    cp = backend.cupy()
    return cp.searchsorted(cp.cumsum(keep, dtype=cp.int64), cp.arange(1, total + 1, dtype=cp.int64))


def group_sums(codes: Any, weights: Any, n: int) -> Any:
    """The float64 sums of ``weights`` by group (``codes`` in ``0..n-1``; counts when ``weights``
    is None): numpy's ``bincount``; CuPy's reads the largest code back and whether any is
    negative (two waits for the device), so on a GPU each weight is added to its group
    (``cupy.add.at``: atomic, as CuPy's bincount adds too).

    Example:
        >>> group_sums(np.array([1, 0, 1]), np.array([0.5, 2.0, 1.0]), 3).tolist()
        [2.0, 1.5, 0.0]
    """
    if on_host(codes):
        return np.bincount(codes, weights, minlength=n).astype(np.float64, copy=False)
    cp = backend.cupy()
    out = cp.zeros(n, dtype=cp.float64)
    cp.add.at(out, codes, cp.ones(len(codes)) if weights is None else weights.astype(cp.float64, copy=False))
    return out


def permutation(n: int, key: Sequence[int], device: Any) -> Any:
    """A permutation of ``range(n)`` (int64) drawn on ``device`` from a generator seeded by
    ``key`` (never the global RNG). The host and the GPU draw from different generators: the
    same key gives different orders on the two.

    Example:
        >>> bool((permutation(5, [0, 1], "cpu") == permutation(5, [0, 1], "cpu")).all())
        True
    """
    if is_host(device):
        return np.random.default_rng(list(key)).permutation(n)
    cp = backend.cupy()
    seed = int(np.random.SeedSequence(list(key)).generate_state(1, dtype=np.uint32)[0])
    return cp.random.RandomState(seed).permutation(n).astype(cp.int64, copy=False)


def is_frame(data: Any) -> bool:
    """True for an in-memory DataFrame of either device (pandas or cuDF; not a Dask one).

    Example:
        >>> is_frame(pd.DataFrame({"a": [1]})), is_frame(np.zeros(1))
        (True, False)
    """
    if isinstance(data, pd.DataFrame):
        return True
    return type(data).__module__.split(".")[0] == "cudf" and type(data).__name__ == "DataFrame"


def resolve_frame_device(device: str | None) -> str:
    """The device a dataset keeps its frames on: ``device`` resolved (``"cuda"`` needs cuDF:
    raises with the install hint where it is missing), or for None the GPU when cuDF is usable
    there, else the host.

    Example:
        >>> resolve_frame_device("cpu")
        'cpu'
    """
    if device is None:
        return "cuda" if backend.cudf_available() else HOST
    resolved = backend.resolve_device(device)
    backend.dataframe_lib(resolved)  # datasets on the GPU are cuDF frames: fail early, with the hint
    return resolved


# backend.py imports this module at its end (the re-export); this module reads backend's names
# only when its functions run, so either module may be imported first.
from tabloader import backend  # noqa: E402
