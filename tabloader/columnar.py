"""Column and array helpers whose pandas/numpy and cuDF/CuPy versions differ, for the operators.

Part of the CPU/GPU seam (:mod:`tabloader.backend` re-exports every name here): operators call
these and never branch on the device. Three concerns:

* **list columns as arrays** -- :func:`list_layout` takes a list column apart into offsets, a
  flat column of elements and the validity of each row; :func:`build_list` puts one together
  again. On the CPU the parts are numpy arrays and a pyarrow array (the column's own buffers);
  on the GPU CuPy arrays and a cuDF Series (the pylibcudf column's offsets and child), so a list
  column never leaves the device.
* **statistics leaving the device** -- :func:`stats_to_host` is the one way small fitted
  statistics (vocabularies, group tables, sketches) are copied to the host, at ``finalize``, to
  become the operators' fitted state (data saved as parquet/JSON). Partitions never go through
  it.
* **where an operator runs** -- every operator declares ``runs_on`` (the devices its
  ``transform`` and ``fit_partial`` take data on). :func:`device_for` says where an operator
  gets a partition and :func:`to_frame_device` moves a frame there, so a run of host-only
  operators costs one copy of the partition to the host, not one per column or operator.

Example:
    >>> import pandas as pd, pyarrow as pa
    >>> s = pd.Series([[1, 2], None, [3]], dtype=pd.ArrowDtype(pa.list_(pa.int64())))
    >>> layout = list_layout(s)
    >>> layout.offsets.tolist(), layout.values.to_pylist(), layout.valid.tolist()
    ([0, 2, 2, 3], [1, 2, 3], [True, False, True])
    >>> build_list(layout.offsets, pa.array([10, 20, 30]), layout.valid, s.index, "l", like=s).tolist()
    [[10, 20], <NA>, [30]]
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tabloader import backend

#: What an operator runs on when it declares nothing: both devices (operators are written
#: once against the API pandas and cuDF share).
BOTH_DEVICES = frozenset({"cpu", "cuda"})


# List columns.
@dataclasses.dataclass
class ListLayout:
    """A list column taken apart: ``offsets`` (int64, one more than the rows) index into
    ``values`` (the elements: a pyarrow array on the CPU, a cuDF Series on the GPU), ``valid``
    says which rows are lists (bool array; False for a null list) and ``lengths`` gives each
    row's length (0 for a null list)."""

    offsets: Any
    values: Any
    valid: Any
    lengths: Any


def list_layout(series: Any) -> ListLayout:
    """The :class:`ListLayout` of a list column (pandas ArrowDtype lists or cuDF lists), uncopied."""
    if backend.is_gpu_object(series):
        return _gpu_list_layout(series)
    arr = backend.list_column_to_arrow(series)
    offsets = arr.offsets.to_numpy().astype(np.int64)
    valid = ~arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else np.ones(len(arr), dtype=bool)
    lengths = np.diff(offsets)
    if arr.null_count:
        lengths = np.where(valid, lengths, 0)
    return ListLayout(offsets, arr.values, valid, lengths)


def _gpu_list_layout(series: Any) -> ListLayout:
    cudf, cp = backend.cudf(), backend.cupy()
    column, _ = series.to_pylibcudf()
    n, first = column.size(), column.offset()
    if n == 0:
        offsets = cp.zeros(1, dtype=cp.int64)
    else:
        # The offsets child indexes the whole child column; the rows of a sliced column start at
        # its offset. Rebased to 0 they index the child sliced to the rows (one level: a list of
        # lists has lists as elements, as on the CPU).
        all_offsets = cudf.Series.from_pylibcudf(column.list_view().offsets()).values
        offsets = all_offsets[first:first + n + 1].astype(cp.int64)
        offsets -= offsets[0]
    valid = series.notna().values if series.has_nulls else cp.ones(n, dtype=bool)
    lengths = cp.diff(offsets)
    if series.has_nulls:
        lengths = cp.where(valid, lengths, 0)
    view = column.list_view()
    if hasattr(view, "get_sliced_child"):
        elements = cudf.Series.from_pylibcudf(view.get_sliced_child())
    else:  # cuDF before 26.02: the whole child, cut to the rows' elements (two offsets read back)
        start, stop = (int(all_offsets[first]), int(all_offsets[first + n])) if n else (0, 0)
        elements = cudf.Series.from_pylibcudf(view.child()).iloc[start:stop].reset_index(drop=True)
    return ListLayout(offsets, elements, valid, lengths)


def build_list(offsets: Any, values: Any, valid: Any, index: Any, name: Any, like: Any) -> Any:
    """A list Series (pandas ArrowDtype, or cuDF when ``like`` is cuDF) of rows
    ``values[offsets[i]:offsets[i + 1]]``, null where ``valid`` is False (None: no nulls).

    ``values`` is what :func:`list_layout` gives for the library (a pyarrow array, or a cuDF
    Series), or a numpy/CuPy array; ``like`` (the original column) gives the library and, on the
    CPU, the list type (list or large_list) to keep.
    """
    if backend.is_gpu_object(like):
        return _gpu_build_list(offsets, values, valid, index, name)
    import pyarrow as pa

    values = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(np.asarray(values))
    list_type = like.dtype.pyarrow_dtype if hasattr(like.dtype, "pyarrow_dtype") else None
    large = list_type is not None and pa.types.is_large_list(list_type)
    if not large and len(values) >= 2**31:
        large = True
    array_type = pa.LargeListArray if large else pa.ListArray
    mask = None if valid is None or valid.all() else pa.array(~valid)
    out = array_type.from_arrays(pa.array(offsets, type=pa.int64() if large else pa.int32()), values, mask=mask)
    return backend.list_column_from_arrow(out, index, name)


def _gpu_build_list(offsets: Any, values: Any, valid: Any, index: Any, name: Any) -> Any:
    cudf, cp = backend.cudf(), backend.cupy()
    plc = pylibcudf()
    # An array's NaN stays NaN, as pyarrow keeps it on the CPU (cuDF would make it null by default).
    child = values if backend.is_gpu_object(values) and not isinstance(values, cp.ndarray) else \
        cudf.Series(values, nan_as_null=False)
    child_column, _ = child.to_pylibcudf()
    # libcudf list offsets are int32 (size_type); the child must have at least offsets[-1] rows.
    offsets_column = plc.Column.from_array(cp.ascontiguousarray(offsets.astype(cp.int32)))
    mask, null_count = None, 0
    if valid is not None and not bool(valid.all()):
        mask, null_count = plc.transform.bools_to_mask(plc.Column.from_array(cp.ascontiguousarray(valid)))
    column = plc.Column(plc.DataType(plc.TypeId.LIST), len(offsets) - 1, None, mask, null_count, 0,
                        [offsets_column, child_column])
    return cudf.Series.from_pylibcudf(column, {"name": name, "index": index})


def pylibcudf() -> Any:
    """The pylibcudf module (installed with cuDF), imported on first use."""
    backend.cudf()  # the install hint of cuDF when it is missing
    import pylibcudf as plc

    return plc


def run_positions(lengths: Any, starts: Any, total: int | None = None) -> tuple[Any, Any, Any]:
    """Lists made of runs of elements: row ``i`` takes ``lengths[i]`` elements from position
    ``starts[i]`` (numpy or CuPy arrays). ``total`` is ``lengths.sum()`` when the caller knows
    it on the host; without it, it is read back from the device (on a GPU, a wait for the device).

    Returns the rows' ``offsets`` (for :func:`build_list`), the ``positions`` of their elements
    (for :func:`take_values`) and each element's place ``within`` its row.

    Example:
        >>> offsets, positions, within = run_positions(np.array([2, 0, 1]), np.array([5, 0, 9]))
        >>> offsets.tolist(), positions.tolist(), within.tolist()
        ([0, 2, 2, 3], [5, 6, 9], [0, 1, 0])
    """
    xp = backend.array_lib(lengths)
    offsets = xp.zeros(len(lengths) + 1, dtype=xp.int64)
    xp.cumsum(lengths, out=offsets[1:])
    if total is None:
        total = int(offsets[-1])
    # backend.repeat, not xp.repeat: CuPy before 14 takes no array of counts
    within = xp.arange(total, dtype=xp.int64) - backend.repeat(offsets[:-1], lengths, total)
    return offsets, backend.repeat(starts, lengths, total) + within, within


def fill_null_elements(values: Any, value: Any) -> Any:
    """``values`` (a pyarrow array or a cuDF Series) with null and NaN elements replaced by ``value``.

    Elements of the null type (a column that only held null lists) take the type of ``value``.
    Raises the library's error (ArrowException, TypeError, ValueError) when ``value`` does not fit.
    """
    if backend.is_gpu_object(values):
        filled = values.nans_to_nulls() if values.dtype.kind == "f" else values
        return filled.fillna(value)
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_null(values.type):
        values = pa.nulls(len(values), pa.array([value]).type)
    missing = pc.is_null(values, nan_is_null=True)
    if not pc.any(missing).as_py():
        return values
    return pc.if_else(missing, pa.scalar(value, type=values.type), values)


def take_values(values: Any, positions: Any) -> Any:
    """The elements of ``values`` (a pyarrow array or a cuDF Series) at ``positions``."""
    if backend.is_gpu_object(values):
        return values.take(positions).reset_index(drop=True)
    import pyarrow as pa

    return values.take(pa.array(positions))


def concat_values(values: Any, extra: Any) -> Any:
    """``values`` followed by ``extra`` (Python values of the same element type, or a column)."""
    if backend.is_gpu_object(values):
        cudf = backend.cudf()
        tail = extra if backend.is_gpu_object(extra) else cudf.Series(list(extra), dtype=values.dtype)
        return cudf.concat([values, tail], ignore_index=True)
    import pyarrow as pa

    if pa.types.is_null(values.type) and len(extra):  # only null lists seen: take the extra's type
        tail = extra if isinstance(extra, pa.Array) else pa.array(list(extra))
        return pa.concat_arrays([pa.nulls(len(values), tail.type), tail])
    tail = extra if isinstance(extra, pa.Array) else pa.array(list(extra), type=values.type)
    return pa.concat_arrays([values, tail])


def nullable_integers(series: Any) -> bool:
    """True for an integer column that may hold nulls: a pandas nullable one (``Int64``...) or
    any cuDF one (every cuDF column is nullable: a partition without a null must be treated like
    one with, so that all get the same output dtype).

    Example:
        >>> import pandas as pd
        >>> nullable_integers(pd.Series([1], dtype="Int64")), nullable_integers(pd.Series([1]))
        (True, False)
    """
    if getattr(series.dtype, "kind", "") not in ("i", "u"):
        return False
    return backend.is_gpu_object(series) or not isinstance(series.dtype, np.dtype)


# Statistics leaving the device.
def stats_to_host(value: Any) -> Any:
    """Small fitted statistics on the host: a CuPy array as numpy, a cuDF Series/DataFrame as
    pandas; host values as they are. Only ``finalize`` (and sketches of partitions, which hold
    at most a few thousand numbers) call it: partitions never leave the device.

    Example:
        >>> stats_to_host(np.arange(3)).tolist()
        [0, 1, 2]
    """
    if not backend.is_gpu_object(value):
        return value
    if hasattr(value, "to_pandas"):
        return value.to_pandas()
    return backend.cupy().asnumpy(value)


# Statistics of a partition, computed on its device.
def finite_moments(values: Any) -> tuple[Any, Any, Any]:
    """``(count, mean, M2)`` of the finite values of a float array (NaN and +-inf left out;
    ``(0, 0.0, 0.0)`` without any), as numpy scalars or 0-d CuPy arrays.

    On the GPU nothing waits for the device: the finite values are weighted by a mask rather
    than selected (a selection's size is a device-to-host read) and the results stay on the
    device until :func:`host_floats` copies a partition's statistics at once.

    Example:
        >>> [float(v) for v in finite_moments(np.array([1.0, 3.0, np.nan, np.inf]))]
        [2.0, 2.0, 2.0]
    """
    xp = backend.array_lib(values)
    finite = xp.isfinite(values)
    # The mean is taken of the values less one of them: a column of one value then has exactly
    # that mean and M2 = 0 (a plain mean of 1000 x 0.1 rounds to 0.10000000000000002, whose
    # M2 of ~1e-31 made a constant column's std 1e-17 and scaled rounding noise to +-1).
    if xp is np:
        finite_values = values if finite.all() else values[finite]
        if not finite_values.size:
            return 0, 0.0, 0.0
        shift = finite_values[0]
        mean = shift + (finite_values - shift).mean()
        deviations = finite_values - mean
        return finite_values.size, mean, (deviations * deviations).sum()
    if not values.size:  # known on the host: no argmax of nothing
        return 0, 0.0, 0.0
    count = xp.count_nonzero(finite)
    shift = xp.where(count > 0, values[xp.argmax(finite)], 0.0)  # the first finite value, read on the device
    mean = shift + xp.where(finite, values - shift, 0.0).sum(dtype=np.float64) / xp.maximum(count, 1)
    deviations = xp.where(finite, values - mean, 0.0)
    return count, mean, (deviations * deviations).sum()


def finite_extremes(values: Any) -> tuple[Any, Any]:
    """``(min, max)`` of the finite values of a float array (``(inf, -inf)`` without any), as
    numpy scalars or 0-d CuPy arrays (on the GPU without waiting for the device, see
    :func:`finite_moments`).

    Example:
        >>> [float(v) for v in finite_extremes(np.array([2.0, -np.inf, 5.0]))], finite_extremes(np.array([np.nan]))
        ([2.0, 5.0], (inf, -inf))
    """
    xp = backend.array_lib(values)
    if not values.size:  # a reduction of nothing has no minimum
        return np.inf, -np.inf
    finite = xp.isfinite(values)
    if xp is np:
        finite_values = values if finite.all() else values[finite]
        return (finite_values.min(), finite_values.max()) if finite_values.size else (np.inf, -np.inf)
    return xp.where(finite, values, np.inf).min(), xp.where(finite, values, -np.inf).max()


def host_floats(scalars: list) -> list[float]:
    """Numbers (numpy scalars, 0-d CuPy arrays) as Python floats, device ones copied to the
    host together: one device-to-host copy (and wait) for all of a partition's statistics
    instead of one per number.

    Example:
        >>> host_floats([np.float64(1.5), 2])
        [1.5, 2.0]
    """
    if not any(backend.is_gpu_object(s) for s in scalars):
        return [float(s) for s in scalars]
    cp = backend.cupy()
    return cp.stack([cp.asarray(s, dtype=np.float64) for s in scalars]).get().tolist()


# Where operators run.
def runs_on(op: Any) -> frozenset:
    """The devices ``op`` takes data on: its ``runs_on`` declaration (both when it has none)."""
    return frozenset(getattr(op, "runs_on", BOTH_DEVICES))


def device_for(op: Any, partition: Any) -> str:
    """Where ``op`` gets a partition of ``partition``'s device: that device when the operator
    runs there, else the host.

    Example:
        >>> import pandas as pd
        >>> device_for(object(), pd.DataFrame())
        'cpu'
    """
    device = backend.frame_device(partition)
    return device if device in runs_on(op) else "cpu"


def to_frame_device(frame: Any, device: str) -> Any:
    """``frame`` (pandas or cuDF) as a frame of ``device``: copied only when it is elsewhere."""
    if backend.frame_device(frame) == device:
        return frame
    if device == "cpu":
        return backend.to_host(frame)
    return backend.to_device(frame, device)
