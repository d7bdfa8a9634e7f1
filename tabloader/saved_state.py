"""Operators' fitted state in a saved workflow: tables as parquet files, everything else as JSON.

An operator's :meth:`~tabloader.ops.Operator.get_state` returns a dict whose values may nest:
tables (pandas/cuDF DataFrames and Series, numpy/CuPy arrays), dicts and lists of them, and
JSON values (numbers, strings, booleans, None, and dicts and lists of those). Each value is
recorded in ``workflow.json`` as one entry:

- ``{"__json__": value}``: a value holding no table;
- ``{"__parquet__": "node3_0.parquet", "kind": "frame" | "series" | "array"}``: a table, in a
  parquet file beside ``workflow.json`` (a Series keeps its index; a frame does not);
- ``{"__dict__": {key: entry}}`` and ``{"__list__": [entry, ...]}``: a dict or list holding tables.

Reading treats the entries as untrusted: :func:`check_state` checks them all before any file
is read, and state files are plain names inside the workflow directory (no absolute path, no
``..``, no separator, no symlink leading out).

Example:
    >>> import tempfile, fsspec, pandas as pd
    >>> directory = tempfile.mkdtemp()
    >>> state = {"vocabularies": {"C1": pd.DataFrame({"value": ["a", "b"]})}, "sizes": {"C1": 2}}
    >>> entries = save_state(state, "node3", directory, "node 3 (Categorify)")
    >>> entries["vocabularies"], entries["sizes"]
    ({'__dict__': {'C1': {'__parquet__': 'node3_0.parquet', 'kind': 'frame'}}}, {'__json__': {'C1': 2}})
    >>> check_state(entries, "node 3")
    >>> load_state(entries, fsspec.filesystem("file"), directory, "node 3")["vocabularies"]["C1"]["value"].tolist()
    ['a', 'b']
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import numpy as np
import pandas as pd

from tabloader import backend
from tabloader.filesystems import is_local, join
from tabloader.records import SHOWN_CHARS
from tabloader.safe_dtypes import check_pandas_metadata
from tabloader.schema import json_default

STATE_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.parquet")  # a plain name: no separator, no '..'
TABLE_KINDS = ("array", "series", "frame")
MAX_DEPTH = 32  # how deep state entries may nest: deeper is refused as a crafted file, not recursed into


def save_state(state: dict[str, Any], prefix: str, directory: str, where: str) -> dict[str, Any]:
    """The ``workflow.json`` entries of an operator's ``state``; its tables are written to
    ``directory`` as ``{prefix}_{n}.parquet``. A value that is neither a table nor JSON raises
    ``TypeError`` naming ``where`` and the state key."""
    writer = _TableWriter(prefix, directory)
    return {key: _encode(value, f"{where}, state {key!r}", writer) for key, value in _items(state, where)}


def _items(mapping: dict, where: str) -> list[tuple[str, Any]]:
    bad = [k for k in mapping if not isinstance(k, str)]
    if bad:
        raise TypeError(f"{where}: state keys must be strings, got {bad[0]!r} ({type(bad[0]).__name__})")
    return list(mapping.items())


def _encode(value: Any, where: str, writer: "_TableWriter") -> dict[str, Any]:
    if _is_table(value):
        return {"__parquet__": writer.write(value), "kind": _kind_of(value)}
    if isinstance(value, dict) and _holds_table(value):
        return {"__dict__": {k: _encode(v, f"{where}[{k!r}]", writer) for k, v in _items(value, where)}}
    if isinstance(value, (list, tuple)) and _holds_table(value):
        return {"__list__": [_encode(v, f"{where}[{i}]", writer) for i, v in enumerate(value)]}
    try:
        json.dumps(value, default=json_default)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{_where_json_fails(value, where)}: {exc}") from None
    return {"__json__": value}


def _where_json_fails(value: Any, where: str) -> str:
    """The path to the innermost dict value or list item of ``value`` that is not JSON."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, inner in items:
        try:
            json.dumps(inner, default=json_default)
        except (TypeError, ValueError):
            return _where_json_fails(inner, f"{where}[{key!r}]")
    return where


def _is_table(value: Any) -> bool:
    return isinstance(value, (pd.DataFrame, pd.Series, np.ndarray)) or backend.is_gpu_object(value)


def _holds_table(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_is_table(v) or _holds_table(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_is_table(v) or _holds_table(v) for v in value)
    return False


def _kind_of(value: Any) -> str:
    if isinstance(value, np.ndarray) or type(value).__name__ == "ndarray":
        return "array"
    return "series" if value.ndim == 1 else "frame"


class _TableWriter:
    """Writes an operator's tables as numbered parquet files."""

    def __init__(self, prefix: str, directory: str) -> None:
        self.prefix, self.directory, self.count = prefix, directory, 0

    def write(self, value: Any) -> str:
        name = f"{self.prefix}_{self.count}.parquet"
        self.count += 1
        # index=None: a meaningful index (a Series keyed by category, say) is kept; a RangeIndex is not stored
        _frame_of(value).to_parquet(join(self.directory, name), index=None)
        return name


def _frame_of(value: Any) -> pd.DataFrame:
    value = backend.to_host(value)
    if isinstance(value, np.ndarray):
        return pd.DataFrame({"values": value})
    if isinstance(value, pd.Series):  # the index is kept: Series are often keyed by column name
        return pd.DataFrame({"index": value.index, "values": value.to_numpy()})
    return value  # DataFrames are saved without their index


def check_state(entries: dict[str, Any], where: str) -> None:
    """Raise ValueError naming the entry when ``entries`` (untrusted JSON) are not state entries."""
    for key, entry in entries.items():
        _check_entry(entry, f"{where}, state {key!r}", 1)


def _check_entry(entry: Any, where: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"{where}: state entries nest more than {MAX_DEPTH} deep")
    keys = set(entry) if isinstance(entry, dict) else None
    if keys == {"__json__"}:
        return
    if keys == {"__dict__"} and isinstance(entry["__dict__"], dict):
        for key, inner in entry["__dict__"].items():
            _check_entry(inner, f"{where}[{key!r}]", depth + 1)
        return
    if keys == {"__list__"} and isinstance(entry["__list__"], list):
        for i, inner in enumerate(entry["__list__"]):
            _check_entry(inner, f"{where}[{i}]", depth + 1)
        return
    if not (keys == {"__parquet__", "kind"} and entry["kind"] in TABLE_KINDS):
        raise ValueError(f"{where}: a state entry is {{'__json__': value}}, {{'__parquet__': file name, 'kind': "
                         f"one of {list(TABLE_KINDS)}}}, {{'__dict__': {{key: entry}}}} or "
                         f"{{'__list__': [entry, ...]}}, got {entry!r:.{SHOWN_CHARS}}")
    name = entry["__parquet__"]
    if not isinstance(name, str) or not STATE_FILE.fullmatch(name):
        raise ValueError(f"{where}: state file {name!r:.{SHOWN_CHARS}} is not a plain .parquet file name inside the "
                         "workflow directory (no absolute path, '..' or path separator)")


def load_state(entries: dict[str, Any], fs: Any, root: str, where: str) -> dict[str, Any]:
    """The state that :func:`save_state` recorded as ``entries`` (checked by :func:`check_state`)."""
    return {key: _decode(entry, fs, root, f"{where}, state {key!r}") for key, entry in entries.items()}


def _decode(entry: dict[str, Any], fs: Any, root: str, where: str) -> Any:
    if "__json__" in entry:
        return entry["__json__"]
    if "__dict__" in entry:
        return {k: _decode(v, fs, root, f"{where}[{k!r}]") for k, v in entry["__dict__"].items()}
    if "__list__" in entry:
        return [_decode(v, fs, root, f"{where}[{i}]") for i, v in enumerate(entry["__list__"])]
    path = confined(fs, root, entry["__parquet__"])
    if not fs.exists(path):
        raise FileNotFoundError(f"{path} is missing: the saved workflow directory is incomplete")
    with fs.open(path, "rb") as f:
        _check_table_file(f, path)
        f.seek(0)
        frame = pd.read_parquet(f)
    try:
        return _table_value(frame, entry["kind"])
    except KeyError as exc:
        raise ValueError(f"{path} ({where}) lacks the column {exc} of a {entry['kind']}") from None


#: How many times its size on disk a saved table may take once decoded (before anything is
#: read): a fitted table (vocabulary values and counts) compresses a few times at most, a crafted
#: file of one repeated value thousands of times.
MAX_EXPANSION = 200
#: Decoded tables below this size are read whatever their expansion.
SMALL_TABLE_BYTES = 256 * 2**20


def _check_table_file(f: Any, path: str) -> None:
    """Refuse a saved table before pandas decodes it: time zones pandas would resolve by opening
    a file (:mod:`tabloader.safe_dtypes`), and a decoded size out of proportion to the file."""
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(f).metadata
    except Exception as exc:
        raise ValueError(f"{path} is not a readable parquet file: {exc}") from None
    check_pandas_metadata(meta.schema.to_arrow_schema(), path)
    # the pages' sizes, which run-length and dictionary encodings keep small: at least 8 bytes a value
    decoded = max(sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)),
                  8 * meta.num_rows * meta.num_columns)
    on_disk = max(1, meta.serialized_size + sum(meta.row_group(i).column(j).total_compressed_size
                                                for i in range(meta.num_row_groups)
                                                for j in range(meta.row_group(i).num_columns)))
    if decoded > SMALL_TABLE_BYTES and decoded > MAX_EXPANSION * on_disk:
        raise ValueError(f"{path}: its {meta.num_rows:,} rows would take {decoded:,} bytes decoded, "
                         f"{decoded // on_disk}x its {on_disk:,} bytes on disk: not a table a fit writes")


def _table_value(frame: pd.DataFrame, kind: str) -> Any:
    if kind == "series":
        return frame.set_index("index")["values"].rename_axis(None)
    return frame if kind == "frame" else frame["values"].to_numpy()


def confined(fs: Any, root: str, name: str) -> str:
    """The path of file ``name`` in directory ``root``, after checking that it does not lead out of ``root``."""
    path = join(root, name)
    if is_local(fs):  # only local paths have symlinks
        real, real_root = os.path.realpath(path), os.path.realpath(root)
        if os.path.commonpath([real, real_root]) != real_root:
            raise ValueError(f"{path}: {name} leads outside the workflow directory {root} (a symlink to {real}); "
                             "a saved workflow only reads files inside its directory")
    return path
