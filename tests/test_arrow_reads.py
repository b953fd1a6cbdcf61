"""The engine's driver-side read of small Delta tables (``delta_tables.arrow_reads``, delta-rs) gives what Spark's
Delta reader gives, version by version, or nothing (then the engine reads with Spark).

A rules table through MERGEs (updates, tombstones, re-creation), an older release's table without the ``baseline``
column that a newer release adds, the registry; and the cases it must decline: a path on an object store, a table
with deletion vectors (a reader feature: read with Spark unless delta-rs reads it the same).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from engine_fixtures import make_rule, put_rules
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from delta_tables import arrow_reads
from delta_tables.arrow_reads import PartitionFiles, file_rows_at, partition_files_at, table_rows_at
from delta_tables.rules import RULES
from delta_tables.table_snapshot import table_version
from delta_tables.table_spec import add_missing_columns
from pipelines.base.settings import Settings
from pipelines.engine.states import read_live_rules, read_registry


def _plain(value: Any) -> Any:
    """Spark gives naive local-time datetimes, Arrow UTC-aware ones: compare the instant."""
    if isinstance(value, dt.datetime):
        return value.timestamp()
    return value


def _spark_rows(spark: SparkSession, path: str, version: int) -> list[dict[str, Any]]:
    frame = spark.read.format("delta").option("versionAsOf", version).load(path)
    return sorted(({k: _plain(v) for k, v in r.asDict().items()} for r in frame.collect()), key=repr)


def _arrow_rows(path: str, version: int) -> list[dict[str, Any]] | None:
    rows = table_rows_at(path, version=version)
    return None if rows is None else sorted(({k: _plain(v) for k, v in r.items()} for r in rows), key=repr)


def test_the_rules_table_reads_as_spark_reads_it_at_every_version(
    spark: SparkSession, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh_lakehouse(spark, settings)
    path = settings.table_path("rules")
    r1, r2 = make_rule(1), make_rule(2, aggregatorFunctionType="COUNT", limit=5, cooldownMinutes=3)
    put_rules(spark, settings, [r1, r2])
    put_rules(spark, settings, [r1.model_copy(update={"limit": 250})], deleted=[2], tick=1)
    put_rules(spark, settings, [r2, make_rule(3, windowMinutes=60)], tick=2)  # r2 back, r3 new
    newest = table_version(spark, path)
    for version in range(newest + 1):
        assert _arrow_rows(path, version) == _spark_rows(spark, path, version), version
    # The live rules as the engine reads them, at r2's tombstone and at the newest version, either way
    versions = (newest - 1, newest)
    fast = [read_live_rules(spark, path, version=v, schema=settings.transaction_schema) for v in versions]
    monkeypatch.setattr(arrow_reads, "table_rows_at", lambda *args, **kwargs: None)  # Spark only
    slow = [read_live_rules(spark, path, version=v, schema=settings.transaction_schema) for v in versions]
    assert fast == slow and [[r.rule.rule_id for r in live] for live in fast] == [[1], [1, 2, 3]]


def test_an_older_release_table_lacks_the_newer_column_at_its_older_versions(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "rules")
    older = spark.createDataFrame([], RULES.schema).drop("baseline")
    older.write.format("delta").save(path)
    row = {f.name: None for f in older.schema.fields} | {"ruleId": 7, "ruleState": "ACTIVE", "disabled": False}
    row |= {"sourcePosition": "p1", "sourceOp": "c", "updatedAt": dt.datetime(2026, 11, 1)}
    spark.createDataFrame([row], older.schema).write.format("delta").mode("append").save(path)
    assert add_missing_columns(spark, RULES, path) == ["baseline"]
    newest = table_version(spark, path)
    for version in range(newest + 1):
        assert _arrow_rows(path, version) == _spark_rows(spark, path, version), version
    assert "baseline" not in (table_rows_at(path, version=1) or [{}])[0]
    assert (table_rows_at(path, version=newest) or [{}])[0]["baseline"] is None


def test_the_registry_reads_as_spark_reads_it(
    spark: SparkSession, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh_lakehouse(spark, settings)
    path = settings.table_path("rule_states")
    rows = [("s-1", "{}", 10, 0, 3, dt.datetime(2026, 11, 1)), ("s-2", "{}", 60, 2, 2, dt.datetime(2026, 11, 1))]
    spark.createDataFrame(rows, spark.read.format("delta").load(path).schema).write.format("delta").mode("append").save(
        path
    )
    version = table_version(spark, path)
    fast = read_registry(spark, path, version=version)
    monkeypatch.setattr(arrow_reads, "table_rows_at", lambda *args, **kwargs: None)
    assert fast == read_registry(spark, path, version=version) and sorted(fast) == ["s-1", "s-2"]


def test_it_declines_what_it_cannot_read_as_spark_does(spark: SparkSession, tmp_path: Path) -> None:
    assert table_rows_at("s3a://bucket/lake/rules", version=0) is None  # Spark's object-store credentials
    assert table_rows_at(str(tmp_path / "nothing"), version=0) is None
    path = str(tmp_path / "with_vectors")
    frame = spark.range(20).withColumn("v", F.col("id") * 2)
    frame.write.format("delta").option("delta.enableDeletionVectors", "true").save(path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 3 = 0")
    version = table_version(spark, path)
    read = _arrow_rows(path, version)
    # delta-rs 1.6 refuses deletion vectors; should a release read them, it must read them as Spark does
    assert read is None or read == _spark_rows(spark, path, version)


def test_file_statistics_per_partition_are_what_spark_counts(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "tiles")
    rows = spark.range(30).select(
        F.when(F.col("id") < 20, "a").otherwise("b").alias("stateId"), (F.col("id") * 1000 + 500).alias("bucketStart")
    )
    rows.repartition(1).write.format("delta").partitionBy("stateId").save(path)  # a file of 20 rows, one of 10
    more = spark.range(15).select(F.lit("a").alias("stateId"), (F.col("id") * 1000 + 100_000).alias("bucketStart"))
    more.repartition(3).write.format("delta").mode("append").partitionBy("stateId").save(path)  # three files of 5
    version = table_version(spark, path)
    table = spark.read.format("delta").load(path)
    aggregated = table.groupBy("stateId").agg(F.count(F.lit(1)).alias("n"), F.min("bucketStart").alias("low"))
    assert {r["stateId"]: (r["n"], r["low"]) for r in aggregated.collect()} == {"a": (35, 500), "b": (10, 20500)}
    assert partition_files_at(path, version=version, partition="stateId", column="bucketStart") == {
        "a": PartitionFiles(rows=35, largest_file=20, lowest=500),
        "b": PartitionFiles(rows=10, largest_file=10, lowest=20500),
    }
    assert partition_files_at(path, version=0, partition="stateId", column="bucketStart") == {
        "a": PartitionFiles(rows=20, largest_file=20, lowest=500),
        "b": PartitionFiles(rows=10, largest_file=10, lowest=20500),
    }
    summed: dict[str | None, int] = {}
    for value, rows_in_file in file_rows_at(path, version=version, column="stateId") or []:
        summed[value] = summed.get(value, 0) + rows_in_file
    assert summed == {"a": 35, "b": 10}
    assert [rows_in_file for _, rows_in_file in file_rows_at(path, version=0) or []] in ([20, 10], [10, 20])
    assert partition_files_at(path, version=version, partition="stateId", column="nothing") is None
    assert partition_files_at("s3a://bucket/lake/tiles", version=0, partition="stateId", column="bucketStart") is None
    # Deleted rows (a deletion vector) are still in a file's numRecords: not known this way.
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE bucketStart = 500")
    newest = table_version(spark, path)
    assert partition_files_at(path, version=newest, partition="stateId", column="bucketStart") is None
    assert file_rows_at(path, version=newest, column="stateId") is None
    assert partition_files_at(path, version=version, partition="stateId", column="bucketStart") is not None
