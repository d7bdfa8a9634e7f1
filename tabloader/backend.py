"""The one CPU/GPU seam.

Only this module imports cuDF, CuPy and dask_cudf, and only when asked for. Everything else
asks it which dataframe and array library to use for a device, how to read parquet, and how to
export an array by DLPack. Its device half, :mod:`tabloader.device` (where arrays live, host
staging and copies to the GPU, seeded permutations...), is re-exported here: ask
``backend.<name>`` for those too. Nothing here decides GPU availability at import time.

Example:
    >>> from tabloader import backend
    >>> backend.resolve_device("cpu")
    'cpu'
    >>> backend.dataframe_lib("cpu").__name__, backend.array_lib("cpu").__name__
    ('pandas', 'numpy')
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import threading
from typing import Any, Collection, Sequence

import numpy as np
import pandas as pd

from tabloader.gpu_install import GPU_EXTRAS, detect_cuda_major, gpu_extra, install_hint  # noqa: F401  (re-exported)
from tabloader.hashes import FNV64_OFFSET, FNV64_PRIME, hash_combine, hash_float64, hash_int64, hash_strings  # noqa: F401  (re-exported)

DEVICES = ("cpu", "cuda", "auto")

class BackendUnavailableError(ImportError):
    """A GPU library was asked for but is missing, or no CUDA device is present."""


def _import_gpu_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise BackendUnavailableError(
            f"device='cuda' needs {name}, which is not importable here ({exc}); {install_hint(name)}"
        ) from exc


def cudf() -> Any:
    """The cuDF module, imported on first use."""
    return _import_gpu_module("cudf")


def cupy() -> Any:
    """The CuPy module, imported on first use."""
    return _import_gpu_module("cupy")


def dask_cudf() -> Any:
    return _import_gpu_module("dask_cudf")


#: ``TABLOADER_RMM_POOL=0`` leaves RMM's memory resource as it is (see :func:`ensure_rmm_pool`).
RMM_POOL_ENV = "TABLOADER_RMM_POOL"
#: The pool starts with 1/16 of the GPU's memory and keeps at most 1/4 of it when unused.
RMM_POOL_INITIAL_SHARE, RMM_POOL_KEPT_SHARE = 16, 4
_rmm_lock = threading.Lock()
_rmm_devices: dict[int, bool] = {}  # CUDA device id -> whether tabloader installed its resource there


def ensure_rmm_pool() -> bool:
    """Give cuDF and CuPy a stream-ordered memory pool on the current CUDA device, once per
    device and process, unless someone chose RMM's memory resource already.

    cuDF routes its own and CuPy's allocations through RMM, whose default resource calls
    ``cudaMalloc``/``cudaFree`` for every buffer; ``cudaFree`` waits for the whole device, so a
    workflow of many small column operations spends its time synchronising. This installs
    ``rmm.mr.CudaAsyncMemoryResource`` (``cudaMallocAsync``: the driver's pool, frees ordered on
    the stream) when the current resource is still RMM's default ``CudaMemoryResource``. The
    pool starts with 1/16 of the GPU's memory and keeps at most a quarter of it cached: freed
    memory beyond that goes back to the driver at the next synchronisation, for PyTorch or
    other libraries of the process. A resource set by the user,
    ``dask_cuda`` (``rmm_pool_size=``) or ``cudf.pandas`` is left as it is, and so is everything
    with ``TABLOADER_RMM_POOL=0``. Datasets on the GPU call it when they are made; calling it
    again does nothing.

    Returns True when tabloader's resource serves the current device (installed now or
    before), False otherwise (opted out, another resource chosen, or RMM not installed).

    Example:
        >>> import os
        >>> os.environ["TABLOADER_RMM_POOL"] = "0"
        >>> ensure_rmm_pool()
        False
        >>> del os.environ["TABLOADER_RMM_POOL"]
    """
    if os.environ.get(RMM_POOL_ENV, "1").strip().lower() in ("0", "false", "no", "off") or not has_module("rmm"):
        return False
    import rmm

    device = current_gpu()
    with _rmm_lock:
        if device not in _rmm_devices:
            default = type(rmm.mr.get_current_device_resource()) is rmm.mr.CudaMemoryResource
            if default:
                _, total = rmm.mr.available_device_memory()
                # RMM's own defaults would take half the free memory at once and never give any
                # back: keep at most a quarter cached, so that PyTorch in the same process (a
                # loader feeding training) can have the rest.
                rmm.mr.set_current_device_resource(rmm.mr.CudaAsyncMemoryResource(
                    initial_pool_size=total // RMM_POOL_INITIAL_SHARE, release_threshold=total // RMM_POOL_KEPT_SHARE))
            _rmm_devices[device] = default
        return _rmm_devices[device]


def has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def cuda_available() -> bool:
    """True when a CUDA device can be used (asked at run time, never cached at import)."""
    if has_module("cupy"):
        try:
            import cupy as cp

            return cp.cuda.runtime.getDeviceCount() > 0
        except Exception:
            return False
    if has_module("torch"):
        import torch

        return torch.cuda.is_available()
    return False


def resolve_device(device: str | None = "auto") -> str:
    """Map ``"auto"``/None to ``"cuda"`` when a GPU is usable, else ``"cpu"``; validate names.

    ``"cuda:0"`` style names resolve to ``"cuda"`` (the current CUDA device is used).
    """
    if device is None:
        device = "auto"
    name = str(device).split(":")[0].lower()
    if name not in DEVICES:
        raise ValueError(f"unknown device {device!r}; expected one of {DEVICES}")
    if name == "auto":
        return "cuda" if cuda_available() else "cpu"
    if name == "cuda" and not cuda_available():
        raise BackendUnavailableError(f"device={device!r} was asked for but no CUDA device is usable here")
    return name


@functools.lru_cache(maxsize=None)
def cudf_available() -> bool:
    return has_module("cudf") and cuda_available()


#: A dataset partition's target decoded size on the CPU: it fits the caches, and enough
#: partitions keep every core busy.
CPU_PART_SIZE = 128_000_000  # "128MB"
#: On a GPU partitions are larger: each costs every operator a few kernel launches and waits
#: per column whatever its size, so a GPU wants few large ones. 1/64 of the GPU's memory
#: leaves room for the partitions that the scheduler's threads hold at once and their
#: temporaries; between 128MB and 1GB (an 80GB H100: 1GB).
GPU_PART_SIZE_RANGE = (128_000_000, 1_000_000_000)
#: Partitions on a GPU that Dask's local scheduler works on at once (:func:`local_task_threads`).
GPU_TASK_THREADS = 2


def default_part_size(device: str) -> int:
    """The ``part_size`` of a dataset on ``device`` (``"cpu"`` or ``"cuda"``) that gives none, in bytes.

    Example:
        >>> default_part_size("cpu")
        128000000
    """
    if device != "cuda":
        return CPU_PART_SIZE
    total = cupy().cuda.runtime.getDeviceProperties(current_gpu())["totalGlobalMem"]
    low, high = GPU_PART_SIZE_RANGE
    return min(high, max(low, total // 64))


def local_task_threads(device: str) -> int:
    """How many of a dataset's partitions Dask's local scheduler works on at once, for data on
    ``device``, unless ``dask.config.set(num_workers=...)`` says otherwise.

    On the CPU, one per core. On a GPU, :data:`GPU_TASK_THREADS`: cuDF runs every thread's
    kernels on the same default stream, so more threads do not add GPU work in parallel; two
    let one partition's file reading and Python overhead overlap another's GPU work, while each
    more thread holds one more partition (1/64 of the GPU's memory, and its intermediates) in
    GPU memory. ``dask_cuda`` likewise runs one thread per GPU by default.

    Example:
        >>> local_task_threads("cuda")
        2
    """
    if device == "cuda":
        return GPU_TASK_THREADS
    from dask.system import CPU_COUNT

    return CPU_COUNT


def dataframe_lib(device: str) -> Any:
    """``pandas`` for the CPU, ``cudf`` for the GPU."""
    return cudf() if resolve_device(device) == "cuda" else pd


def array_lib(device_or_array: Any) -> Any:
    """``numpy`` or ``cupy`` for a device name, or for the library an array belongs to."""
    if isinstance(device_or_array, str):
        return cupy() if resolve_device(device_or_array) == "cuda" else np
    return cupy() if is_gpu_object(device_or_array) else np


def is_gpu_object(obj: Any) -> bool:
    """True for cuDF frames/series and CuPy arrays (checked by module name: no import needed).

    ``obj.__class__``, not ``type(obj)``: dask-cuda's spilling proxies (``jit_unspill``) hand the
    proxied object's class there, and their cuDF partitions must stay GPU work."""
    module = obj.__class__.__module__.split(".")[0]
    return module in ("cudf", "cupy", "dask_cudf")


def frame_device(frame: Any) -> str:
    return "cuda" if is_gpu_object(frame) else "cpu"


def encoding_for(data: Any) -> Any:
    """The categorical-encoding implementation for ``data`` (a frame, series or array):
    :mod:`tabloader.encoding.gpu` for cuDF/CuPy data, :mod:`tabloader.encoding.cpu` otherwise.

    Both modules offer the same primitives (see :mod:`tabloader.encoding`), so operators call
    them without branching on the device.

    Example:
        >>> encoding_for(pd.Series([1, 2])).__name__
        'tabloader.encoding.cpu'
    """
    return importlib.import_module("tabloader.encoding.gpu" if is_gpu_object(data) else "tabloader.encoding.cpu")


def concat(frames: Sequence[Any], **kwargs: Any) -> Any:
    """Concatenate frames of one library."""
    if not frames:
        raise ValueError("concat needs at least one frame")
    lib = cudf() if is_gpu_object(frames[0]) else pd
    return lib.concat(list(frames), **kwargs)


def to_host(data: Any) -> Any:
    """A host copy of GPU data: pandas for a cuDF frame or series, numpy for a CuPy array;
    host data is returned as it is.

    Example:
        >>> to_host(np.arange(2)).tolist()
        [0, 1]
    """
    if not is_gpu_object(data):
        return data
    return data.to_pandas() if hasattr(data, "to_pandas") else cupy().asnumpy(data)


def to_device(frame: Any, device: str) -> Any:
    """Move a pandas frame to ``device`` (cuDF for the GPU); a frame already on a GPU stays
    where it is."""
    if resolve_device(device) == "cuda" and not is_gpu_object(frame):
        return _pandas_to_cudf(frame)
    return frame


def _pandas_to_cudf(frame: Any) -> Any:
    """A pandas frame as cuDF, with the column types a parquet read gives on the GPU.

    Through arrow rather than ``cudf.from_pandas``: that keeps pandas' nullable dtypes
    (``Int64``...) on cuDF columns, on which cuDF's own ``to_cupy`` fails, and refuses arrow
    dates (``date32[pyarrow]``); arrow gives cuDF's native types (NaN read as null, as cuDF
    does). Frames arrow cannot take (non-string or duplicate column names, mixed objects) go
    through ``from_pandas``.
    """
    import pyarrow as pa

    names = frame.columns
    if not all(isinstance(n, str) for n in names) or names.has_duplicates:
        return cudf().from_pandas(frame)
    try:
        table = pa.Table.from_pandas(frame, preserve_index=False)
    except (pa.ArrowException, TypeError, ValueError):
        return cudf().from_pandas(frame)
    out = cudf().DataFrame.from_arrow(cudf_arrow_table(table.replace_schema_metadata(None)))
    out.index = cudf().from_pandas(frame.index)
    return out


def frame_arrow_schema(frame: Any) -> Any:
    """The pyarrow schema of a pandas/cuDF/Dask DataFrame, without computing a Dask frame."""
    import pyarrow as pa

    meta = getattr(frame, "_meta", frame)  # Dask frames: the empty meta frame
    if is_gpu_object(meta):
        return _cudf_arrow_schema(meta)
    schema = pa.Schema.from_pandas(meta.head(0), preserve_index=False)
    if meta is frame and len(frame):
        # Object columns (Python lists, for instance) have no type without values: infer it from
        # the values of an in-memory frame (a Dask frame's meta has none to look at).
        for i, field in enumerate(schema):
            if pa.types.is_null(field.type):
                try:
                    schema = schema.set(i, field.with_type(pa.array(frame.iloc[:, i], from_pandas=True).type))
                except (pa.ArrowException, TypeError, ValueError):
                    pass
    return schema


def _cudf_arrow_schema(frame: Any) -> Any:
    """The arrow schema of a cuDF frame. cuDF gives an empty list or struct column the arrow type
    ``null`` (seen with cuDF 26.10), so nested columns take their type from the cuDF dtype."""
    import pyarrow as pa

    schema = frame.head(0).to_arrow(preserve_index=False).schema  # cuDF's default keeps a non-range index
    for i, dtype in enumerate(frame.dtypes):
        if pa.types.is_null(schema.field(i).type) and hasattr(dtype, "to_arrow"):
            schema = schema.set(i, schema.field(i).with_type(dtype.to_arrow()))
    return schema


def from_arrow(table: Any, device: str = "cpu", nullable: Collection[str] = (), copy: bool = True,
               dictionaries: Collection[str] = ()) -> Any:
    """A pyarrow Table as a DataFrame on ``device``.

    On the CPU, arrow types keep pandas' conventions and lose no value: integer and boolean
    columns named in ``nullable``, and any that hold a null, become pandas nullable dtypes
    (``Int64``, ``boolean``...) rather than float64 (which would merge integers above 2**53);
    the other integer columns stay numpy. A dataset passes the columns it decided may hold
    nulls, so that every partition, with or without a null, gets the same dtype. List,
    decimal, date, time and binary columns stay arrow-backed (``pd.ArrowDtype``), so no
    Python objects are created and writing them back keeps their type. cuDF columns are
    nullable already.

    ``copy=False`` is for a table nobody else holds (a partition just read): its integer and
    float columns then share the table's value buffers instead of being copied (floats with
    nulls are copied once, to hold NaN). The frame is the same either way.

    The columns named in ``dictionaries`` that are of arrow dictionary type stay so (a
    ``pd.ArrowDtype``, the arrays not copied), where pandas would build a Categorical, unifying
    the dictionaries of every chunk (seconds per million rows of ids): the categorical encoders
    read their codes (:mod:`tabloader.encoding.cpu.coded_strings`). Not on the GPU.

    Example:
        >>> import pyarrow as pa
        >>> t = pa.table({"a": pa.array([2**60 + 1, None]), "b": [1, 2], "c": [1, 2]})
        >>> frame = from_arrow(t, nullable=["c"])
        >>> [str(d) for d in frame.dtypes], frame["a"].tolist()[0] == 2**60 + 1
        (['Int64', 'int64', 'Int64'], True)
        >>> from_arrow(t, nullable=["c"], copy=False).equals(frame)
        True
    """
    if resolve_device(device) == "cuda":
        return cudf().DataFrame.from_arrow(cudf_arrow_table(table))
    import pyarrow as pa

    kept = {name for name in dictionaries if name in table.column_names
            and pa.types.is_dictionary(table.schema.field(name).type)}
    if kept and len(set(table.column_names)) == table.num_columns:
        frame = from_arrow(table.drop_columns(list(kept)), device, nullable, copy)
        arrays = {name: pd.Series(pd.arrays.ArrowExtensionArray(table.column(name)), index=frame.index, copy=False)
                  for name in kept}
        return pd.DataFrame({name: arrays[name] if name in kept else frame[name] for name in table.column_names},
                            index=frame.index, copy=False)
    if copy or table.schema.pandas_metadata or len(set(table.column_names)) < table.num_columns \
            or not table.num_columns:
        return _to_pandas(table, nullable)
    shared = {name: _shared_numbers(column, name in nullable) for name, column in zip(table.column_names, table.columns)}
    rest = [name for name, values in shared.items() if values is None]
    converted = _to_pandas(table.select(rest), nullable) if rest else {}
    return pd.DataFrame({name: converted[name] if values is None else values for name, values in shared.items()},
                        copy=False)


def cudf_arrow_table(table: Any) -> Any:
    """``table`` with the column types cuDF's ``from_arrow`` lacks as those it has: ``large_list``
    (polars' lists) as lists (``cudf_dtype_from_pa_type`` knows only ``list``; cuDF's lists hold
    them while their offsets fit in 32 bits), and ``date64`` as ``timestamp[ms]`` (libcudf's
    arrow interop has no date64; cuDF's dates are timestamps at midnight anyway).

    Example:
        >>> import pyarrow as pa
        >>> t = pa.table({"l": pa.array([[1], [2, 3]], pa.large_list(pa.int64())), "d": pa.array([0, 0], pa.date64())})
        >>> [str(f.type) for f in cudf_arrow_table(t).schema]
        ['list<item: int64>', 'timestamp[ms]']
    """
    import pyarrow as pa

    for i, field in enumerate(table.schema):
        column, rebuilt = table.column(i), False
        if pa.types.is_list(field.type) or pa.types.is_large_list(field.type):  # see empty_null_lists
            chunks = [empty_null_lists(chunk) for chunk in column.chunks]
            rebuilt = any(new is not old for new, old in zip(chunks, column.chunks))
            column = pa.chunked_array(chunks, type=field.type) if rebuilt else column
        if pa.types.is_large_list(field.type):
            supported = pa.list_(field.type.value_field)
        elif pa.types.is_date64(field.type):
            supported = pa.timestamp("ms")
        else:
            supported = field.type
        if rebuilt or supported != field.type:
            table = table.set_column(i, field.with_type(supported), column.cast(supported))
    return table


def _to_pandas(table: Any, nullable: Collection[str]) -> Any:
    """pyarrow's conversion, with the dtypes :func:`from_arrow` promises."""
    masked = [name for name, column in zip(table.column_names, table.columns)
              if has_nullable_dtype(column.type) and (name in nullable or column.null_count)]
    if not masked:
        return table.to_pandas(types_mapper=_pandas_type_for_arrow, self_destruct=False)
    plain = table.drop_columns(masked).to_pandas(types_mapper=_pandas_type_for_arrow, self_destruct=False)
    nulls = table.select(masked).to_pandas(types_mapper=_nullable_type_for_arrow, self_destruct=False)
    return pd.concat([plain, nulls], axis=1)[table.column_names]


def _shared_numbers(column: Any, nullable: bool) -> Any:
    """An integer or float column as a numpy array (floats: nulls as NaN) or a pandas nullable
    integer array (when ``nullable`` or holding nulls) over the column's value buffer; None
    for other types. pandas' own conversion copies the values and unpacks the validity
    bitmap through an arrow boolean array, which cost more than reading the partition."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_float32(kind) or pa.types.is_float64(kind)):
        return None
    chunk = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    dtype = np.dtype(kind.to_pandas_dtype())
    if dtype.kind == "f" and chunk.null_count:
        chunk = pc.fill_null(chunk, dtype.type("nan"))  # a new array of ours (arrow's fill beats np.where)
    data = chunk.buffers()[1]
    values = (np.frombuffer(data, dtype, count=len(chunk), offset=chunk.offset * dtype.itemsize) if len(chunk)
              else np.empty(0, dtype))
    if not values.flags.writeable:  # arrow memory that is not ours to write (a memory map)
        values = values.copy()
    if dtype.kind == "f":
        return values
    missing = _null_rows(chunk)
    if missing is None and not nullable:
        return values
    return pd.arrays.IntegerArray(values, np.zeros(len(chunk), bool) if missing is None else missing)


def _null_rows(chunk: Any) -> Any:
    """True where an arrow array is null, from its validity bitmap; None without nulls."""
    if not chunk.null_count:
        return None
    invalid = ~np.frombuffer(chunk.buffers()[0], np.uint8)
    return np.unpackbits(invalid, count=chunk.offset + len(chunk), bitorder="little")[chunk.offset:].view(bool)


def cast_column(series: Any, dtype: Any) -> Any:
    """``series.astype(dtype)`` (pandas or cuDF), where naive timestamps given a time zone are
    taken as UTC instants: cuDF's parquet reader gives a zoned column (``isAdjustedToUTC``:
    Spark's TIMESTAMP_MICROS, pyarrow's ``timestamp[us, tz=...]``) as its naive UTC values, and
    ``astype`` refuses to add a zone.

    Example:
        >>> utc_noon = pd.Series(pd.to_datetime(["2024-01-01 12:00"]).as_unit("us"))
        >>> str(cast_column(utc_noon, pd.DatetimeTZDtype("us", "Europe/Berlin"))[0])
        '2024-01-01 13:00:00+01:00'
    """
    if isinstance(dtype, pd.DatetimeTZDtype) and getattr(series.dtype, "kind", "") == "M" \
            and getattr(series.dtype, "tz", None) is None:
        series = series.dt.tz_localize("UTC").dt.tz_convert(dtype.tz)
    return series.astype(dtype)


def refuse_device_types(arrow_schema: Any, device: str, where: str) -> None:
    """On the GPU, refuse before anything is read the columns of a type cuDF has none for
    (binary, time of day, 256-bit decimals, float16, also as list elements), naming the column
    and what to do; on the CPU, nothing.

    Example:
        >>> import pyarrow as pa
        >>> refuse_device_types(pa.schema([("blob", pa.binary())]), "cpu", "f.parquet")
        >>> refuse_device_types(pa.schema([("blob", pa.binary())]), "cuda", "f.parquet")
        Traceback (most recent call last):
        ...
        TypeError: f.parquet: column 'blob' has type binary, and cuDF has no binary type: device='cuda' ...
    """
    if device != "cuda":
        return
    for field in arrow_schema:
        lacking = _cudf_lacks(field.type)
        if lacking:
            raise TypeError(f"{where}: column {field.name!r} has type {field.type}, and cuDF has no {lacking} type: "
                            "device='cuda' cannot read it; leave it out with Dataset(..., columns=[...]), or read it "
                            "with device='cpu'")


def _cudf_lacks(arrow_type: Any) -> str | None:
    """The kind of type cuDF lacks for ``arrow_type`` (None when it has one): libcudf's arrow
    interop maps no binary or time type (cpp/src/interop/arrow_utilities.cpp), and cuDF refuses
    decimal256 and float16 (cudf_dtype_from_pa_type, ColumnBase.from_arrow)."""
    import pyarrow as pa

    t = pa.types
    if t.is_dictionary(arrow_type):
        return _cudf_lacks(arrow_type.value_type)
    if t.is_list(arrow_type) or t.is_large_list(arrow_type) or t.is_fixed_size_list(arrow_type):
        return _cudf_lacks(arrow_type.value_type)
    if t.is_binary(arrow_type) or t.is_large_binary(arrow_type) or t.is_fixed_size_binary(arrow_type) \
            or t.is_binary_view(arrow_type):
        return "binary"
    if t.is_time(arrow_type):
        return "time of day"
    if t.is_decimal256(arrow_type):
        return "256-bit decimal"
    if t.is_float16(arrow_type):
        return "float16"
    return None


def has_nullable_dtype(arrow_type: Any) -> bool:
    """True for arrow types whose plain pandas dtype cannot hold a null (integers, booleans):
    with nulls they need pandas' nullable dtypes.

    Example:
        >>> import pyarrow as pa
        >>> has_nullable_dtype(pa.uint8()), has_nullable_dtype(pa.float32())
        (True, False)
    """
    import pyarrow as pa

    return pa.types.is_integer(arrow_type) or pa.types.is_boolean(arrow_type)


def is_arrow_backed(arrow_type: Any) -> bool:
    """True for the arrow types pandas columns keep as ``pd.ArrowDtype`` (lists, decimals,
    dates, times, binary): pandas' own dtypes would make them Python objects, and writing
    those back would not know their type.

    Example:
        >>> import pyarrow as pa
        >>> is_arrow_backed(pa.date32()), is_arrow_backed(pa.int64())
        (True, False)
    """
    import pyarrow as pa

    return (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_decimal(arrow_type)
            or pa.types.is_date(arrow_type) or pa.types.is_time(arrow_type) or pa.types.is_binary(arrow_type)
            or pa.types.is_large_binary(arrow_type) or pa.types.is_fixed_size_binary(arrow_type))


def _string_dtype() -> Any:
    # pandas 3's default text dtype ("str"): arrow-backed, NaN for a missing value. Its one
    # version branch: pandas 2.3 spells it StringDtype("pyarrow", na_value=np.nan) (as 3 does),
    # pandas 2.2 StringDtype("pyarrow_numpy") (2.2's own default is object).
    try:
        return pd.StringDtype("pyarrow", na_value=np.nan)
    except TypeError:  # pandas 2.2: no na_value argument
        return pd.StringDtype("pyarrow_numpy")


#: The dtype of text columns tabloader reads, on every pandas version it supports: pandas 3's
#: ``str`` (pandas 2 users get it too, rather than pandas 2's ``object``, so that ids, dtypes and
#: missing values are the same under both).
STRING_DTYPE = _string_dtype()


def _pandas_type_for_arrow(arrow_type: Any) -> Any:
    import pyarrow as pa

    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return STRING_DTYPE
    return pd.ArrowDtype(arrow_type) if is_arrow_backed(arrow_type) else None


# Spark (by default), Hive and Impala write timestamps as INT96. They are read in microseconds,
# Spark's own precision: in nanoseconds, pyarrow's default, any date after 2262 (9999-12-31, a
# warehouse's "valid until") silently wraps around. Sub-microsecond digits (Impala) are dropped.
# cuDF's Python reader has no such option (libcudf's timestamp_type is not exposed by pylibcudf, and
# its INT96 decoder computes nanoseconds first): on the GPU, INT96 columns are decoded by pyarrow
# (read_parquet's host_columns).
INT96_UNIT = "us"


def read_parquet(path: str, columns: Sequence[str] | None = None, row_groups: Sequence[int] | None = None,
                 device: str = "cpu", filesystem: Any = None, host_columns: Collection[str] = ()) -> Any:
    """Read one parquet file (optionally some row groups) into a DataFrame on ``device``.

    ``filesystem`` is the fsspec file system ``path`` is spelled for (default: the local disk,
    or the URL's protocol); cuDF takes no pyarrow one. On the GPU, ``host_columns`` (among
    ``columns``) are decoded by pyarrow and copied to the device: INT96 timestamps, which cuDF
    decodes in nanoseconds (wrapping dates past 2262), while pyarrow reads them in
    :data:`INT96_UNIT`.
    """
    if resolve_device(device) == "cuda":
        hosted = [c for c in columns or () if c in host_columns]
        per_file = None if row_groups is None else [list(row_groups)]
        if not hosted:
            return _cudf_read_parquet([path], columns, per_file, filesystem)
        table = read_parquet_arrow(path, hosted, row_groups, filesystem)
        # without pandas' metadata: cuDF's from_arrow would make the index it names (rows 0..n are wanted)
        frame = cudf().DataFrame.from_arrow(table.replace_schema_metadata(None))
        rest = [c for c in columns if c not in host_columns]
        if rest:
            on_device = _cudf_read_parquet([path], rest, per_file, filesystem)
            for name in rest:
                frame[name] = on_device[name]
        return frame[list(columns)]
    return from_arrow(read_parquet_arrow(path, columns, row_groups, filesystem))


def read_parquet_files(paths: Sequence[str], columns: Sequence[str], row_groups: Sequence[Sequence[int]],
                       device: str = "cpu", filesystem: Any = None) -> Any:
    """Row groups ``row_groups[i]`` of each file ``paths[i]`` (files of one parquet schema) as one
    DataFrame on ``device``, rows in that order and numbered from 0.

    On the GPU it is one cuDF read: libcudf fetches and decodes the column chunks of all the
    files together, where a read per file would cost a call (its host work and waits for the
    device) per file and a copy of every column to concatenate them. On the CPU the files are
    read by pyarrow one after the other.

    Example:
        >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
        >>> d = tempfile.mkdtemp()
        >>> for name, ids in (("a", [1, 2, 3, 4]), ("b", [5, 6])):
        ...     pq.write_table(pa.table({"id": ids}), os.path.join(d, name + ".parquet"), row_group_size=2)
        >>> read_parquet_files([os.path.join(d, "a.parquet"), os.path.join(d, "b.parquet")], ["id"], [[1], [0]])["id"].tolist()
        [3, 4, 5, 6]
    """
    if resolve_device(device) == "cuda":
        return _cudf_read_parquet(list(paths), columns, [list(r) for r in row_groups], filesystem)
    import pyarrow as pa

    tables = [read_parquet_arrow(path, columns, groups, filesystem) for path, groups in zip(paths, row_groups)]
    return from_arrow(pa.concat_tables(tables), copy=False)


def _cudf_read_parquet(paths: list[str], columns: Sequence[str] | None, row_groups: list[list[int]] | None,
                       filesystem: Any) -> Any:
    """cuDF's read of some files (``row_groups``: a list per file), as pyarrow's reads them: only
    the files' columns, rows numbered from 0."""
    kwargs = {"row_groups": row_groups} if row_groups is not None else {}
    # partitioning=None: cuDF would otherwise run pyarrow's hive discovery on the file's folders,
    # add the keys as categoricals, and fail when the file also stores a key with another type
    # than pyarrow infers (polars' partitioned writes); a dataset adds its keys itself.
    frame = cudf().read_parquet(paths, columns=columns, filesystem=filesystem, use_pandas_metadata=False,
                                dataset_kwargs={"partitioning": None}, **kwargs)
    # cuDF applies the index that pandas' metadata records even without use_pandas_metadata: a
    # RangeIndex (from the first row group read), or the columns it names (a frame written after
    # set_index or a groupby), moved out of the columns asked for. The rows of a partition are
    # 0..n, and every column asked for is a column, as pyarrow reads them.
    if columns is not None and any(name in columns for name in frame.index.names):
        frame = frame.reset_index()
    else:
        frame = frame.reset_index(drop=True)
    # cuDF leaves out a column a file lacks (ignore_missing_columns, from 26.02 an argument) where
    # pyarrow raises: the same error as pyarrow's reads, naming the file.
    missing = [c for c in columns or () if c not in frame.columns]
    if missing:
        raise KeyError(f"columns {missing} are not in {paths[0] if len(paths) == 1 else paths}")
    return frame if columns is None else frame[list(columns)]


def read_parquet_arrow(path: str, columns: Sequence[str] | None = None, row_groups: Sequence[int] | None = None,
                       filesystem: Any = None, memory_pool: Any = None, read_dictionary: Sequence[str] = ()) -> Any:
    """Read one parquet file (optionally some row groups) into a pyarrow Table.

    ``filesystem`` is an fsspec or pyarrow file system (default: the local disk); a column
    missing from the file raises a KeyError naming it. With a ``memory_pool`` (a pyarrow
    ``MemoryPool``) the columns are decoded into it, by pyarrow's dataset reader; without, by
    its ParquetFile reader, which takes about 5% less CPU but only allocates from the default
    pool. The ``read_dictionary`` columns (binary or string columns, or the elements of list
    columns: ``tags.list.element``) come as arrow dictionary arrays, one dictionary per row
    group, as the file stores them.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tabloader.filesystems import arrow_filesystem

    fs = arrow_filesystem(filesystem)
    columns = None if columns is None else list(columns)
    row_groups = None if row_groups is None else list(row_groups)
    if memory_pool is None:
        with pq.ParquetFile(str(path), filesystem=fs, coerce_int96_timestamp_unit=INT96_UNIT,
                            read_dictionary=list(read_dictionary) or None) as file:
            groups = list(range(file.num_row_groups)) if row_groups is None else row_groups
            # One call per row group where a list's elements come as dictionaries (asked for, or
            # stored so: polars' List(Categorical)): this reader cannot chunk them in one call.
            if len(groups) > 1 and (read_dictionary or _nests_dictionaries(file.schema_arrow, columns)):
                table = pa.concat_tables([file.read_row_group(i, columns=columns, use_threads=True) for i in groups])
            else:
                table = (file.read(columns=columns, use_threads=True) if row_groups is None
                         else file.read_row_groups(row_groups, columns=columns, use_threads=True))
    else:
        table = _read_parquet_fragment(str(path), fs, columns, row_groups, memory_pool, read_dictionary)
    read = set(table.column_names)  # neither reader returns a column the file lacks
    missing = [c for c in columns or () if c not in read]
    if missing:
        raise KeyError(f"columns {missing} are not in {path}")
    return table


def _nests_dictionaries(schema: Any, columns: Sequence[str] | None) -> bool:
    """True when one of ``columns`` (default: all) of the arrow ``schema`` is a list whose
    elements are of dictionary type.

    Example:
        >>> import pyarrow as pa
        >>> schema = pa.schema([("tags", pa.list_(pa.dictionary(pa.int32(), pa.string()))), ("x", pa.int64())])
        >>> _nests_dictionaries(schema, None), _nests_dictionaries(schema, ["x"])
        (True, False)
    """
    import pyarrow as pa

    for field in schema:
        if columns is not None and field.name not in columns:
            continue
        kind = field.type
        while pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
            kind = kind.value_type
        if kind is not field.type and pa.types.is_dictionary(kind):
            return True
    return False


def _read_parquet_fragment(path: str, fs: Any, columns: list | None, row_groups: list | None, pool: Any,
                           read_dictionary: Sequence[str]) -> Any:
    import pyarrow.dataset as pds

    scan = pds.ParquetFragmentScanOptions(pre_buffer=True)
    options = pds.ParquetReadOptions(coerce_int96_timestamp_unit=INT96_UNIT, dictionary_columns=set(read_dictionary))
    fragment = pds.ParquetFileFormat(read_options=options, default_fragment_scan_options=scan).make_fragment(
        path, filesystem=fs, row_groups=row_groups)
    if columns is not None:
        present = set(fragment.physical_schema.names)  # the dataset reader refuses a missing column
        columns = [c for c in columns if c in present]
    table = fragment.to_table(columns=columns, memory_pool=pool, use_threads=True)
    return table if row_groups is None else _in_order(table, fragment.row_groups, row_groups)


def _in_order(table: Any, read: Sequence[Any], wanted: Sequence[int]) -> Any:
    """``table``, read from the row groups ``read`` (pyarrow ``RowGroupInfo``, in the order the
    fragment read them), with its rows in the order of ``wanted``: pyarrow's ``make_fragment``
    may read row groups 24..35 as 32..35, 24..31. The slices share the table's memory."""
    import pyarrow as pa

    ids = [group.id for group in read]
    if ids == list(wanted):
        return table
    starts = np.cumsum([0] + [group.num_rows for group in read])
    at = {group.id: (int(start), group.num_rows) for group, start in zip(read, starts)}
    return pa.concat_tables([table.slice(*at[i]) for i in wanted])


def exportable(array: Any) -> Any:
    """``array``, or a copy of it when it is a read-only numpy array (a view of arrow memory):
    DLPack cannot export those unversioned, and torch cannot own them.

    Example:
        >>> a = np.arange(3); a.flags.writeable = False
        >>> exportable(a).flags.writeable, exportable(np.arange(3)).flags.writeable
        (True, True)
    """
    if isinstance(array, np.ndarray) and not array.flags.writeable:
        return array.copy()
    return array


def to_dlpack(array: Any) -> Any:
    """A DLPack capsule for a numpy or CuPy array (unversioned, as TensorFlow requires)."""
    # No max_version: asking for (1, 0) would give a versioned capsule, which TensorFlow rejects.
    return exportable(array).__dlpack__()


def asarray(values: Any, device: str) -> Any:
    """Copy host values to ``device`` (numpy stays numpy on the CPU)."""
    return array_lib(device).asarray(values)


def list_flatten(series: Any) -> tuple[Any, Any]:
    """The element values of a list column, and a function rebuilding a list column from new ones.

    ``values`` is a Series of the elements (nulls kept) with a fresh RangeIndex;
    ``rebuild(new_values)`` takes an array of the same length and returns a list Series with
    the original offsets, null lists and index. cuDF list columns stay on the device: their
    elements are the column's child, rebuilt under its offsets (:func:`list_layout`).

    Example:
        >>> import pyarrow as pa
        >>> s = pd.Series([[1, 2], None, [3]], dtype=pd.ArrowDtype(pa.list_(pa.int64())))
        >>> values, rebuild = list_flatten(s)
        >>> values.tolist(), rebuild(values.to_numpy() * 10).tolist()
        ([1, 2, 3], [[10, 20], <NA>, [30]])
    """
    import pyarrow as pa

    if is_gpu_object(series):
        return _device_list_flatten(series)
    index = series.index
    arr = list_column_to_arrow(series)
    offsets = np.asarray(arr.offsets)
    offsets = offsets - offsets[0]
    validity = arr.is_valid() if arr.null_count else None
    flat = arr.flatten()
    if pa.types.is_dictionary(flat.type):  # elements read as codes stay so (pandas would make a Categorical)
        values = pd.Series(pd.arrays.ArrowExtensionArray(flat), copy=False)
    else:
        values = flat.to_pandas(types_mapper=_nullable_type_for_arrow if flat.null_count else _pandas_type_for_arrow)

    def rebuild(new_values: Any) -> Any:
        new = pa.array(np.asarray(new_values))
        mask = pa.compute.invert(validity) if validity is not None else None
        out = pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32() if len(new) < 2**31 else pa.int64()),
                                       new, mask=mask)
        return pd.Series(out, index=index, dtype=pd.ArrowDtype(out.type), name=series.name)

    return values, rebuild


def _device_list_flatten(series: Any) -> tuple[Any, Any]:
    """:func:`list_flatten` of a cuDF list column, without leaving the device."""
    columnar = importlib.import_module("tabloader.columnar")
    layout = columnar.list_layout(series)
    valid = layout.valid if series.has_nulls else None

    def rebuild(new_values: Any) -> Any:
        return columnar.build_list(layout.offsets, new_values, valid, series.index, series.name, like=series)

    return layout.values.reset_index(drop=True), rebuild


def is_list_dtype(dtype: Any) -> bool:
    """True for list columns (pandas ``ArrowDtype(list)`` or cuDF ``ListDtype``)."""
    import pyarrow as pa

    if isinstance(dtype, pd.ArrowDtype):
        return pa.types.is_list(dtype.pyarrow_dtype) or pa.types.is_large_list(dtype.pyarrow_dtype)
    return type(dtype).__name__ == "ListDtype"


def is_decimal_dtype(dtype: Any) -> bool:
    """True for decimal columns (pandas ``ArrowDtype(decimal128(...))``, cuDF ``Decimal64Dtype``...).

    Example:
        >>> import pyarrow as pa
        >>> is_decimal_dtype(pd.ArrowDtype(pa.decimal128(10, 2))), is_decimal_dtype(np.dtype("float64"))
        (True, False)
    """
    import pyarrow as pa

    if isinstance(dtype, pd.ArrowDtype):
        return pa.types.is_decimal(dtype.pyarrow_dtype)
    return type(dtype).__name__ in ("Decimal32Dtype", "Decimal64Dtype", "Decimal128Dtype")


def is_arrow_float_dtype(dtype: Any) -> bool:
    """True for pandas' arrow-backed floats (``double[pyarrow]``...), which keep NaN apart from nulls.

    Example:
        >>> import pyarrow as pa
        >>> is_arrow_float_dtype(pd.ArrowDtype(pa.float32())), is_arrow_float_dtype(np.dtype("float64"))
        (True, False)
    """
    import pyarrow as pa

    return isinstance(dtype, pd.ArrowDtype) and pa.types.is_floating(dtype.pyarrow_dtype)


def decimal_precision_scale(dtype: Any) -> tuple[int, int]:
    """``(precision, scale)`` of a decimal dtype of pandas (arrow-backed) or cuDF.

    Example:
        >>> import pyarrow as pa
        >>> decimal_precision_scale(pd.ArrowDtype(pa.decimal128(10, 2)))
        (10, 2)
    """
    typed = dtype.pyarrow_dtype if isinstance(dtype, pd.ArrowDtype) else dtype
    return int(typed.precision), int(typed.scale)


def decimal_at_scale(value: Any, dtype: Any, rounding: str | None = None) -> Any:
    """The number ``value`` as a ``decimal.Decimal`` that decimal ``dtype`` holds (pandas'
    arrow-backed or cuDF's), or None.

    ``value`` is read as written: a float as its shortest text (0.1 is 0.1, not the binary
    fraction nearest to it). With ``rounding`` (``decimal.ROUND_CEILING``...) it is rounded to
    the dtype's scale and clamped to what its precision holds; without, a value the dtype does
    not hold exactly (more digits after the point than its scale, too large) gives None.

    Example:
        >>> import decimal, pyarrow as pa
        >>> cents = pd.ArrowDtype(pa.decimal128(5, 2))
        >>> decimal_at_scale(0.1, cents), decimal_at_scale(0.125, cents), decimal_at_scale(1e9, cents)
        (Decimal('0.10'), None, None)
        >>> decimal_at_scale(0.125, cents, decimal.ROUND_CEILING), decimal_at_scale(1e9, cents, decimal.ROUND_FLOOR)
        (Decimal('0.13'), Decimal('999.99'))
    """
    import decimal

    number = decimal.Decimal(str(value))
    if number.is_nan():
        if rounding is None:
            return None
        raise ValueError(f"{value!r} is not a number: no decimal is near it")
    precision, scale = decimal_precision_scale(dtype)
    with decimal.localcontext() as context:
        context.prec = precision + 2  # exact arithmetic on the dtype's numbers (decimal128 has up to 38 digits)
        step = decimal.Decimal(1).scaleb(-scale)
        largest = decimal.Decimal(10**precision - 1) * step
        within = min(max(number, -largest - step), largest + step)  # a few digits, whatever the value (1e300)
        rounded = min(max(within.quantize(step, rounding=rounding or decimal.ROUND_HALF_EVEN), -largest), largest)
    return None if rounding is None and rounded != number else rounded


def as_strings(series: Any) -> Any:
    """``series`` as text: pandas 3's ``str`` dtype (:data:`STRING_DTYPE`) on the host, cuDF's
    strings on the GPU; nulls stay null.

    Example:
        >>> as_strings(pd.Series([7, None], dtype="Int64")).tolist()
        ['7', nan]
    """
    return series.astype("str") if is_gpu_object(series) else series.astype(STRING_DTYPE)


def nans_as_nulls(series: Any) -> Any:
    """A float column with its NaN as nulls where the library tells them apart (cuDF, and
    pandas' arrow-backed floats); numpy-backed pandas columns are returned as they are (pandas
    treats NaN as missing)."""
    return series.nans_to_nulls() if is_gpu_object(series) else arrow_nans_as_nulls(series)


def arrow_nans_as_nulls(series: Any) -> Any:
    """A pandas arrow-backed float column (``double[pyarrow]``, as ``pd.read_parquet(...,
    dtype_backend="pyarrow")`` gives) with its NaN as nulls: arrow keeps the two apart, and
    ``isna``/``fillna``/``dropna`` see only the nulls. Any other column is returned as it is.

    Example:
        >>> arrow_nans_as_nulls(pd.Series([1.0, np.nan, None], dtype="double[pyarrow]")).isna().tolist()
        [False, True, True]
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if not is_arrow_float_dtype(series.dtype):
        return series
    values = pa.array(series.array)  # the column's own chunks
    nulled = pc.if_else(pc.is_nan(values), pa.scalar(None, values.type), values)
    return pd.Series(pd.arrays.ArrowExtensionArray(nulled), index=series.index, name=series.name, copy=False)


def datetime_microseconds(series: Any) -> Any:
    """Microseconds since 1970-01-01 UTC of a datetime column (numpy-backed pandas, time-zoned
    or not, or cuDF), as a float64 numpy/CuPy array with NaN for a null (exact to 2^53 us, the
    years 1685 to 2255).

    Example:
        >>> datetime_microseconds(pd.Series(pd.to_datetime(["1970-01-01 00:00:01.5", None]))).tolist()
        [1500000.0, nan]
    """
    if getattr(series.dtype, "tz", None) is not None:
        series = series.dt.tz_convert(None)  # UTC (cuDF refuses to cast a time-zoned column)
    if is_gpu_object(series):
        return series.astype("datetime64[us]").astype("int64").astype("float64").to_cupy(na_value=np.nan)
    times = series.to_numpy(dtype="datetime64[us]")
    out = times.astype(np.int64).astype(np.float64)
    out[np.isnat(times)] = np.nan
    return out


def integer_dtype(series: Any, name: str) -> Any:
    """The dtype that holds ``series`` cast to integer type ``name`` with its nulls: ``name``
    for a numpy integer or boolean column, and on cuDF (whose integers take nulls); pandas'
    nullable dtype (``Int64``, ``UInt8``...) for other pandas columns, so that every partition
    gets the same dtype whether or not it has nulls.

    Example:
        >>> integer_dtype(pd.Series([1.5]), "uint8"), integer_dtype(pd.Series([1]), "int32")
        ('UInt8', 'int32')
    """
    dtype = series.dtype
    if is_gpu_object(series) or (isinstance(dtype, np.dtype) and dtype.kind in "iub"):
        return name
    return nullable_integer_name(name)


def nullable_integer_name(name: str) -> str:
    """pandas' nullable dtype name of numpy integer type ``name``.

    Example:
        >>> nullable_integer_name("uint8"), nullable_integer_name("int64")
        ('UInt8', 'Int64')
    """
    return "UInt" + name[4:] if name.startswith("uint") else "Int" + name[3:]


def _nullable_type_for_arrow(arrow_type: Any) -> Any:
    """pandas nullable dtypes for arrow integers and booleans (so nulls do not turn them into floats)."""
    if has_nullable_dtype(arrow_type):
        return {
            "int8": pd.Int8Dtype(), "int16": pd.Int16Dtype(), "int32": pd.Int32Dtype(), "int64": pd.Int64Dtype(),
            "uint8": pd.UInt8Dtype(), "uint16": pd.UInt16Dtype(), "uint32": pd.UInt32Dtype(),
            "uint64": pd.UInt64Dtype(), "bool": pd.BooleanDtype()}[str(arrow_type)]
    return _pandas_type_for_arrow(arrow_type)


def is_plain_numeric(series: Any) -> bool:
    """True when ``series`` is a numeric, non-boolean column whose values need no null mask.

    pandas: a numpy-backed int/uint/float column (floats carry nulls as NaN). cuDF: a numeric
    column without nulls. Such columns can be handed to numpy/CuPy ufuncs as plain arrays.
    """
    dtype = series.dtype
    if is_gpu_object(series):
        return getattr(dtype, "kind", "") in "iuf" and not series.has_nulls
    return isinstance(dtype, np.dtype) and dtype.kind in "iuf"


def column_values(series: Any, dtype: Any = None) -> Any:
    """The values of a pandas/cuDF Series as a numpy/CuPy array, without a copy where possible.

    With ``dtype`` (a float dtype) the values are cast and nulls become NaN; without it the
    column must be :func:`is_plain_numeric` (or any numpy-backed column on the CPU).

    Example:
        >>> import pandas as pd
        >>> column_values(pd.Series([1, None], dtype="Int64"), "float64").tolist()
        [1.0, nan]
    """
    if is_gpu_object(series):
        if dtype is None:
            return _numpy_typed(series).to_cupy()
        if series.dtype != np.dtype(dtype):  # cuDF's astype copies even to the same dtype
            series = series.astype(dtype)
        # not to_cupy(na_value=np.nan): its fillna counts the NaN first (a wait for the device)
        return _cudf_nulls_replaced(series, np.dtype(dtype).type(np.nan))
    if isinstance(series.dtype, np.dtype):
        values = series.to_numpy()
        return values if dtype is None else values.astype(dtype, copy=False)
    if dtype is None:
        return series.to_numpy()
    return series.to_numpy(dtype=dtype, na_value=np.nan)


def _numpy_typed(series: Any) -> Any:
    """A cuDF Series of a pandas nullable dtype (``Int64``..., which cuDF keeps from
    ``from_pandas``) as its numpy dtype, nulls kept: cuDF's ``to_cupy`` fails on the former."""
    dtype = series.dtype
    return series if isinstance(dtype, np.dtype) else series.astype(np.dtype(dtype.numpy_dtype))


def float_values_filled(series: Any, fill: Any) -> Any:
    """The values of a numpy-float column (pandas or cuDF) with its nulls and NaN replaced by
    ``fill`` (a scalar of the column's dtype), as a numpy/CuPy array; None for other columns.

    pandas keeps nulls as NaN. cuDF keeps them apart (a mask) and its ``fillna`` counts the NaN
    first (a wait for the device per column): here the nulls are replaced by libcudf and the NaN
    by CuPy, with no read back.

    Example:
        >>> float_values_filled(pd.Series([1.5, None]), np.float64(0)).tolist()
        [1.5, 0.0]
        >>> float_values_filled(pd.Series([1, 2]), 0) is None
        True
    """
    dtype = series.dtype
    if not isinstance(dtype, np.dtype) or dtype.kind != "f":
        return None
    values = _cudf_nulls_replaced(series, fill) if is_gpu_object(series) else series.to_numpy()
    xp = array_lib(values)
    return xp.where(xp.isnan(values), fill, values)


def _cudf_nulls_replaced(series: Any, fill: Any) -> Any:
    """A cuDF numeric column's values as a CuPy array, nulls replaced by ``fill`` (of its dtype).
    ``null_count`` is known without the device (libcudf keeps it with the column)."""
    if series.null_count == 0:
        return series.to_cupy()
    import pyarrow as pa
    plc = _import_gpu_module("pylibcudf")
    column, _ = series.to_pylibcudf()
    scalar = plc.Scalar.from_arrow(pa.scalar(fill, type=pa.from_numpy_dtype(series.dtype)))
    return cudf().Series.from_pylibcudf(plc.replace.replace_nulls(column, scalar)).to_cupy()


def log1p_float32(values: Any) -> Any:
    """float32 ``log(float64(x) + 1)`` of a float32 numpy/CuPy array: on the GPU one fused
    kernel (four without: cast, add, log, cast back), on the CPU by numpy.

    Example:
        >>> log1p_float32(np.array([0.0, 9.0], dtype=np.float32)).astype(np.float64).round(4).tolist()
        [0.0, 2.3026]
    """
    if array_lib(values) is np:
        y = values.astype(np.float64)
        y += 1.0
        np.log(y, out=y)
        return y.astype(np.float32)
    return _log1p_float32_kernel()(values)


@functools.cache
def _log1p_float32_kernel() -> Any:
    return cupy().ElementwiseKernel("float32 x", "float32 y", "y = (float)log((double)x + 1.0)", "tabloader_log1p_f32")


def numeric_values(series: Any) -> Any:
    """A numeric column as an array for ufuncs: its own dtype when it is
    :func:`is_plain_numeric`, else float64 with nulls as NaN (a cuDF float column with nulls keeps
    its own float dtype, as the CPU's numpy float column with NaN does).

    Example:
        >>> import pandas as pd
        >>> numeric_values(pd.Series([1, 2], dtype="int32")).dtype
        dtype('int32')
        >>> numeric_values(pd.Series([1, None], dtype="Int64")).tolist()
        [1.0, nan]
    """
    if is_plain_numeric(series):
        return column_values(series)
    if is_gpu_object(series) and getattr(series.dtype, "kind", "") == "f":
        # A cuDF float column with nulls is what the CPU reads as a numpy float column with NaN:
        # keep its width (float32 stays float32, as on the CPU).
        return column_values(series, np.dtype(getattr(series.dtype, "numpy_dtype", series.dtype)))
    return column_values(series, "float64")


def frame_from_columns(columns: dict, index: Any, like: Any = None) -> Any:
    """A DataFrame (pandas, or cuDF when ``like`` is a cuDF frame) from name -> array/Series, uncopied."""
    if like is not None and is_gpu_object(like):
        return _cudf_frame_from_columns(columns, index)
    return pd.DataFrame(columns, index=index, copy=False)


def _cudf_frame_from_columns(columns: dict, index: Any) -> Any:
    """:func:`frame_from_columns` for cuDF, as ``cudf.DataFrame(columns, index=index)`` makes it
    (arrays' NaN become nulls unless cuDF's pandas-compatible mode is on) without its cost:
    given an index, cuDF reindexes every Series to it (a join per column), and it counts the NaN
    of every float array (a wait for the device per column). A Series on ``index`` (the
    operators' outputs) is put in place by position, the arrays holding NaN are found with one
    device-to-host copy for all."""
    lib = cudf()
    if not columns:
        return lib.DataFrame(index=index)
    positional = {name: _by_position(value, index) if isinstance(value, lib.Series) else value
                  for name, value in columns.items()}
    if not lib.get_option("mode.pandas_compatible"):
        for name in _arrays_with_nan(positional):
            positional[name] = lib.Series(positional[name], nan_as_null=True)
    frame = lib.DataFrame(positional, nan_as_null=False)
    if index is not None:
        frame.index = index
    return frame


def _by_position(series: Any, index: Any) -> Any:
    """A cuDF Series on a fresh RangeIndex holding its values in the rows of ``index``: as they
    are when it is on ``index`` already (compared cheaply: the same object, or two ranges),
    else aligned by label as ``cudf.DataFrame`` would (a function's sorted output, say)."""
    if index is not None and series.index is not index and not series.index.equals(index):
        series = series.reindex(index)
    return series.reset_index(drop=True)


def _arrays_with_nan(columns: dict) -> list:
    """The names of the float arrays (numpy or CuPy) among ``columns`` that hold a NaN, the
    CuPy ones read back together."""
    cp = cupy()
    floats = [name for name, value in columns.items()
              if isinstance(value, (np.ndarray, cp.ndarray)) and value.dtype.kind == "f"]
    on_device = [name for name in floats if isinstance(columns[name], cp.ndarray)]
    has_nan = {name: bool(np.isnan(columns[name]).any()) for name in floats if name not in on_device}
    if on_device:
        found = cp.stack([cp.isnan(columns[name]).any() for name in on_device]).get()
        has_nan.update(zip(on_device, found.tolist()))
    return [name for name in floats if has_nan[name]]


def list_column_to_arrow(series: Any) -> Any:
    """A list column (pandas ArrowDtype / object lists, or cuDF lists) as one pyarrow array
    (never a ChunkedArray: one code path for every pyarrow version)."""
    import pyarrow as pa

    if is_gpu_object(series):
        arr = series.to_arrow()
    elif isinstance(series.dtype, pd.ArrowDtype):
        arr = pa.array(series.array)
    else:
        arr = pa.array(series)  # a pandas Series: NaN or None in place of a list is a null list
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return empty_null_lists(arr)


def empty_null_lists(array: Any) -> Any:
    """A pyarrow list array whose null rows span no elements: ``array`` itself when they already
    do (what parquet readers give), else rebuilt with empty spans for them.

    Arrow lets a null list row span elements (polars leaves them after masking a list column):
    ``flatten()`` then skips them while the offsets still count them, and the GPU's child column
    would hold them. Without them every path sees the same elements.

    Example:
        >>> import pyarrow as pa
        >>> a = pa.ListArray.from_arrays([0, 2, 4, 5], [1, 2, 9, 9, 3], mask=pa.array([False, True, False]))
        >>> b = empty_null_lists(a)
        >>> b.to_pylist(), b.offsets.to_pylist(), b.values.to_pylist()
        ([[1, 2], None, [3]], [0, 2, 2, 3], [1, 2, 3])
    """
    import pyarrow as pa

    if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)) or not array.null_count:
        return array
    offsets = array.offsets.to_numpy().astype(np.int64)
    lengths = np.diff(offsets)
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    if not lengths[~valid].any():
        return array
    kept = np.zeros(len(array) + 1, dtype=np.int64)
    np.cumsum(np.where(valid, lengths, 0), out=kept[1:])
    offset_type = pa.int64() if pa.types.is_large_list(array.type) else pa.int32()
    rebuilt = type(array).from_arrays(pa.array(kept, type=offset_type), array.flatten(), mask=pa.array(~valid))
    return rebuilt.cast(array.type)  # from_arrays names the element field "item"


def list_column_from_arrow(array: Any, index: Any, name: Any, like: Any = None) -> Any:
    """A pandas (ArrowDtype) or cuDF list Series from a pyarrow list array."""
    if like is not None and is_gpu_object(like):
        import pyarrow as pa

        if pa.types.is_null(array.type.value_type):  # cuDF columns have no null type: elements of some type
            array = array.cast(pa.list_(pa.int8()))
        out = cudf().Series.from_arrow(array)
        out.index, out.name = index, name
        return out
    return pd.Series(pd.arrays.ArrowExtensionArray(array), index=index, name=name, copy=False)


# The device half of the seam (re-exported: every module asks backend).
from tabloader.device import (  # noqa: E402,F401
    ALIGNMENT, HOST, aligned_columns, aligned_empty, array_device, block_rows, column_major_chunks, copy_rows,
    current_gpu, data_address,
    device_context, empty_columns, flatnonzero, gather_columns, group_sums, host_staging, is_frame, is_host,
    on_host, permutation, pins_host_memory, reads_frames, repeat, resolve_frame_device, synchronize,
    synchronize_device_of, take_rows, wait_for, work_queued)

# The operator helpers of the seam, kept in tabloader.columnar (it imports this module).
_COLUMNAR = ("ListLayout", "list_layout", "build_list", "run_positions", "take_values", "concat_values",
             "fill_null_elements", "nullable_integers", "stats_to_host", "finite_moments", "finite_extremes",
             "host_floats", "runs_on", "device_for", "to_frame_device", "pylibcudf")


def __getattr__(name: str) -> Any:
    """The names of :mod:`tabloader.columnar` (list layouts, statistics leaving the device,
    where operators run), part of the seam; looked up on use, as that module imports this one."""
    if name in _COLUMNAR:
        return getattr(importlib.import_module("tabloader.columnar"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
