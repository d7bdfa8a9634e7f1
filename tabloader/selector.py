"""Column selections: names (a tuple of names is a group, for joint encodings) and tags.

Example:
    >>> from tabloader.schema import ColumnSchema, Schema
    >>> schema = Schema([ColumnSchema("a", tags={"categorical"}), ColumnSchema("b"), ColumnSchema("c")])
    >>> ColumnSelector([("b", "c")], tags=["categorical"]).resolve(schema)
    [('b', 'c'), 'a']
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from tabloader.records import check_key, is_column
from tabloader.schema import Schema

Columns = Sequence[Any]  # column names; a tuple of names is a group (for joint/combo encodings)


def flatten_columns(columns: Columns) -> list[str]:
    """Column names with groups expanded, in order, without repeats.

    Example:
        >>> flatten_columns(["a", ("b", "a"), "c"])
        ['a', 'b', 'c']
    """
    out: list[str] = []
    for col in columns:
        for name in (col if isinstance(col, (tuple, list)) else (col,)):
            if name not in out:
                out.append(name)
    return out


class ColumnSelector:
    """Columns chosen by name (a tuple of names is a group) and by tag.

    Example:
        >>> from tabloader.schema import ColumnSchema
        >>> s = Schema([ColumnSchema("a", tags={"categorical"}), ColumnSchema("b")])
        >>> ColumnSelector(["b"], tags=["categorical"]).resolve(s)
        ['b', 'a']
    """

    def __init__(self, names: Iterable[Any] = (), tags: Iterable[Any] = ()) -> None:
        self.names = [tuple(n) if isinstance(n, (list, tuple)) else n for n in names]
        self.tags = [str(t) for t in tags]

    def resolve(self, schema: Schema) -> list[Any]:
        """The selected columns of ``schema``; a missing name raises a KeyError listing what exists."""
        missing = [n for n in flatten_columns(self.names) if n not in schema]
        if missing:
            raise KeyError(f"column(s) {missing} selected but not in the data; available: {schema.column_names}")
        out = list(self.names)
        for col in schema.select_by_tag(*self.tags) if self.tags else []:
            if col.name not in out:
                out.append(col.name)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"names": [list(n) if isinstance(n, tuple) else n for n in self.names], "tags": self.tags}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ColumnSelector":
        return cls(data["names"], data["tags"])

    @staticmethod
    def check_dict(data: dict[str, Any], where: str) -> None:
        """Raise ValueError unless ``data`` (untrusted JSON) is what :meth:`to_dict` writes."""
        check_key(data, "names", list, where, "a selector")
        check_key(data, "tags", list, where, "a selector")
        if not all(map(is_column, data["names"])) or not all(isinstance(t, str) for t in data["tags"]):
            raise ValueError(f"{where}: selector names must be column names (or lists of them), tags strings")

    def describe(self) -> str:
        parts = [f'"{n}"' if isinstance(n, str) else str(list(n)) for n in self.names] + [f"tag:{t}" for t in self.tags]
        return f"[{', '.join(parts)}]"
