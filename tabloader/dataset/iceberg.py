"""The data files of an Apache Iceberg table's snapshot, planned by pyiceberg, read by tabloader's
own parquet reader (partitions of row groups, larger than memory, on the CPU or the GPU).

An Iceberg table's folders also hold the files that overwrites, deletes and compactions replaced:
its metadata (a JSON file naming manifest lists, which name Avro manifests, which name the data
files) says which files make each snapshot. pyiceberg reads that metadata
(``DataScan.plan_files``); this module turns the plan into a
:class:`~tabloader.dataset.files.FileSet` whose columns are the table's, matched in each file by
field id as Iceberg defines them (a file written before a rename has the old name, one written
before a column was added lacks it: null there; an ``int`` column promoted to ``long`` comes out
``long``; a file without field ids, added from elsewhere, has them from the table's name
mapping). What a plain parquet reader cannot honour is refused, naming it: row-level deletes
(delete files, merge-on-read), a scan's ``limit``, a ``row_filter`` that keeps only some rows
of a file (one on identity partition columns keeps or drops whole files: it is read exactly).

A table comes from the user's catalog (``catalog.load_table(name)``, or its ``scan(...)``), whose
file IO the user chose: its files are read wherever it says they are. A table's folder
(``Dataset("warehouse/db/events")``) is read from its newest metadata file
(``metadata/version-hint.text`` when there is one, else the highest-numbered
``NNNNN-<uuid>.metadata.json`` or ``vN.metadata.json``), and every file it names must lie inside
the folder (a table moved since it was written is read where it is now): nothing outside the
folder is read. A catalog's pointer to the current metadata is the truth, though: a folder cannot
know about a rollback done in the catalog, so passing ``catalog.load_table(name)`` is the exact way.

pyiceberg is an optional dependency: ``pip install "tabloader[iceberg]"``.

Example:
    >>> import os, tempfile
    >>> root = tempfile.mkdtemp()
    >>> os.makedirs(os.path.join(root, "metadata"))
    >>> for name in ["00000-a.metadata.json", "00001-b.metadata.json", "v7.metadata.json", "snap-1.avro"]:
    ...     open(os.path.join(root, "metadata", name), "w").close()
    >>> import fsspec
    >>> os.path.basename(current_metadata_file(fsspec.filesystem("file"), root))
    'v7.metadata.json'
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from typing import Any, Sequence

from tabloader.dataset.files import FileSet
from tabloader.dataset.parquet_layout import FIELD_ID, offset_width_free
from tabloader.dataset.table_formats import inside_folder
from tabloader.filesystems import filesystem, is_local

METADATA = "metadata"
_NUMBERED = re.compile(r"(?:(\d+)-[^/]*|v(\d+))\.metadata\.json")
_INSTALL = 'pip install "tabloader[iceberg]"'


class IcebergTableError(ValueError):
    """An Iceberg table (or scan) whose rows tabloader cannot read exactly as plain parquet."""


def is_iceberg_table(obj: Any) -> bool:
    """True for a pyiceberg Table or table scan (what ``catalog.load_table`` and ``.scan()`` give)."""
    return type(obj).__module__.startswith("pyiceberg.") and (hasattr(obj, "scan") or hasattr(obj, "plan_files"))


def is_iceberg_folder(fs: Any, folder: str) -> bool:
    """True when ``folder`` is an Iceberg table's root: ``metadata/`` holds ``*.metadata.json``."""
    return bool(fs.glob(posixpath.join(folder.rstrip("/"), METADATA, "*.metadata.json")))


def scan_files(table_or_scan: Any) -> FileSet:
    """The data files of a pyiceberg Table's current snapshot, or of a scan's (time travel with
    ``snapshot_id=``; ``selected_fields=`` are the columns), with the scan's schema.

    Example:
        >>> scan_files("not a table")
        Traceback (most recent call last):
        ...
        TypeError: expected a pyiceberg Table or DataScan, got str
    """
    if not is_iceberg_table(table_or_scan):
        raise TypeError(f"expected a pyiceberg Table or DataScan, got {type(table_or_scan).__name__}")
    scan = table_or_scan.scan() if hasattr(table_or_scan, "scan") else table_or_scan
    location = scan.table_metadata.location
    plan = _Plan.of(scan, f"the Iceberg table at {location}")
    fs, directory = filesystem(location)
    paths = []
    for path in plan.paths:  # where the table's file IO finds them: local paths or fsspec URLs
        file_fs, spelled = filesystem(path)
        if type(file_fs) is not type(fs) or file_fs.protocol != fs.protocol:
            raise IcebergTableError(f"the Iceberg table at {location} has data files on another file system than its "
                                    f"location ({path}); tabloader reads one file system per dataset")
        paths.append(spelled)
    return plan.file_set(fs, directory, paths)


def folder_files(fs: Any, root: str) -> FileSet:
    """The data files of the current snapshot of the Iceberg table whose folder is ``root``
    (see the module: its newest metadata file; nothing outside the folder is read)."""
    try:
        from pyiceberg.catalog.noop import NoopCatalog
        from pyiceberg.serializers import FromInputFile
        from pyiceberg.table import StaticTable
    except ImportError as exc:
        raise ImportError(f"{root} is an Apache Iceberg table, which tabloader reads with pyiceberg: "
                          f"{_INSTALL}") from exc

    root = root.rstrip("/")
    metadata_file = current_metadata_file(fs, root)
    io = _FolderIO(fs, root)
    metadata = FromInputFile.table_metadata(io.new_input(metadata_file))
    io.written_at = metadata.location.rstrip("/")
    table = StaticTable(identifier=("folder", root), metadata=metadata, metadata_location=metadata_file, io=io,
                        catalog=NoopCatalog("folder"))
    plan = _Plan.of(table.scan(), f"the Iceberg table {root}")
    return plan.file_set(fs, root, [io.inside(path, "data file") for path in plan.paths])


def current_metadata_file(fs: Any, root: str) -> str:
    """The metadata file of the table at ``root``: the one ``metadata/version-hint.text`` names,
    else the highest-numbered one."""
    folder = posixpath.join(root.rstrip("/"), METADATA)
    hint = posixpath.join(folder, "version-hint.text")
    if fs.exists(hint):
        with fs.open(hint, "rt") as text:
            version = text.read().strip()
        name = version if version.endswith(".metadata.json") else \
            f"v{version}.metadata.json" if version.isdigit() else f"{version}.metadata.json"
        path = inside_folder(folder, name)
        if path is None:
            raise IcebergTableError(f"{hint} names the metadata file {version!r}, outside {folder}")
        return path
    numbered = {}
    for path in fs.ls(folder, detail=False):
        if match := _NUMBERED.fullmatch(posixpath.basename(path)):
            numbered[int(match.group(1) or match.group(2))] = path
    if not numbered:
        raise IcebergTableError(f"{folder} holds no NNNNN-<uuid>.metadata.json or vN.metadata.json file")
    return numbered[max(numbered)]


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What a scan reads: its data files (as the metadata names them), its columns (arrow,
    with field ids), the columns each file must store, and the table's name mapping."""

    paths: list[str]
    schema: Any
    required: list[tuple[str, ...]]
    name_ids: dict[str, int] | None

    @classmethod
    def of(cls, scan: Any, name: str) -> "_Plan":
        """The plan of ``scan`` (of the table ``name``, for messages), refusing what a parquet
        reader would not read exactly."""
        from pyiceberg.expressions import AlwaysTrue

        if scan.limit is not None:
            raise IcebergTableError(f"{name}: the scan has limit={scan.limit}, which tabloader does not apply; pass "
                                    "it without limit")
        schema = scan.projection()
        tasks = [task for task in scan.plan_files() if _partition_passes(scan, task)]
        for task in tasks:
            if task.residual != AlwaysTrue():  # the filter is not decided by the file's partition values alone
                raise IcebergTableError(
                    f"{name}: the scan's row_filter={scan.row_filter} keeps only some rows of the data file "
                    f"{task.file.file_path} (those where {task.residual}), and tabloader reads whole files: filter "
                    "on identity partition columns only (whole files kept or dropped), or filter the rows in your "
                    "workflow (or use scan(...).to_arrow() if they fit in memory)")
            if task.delete_files:
                deletes = sorted(f.file_path for f in task.delete_files)
                raise IcebergTableError(
                    f"{name}: rows of the data file {task.file.file_path} are deleted by the delete file(s) {deletes} "
                    "(merge-on-read deletes), which a parquet reader cannot see; compact the table (rewrite its data "
                    "files, e.g. Spark's rewrite_data_files) or pass scan().to_arrow() when the rows fit in memory")
        mapping = scan.table_metadata.name_mapping()
        return cls([task.file.file_path for task in tasks], _arrow_schema(schema),
                   [_stored_partition_columns(scan, task, schema) for task in tasks],
                   None if mapping is None else {alias: f.field_id for f in mapping for alias in f.names})

    def file_set(self, fs: Any, directory: str, paths: Sequence[str]) -> FileSet:
        """The FileSet of the plan's files at ``paths`` on ``fs``: no hive keys (each file is
        its own base: a table keeps its partition values itself)."""
        urls = list(paths) if is_local(fs) else [fs.unstrip_protocol(p) for p in paths]
        return FileSet(list(paths), fs, directory, [posixpath.dirname(p) for p in paths], urls,
                       table_schema=self.schema, required=self.required, name_ids=self.name_ids)


def _partition_passes(scan: Any, task: Any) -> bool:
    """Whether the scan's row filter holds for the identity partition values of ``task``'s file,
    in SQL's logic: pyiceberg plans the file of a null ``shop`` for ``shop != 's0'`` (and gives
    no residual), where its own reader, as SQL, keeps none of its rows. True when the filter
    needs other columns (the residual then says what the file holds)."""
    import pyarrow as pa
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.expressions.visitors import bind, extract_field_ids
    from pyiceberg.io.pyarrow import expression_to_pyarrow
    from pyiceberg.transforms import IdentityTransform

    if scan.row_filter == AlwaysTrue():
        return True
    schema = scan.table_metadata.schema()
    bound = bind(schema, scan.row_filter, scan.case_sensitive)
    spec = scan.table_metadata.specs()[task.file.spec_id]
    values = {f.source_id: task.file.partition[i] for i, f in enumerate(spec.fields)
              if isinstance(f.transform, IdentityTransform)}
    needed = extract_field_ids(bound)
    if not needed <= values.keys():
        return True
    arrow = _arrow_schema(schema)
    row = pa.table({arrow.field(schema.find_column_name(i)).name: pa.array([values[i]], arrow.field(
        schema.find_column_name(i)).type) for i in needed})
    return row.filter(expression_to_pyarrow(bound)).num_rows == 1


def _stored_partition_columns(scan: Any, task: Any, schema: Any) -> tuple[str, ...]:
    """The columns that ``task``'s file must store: those its partition spec keeps by identity
    (a file lacking them holds its values in the metadata only, which tabloader does not read;
    a file lacking another column was written before the column was added)."""
    from pyiceberg.transforms import IdentityTransform

    spec = scan.table_metadata.specs()[task.file.spec_id]
    ids = {f.source_id for f in spec.fields if isinstance(f.transform, IdentityTransform)}
    return tuple(f.name for f in schema.fields if f.field_id in ids)


def _arrow_schema(schema: Any) -> Any:
    """The Iceberg schema as arrow types tabloader reads (strings, not large strings), each
    field with its id in ``PARQUET:field_id`` metadata."""
    import pyarrow as pa
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    # nullable as every column tabloader reads from parquet (which columns hold nulls is read from the footers)
    return pa.schema([pa.field(f.name, offset_width_free(f.type), metadata={FIELD_ID: str(i.field_id).encode()})
                      for f, i in zip(schema_to_pyarrow(schema), schema.fields)])


class _FolderIO:
    """pyiceberg's file IO confined to a table's folder: a path the metadata names is read from
    the folder when it lies inside the table's location as written (``written_at``; the table may
    have moved since) or inside the folder itself; any other path is refused, naming it."""

    def __init__(self, fs: Any, root: str) -> None:
        self.fs, self.root, self.written_at = fs, root, root
        self.properties: dict[str, str] = {}

    def inside(self, path: str, what: str = "file") -> str:
        """Where the table's ``path`` is in the folder (a plain path or URL as ``fs`` reads it)."""
        for prefix in dict.fromkeys([self.written_at, self.root, self.url(self.root)]):
            if path.startswith(prefix + "/"):
                found = inside_folder(self.root, path[len(prefix) + 1:])
                if found is not None:
                    return found
        raise IcebergTableError(f"{self.root}: the Iceberg metadata names the {what} {path!r}, outside the table's "
                                f"folder (written at {self.written_at}); tabloader reads only files inside the folder "
                                "it is given: pass catalog.load_table(name) to read a table whose files lie elsewhere")

    def url(self, path: str) -> str:
        """``path`` (as ``fs`` spells it) as a URL (a local path stays a path)."""
        return path if is_local(self.fs) else self.fs.unstrip_protocol(path)

    def new_input(self, location: str) -> Any:
        from pyiceberg.io.fsspec import FsspecInputFile

        return FsspecInputFile(self.inside(location), self.fs)  # the folder's own file system, as the user named it

    def new_output(self, location: str) -> Any:
        raise IcebergTableError(f"{self.root}: tabloader reads Iceberg tables, it does not write {location}")

    def delete(self, location: Any) -> None:
        raise IcebergTableError(f"{self.root}: tabloader reads Iceberg tables, it does not delete {location}")
