"""The categorical encoding contract: reserved ids and the checks that keep ids in range.

* ``0`` (:data:`PAD_ID`): padding, only ever written by loaders padding list columns;
* ``1`` (:data:`NULL_ID`): null / missing;
* ``[2, 2 + num_buckets)`` (from :data:`OOV_START`): out-of-vocabulary values;
* ``2 + num_buckets + i``: the ``i``-th vocabulary value.

A null component of a hashed cross hashes as :data:`NULL_HASH`.

Decoding ids back to values (``Categorify.inverse_transform``) gives the ``i``-th vocabulary
value for ``2 + num_buckets + i``, and for the reserved ids the sentinels the caller chooses,
by default a missing value for all three (padding, null, out-of-vocabulary): see
:func:`vocabulary_positions`. A vocabulary exported as a table (``Categorify.vocabulary_table``)
has the columns ``value`` (a combination: one column per input column), ``id`` and ``count``
(the number of times the value was seen at fit; missing for user-given vocabularies).

Example:
    >>> PAD_ID, NULL_ID, OOV_START
    (0, 1, 2)
    >>> first_vocabulary_id(num_buckets=1), cardinality(num_buckets=1, vocabulary_size=3)
    (3, 6)
"""

from __future__ import annotations

from typing import Any

import numpy as np

PAD_ID = 0
NULL_ID = 1
OOV_START = 2

#: The hash a null component contributes to a cross (an arbitrary fixed 64-bit constant).
NULL_HASH = np.uint64(0x9AE16A3B2F90404F)


def first_vocabulary_id(num_buckets: int) -> int:
    """The id of the first (most frequent) vocabulary value."""
    return OOV_START + int(num_buckets)


def cardinality(num_buckets: int, vocabulary_size: int) -> int:
    """Rows of the embedding table of an encoded column: reserved ids, OOV buckets, vocabulary."""
    return first_vocabulary_id(num_buckets) + int(vocabulary_size)


def vocabulary_positions(op: Any, name: str, ids: np.ndarray, num_buckets: int,
                         vocabulary_size: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Positions in the vocabulary of encoded ``ids`` (int64, ``-1`` for a reserved id) and
    the masks of the reserved ids (``"padding"``, ``"null"``, ``"oov"``). An id outside
    ``[0, cardinality)`` raises a ValueError naming the operator, column and id.

    Example:
        >>> pos, reserved = vocabulary_positions("op", "c", np.array([0, 1, 2, 3, 4]), 1, 2)
        >>> pos.tolist(), reserved["oov"].tolist()
        ([-1, -1, -1, 0, 1], [False, False, True, False, False])
    """
    ids = np.asarray(ids, dtype=np.int64)
    card = cardinality(num_buckets, vocabulary_size)
    bad = (ids < 0) | (ids >= card)
    if bad.any():
        raise ValueError(f"{label_of(op)}: column {name!r} holds id {int(ids[bad][0])}, outside the encoding's "
                         f"range [0, {card})")
    positions = ids - first_vocabulary_id(num_buckets)
    reserved = {"padding": ids == PAD_ID, "null": ids == NULL_ID, "oov": (ids >= OOV_START) & (positions < 0)}
    return np.where(positions < 0, -1, positions), reserved


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
