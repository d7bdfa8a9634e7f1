"""Categorical encoding: value counting, vocabularies, key lookup, hashing and list columns.

Categorify, HashBucket, HashedCross, JoinGroupby, TargetEncoding, ValueCount and ListSlice
build on this package. :mod:`~tabloader.encoding.contract` holds the encoding contract (the
reserved ids, :data:`~tabloader.encoding.contract.NULL_HASH`),
:mod:`~tabloader.encoding.lists` recognizes list columns, and the primitives come in two
implementations with the same names: :mod:`tabloader.encoding.cpu` (numpy, pandas, pyarrow)
and :mod:`tabloader.encoding.gpu` (cuDF, CuPy). An operator asks
:func:`tabloader.backend.encoding_for` for the one that fits its data and never branches on
the device; partial statistics and lookups choose by the arrays they hold.

Primitives, and how each maps to the two libraries (the GPU column is the plan for
:mod:`tabloader.encoding.gpu`, which gets cuDF and CuPy from ``backend.cudf()`` /
``backend.cupy()``; the hashes must give the same bits, so CPU and GPU give identical ids):

================== ================================================ ===================================================
primitive          CPU (``encoding.cpu``)                            GPU (``encoding.gpu``)
================== ================================================ ===================================================
normalize_column   numpy values + bool mask (the nullable dtype's    the cuDF column itself: ``Series.to_cupy()`` for
                   own buffers, no copy); strings as a pyarrow       numbers, ``isna()`` for the mask; strings stay a
                   string array                                      cuDF string column
count_values       sorted unique values and counts (numpy sort);     ``Series.value_counts(dropna=True)``; several
                   strings ``pyarrow.compute.value_counts``;         columns ``DataFrame.groupby(cols).size()``
                   several columns ``pd.factorize`` per column
merge_counts       concatenate two sorted runs, add equal keys       ``cudf.concat`` + ``groupby(keys).sum()`` (or host
                                                                     tables: small after counting)
vocabulary         ``pyarrow.compute.sort_indices`` (count desc,    ``DataFrame.sort_values([count, keys],
                   keys asc) after the threshold filter             ascending=[False, True...])`` + ``head(max_size)``
ValueLookup        a hash index built once per process and reused    vocabulary keys sorted once on the device;
(key lookup)       by every partition (``pd.Index.get_indexer``),    ``cupy.searchsorted`` + an equality check gives the
                   a direct-address table for small integer          position (multi-column keys: combined codes, or a
                   ranges; multi-column keys as combined codes       ``DataFrame.merge`` carrying the row number)
assign_ids         numpy ``putmask`` / ``flatnonzero`` on the        the same array code with CuPy (``cupy.putmask``,
                   positions (contract ids)                          ``cupy.flatnonzero``)
hash_values,       ``backend.hash_int64`` (splitmix64) on numpy;     ``backend.hash_int64`` on CuPy arrays (pure integer
cross_hash         strings: FNV-1a-64 over the unique values'        arithmetic, same bits); strings: a
                   UTF-8 bytes (``backend.hash_strings``)           ``cupy.RawKernel`` with one thread per string
                                                                     running FNV-1a over the chars between its offsets
                                                                     (pylibcudf ``Column.children()[0]`` = offsets,
                                                                     ``Column.data()`` = chars), then splitmix64
group_rows,        ``pd.factorize`` per column, combined codes       ``DataFrame.groupby(keys, sort=False).ngroup()``
union_keys                                                           and ``drop_duplicates``
map_column (lists) the arrow list array's offsets and flat values    ``Series.list.leaves`` for the values; the list
                   (``backend.list_flatten``), rebuilt with the      column's offsets (pylibcudf
                   same offsets                                      ``list_view().offsets()``) to rebuild
================== ================================================ ===================================================
"""
