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

from typing import Any, Iterator, Mapping

import numpy as np
import torch

from tabloader import backend
from tabloader import loader as core
from tabloader.torch.jagged import keyed_jagged

__all__ = ["Loader"]


class Loader(torch.utils.data.IterableDataset):
    """Batches ``(features, target)`` as torch tensors on ``device``.

    Takes the arguments of :class:`tabloader.loader.Loader`; ``device`` is a torch device
    (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``torch.device``). On CUDA the core loader works on
    that GPU (CuPy) and tensors are shared with it by DLPack; where CuPy is not installed (or
    for other device types) it works on the host and batches are copied to ``device``. When
    ``torch.distributed`` is initialized, its rank and world size stand for ``global_rank`` and
    ``global_size`` where they are not given, so every rank reads disjoint rows and yields the
    same number of batches.

    ``len(loader)`` is the number of batches per epoch. ``state_dict()`` / ``load_state_dict()``
    resume mid-epoch.

    Output forms (``output=``):

    * ``"dict"`` (default): ``(features, target)``, ``features`` column -> tensor (list columns
      ``(values, offsets)``, or ``(B, pad_to)`` with ``lists=``).
    * ``"jagged"``: ``(sparse, dense, target)`` for TorchRec-style models: ``sparse`` holds every
      categorical feature (single-hot and list columns together, in feature order) as one
      keyed jagged batch (:func:`tabloader.torch.jagged.keyed_jagged`: a
      ``torchrec.KeyedJaggedTensor`` when torchrec is importable, else a
      :class:`~tabloader.torch.jagged.KeyedJaggedBatch`), ``dense`` maps the other features to
      their tensors (``torch.stack(list(dense.values()), 1)`` is DLRM's dense input).
      ``sparse_weights={"items": "item_weights"}`` gives the values of ``items`` the weights of
      the list column ``item_weights`` (then left out of ``dense``).
    """

    def __init__(self, dataset: Any, batch_size: int, *, device: Any = "cpu", global_rank: int | None = None,
                 global_size: int | None = None, output: str = "dict", sparse_weights: Mapping[str, str] | None = None,
                 **kwargs: Any) -> None:
        super().__init__()
        self.device = torch.device(device)
        if (global_rank is None or global_size is None) and _distributed():  # the one not given: the group's
            global_rank = torch.distributed.get_rank() if global_rank is None else global_rank
            global_size = torch.distributed.get_world_size() if global_size is None else global_size
        self.loader = core.Loader(dataset, batch_size, device=backend.array_device(self.device),
                                  global_rank=global_rank, global_size=global_size, **kwargs)
        self.output, self.sparse_weights = output, sparse_weights
        self.sparse_keys = _sparse_keys(self.loader.layout, output, sparse_weights)
        # Weights must have their key's list lengths: the batcher checks that once per chunk, so
        # that building a batch compares no offsets (a wait for the GPU per batch).
        lists = self.loader.layout.lists
        self.loader.batcher.same_lengths = tuple((k, w) for k, w in (sparse_weights or {}).items() if k in lists)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[tuple[dict[str, Any], Any]]:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 0:
            raise RuntimeError("tabloader.torch.Loader batches and prefetches by itself: use it directly or with "
                               "DataLoader(loader, batch_size=None, num_workers=0); worker processes would each "
                               "yield the whole epoch")
        # The epoch starts here, not at the first next(): a new iter(loader) ends the running one at once.
        batches = self.loader.iterate(self._tensor)  # one DLPack import per dtype, not per column
        return batches if self.output == "dict" else map(self._keyed, batches)

    def _keyed(self, batch: tuple[dict[str, Any], Any]) -> tuple[Any, dict[str, Any], Any]:
        """A batch as ``(sparse, dense, target)`` for ``output="jagged"``."""
        features, target = batch
        sparse = keyed_jagged(features, self.sparse_keys, self.sparse_weights, check_lengths=False)
        skip = {*self.sparse_keys, *(self.sparse_weights or {}).values()}
        return sparse, {name: value for name, value in features.items() if name not in skip}, target

    def _tensor(self, array: Any) -> torch.Tensor:
        tensor = torch.from_dlpack(backend.exportable(array))
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


def _sparse_keys(layout: core.ColumnLayout, output: str, weights: Mapping[str, str] | None) -> list[str]:
    """The keys of the keyed jagged batch for ``output="jagged"`` (checked against the layout)."""
    if output not in ("dict", "jagged"):
        raise ValueError(f"output must be 'dict' or 'jagged', got {output!r}")
    if output == "dict":
        if weights is not None:
            raise ValueError("sparse_weights= needs output='jagged'")
        return []
    keys = list(layout.categorical)
    if not keys:
        raise ValueError("output='jagged' needs categorical features (tag them CATEGORICAL or pass categorical=)")
    for key in keys:
        dtype = layout.lists.get(key) or layout.where(key)[0]
        if np.dtype(dtype).kind not in "iu":
            raise ValueError(f"output='jagged': categorical feature {key!r} has dtype {dtype}; sparse features "
                             "must be integer ids (encode it with Categorify)")
        if key in layout.padded:
            raise ValueError(f"output='jagged': categorical feature {key!r} is padded by lists=; a keyed jagged "
                             "batch takes it as it is (drop it from lists=)")
    for key, column in (weights or {}).items():
        if key not in keys:
            raise ValueError(f"sparse_weights[{key!r}]: {key!r} is not a categorical feature; sparse keys: {keys}")
        if column not in layout.lists or column in layout.padded or column not in layout.features:
            raise ValueError(f"sparse_weights[{key!r}]: {column!r} must be a list feature of the loader "
                             "(continuous=[...]), not padded")
    return keys


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()
