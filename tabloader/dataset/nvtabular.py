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
data by the small readers of :mod:`tabloader.dataset.protobuf`: nothing is imported, evaluated
or unpickled.

Example:
    >>> text = '''feature { name: "C1" type: INT
    ...   int_domain { name: "C1" max: 99 is_categorical: true }
    ...   annotation { tag: "categorical" } }'''
    >>> column = schema_from_pbtxt(text)["C1"]
    >>> sorted(column.tags), column.properties["cardinality"], column.dtype
    (['categorical'], 100, 'int64')
"""

from __future__ import annotations

import json
import struct
from typing import Any

from tabloader.dataset.protobuf import TextParser, any_from_json, any_from_text, as_text, flag, one
from tabloader.filesystems import join
from tabloader.schema import ColumnSchema, Schema, Tags

#: NVTabular's files that are not data and do not start with ``_`` or ``.``.
NON_DATA_FILES = frozenset({"schema.pbtxt"})

#: Where NVTabular writes its schema, in the order Merlin reads them.
SCHEMA_FILES = (".merlin/schema.json", "schema.pbtxt")

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
        try:
            with fs.open(path, "rb") as f:
                raw = f.read()
            return parse(raw.decode("utf-8"))
        # what a damaged (or crafted) file makes the readers raise, who trust its shapes: a scalar
        # where a message belongs, a wire type other than the field's, nesting past the stack
        except (ValueError, TypeError, KeyError, AttributeError, IndexError, struct.error, RecursionError,
                OSError) as exc:
            raise ValueError(f"{path}: not a readable NVTabular schema ({type(exc).__name__}: {exc})") from exc
    return None


def schema_from_pbtxt(text: str) -> Schema:
    """A Schema from the protobuf text of a tensorflow-metadata ``Schema`` (``schema.pbtxt``)."""
    message = TextParser(text).message()
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
    annotation = one(message, "annotation") or {}
    domain, counts = one(message, "int_domain"), one(message, "value_count")
    name = one(message, "name")
    return {
        "name": None if name is None else as_text(name),
        "type": one(message, "type"),
        "int_domain": None if domain is None else {k: one(domain, k) for k in ("min", "max", "is_categorical")
                                                   if k in domain},
        "value_count": None if counts is None else {k: one(counts, k) for k in ("min", "max") if k in counts},
        "tags": [as_text(t) for t in annotation.get("tag", [])],
        "metadata": [any_from_text(a) for a in annotation.get("extra_metadata", [])],
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
        "tags": _json_tags(annotation.get("tag", [])),
        "metadata": [any_from_json(a) for a in annotation.get("extraMetadata", [])],
    }


def _json_tags(tags: Any) -> list[str]:
    """A feature's tags in the JSON form: a list of strings (a string alone would be read as
    one tag per character)."""
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ValueError(f"a feature's 'tag' must be a list of strings, got {tags!r}")
    return tags


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
    if domain is not None and flag(domain.get("is_categorical")):
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
    is_list = flag(props.get("is_list")) or any(extra.get("value_count", {}).values())
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


