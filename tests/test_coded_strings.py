"""String columns read as dictionary codes (parquet's own encoding) are counted, looked up and
hashed from their codes: the vocabularies and ids stay those of the pure-Python reference
(:mod:`encoding_reference`), whatever the chunks' dictionaries, nulls, lengths and partitions;
the parquet reader gives codes only for column chunks stored as codes only, and a workflow asks
for them only for the columns nothing but its encoders read."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

import tabloader as tl
from tabloader import ops
from tabloader.encoding import cpu
from tabloader.encoding.cpu import columns as columns_module
from tabloader.encoding.cpu.coded_strings import CodedStrings, from_dictionary_array
from tabloader.graph import SelectNode
from tabloader.plan import Plan
from tabloader.schema import Schema
from tabloader.selector import ColumnSelector

from encoding_properties import OP, check_vocabulary_and_ids, split
from encoding_reference import expected_ids, py_hash

NULL_HASH = 0x9AE16A3B2F90404F


@st.composite
def string_column(draw):
    """Strings from a small pool (one width, or of several lengths and multi-byte), and nulls."""
    if draw(st.booleans()):
        width = draw(st.integers(1, 8))
        text = st.text("0123456789abcdef", min_size=width, max_size=width)
    else:
        text = st.text("xyé\x00", max_size=12)
    pool = draw(st.lists(text, min_size=1, max_size=12, unique=True))
    return draw(st.lists(st.sampled_from(pool) | st.none(), max_size=60))


def coded_series(values: list, cuts: list[int]) -> pd.Series:
    """``values`` as a pandas column of arrow dictionary type, one chunk (with a dictionary of
    its own, in first-seen order) per piece of ``cuts``: what a parquet reader gives for a
    partition of several row groups."""
    chunks = [pa.array(piece, pa.string()).dictionary_encode() for piece in split(values, cuts)]
    return pd.Series(pd.arrays.ArrowExtensionArray(pa.chunked_array(chunks, pa.dictionary(pa.int32(), pa.string()))))


@settings(max_examples=150, deadline=None)
@given(values=string_column(), unseen=string_column(), cuts=st.lists(st.integers(0, 60), max_size=4),
       parts=st.lists(st.integers(0, 60), max_size=4), seed=st.integers(0, 2**32 - 1),
       freq_threshold=st.integers(0, 3), num_buckets=st.integers(1, 3))
def test_coded_partitions_give_the_reference_vocabulary_and_ids(values, unseen, cuts, parts, seed, freq_threshold,
                                                                num_buckets):
    def normalize(part: list):
        return cpu.normalize_column(OP, "c", coded_series(part, cuts))

    for part, col in check_vocabulary_and_ids(values, unseen, parts, normalize, seed, freq_threshold, num_buckets):
        assert cpu.hash_values(col).tolist() == [NULL_HASH if v is None else py_hash(v) for v in part]


def test_chunks_with_dictionaries_of_their_own_are_unified():
    chunks = pa.chunked_array([pa.array(["b", None, "a"]).dictionary_encode(),
                               pa.array([None, None], pa.string()).dictionary_encode(),
                               pa.array(["c", "a", "c"]).dictionary_encode()])
    col = from_dictionary_array(chunks)
    assert col.values.to_pylist() == ["b", None, "a", None, None, "c", "a", "c"]
    assert col.mask.tolist() == [False, True, False, True, True, False, False, False]
    assert sorted(col.dictionary.to_pylist()) == ["a", "b", "c"]
    assert col.code_counts(col.mask).tolist() == [col.values.to_pylist().count(v) for v in col.dictionary.to_pylist()]


def test_another_mask_leaves_rows_out_of_the_counts():
    col = CodedStrings(np.array([0, 1, 1, 2, 0]), pa.array(["a", "bb", "c"]), None)
    left_out = np.array([True, False, True, False, False])
    partial = cpu.count_values([col], left_out)
    assert dict(zip(partial["keys"][0].to_pylist(), partial["counts"].tolist())) == {"a": 1, "bb": 1, "c": 1}


def test_a_query_with_fewer_rows_than_its_dictionary_is_looked_up_by_its_strings():
    col = CodedStrings(np.arange(1000) % 700, pa.array([f"v{i}" for i in range(700)]), None).take(np.array([5, 699]))
    lookup = cpu.ValueLookup([pd.Series(["v699", "v5", "w"], dtype="str")], OP, "c")
    assert lookup.positions([col]).tolist() == [1, 0]


def test_categoricals_of_strings_are_coded_and_others_decoded():
    categorical = pd.Series(pd.Categorical(["b", None, "a", "b"], categories=["b", "a", "unused"]))
    col = cpu.normalize_column(OP, "c", categorical)
    assert isinstance(col, CodedStrings) and col.values.to_pylist() == ["b", None, "a", "b"]
    partial = cpu.count_values([col], col.mask)
    assert dict(zip(partial["keys"][0].to_pylist(), partial["counts"].tolist())) == {"a": 1, "b": 2}
    numbers = pd.Series(pd.arrays.ArrowExtensionArray(pa.array([7, None, 7]).dictionary_encode()))
    decoded = cpu.normalize_column(OP, "c", numbers)
    assert decoded.kind == "int" and decoded.values[[0, 2]].tolist() == [7, 7] and decoded.mask.tolist() == [0, 1, 0]
    empty = pd.Series(pd.arrays.ArrowExtensionArray(pa.array([None, None], pa.string()).dictionary_encode()))
    assert cpu.normalize_column(OP, "c", empty).kind == "null"


# --- the parquet reader -------------------------------------------------------------------------
def hex_ids(rng, n: int, distinct: int) -> pa.Array:
    values = np.array([f"{v:08x}" for v in rng.integers(0, distinct, n)], dtype=object)
    values[rng.random(n) < 0.05] = None
    return pa.array(values, pa.string())


def test_the_reader_gives_codes_only_for_chunks_stored_as_codes(tmp_path):
    """Dictionary-coded chunks come as codes; chunks written plainly, or whose dictionary
    overflowed into PLAIN pages, come as strings, and a partition mixing both as strings."""
    rng = np.random.default_rng(0)
    few, many = hex_ids(rng, 20_000, 50), hex_ids(rng, 20_000, 10**9)
    table = pa.table({"few": few, "many": many, "x": np.arange(20_000)})
    pq.write_table(table, tmp_path / "a.parquet", row_group_size=10_000, dictionary_pagesize_limit=16_384)
    pq.write_table(table, tmp_path / "b.parquet", row_group_size=10_000, use_dictionary=False)
    ds = tl.Dataset(str(tmp_path), part_size="400KB")
    coded = ds.with_coded_strings(["few", "many", "x"])
    stored = [sorted(frozenset.intersection(*(p.coded for p in part))) for part in coded._source.partitions]
    assert stored[0] == ["few"] and stored[-1] == []
    for i in range(coded.npartitions):
        frame, plain = coded.read_partition(i), ds.read_partition(i)
        is_codes = str(frame["few"].dtype).startswith("dictionary")
        assert is_codes == (stored[i] == ["few"])
        assert frame["many"].dtype == plain["many"].dtype and frame["x"].dtype == plain["x"].dtype
        assert frame["few"].astype(object).where(frame["few"].notna(), None).tolist() == \
            plain["few"].astype(object).where(plain["few"].notna(), None).tolist()
    assert ds.read_partition(0)["few"].dtype == tl.backend.STRING_DTYPE  # the dataset itself is left as it was


@pytest.mark.parametrize("writer", ["pyarrow", "polars", "duckdb"])
def test_a_workflow_over_coded_files_gives_the_ids_of_pandas_by_hand(tmp_path, writer, monkeypatch):
    """Files as other tools write them (no pandas metadata, several row groups, hex ids and
    longer strings): a workflow that reads the id columns as codes gives the ids an independent
    pandas computation gives, and columns other operators read stay strings."""
    rng = np.random.default_rng(1)
    n = 30_000
    columns = {"C1": hex_ids(rng, n, 300), "C2": pa.array([f"user-{v}" for v in rng.zipf(1.4, n) % 5000]),
               "C3": hex_ids(rng, n, 40), "label": pa.array(rng.integers(0, 2, n))}
    for i in range(2):
        part = pa.table({k: v.slice(i * n // 2, n // 2) for k, v in columns.items()})
        path = str(tmp_path / f"part_{i}.parquet")
        if writer == "pyarrow":
            pq.write_table(part, path, row_group_size=4000)
        elif writer == "polars":
            pl = pytest.importorskip("polars")
            pl.from_arrow(part).write_parquet(path, row_group_size=4000)
        else:
            duckdb = pytest.importorskip("duckdb")
            con = duckdb.connect()
            con.register("part", part)
            con.execute(f"COPY part TO '{path}' (FORMAT PARQUET, ROW_GROUP_SIZE 4000)")
    graph = (["C1", "C2"] >> ops.Categorify(freq_threshold=2)) + (["C3"] >> ops.FillMissing("none")
                                                                  >> ops.Categorify()) + ["label"]
    workflow = tl.Workflow(graph, progress=False)
    ds = tl.Dataset(str(tmp_path), part_size="200KB")
    assert ds.npartitions > 1
    coded_rows = []  # the encoders get codes, not strings
    monkeypatch.setattr(columns_module, "from_dictionary_array",
                        lambda values: coded_rows.append(len(values)) or from_dictionary_array(values))
    workflow.fit(ds)
    assert workflow.plan_.encoded_only_columns == ["C1", "C2"]
    assert sum(coded_rows) == 2 * n
    got = workflow.transform(ds).compute()
    assert sum(coded_rows) == 4 * n
    for name, threshold in (("C1", 2), ("C2", 2), ("C3", 0)):
        values = pd.Series(columns[name].to_pylist(), dtype=object)
        if name == "C3":
            values = values.fillna("none")
        counts = values.value_counts()
        counts = counts[counts >= threshold]
        order = sorted(zip(counts.index, counts.to_numpy()), key=lambda vc: (-vc[1], vc[0]))
        ids = {v: 3 + i for i, (v, _) in enumerate(order)}
        assert got[name].tolist() == [1 if v is None else ids.get(v, 2) for v in values], name


def plan_of(graph) -> Plan:
    frame = pd.DataFrame({c: pd.Series(["x"], dtype="str") for c in "abcd"} | {"y": [1.0]})
    return Plan.resolve(graph, Schema.from_frame(frame))


def test_only_columns_nothing_but_encoders_read_are_asked_for_as_codes():
    assert plan_of(["a", "b"] >> ops.Categorify()).encoded_only_columns == ["a", "b"]
    assert plan_of(["a"] >> ops.HashBucket(5)).encoded_only_columns == ["a"]
    assert plan_of([("a", "b")] >> ops.Categorify(encode_type="combo")).encoded_only_columns == ["a", "b"]
    assert plan_of((["a"] >> ops.Categorify()) + (["a"] >> ops.Rename(postfix="_raw"))).encoded_only_columns == []
    assert plan_of((["a"] >> ops.Categorify()) + ["b"]).encoded_only_columns == ["a"]  # b is output as it is
    assert plan_of(SelectNode(ColumnSelector(["a"]))).encoded_only_columns == []
    assert plan_of(["a"] >> ops.FillMissing("?") >> ops.Categorify()).encoded_only_columns == []
    target = ["a"] >> ops.TargetEncoding("y")
    assert plan_of(target + (["b"] >> ops.Categorify())).encoded_only_columns == ["a", "b"]
    assert plan_of(["a"] >> ops.JoinGroupby(cont_cols=["b"])).encoded_only_columns == ["a"]  # b: a dependency
    assert plan_of(["a"] >> ops.AsType("str") >> ops.Categorify()).encoded_only_columns == []


def test_a_dictionary_repeating_a_string_counts_it_as_one_value():
    """Parquet does not forbid a writer to repeat a string in a dictionary page."""
    repeated = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, 2, None], pa.int32()), pa.array(["a", "b", "a"]))
    col = cpu.normalize_column(OP, "c", pd.Series(pd.arrays.ArrowExtensionArray(pa.chunked_array([repeated]))))
    partial = cpu.count_values([col], col.mask)
    assert dict(zip(partial["keys"][0].to_pylist(), partial["counts"].tolist())) == {"a": 3, "b": 1}
    assert col.values.to_pylist() == ["a", "b", "a", "a", None]


def test_the_column_s_own_nulls_are_left_out_of_the_counts_without_another_mask():
    values = ["b", None, "a", "c", "c", None, "a"]
    col = cpu.normalize_column(OP, "c", coded_series(values, [4]))
    partial = cpu.count_values([col], None)
    assert dict(zip(partial["keys"][0].to_pylist(), partial["counts"].tolist())) == {"a": 2, "b": 1, "c": 2}


def test_sliced_chunks_and_narrow_codes_give_the_strings_they_hold():
    whole = pa.array([f"s{i % 300}" if i % 11 else None for i in range(900)]).dictionary_encode()
    sliced = pa.chunked_array([whole.slice(5, 400), whole.slice(450, 300)])
    col = from_dictionary_array(sliced)
    assert col.values.to_pylist() == sliced.to_pylist()
    categorical = pd.Series(pd.Categorical([f"s{i % 300}" for i in range(600)] + [None]))  # int16 codes
    assert categorical.cat.codes.dtype == np.int16
    col = cpu.normalize_column(OP, "c", categorical)
    partial = cpu.count_values([col], col.mask)
    assert dict(zip(partial["keys"][0].to_pylist(), partial["counts"].tolist())) == {f"s{i}": 2 for i in range(300)}


@pytest.mark.parametrize("encode_type", ["combo", "joint"])
def test_groups_of_coded_columns_give_the_ids_of_their_strings(encode_type):
    rng = np.random.default_rng(3)
    a = [None if r < 0.1 else f"a{v}" for r, v in zip(rng.random(400), rng.integers(0, 9, 400))]
    b = [None if r < 0.1 else f"b{v}" for r, v in zip(rng.random(400), rng.integers(0, 4, 400))]
    graph = [("a", "b")] >> ops.Categorify(encode_type=encode_type, freq_threshold=2, num_buckets=3)
    plain = pd.DataFrame({"a": pd.Series(a, dtype="str"), "b": pd.Series(b, dtype="str")})
    coded = pd.DataFrame({"a": coded_series(a, [150, 300]), "b": coded_series(b, [100])})
    got = tl.Workflow(graph, progress=False).fit_transform(coded)
    pd.testing.assert_frame_equal(got, tl.Workflow(graph, progress=False).fit_transform(plain))
    if encode_type == "combo":
        pairs = [None if x is None or y is None else (x, y) for x, y in zip(a, b)]
        assert got["a_b"].tolist() == expected_ids(pairs, freq_threshold=2, num_buckets=3)[0]


def test_a_subclass_takes_coded_strings_only_when_it_says_so():
    class Lowered(ops.Categorify):
        def transform(self, columns, frame):
            return super().transform(columns, frame.assign(**{c: frame[c].str.lower() for c in frame.columns}))

    class Declared(ops.HashBucket):
        takes_coded_strings = True

    assert ops.Categorify.takes_coded_strings and not Lowered.takes_coded_strings and Declared.takes_coded_strings
    assert plan_of(["a"] >> Lowered()).encoded_only_columns == []


def test_near_unique_strings_that_overflow_their_dictionary_are_read_as_strings(tmp_path):
    """The dictionary outgrows its page and the writer goes on in PLAIN pages, which zstd
    compresses to under a byte per value: the uncompressed size tells them from codes."""
    values = pa.array([f"user-{i:010d}" for i in range(200_000)])
    pq.write_table(pa.table({"u": values}), tmp_path / "a.parquet", compression="zstd")
    chunk = pq.read_metadata(tmp_path / "a.parquet").row_group(0).column(0)
    assert chunk.total_compressed_size < chunk.num_values  # the compressed size alone would say codes
    ds = tl.Dataset(str(tmp_path))
    assert all(not p.coded for part in ds._source.partitions for p in part)
    assert ds.with_coded_strings(["u"]) is ds


def test_grouping_and_crossing_operators_give_over_codes_what_they_give_over_strings(tmp_path, monkeypatch):
    """TargetEncoding, JoinGroupby and HashedCross read their key columns as codes from files
    (several row groups per partition, nulls): their outputs equal those of the same workflow
    over the same partitions read as strings (the operators' own tests check the strings' results)."""
    rng = np.random.default_rng(5)
    n = 20_000
    table = pa.table({"a": hex_ids(rng, n, 200), "b": pa.array([f"b{v}" for v in rng.integers(0, 30, n)]),
                      "y": rng.integers(0, 2, n).astype(float), "x": rng.random(n)})
    pq.write_table(table, tmp_path / "a.parquet", row_group_size=3000)
    graph = ((["a", ("a", "b")] >> ops.TargetEncoding("y", kfold=3))
             + (["a"] >> ops.JoinGroupby(cont_cols=["x"], stats=["count", "mean"]))
             + ([("a", "b")] >> ops.HashedCross(num_buckets=50)))
    coded = tl.Workflow(graph, progress=False)
    ds = tl.Dataset(str(tmp_path), part_size="300KB")
    assert ds.npartitions > 1
    got = coded.fit(ds).transform(ds).compute()
    assert coded.plan_.encoded_only_columns == ["a", "b"]
    assert all(str(ds.with_coded_strings(["a", "b"]).read_partition(i)[c].dtype).startswith("dictionary")
               for i in range(ds.npartitions) for c in "ab")
    monkeypatch.setattr(tl.Dataset, "with_coded_strings", lambda self, columns: self)
    monkeypatch.setattr(columns_module, "from_dictionary_array", None)  # no codes from here on
    expected = tl.Workflow(graph, progress=False).fit(ds).transform(ds).compute()
    pd.testing.assert_frame_equal(got, expected)


@pytest.mark.cudf
def test_the_gpu_reads_the_strings_and_gives_the_ids_of_the_cpu_codes(tmp_path):
    """cuDF decodes the strings on the device (a GPU dataset is never asked for codes); its
    workflow gives the ids and vocabularies the CPU one gives from the codes, and a workflow
    fit on the CPU transforms the GPU dataset alike."""
    import cudf

    rng = np.random.default_rng(7)
    for i in range(2):
        n = 20_000
        pq.write_table(pa.table({"a": hex_ids(rng, n, 300), "b": pa.array([f"b{v}" for v in rng.zipf(1.5, n) % 500]),
                                 "y": rng.integers(0, 2, n)}), tmp_path / f"p{i}.parquet", row_group_size=4000)
    graph = (["a", "b"] >> ops.Categorify(freq_threshold=2, num_buckets=3)) + ["y"]
    cpu_ds, gpu_ds = tl.Dataset(str(tmp_path), device="cpu"), tl.Dataset(str(tmp_path), device="cuda")
    assert gpu_ds.with_coded_strings(["a", "b"]) is gpu_ds
    on_cpu = tl.Workflow(graph, progress=False).fit(cpu_ds)
    on_gpu = tl.Workflow(graph, progress=False).fit(gpu_ds)
    expected = on_cpu.transform(cpu_ds).compute()
    got = on_gpu.transform(gpu_ds).compute()
    assert isinstance(got, cudf.DataFrame)
    pd.testing.assert_frame_equal(got.to_pandas(), expected, check_dtype=False)
    pd.testing.assert_frame_equal(on_cpu.transform(gpu_ds).compute().to_pandas(), expected, check_dtype=False)


# --- list columns of strings (multi-hot ids: tags, genres) -------------------------------------------
def tag_lists(rng, n: int, distinct: int) -> pa.Array:
    """Lists of 0-5 string ids (Zipf-distributed), some elements null, some lists null."""
    lengths = rng.integers(0, 6, n)
    elements = np.array([f"tag-{v}" for v in rng.zipf(1.3, lengths.sum()) % distinct], dtype=object)
    elements[rng.random(len(elements)) < 0.03] = None
    rows = np.split(elements, np.cumsum(lengths)[:-1])
    return pa.array([None if rng.random() < 0.05 else list(row) for row in rows], pa.list_(pa.string()))


def write_with(writer: str, table: pa.Table, path: str, row_group_size: int) -> None:
    """``table`` written as ``writer`` writes parquet (each names a list's elements its own way)."""
    if writer == "pyarrow":
        pq.write_table(table, path, row_group_size=row_group_size)
    elif writer == "pyarrow-legacy":  # `tags.list.item`, as pyarrow wrote lists before version 13
        pq.write_table(table, path, row_group_size=row_group_size, use_compliant_nested_type=False)
    elif writer == "polars":
        pytest.importorskip("polars").from_arrow(table).write_parquet(path, row_group_size=row_group_size)
    else:
        con = pytest.importorskip("duckdb").connect()
        con.register("part", table)
        con.execute(f"COPY part TO '{path}' (FORMAT PARQUET, ROW_GROUP_SIZE {row_group_size})")


def as_lists(series: pd.Series) -> list:
    return pa.array(series.array).to_pylist() if isinstance(series.dtype, pd.ArrowDtype) else series.tolist()


@pytest.mark.parametrize("writer", ["pyarrow", "pyarrow-legacy", "polars", "duckdb"])
def test_list_columns_of_strings_are_read_with_their_elements_as_codes(tmp_path, writer):
    """A list column's elements come as codes where every row group of a partition stores them
    so (several row groups per file: pyarrow's reader reads them one by one), as strings in a
    partition of a file written plainly; the lists, nulls and empty lists are those of the file."""
    rng = np.random.default_rng(11)
    tables = [pa.table({"tags": tag_lists(rng, 6000, 400), "x": np.arange(6000)}) for _ in range(2)]
    write_with(writer, tables[0], str(tmp_path / "a.parquet"), 1500)
    written = pq.read_schema(tmp_path / "a.parquet")  # polars writes large types: the same in both files
    pq.write_table(tables[1].cast(written.remove_metadata()), tmp_path / "b.parquet", row_group_size=1500,
                   use_dictionary=False)
    ds = tl.Dataset(str(tmp_path), part_size="60KB")
    coded = ds.with_coded_strings(["tags"])
    assert ds.npartitions > 2
    stored_as_codes = [all("tags" in p.coded for p in part) for part in ds._source.partitions]
    assert any(stored_as_codes) == (writer != "polars")  # polars writes lists' elements plainly
    assert not stored_as_codes[-1]  # b.parquet
    for i in range(ds.npartitions):
        frame = coded.read_partition(i)
        assert str(frame["tags"].dtype).startswith("list<item: dictionary") == stored_as_codes[i]
        assert as_lists(frame["tags"]) == as_lists(ds.read_partition(i)["tags"])
        assert frame["x"].tolist() == ds.read_partition(i)["x"].tolist()
    assert coded.num_rows == 12_000


@pytest.mark.parametrize("writer", ["pyarrow", "polars", "duckdb"])
def test_a_workflow_over_coded_lists_gives_the_ids_of_pandas_by_hand(tmp_path, writer, monkeypatch):
    """Categorify and HashBucket over list columns read as codes: Categorify's ids are those an
    independent pandas count of the elements gives, HashBucket's those of the same workflow
    over the rows in a DataFrame (read as strings); nulls and empty lists are kept."""
    rng = np.random.default_rng(12)
    n = 16_000
    tags, genres = tag_lists(rng, n, 3000), tag_lists(rng, n, 20)
    for i in range(2):
        part = pa.table({"tags": tags.slice(i * n // 2, n // 2), "genres": genres.slice(i * n // 2, n // 2),
                         "y": rng.integers(0, 2, n // 2)})
        write_with(writer, part, str(tmp_path / f"part_{i}.parquet"), 2000)
    graph = (["tags"] >> ops.Categorify(freq_threshold=2)) + (["genres"] >> ops.HashBucket(7)) + ["y"]
    workflow = tl.Workflow(graph, progress=False)
    ds = tl.Dataset(str(tmp_path), part_size="150KB")
    assert ds.npartitions > 1
    coded_elements = []  # the encoders get the elements' codes, not strings
    monkeypatch.setattr(columns_module, "from_dictionary_array",
                        lambda values: coded_elements.append(len(values)) or from_dictionary_array(values))
    got = workflow.fit(ds).transform(ds).compute()
    assert workflow.plan_.encoded_only_columns == ["tags", "genres"]
    starts = np.cumsum([0] + ds.partition_sizes())  # the partitions hold the files' rows in order

    def coded_in(lists: pa.Array, name: str, i: int) -> int:  # the elements of partition i read as codes
        rows = lists.to_pylist()[starts[i]:starts[i + 1]]
        return sum(len(row) for row in rows if row) if all(name in p.coded for p in ds._source.partitions[i]) else 0
    assert sum(coded_elements) == sum(2 * coded_in(tags, "tags", i) + coded_in(genres, "genres", i)
                                      for i in range(ds.npartitions))  # tags: fit and transform
    assert sum(coded_elements) > 0 or writer == "polars"  # polars writes lists' elements plainly
    elements = pd.Series([v for row in tags.to_pylist() if row for v in row], dtype=object)
    counts = elements.value_counts()
    counts = counts[counts >= 2]
    ids = {v: 3 + i for i, (v, _) in enumerate(sorted(counts.items(), key=lambda vc: (-vc[1], vc[0])))}
    expected = [None if row is None else [1 if v is None else ids.get(v, 2) for v in row] for row in tags.to_pylist()]
    assert as_lists(got["tags"]) == expected
    frame = pd.DataFrame({"tags": pd.Series(pd.arrays.ArrowExtensionArray(tags)),
                          "genres": pd.Series(pd.arrays.ArrowExtensionArray(genres)), "y": got["y"]})
    assert as_lists(got["genres"]) == as_lists(workflow.transform(frame)["genres"])


@pytest.mark.parametrize("writer", ["polars", "pyarrow"])
def test_list_columns_stored_with_dictionary_elements_read_across_row_groups(tmp_path, writer):
    """polars' List(Categorical), or an arrow list<dictionary<string>>, keep the dictionary type
    in the file's schema: a partition of several row groups reads them (pyarrow's reader takes
    them one row group at a time), as lists of strings."""
    rows = [["a", "b"], None, [], ["b", None, "c"], ["a"]] * 1000
    path = str(tmp_path / "a.parquet")
    if writer == "polars":
        pl = pytest.importorskip("polars")
        pl.DataFrame({"tags": rows}, schema={"tags": pl.List(pl.Categorical)}).write_parquet(path, row_group_size=1000)
    else:
        coded = pa.array(rows, pa.list_(pa.string())).cast(pa.list_(pa.dictionary(pa.int32(), pa.string())))
        pq.write_table(pa.table({"tags": coded}), path, row_group_size=1000)
    ds = tl.Dataset(path)
    assert ds.npartitions == 1 and pq.read_metadata(path).num_row_groups == 5
    assert as_lists(ds.compute()["tags"]) == rows
    ids = tl.Workflow(["tags"] >> ops.Categorify(), progress=False).fit_transform(ds).compute()
    expected = {"a": 3, "b": 4, "c": 5}  # a and b 2000 times each (ties by value), c 1000
    assert as_lists(ids["tags"]) == [None if r is None else [1 if v is None else expected[v] for v in r] for r in rows]
