"""Checks of JSON records read from untrusted files (a saved workflow's ``workflow.json``).

Each check raises ``ValueError`` naming where the record is and which key is wrong, before
anything is built from the record.

Example:
    >>> check_key({"kind": "op"}, "parents", list, "node 3", "a node")
    Traceback (most recent call last):
    ...
    ValueError: node 3: the key 'parents' is missing; a node needs 'parents' (list)
"""

from __future__ import annotations

from typing import Any

SHOWN_CHARS = 80  # how much of a bad value an error message quotes


def check_key(mapping: dict, key: str, kind: type, where: str, what: str) -> None:
    """Raise unless ``mapping[key]`` exists and is a JSON value of Python type ``kind``."""
    if key not in mapping:
        raise ValueError(f"{where}: the key {key!r} is missing; {what} needs {key!r} ({kind.__name__})")
    value = mapping[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{where}: {key!r} must be a JSON {kind.__name__}, got {value!r:.{SHOWN_CHARS}}")


def check_names(names: list, where: str) -> None:
    """Raise unless ``names`` are column names (strings)."""
    if not all(isinstance(n, str) for n in names):
        raise ValueError(f"{where}: expected column names (strings), got {names!r:.{SHOWN_CHARS}}")


def is_column(value: Any) -> bool:
    """A column name, or a group of them (a list of names)."""
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
