"""The framework-neutral batch loader: plan -> read -> chunk buffer -> shuffle -> batch -> prefetch.

One class per stage, one stage (or a tightly related pair) per module:

* :class:`PartitionPlan` (``plan``) -- which rows each rank reads in an epoch and how they are
  cut into chunks. The partition order comes from ``(seed, epoch)``; ranks get equal, disjoint
  row ranges of that order (partitions at the edges are split by rows).
* :class:`PartitionReader` (``reader``) -- decodes a partition (pyarrow on the CPU, cuDF on the
  GPU, a fitted workflow applied when the dataset is a transformed one), checks columns and
  nulls.
* :class:`ChunkBuffer` (``buffer``) -- packs the rows of a chunk into preallocated buffers on
  the device: one 2-D array per dtype (row-major on the CPU, so a shuffled row gather touches
  one contiguous span per row; column-major on a GPU) plus ``(values, offsets)`` for list columns.
* :class:`Shuffler` (``shuffle``) -- a seeded permutation of a chunk's rows (never the global
  RNG); on a GPU it gathers the whole chunk into that order, one kernel per dtype, so that
  batches are views of it.
* :class:`Batcher` (``batcher``) -- slices the permuted chunks into batches; a batch may span
  two chunks (the tail of one chunk is carried into the next), so every batch but the last is
  full.
* :class:`Prefetcher` (``prefetch``) -- builds the next chunk on a background thread while the
  current one is consumed, and re-raises its exceptions in the consumer.

:class:`Loader` (``core``) wires them together and yields ``(features, target)`` with numpy
(CPU) or CuPy (GPU) arrays; it imports no deep-learning framework. ``tabloader.torch.Loader``
adapts it. :class:`ColumnLayout` (``layout``) says which columns are features and targets and
how they are packed; :class:`ListPadding` (``lists``) how a list column becomes a dense padded
array (the loader's ``lists=``). Every public name is importable from ``tabloader.loader`` itself.

Example:
    >>> import numpy as np, pandas as pd, tabloader as tl
    >>> df = pd.DataFrame({"c": np.arange(10), "x": np.arange(10, dtype="float32"), "y": np.ones(10)})
    >>> loader = tl.Loader(tl.Dataset(df), batch_size=4, categorical=["c"], continuous=["x"], target="y")
    >>> [len(target) for features, target in loader]
    [4, 4, 2]
    >>> sorted(np.concatenate([f["c"] for f, _ in loader]).tolist()) == list(range(10))
    True
"""

from tabloader.loader.lists import ListPadding
from tabloader.loader.layout import ColumnLayout
from tabloader.loader.plan import ChunkSpec, PartitionPlan, Segment
from tabloader.loader.reader import LoaderReadError, PartitionReader, ReadAhead
from tabloader.loader.buffer import Chunk, ChunkBuffer
from tabloader.loader.shuffle import Shuffler
from tabloader.loader.batcher import Batcher
from tabloader.loader.prefetch import Prefetcher
from tabloader.loader.core import Loader

__all__ = [
    "Loader", "LoaderReadError", "ColumnLayout", "ListPadding", "Segment", "ChunkSpec", "PartitionPlan",
    "PartitionReader", "ReadAhead", "ChunkBuffer", "Chunk", "Shuffler", "Batcher", "Prefetcher",
]
