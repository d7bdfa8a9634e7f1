"""Finding a dataset's files, and checking that they agree, for the sources of files.

Paths, directories and globs (local or any fsspec URL) expand into a :class:`FileSet`: the data
files in order, their file system, the folder a saved schema is looked for in, and for each
file the folder it was found under (its ``key=value`` subfolders below that folder are hive
partitions). Names starting with ``_`` or ``.`` are not data (``_schema.json``, ``_SUCCESS``,
temporaries, NVTabular's ``_metadata``, ``_metadata.json``, ``_file_list.txt`` and ``.merlin/``),
nor is NVTabular's ``schema.pbtxt`` (see :mod:`tabloader.dataset.nvtabular`).

Example:
    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> for name in ["b.parquet", "a.parquet", "_schema.json"]:
    ...     open(os.path.join(d, name), "w").close()
    >>> files = FileSet.find(d)
    >>> [os.path.basename(p) for p in files.paths], files.infer_engine()
    (['a.parquet', 'b.parquet'], 'parquet')
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import re
from typing import Any, Callable, Sequence

from tabloader.dataset import delta, nvtabular
from tabloader.dataset.source import SchemaMismatchError
from tabloader.dataset.table_formats import check_not_a_table
from tabloader.filesystems import filesystem, is_local, join
from tabloader.schema import SCHEMA_FILE_NAME, Schema

ENGINES = ("parquet", "csv")
_EXTENSIONS = {".parquet": "parquet", ".parq": "parquet", ".pq": "parquet", ".csv": "csv", ".tsv": "csv"}
_MAX_THREADS = 16  # footers and headers are read on threads: mostly waiting on I/O


@dataclasses.dataclass(frozen=True)
class FileSet:
    """The files of a dataset, as :meth:`find` found them.

    ``paths`` are spelled as ``fs`` spells them and ``urls`` as readers taking URLs want them;
    ``directory`` is where a saved schema is looked for; ``bases[i]`` is the folder
    ``paths[i]`` was found under; ``key_types`` the types a Delta table's log gives its
    partition keys (name -> type name; see :mod:`tabloader.dataset.delta`) and
    ``declared_columns`` its other columns (an arrow schema, in the log's order): the dataset's
    columns whatever its files store (a file lacking one, written before it was added, reads it
    as nulls; one storing a column the log does not declare is refused). A table that
    matches its files' columns by field id (Iceberg, see :mod:`tabloader.dataset.iceberg`)
    gives its columns as ``table_schema`` (an arrow schema, each field's id in its
    ``PARQUET:field_id`` metadata), per file the columns it must store (``required``) and
    the ids of the names that files without field ids use (``name_ids``, its name mapping).
    """

    paths: list[str]
    fs: Any
    directory: str
    bases: list[str]
    urls: list[str]
    key_types: dict[str, str] = dataclasses.field(default_factory=dict)
    declared_columns: Any = None
    table_schema: Any = None
    required: list[tuple[str, ...]] | None = None
    name_ids: dict[str, int] | None = None

    @classmethod
    def find(cls, source: Any) -> "FileSet":
        """Expand a path, directory or glob, or a list of them, into a FileSet (the files of
        each directory or glob sorted, the list's order kept)."""
        if isinstance(source, (str, os.PathLike)):
            source = [source]
        if not isinstance(source, (list, tuple)) or not source:
            raise TypeError(f"Dataset source must be a path, a list of paths, a DataFrame or Arrow data (a pyarrow "
                            f"Table, a polars DataFrame), got {type(source).__name__}")
        if len(source) == 1 and (table := _iceberg_table_at(str(source[0]))) is not None:
            return table
        paths: list[str] = []
        bases: list[str] = []
        fs, directory = None, None
        key_types: dict[str, str] = {}
        declared = []
        for item in map(str, source):
            fs, path = filesystem(item)
            found, base, folder, version = _expand(fs, path, item)
            paths += found
            bases += [base] * len(found)
            directory = directory or folder
            key_types.update({} if version is None else version.partition_types)
            declared.append(None if version is None else version.columns)
        # Readers taking URLs (Dask's read_csv) need the protocol back when one was given.
        urls = [fs.unstrip_protocol(p) for p in paths] if "://" in str(source) else paths
        # Delta tables of one schema have its columns; other files are matched as they are
        same = all(d is not None and d.equals(declared[0]) for d in declared)
        return cls(paths, fs, directory, bases, urls, key_types, declared[0] if same else None)

    def infer_engine(self) -> str:
        """``"parquet"`` or ``"csv"`` from the files' extensions (parquet when they say neither)."""
        engines = {_EXTENSIONS.get(os.path.splitext(p.removesuffix(".gz"))[1].lower()) for p in self.paths}
        engines.discard(None)
        if len(engines) > 1:
            raise ValueError(f"the files mix parquet and CSV ({self.paths[0]} ...); pass engine= and one kind of file")
        return engines.pop() if engines else "parquet"

    def saved_schema(self) -> Schema | None:
        """The schema saved beside the data, if any: ``_schema.json`` in :attr:`directory`, else
        the one NVTabular writes there (``.merlin/schema.json`` or ``schema.pbtxt``)."""
        path = join(self.directory, SCHEMA_FILE_NAME)
        if self.fs.exists(path):
            return Schema.load(path, fs=self.fs)
        return nvtabular.read_schema(self.fs, self.directory)


def _iceberg_table_at(item: str) -> "FileSet | None":
    """The current snapshot's files when ``item`` is an Iceberg table's folder, else None."""
    from tabloader.dataset import iceberg  # it builds FileSets: imported here, not at the top

    fs, path = filesystem(item)
    if not any(ch in path for ch in "*?[") and fs.isdir(path) and iceberg.is_iceberg_folder(fs, path):
        return iceberg.folder_files(fs, path)
    return None


def _files_below(fs: Any, folder: str, entered: set[str] | None = None) -> list[str]:
    """The files below ``folder``, also those below symbolic links to folders (fsspec lists a
    link to a folder, but does not enter it; pyarrow and pandas do). A link to a folder already
    entered (a loop) is not entered again."""
    entered = set() if entered is None else entered
    entered.add(os.path.realpath(folder) if is_local(fs) else folder)
    found = []
    for name, info in fs.find(folder, detail=True).items():
        if info["type"] == "file" or (info.get("islink") and fs.isfile(name)):
            found.append(name)
        elif info.get("islink") and fs.isdir(name) and os.path.realpath(name) not in entered:  # links: local only
            found += _files_below(fs, name, entered)
    return found


def _expand(fs: Any, path: str, item: str) -> tuple[list[str], str, str, "delta.DeltaVersion | None"]:
    """The data files ``path`` names (a glob, a directory or a file), the folder they were
    found under (hive keys are below it), the folder of the data (its saved schema) and, for a
    Delta table, its current version (its files, columns and key types, read from its log)."""
    if any(ch in path for ch in "*?["):
        base = re.split(r"[*?\[]", path, maxsplit=1)[0].rsplit("/", 1)[0]
        matched = sorted(p for p in fs.glob(path) if fs.isfile(p) and _is_data_file(p) and not _in_hidden_dir(p, base))
        if not matched:
            raise FileNotFoundError(f"no files match {item!r}")
        return matched, base, matched[0].rsplit("/", 1)[0], None
    if fs.isdir(path):
        if delta.is_delta_table(fs, path):  # before listing its folders: they may hold many replaced files
            version = delta.current_version(fs, path)
            return version.paths, path.rstrip("/"), path, version
        listed = _files_below(fs, path)
        check_not_a_table(fs, path, item, listed)
        found = sorted(p for p in listed if _is_data_file(p) and not _in_hidden_dir(p, path))
        if not found:
            raise FileNotFoundError(f"directory {item!r} has no data files")
        return found, path.rstrip("/"), path, None
    if fs.exists(path):
        folder = path.rsplit("/", 1)[0]
        return [path], folder, folder, None
    raise FileNotFoundError(f"no such file or directory: {item!r}")


def _is_data_file(path: str) -> bool:
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return not name.startswith(("_", ".")) and name not in nvtabular.NON_DATA_FILES


def _in_hidden_dir(path: str, root: str) -> bool:
    rel = path[len(root.rstrip("/")) + 1:]
    return any(part.startswith((".", "_")) for part in rel.split("/")[:-1])


def for_each_file(read: Callable[[str], Any], paths: Sequence[str]) -> list:
    """``read(path)`` for every path, on threads (footers and headers: mostly waiting on I/O)."""
    if len(paths) <= 1:
        return [read(path) for path in paths]
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(_MAX_THREADS, len(paths))) as pool:
        return list(pool.map(read, paths))


def check_same_schema(paths: Sequence[str], schemas: Sequence[dict[str, Any]],
                      columns: Sequence[str] | None = None) -> None:
    """Every file must have the columns and types (name -> type; None when unknown) of the
    first, in any order; only ``columns`` when given (the others are not read, so files may
    differ in them, as appends to a Spark table adding a column do). The error names both files.

    Example:
        >>> check_same_schema(["a", "b"], [{"x": "int"}, {"x": "int", "new": "str"}], columns=["x"])
        >>> check_same_schema(["a", "b"], [{"x": "int"}, {"x": "int", "new": "str"}])
        Traceback (most recent call last):
        ...
        tabloader.dataset.SchemaMismatchError: b does not match a: extra columns ['new']
    """
    if columns is not None:
        schemas = [{c: fields[c] for c in columns if c in fields} for fields in schemas]
    reference = schemas[0]
    for path, fields in zip(paths[1:], schemas[1:]):
        missing = [c for c in reference if c not in fields]
        extra = [c for c in fields if c not in reference]
        changed = [f"{c} ({reference[c]} vs {fields[c]})" for c in reference if c in fields and reference[c] != fields[c]]
        if missing or extra or changed:
            details = "; ".join(filter(None, [
                f"missing columns {missing}" if missing else "",
                f"extra columns {extra}" if extra else "",
                f"different types: {', '.join(changed)}" if changed else ""]))
            raise SchemaMismatchError(f"{path} does not match {paths[0]}: {details}")
