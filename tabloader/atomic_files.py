"""Atomic writes: nothing half-written ever looks complete.

Files are written under a temporary name beside their destination and renamed when
complete; directories are assembled under a temporary name and renamed as a whole.

A temporary's name says who made it: ``.NAME.tmp-SPACE-PID-START-RANDOM`` beside ``NAME``,
where SPACE identifies the machine and pid namespace of the writer, PID is its process id and
START its start time (clock ticks after boot, 0 where unknown); a directory set aside while it
is being replaced is ``.NAME.old-...``. A writer killed mid-write (SIGKILL, power loss) leaves
its temporary behind; the next write to ``NAME`` removes it once that writer is provably gone,
and never touches a live writer's temporary or a name tabloader did not make. A write that
fails (disk full, permission denied, read-only file system) raises an OSError of the same
kind naming the destination and what to do, with the original error chained.

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
import errno
import functools
import hashlib
import os
import re
import socket
import uuid
from typing import Any, Iterator

from tabloader.filesystems import filesystem

# What to do about the errors a write can meet; the message names the path as well.
_WRITE_ADVICE = {
    errno.ENOSPC: "free space on that disk or write somewhere else",
    errno.EDQUOT: "free space within your quota or write somewhere else",
    errno.EFBIG: "the file grew beyond what the file system or this process's file size limit "
                 "(ulimit -f) allows: write somewhere else or raise the limit",
    errno.EROFS: "the file system is read-only: write somewhere else",
    errno.EACCES: "write somewhere you are allowed to, or change the permissions",
    errno.EPERM: "write somewhere you are allowed to, or change the permissions",
    errno.ENOTDIR: "a part of the path is a file, not a directory: choose another path",
    errno.ENOENT: "a directory on the way does not exist or cannot be created there: choose another path",
}
# Errors only a write raises: wherever they come from inside an atomic directory, they are its.
_WRITE_ONLY_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def temporary_sibling(path: str, kind: str = "tmp") -> str:
    """A fresh name beside ``path`` that readers of the directory ignore (it starts with '.')
    and that records which process made it (see the module's docstring)."""
    path = str(path).rstrip("/")
    head, _, tail = path.rpartition("/")
    name = f".{tail}.{kind}-{_owner_tag()}-{uuid.uuid4().hex[:12]}"
    return f"{head}/{name}" if head else name


def write_error(exc: OSError, destination: str) -> OSError:
    """``exc``, met while writing ``destination``, as an OSError of the same kind (PermissionError
    for EACCES...) whose message names ``destination`` and what to do. Raise it ``from exc``.

    Example:
        >>> import errno
        >>> err = write_error(OSError(errno.ENOSPC, "No space left on device"), "/data/out")
        >>> type(err).__name__, str(err)
        ('OSError', '[Errno 28] cannot write /data/out: No space left on device; free space on that disk or write somewhere else')
        >>> type(write_error(OSError(errno.EACCES, "denied"), "/data/out")).__name__
        'PermissionError'
    """
    if exc.errno is None:
        return OSError(f"cannot write {destination}: {exc}; check that it can be written there")
    advice = _WRITE_ADVICE.get(exc.errno, "check that it can be written there")
    return OSError(exc.errno, f"cannot write {destination}: {os.strerror(exc.errno)}; {advice}")


def write_text_atomic(path: str, text: str, fs: Any = None) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed when complete."""
    if fs is None:
        fs, path = filesystem(path)
    _remove_stale_temporaries(fs, path)
    tmp = temporary_sibling(path)
    try:
        with fs.open(tmp, "w") as f:
            f.write(text)
        fs.mv(tmp, path)
    except OSError as exc:
        raise write_error(exc, path) from exc
    finally:
        _remove_quietly(fs, tmp)


@contextlib.contextmanager
def atomic_directory(path: str, overwrite: bool = False) -> Iterator[str]:
    """Build a directory under a temporary name; rename it to ``path`` only if the block succeeds.

    An exception inside the block removes the temporary directory and leaves ``path`` as it
    was. With ``overwrite=True`` an existing ``path`` is replaced after the new one is complete.
    A write that fails inside the block or while renaming raises :func:`write_error`'s error
    naming ``path``. Temporaries of ``path`` left by killed writers are removed first.
    """
    fs, target = filesystem(path)
    _remove_stale_temporaries(fs, target)
    if fs.exists(target) and not overwrite:
        raise FileExistsError(f"{path} already exists; pass overwrite=True to replace it")
    tmp = temporary_sibling(target)
    try:
        fs.makedirs(tmp, exist_ok=True)
    except OSError as exc:
        _remove_quietly(fs, tmp)
        raise write_error(exc, path) from exc
    try:
        yield tmp if "://" not in str(path) else fs.unstrip_protocol(tmp)
    except BaseException as exc:
        _remove_quietly(fs, tmp)  # a failing clean-up must not hide the error that caused it
        if _is_write_failure(exc, tmp):
            raise write_error(exc, path) from exc
        raise
    try:
        _replace(fs, tmp, target)
    except OSError as exc:
        raise write_error(exc, path) from exc


def _replace(fs: Any, tmp: str, target: str) -> None:
    """Rename the complete directory ``tmp`` to ``target``; an old ``target`` is set aside
    first and removed last (or put back when the rename fails)."""
    old = None
    try:
        if fs.exists(target):
            old = temporary_sibling(target, kind="old")
            fs.mv(target, old, recursive=True)
        fs.mv(tmp, target, recursive=True)
    except BaseException:
        if old is not None and not fs.exists(target):
            fs.mv(old, target, recursive=True)  # put the old directory back
        _remove_quietly(fs, tmp)
        raise
    if old is not None:
        fs.rm(old, recursive=True)


def _is_write_failure(exc: BaseException, tmp: str) -> bool:
    """Whether ``exc``, raised inside an atomic directory's block, is a failure to write into
    its temporary ``tmp`` (rather than, say, a failure to read an input file)."""
    if not isinstance(exc, OSError):
        return False
    return exc.errno in _WRITE_ONLY_ERRNOS or tmp in f"{exc.filename} {exc.filename2} {exc}"


def _remove_quietly(fs: Any, path: str) -> None:
    try:
        if fs.exists(path):
            fs.rm(path, recursive=True)
    except Exception:
        pass


# Temporaries left by killed writers.
def _owner_tag() -> str:
    """``SPACE-PID-START`` of this process (see the module's docstring)."""
    pid = os.getpid()  # not cached: a forked child is another writer
    stat = _process_stat(pid)
    return f"{_pid_space()}-{pid}-{stat[1] if stat else 0}"


@functools.lru_cache(maxsize=None)
def _pid_space() -> str:
    """Where a pid names one process: this host and, on Linux, its pid namespace (containers
    on one host can share a file system and a host name, but not their pids)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return hashlib.sha1(f"{socket.gethostname()}|{namespace}".encode()).hexdigest()[:8]


def _process_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks after boot) of process ``pid`` from Linux's /proc;
    None when there is no such process or no /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rsplit(b")", 1)[1].split()  # after "(name)", which may hold spaces: field 3 on
    return fields[0].decode(), int(fields[19])


def _writer_is_gone(space: str, pid: int, start: int) -> bool:
    """Whether the process that made a temporary has provably ended: it ran in this pid space
    and no process has its pid now, or only a zombie, or one started at another time (the pid
    was reused). Where that cannot be known, it is taken to be alive."""
    if space != _pid_space() or pid <= 0 or os.name != "posix":
        return False
    if os.path.isdir("/proc/self"):
        stat = _process_stat(pid)
        return stat is None or stat[0] == "Z" or (start != 0 and stat[1] != start)
    try:
        os.kill(pid, 0)  # signal 0 only checks that the process exists
    except ProcessLookupError:
        return True
    except PermissionError:  # it exists, and belongs to another user
        pass
    return False


def _remove_stale_temporaries(fs: Any, target: str) -> None:
    """Remove the temporaries of ``target`` whose writer is gone: ``.NAME.tmp-...`` names only
    tabloader makes, never those of a live writer. A ``.NAME.old-...`` directory (the previous
    ``target``, set aside by a writer killed between its two renames) is moved back when
    ``target`` is missing, else removed. Best effort: a failure here is left to the write."""
    head, _, tail = target.rstrip("/").rpartition("/")
    pattern = re.compile(rf"\.{re.escape(tail)}\.(tmp|old)-([0-9a-f]{{8}})-(\d+)-(\d+)-[0-9a-f]{{12}}")
    try:
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(head or ".", detail=False)]
    except OSError:
        return
    for name in names:
        match = pattern.fullmatch(name)
        if not match or not _writer_is_gone(match[2], int(match[3]), int(match[4])):
            continue
        stale = f"{head}/{name}" if head else name
        try:
            if match[1] == "old" and not fs.exists(target):
                fs.mv(stale, target, recursive=True)
            else:
                fs.rm(stale, recursive=True)
        except OSError:
            pass  # another writer cleaned it up first, or it cannot be removed: not ours to fail
