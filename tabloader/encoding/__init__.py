"""Categorical encoding: value counting, vocabularies, key lookup, hashing and list columns.

Categorify, HashBucket, HashedCross, JoinGroupby, TargetEncoding, ValueCount and ListSlice
build on this package. :mod:`~tabloader.encoding.contract` holds the encoding contract (the
reserved ids, :data:`~tabloader.encoding.contract.NULL_HASH`),
:mod:`~tabloader.encoding.lists` recognizes list columns, and the primitives come in two
implementations with the same names: :mod:`tabloader.encoding.cpu` (numpy, pandas, pyarrow)
and :mod:`tabloader.encoding.gpu` (cuDF, CuPy). An operator asks
:func:`tabloader.backend.encoding_for` for the one that fits its data and never branches on
the device; partial statistics and lookups choose by the arrays they hold.

Primitives, and how each maps to the two libraries (the GPU side is the plan for
:mod:`tabloader.encoding.gpu`, which gets cuDF and CuPy from ``backend.cudf()`` /
``backend.cupy()``; the hashes must give the same bits, so CPU and GPU give identical ids):

* ``normalize_column`` -- CPU: numpy values and a bool mask (a nullable column's own
  buffers, not copied); strings as a pyarrow string array. GPU: the cuDF column itself,
  ``Series.to_cupy()`` for numbers and ``isna()`` for the mask; strings stay a cuDF string
  column.
* ``count_values`` -- CPU: sorted unique values and counts (``np.bincount`` for a small
  range, else a sort, of uint32 offsets when they fit); strings
  ``pyarrow.compute.value_counts``; several columns ``pd.factorize`` per column. GPU:
  ``Series.value_counts(dropna=True)``; several columns ``DataFrame.groupby(cols).size()``.
* ``merge_counts`` -- CPU: concatenate two sorted runs, add equal keys. GPU: ``cudf.concat``
  then ``groupby(keys).sum()`` (or host tables: small once counted; measure which is faster).
* ``vocabulary`` -- CPU: the threshold filter, then ``pyarrow.compute.sort_indices`` by count
  descending, keys ascending. GPU: ``DataFrame.sort_values([count, keys...],
  ascending=[False, True, ...])`` then ``head(max_size)``.
* ``ValueLookup`` (key lookup) -- CPU: an index per key column, built once per process and
  reused by every partition: integers a direct-address table (small ranges) or a hash index
  (``pd.Index.get_indexer``); strings ``pyarrow.compute.index_in``, or the partition's
  distinct strings by 64-bit hash when the vocabulary is the larger; several columns as
  combined codes. GPU: the vocabulary's keys sorted once on the device, ``cupy.searchsorted``
  and an equality check give the position (several columns: combined codes, or a
  ``DataFrame.merge`` carrying the row number).
* ``assign_ids`` (contract ids from positions) -- CPU: numpy ``putmask`` / ``flatnonzero``.
  GPU: the same array code with CuPy (``cupy.putmask``, ``cupy.flatnonzero``).
* ``hash_values``, ``cross_hash`` -- CPU: ``backend.hash_int64`` (splitmix64) on numpy;
  strings FNV-1a-64 over the distinct values' UTF-8 bytes (``backend.hash_strings``). GPU:
  ``backend.hash_int64`` on CuPy arrays (pure integer arithmetic, the same bits); strings a
  ``cupy.RawKernel``, one thread per string running FNV-1a over the chars between its offsets
  (pylibcudf ``Column.children()[0]`` holds the offsets, ``Column.data()`` the chars), then
  splitmix64.
* ``group_rows``, ``union_keys`` -- CPU: ``pd.factorize`` per column, combined codes. GPU:
  ``DataFrame.groupby(keys, sort=False).ngroup()`` and ``drop_duplicates``.
* ``normalize_elements``, ``map_column`` (list columns) -- CPU: the arrow list array's flat
  values (``backend.list_flatten``), rebuilt with the same offsets. GPU: ``Series.list.leaves``
  for the values, the list column's offsets (pylibcudf ``list_view().offsets()``) to rebuild.
"""
