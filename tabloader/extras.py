"""The optional packages behind tabloader's install extras, imported with an install hint.

``pip install tabloader`` brings the core (numpy, pandas, pyarrow, dask); PyTorch, TensorFlow
and Keras come with the ``torch`` and ``tf`` extras. A missing one used to surface as a bare
``No module named 'torch'`` from deep inside tabloader; :func:`require` names what needed it
and the install line instead. The error stays a ``ModuleNotFoundError`` (with the missing
package as its ``name``), so ``except ImportError`` around an import keeps working.
(The GPU packages have their own hints, per CUDA major: :mod:`tabloader.gpu_install`.)

Example:
    >>> require("numpy", "core", "this example").__name__
    'numpy'
    >>> try:
    ...     require("no_such_package_here", "torch", "tabloader.torch")
    ... except ModuleNotFoundError as exc:
    ...     print(exc.name, "|", str(exc).split(":")[0])
    no_such_package_here | tabloader.torch needs no_such_package_here, which is not installed
"""

from __future__ import annotations

import importlib
from types import ModuleType

# What to add to the install line when the package alone is not the best choice.
_NOTES = {
    "torch": " (on a machine without a GPU, PyTorch's CPU build is far smaller: "
             "--extra-index-url https://download.pytorch.org/whl/cpu)",
}


def require(module: str, extra: str, needed_by: str) -> ModuleType:
    """Import ``module`` or raise ``ModuleNotFoundError`` saying that ``needed_by`` needs it and
    how to install it: ``pip install 'tabloader[extra]'``.

    A module that is installed but fails to import (a broken install, a missing shared
    library) raises its own error unchanged: that message is the useful one.

    Example:
        >>> require("json", "core", "this example").dumps([1])
        '[1]'
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top = module.split(".")[0]
        if exc.name not in (module, top):
            raise
        hint = (f"{needed_by} needs {top}, which is not installed: pip install 'tabloader[{extra}]' "
                f"(from a checkout: pip install -e '.[{extra}]'){_NOTES.get(top, '')}")
        raise ModuleNotFoundError(hint, name=top) from None
