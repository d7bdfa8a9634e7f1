"""On a CUDA machine without cuDF (the GPU test image: CuPy and PyTorch only), the tests that
need cuDF skip with a reason naming it instead of failing, and ``-m gpu`` still selects them.

They are marked ``cudf`` (the root ``conftest.py`` makes that mark imply ``gpu`` and skips such
tests where cuDF is not installed). The check runs pytest in a fresh interpreter in which
:func:`tabloader.backend.cuda_available` says True: the root ``conftest.py`` then decides as on
such a machine, and the selected tests, all marked ``cudf``, must all be skipped for cuDF.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tabloader import backend

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

AS_ON_A_CUDA_MACHINE = """
import sys
import pytest
from tabloader import backend
backend.cuda_available = lambda: True  # what the root conftest.py asks
sys.exit(pytest.main(sys.argv[1:]))
"""


@pytest.mark.skipif(backend.has_module("cudf"), reason="checks a machine without cuDF")
def test_cudf_tests_skip_naming_cudf_on_a_cuda_machine_without_it():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", AS_ON_A_CUDA_MACHINE, "-q", "-rs", "-m", "gpu", "-p", "no:cacheprovider",
                           "tests/test_gpu_defaults.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    source = open(os.path.join(ROOT, "tests", "test_gpu_defaults.py")).read()
    marked, tests = source.count("@pytest.mark.cudf\ndef test_"), source.count("\ndef test_")
    summary = done.stdout.strip().splitlines()[-1]
    # the tests marked cudf are selected by -m gpu, and all of them skip; the others are deselected
    assert summary.startswith(f"{marked} skipped, {tests - marked} deselected"), done.stdout
    skips = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips and all("needs cuDF, which is not installed here" in line for line in skips), done.stdout
