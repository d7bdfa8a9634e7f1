"""``tabloader.torch.Loader``: the core loader's batches as torch tensors, without copies.

It holds a :class:`tabloader.loader.Loader` and converts each array by DLPack
(``torch.from_dlpack``: numpy -> CPU tensor, CuPy -> CUDA tensor, both zero-copy), then puts it
on the requested device (a copy only where the core loader cannot work there itself). It is a
``torch.utils.data.IterableDataset``: iterate it directly in a training loop, or wrap it in
``torch.utils.data.DataLoader(loader, batch_size=None)`` with ``num_workers=0`` (the loader
batches, shuffles and prefetches by itself; worker processes would each yield the whole epoch,
so they are refused).

Example:
    >>> import numpy as np, pandas as pd, tabloader as tl, tabloader.torch
    >>> df = pd.DataFrame({"c": np.arange(6), "x": np.ones(6, "float32"), "y": np.zeros(6, "float32")})
    >>> loader = tl.torch.Loader(tl.Dataset(df), batch_size=4, categorical=["c"], continuous=["x"], target="y")
    >>> features, target = next(iter(loader))
    >>> features["c"].dtype, features["x"].shape, target.shape, len(loader)
    (torch.int64, torch.Size([4]), torch.Size([4]), 2)
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import torch

from tabloader import backend
from tabloader import loader as core

__all__ = ["Loader"]


class Loader(torch.utils.data.IterableDataset):
    """Batches ``(features, target)`` as torch tensors on ``device``.

    Takes the arguments of :class:`tabloader.loader.Loader`; ``device`` is a torch device
    (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``torch.device``). On CUDA the core loader works on
    that GPU (CuPy) and tensors are shared with it by DLPack; where CuPy is not installed (or
    for other device types) it works on the host and batches are copied to ``device``. When
    ``global_rank`` /
    ``global_size`` are not given and ``torch.distributed`` is initialized, its rank and world
    size are used, so every rank reads disjoint rows and yields the same number of batches.

    ``len(loader)`` is the number of batches per epoch. ``state_dict()`` / ``load_state_dict()``
    resume mid-epoch.
    """

    def __init__(self, dataset: Any, batch_size: int, *, device: Any = "cpu", global_rank: int | None = None,
                 global_size: int | None = None, **kwargs: Any) -> None:
        super().__init__()
        self.device = torch.device(device)
        if global_rank is None and global_size is None and _distributed():
            global_rank, global_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
        self.loader = core.Loader(dataset, batch_size, device=backend.array_device(self.device),
                                  global_rank=global_rank, global_size=global_size, **kwargs)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[tuple[dict[str, Any], Any]]:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 0:
            raise RuntimeError("tabloader.torch.Loader batches and prefetches by itself: use it directly or with "
                               "DataLoader(loader, batch_size=None, num_workers=0); worker processes would each "
                               "yield the whole epoch")
        for features, target in self.loader:
            yield ({name: self._convert(value) for name, value in features.items()},
                   None if target is None else self._tensor(target))

    def _convert(self, value: Any) -> Any:
        if isinstance(value, tuple):  # list column: (values, offsets)
            return tuple(self._tensor(v) for v in value)
        return self._tensor(value)

    def _tensor(self, array: Any) -> torch.Tensor:
        if isinstance(array, np.ndarray) and not array.flags.writeable:
            array = array.copy()  # read-only arrays (arrow memory) cannot be exported by DLPack
        tensor = torch.from_dlpack(array)
        return tensor if tensor.device == self.device else tensor.to(self.device, non_blocking=True)

    # --- delegated --------------------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        return self.loader.batch_size

    @property
    def epoch(self) -> int:
        return self.loader.epoch

    def state_dict(self) -> dict[str, Any]:
        """See :meth:`tabloader.loader.Loader.state_dict`."""
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """See :meth:`tabloader.loader.Loader.load_state_dict`."""
        self.loader.load_state_dict(state)

    def close(self) -> None:
        self.loader.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"tabloader.torch.{self.loader!r}"[:-1] + f", torch_device={str(self.device)!r})"


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()
