"""Byte sizes as users give them: ``"128MB"``, ``"1 GiB"``, ``"0.5 GB"`` or a number of bytes.

Example:
    >>> parse_size("128MB", "part_size"), parse_size("1 KiB", "buffer_size"), parse_size(3000, "part_size")
    (128000000, 1024, 3000)
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

# Dask's parse_bytes units, read here so that the loader works where dask is not installed (the
# lent GPU image has none): decimal and binary units, their one- and two-letter forms, any case.
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}
_UNITS = {"": 1, "b": 1}
for _letter, _power in zip("kmgtp", range(1, 6)):
    _UNITS.update({_letter: _DECIMAL[_letter], _letter + "b": _DECIMAL[_letter],
                   _letter + "i": 2 ** (10 * _power), _letter + "ib": 2 ** (10 * _power)})
_SIZE = re.compile(r"\s*([0-9.eE+-]*)\s*([a-zA-Z]*)\s*")


def parse_size(size: Any, argument: str) -> int:
    """``size`` in bytes, or a ValueError naming ``argument`` and what it accepts.

    Strings are read as Dask's ``parse_bytes`` reads them (decimal ``kB``/``MB``/``GB`` and binary
    ``KiB``/``MiB``/``GiB``), but must hold a number (Dask reads ``"MB"`` and ``""`` as sizes);
    numbers are whole bytes. Booleans and sizes below one byte are refused.

    Example:
        >>> parse_size("MB", "buffer_size")
        Traceback (most recent call last):
        ...
        ValueError: buffer_size='MB' is not a size such as '128MB' or 1000000 (no number in it)
    """
    try:
        if isinstance(size, (bool, np.bool_)) or not isinstance(size, (str, int, float, np.integer, np.floating)):
            raise TypeError(f"expected a string or a number, got {type(size).__name__}")
        if isinstance(size, str) and not any(ch.isdigit() for ch in size):
            raise ValueError("no number in it")
        value = _parse_bytes(size) if isinstance(size, str) else int(size)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ValueError(f"{argument}={size!r} is not a size such as '128MB' or 1000000 ({exc})") from None
    if value <= 0:
        raise ValueError(f"{argument} must be positive, got {size!r}")
    return value


def _parse_bytes(text: str) -> int:
    """Bytes in ``text`` such as ``"0.5 GB"`` or ``"1KiB"`` (a ValueError for an unknown unit)."""
    match = _SIZE.fullmatch(text)
    unit = match.group(2).lower() if match else None
    if unit not in _UNITS:
        raise ValueError(f"could not read {text!r} as a number and a unit such as MB or GiB")
    return int(float(match.group(1)) * _UNITS[unit])
