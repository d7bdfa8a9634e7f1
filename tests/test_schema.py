"""Tags, ColumnSchema, Schema: selection, immutability, JSON round trip, arrow inference."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from tabloader.schema import SCHEMA_FORMAT_VERSION, ColumnSchema, Schema, Tags


@pytest.fixture
def schema() -> Schema:
    return Schema([
        ColumnSchema("user_id", "int64", {Tags.CATEGORICAL, Tags.USER, Tags.ID}, {"cardinality": 1000}),
        ColumnSchema("item_id", "int64", {Tags.CATEGORICAL, Tags.ITEM, Tags.ID}, {"cardinality": 50}),
        ColumnSchema("genres", "int64", {Tags.CATEGORICAL, Tags.ITEM, Tags.LIST}, is_list=True),
        ColumnSchema("price", "float32", {Tags.CONTINUOUS, Tags.ITEM}),
        ColumnSchema("label", "float32", {Tags.TARGET, Tags.BINARY}),
    ])


# --- tags -------------------------------------------------------------------------------------
def test_tags_are_plain_strings():
    assert Tags.CATEGORICAL == "categorical"
    assert str(Tags.TARGET) == "target"
    col = ColumnSchema("a", "int64", {"categorical", Tags.USER})
    assert col.tags == frozenset({"categorical", "user"})
    assert all(type(t) is str for t in col.tags)
    assert col.has_tag(Tags.CATEGORICAL) and col.has_tag("user") and not col.has_tag(Tags.ITEM)


def test_single_tag_is_not_split_into_characters():
    assert ColumnSchema("a", tags="categorical").tags == {"categorical"}
    assert ColumnSchema("a", tags=Tags.TARGET).tags == {"target"}
    assert ColumnSchema("a", tags="my-custom-tag").tags == {"my-custom-tag"}


def test_select_by_tag_any(schema):
    assert schema.select_by_tag(Tags.USER, Tags.TARGET).column_names == ["user_id", "label"]
    assert schema.select_by_tag("item").column_names == ["item_id", "genres", "price"]
    # order follows the schema, not the order of the tags asked for
    assert schema.select_by_tag(Tags.TARGET, Tags.USER).column_names == ["user_id", "label"]
    assert schema.select_by_tag("nonexistent").column_names == []


def test_select_by_tag_all(schema):
    assert schema.select_by_tag(Tags.CATEGORICAL, Tags.ITEM, match_all=True).column_names == ["item_id", "genres"]
    assert schema.select_by_tag(Tags.CATEGORICAL, Tags.ITEM, Tags.LIST, match_all=True).column_names == ["genres"]
    assert schema.select_by_tag(Tags.TARGET, Tags.USER, match_all=True).column_names == []


def test_remove_by_tag_select_by_name_without_replace(schema):
    assert schema.remove_by_tag(Tags.ITEM, Tags.TARGET).column_names == ["user_id"]
    assert schema.select_by_name(["price", "user_id"]).column_names == ["price", "user_id"]
    assert schema.select_by_name("label").column_names == ["label"]
    assert schema.without(["genres", "label"]).column_names == ["user_id", "item_id", "price"]
    replaced = schema.replace(ColumnSchema("price", "float64", {Tags.CONTINUOUS}))
    assert replaced.column_names == schema.column_names  # replaced in place
    assert replaced["price"].dtype == "float64" and schema["price"].dtype == "float32"
    appended = schema.replace(ColumnSchema("new", "int8"))
    assert appended.column_names == [*schema.column_names, "new"]
    assert (schema.select_by_name(["user_id"]) + schema.select_by_name(["label"])).column_names == ["user_id", "label"]


def test_container_protocol(schema):
    assert len(schema) == 5
    assert "price" in schema and "missing" not in schema
    assert [c.name for c in schema] == schema.column_names
    with pytest.raises(KeyError, match="missing"):
        schema["missing"]
    assert Schema(["a", "b"]).column_names == ["a", "b"]
    assert Schema(["a"])["a"].dtype is None


# --- the embedding-size rule -------------------------------------------------------------------
def test_suggested_embedding_dim_is_the_rule_of_thumb_capped_and_at_least_one():
    from tabloader.schema import suggested_embedding_dim

    for card in (1, 2, 7, 10, 1000, 123_456, 10**9):
        assert suggested_embedding_dim(card) == min(512, max(1, int(np.round(1.6 * card ** 0.56)))), card
    assert suggested_embedding_dim(0) == 1
    assert suggested_embedding_dim(np.int64(1000)) == 77
    assert suggested_embedding_dim(10**7, max_dim=64) == 64
    with pytest.raises(ValueError, match="cardinality must be >= 0, got -3"):
        suggested_embedding_dim(-3)
    with pytest.raises(ValueError, match="cardinality must be >= 0, got nan"):
        suggested_embedding_dim(float("nan"))
    with pytest.raises(ValueError, match="max_dim must be >= 1, got 0"):
        suggested_embedding_dim(10, max_dim=0)


# --- ColumnSchema immutability ------------------------------------------------------------------
def test_column_schema_is_frozen():
    col = ColumnSchema("a", "int64", {"categorical"}, {"cardinality": 3})
    with pytest.raises(AttributeError):
        col.name = "b"
    with pytest.raises(AttributeError):
        col.tags = frozenset()


def test_column_schema_helpers_return_new_objects():
    props = {"cardinality": 3}
    col = ColumnSchema("a", "int64", {"categorical"}, props)
    props["cardinality"] = 99  # the column keeps its own copy
    assert col.properties == {"cardinality": 3}

    renamed = col.with_name("b")
    assert (renamed.name, col.name) == ("b", "a")
    assert renamed.tags == col.tags and renamed.properties == col.properties

    tagged = col.with_tags(Tags.USER, "id")
    assert tagged.tags == {"categorical", "user", "id"} and col.tags == {"categorical"}
    assert tagged.without_tags("categorical", Tags.ID).tags == {"user"}
    assert col.without_tags("not-there").tags == {"categorical"}

    with_props = col.with_properties(embedding_dim=16)
    assert with_props.properties == {"cardinality": 3, "embedding_dim": 16}
    assert col.properties == {"cardinality": 3}
    assert with_props.with_properties(cardinality=7).properties == {"cardinality": 7, "embedding_dim": 16}

    as_list = col.with_dtype(np.dtype("int32"), is_list=True)
    assert (as_list.dtype, as_list.is_list) == ("int32", True)
    assert (col.dtype, col.is_list) == ("int64", False)
    assert as_list.with_dtype("float32").is_list is True  # is_list kept unless given


def test_column_schema_dtype_is_normalized_to_a_string():
    assert ColumnSchema("a", np.dtype("float32")).dtype == "float32"
    assert ColumnSchema("a", np.int16).dtype != ""  # any dtype-like becomes a string
    assert isinstance(ColumnSchema("a", np.int16).dtype, str)


def test_column_schema_equality_and_hash():
    a = ColumnSchema("a", "int64", ["categorical", "user"], {"cardinality": 3})
    b = ColumnSchema("a", "int64", {"user", "categorical"}, {"cardinality": 3})
    assert a == b and hash(a) == hash(b)
    assert a != a.with_properties(cardinality=4)
    assert a != a.with_tags("item")


# --- JSON round trip ----------------------------------------------------------------------------
def test_json_round_trip(schema):
    text = schema.to_json()
    back = Schema.from_json(text)
    assert back == schema
    assert back.column_names == schema.column_names
    for col in schema:
        assert back[col.name].tags == col.tags
        assert back[col.name].properties == col.properties
        assert back[col.name].is_list == col.is_list
        assert back[col.name].dtype == col.dtype
    data = json.loads(text)
    assert data["format_version"] == SCHEMA_FORMAT_VERSION
    assert [c["name"] for c in data["columns"]] == schema.column_names
    assert data["columns"][2]["is_list"] is True


def test_json_round_trip_numpy_properties():
    col = ColumnSchema("c", "int64", {Tags.CATEGORICAL}, {
        "cardinality": np.int64(12345),
        "embedding_dim": np.int32(16),
        "mean": np.float64(0.25),
        "std": np.float32(1.5),
        "is_hot": np.bool_(True),
        "vocab_head": np.array([3, 1, 2], dtype=np.int64),
        "quantiles": np.array([0.5, 1.5]),
        "freq_threshold": 0,
        "name_map": {"x": 1},
    })
    text = Schema([col]).to_json()
    raw = json.loads(text)["columns"][0]["properties"]
    assert raw == {"cardinality": 12345, "embedding_dim": 16, "mean": 0.25, "std": 1.5, "is_hot": True,
                   "vocab_head": [3, 1, 2], "quantiles": [0.5, 1.5], "freq_threshold": 0, "name_map": {"x": 1}}
    assert type(raw["cardinality"]) is int and type(raw["is_hot"]) is bool
    back = Schema.from_json(text)["c"]
    assert back.properties["cardinality"] == 12345 and type(back.properties["cardinality"]) is int
    assert back.properties["vocab_head"] == [3, 1, 2]
    # a second round trip is the identity
    assert Schema.from_json(Schema([back]).to_json()) == Schema([back])


def test_json_rejects_unserializable_property():
    col = ColumnSchema("c", "int64", properties={"fn": object()})
    with pytest.raises(TypeError, match="fn|object"):
        Schema([col]).to_json()


def test_json_round_trip_list_columns():
    s = Schema([ColumnSchema("tags", "string", {Tags.LIST, Tags.CATEGORICAL}, {"cardinality": 9}, is_list=True),
                ColumnSchema("weights", "float32", {Tags.LIST}, is_list=True)])
    back = Schema.from_json(s.to_json(indent=None))
    assert back == s
    assert back["tags"].is_list and back["tags"].dtype == "string"
    assert back["weights"].is_list and back["weights"].dtype == "float32"


def test_from_dict_defaults():
    s = Schema.from_dict({"columns": [{"name": "a"}, {"name": "b", "dtype": "int8", "tags": ["id"]}]})
    assert s["a"] == ColumnSchema("a")
    assert s["b"] == ColumnSchema("b", "int8", {"id"})


def test_newer_format_version_is_refused(schema):
    data = schema.to_dict()
    data["format_version"] = SCHEMA_FORMAT_VERSION + 1
    with pytest.raises(ValueError, match=f"version {SCHEMA_FORMAT_VERSION + 1}.*newer"):
        Schema.from_dict(data)
    with pytest.raises(ValueError, match="newer"):
        Schema.from_json(json.dumps(data))


def test_newer_format_version_file_names_the_path(tmp_path, schema):
    data = schema.to_dict()
    data["format_version"] = SCHEMA_FORMAT_VERSION + 1
    path = tmp_path / "_schema.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError) as info:
        Schema.load(str(path))
    assert str(path) in str(info.value) and "newer" in str(info.value)


# --- files --------------------------------------------------------------------------------------
def test_save_and_load(tmp_path, schema):
    path = tmp_path / "schema.json"
    schema.save(str(path))
    assert Schema.load(str(path)) == schema
    assert json.loads(path.read_text()) == json.loads(schema.to_json())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["schema.json"]  # no temporary left behind
    # saving again replaces the file
    smaller = schema.select_by_tag(Tags.TARGET)
    smaller.save(str(path))
    assert Schema.load(str(path)) == smaller
    assert sorted(p.name for p in tmp_path.iterdir()) == ["schema.json"]


def test_save_and_load_fsspec_url(schema):
    import fsspec

    url = "memory://test_schema/a/schema.json"
    schema.save(url)
    assert Schema.load(url) == schema
    fsspec.filesystem("memory").rm("/test_schema", recursive=True)


@pytest.mark.parametrize("text", ["{not json", "", '{"columns": [{"dtype": "int64"}]}', "[1, 2]", '"x"',
                                  '{"format_version": 1}'])
def test_corrupt_schema_file_names_the_path(tmp_path, text):
    path = tmp_path / "broken" / "_schema.json"
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        Schema.load(str(path))
    assert str(path) in str(info.value)


def test_missing_schema_file(tmp_path):
    path = tmp_path / "nope.json"
    with pytest.raises(FileNotFoundError, match="nope.json"):
        Schema.load(str(path))


# --- inference ----------------------------------------------------------------------------------
def test_from_arrow_inference():
    arrow = pa.schema([
        ("i8", pa.int8()), ("i32", pa.int32()), ("i64", pa.int64()), ("u16", pa.uint16()),
        ("f32", pa.float32()), ("f64", pa.float64()), ("flag", pa.bool_()),
        ("s", pa.string()), ("ls", pa.large_string()),
        ("li", pa.list_(pa.int64())), ("lls", pa.list_(pa.string())), ("big", pa.large_list(pa.float32())),
        ("ts", pa.timestamp("us")), ("ts_ns", pa.timestamp("ns")),
        ("__index_level_0__", pa.int64()),
    ])
    s = Schema.from_arrow(arrow)
    expected = {
        "i8": ("int8", False), "i32": ("int32", False), "i64": ("int64", False), "u16": ("uint16", False),
        "f32": ("float32", False), "f64": ("float64", False), "flag": ("bool", False),
        "s": ("string", False), "ls": ("string", False),
        "li": ("int64", True), "lls": ("string", True), "big": ("float32", True),
        "ts": ("datetime64[us]", False), "ts_ns": ("datetime64[ns]", False),
    }
    assert s.column_names == list(expected)  # the stored pandas index is not a column
    for name, (dtype, is_list) in expected.items():
        assert (s[name].dtype, s[name].is_list) == (dtype, is_list), name
        assert s[name].tags == ({"list"} if is_list else set()), name  # no roles guessed
        assert s[name].properties == {}
    # numeric dtype names are valid numpy dtypes
    for name in ["i8", "i32", "i64", "u16", "f32", "f64", "flag", "ts"]:
        assert np.dtype(s[name].dtype) == np.dtype(arrow.field(name).type.to_pandas_dtype())


def test_time_zone_aware_timestamps_keep_their_zone_as_pandas_names_the_dtype():
    import pandas as pd

    arrow = pa.schema([("utc", pa.timestamp("us", tz="UTC")), ("paris", pa.timestamp("ms", tz="Europe/Paris"))])
    s = Schema.from_arrow(arrow)
    frame = pa.table({n: pa.array([0], type=arrow.field(n).type) for n in arrow.names}).to_pandas()
    assert [s[n].dtype for n in arrow.names] == [str(frame[n].dtype) for n in arrow.names]
    assert s["utc"].dtype == str(pd.DatetimeTZDtype("us", "UTC"))


def test_from_arrow_of_a_table_written_by_pandas():
    import pandas as pd

    df = pd.DataFrame({"a": [1, 2], "b": ["x", "y"], "c": [[1], [2, 3]],
                       "t": pd.to_datetime(["2024-01-01", "2024-01-02"]).as_unit("us")}, index=[10, 20])
    s = Schema.from_arrow(pa.Table.from_pandas(df).schema)
    assert s.column_names == ["a", "b", "c", "t"]
    assert [(c.dtype, c.is_list) for c in s] == [("int64", False), ("string", False), ("int64", True),
                                                 ("datetime64[us]", False)]


def test_from_frame_pandas_and_dask():
    import dask.dataframe as dd
    import pandas as pd

    df = pd.DataFrame({"a": np.arange(4, dtype="int32"), "b": np.linspace(0, 1, 4), "c": list("wxyz"),
                       "n": pd.array([1, None, 3, 4], dtype="Int64")})
    expected = [("a", "int32"), ("b", "float64"), ("c", "string"), ("n", "int64")]
    assert [(c.name, c.dtype) for c in Schema.from_frame(df)] == expected
    assert [(c.name, c.dtype) for c in Schema.from_frame(dd.from_pandas(df, npartitions=2))] == expected


def test_from_frame_infers_python_list_columns():
    import pandas as pd

    df = pd.DataFrame({"ids": [[1, 2], [], [3]], "words": [["a"], ["b", "c"], []]})
    s = Schema.from_frame(df)
    assert (s["ids"].dtype, s["ids"].is_list) == ("int64", True)
    assert (s["words"].dtype, s["words"].is_list) == ("string", True)
