"""Test-run setup shared by every test and doctest.

Triton must be imported before anything imports TensorFlow: importing it afterwards registers
LLVM options twice and kills the process. GPU tests (marked ``gpu``) are skipped at run time
where no CUDA device is usable; those that need cuDF as well (marked ``cudf``, which implies
``gpu``) are skipped, naming cuDF, where it is not installed.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

try:  # before TensorFlow, always
    import triton  # noqa: F401
except ImportError:
    pass

import pytest


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects: a ``cudf`` test is a ``gpu`` test
def pytest_collection_modifyitems(config, items):
    from tabloader import backend

    needs_cudf = [item for item in items if item.get_closest_marker("cudf") is not None]
    for item in needs_cudf:
        item.add_marker(pytest.mark.gpu)
    if not backend.cuda_available():
        skip_gpu = pytest.mark.skip(reason="needs a CUDA device; none is usable here")
        for item in items:
            if item.get_closest_marker("gpu") is not None:
                item.add_marker(skip_gpu)
    elif not backend.has_module("cudf"):  # a CUDA machine with CuPy and PyTorch only
        skip_cudf = pytest.mark.skip(reason=f"needs cuDF, which is not installed here: {backend.install_hint('cudf')}")
        for item in needs_cudf:
            item.add_marker(skip_cudf)
