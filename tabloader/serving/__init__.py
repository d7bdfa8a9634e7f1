"""Serving a fitted workflow: small requests transformed without Dask or DataFrames.

:class:`Server` compiles a fitted :class:`~tabloader.Workflow` once into one numpy function
per node of its plan, then transforms requests given as a dict of Python lists or numpy
arrays (one to a few thousand rows) into numpy arrays (or torch tensors) ready for the model,
equal to what ``Workflow.transform`` gives for the same rows.

A request column is read as the dtype the workflow saw at fit (``wf.input_schema_``), as a
:class:`~tabloader.Dataset` would read it: None or NaN is a null (integer and boolean columns
with nulls become pandas' nullable ``Int64``/``boolean``, float columns hold NaN, strings and
lists a null), a value of another kind (a string for an integer column, ``2.5`` for an integer
column, a number beyond the dtype's range) raises a ``TypeError`` naming the column and the
value. :meth:`Server.frame` gives the DataFrame a request stands for.

Operators with a fast path (:data:`FAST_OPERATORS`): ``Categorify``, ``HashBucket``,
``HashedCross``, ``FillMissing``, ``FillMedian``, ``Normalize``, ``NormalizeMinMax``, ``LogOp``,
``Clip``, ``Bucketize``, ``Rename``, ``AddTags`` and ``AddProperties``. Every other operator,
and a fast one given inputs its fast path does not take (a list column for ``FillMissing``, a
fill value that would change the column's dtype, ...), runs the DataFrame path for its node:
``Workflow.transform``'s own code on the request's DataFrame. A workflow that can drop rows
(``Filter``, ``Dropna``) runs the DataFrame path for the whole request.
:attr:`Server.fallbacks` counts the nodes that ran it.

Example:
    >>> import numpy as np, pandas as pd, tabloader as tl
    >>> from tabloader import ops
    >>> train = pd.DataFrame({"c": ["a", "b", "a"], "x": [1.0, None, 3.0]})
    >>> wf = tl.Workflow((["c"] >> ops.Categorify()) + (["x"] >> ops.FillMissing(0) >> ops.Normalize()),
    ...                  progress=False).fit(train)
    >>> server = Server(wf)
    >>> out = server.transform({"c": ["a", "zzz", None], "x": [3.0, None, 1.0]})
    >>> out["c"].tolist(), out["x"].astype("float64").round(3).tolist(), out["x"].dtype
    ([3, 2, 1], [1.336, -1.069, -0.267], dtype('float32'))
    >>> server.fallbacks
    Counter()
"""

from tabloader.serving.fast_paths import FAST_OPERATORS
from tabloader.serving.server import Server

__all__ = ["Server", "FAST_OPERATORS"]
