"""Byte sizes as users give them: ``"128MB"``, ``"1 GiB"``, ``"0.5 GB"`` or a number of bytes.

Example:
    >>> parse_size("128MB", "part_size"), parse_size("1 KiB", "buffer_size"), parse_size(3000, "part_size")
    (128000000, 1024, 3000)
"""

from __future__ import annotations

from typing import Any

import numpy as np


def parse_size(size: Any, argument: str) -> int:
    """``size`` in bytes, or a ValueError naming ``argument`` and what it accepts.

    Strings are read by Dask's ``parse_bytes`` (decimal ``kB``/``MB``/``GB`` and binary
    ``KiB``/``MiB``/``GiB``), but must hold a number (Dask reads ``"MB"`` and ``""`` as sizes);
    numbers are whole bytes. Booleans and sizes below one byte are refused.

    Example:
        >>> parse_size("MB", "buffer_size")
        Traceback (most recent call last):
        ...
        ValueError: buffer_size='MB' is not a size such as '128MB' or 1000000 (no number in it)
    """
    from dask.utils import parse_bytes

    try:
        if isinstance(size, (bool, np.bool_)) or not isinstance(size, (str, int, float, np.integer, np.floating)):
            raise TypeError(f"expected a string or a number, got {type(size).__name__}")
        if isinstance(size, str) and not any(ch.isdigit() for ch in size):
            raise ValueError("no number in it")
        value = parse_bytes(size) if isinstance(size, str) else int(size)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ValueError(f"{argument}={size!r} is not a size such as '128MB' or 1000000 ({exc})") from None
    if value <= 0:
        raise ValueError(f"{argument} must be positive, got {size!r}")
    return value
