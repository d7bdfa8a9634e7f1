"""The one CPU/GPU seam.

Only this module imports cuDF, CuPy and dask_cudf, and only when asked for. Everything else
asks it which dataframe and array library to use for a device, how to read parquet, and how to
export an array by DLPack. Nothing here decides GPU availability at import time.

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
from typing import Any, Sequence

import numpy as np
import pandas as pd

DEVICES = ("cpu", "cuda", "auto")

_INSTALL_HINT = {
    "cudf": "pip install 'tabloader[gpu]' (cudf-cu12) on a machine with an NVIDIA GPU and CUDA 12",
    "cupy": "pip install 'tabloader[gpu]' (cupy-cuda12x) on a machine with an NVIDIA GPU",
    "dask_cudf": "pip install 'tabloader[gpu]' (dask-cudf-cu12)",
}


class BackendUnavailableError(ImportError):
    """A GPU library was asked for but is missing, or no CUDA device is present."""


def _import_gpu_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise BackendUnavailableError(
            f"device='cuda' needs {name}, which is not importable here ({exc}); {_INSTALL_HINT[name]}"
        ) from exc


def cudf() -> Any:
    """The cuDF module, imported on first use."""
    return _import_gpu_module("cudf")


def cupy() -> Any:
    """The CuPy module, imported on first use."""
    return _import_gpu_module("cupy")


def dask_cudf() -> Any:
    return _import_gpu_module("dask_cudf")


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


def dataframe_lib(device: str) -> Any:
    """``pandas`` for the CPU, ``cudf`` for the GPU."""
    return cudf() if resolve_device(device) == "cuda" else pd


def array_lib(device_or_array: Any) -> Any:
    """``numpy`` or ``cupy`` for a device name, or for the library an array belongs to."""
    if isinstance(device_or_array, str):
        return cupy() if resolve_device(device_or_array) == "cuda" else np
    return cupy() if is_gpu_object(device_or_array) else np


def is_gpu_object(obj: Any) -> bool:
    """True for cuDF frames/series and CuPy arrays (checked by module name: no import needed)."""
    module = type(obj).__module__.split(".")[0]
    return module in ("cudf", "cupy", "dask_cudf")


def frame_device(frame: Any) -> str:
    return "cuda" if is_gpu_object(frame) else "cpu"


# --- dataframes -------------------------------------------------------------------------
def concat(frames: Sequence[Any], **kwargs: Any) -> Any:
    """Concatenate frames of one library."""
    if not frames:
        raise ValueError("concat needs at least one frame")
    lib = cudf() if is_gpu_object(frames[0]) else pd
    return lib.concat(list(frames), **kwargs)


def to_host(frame: Any) -> Any:
    """A pandas copy of a cuDF frame; pandas frames are returned as they are."""
    return frame.to_pandas() if is_gpu_object(frame) else frame


def to_device(frame: pd.DataFrame, device: str) -> Any:
    """Move a pandas frame to ``device`` (cuDF for the GPU)."""
    return cudf().from_pandas(frame) if resolve_device(device) == "cuda" else frame


def frame_arrow_schema(frame: Any) -> Any:
    """The pyarrow schema of a pandas/cuDF/Dask DataFrame, without computing a Dask frame."""
    import pyarrow as pa

    meta = getattr(frame, "_meta", frame)  # Dask frames: the empty meta frame
    if is_gpu_object(meta):
        return meta.head(0).to_arrow().schema
    return pa.Schema.from_pandas(meta.head(0), preserve_index=False)


def from_arrow(table: Any, device: str = "cpu") -> Any:
    """A pyarrow Table as a DataFrame on ``device``.

    On the CPU, arrow types keep pandas' conventions: nullable integers become ``Int64`` and so
    on, list columns stay arrow-backed (``pd.ArrowDtype``) so no Python objects are created.
    """
    if resolve_device(device) == "cuda":
        return cudf().DataFrame.from_arrow(table)
    return table.to_pandas(types_mapper=_pandas_type_for_arrow, self_destruct=False)


def _pandas_type_for_arrow(arrow_type: Any) -> Any:
    import pyarrow as pa

    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return pd.ArrowDtype(arrow_type)
    return None


def read_parquet(path: str, columns: Sequence[str] | None = None, row_groups: Sequence[int] | None = None,
                 device: str = "cpu", filesystem: Any = None) -> Any:
    """Read one parquet file (optionally some row groups) into a DataFrame on ``device``."""
    if resolve_device(device) == "cuda":
        kwargs = {"row_groups": [list(row_groups)]} if row_groups is not None else {}
        return cudf().read_parquet(path, columns=columns, filesystem=filesystem, **kwargs)
    return from_arrow(read_parquet_arrow(path, columns, row_groups, filesystem))


def read_parquet_arrow(path: str, columns: Sequence[str] | None = None, row_groups: Sequence[int] | None = None,
                       filesystem: Any = None) -> Any:
    """Read one parquet file (optionally some row groups) into a pyarrow Table."""
    import pyarrow.parquet as pq

    source = filesystem.open(path, "rb") if filesystem is not None else path
    try:
        pf = pq.ParquetFile(source)
        if row_groups is None:
            return pf.read(columns=list(columns) if columns is not None else None, use_threads=True)
        return pf.read_row_groups(list(row_groups), columns=list(columns) if columns is not None else None,
                                  use_threads=True)
    finally:
        if filesystem is not None:
            source.close()


# --- arrays and DLPack -------------------------------------------------------------------
def to_dlpack(array: Any) -> Any:
    """A DLPack capsule for a numpy or CuPy array (unversioned, as TensorFlow requires)."""
    try:
        return array.__dlpack__(max_version=(1, 0)) if _accepts_max_version(array) else array.__dlpack__()
    except BufferError:  # read-only numpy arrays (views of arrow memory) cannot be exported
        return np.ascontiguousarray(array).copy().__dlpack__()


def _accepts_max_version(array: Any) -> bool:
    return isinstance(array, np.ndarray)


def asarray(values: Any, device: str) -> Any:
    """Copy host values to ``device`` (numpy stays numpy on the CPU)."""
    return array_lib(device).asarray(values)


def hash_int64(values: np.ndarray) -> np.ndarray:
    """Hash int64 values to uint64 with splitmix64: the same bits on numpy and CuPy.

    Used by hashing operators so that a value lands in the same bucket on CPU and GPU.
    """
    xp = array_lib(values)
    with np.errstate(over="ignore"):
        z = values.astype(xp.uint64) + xp.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> xp.uint64(30))) * xp.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> xp.uint64(27))) * xp.uint64(0x94D049BB133111EB)
        return z ^ (z >> xp.uint64(31))
