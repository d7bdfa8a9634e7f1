"""The GPU implementation of the encoding primitives (cuDF, CuPy): its place, not yet written.

:func:`tabloader.backend.encoding_for` hands this module to operators working on cuDF data.
Until the device versions exist (issue 14), every primitive here is the CPU one, which copies
a cuDF column to the host (once per column and partition) and returns host arrays -- what the
operators did before this package existed. Write the device versions here one primitive at a
time, keeping the names, arguments and results of :mod:`tabloader.encoding.cpu` (with CuPy
arrays and cuDF columns in place of numpy arrays and pyarrow arrays), getting the libraries
from ``backend.cudf()`` and ``backend.cupy()``; the table in :mod:`tabloader.encoding` says
how each primitive maps to cuDF and CuPy.
"""

from tabloader.encoding.cpu import *  # noqa: F401,F403 -- host round trips until the device versions exist
from tabloader.encoding.cpu import __all__  # noqa: F401
