"""The files of a Delta Lake table's current version, read from its log (``_delta_log/``).

A Delta table's folders also hold the files that overwrites, deletes and compactions replaced
(until a vacuum): its log says which files make each version. This module replays the log --
the newest checkpoint (parquet), then the JSON commits after it -- into the current version's
files, its data columns (the log's schema, as arrow types) and the types of its partition
columns, so that ``Dataset("table/")`` reads exactly the rows the table holds, with the
table's columns: a file written before a column was added (a ``mergeSchema`` append, ``ALTER
TABLE ADD COLUMNS``) reads it as nulls, as Delta's readers do, and a version without files
(every row deleted) is an empty dataset of those columns. What a plain parquet reader cannot
honour is refused, naming it: deletion vectors (rows deleted without rewriting their file),
column mapping (physical column names differ from the table's) and any other reader feature.
Every file must lie inside the table's folder (a shallow clone's absolute paths are refused):
nothing outside it is read.

Example:
    >>> import fsspec, json, os, tempfile
    >>> root = tempfile.mkdtemp()
    >>> os.makedirs(os.path.join(root, "_delta_log"))
    >>> actions = [{"metaData": {"schemaString": '{"fields": [{"name": "dt", "type": "date"}]}',
    ...                          "partitionColumns": ["dt"]}},
    ...            {"add": {"path": "dt=2024-01-01/a.parquet"}}, {"add": {"path": "dt=2024-01-01/b.parquet"}},
    ...            {"remove": {"path": "dt=2024-01-01/a.parquet"}}]
    >>> with open(os.path.join(root, "_delta_log", "0" * 20 + ".json"), "w") as log:
    ...     log.writelines(json.dumps(action) + "\\n" for action in actions)
    >>> version = current_version(fsspec.filesystem("file"), root)
    >>> version.number, [os.path.relpath(p, root) for p in version.paths], version.partition_types
    (0, ['dt=2024-01-01/b.parquet'], {'dt': 'date32'})
    >>> version.columns.names  # the data columns: dt is a partition column
    []
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import re
from typing import Any, Iterator
from urllib.parse import unquote

from tabloader.dataset.table_formats import inside_folder

LOG = "_delta_log"
_COMMIT = re.compile(r"(\d{20})\.json")
_CHECKPOINT = re.compile(r"(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet")
# Reader features whose tables read right as plain parquet once the checks below passed.
_PLAIN_FEATURES = {"timestampNtz", "vacuumProtocolCheck", "columnMapping", "deletionVectors"}
# Delta's primitive types of partition columns -> the partition key types tabloader has.
_KEY_TYPES = {"string": "string", "boolean": "bool", "byte": "int32", "short": "int32", "integer": "int32",
              "long": "int64", "float": "float64", "double": "float64", "date": "date32",
              "timestamp_ntz": "timestamp[us]"}  # byte, short and float in a wider type that holds them exactly
# Delta's primitive types of data columns -> the arrow types Delta's readers give them (decimals apart).
_ARROW_TYPES = {"string": "string", "long": "int64", "integer": "int32", "short": "int16", "byte": "int8",
                "float": "float32", "double": "float64", "boolean": "bool_", "binary": "binary", "date": "date32"}
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


class DeltaTableError(ValueError):
    """A Delta table whose current version tabloader cannot read as plain parquet."""


@dataclasses.dataclass(frozen=True)
class DeltaVersion:
    """A Delta table's current version: its number, its data files (full paths, sorted), the
    types of its partition columns that tabloader can give a key (name -> type name) and its
    data columns, the others (an arrow schema, in the log's order)."""

    number: int
    paths: list[str]
    partition_types: dict[str, str]
    columns: Any


def is_delta_table(fs: Any, folder: str) -> bool:
    """True when ``folder`` holds a Delta log (``_delta_log/``)."""
    return fs.isdir(posixpath.join(folder.rstrip("/"), LOG))


def current_version(fs: Any, root: str) -> DeltaVersion:
    """Replay the log of the Delta table at ``root`` into its current version (see the module)."""
    root = root.rstrip("/")
    log = posixpath.join(root, LOG)
    commits, checkpoints = _log_files(fs, log)
    if not commits and not checkpoints:
        raise DeltaTableError(f"{log}: a Delta log without commits or checkpoints")
    start = max(checkpoints, default=-1)
    latest = max([*commits, start])
    missing = [v for v in range(start + 1, latest + 1) if v not in commits]
    if missing:
        raise DeltaTableError(f"{log}: commit {missing[0]} is missing (after checkpoint {start}); the log is damaged")
    state = _State()
    if start >= 0:
        for action in _checkpoint_actions(fs, log, start, checkpoints[start]):
            state.apply(action)
    for version in range(start + 1, latest + 1):
        for action in _commit_actions(fs, posixpath.join(log, commits[version])):
            state.apply(action)
    return state.version(root, latest)


def _log_files(fs: Any, log: str) -> tuple[dict[int, str], dict[int, list[str]]]:
    """Commits (version -> file name) and checkpoints (version -> part file names) in the log."""
    commits: dict[int, str] = {}
    checkpoints: dict[int, list[str]] = {}
    for path in fs.ls(log, detail=False):
        name = posixpath.basename(path.rstrip("/"))
        if match := _COMMIT.fullmatch(name):
            commits[int(match.group(1))] = name
        elif match := _CHECKPOINT.fullmatch(name):
            checkpoints.setdefault(int(match.group(1)), []).append(name)
    return commits, checkpoints


def _checkpoint_actions(fs: Any, log: str, version: int, parts: list[str]) -> Iterator[dict]:
    """The actions of checkpoint ``version``, all of its parts (a part missing is an error)."""
    import pyarrow.parquet as pq

    expected = int(_CHECKPOINT.fullmatch(parts[0]).group(3) or 1)
    if len(parts) != expected:
        raise DeltaTableError(f"{log}: checkpoint {version} has {len(parts)} of its {expected} parts")
    for name in sorted(parts):
        path = posixpath.join(log, name)
        wanted = [c for c in ("protocol", "metaData", "add") if c in pq.read_schema(path, filesystem=fs).names]
        for row in pq.read_table(path, columns=wanted, filesystem=fs).to_pylist():
            yield {kind: _as_json(action) for kind, action in row.items() if action is not None}


def _as_json(action: dict) -> dict:
    """A checkpoint's action as the JSON commits write it (parquet maps are lists of pairs)."""
    out = dict(action)
    for key in ("partitionValues", "configuration"):
        if isinstance(out.get(key), list):
            out[key] = dict(out[key])
    return out


def _commit_actions(fs: Any, path: str) -> Iterator[dict]:
    with fs.open(path, "rt") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


class _State:
    """The table as the actions replayed so far leave it: protocol, metadata, files added."""

    def __init__(self) -> None:
        self.protocol: dict = {}
        self.metadata: dict = {}
        self.files: dict[tuple, dict] = {}  # (path, deletion vector id) -> its add action

    def apply(self, action: dict) -> None:
        if "protocol" in action:
            self.protocol = action["protocol"]
        if "metaData" in action:
            self.metadata = action["metaData"]
        if "add" in action:
            self.files[_file_key(action["add"])] = action["add"]
        if "remove" in action:
            self.files.pop(_file_key(action["remove"]), None)

    def version(self, root: str, number: int) -> DeltaVersion:
        self._check_readable(root)
        paths = sorted(_data_path(root, add["path"]) for add in self.files.values())
        self._check_partition_folders(root)
        return DeltaVersion(number, paths, self._partition_types(), self._data_columns(root))

    def _check_readable(self, root: str) -> None:
        features = set(self.protocol.get("readerFeatures") or ())
        unknown = sorted(features - _PLAIN_FEATURES)
        if unknown:
            raise DeltaTableError(f"{root} is a Delta table using the reader feature(s) {unknown}, which tabloader "
                                  "does not read; write the version you want to plain parquet (deltalake or Spark)")
        mode = dict(self.metadata.get("configuration") or {}).get("delta.columnMapping.mode", "none")
        if mode != "none":
            raise DeltaTableError(f"{root} is a Delta table with column mapping (delta.columnMapping.mode={mode}): "
                                  "its files name their columns otherwise than the table; write the version you "
                                  "want to plain parquet (deltalake or Spark)")
        with_deletions = [add["path"] for add in self.files.values() if add.get("deletionVector")]
        if with_deletions:
            raise DeltaTableError(f"{root} is a Delta table whose file {with_deletions[0]} (and "
                                  f"{len(with_deletions) - 1} other(s)) has rows deleted by a deletion vector, "
                                  "which a parquet reader cannot see; run OPTIMIZE/REORG ... APPLY (PURGE) on it or "
                                  "write the version you want to plain parquet")

    def _check_partition_folders(self, root: str) -> None:
        """Partition values are read from the files' ``column=value`` folders (hive style, as
        Spark and delta-rs write them); a file without them (random prefixes) is refused."""
        columns = self.metadata.get("partitionColumns") or ()
        for path, _ in self.files:
            folders = {part.split("=", 1)[0] for part in unquote(path).split("/")[:-1] if "=" in part}
            missing = [c for c in columns if c not in folders]
            if missing:
                raise DeltaTableError(f"{root}: the Delta log names the data file {path!r}, not under column=value "
                                      f"folders for its partition column(s) {missing} (randomized file prefixes?); "
                                      "tabloader reads partition values from those folders")

    def _fields(self) -> list[dict]:
        """The fields of the table's schema (the log's ``schemaString``)."""
        return json.loads(self.metadata.get("schemaString") or '{"fields": []}')["fields"]

    def _partition_types(self) -> dict[str, str]:
        types = {f["name"]: f["type"] for f in self._fields()}
        return {name: _KEY_TYPES[types[name]] for name in self.metadata.get("partitionColumns") or ()
                if isinstance(types.get(name), str) and types[name] in _KEY_TYPES}

    def _data_columns(self, root: str) -> Any:
        """The table's columns but its partition columns (read from folders), as arrow types."""
        import pyarrow as pa

        keys = set(self.metadata.get("partitionColumns") or ())
        return pa.schema([pa.field(f["name"], arrow_type(f["type"], f"{root}: column {f['name']!r}"))
                          for f in self._fields() if f["name"] not in keys])


def arrow_type(delta_type: Any, where: str) -> Any:
    """The arrow type of a Delta schema's type (a name, or an array's, struct's or map's JSON),
    as Delta's readers give it: timestamps in microseconds, ``timestamp`` in UTC (an instant),
    ``timestamp_ntz`` without a zone. Structs and maps become arrow's (which tabloader refuses
    to read, naming the column, as it does for parquet files storing them).

    Example:
        >>> arrow_type({"type": "array", "elementType": "decimal(10,2)", "containsNull": True}, "c")
        ListType(list<element: decimal128(10, 2)>)
    """
    import pyarrow as pa

    if isinstance(delta_type, dict):
        kind = delta_type.get("type")
        if kind == "array":
            return pa.list_(pa.field("element", arrow_type(delta_type["elementType"], where)))
        if kind == "struct":
            return pa.struct([pa.field(f["name"], arrow_type(f["type"], where)) for f in delta_type["fields"]])
        if kind == "map":
            return pa.map_(arrow_type(delta_type["keyType"], where), arrow_type(delta_type["valueType"], where))
    elif delta_type in _ARROW_TYPES:
        return getattr(pa, _ARROW_TYPES[delta_type])()
    elif delta_type in ("timestamp", "timestamp_ntz"):
        return pa.timestamp("us", tz="UTC" if delta_type == "timestamp" else None)
    elif isinstance(delta_type, str) and (match := _DECIMAL.fullmatch(delta_type)):
        return pa.decimal128(int(match.group(1)), int(match.group(2)))
    raise DeltaTableError(f"{where} has the Delta type {json.dumps(delta_type)}, which tabloader does not read")


def _file_key(action: dict) -> tuple[str, str | None]:
    """What identifies a file in the log (the Delta protocol's key): its path and its deletion
    vector's id. Spark's DELETE adds a file again with a deletion vector and removes it without
    (or with the old one) in one commit: by path alone, the remove took the new add away and the
    file, rows and all, left the table."""
    dv = action.get("deletionVector")
    if not dv:
        return action["path"], None
    offset = dv.get("offset")
    return action["path"], f"{dv.get('storageType')}{dv.get('pathOrInlineDv')}" + ("" if offset is None else f"@{offset}")


def _data_path(root: str, uri: str) -> str:
    """The full path of a data file the log names (a URI-encoded path relative to the table);
    a file outside the table's folder is refused (nothing outside the folder is read)."""
    path = inside_folder(root, unquote(uri)) if "://" not in uri else None
    if path is None:
        raise DeltaTableError(f"{root}: the Delta log names the data file {uri!r}, outside the table's folder "
                              "(a shallow clone?); tabloader reads only files inside the folder it is given")
    return path
