"""Fixtures shared by the tests.

``device`` runs a test once on the CPU and once on CUDA; the CUDA run is marked ``gpu``, so it
is skipped where no CUDA device is usable (the root ``conftest.py``) and selected by
``pytest -m gpu`` on a GPU machine. The root ``conftest.py`` imports Triton before anything can
import TensorFlow; nothing here imports either.
"""

from __future__ import annotations

import pytest


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    """The seam's device name a test runs on: ``"cpu"``, or ``"cuda"`` (marked ``gpu``)."""
    return request.param
