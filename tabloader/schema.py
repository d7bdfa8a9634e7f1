"""Column schemas: names, dtypes, tags and properties, with a JSON round trip.

A :class:`Schema` travels with every :class:`~tabloader.Dataset` and every fitted
:class:`~tabloader.Workflow`. Loaders read column roles from its tags and embedding layers read
table sizes from its properties (``cardinality``, ``embedding_dim``).

Example:
    >>> from tabloader.schema import ColumnSchema, Schema, Tags
    >>> s = Schema([ColumnSchema("C1", "int64", {Tags.CATEGORICAL}),
    ...             ColumnSchema("label", "float32", {Tags.TARGET})])
    >>> s.select_by_tag(Tags.TARGET).column_names
    ['label']
    >>> Schema.from_json(s.to_json()) == s
    True
"""

from __future__ import annotations

import dataclasses
import json
from enum import Enum
from typing import Any, Iterable, Iterator, Mapping

SCHEMA_FORMAT_VERSION = 1
SCHEMA_FILE_NAME = "_schema.json"


class Tags(str, Enum):
    """Roles a column can play. Tags are plain strings, so ``"categorical"`` works too."""

    CATEGORICAL = "categorical"
    CONTINUOUS = "continuous"
    TARGET = "target"
    LIST = "list"
    ID = "id"
    USER = "user"
    ITEM = "item"
    BINARY = "binary"
    REGRESSION = "regression"
    CONTEXT = "context"
    EMBEDDING = "embedding"

    def __str__(self) -> str:
        return self.value


def _normalize_tags(tags: Iterable[Any] | None) -> frozenset[str]:
    if tags is None:
        return frozenset()
    if isinstance(tags, (str, Tags)):
        tags = [tags]
    return frozenset(str(Tags(t)) if t in Tags._value2member_map_ or isinstance(t, Tags) else str(t) for t in tags)


# the suggested width's cap: wider rows rarely help, and a handful of huge tables would dominate memory
MAX_EMBEDDING_DIM = 512


def suggested_embedding_dim(cardinality: int, max_dim: int = MAX_EMBEDDING_DIM) -> int:
    """The suggested embedding width for a table of ``cardinality`` rows (the one rule).

    ``round(1.6 * cardinality ** 0.56)`` (fast.ai's rule of thumb; NVTabular's helper also
    raises it to at least 16), at most ``max_dim`` and at least 1; a cardinality of 0 gives 1. The categorical encoders record it
    in the schema as ``embedding_dim``, and the PyTorch and Keras layers use it for a column
    without that property. A negative (or NaN) ``cardinality`` or a ``max_dim`` below 1 raises
    ``ValueError``.

    Example:
        >>> suggested_embedding_dim(10), suggested_embedding_dim(1000), suggested_embedding_dim(10**7)
        (6, 77, 512)
        >>> suggested_embedding_dim(10**7, max_dim=64)
        64
    """
    if not float(cardinality) >= 0:  # `not >=` also refuses NaN
        raise ValueError(f"suggested_embedding_dim: cardinality must be >= 0, got {cardinality!r}")
    if max_dim < 1:
        raise ValueError(f"suggested_embedding_dim: max_dim must be >= 1, got {max_dim!r}")
    return int(max(1, min(max_dim, round(1.6 * float(cardinality) ** 0.56))))


@dataclasses.dataclass(frozen=True)
class ColumnSchema:
    """One column: name, dtype (a numpy dtype name such as ``"int64"``), tags and properties.

    For list columns ``dtype`` is the dtype of the elements and ``is_list`` is True.

    Example:
        >>> c = ColumnSchema("C1", "int64", {"categorical"}, {"cardinality": 100})
        >>> c.with_tags("user").tags == {"categorical", "user"}
        True
    """

    name: str
    dtype: str | None = None
    tags: frozenset[str] = frozenset()
    properties: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    is_list: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "tags", _normalize_tags(self.tags))
        object.__setattr__(self, "properties", dict(self.properties or {}))
        if self.dtype is not None:
            object.__setattr__(self, "dtype", str(self.dtype))

    def __hash__(self) -> int:
        return hash((self.name, self.dtype, self.tags, self.is_list))

    def has_tag(self, tag: Any) -> bool:
        return str(tag) in self.tags

    def with_name(self, name: str) -> "ColumnSchema":
        return dataclasses.replace(self, name=name)

    def with_dtype(self, dtype: Any, is_list: bool | None = None) -> "ColumnSchema":
        return dataclasses.replace(self, dtype=str(dtype), is_list=self.is_list if is_list is None else is_list)

    def with_tags(self, *tags: Any) -> "ColumnSchema":
        return dataclasses.replace(self, tags=self.tags | _normalize_tags(tags))

    def without_tags(self, *tags: Any) -> "ColumnSchema":
        return dataclasses.replace(self, tags=self.tags - _normalize_tags(tags))

    def with_properties(self, **properties: Any) -> "ColumnSchema":
        return dataclasses.replace(self, properties={**self.properties, **properties})

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dtype": self.dtype,
            "tags": sorted(self.tags),
            "properties": dict(self.properties),
            "is_list": self.is_list,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ColumnSchema":
        from tabloader.safe_dtypes import check_dtype_string

        return cls(
            name=data["name"],
            dtype=check_dtype_string(data.get("dtype"), f"schema column {data['name']!r}"),
            tags=frozenset(data.get("tags", ())),
            properties=data.get("properties", {}),
            is_list=bool(data.get("is_list", False)),
        )


class Schema:
    """An ordered collection of :class:`ColumnSchema`, selectable by name and by tag.

    Example:
        >>> s = Schema([ColumnSchema("a", "int64", {"categorical"}), ColumnSchema("b", "float32")])
        >>> s["a"].dtype, len(s), s.column_names
        ('int64', 2, ['a', 'b'])
    """

    def __init__(self, columns: Iterable[ColumnSchema | str] = ()) -> None:
        self._columns: dict[str, ColumnSchema] = {}
        for col in columns:
            col = ColumnSchema(col) if isinstance(col, str) else col
            self._columns[col.name] = col

    # --- container protocol -------------------------------------------------------------
    def __getitem__(self, name: str) -> ColumnSchema:
        try:
            return self._columns[name]
        except KeyError:
            raise KeyError(f"column {name!r} is not in the schema; available: {self.column_names}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._columns

    def __iter__(self) -> Iterator[ColumnSchema]:
        return iter(self._columns.values())

    def __len__(self) -> int:
        return len(self._columns)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schema):
            return NotImplemented
        return [c.to_dict() for c in self] == [c.to_dict() for c in other]

    def __add__(self, other: "Schema") -> "Schema":
        return Schema([*self, *other])

    def __repr__(self) -> str:
        rows = ", ".join(f"{c.name}:{c.dtype}{'[]' if c.is_list else ''}" for c in self)
        return f"Schema([{rows}])"

    @property
    def column_names(self) -> list[str]:
        return list(self._columns)

    # --- selection ----------------------------------------------------------------------
    def select_by_name(self, names: Iterable[str] | str) -> "Schema":
        names = [names] if isinstance(names, str) else list(names)
        return Schema([self[n] for n in names])

    def select_by_tag(self, *tags: Any, match_all: bool = False) -> "Schema":
        """Columns carrying any of ``tags`` (all of them with ``match_all=True``)."""
        wanted = _normalize_tags(tags)
        test = wanted.issubset if match_all else (lambda t: bool(wanted & t))
        return Schema([c for c in self if test(c.tags)])

    def remove_by_tag(self, *tags: Any) -> "Schema":
        wanted = _normalize_tags(tags)
        return Schema([c for c in self if not (wanted & c.tags)])

    def without(self, names: Iterable[str]) -> "Schema":
        drop = set(names)
        return Schema([c for c in self if c.name not in drop])

    def replace(self, column: ColumnSchema) -> "Schema":
        """A copy with ``column`` replacing (or appended as) the column of the same name."""
        cols = dict(self._columns)
        cols[column.name] = column
        return Schema(cols.values())

    # --- serialization ------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"format_version": SCHEMA_FORMAT_VERSION, "columns": [c.to_dict() for c in self]}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False, default=json_default)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Schema":
        if not isinstance(data, Mapping):
            raise TypeError(f"a schema is a JSON object with 'columns', not {type(data).__name__}")
        version = data.get("format_version", SCHEMA_FORMAT_VERSION)
        if not isinstance(version, int):
            raise ValueError(f"schema format_version must be an integer, got {version!r}")
        if version > SCHEMA_FORMAT_VERSION:
            raise ValueError(
                f"schema format version {version} is newer than this tabloader understands "
                f"({SCHEMA_FORMAT_VERSION}); upgrade tabloader"
            )
        return cls(ColumnSchema.from_dict(c) for c in data["columns"])

    @classmethod
    def from_json(cls, text: str) -> "Schema":
        return cls.from_dict(json.loads(text))

    def save(self, path: str, fs: Any = None) -> None:
        """Write the schema as JSON to ``path`` (through a temporary name, then renamed)."""
        from tabloader.atomic_files import write_text_atomic

        write_text_atomic(path, self.to_json(), fs=fs)

    @classmethod
    def load(cls, path: str, fs: Any = None) -> "Schema":
        import fsspec

        fs = fs or fsspec.core.url_to_fs(path)[0]
        with fs.open(path, "r") as f:
            text = f.read()
        try:
            return cls.from_json(text)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # JSONDecodeError is a ValueError
            raise ValueError(f"{path}: not a valid tabloader schema file ({exc})") from exc

    # --- inference ----------------------------------------------------------------------
    @classmethod
    def from_arrow(cls, arrow_schema: Any) -> "Schema":
        """Infer names, dtypes and the LIST tag from a ``pyarrow.Schema``; no roles are guessed."""
        import pyarrow as pa

        cols = []
        for field in arrow_schema:
            if field.name.startswith("__index_level_"):
                continue
            typ, is_list = field.type, False
            if pa.types.is_list(typ) or pa.types.is_large_list(typ):
                typ, is_list = typ.value_type, True
            tags = {Tags.LIST} if is_list else set()
            cols.append(ColumnSchema(field.name, arrow_dtype_name(typ), tags, is_list=is_list))
        return cls(cols)

    @classmethod
    def from_frame(cls, frame: Any) -> "Schema":
        """Infer a schema from a pandas, cuDF or Dask DataFrame (its dtypes)."""
        from tabloader import backend

        return cls.from_arrow(backend.frame_arrow_schema(frame))


def arrow_dtype_name(arrow_type: Any) -> str:
    """A numpy-style dtype name for an arrow type (``string`` for text, ``category`` for
    dictionaries); arrow's own name for the types pandas keeps arrow-backed (``decimal128(10,
    2)``, ``date32[day]``, ``binary``...).

    Example:
        >>> import pyarrow as pa
        >>> arrow_dtype_name(pa.int32()), arrow_dtype_name(pa.large_string()), arrow_dtype_name(pa.date32())
        ('int32', 'string', 'date32[day]')
        >>> arrow_dtype_name(pa.timestamp("us", tz="UTC"))
        'datetime64[us, UTC]'
    """
    import numpy as np
    import pyarrow as pa

    from tabloader import backend

    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "string"
    if pa.types.is_dictionary(arrow_type):
        return "category"
    if pa.types.is_timestamp(arrow_type):  # pandas' names, the time zone kept: datetime64[us, UTC]
        return f"datetime64[{arrow_type.unit}, {arrow_type.tz}]" if arrow_type.tz else f"datetime64[{arrow_type.unit}]"
    if backend.is_arrow_backed(arrow_type):
        return str(arrow_type)
    try:
        return str(np.dtype(arrow_type.to_pandas_dtype()))  # 'object' for nulls/decimals, not 'object_'
    except (NotImplementedError, TypeError):
        return str(arrow_type)


def is_supported_arrow_type(arrow_type: Any) -> bool:
    """True for the column types tabloader reads: numbers, booleans, strings, binary, decimals,
    dates, times, timestamps, durations, nulls, dictionaries of those, and lists of them.
    Structs, maps, unions, lists of lists and extension types are not.

    Example:
        >>> import pyarrow as pa
        >>> is_supported_arrow_type(pa.list_(pa.string())), is_supported_arrow_type(pa.list_(pa.list_(pa.int8())))
        (True, False)
    """
    import pyarrow as pa

    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return _is_supported_scalar(arrow_type.value_type)
    return _is_supported_scalar(arrow_type)


def _is_supported_scalar(arrow_type: Any) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    t = pa.types
    return any(test(arrow_type) for test in (
        t.is_integer, t.is_floating, t.is_boolean, t.is_string, t.is_large_string, t.is_binary, t.is_large_binary,
        t.is_fixed_size_binary, t.is_decimal, t.is_date, t.is_time, t.is_timestamp, t.is_duration, t.is_null))


def json_default(value: Any) -> Any:
    """``json.dumps(..., default=json_default)``: numpy scalars and arrays, and sets (sorted), as JSON.

    Example:
        >>> import json, numpy as np
        >>> json.dumps({"n": np.int64(3), "tags": {"b", "a"}, "v": np.array([1.5])}, default=json_default)
        '{"n": 3, "tags": ["a", "b"], "v": [1.5]}'
    """
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"value {value!r} of type {type(value).__name__} cannot be saved as JSON")
