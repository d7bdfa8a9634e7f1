"""Categorical encoding: value counting, vocabularies, key lookup, hashing and list columns.

Categorify, HashBucket, HashedCross, JoinGroupby, TargetEncoding, ValueCount and ListSlice
build on this package. :mod:`~tabloader.encoding.contract` holds the encoding contract (the
reserved ids, :data:`~tabloader.encoding.contract.NULL_HASH`),
:mod:`~tabloader.encoding.lists` recognizes list columns, and the primitives come in two
implementations with the same names: :mod:`tabloader.encoding.cpu` (numpy, pandas, pyarrow)
and :mod:`tabloader.encoding.gpu` (cuDF, CuPy). An operator asks
:func:`tabloader.backend.encoding_for` for the one that fits its data and never branches on
the device; partial statistics and lookups choose by the arrays they hold.

Primitives, and how each maps to the two libraries (the GPU module gets cuDF and CuPy from
``backend.cudf()`` / ``backend.cupy()``, on first use; the hashes give the same bits and the
vocabulary the same order, so CPU and GPU give identical ids):

* ``normalize_column`` -- CPU: numpy values and a bool mask (a nullable column's own
  buffers, not copied); strings as a pyarrow string array, or as codes into a dictionary
  (:mod:`~tabloader.encoding.cpu.coded_strings`: columns the parquet reader gives as their
  dictionary codes, categoricals of strings), which are counted by ``np.bincount``, looked up
  and hashed once per distinct string. GPU: CuPy values
  (``Series.values``, or ``to_cupy(na_value=...)`` with nulls) and ``isna()`` as the mask;
  strings stay a cuDF string Series; categoricals are decategorized on the device.
* ``count_values`` (``count_values_each``: several columns of a partition at once) -- CPU:
  sorted unique values and counts (``np.bincount`` for a small range, else a sort, of uint32
  offsets when they fit); strings ``pyarrow.compute.value_counts`` (short ones as numbers); several columns
  ``pd.factorize`` per column. GPU: numbers by ``cupy.sort`` and the starts of runs of equal
  values, their number kept on the device and read back once for all the columns of the call
  (``cupy.unique`` reads it back per column); strings ``Series.factorize`` and counts of codes
  by ``cupy.add.at``; several columns (and strings under another column's null mask) by stable
  sorts on every column (a string column by its ``Series.factorize`` codes, null rows sorted
  last), runs of equal rows counted, their number kept on the device as for numbers.
* ``merge_counts`` (``merge_counts_each``) -- CPU: concatenate two sorted runs, add equal keys (short strings as numbers too).
  GPU (the switch ``TABLOADER_GPU_MERGE``, see :mod:`tabloader.encoding.gpu.counting`): on the
  device, concatenated keys sorted again and the counts of each run added (numbers, sizes read
  back once per call), strings and combinations grouped again by the sorts of ``count_values``
  and counts added by ``cupy.add.at`` (default); or each partial copied once to the host in
  the CPU layout and merged there.
* ``vocabulary`` -- CPU: the threshold filter, then ``pyarrow.compute.sort_indices`` by count
  descending, keys ascending. GPU: ``DataFrame.sort_values([count, keys...],
  ascending=[False, True, ...])`` then ``head(max_size)`` (cuDF sorts strings by their UTF-8
  bytes, which is code point order).
* ``ValueLookup`` (key lookup) -- CPU: an index per key column, built once per process and
  reused by every partition: integers a direct-address table (small ranges) or a hash index
  (``pd.Index.get_indexer``); strings as numbers when short, else ``pyarrow.compute.index_in``, or the partition's
  distinct strings by 64-bit hash when the vocabulary is the larger; several columns as
  combined codes. GPU: the fitted keys copied to the device once; numbers sorted there,
  found by ``cupy.searchsorted`` and an equality check; strings sorted there by libcudf, found
  by a ``cupy.RawKernel`` binary search in libcudf's byte order; several columns as combined codes.
* ``assign_ids`` (contract ids from positions) -- CPU: numpy ``putmask`` / ``flatnonzero``.
  GPU: CuPy ``where`` over every row (every row hashed, the key columns as they are: selecting
  the out-of-vocabulary rows reads their count back from the device).
* ``hash_values``, ``cross_hash`` -- CPU: ``backend.hash_int64`` (splitmix64) on numpy;
  strings FNV-1a-64 over the distinct values' UTF-8 bytes (``backend.hash_strings``). GPU:
  ``backend.hash_int64`` on CuPy arrays (pure integer arithmetic, the same bits); strings a
  ``cupy.RawKernel``, one thread per row running FNV-1a over the chars between
  its offsets in the cuDF column (pylibcudf's offsets child and data buffer), then splitmix64.
* ``group_rows``, ``union_keys`` -- CPU: ``pd.factorize`` per column, combined codes. GPU:
  the stable sorts of ``count_values`` (null rows sorted last, not selected out), the number
  of groups (and of null rows) read back once.
* ``normalize_elements``, ``map_column`` (list columns) -- both through
  ``backend.list_layout`` / ``backend.build_list``: the arrow list array's offsets and values
  on the CPU; on the GPU the pylibcudf column's offsets and sliced child, rebuilt as a
  pylibcudf list column on the device.
"""
