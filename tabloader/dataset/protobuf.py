"""Reading protobuf as data: the text format into nested dicts, and ``google.protobuf.Any``
holding a ``Struct`` (text, JSON and wire forms) into plain dicts.

Just enough of protobuf for the schema files NVTabular writes (:mod:`tabloader.dataset.nvtabular`),
with no protobuf package and no message types: nothing is imported or evaluated, depth and
sizes are bounded, and malformed input raises ValueError.

Example:
    >>> message = TextParser('feature { name: "C1" annotation { tag: "categorical" } }').message()
    >>> as_text(one(message["feature"][0], "name")), message["feature"][0]["annotation"][0]["tag"]
    ('C1', [b'categorical'])
"""

from __future__ import annotations

import base64
import math
import re
import struct
from typing import Any

_MAX_DEPTH = 64  # nesting of messages: far beyond a real schema, and no RecursionError on a crafted one


def flag(value: Any) -> bool:
    """A protobuf bool: JSON's true, or the text format's words (true, True, t) and 1."""
    return value is True or value in ("true", "True", "t", 1)


def one(message: dict, field: str) -> Any:
    """The last value of a field of a parsed text message (protobuf's rule for singular fields)."""
    values = message.get(field)
    return values[-1] if values else None


def as_text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


# google.protobuf.Any holding a Struct: the properties of a feature.
_STRUCT_URL = "type.googleapis.com/google.protobuf.Struct"


def any_from_text(message: dict) -> dict:
    """The properties in an ``extra_metadata`` entry of the text format: either
    ``type_url`` + ``value`` (the Struct's serialized bytes, escaped) or the expanded form
    ``[type.googleapis.com/google.protobuf.Struct] { fields { ... } }``."""
    expanded = message.get(f"[{_STRUCT_URL}]")
    if expanded:
        return _struct_from_text(expanded[-1])
    url = one(message, "type_url")
    if url is None:
        return {}
    if as_text(url) != _STRUCT_URL:
        raise ValueError(f"extra_metadata of type {as_text(url)!r}; only {_STRUCT_URL} is read")
    value = one(message, "value") or b""
    return _decode_struct(value if isinstance(value, bytes) else value.encode("latin-1"))


def any_from_json(entry: Any) -> dict:
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
    return {as_text(one(f, "key")): _value_from_text(one(f, "value") or {}) for f in message.get("fields", [])}


def _value_from_text(message: dict) -> Any:
    if "struct_value" in message:
        return _struct_from_text(one(message, "struct_value"))
    if "list_value" in message:
        return [_value_from_text(v) for v in one(message, "list_value").get("values", [])]
    if "number_value" in message:
        return _plain_number(float(one(message, "number_value")))
    if "string_value" in message:
        return as_text(one(message, "string_value"))
    if "bool_value" in message:
        return flag(one(message, "bool_value"))
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


def _decode_struct(data: bytes, depth: int = 0) -> dict:
    """A ``google.protobuf.Struct`` from its wire format (field 1: map entries key=1, value=2)."""
    if depth > _MAX_DEPTH:
        raise ValueError(f"a Struct nested deeper than {_MAX_DEPTH}")
    out = {}
    for field, entry in _wire_fields(data):
        if field == 1:
            items = dict(_wire_fields(entry))
            out[items.get(1, b"").decode("utf-8")] = _decode_value(items.get(2, b""), depth + 1)
    return out


def _decode_value(data: bytes, depth: int = 0) -> Any:
    """A ``google.protobuf.Value``: 1 null, 2 number (double), 3 string, 4 bool, 5 Struct, 6 ListValue."""
    if depth > _MAX_DEPTH:
        raise ValueError(f"a Struct value nested deeper than {_MAX_DEPTH}")
    value: Any = None
    for field, raw in _wire_fields(data):
        if field == 2:
            value = _plain_number(struct.unpack("<d", raw)[0])
        elif field == 3:
            value = raw.decode("utf-8")
        elif field == 4:
            value = bool(raw)
        elif field == 5:
            value = _decode_struct(raw, depth + 1)
        elif field == 6:
            value = [_decode_value(v, depth + 1) for f, v in _wire_fields(raw) if f == 1]
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


# Tokens and escapes of the text format.
_TOKEN = re.compile(r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<extension>\[[A-Za-z_]\w*(?:[./][\w-]+)+\])
  | (?P<word>[-+]?(?:0[xX][0-9A-Fa-f]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?|[A-Za-z_][\w.]*))
  | (?P<punct>[{}<>:,;\[\]])
""", re.VERBOSE)
_ESCAPE = re.compile(rb"\\(x[0-9A-Fa-f]{1,2}|[0-7]{1,3}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)", re.S)
_SIMPLE_ESCAPES = {b"n": b"\n", b"t": b"\t", b"r": b"\r", b"a": b"\a", b"b": b"\b", b"f": b"\f", b"v": b"\v"}


class TextParser:
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
    """A number, or a word (an enum value, ``true``/``false``) as it is. An integer with a
    leading zero is octal, as protobuf's text format reads it (``010`` is 8).

    Example:
        >>> _word("010"), _word("-0x1f"), _word("7"), _word("1.5f"), _word("INT")
        (8, -31, 7, 1.5, 'INT')
    """
    if re.fullmatch(r"-?0[0-7]+", token):
        return int(token, 8)
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
