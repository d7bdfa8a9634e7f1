"""Test-run setup shared by every test and doctest.

Triton must be imported before anything imports TensorFlow: importing it afterwards registers
LLVM options twice and kills the process. GPU tests are skipped at run time where no CUDA
device is usable.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

try:  # before TensorFlow, always
    import triton  # noqa: F401
except ImportError:
    pass

import pytest


def pytest_collection_modifyitems(config, items):
    from tabloader import backend

    if backend.cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device; none is usable here")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip_gpu)
