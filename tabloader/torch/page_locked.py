"""Host tensors that a GPU reads and writes in place: page-locked memory of exactly their size.

``torch.empty(..., pin_memory=True)`` takes its memory from PyTorch's caching pinned-memory
allocator, which rounds every block up to a power of two and keeps freed blocks locked for
later requests: a 300 GB embedding store would lock 512 GB, for as long as the process lives.
:func:`page_locked_empty` allocates ordinary host memory and registers it with CUDA
(``cudaHostRegister``, portable and mapped: every GPU of the process addresses it, through
unified addressing), so the lock covers its bytes only and ends when the tensor is freed.

Example (on a machine with a CUDA device):
    >>> store = page_locked_empty((1000, 128))          # doctest: +SKIP
    >>> store.is_pinned(), store.shape                  # doctest: +SKIP
    (True, torch.Size([1000, 128]))
"""

from __future__ import annotations

import math
import weakref
from typing import Sequence

import numpy as np
import torch

from tabloader.backend import aligned_empty

__all__ = ["page_locked_empty", "page_locked_copy"]

_PORTABLE_MAPPED = 0x01 | 0x02  # cudaHostRegisterPortable | cudaHostRegisterMapped
_PAGE = 4096


def page_locked_empty(shape: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An uninitialized, C-contiguous host tensor in page-locked memory registered with CUDA
    (see the module's text); it stays registered until the last tensor sharing its memory is
    freed. Needs a CUDA device. Raises a RuntimeError when CUDA refuses the registration (the
    memory-lock limit, ``ulimit -l``, or not enough physical memory)."""
    shape = tuple(int(s) for s in shape)
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)  # nothing to lock, nothing a kernel reads
    # whole pages (older drivers registered page-aligned ranges only), whose start also keeps the
    # kernels' 16-byte loads vectorized
    locked = -(-nbytes // _PAGE) * _PAGE
    raw = aligned_empty(locked, np.uint8, alignment=_PAGE)
    address = raw.ctypes.data
    error = torch.cuda.cudart().cudaHostRegister(address, locked, _PORTABLE_MAPPED)
    if int(error) != 0:
        raise RuntimeError(f"CUDA could not page-lock {nbytes / 2**30:.2f} GiB of host memory for a tensor of "
                           f"shape {shape} (cudaHostRegister error {int(error)}): check the memory-lock limit "
                           "(ulimit -l) and the free physical memory")
    # torch.from_numpy keeps `raw` alive as long as a tensor shares its memory; the registration
    # ends just before numpy frees it (weakref callbacks run first in its deallocation)
    weakref.finalize(raw, _unregister, address)
    return torch.from_numpy(raw)[:nbytes].view(dtype).view(shape)


def page_locked_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A copy of the host tensor ``tensor`` in page-locked memory (:func:`page_locked_empty`)."""
    return page_locked_empty(tensor.shape, tensor.dtype).copy_(tensor)


def _unregister(address: int) -> None:
    """End the registration of the memory at ``address`` once no kernel may still use it."""
    try:
        if not torch.cuda.is_current_stream_capturing():  # a sync would break a capture under way
            for index in range(torch.cuda.device_count()):
                torch.cuda.synchronize(index)
        torch.cuda.cudart().cudaHostUnregister(address)
    except Exception:  # pragma: no cover - the interpreter or CUDA shutting down: nothing left to protect
        pass
