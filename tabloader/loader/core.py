"""The loader itself: :class:`Loader` wires the stages into an iterable of batches.

It builds the column layout, the reader, the partition plan, the shuffler and the batcher from
its arguments, and per epoch runs plan -> read -> chunk buffer -> shuffle -> batch, with the
next chunk prefetched on a background thread (and, with ``resident=``, partitions kept on the
device between epochs). It keeps the position in the epoch so that ``state_dict()`` /
``load_state_dict()`` resume mid-epoch, and imports no deep-learning framework (the torch and
tf adapters hold one and only convert).
"""

from __future__ import annotations

import inspect
import weakref
from typing import Any, Callable, Generator, Iterator, Mapping, Sequence

import numpy as np

from tabloader import backend
from tabloader.loader.batcher import Batcher
from tabloader.loader.buffer import Chunk, ChunkBuffer, _list_rows
from tabloader.loader.layout import ColumnLayout
from tabloader.loader.plan import ChunkSpec, PartitionPlan, Segment
from tabloader.loader.prefetch import Prefetcher
from tabloader.loader.reader import PartitionReader, ReadAhead, read_ahead
from tabloader.loader.resident import ResidentPartitions
from tabloader.loader.shuffle import Shuffler
from tabloader.sizes import parse_size


class Loader:
    """Shuffled batches of a dataset as numpy (CPU) or CuPy (GPU) arrays, framework-free.

    Each ``iter(loader)`` runs one epoch and the next ``iter`` the following epoch. An epoch left
    early (a ``break``, an exception) ends when its iterator is dropped, which stops its threads;
    ``close()`` ends it at once. The loader runs one epoch at a time: a new ``iter`` ends the
    running epoch, whose iterator then raises a RuntimeError (two loaders iterate at once).

    A batch is ``(features, target)``: ``features`` maps column name -> 1-D array (list columns:
    a ``(values, offsets)`` pair, ``offsets`` int64 of length rows + 1, or a ``(rows, pad_to)``
    array with ``lists=``); ``target`` is a 1-D array for one target column,
    ``(rows, n_targets)`` for several, or None.

    Nulls: a null in an integer, boolean or list column raises a :class:`LoaderReadError`
    naming the column and the file; in a float column it is handed on as NaN (pandas' null).

    Args:
        dataset: a :class:`tabloader.Dataset` (possibly transformed by a workflow) or a path.
        batch_size: rows per batch (>= 1).
        shuffle: shuffle the partition order per epoch and the rows within each chunk.
        seed: seed of every shuffle (an integer >= 0); the epoch's order depends on
            ``(seed, epoch)``. None draws a random seed (kept in ``loader.seed`` and in
            ``state_dict()``, so a run can still be resumed); not with several ranks, which must
            share one seed to read disjoint rows.
        device: ``"cpu"`` (numpy) or ``"cuda"`` / ``"cuda:N"`` (CuPy; decoded by cuDF when the
            dataset is a cuDF one, else by pyarrow and copied to the GPU from pinned memory,
            one copy per dtype and partition of a chunk). ``"cuda"`` is the GPU current when the loader is built; the
            loader's threads work on that GPU whatever the calling thread's current one.
        categorical, continuous, target: column names overriding the schema's CATEGORICAL,
            CONTINUOUS and TARGET tags (``[]`` for none).
        drop_last: drop the last short batch (and, with several ranks, the rows that do not
            divide evenly among them).
        buffer_size: bytes of one chunk (``"256MB"`` or an int): rows are shuffled within a
            chunk. The loader holds at most two chunks (the one consumed and the one being
            prefetched), plus the decoded partition being packed and, when prefetching, the
            next one decoded ahead (and the resident partitions). On a GPU it holds a third:
            the chunk buffer is gathered at once into the chunk's shuffled order, and batches
            are views of that array (so a batch kept alive keeps its chunk's array alive).
        parts_per_chunk: partitions per chunk instead of a byte budget.
        global_rank, global_size: data-parallel sharding (torch.distributed conventions). Ranks
            get disjoint rows and the same number of batches; rows that do not divide evenly are
            padded by repeating rows from the start of the epoch (as DistributedSampler does).
            Without shuffle, rank ``r`` reads rows ``[r * per_rank, (r + 1) * per_rank)`` in
            dataset order (``per_rank = ceil(rows / global_size)``): the padding comes last. A
            ``global_size`` above 1 needs ``global_rank``.
        prefetch: build the next chunk on a background thread, and decode the next partition
            on another one (``TABLOADER_READ_AHEAD=n``: the next ``n`` partitions at once, see
            :func:`~tabloader.loader.reader.read_ahead`).
        resident: keep the partitions read on the loader's device (GPU memory on ``"cuda"``,
            host memory on the CPU) for later epochs, which then only copy, shuffle and slice
            their rows: ``True`` for all of them, or a byte budget (``"8GB"`` or an int) --
            what does not fit is read every epoch, as without it. Batches, their order and
            resuming are the same as without it. ``loader.resident`` shows what is kept.
        lists: list columns as dense ``(rows, pad_to)`` arrays instead of ``(values, offsets)``:
            a dict column -> ``pad_to`` (an int, or ``"schema"`` for the schema's
            ``value_count`` max), or column -> dict of :class:`~tabloader.loader.lists.ListPadding`
            options: ``pad_to``, ``side`` (``"right"``/``"left"``: where the padding goes),
            ``truncate`` (``"right"`` keeps a long list's first ``pad_to`` values, ``"left"`` its
            last ones), ``value`` (the padding value, 0 by default). For instance
            ``lists={"items": dict(pad_to=20, side="left", truncate="left")}``.

    Every row is yielded exactly once per epoch (single rank; with several ranks, exactly once
    over the rank set apart from the at most ``global_size - 1`` padded rows).

    Example:
        >>> import numpy as np, pandas as pd, tabloader as tl
        >>> ds = tl.Dataset(pd.DataFrame({"a": np.arange(6), "y": np.zeros(6, "float32")}))
        >>> loader = tl.Loader(ds, batch_size=4, categorical=["a"], target="y", seed=1)
        >>> len(loader), [f["a"].shape for f, _ in loader]
        (2, [(4,), (2,)])
    """

    def __init__(self, dataset: Any, batch_size: int, shuffle: bool = True, seed: int | None = 0, device: str = "cpu",
                 categorical: Sequence[str] | str | None = None, continuous: Sequence[str] | str | None = None,
                 target: Sequence[str] | str | None = None, drop_last: bool = False,
                 buffer_size: int | str = "256MB", parts_per_chunk: int | None = None,
                 global_rank: int | None = None, global_size: int | None = None, prefetch: bool = True,
                 resident: bool | int | str = False, lists: Mapping[str, Any] | None = None) -> None:
        if isinstance(dataset, str):
            from tabloader.dataset import Dataset

            dataset = Dataset(dataset)
        self.dataset = dataset
        self.batch_size = _integer("batch_size", batch_size, 1)
        self.shuffle, self.drop_last = _flag("shuffle", shuffle), _flag("drop_last", drop_last)
        self.prefetch = _flag("prefetch", prefetch)
        self.global_size = 1 if global_size is None else _integer("global_size", global_size, 1)
        if global_rank is None and self.global_size > 1:  # every rank would read rank 0's rows
            raise ValueError(f"global_size={global_size} needs this process's global_rank as well (0 to "
                             f"{self.global_size - 1})")
        self.global_rank = 0 if global_rank is None else _integer("global_rank", global_rank, 0)
        if self.global_rank >= self.global_size:
            raise ValueError(f"global_rank must be below global_size={self.global_size}"
                             f"{' (not given)' if global_size is None else ''}, got global_rank={global_rank!r}")
        self.seed = _seed(seed, self.shuffle, self.global_size)
        self.device = backend.resolve_device(device)
        self._on_device = backend.device_context(device)
        self.layout = ColumnLayout.from_schema(dataset.schema, categorical, continuous, target, lists)
        self.gpu_frames = backend.reads_frames(getattr(dataset, "device", backend.HOST), self.device)
        if self.gpu_frames:  # the dataset made the pool on its GPU; the loader may decode on another one
            with self._on_device():
                backend.ensure_rmm_pool()
        floats = [c for d, names in self.layout.groups.items() if np.dtype(d).kind == "f" for c in names]
        self.reader = PartitionReader(dataset, self.layout.columns, gpu_frames=self.gpu_frames, nan_columns=floats)
        self.resident = _resident(resident)
        self.buffer_bytes = parse_size(buffer_size, "buffer_size")
        self.parts_per_chunk = None if parts_per_chunk is None else _integer("parts_per_chunk", parts_per_chunk, 1)
        self._plan: PartitionPlan | None = None
        if not self._plan_needs_reading():
            self._plan = self._make_plan()  # from metadata alone: its errors come at once
        self.shuffler = Shuffler(self.shuffle, self.seed, self.device)
        self.batcher = Batcher(self.layout, self.batch_size, self.drop_last)
        self._buffer: ChunkBuffer | None = None
        self._epoch, self._start_row = 0, 0
        self._current: list[int] | None = None  # [epoch, rows yielded] of the running epoch
        # The running epoch's iterator, held weakly: dropping it (a ``break``, an exception) ends
        # the epoch and stops its threads at once, and the loader itself can then be freed.
        self._active: weakref.ref[_Epoch] | None = None

    # --- the plan and sizes --------------------------------------------------------------------
    @property
    def plan(self) -> PartitionPlan:
        """The rows each epoch reads, as chunks.

        Built by the constructor when the partitions' row counts and the row size are known
        without reading data; otherwise (a transform that can drop rows, or list columns sizing
        the chunks) on first use, so that constructing a loader never reads a partition.
        """
        if self._plan is None:
            self._plan = self._make_plan()
        return self._plan

    def _plan_needs_reading(self) -> bool:
        sizes_unknown = self.dataset.partition_sizes() is None
        return sizes_unknown or (bool(self.layout.lists) and self.parts_per_chunk is None)

    def _make_plan(self) -> PartitionPlan:
        with self._on_device():  # a plan that reads partitions decodes them on the loader's GPU
            return self._plan_from_sizes()

    def _plan_from_sizes(self) -> PartitionPlan:
        sizes = self.dataset.partition_sizes()
        if sizes is None:  # a transform may drop rows: count them once by reading
            sizes = [self.reader.count(i) for i in range(self.dataset.npartitions)]
        rows_per_chunk = None
        if self.parts_per_chunk is None:
            rows_per_chunk = max(1, int(self.buffer_bytes // self.layout.row_bytes(self._list_lengths(sizes))))
        return PartitionPlan(sizes, self.shuffle, self.seed, self.global_rank, self.global_size,
                             self.drop_last, rows_per_chunk, self.parts_per_chunk)

    def __len__(self) -> int:
        """Batches per epoch (the same on every rank)."""
        return self.plan.num_batches(self.batch_size)

    @property
    def rows_per_epoch(self) -> int:
        """Rows this rank yields per epoch."""
        rows = self.plan.rows_per_rank
        return rows // self.batch_size * self.batch_size if self.drop_last else rows

    def _list_lengths(self, sizes: Sequence[int]) -> dict[str, float]:
        """Each list column's mean length, for the chunk size: the largest of the first, middle
        and last partitions' (from the first alone, data sorted by time with sessions growing
        longer filled chunks 9x ``buffer_size``)."""
        if not self.layout.lists:
            return {}
        filled = [i for i, s in enumerate(sizes) if s]
        if not filled:
            return {}
        lengths = dict.fromkeys(self.layout.lists, 0.0)
        for index in dict.fromkeys([filled[0], filled[len(filled) // 2], filled[-1]]):
            table = self.reader.read(index)
            whole = Segment(index, 0, sizes[index])
            for name in lengths:
                lengths[name] = max(lengths[name], len(_list_rows(table, whole, name)[0]) / sizes[index])
        return lengths

    # --- iteration --------------------------------------------------------------------------
    def __iter__(self) -> Iterator[tuple[dict[str, Any], Any]]:
        return self.iterate()

    def iterate(self, convert: Callable[[Any], Any] | None = None) -> Iterator[tuple[dict[str, Any], Any]]:
        """The next epoch, as ``iter(loader)``, with ``convert`` (array -> array) applied to a
        batch's arrays before its features are taken out: to each dtype's ``(columns, rows)``
        array once, then split into columns (``unbind(0)`` where the result has it), to each
        list array and to the target. Framework adapters pass their DLPack import, so a batch
        costs one import per dtype rather than one per column.

        Example:
            >>> import numpy as np, pandas as pd, tabloader as tl
            >>> loader = tl.Loader(tl.Dataset(pd.DataFrame({"a": np.arange(3)})), batch_size=2, categorical=["a"],
            ...                    shuffle=False)
            >>> [f["a"].tolist() for f, _ in loader.iterate(lambda array: array * 10)]
            [[0, 10], [20]]
        """
        epoch, start = self._epoch, self._start_row
        self._end_epoch(superseded_by=epoch)  # one epoch at a time: they share the chunk buffer
        self.reader._cache = None
        self._epoch, self._start_row = epoch + 1, 0
        self._current = [epoch, start]
        running = _Epoch(self._run(epoch, start, convert), epoch)
        self._active = weakref.ref(running)
        return running

    def _run(self, epoch: int, start: int, convert: Callable[[Any], Any] | None
             ) -> Generator[tuple[dict[str, Any], Any], None, None]:
        specs = [s for s in self.plan.chunks(epoch) if s.row_start + s.num_rows > start]
        buffer = self._chunk_buffer(max((s.num_rows for s in self.plan.chunks(epoch)), default=1))
        resident = self.resident.snapshot() if self.resident is not None else frozenset()
        if self.resident is not None and backend.is_host(self.device) and not self.layout.lists:
            # room for this rank's rows (and the partitions cut at its ends); more kept later lands
            # in arrays of their own
            rows = min(sum(self.plan.sizes), self.plan.rows_per_rank + 2 * max(self.plan.sizes, default=0))
            self.resident.reserve(buffer.empty_rows, rows, self.layout.row_bytes())
        reads = self.reader.read_ahead([seg.partition for spec in specs for seg in spec.segments
                                        if seg.partition not in resident],
                                       ahead=read_ahead() if self.prefetch else 0, context=self._on_device)
        # The consumer's GPU work so far, marked when it lets go of a chunk: the next chunk built
        # may reuse that chunk's memory (CuPy's pool reuses a block on the stream that allocated
        # it, the prefetch thread's), so its build waits, on the GPU, for what still reads it.
        released, device = [None], self.device
        # The prefetch thread holds the loader weakly: while this epoch runs its frame holds the
        # loader, and the thread must not keep a dropped loader (and the epoch) alive.
        loader = weakref.proxy(self)
        build = lambda spec: loader._build(buffer, reads, spec, epoch, resident, released[0])  # noqa: E731
        # (marked on the consumer's thread inside next(batches) below, on the loader's device already)
        mark = lambda: released.__setitem__(0, backend.work_queued(device))  # noqa: E731
        source = Prefetcher(build, specs, depth=1, released=mark) if self.prefetch else map(build, specs)
        batches = self.batcher.batches(map(_after_its_build, source), start, self.plan.rows_per_rank, convert)
        try:
            while True:
                with self._on_device():  # this thread's current GPU is the user's between batches
                    batch = next(batches, None)
                if batch is None:
                    break
                features, target, rows = batch
                self._current[1] += rows
                yield features, target
            self._current = None  # finished: state_dict() points at the next epoch
        finally:
            if isinstance(source, Prefetcher):
                source.close()
            reads.close()

    def _chunk_buffer(self, max_rows: int) -> ChunkBuffer:
        # A second slot lets the next chunk be packed while batches are gathered from this one;
        # column-major chunks are gathered out of their slot at once (Shuffler.shuffle_chunk).
        slots = 2 if self.prefetch and not backend.column_major_chunks(self.device) else 1
        if self._buffer is None or self._buffer.max_rows < max_rows or self._buffer.slots != slots:
            self._buffer = ChunkBuffer(self.layout, max_rows, self.device, slots=slots)
        return self._buffer

    def _build(self, buffer: ChunkBuffer, reads: "ReadAhead", spec: ChunkSpec, epoch: int,
               resident: frozenset[int], after: Any = None) -> Chunk:
        with self._on_device():
            backend.wait_for(after)  # the consumer's work on the chunks let go of (see _run)
            sources = (self._rows_of(seg.partition, reads, resident, buffer) for seg in spec.segments)
            chunk = None
            if self.resident is not None:  # kept partitions only: gathered in place, not copied
                sources, chunk = self.resident.in_place(spec, sources)
            if chunk is None:
                chunk = buffer.fill(spec, sources)  # takes them one at a time: a partition is freed once packed
            chunk = self.shuffler.shuffle_chunk(chunk, epoch, self.global_rank)
            chunk.ready = backend.work_queued(self.device)
            return chunk

    def _rows_of(self, partition: int, reads: "ReadAhead", resident: frozenset[int], buffer: ChunkBuffer) -> Any:
        """A partition's rows for the chunk buffer: resident since before the epoch, or decoded
        now (and kept, when the loader keeps partitions and it fits)."""
        if partition in resident:
            return self.resident[partition]
        table = reads.get(partition)
        return table if self.resident is None else self.resident.keep(partition, table, buffer.pack_partition)

    @property
    def epoch(self) -> int:
        """The epoch the running (or next) iteration covers."""
        return self._current[0] if self._current is not None else self._epoch

    # --- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where the loader stands: epoch, rows and batches of it already yielded, and the
        settings the position depends on. Load it into a new loader to resume mid-epoch."""
        epoch, rows = self._current if self._current is not None else (self._epoch, self._start_row)
        return {"epoch": int(epoch), "rows": int(rows), "batches": -(-int(rows) // self.batch_size),
                "seed": self.seed, "shuffle": self.shuffle, "batch_size": self.batch_size,
                "global_rank": self.global_rank, "global_size": self.global_size, "drop_last": self.drop_last,
                "rows_per_chunk": self.plan.rows_per_chunk, "parts_per_chunk": self.plan.parts_per_chunk,
                "partition_sizes": [int(s) for s in self.plan.sizes]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: the next ``iter`` yields exactly the rows not yet yielded
        in that epoch (chunks already consumed are skipped without being read).

        ``state`` is a dict from :meth:`state_dict` (``"epoch"`` and ``"rows"`` are required;
        the settings it records must match this loader's, except ``seed``, which is adopted,
        and ``batch_size``). Raises ValueError naming the key for anything else.
        """
        if not isinstance(state, Mapping):
            raise ValueError(f"state must be a dict returned by state_dict(), got {type(state).__name__}")
        missing = [k for k in ("epoch", "rows") if k not in state]
        if missing:
            raise ValueError(f"state is missing the key(s) {missing}: pass a dict returned by state_dict()")
        epoch, rows = _integer("state['epoch']", state["epoch"], 0), _integer("state['rows']", state["rows"], 0)
        seed = _integer("state['seed']", state.get("seed", self.seed), 0)
        keys = ("shuffle", "global_rank", "global_size", "drop_last", "rows_per_chunk", "parts_per_chunk")
        differ = [f"{k}={state[k]!r} (this loader: {v!r})" for k in keys
                  if k in state and state[k] != (v := self.state_dict()[k])]
        if "partition_sizes" in state and list(state["partition_sizes"]) != [int(s) for s in self.plan.sizes]:
            differ.append("partition_sizes (the dataset, its part_size or the tabloader version that cut it into "
                          "partitions changed)")
        if differ:
            raise ValueError("cannot resume: the state was saved by a loader with " + "; ".join(differ))
        # Against the epoch's rows before drop_last: a state saved with another batch size may
        # have yielded more rows than this one would (9 of 10 in batches of 3, 8 in batches of
        # 4); the resumed epoch drops its last partial batch counting from the resume point.
        if rows > self.plan.rows_per_rank:
            raise ValueError(f"state['rows']={rows} is more than the {self.plan.rows_per_rank} rows of this "
                             "loader's epoch")
        self.close()
        self.seed = self.plan.seed = self.shuffler.seed = seed
        self._epoch, self._start_row = epoch, rows
        self._current = None

    # --- closing ------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop a running epoch (and its prefetch thread): its iterator ends. The loader stays usable."""
        self._end_epoch()
        self.reader._cache = None

    def _end_epoch(self, superseded_by: int | None = None) -> None:
        running = self._active() if self._active is not None else None
        self._active = None
        if running is not None:
            running.end(superseded_by)

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return (f"Loader(batch_size={self.batch_size}, batches={len(self)}, shuffle={self.shuffle}, "
                f"seed={self.seed}, device={self.device!r}, rank={self.global_rank}/{self.global_size}, "
                f"features={list(self.layout.features)}, target={list(self.layout.targets)})")


class _Epoch:
    """The iterator of one epoch, what ``iter(loader)`` returns: the batches of ``epoch``.

    A new ``iter(loader)`` ends it (the loader runs one epoch at a time); its next ``next()``
    then raises a RuntimeError rather than stopping as if the epoch were complete.
    """

    def __init__(self, batches: Generator[tuple[dict[str, Any], Any], None, None], epoch: int) -> None:
        self._batches, self.epoch = batches, epoch
        self._superseded_by: int | None = None

    def __iter__(self) -> "_Epoch":
        return self

    def __next__(self) -> tuple[dict[str, Any], Any]:
        if self._superseded_by is not None:
            raise RuntimeError(f"this iterator of epoch {self.epoch} was ended by a new iter(loader), which started "
                               f"epoch {self._superseded_by}: a Loader runs one epoch at a time. To iterate two at "
                               "once (an evaluation pass inside a training loop, zip(loader, loader)), use two "
                               "Loaders")
        return next(self._batches)

    def end(self, superseded_by: int | None = None) -> None:
        """Stop the epoch (and its threads); with ``superseded_by``, the epoch that replaces it,
        an unfinished epoch's next ``next()`` raises."""
        if superseded_by is not None and inspect.getgeneratorstate(self._batches) != inspect.GEN_CLOSED:
            self._superseded_by = superseded_by
        self._batches.close()

    def close(self) -> None:
        """Stop the epoch: the iterator ends."""
        self.end()


def _integer(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int, or a ValueError naming the argument ``name`` and what it allows."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _after_its_build(chunk: Chunk) -> Chunk:
    """``chunk``, once the consumer's GPU stream waits for the work that built it: the
    prefetch thread queued it on its own current stream (see :func:`tabloader.backend.work_queued`)."""
    backend.wait_for(chunk.ready)
    return chunk


def _resident(resident: Any) -> ResidentPartitions | None:
    """The loader's resident partitions for the ``resident`` argument (None when off)."""
    if isinstance(resident, (bool, np.bool_)):
        return ResidentPartitions() if resident else None
    try:
        return ResidentPartitions(parse_size(resident, "resident"))
    except ValueError as exc:
        raise ValueError(f"{exc}; resident= also takes True (keep every partition) or False") from None


def _seed(seed: Any, shuffle: bool, global_size: int) -> int:
    """The loader's seed: ``seed`` checked, or a random one for None (single rank only: ranks
    drawing their own seeds would shuffle partitions differently and read overlapping rows)."""
    if seed is not None:
        return _integer("seed", seed, 0)
    if shuffle and global_size > 1:
        raise ValueError(f"seed=None draws a different seed on each of the global_size={global_size} ranks, "
                         "so they would read overlapping rows: give every rank the same integer seed")
    return int(np.random.SeedSequence().generate_state(1, dtype=np.uint32)[0])

