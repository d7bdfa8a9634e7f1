"""Categorical encoding: value counting, vocabularies, key lookup, hashing and list columns.

The categorical operators (Categorify, HashBucket, HashedCross, JoinGroupby, TargetEncoding,
ValueCount, ListSlice) build on this package; :mod:`tabloader.encoding.contract` holds the
encoding contract, :mod:`tabloader.encoding.cpu` the CPU implementation.
"""
