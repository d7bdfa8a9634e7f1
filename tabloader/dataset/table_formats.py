"""Folders that are tables of a format keeping its own list of current files -- Delta Lake,
Apache Iceberg, Apache Hudi -- and so must not be read as a folder of parquet files.

Such a table's folders also hold the files that later versions replaced: an overwrite, a
delete, an update or a compaction writes new files and only marks the old ones removed in the
table's log, until a vacuum deletes them. Read as plain parquet, the folder returns rows the
table no longer holds, silently. A Delta table's own folder is read by its log (see
:mod:`tabloader.dataset.delta`), an Iceberg table's by its metadata (see
:mod:`tabloader.dataset.iceberg`); a folder that is a Hudi table, or lies inside any of the
three (a partition folder, Iceberg's ``data/``), is refused with what to do instead. A glob
reads exactly the files it matches: the user's explicit choice.

Example:
    >>> import fsspec, os, tempfile
    >>> root = tempfile.mkdtemp()
    >>> os.makedirs(os.path.join(root, "_delta_log", "x"))
    >>> table_format_at(fsspec.filesystem("file"), root)
    ('Delta Lake', '_delta_log')
"""

from __future__ import annotations

import os
import posixpath
import re
from typing import Any, Sequence

# (format, the marker in the table's root folder, how to read a version of it instead; None:
# tabloader reads the table's own folder)
_FORMATS = (
    ("Delta Lake", "_delta_log", None),
    ("Apache Hudi", ".hoodie", "with Spark or Hudi's own reader, written out as plain parquet"),
    ("Apache Iceberg", "metadata", None),
)
_HIVE_FOLDER = re.compile(r"[^/=]+=[^/]*")


class TableFormatError(ValueError):
    """A folder that is a Delta Lake, Iceberg or Hudi table was given as a folder of files."""


def check_not_a_table(fs: Any, folder: str, item: str, listed: Sequence[str]) -> None:
    """Refuse ``folder`` (given as ``item``) when it is a table of a format with its own list of
    current files, or lies inside one: a chain of hive partition folders (or Iceberg's
    ``data/``) below the table's root. ``listed`` are the files found under ``folder``, so the
    folder itself costs no request to the file system; each folder above it costs one or two."""
    root = folder.rstrip("/")
    found = _format_in_listing(root, listed)
    while found is None and _inside_a_table_folder(root):
        root = posixpath.dirname(root)
        found = table_format_at(fs, root)
    if found is None:
        return
    name, marker = found
    article = "an" if name.startswith("A") else "a"
    place = f"is {article} {name} table" if root == folder.rstrip("/") else f"is inside {article} {name} table, {root}"
    why = (f"{item!r} {place} (it has {marker}/): its folders also hold files that later versions of the table "
           "replaced (overwrites, deletes, compactions), so reading them all would return rows the table does not hold")
    how = next(h for n, _, h in _FORMATS if n == name)
    if how is None:
        raise TableFormatError(f"{why}. Read the table's folder, {root}: tabloader reads its current version from "
                               "its log or metadata, with the partition columns as columns to filter on")
    raise TableFormatError(
        f"{why}. tabloader does not read {name}'s list of current files: write the version you want to plain "
        f"parquet ({how}) and read that; or, if you know every file there is current (appends only, never "
        f"rewritten), name them with a glob: Dataset('{root}/**/*.parquet')")


def table_format_at(fs: Any, folder: str) -> tuple[str, str] | None:
    """``(format, marker)`` when ``folder`` is the root of such a table, else None."""
    for name, marker, _ in _FORMATS:
        path = posixpath.join(folder, marker)
        if marker == "metadata":
            if fs.glob(posixpath.join(path, "*.metadata.json")):
                return name, marker
        elif fs.exists(path):
            return name, marker
    return None


def inside_folder(root: str, relative: str) -> str | None:
    """``relative`` (a path a table's log or metadata names, decoded) joined to the table's
    folder ``root``; None when it would lie outside: an absolute path, a URL, or one climbing
    out with ``..``, or a local symlink leading out (a table's files are read only from inside
    its folder).

    Example:
        >>> inside_folder("/t", "data/a.parquet"), inside_folder("/t", "../b.parquet"), inside_folder("/t", "s3://b/c")
        ('/t/data/a.parquet', None, None)
    """
    if "://" in relative or relative.startswith("/") or ".." in relative.split("/"):
        return None
    path = posixpath.join(root, relative)
    if os.path.lexists(path):  # a local file: where its symlinks lead counts
        real, real_root = os.path.realpath(path), os.path.realpath(root)
        if os.path.commonpath([real, real_root]) != real_root:
            return None
    return path


def _format_in_listing(folder: str, listed: Sequence[str]) -> tuple[str, str] | None:
    """``(format, marker)`` when the files found under ``folder`` show its markers."""
    for path in listed:
        parts = path[len(folder) + 1:].split("/")
        for name, marker, _ in _FORMATS:
            if parts[0] == marker and len(parts) > 1 and (marker != "metadata" or parts[-1].endswith(".metadata.json")):
                return name, marker
    return None


def _inside_a_table_folder(folder: str) -> bool:
    """True when ``folder`` could be below a table's root: a partition folder or Iceberg's data/."""
    last = posixpath.basename(folder)
    return bool(_HIVE_FOLDER.fullmatch(last)) or last == "data"
