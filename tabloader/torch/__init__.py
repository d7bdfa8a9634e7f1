"""PyTorch adapters: the batch loader (and, beside it, embedding layers and kernels).

Importing this package imports PyTorch but never TensorFlow.

Example:
    >>> import tabloader.torch as tlt
    >>> tlt.Loader.__name__
    'Loader'
"""

from tabloader.torch.loader import Loader

__all__ = ["Loader"]

# Embedding layers and kernels are exported here as they land, e.g.:
# from tabloader.torch.layers import ...
