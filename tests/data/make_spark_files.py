"""Writes tests/data/spark: small parquet datasets written by real Apache Spark, and beside each
the same rows as Spark itself renders them in JSON (``<name>.jsonl``, sorted by ``id``).

CI has no Java, so the files are committed as test data; this script is how they were made.
Run it with a venv holding Spark (never the project's venv)::

    python3 -m venv /tmp/spark-venv
    /tmp/spark-venv/bin/pip install pyspark==4.0.1 pyarrow pandas
    /tmp/spark-venv/bin/python tests/data/make_spark_files.py tests/data/spark

Naming datasets after the folder (``... tests/data/spark hive_typed``) rewrites only those.

The datasets keep Spark's habits, side files included (``_SUCCESS``, ``.crc``, part files named
``part-00000-<uuid>-c000.snappy.parquet``):

- ``criteo``: Criteo-like rows (label, I1..I3 ints with nulls, C1..C3 strings with nulls)
  written with ``partitionBy("day")``, a null day landing in ``day=__HIVE_DEFAULT_PARTITION__``.
- ``types``: byte, short, int, long, float, double, boolean, dictionary-encoded string, date,
  INT96 timestamp (Spark's default ``outputTimestampType``; 9999-12-31 and 1901 among them),
  TIMESTAMP_NTZ, decimals stored as INT32, INT64 and FIXED_LEN_BYTE_ARRAY, binary, and arrays
  (3-level lists), nulls everywhere.
- ``legacy``: the same rows with ``spark.sql.parquet.writeLegacyFormat=true`` (2-level lists
  named ``bag``/``array``, every decimal a FIXED_LEN_BYTE_ARRAY).
- ``micros``: the same rows with ``outputTimestampType=TIMESTAMP_MICROS`` (UTC-adjusted).
- ``partitioned``: ``partitionBy("country", "date")``, string keys Spark escapes, a null one.
- ``hive_typed``: ``partitionBy`` a date, a timestamp (``:`` escaped, a fraction of a second),
  a double and a zip code with a leading zero, nulls among them; its ``.jsonl`` holds the rows as
  Spark reads the folder back and ``hive_typed.schema.json`` the types Spark infers for the keys.
- ``empty``: no rows at all.
- ``nested``: struct, map, array of arrays and array of structs columns beside an ``id``.
- ``appended``: two appends whose array column differs in ``containsNull`` only.
- ``evolved``: a dataset appended to with one more column (what ``mergeSchema`` reads).

Every value is made here from a seeded ``random.Random``, so a rerun writes the same rows
(file names differ: Spark puts a fresh UUID in them).
"""

from __future__ import annotations

import datetime
import decimal
import os
import random
import shutil
import sys

UTC = datetime.timezone.utc
JSON_OPTIONS = {  # every null written out, timestamps to the microsecond
    "ignoreNullFields": "false",
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
}


def spark_session():
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[1]").appName("tabloader-fixtures")
            .config("spark.driver.memory", "1g").config("spark.ui.enabled", "false")
            .config("spark.sql.session.timeZone", "UTC").getOrCreate())


def maybe(rng: random.Random, value, null_share: float = 0.15):
    return None if rng.random() < null_share else value


def criteo_rows(rng: random.Random, n: int = 240) -> list[tuple]:
    """Skewed categories (a few frequent values, a tail seen once or twice) so that a
    frequency threshold matters."""
    def category(prefix: str) -> str | None:
        k = min(int(rng.expovariate(0.35)), 15)
        return maybe(rng, f"{prefix}{k:02d}", 0.1)

    return [(i, int(rng.random() < 0.3),
             maybe(rng, rng.randint(0, 50)), maybe(rng, rng.randint(-5, 5000)), maybe(rng, rng.randint(0, 3)),
             category("a"), category("b"), category("c"),
             rng.choice([0, 1, 2, None]))
            for i in range(n)]


def write_criteo(spark, out: str) -> None:
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("label", T.IntegerType()),
                           *[T.StructField(f"I{k}", T.IntegerType()) for k in (1, 2, 3)],
                           *[T.StructField(f"C{k}", T.StringType()) for k in (1, 2, 3)],
                           T.StructField("day", T.IntegerType())])
    frame = spark.createDataFrame(spark.sparkContext.parallelize(criteo_rows(random.Random(1)), 2), schema)
    frame.write.partitionBy("day").parquet(os.path.join(out, "criteo"))
    write_json(frame, os.path.join(out, "criteo.jsonl"))


def typed_rows(rng: random.Random, n: int = 60) -> list[tuple]:
    def decimal_of(digits: int, scale: int) -> decimal.Decimal:
        return decimal.Decimal(rng.randint(-10**digits + 1, 10**digits - 1)).scaleb(-scale)

    # the first rows hold the extremes: a warehouse's "valid until" sentinel, an early year
    extremes = [datetime.datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
                datetime.datetime(1901, 1, 1, 0, 0, 0, 1, tzinfo=UTC)]
    rows = []
    for i in range(n):
        at = datetime.datetime(2021, 3, 1, tzinfo=UTC) + datetime.timedelta(seconds=rng.randint(0, 10**8),
                                                                               microseconds=rng.randint(0, 999_999))
        at = extremes[i] if i < len(extremes) else maybe(rng, at)
        rows.append((
            i,
            maybe(rng, rng.randint(-128, 127)),
            maybe(rng, rng.randint(-32768, 32767)),
            maybe(rng, rng.randint(-2**31, 2**31 - 1)),
            maybe(rng, rng.randint(2**53, 2**62)),  # above 2**53: exact only if never float64
            maybe(rng, rng.uniform(-1e3, 1e3)),
            maybe(rng, rng.uniform(-1e6, 1e6)),
            maybe(rng, rng.random() < 0.5),
            maybe(rng, rng.choice(["red", "green", "blue"])),  # few values: dictionary-encoded
            maybe(rng, datetime.date(1960, 1, 1) + datetime.timedelta(days=rng.randint(0, 30000))),
            at,
            None if at is None else at.replace(tzinfo=None) - datetime.timedelta(days=400),
            maybe(rng, decimal_of(7, 2)),
            maybe(rng, decimal_of(15, 3)),
            maybe(rng, decimal_of(25, 5)),
            maybe(rng, bytes(rng.randrange(256) for _ in range(rng.randint(0, 4)))),
            maybe(rng, [maybe(rng, rng.randint(0, 99), 0.1) for _ in range(rng.randint(0, 4))]),
            maybe(rng, [rng.choice(["x", "y", "z"]) for _ in range(rng.randint(0, 3))]),
        ))
    return rows


def typed_schema():
    from pyspark.sql import types as T

    return T.StructType([
        T.StructField("id", T.LongType(), nullable=False),
        T.StructField("byte", T.ByteType()), T.StructField("short", T.ShortType()),
        T.StructField("int", T.IntegerType()), T.StructField("long", T.LongType()),
        T.StructField("float", T.FloatType()), T.StructField("double", T.DoubleType()),
        T.StructField("flag", T.BooleanType()), T.StructField("color", T.StringType()),
        T.StructField("day", T.DateType()), T.StructField("ts", T.TimestampType()),
        T.StructField("ts_ntz", T.TimestampNTZType()),
        T.StructField("dec_int32", T.DecimalType(7, 2)), T.StructField("dec_int64", T.DecimalType(15, 3)),
        T.StructField("dec_fixed", T.DecimalType(25, 5)), T.StructField("blob", T.BinaryType()),
        T.StructField("ints", T.ArrayType(T.IntegerType(), containsNull=True)),
        T.StructField("words", T.ArrayType(T.StringType(), containsNull=False)),
    ])


def write_typed(spark, out: str) -> None:
    frame = spark.createDataFrame(spark.sparkContext.parallelize(typed_rows(random.Random(2)), 2), typed_schema())
    frame.cache()
    settings = {"types": {}, "legacy": {"spark.sql.parquet.writeLegacyFormat": "true"},
                "micros": {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}}
    for name, conf in settings.items():
        for key, value in conf.items():
            spark.conf.set(key, value)
        frame.write.parquet(os.path.join(out, name))
        for key in conf:
            spark.conf.unset(key)
    write_json(frame, os.path.join(out, "types.jsonl"))


def write_partitioned(spark, out: str) -> None:
    """Two levels of hive folders: a string key whose values Spark escapes (``/``, ``=``,
    ``%``, ``:``), null included, and a date key."""
    countries = ["de", "a b/c=d", "100%", "x:y", None]
    rows = [(i, i * 0.25, countries[i % 5], datetime.date(2024, 1, 1 + i % 2)) for i in range(30)]
    frame = spark.createDataFrame(rows, "id long, v double, country string, date date").coalesce(1)
    frame.write.partitionBy("country", "date").parquet(os.path.join(out, "partitioned"))
    write_json(frame, os.path.join(out, "partitioned.jsonl"))


def write_hive_typed(spark, out: str) -> None:
    """Keys Spark infers types for from the folder names when it reads them back: a date, a
    timestamp, a double; a zip code it reads as an integer, losing the leading zero."""
    import json

    days = [datetime.date(2024, 1, 1), datetime.date(2024, 1, 2), None]
    times = [datetime.datetime(2024, 1, 1, 10, 0), datetime.datetime(2024, 1, 2, 11, 30, 0, 500_000), None]
    scores = [0.5, 2.0, -1.25, None]
    zips = ["01234", "10115"]
    rows = [(i, float(i) * 10, days[i % 3], times[i % 3], scores[i % 4], zips[i % 2]) for i in range(8)]
    frame = spark.createDataFrame(rows, "id long, x double, dt date, at timestamp, score double, zip string")
    path = os.path.join(out, "hive_typed")
    frame.coalesce(1).write.partitionBy("dt", "at", "score", "zip").parquet(path)
    back = spark.read.parquet(path)
    write_json(back, os.path.join(out, "hive_typed.jsonl"))
    with open(os.path.join(out, "hive_typed.schema.json"), "w") as f:
        json.dump({field.name: field.dataType.simpleString() for field in back.schema.fields}, f, indent=1)
        f.write("\n")


def write_empty(spark, out: str) -> None:
    """No rows: Spark writes one file with the schema and no row groups."""
    frame = spark.createDataFrame([], "id long, x double, s string")
    frame.write.parquet(os.path.join(out, "empty"))


def write_appended(spark, out: str) -> None:
    """Two appends whose array column differs only in ``containsNull``: ``split`` makes
    arrays without null elements, ``array(...)`` arrays that may hold them. Spark reads the
    folder as one table."""
    from pyspark.sql import functions as F

    path = os.path.join(out, "appended")
    words = spark.createDataFrame([(i, f"w{i % 3} w{i % 5}") for i in range(8)], "id long, s string")
    words.select("id", F.split("s", " ").alias("words")).coalesce(1).write.parquet(path)
    pairs = spark.createDataFrame([(i, f"w{i % 4}", None if i % 3 else f"w{i % 2}") for i in range(8, 16)],
                                  "id long, a string, b string")
    pairs.select("id", F.array("a", "b").alias("words")).coalesce(1).write.mode("append").parquet(path)
    write_json(spark.read.parquet(path), os.path.join(out, "appended.jsonl"))


def write_nested(spark, out: str) -> None:
    from pyspark.sql import types as T

    schema = T.StructType([
        T.StructField("id", T.LongType()),
        T.StructField("point", T.StructType([T.StructField("x", T.IntegerType()), T.StructField("y", T.StringType())])),
        T.StructField("attrs", T.MapType(T.StringType(), T.IntegerType())),
        T.StructField("matrix", T.ArrayType(T.ArrayType(T.IntegerType()))),
        T.StructField("events", T.ArrayType(T.StructType([T.StructField("kind", T.StringType())]))),
    ])
    rows = [(i, (i, f"p{i}") if i % 4 else None, {"k": i} if i % 3 else None, [[i], [i, i + 1]], [(f"e{i}",)])
            for i in range(12)]
    frame = spark.createDataFrame(rows, schema).coalesce(1)
    frame.write.parquet(os.path.join(out, "nested"))
    write_json(frame, os.path.join(out, "nested.jsonl"))


def write_evolved(spark, out: str) -> None:
    """Two writes into one folder, the second with one more column: Spark reads the first
    files' rows with that column null when asked to ``mergeSchema``."""
    path = os.path.join(out, "evolved")
    first = spark.createDataFrame([(i, float(i) / 2) for i in range(10)], "id long, score double").coalesce(1)
    first.write.parquet(path)
    second = spark.createDataFrame([(i, float(i) / 2, f"v{i % 3}") for i in range(10, 20)],
                                   "id long, score double, version string").coalesce(1)
    second.write.mode("append").parquet(path)
    write_json(spark.read.option("mergeSchema", "true").parquet(path), os.path.join(out, "evolved.jsonl"))


def write_json(frame, path: str) -> None:
    """The rows as Spark renders them (``to_json``), one per line, sorted by ``id``."""
    from pyspark.sql import functions as F

    rendered = frame.orderBy("id").select(F.to_json(F.struct(*frame.columns), JSON_OPTIONS).alias("row"))
    lines = [row.row for row in rendered.collect()]
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)


WRITERS = {"criteo": write_criteo, "types": write_typed, "partitioned": write_partitioned, "empty": write_empty,
           "nested": write_nested, "evolved": write_evolved, "appended": write_appended,
           "hive_typed": write_hive_typed}


def main(out: str, names: list[str]) -> None:
    """Writes the datasets ``names`` (default: all) into ``out + ".tmp"``, then replaces
    ``out`` with it (all) or moves what they wrote into ``out`` (some)."""
    staging = out.rstrip("/") + ".tmp"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    spark = spark_session()
    try:
        for name in names or WRITERS:
            WRITERS[name](spark, staging)
    finally:
        spark.stop()
    if not names:
        shutil.rmtree(out, ignore_errors=True)
        os.replace(staging, out)
        return
    for entry in os.listdir(staging):
        target = os.path.join(out, entry)
        if os.path.isdir(target):
            shutil.rmtree(target)
        os.replace(os.path.join(staging, entry), target)
    os.rmdir(staging)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "spark"),
         sys.argv[2:])
