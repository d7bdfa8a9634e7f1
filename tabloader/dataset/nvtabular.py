"""NVTabular's output directories: which files are not data, and the schema written beside it.

NVTabular 23.08 (``workflow.transform(ds).to_parquet(path)``, through ``merlin.io``) leaves in
``path``: the data files (``part_0.parquet``... or ``0.parquet``...), ``_file_list.txt``,
``_metadata`` (the files' parquet footers), ``_metadata.json``, ``schema.pbtxt`` (a
tensorflow-metadata ``Schema`` in protobuf text format) and ``.merlin/schema.json`` (the same
schema as JSON, which Merlin reads first). Names starting with ``_`` or ``.`` are never data
for a :class:`~tabloader.Dataset`; :data:`NON_DATA_FILES` names the others.

:func:`read_schema` turns that schema into a :class:`~tabloader.schema.Schema`: each feature's
tags (``categorical``, ``continuous``, ``target``, ...), and its properties, among them
``cardinality`` and ``embedding_dim`` (from NVTabular's ``embedding_sizes``, or the integer
domain of a categorical feature), ``domain`` and ``value_count``. Both files are parsed as
data by the small readers below: nothing is imported, evaluated or unpickled.

Example:
    >>> text = '''feature { name: "C1" type: INT
    ...   int_domain { name: "C1" max: 99 is_categorical: true }
    ...   annotation { tag: "categorical" } }'''
    >>> column = schema_from_pbtxt(text)["C1"]
    >>> sorted(column.tags), column.properties["cardinality"], column.dtype
    (['categorical'], 100, 'int64')
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
from typing import Any

from tabloader.filesystems import join
from tabloader.schema import ColumnSchema, Schema, Tags

#: NVTabular's files that are not data and do not start with ``_`` or ``.``.
NON_DATA_FILES = frozenset({"schema.pbtxt"})

#: Where NVTabular writes its schema, in the order Merlin reads them.
SCHEMA_FILES = (".merlin/schema.json", "schema.pbtxt")

_MAX_DEPTH = 64  # nesting of messages: far beyond a real schema, and no RecursionError on a crafted one
# Struct properties that describe the storage, not the column (the data says those).
_STORAGE_PROPERTIES = ("_dims", "is_list", "is_ragged", "dtype_item_size", "embedding_sizes")


def read_schema(fs: Any, directory: str) -> Schema | None:
    """The schema NVTabular wrote in ``directory`` (``.merlin/schema.json``, else
    ``schema.pbtxt``), or None when there is neither. A file that cannot be parsed raises a
    ValueError naming it."""
    for name, parse in zip(SCHEMA_FILES, (schema_from_json, schema_from_pbtxt)):
        path = join(directory, name)
        if not fs.exists(path):
            continue
        with fs.open(path, "rb") as f:
            raw = f.read()
        try:
            return parse(raw.decode("utf-8"))
        except (ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: not a readable NVTabular schema ({exc})") from exc
    return None


# --- the two formats, as one list of features --------------------------------------------------
def schema_from_pbtxt(text: str) -> Schema:
    """A Schema from the protobuf text of a tensorflow-metadata ``Schema`` (``schema.pbtxt``)."""
    message = _TextParser(text).message()
    return Schema(_column(_feature_from_text(f)) for f in message.get("feature", []))


def schema_from_json(text: str) -> Schema:
    """A Schema from Merlin's JSON form of the same ``Schema`` (``.merlin/schema.json``).

    Example:
        >>> doc = {"feature": [{"name": "y", "type": "FLOAT", "annotation": {"tag": ["target"]}}]}
        >>> schema_from_json(json.dumps(doc))["y"].tags == {"target"}
        True
    """
    document = json.loads(text)
    if not isinstance(document, dict):
        raise TypeError(f"expected a JSON object with 'feature', got {type(document).__name__}")
    return Schema(_column(_feature_from_json(f)) for f in document.get("feature", []))


def _feature_from_text(message: dict) -> dict:
    annotation = _one(message, "annotation") or {}
    domain, counts = _one(message, "int_domain"), _one(message, "value_count")
    name = _one(message, "name")
    return {
        "name": None if name is None else _text(name),
        "type": _one(message, "type"),
        "int_domain": None if domain is None else {k: _one(domain, k) for k in ("min", "max", "is_categorical")
                                                   if k in domain},
        "value_count": None if counts is None else {k: _one(counts, k) for k in ("min", "max") if k in counts},
        "tags": [_text(t) for t in annotation.get("tag", [])],
        "metadata": [_any_from_text(a) for a in annotation.get("extra_metadata", [])],
    }


def _feature_from_json(feature: dict) -> dict:
    annotation = feature.get("annotation") or {}
    domain = feature.get("intDomain")
    return {
        "name": feature.get("name"),
        "type": feature.get("type"),
        "int_domain": None if domain is None else {k: domain[j] for k, j in
                                                   (("min", "min"), ("max", "max"), ("is_categorical", "isCategorical"))
                                                   if j in domain},
        "value_count": feature.get("valueCount"),
        "tags": list(annotation.get("tag", [])),
        "metadata": [_any_from_json(a) for a in annotation.get("extraMetadata", [])],
    }


def _column(feature: dict) -> ColumnSchema:
    """Our ColumnSchema of one feature (given as the dict the two readers above build)."""
    name = feature["name"]
    if not isinstance(name, str) or not name:
        raise ValueError(f"a feature without a name (tags {feature['tags']})")
    props: dict[str, Any] = {}
    for metadata in feature["metadata"]:
        props.update(metadata)
    tags = set(feature["tags"])
    domain, counts = feature["int_domain"], feature["value_count"]
    sizes = props.get("embedding_sizes") if isinstance(props.get("embedding_sizes"), dict) else {}
    extra: dict[str, Any] = {}
    if domain is not None and _flag(domain.get("is_categorical")):
        tags.add(str(Tags.CATEGORICAL))
    if domain is not None and "max" in domain:  # protobuf leaves out a min of 0
        extra["domain"] = {"min": _integer(domain.get("min", 0)), "max": _integer(domain["max"])}
    if "cardinality" in sizes:
        extra["cardinality"] = _integer(sizes["cardinality"])
    elif "domain" in extra and str(Tags.CATEGORICAL) in tags:
        extra["cardinality"] = extra["domain"]["max"] + 1
    if "dimension" in sizes:
        extra["embedding_dim"] = _integer(sizes["dimension"])
    if counts:
        extra["value_count"] = {k: _integer(counts[k]) for k in ("min", "max") if k in counts}
    is_list = _flag(props.get("is_list")) or any(extra.get("value_count", {}).values())
    if is_list:
        tags.add(str(Tags.LIST))
    kept = {k: v for k, v in props.items() if k not in _STORAGE_PROPERTIES}
    return ColumnSchema(name, _dtype(feature["type"], props.get("dtype_item_size")), tags,
                        {**kept, **extra}, is_list=bool(is_list))


def _dtype(feature_type: Any, item_size: Any) -> str | None:
    """Merlin's rule: INT -> int64 (or the width ``dtype_item_size`` gives), FLOAT -> float64
    (likewise), BYTES -> string. The data's own dtypes replace it when a Dataset reads it."""
    kind = {"INT": "int", "FLOAT": "float", "BYTES": "string", 2: "int", 3: "float", 1: "string"}.get(feature_type)
    if kind in (None, "string"):
        return kind
    bits = _integer(item_size) if item_size else 64
    return f"{kind}{bits if bits in ((8, 16, 32, 64) if kind == 'int' else (16, 32, 64)) else 64}"


def _integer(value: Any) -> int:
    """An integer from a protobuf field (JSON writes 64-bit integers as strings; Struct
    numbers are doubles)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    number = float(value)
    if not number.is_integer():
        raise ValueError(f"expected an integer, got {value!r}")
    return int(number)


def _flag(value: Any) -> bool:
    """A protobuf bool: JSON's true, or the text format's words (true, True, t) and 1."""
    return value is True or value in ("true", "True", "t", 1)


def _one(message: dict, field: str) -> Any:
    """The last value of a field of a parsed text message (protobuf's rule for singular fields)."""
    values = message.get(field)
    return values[-1] if values else None


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


# --- google.protobuf.Any holding a Struct: the properties of a feature -------------------------
_STRUCT_URL = "type.googleapis.com/google.protobuf.Struct"


def _any_from_text(message: dict) -> dict:
    """The properties in an ``extra_metadata`` entry of the text format: either
    ``type_url`` + ``value`` (the Struct's serialized bytes, escaped) or the expanded form
    ``[type.googleapis.com/google.protobuf.Struct] { fields { ... } }``."""
    expanded = message.get(f"[{_STRUCT_URL}]")
    if expanded:
        return _struct_from_text(expanded[-1])
    url = _one(message, "type_url")
    if url is None:
        return {}
    if _text(url) != _STRUCT_URL:
        raise ValueError(f"extra_metadata of type {_text(url)!r}; only {_STRUCT_URL} is read")
    value = _one(message, "value") or b""
    return _decode_struct(value if isinstance(value, bytes) else value.encode("latin-1"))


def _any_from_json(entry: Any) -> dict:
    """The properties of an ``extraMetadata`` entry of the JSON form (the Struct as an object,
    or ``{"@type": ..., "value": ...}``)."""
    if not isinstance(entry, dict):
        raise ValueError(f"extraMetadata entries are objects, got {entry!r}")
    if "@type" not in entry:
        return _plain_numbers(entry)
    value = entry.get("value")
    if isinstance(value, str):
        return _decode_struct(base64.b64decode(value))
    return _plain_numbers(value or {})


def _struct_from_text(message: dict) -> dict:
    return {_text(_one(f, "key")): _value_from_text(_one(f, "value") or {}) for f in message.get("fields", [])}


def _value_from_text(message: dict) -> Any:
    if "struct_value" in message:
        return _struct_from_text(_one(message, "struct_value"))
    if "list_value" in message:
        return [_value_from_text(v) for v in _one(message, "list_value").get("values", [])]
    if "number_value" in message:
        return _plain_number(float(_one(message, "number_value")))
    if "string_value" in message:
        return _text(_one(message, "string_value"))
    if "bool_value" in message:
        return _flag(_one(message, "bool_value"))
    return None  # null_value, or no value


def _plain_numbers(value: Any) -> Any:
    """Struct numbers are doubles: integral ones become ints (cardinality 6041.0 -> 6041)."""
    if isinstance(value, dict):
        return {k: _plain_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_numbers(v) for v in value]
    return _plain_number(value) if isinstance(value, float) else value


def _plain_number(number: float) -> Any:
    return int(number) if math.isfinite(number) and number.is_integer() else number


def _decode_struct(data: bytes) -> dict:
    """A ``google.protobuf.Struct`` from its wire format (field 1: map entries key=1, value=2)."""
    out = {}
    for field, entry in _wire_fields(data):
        if field == 1:
            items = dict(_wire_fields(entry))
            out[items.get(1, b"").decode("utf-8")] = _decode_value(items.get(2, b""))
    return out


def _decode_value(data: bytes) -> Any:
    """A ``google.protobuf.Value``: 1 null, 2 number (double), 3 string, 4 bool, 5 Struct, 6 ListValue."""
    value: Any = None
    for field, raw in _wire_fields(data):
        if field == 2:
            value = _plain_number(struct.unpack("<d", raw)[0])
        elif field == 3:
            value = raw.decode("utf-8")
        elif field == 4:
            value = bool(raw)
        elif field == 5:
            value = _decode_struct(raw)
        elif field == 6:
            value = [_decode_value(v) for f, v in _wire_fields(raw) if f == 1]
        elif field == 1:
            value = None
    return value


def _wire_fields(data: bytes) -> list[tuple[int, Any]]:
    """(field number, value) of a protobuf message: varints as ints, 64-bit fields as their
    8 bytes, length-delimited fields as bytes. Truncated or unknown wire types raise ValueError."""
    out, pos = [], 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos:pos + size], pos + size
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} in extra_metadata")
        if pos > len(data):
            raise ValueError("truncated protobuf message in extra_metadata")
        out.append((field, value))
    return out


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated protobuf varint in extra_metadata")
        byte = data[pos]
        result |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return result, pos


# --- protobuf text format ----------------------------------------------------------------------
_TOKEN = re.compile(r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<extension>\[[A-Za-z_]\w*(?:[./][\w-]+)+\])
  | (?P<word>[-+]?(?:0[xX][0-9A-Fa-f]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?|[A-Za-z_][\w.]*))
  | (?P<punct>[{}<>:,;\[\]])
""", re.VERBOSE)
_ESCAPE = re.compile(rb"\\(x[0-9A-Fa-f]{1,2}|[0-7]{1,3}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)", re.S)
_SIMPLE_ESCAPES = {b"n": b"\n", b"t": b"\t", b"r": b"\r", b"a": b"\a", b"b": b"\b", b"f": b"\f", b"v": b"\v"}


class _TextParser:
    """Parses protobuf text format into nested dicts: field name -> list of values (strings as
    bytes, numbers, enum names and booleans as words, messages as dicts). It knows no message
    types, so every field is kept; the caller picks the ones it reads."""

    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str, int]] = []
        pos, line = 0, 1
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if match is None:
                raise ValueError(f"line {line}: unexpected character {text[pos]!r}")
            if match.lastgroup != "space":
                self.tokens.append((match.lastgroup, match.group(), line))
            line += match.group().count("\n")
            pos = match.end()
        self.index = 0

    def message(self, closing: str | None = None, depth: int = 0) -> dict:
        """The fields up to ``closing`` (the end of the text for the top-level message)."""
        if depth > _MAX_DEPTH:
            raise ValueError(f"line {self._line()}: messages nested deeper than {_MAX_DEPTH}")
        fields: dict[str, list] = {}
        while not self._at(closing):
            kind, name, line = self._next()
            if kind not in ("word", "extension"):
                raise ValueError(f"line {line}: expected a field name, got {name!r}")
            fields.setdefault(name, []).extend(self._values(name, line, depth))
            if not self._accept(","):  # fields may end with ',' or ';'
                self._accept(";")
        if closing is not None:
            self._next()
        return fields

    def _values(self, name: str, line: int, depth: int) -> list:
        """The value(s) after a field name: a message, ``: [a, b]``, or ``: scalar``."""
        colon = self._accept(":")
        if self._peek() in ("{", "<"):
            opening = self._next()[1]
            return [self.message("}" if opening == "{" else ">", depth + 1)]
        if colon and self._accept("["):
            return self._list()
        if colon:
            return [self._scalar()]
        raise ValueError(f"line {line}: expected ':' or '{{' after {name!r}")

    def _list(self) -> list:
        values: list = []
        while not self._accept("]"):
            values.append(self._scalar())
            self._accept(",")
        return values

    def _scalar(self) -> Any:
        kind, token, line = self._next()
        if kind == "string":
            value = _unescape(token)
            while self.index < len(self.tokens) and self.tokens[self.index][0] == "string":
                value += _unescape(self._next()[1])  # adjacent strings concatenate
            return value
        if kind != "word":
            raise ValueError(f"line {line}: expected a value, got {token!r}")
        return _word(token)

    def _at(self, closing: str | None) -> bool:
        if self.index >= len(self.tokens):
            if closing is not None:
                raise ValueError(f"unexpected end of file: {closing!r} is missing")
            return True
        return self.tokens[self.index][1] == closing

    def _peek(self) -> str | None:
        return self.tokens[self.index][1] if self.index < len(self.tokens) else None

    def _next(self) -> tuple[str, str, int]:
        if self.index >= len(self.tokens):
            raise ValueError("unexpected end of file")
        self.index += 1
        return self.tokens[self.index - 1]

    def _accept(self, punct: str) -> bool:
        if self._peek() == punct:
            self.index += 1
            return True
        return False

    def _line(self) -> int:
        return self.tokens[min(self.index, len(self.tokens) - 1)][2] if self.tokens else 1


def _word(token: str) -> Any:
    """A number, or a word (an enum value, ``true``/``false``) as it is."""
    for parse in (lambda t: int(t, 0), float, lambda t: float(t[:-1])):  # the last: 1.5f
        try:
            return parse(token)
        except ValueError:
            pass
    return token


def _unescape(token: str) -> bytes:
    """The bytes of a quoted text-format string (C escapes; octal and hex are bytes)."""
    raw = token[1:-1].encode("utf-8")

    def replace(match: re.Match) -> bytes:
        escape = match.group(1)
        if escape[:1] == b"x":
            return bytes([int(escape[1:], 16)])
        if escape[0] in b"01234567":
            return bytes([int(escape, 8) & 0xFF])
        if escape[:1] in (b"u", b"U"):
            return chr(int(escape[1:], 16)).encode("utf-8")
        return _SIMPLE_ESCAPES.get(escape, escape)

    return _ESCAPE.sub(replace, raw)
