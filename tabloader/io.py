"""Atomic writes: nothing half-written ever looks complete.

Files are written under a temporary name beside their destination and renamed when
complete; directories are assembled under a temporary name and renamed as a whole.

Example:
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> with atomic_directory(os.path.join(d, "out")) as tmp:
    ...     write_text_atomic(os.path.join(tmp, "a.txt"), "hello")
    >>> sorted(os.listdir(os.path.join(d, "out")))
    ['a.txt']
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any, Iterator

import fsspec

TMP_MARKER = ".tmp-"


def filesystem(path: str) -> tuple[Any, str]:
    """The fsspec filesystem for ``path`` and the path as that filesystem spells it."""
    return fsspec.core.url_to_fs(str(path))


def join(directory: str, name: str) -> str:
    return str(directory).rstrip("/") + "/" + name


def temporary_sibling(path: str) -> str:
    """A fresh name beside ``path`` that readers of the directory ignore (it starts with '.')."""
    path = str(path).rstrip("/")
    head, _, tail = path.rpartition("/")
    name = f".{tail}{TMP_MARKER}{uuid.uuid4().hex[:12]}"
    return f"{head}/{name}" if head else name


def write_text_atomic(path: str, text: str, fs: Any = None) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed when complete."""
    if fs is None:
        fs, path = filesystem(path)
    tmp = temporary_sibling(path)
    try:
        with fs.open(tmp, "w") as f:
            f.write(text)
        fs.mv(tmp, path)
    finally:
        if fs.exists(tmp):
            fs.rm(tmp)


@contextlib.contextmanager
def atomic_directory(path: str, overwrite: bool = False) -> Iterator[str]:
    """Build a directory under a temporary name; rename it to ``path`` only if the block succeeds.

    An exception inside the block removes the temporary directory and leaves ``path`` as it
    was. With ``overwrite=True`` an existing ``path`` is replaced after the new one is complete.
    """
    fs, target = filesystem(path)
    if fs.exists(target) and not overwrite:
        raise FileExistsError(f"{path} already exists; pass overwrite=True to replace it")
    tmp = temporary_sibling(target)
    fs.makedirs(tmp, exist_ok=True)
    try:
        yield tmp if "://" not in str(path) else fs.unstrip_protocol(tmp)
    except BaseException:
        _remove_quietly(fs, tmp)  # a failing clean-up must not hide the error that caused it
        raise
    old = None
    try:
        if fs.exists(target):
            old = temporary_sibling(target)
            fs.mv(target, old, recursive=True)
        fs.mv(tmp, target, recursive=True)
    except BaseException:
        if old is not None and not fs.exists(target):
            fs.mv(old, target, recursive=True)  # put the old directory back
        _remove_quietly(fs, tmp)
        raise
    if old is not None:
        fs.rm(old, recursive=True)


def _remove_quietly(fs: Any, path: str) -> None:
    try:
        if fs.exists(path):
            fs.rm(path, recursive=True)
    except Exception:
        pass
