"""The categorical encoding contract: reserved ids and the checks that keep ids in range.

* ``0`` (:data:`PAD_ID`): padding, only ever written by loaders padding list columns;
* ``1`` (:data:`NULL_ID`): null / missing;
* ``[2, 2 + num_buckets)`` (from :data:`OOV_START`): out-of-vocabulary values;
* ``2 + num_buckets + i``: the ``i``-th vocabulary value.

A null component of a hashed cross hashes as :data:`NULL_HASH`.

Example:
    >>> PAD_ID, NULL_ID, OOV_START
    (0, 1, 2)
"""

from __future__ import annotations

from typing import Any

import numpy as np

PAD_ID = 0
NULL_ID = 1
OOV_START = 2

#: The hash a null component contributes to a cross (an arbitrary fixed 64-bit constant).
NULL_HASH = np.uint64(0x9AE16A3B2F90404F)


def label_of(op: Any) -> str:
    """How errors name the operator ``op`` that the encoding primitives work for (or a name given instead)."""
    return str(getattr(op, "label", op))


def integer_dtype(op: Any, dtype: Any) -> np.dtype:
    """``dtype`` as a numpy integer dtype, or a ValueError naming the operator."""
    try:
        out = np.dtype(dtype)
    except TypeError:
        out = None
    if out is None or out.kind not in "iu":
        raise ValueError(f"{label_of(op)}: dtype must be a numpy integer dtype (int32, int64, ...), got {dtype!r}")
    return out


def check_id_range(op: Any, what: str, max_id: int, dtype: Any, fix: str) -> None:
    """Raise a ValueError when ``dtype`` cannot hold ``max_id``: ids that wrapped around would
    be negative or collide while the schema promises ``max_id + 1`` rows."""
    if max_id > np.iinfo(np.dtype(dtype)).max:
        raise ValueError(f"{label_of(op)}: {what} needs ids up to {max_id}, which dtype {dtype} cannot hold "
                         f"(its maximum is {np.iinfo(np.dtype(dtype)).max}); {fix}")
