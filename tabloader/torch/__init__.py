"""PyTorch adapters: the batch loader and the embedding layers.

Importing this package imports PyTorch but never TensorFlow, and never Triton: the fused
kernels in ``tabloader.torch.kernels`` load on first use.

Example:
    >>> import tabloader.torch as tlt
    >>> tlt.Loader.__name__, tlt.FusedEmbeddingCollection.__name__
    ('Loader', 'FusedEmbeddingCollection')
"""

from tabloader.extras import require

require("torch", "torch", "tabloader.torch")

from tabloader.torch.fused import FusedEmbeddingCollection
from tabloader.torch.layers import (
    ConcatenatedEmbeddings,
    EmbeddingConfig,
    MultiHotEmbeddings,
    configs_from_schema,
    suggested_embedding_dim,
)
from tabloader.torch.jagged import KeyedJaggedBatch, keyed_jagged
from tabloader.torch.loader import Loader
from tabloader.torch.offload import OffloadedEmbeddingCollection, bytes_per_row, hot_rows_for_budget
from tabloader.torch.table_batched import exclude_from_ddp

__all__ = [
    "Loader",
    "KeyedJaggedBatch",
    "keyed_jagged",
    "EmbeddingConfig",
    "configs_from_schema",
    "suggested_embedding_dim",
    "ConcatenatedEmbeddings",
    "MultiHotEmbeddings",
    "FusedEmbeddingCollection",
    "OffloadedEmbeddingCollection",
    "exclude_from_ddp",
    "hot_rows_for_budget",
    "bytes_per_row",
]
