"""tabloader: preprocess, load and learn embeddings for tabular deep learning at hardware speed.

Example:
    >>> import pandas as pd, tabloader as tl
    >>> tl.Dataset(pd.DataFrame({"a": [1, 2]})).num_rows
    2
"""

from __future__ import annotations

import importlib
from typing import Any

from tabloader.dataset import Dataset
from tabloader.schema import ColumnSchema, Schema, Tags

__version__ = "0.1.0"

# Heavier parts load on first use, and the framework adapters only when asked for by name, so
# that `import tabloader` needs no framework and `tabloader.torch` never imports TensorFlow.
_LAZY = {
    "Workflow": ("tabloader.workflow", "Workflow"),
    "Loader": ("tabloader.loader", "Loader"),
    "register_operator": ("tabloader.registry", "register_operator"),
    "UntrustedError": ("tabloader.registry", "UntrustedError"),
    "ops": ("tabloader.ops", None),
    "synthetic": ("tabloader.synthetic", None),
    "backend": ("tabloader.backend", None),
    "serving": ("tabloader.serving", None),
    "torch": ("tabloader.torch", None),
    "tf": ("tabloader.tf", None),
}

__all__ = ["Dataset", "Schema", "ColumnSchema", "Tags", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'tabloader' has no attribute {name!r}")
    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    value = getattr(module, attr) if attr else module
    globals()[name] = value
    return value
