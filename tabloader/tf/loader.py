"""TensorFlow / Keras adapter of :class:`tabloader.Loader`.

* :class:`KerasSequenceLoader` -- a ``keras.utils.PyDataset`` for ``model.fit``,
  ``validation_data``, ``evaluate`` and ``predict``.
* :func:`to_tf_dataset` -- the same batches as a ``tf.data.Dataset``.
* :func:`to_tf_tensor` -- one array to a TF tensor by DLPack, copying only when TF cannot
  take the memory as it is.

Batches are ``(features, target)``: ``features`` maps column name -> tensor (categorical ids
int64, continuous float32; list columns as ``tf.RaggedTensor`` ``[batch, None]``), ``target``
is ``[batch]`` for one target column, ``[batch, n]`` for several, and left out when the loader
has no target (then a batch is ``(features,)``).

Zero copy. TensorFlow imports host memory only through ``tf.experimental.dlpack.from_dlpack``
of an *unversioned* capsule, and only keeps it without a copy when the array is C-contiguous
and writeable (read-only arrays, such as views of arrow memory, cannot be exported). It also
assumes its tensors are 64-byte aligned: a tensor made from unaligned memory imports fine, but
some kernels (strided slices, ...) then abort the whole process with ``Check failed:
IsAligned()``. :func:`to_tf_tensor` therefore checks all three conditions and copies the array
into a fresh 64-byte aligned buffer when one fails; :class:`ConversionStats` counts zero-copy
imports and copies by reason. The TF tensor keeps the numpy array alive (the capsule holds a
reference), so the memory cannot be freed under it. On a GPU the same holds for CuPy arrays
(a batch is a view at any row of its chunk: not always aligned), and :func:`batch_to_tf` waits
for the GPU before handing a batch over: TF's streams do not wait for CuPy's.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from typing import Any, Iterator, Mapping

import numpy as np
import keras
import tensorflow as tf

from tabloader import backend

__all__ = ["KerasSequenceLoader", "to_tf_dataset", "to_tf_tensor", "batch_to_tf", "ConversionStats",
           "TF_ALIGNMENT"]

from tabloader.backend import ALIGNMENT as TF_ALIGNMENT, aligned_empty  # noqa: E402  TF checks Tensor::IsAligned


@dataclasses.dataclass
class ConversionStats:
    """How arrays reached TensorFlow: imported as they are, or copied (and why)."""

    zero_copy: int = 0
    copied: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    zero_copy_bytes: int = 0
    copied_bytes: int = 0

    @property
    def total_copies(self) -> int:
        return sum(self.copied.values())

    def reset(self) -> None:
        self.zero_copy, self.zero_copy_bytes, self.copied_bytes = 0, 0, 0
        self.copied.clear()

    def __repr__(self) -> str:
        return (f"ConversionStats(zero_copy={self.zero_copy}, copied={dict(self.copied)}, "
                f"zero_copy_MB={self.zero_copy_bytes / 2**20:.1f}, copied_MB={self.copied_bytes / 2**20:.1f})")


def _copy_reason(array: Any) -> str | None:
    """Why TF cannot take a numpy or CuPy array's memory as it is, or None."""
    if not array.flags.c_contiguous:
        return "non_contiguous"
    if isinstance(array, np.ndarray) and not array.flags.writeable:
        return "read_only"
    if backend.data_address(array) % TF_ALIGNMENT:  # a GPU batch is a view at any row of its chunk
        return "unaligned"
    return None


def to_tf_tensor(array: Any, stats: ConversionStats | None = None) -> tf.Tensor:
    """``array`` (numpy, CuPy, or anything with ``__dlpack__``) as a TF tensor, zero-copy when possible.

    A numpy array is imported without a copy when it is C-contiguous, writeable and 64-byte
    aligned; otherwise it is first copied into an aligned buffer (``stats`` counts which). A
    CuPy array likewise when contiguous and aligned, else copied on the GPU (then wait for the
    GPU before TF uses it, as :func:`batch_to_tf` does).

    Example:
        >>> a = aligned_empty(4, "int64"); a[:] = [1, 2, 3, 4]
        >>> t = to_tf_tensor(a)
        >>> t.numpy().tolist(), np.shares_memory(a, np.from_dlpack(t))
        ([1, 2, 3, 4], True)
    """
    if isinstance(array, tf.Tensor):
        return array
    if backend.is_gpu_object(array) and array.size and (reason := _copy_reason(array)) is not None:
        array = backend.array_lib(array).array(array, copy=True, order="C")  # a new block: aligned
        if stats is not None:
            stats.copied[reason] += 1
            stats.copied_bytes += array.nbytes
        return tf.experimental.dlpack.from_dlpack(array.__dlpack__())
    if isinstance(array, np.ndarray) and not backend.is_gpu_object(array):
        if array.size == 0 or array.dtype.kind not in "biuf":
            if stats is not None:
                stats.copied["empty_or_unsupported"] += 1
            return tf.convert_to_tensor(array)
        reason = _copy_reason(array)
        if reason is not None:
            copy = aligned_empty(array.shape, array.dtype)
            np.copyto(copy, array)
            array = copy
            if stats is not None:
                stats.copied[reason] += 1
                stats.copied_bytes += array.nbytes
        elif stats is not None:
            stats.zero_copy += 1
            stats.zero_copy_bytes += array.nbytes
        return tf.experimental.dlpack.from_dlpack(array.__dlpack__())
    if hasattr(array, "__dlpack__"):  # CuPy (GPU) and other DLPack producers: no max_version (TF
        try:                          # rejects versioned capsules)
            tensor = tf.experimental.dlpack.from_dlpack(array.__dlpack__())
            if stats is not None:
                stats.zero_copy += 1
            return tensor
        except Exception:
            xp = backend.array_lib(array)
            tensor = tf.experimental.dlpack.from_dlpack(xp.array(array, copy=True, order="C").__dlpack__())
            if stats is not None:
                stats.copied["dlpack_refused"] += 1
            return tensor
    if stats is not None:
        stats.copied["not_an_array"] += 1
    return tf.convert_to_tensor(array)


def batch_to_tf(features: Mapping[str, Any], target: Any = None, ragged: bool = True,
                stats: ConversionStats | None = None) -> tuple:
    """A core loader batch as TF tensors: ``(features, target)``, or ``(features,)`` without target.

    List columns (``(values, offsets)`` pairs) become ``tf.RaggedTensor`` (``ragged=True``) or
    stay a ``(values, offsets)`` pair of tensors.

    On a GPU the batch's arrays are done being written before TF gets them: TF's kernels run on
    streams of its own that do not wait for CuPy's, and its DLPack import does not synchronize.
    """
    out: dict[str, Any] = {}
    for name, value in features.items():
        if isinstance(value, tuple):
            values, offsets = (to_tf_tensor(v, stats) for v in value)
            out[name] = (tf.RaggedTensor.from_row_splits(values, offsets, validate=False)
                         if ragged else (values, offsets))
        else:
            out[name] = to_tf_tensor(value, stats)
    batch = (out,) if target is None else (out, to_tf_tensor(target, stats))
    arrays = [a for v in [*features.values(), target] for a in (v if isinstance(v, tuple) else (v,))]
    on_gpu = next((a for a in arrays if backend.is_gpu_object(a)), None)
    if on_gpu is not None:  # after the imports' own copies, before TF runs a kernel; on the batch's GPU
        backend.synchronize_device_of(on_gpu)
    return batch


def _make_loader(data: Any, batch_size: int | None, shuffle: bool, seed: int | None, device: str,
                 loader_kwargs: dict) -> Any:
    from tabloader.loader import Loader

    if isinstance(data, Loader):
        if batch_size is not None and batch_size != data.batch_size:
            raise ValueError(f"batch_size={batch_size} given with a Loader of batch_size={data.batch_size}")
        if loader_kwargs:
            raise ValueError(f"loader arguments {sorted(loader_kwargs)} given with a ready Loader")
        return data
    if batch_size is None:
        raise ValueError("batch_size is required when a dataset (not a Loader) is given")
    return Loader(data, batch_size, shuffle=shuffle, seed=seed, device=device, **loader_kwargs)


_PEEK = 2  # batches Keras reads ahead to infer the tensor spec (NUM_BATCHES_FOR_TENSOR_SPEC)


class KerasSequenceLoader(keras.utils.PyDataset):
    """Batches of a tabloader dataset for Keras ``fit`` / ``evaluate`` / ``predict``.

    Args:
        data: a :class:`tabloader.Dataset` (or a path), or a ready :class:`tabloader.Loader`.
        batch_size, shuffle, seed, device: as for :class:`tabloader.Loader` (ignored but
            ``batch_size`` checked when ``data`` is a Loader).
        ragged: list columns as ``tf.RaggedTensor`` (default) or ``(values, offsets)`` tensors;
            the columns named in the loader argument ``lists=`` come as dense ``(batch, pad_to)``
            tensors instead (padded and truncated as asked, see :class:`tabloader.Loader`).
        workers, use_multiprocessing, max_queue_size: ``keras.utils.PyDataset`` arguments. The
            loader already reads and shuffles on its own background thread and serves batches
            in stream order, so ``workers`` is 0 or 1 (more threads would only wait on each
            other, and Keras's multi-worker enqueuer draws a new batch order at every Keras
            epoch, which mixes two loader epochs under ``steps_per_epoch``);
            ``use_multiprocessing`` is not supported.
        **loader_kwargs: ``categorical``, ``continuous``, ``target``, ``drop_last``,
            ``buffer_size``, ``global_rank``, ``global_size``, ``lists``... passed to the Loader.

    It is a stream, not an indexable array: within an epoch, the *k*-th distinct batch index
    Keras asks for gets the *k*-th batch of the loader's epoch. When Keras asks in order
    (``predict``, ``evaluate``, ``fit(..., shuffle=False)``) index *i* is batch *i*, so
    ``predict`` on an unshuffled loader returns rows in dataset order. ``fit``'s default
    ``shuffle=True`` only permutes batch indices; rows are shuffled by the loader itself (within
    chunks, and the partition order per epoch), and every row is still seen exactly once per
    epoch. The first two batches are remembered, because Keras reads them once to infer the
    tensor spec and again when the epoch starts.

    Keras epochs and loader epochs: a Keras epoch never mixes two loader epochs. Without
    ``steps_per_epoch`` a Keras epoch is one whole loader epoch (a new shuffle each). With
    ``fit(..., steps_per_epoch=k)`` and ``k < len(seq)``, Keras carries on where its previous
    epoch stopped, and so does the loader: consecutive Keras epochs take consecutive batches of
    one loader epoch, and the Keras epoch that reaches the loader epoch's end stops there (it is
    short unless ``k`` divides ``len(seq)``; Keras warns "Your input ran out of data") -- the
    next Keras epoch starts a new loader epoch. Every row is thus seen once per
    ``ceil(len(seq) / k)`` Keras epochs.

    A loader epoch ends when all ``len()`` batches were served, when an index already served in
    it is asked for again (a restart: ``evaluate(steps=...)`` and ``predict(steps=...)`` start
    again at index 0; each of the first two may be read twice, the spec peek), or when
    ``on_epoch_end()`` comes without ``on_epoch_begin()`` since the previous ``on_epoch_end()``
    (what Keras does when it resets its iterator at the start of ``fit`` / ``evaluate``). An
    ``on_epoch_end()`` that closes an ``on_epoch_begin()`` keeps the epoch going. To abandon an
    epoch half-way outside Keras, call ``on_epoch_end()`` (or ``close()``, also after a ``fit``
    stopped in the middle of an epoch). True random access is not supported.

    Example:
        >>> import numpy as np, pandas as pd, tabloader as tl
        >>> df = pd.DataFrame({"c": np.arange(10), "y": np.ones(10, "float32")})
        >>> seq = KerasSequenceLoader(tl.Dataset(df), batch_size=4, shuffle=False, categorical=["c"], target="y")
        >>> len(seq), [int(seq[i][1].shape[0]) for i in range(len(seq))]
        (3, [4, 4, 2])
    """

    def __init__(self, data: Any, batch_size: int | None = None, shuffle: bool = True, seed: int | None = 0,
                 device: str = "cpu", ragged: bool = True, workers: int = 1, use_multiprocessing: bool = False,
                 max_queue_size: int = 10, **loader_kwargs: Any) -> None:
        if use_multiprocessing:
            raise ValueError("KerasSequenceLoader does not support use_multiprocessing=True: the loader reads "
                             "and shuffles on its own background thread (workers=1 is the fast choice)")
        if workers not in (0, 1) or isinstance(workers, bool):
            raise ValueError(f"workers must be 0 or 1, got {workers!r}: the loader reads and shuffles on its own "
                             "background thread and serves batches in stream order, and Keras's multi-worker "
                             "enqueuer would redraw the batch order at every Keras epoch")
        super().__init__(workers=workers, use_multiprocessing=False, max_queue_size=max_queue_size)
        self.loader = _make_loader(data, batch_size, shuffle, seed, device, loader_kwargs)
        self.ragged = ragged
        self.stats = ConversionStats()
        self._lock = threading.RLock()
        self._iterator: Iterator | None = None
        self._epochs_started = 0
        self._epoch_over = False
        self._peeked = False
        self._keras_epoch_open = False  # between Keras's on_epoch_begin() and on_epoch_end()
        self._served: set[int] = set()
        self._cache: dict[int, tuple] = {}

    # --- sizes --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.loader)

    @property
    def num_batches(self) -> int:
        return len(self.loader)

    @property
    def batch_size(self) -> int:
        return self.loader.batch_size

    @property
    def epoch(self) -> int:
        """Epochs started so far minus one (-1 before the first batch)."""
        return self._epochs_started - 1

    # --- the stream ---------------------------------------------------------------------------
    def _start_epoch(self) -> None:
        self._iterator = iter(self.loader)  # each iter() is the loader's next epoch
        self._epochs_started += 1
        self._epoch_over = False
        self._peeked = False  # whether Keras reset its iterator after reading the spec peek only
        self._served.clear()
        self._cache.clear()

    def __getitem__(self, index: int) -> tuple:
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"batch index {index} out of range for {n} batches")
        with self._lock:
            live = self._iterator is not None and not self._epoch_over
            if live and index in self._cache and (len(self._served) < n or self._peeked):
                # Keras's spec peek, read again in the epoch (also as the last index of a shuffled
                # epoch, when every index is served already); a full epoch's cached batches are
                # stale unless Keras reset its iterator right after peeking (on_epoch_end).
                return self._cache.pop(index)
            if not live or len(self._served) >= n:
                self._start_epoch()
            if index in self._served:
                self._start_epoch()  # a restart: begin the next epoch
            try:
                features, target = next(self._iterator)
            except StopIteration:  # cannot happen unless the loader yields fewer than len() batches
                raise RuntimeError(f"the loader ended after {len(self._served)} of {n} batches") from None
            batch = batch_to_tf(features, target, self.ragged, self.stats)
            if len(self._served) < _PEEK:
                self._cache[index] = batch
            self._served.add(index)
            return batch

    def on_epoch_begin(self) -> None:
        """Keras begins an epoch: it continues its batch iterator or starts a new one."""
        with self._lock:
            self._keras_epoch_open = True

    def on_epoch_end(self) -> None:
        """Ends the loader's epoch, unless it closes a Keras epoch (after ``on_epoch_begin()``).

        Keras closes every epoch with it, also those that ``steps_per_epoch`` ends before the
        loader's epoch is over: the next Keras epoch continues the same iterator, so the loader
        keeps its epoch (ending it would mix two loader epochs into the next Keras epoch,
        through the batches tf.data already prefetched). An ``on_epoch_end()`` without a
        ``on_epoch_begin()`` before it is Keras resetting its iterator (or the user abandoning
        the epoch): the next batch asked for starts a new epoch (a new shuffle).
        """
        with self._lock:
            if self._keras_epoch_open:
                self._keras_epoch_open = False
                return
            if self._served and self._served == set(self._cache) and self._served <= set(range(_PEEK)):
                # Only Keras's spec peek ran (fit/evaluate read two batches, then reset the
                # iterator before starting it): keep the epoch and the two batches rather than
                # throwing a chunk's work away.
                self._peeked = True
                return
            self._epoch_over = True
            self._cache.clear()

    def close(self) -> None:
        """Stops the loader's background reading; the next batch asked for starts a new epoch."""
        with self._lock:
            self.loader.close()
            self._iterator = None
            self._keras_epoch_open = False
            self._cache.clear()
            self._served.clear()

    def __del__(self) -> None:
        try:
            self.loader.close()
        except Exception:
            pass

    # --- specs --------------------------------------------------------------------------------
    @property
    def output_signature(self) -> tuple:
        """The ``tf.TypeSpec`` structure of a batch (for ``tf.data``)."""
        return _output_signature(self.loader, self.ragged)

    def __repr__(self) -> str:
        return f"KerasSequenceLoader({self.loader!r}, ragged={self.ragged})"


def _output_signature(loader: Any, ragged: bool = True) -> tuple:
    layout = loader.layout
    features: dict[str, Any] = {}
    for name in layout.features:
        if name in layout.padded:
            features[name] = tf.TensorSpec([None, layout.padded[name].pad_to], tf.as_dtype(layout.lists[name]))
        elif name in layout.lists:
            dtype = tf.as_dtype(layout.lists[name])
            if ragged:
                features[name] = tf.RaggedTensorSpec([None, None], dtype, ragged_rank=1, row_splits_dtype=tf.int64)
            else:
                features[name] = (tf.TensorSpec([None], dtype), tf.TensorSpec([None], tf.int64))
        else:
            dtype, _ = layout.where(name)
            features[name] = tf.TensorSpec([None], tf.as_dtype(dtype))
    if not layout.targets:
        return (features,)
    dtypes = {layout.where(t)[0] for t in layout.targets}
    dtype = tf.as_dtype(np.result_type(*[np.dtype(d) for d in dtypes]))
    shape = [None] if len(layout.targets) == 1 else [None, len(layout.targets)]
    return features, tf.TensorSpec(shape, dtype)


def to_tf_dataset(data: Any, batch_size: int | None = None, shuffle: bool = True, seed: int | None = 0,
                  device: str = "cpu", ragged: bool = True, prefetch: int | None = tf.data.AUTOTUNE,
                  stats: ConversionStats | None = None, **loader_kwargs: Any) -> tf.data.Dataset:
    """The loader's batches as a ``tf.data.Dataset`` of ``(features, target)`` (or ``(features,)``).

    Each iteration over the dataset (each Keras epoch, each ``for`` loop) runs the loader's next
    epoch, with a new shuffle. Arguments as for :class:`KerasSequenceLoader`; ``prefetch``
    batches are prepared ahead on a tf.data thread (None for none). Chain further ``tf.data``
    transformations as usual; ``.repeat()`` gives successive epochs.

    Example:
        >>> import numpy as np, pandas as pd, tabloader as tl
        >>> df = pd.DataFrame({"x": np.arange(5, dtype="float32"), "y": np.zeros(5, "float32")})
        >>> ds = to_tf_dataset(tl.Dataset(df), batch_size=2, shuffle=False, continuous=["x"], target="y")
        >>> [int(x["x"].shape[0]) for x, y in ds]
        [2, 2, 1]
    """
    loader = _make_loader(data, batch_size, shuffle, seed, device, loader_kwargs)
    signature = _output_signature(loader, ragged)

    def generate() -> Iterator[tuple]:
        for features, target in loader:
            yield batch_to_tf(features, target, ragged, stats)

    ds = tf.data.Dataset.from_generator(generate, output_signature=signature)
    ds = ds.apply(tf.data.experimental.assert_cardinality(len(loader)))
    if prefetch is not None:
        ds = ds.prefetch(prefetch)
    return ds
