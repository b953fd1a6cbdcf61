"""Delta on the real local session: a MERGE round trip with its metrics, idempotent `init`, and what a table's
checksum tells without a query (``table_file_count``, ``file_row_counts``, ``table_row_counts``)."""

from __future__ import annotations

from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from delta_tables.catalog import all_tables, init_lakehouse
from delta_tables.table_snapshot import file_row_counts, table_file_count, table_row_counts
from pipelines.base.settings import Settings
from pipelines.base.spark_session import session_confs
from pipelines.local.smoke import last_operation_metrics


def test_merge_round_trip_reports_metrics_and_content(spark: SparkSession, settings: Settings) -> None:
    path = settings.table_path("roundtrip")
    spark.createDataFrame([(1, "a", 10), (2, "b", 20)], "id long, v string, n int").write.format("delta").save(path)
    updates = spark.createDataFrame([(2, "B", 21), (3, "c", 30), (1, "a", 10)], "id long, v string, n int")
    table = DeltaTable.forPath(spark, path)
    (
        table.alias("t")
        .merge(updates.alias("s"), "t.id = s.id")
        .whenMatchedUpdateAll(condition="t.v <> s.v OR t.n <> s.n")
        .whenNotMatchedInsertAll()
        .execute()
    )
    metrics = last_operation_metrics(table)
    assert metrics["numTargetRowsUpdated"] == 1
    assert metrics["numTargetRowsInserted"] == 1
    assert metrics["numSourceRows"] == 3
    assert sorted(tuple(r) for r in table.toDF().collect()) == [(1, "a", 10), (2, "B", 21), (3, "c", 30)]


def test_init_creates_every_table_once(spark: SparkSession, settings: Settings) -> None:
    names = [spec.name for spec in all_tables(settings)]
    assert init_lakehouse(spark, settings) == names
    versions = {n: DeltaTable.forPath(spark, settings.table_path(n)).history(1).first()["version"] for n in names}
    assert init_lakehouse(spark, settings) == []
    assert {
        n: DeltaTable.forPath(spark, settings.table_path(n)).history(1).first()["version"] for n in names
    } == versions
    rules = DeltaTable.forPath(spark, settings.table_path("rules")).detail().first()
    assert rules["properties"]["delta.enableChangeDataFeed"] == "true"
    # VACUUM's retention is set at creation: the first `fraudlake maintain` must not change a table's metadata
    # under a running writer (that fails the writer's commit with MetadataChangedException).
    for name in names:
        detail = DeltaTable.forPath(spark, settings.table_path(name)).detail().first()
        assert detail["properties"]["delta.deletedFileRetentionDuration"] == "interval 168 hours", name
    bronze = DeltaTable.forPath(spark, settings.table_path("bronze_transactions")).detail().first()
    assert bronze["partitionColumns"] == ["eventDate"]
    schema = spark.read.format("delta").load(settings.table_path("bronze_transactions")).schema
    assert schema["paymentAmount"].dataType.simpleString() == "decimal(18,2)"


def test_the_checksum_file_count_is_known_only_for_the_newest_version(spark: SparkSession, tmp_path: Path) -> None:
    """The fresh-lakehouse shortcut (``table_file_count(...) == 0``) says empty only for a newest version without
    data files; any other version, or a table without a log, is 'not known' (None), so the caller reads the table."""
    path = str(tmp_path / "t")
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT) USING delta")
    assert table_file_count(spark, path) == 0 and table_file_count(spark, path, 0) == 0
    spark.range(3).write.format("delta").mode("append").save(path)
    assert table_file_count(spark, path) not in (None, 0) and table_file_count(spark, path, 1) not in (None, 0)
    assert table_file_count(spark, path, 0) is None  # empty then, but no longer the newest version: not known here
    DeltaTable.forPath(spark, path).delete()
    assert table_file_count(spark, path, 2) == 0 and spark.read.format("delta").load(path).count() == 0
    assert table_file_count(spark, str(tmp_path / "missing")) is None


def test_row_counts_come_from_the_checksum_only_where_it_lists_every_file(spark: SparkSession, tmp_path: Path) -> None:
    """``file_row_counts`` (retention's fold decision, with no Spark job) equals a count of the table, partition by
    partition, after appends and a partition overwrite; it is 'not known' (None) for an older version and for a
    table whose checksum does not list its files (more than Delta's threshold), so the caller counts instead."""
    path = str(tmp_path / "t")

    def rows(n: int, part: str) -> DataFrame:
        return spark.range(n).withColumn("p", F.lit(part))

    rows(3, "a").write.format("delta").partitionBy("p").save(path)
    rows(2, "b").write.format("delta").mode("append").save(path)
    rows(4, "a").write.format("delta").mode("append").save(path)
    rows(1, "b").write.format("delta").mode("overwrite").option("replaceWhere", "p = 'b'").save(path)

    def summed(files: list[tuple[str | None, int]] | None) -> dict[str | None, int]:
        assert files is not None
        totals: dict[str | None, int] = {}
        for part, n in files:
            totals[part] = totals.get(part, 0) + n
        return totals

    counted = {r["p"]: r["count"] for r in spark.read.format("delta").load(path).groupBy("p").count().collect()}
    assert counted == {"a": 7, "b": 1}
    assert summed(file_row_counts(spark, path, 3, "p")) == counted
    assert summed(file_row_counts(spark, path, 3)) == {None: 8}
    assert file_row_counts(spark, path, 2, "p") is None  # not the newest version
    assert table_row_counts(spark, path, 3, "p", ["a"]) == {"a": 7}
    assert table_row_counts(spark, path, 2, "p") == {"a": 7, "b": 2}  # counted by Spark at version 2
    assert file_row_counts(spark, str(tmp_path / "missing"), 0) is None

    many = str(tmp_path / "many")
    with session_confs(spark, {"spark.databricks.delta.allFilesInCrc.thresholdNumFiles": "2"}):
        for part in ("a", "b", "c"):
            rows(1, part).write.format("delta").mode("append").partitionBy("p").save(many)
    assert table_file_count(spark, many) == 3
    assert file_row_counts(spark, many, 2, "p") is None  # the checksum no longer lists the files
    assert table_row_counts(spark, many, 2, "p", ["a", "c"]) == {"a": 1, "c": 1}
    assert table_row_counts(spark, many, 2) == {None: 3}
