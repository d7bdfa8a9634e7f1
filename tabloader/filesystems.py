"""Where files live: the fsspec file system of a path or URL, and the same file system as
pyarrow's native readers and writers want it.

Local paths and ``file://`` URLs are the local disk, read and written by pyarrow's native code
(no Python file object, no GIL); any other fsspec URL (``s3://``, ``gs://``, ``memory://``...)
goes through fsspec.

Example:
    >>> fs, path = filesystem("memory://bucket/data")
    >>> path, is_local(fs), join("memory://bucket/", "part_0.parquet")
    ('/bucket/data', False, 'memory://bucket/part_0.parquet')
    >>> is_local(filesystem("/tmp")[0]), type(arrow_filesystem(fs)).__name__
    (True, 'PyFileSystem')
"""

from __future__ import annotations

from typing import Any

import fsspec


def filesystem(path: str) -> tuple[Any, str]:
    """The fsspec file system for ``path`` and the path as that file system spells it."""
    return fsspec.core.url_to_fs(str(path))


def join(directory: str, name: str) -> str:
    """``name`` inside ``directory`` (a path or URL; ``/`` is the separator of both)."""
    return str(directory).rstrip("/") + "/" + name


def is_local(fs: Any) -> bool:
    """Whether the fsspec file system ``fs`` is the local disk."""
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(fs, LocalFileSystem)


def arrow_filesystem(fs: Any) -> Any:
    """``fs`` as a pyarrow file system: pyarrow's own for the local disk (or None), else the
    fsspec one wrapped; a pyarrow file system is returned as it is."""
    import pyarrow.fs as pafs

    if isinstance(fs, pafs.FileSystem):
        return fs
    if fs is None or is_local(fs):
        return pafs.LocalFileSystem()
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs))
