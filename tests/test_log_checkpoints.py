"""Log checkpoints written beside the stream (``delta_tables.log_checkpoints``) on real Delta tables: none in the
commits of a table whose interval is deferred, one every ``every`` commits after them, and the checkpointed log reads
as the commits did, for Spark from a cold log and for delta-rs, with the engine's table features in use. The
engine's own use (its later batches reading checkpointed logs, alerts still equal to the reference) is in
test_engine_contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession

from delta_tables.alert_cooldown import ALERT_COOLDOWN
from delta_tables.alerts import ALERTS
from delta_tables.arrow_reads import table_rows_at
from delta_tables.batch_log import BATCH_LOG
from delta_tables.bronze_transactions import bronze_spec
from delta_tables.bucket_state import BUCKET_STATE
from delta_tables.log_checkpoints import LogCheckpoints
from delta_tables.table_spec import CHECKPOINT_PROPERTY, DEFERRED_INTERVAL
from pipelines.base.jvm_classes import jvm_class
from pipelines.base.settings import Settings
from pipelines.engine.recovery import EnginePaths


def _checkpoints(path: str) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in Path(path, "_delta_log").glob("*.checkpoint*.parquet"))


def _rows(spark: SparkSession, path: str) -> list[tuple[int, int]]:
    return sorted((r["id"], r["batch"]) for r in spark.read.format("delta").load(path).collect())


def test_checkpoints_follow_the_commits_and_read_as_the_commits_did(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    _create(spark, path, {})
    checkpoints = LogCheckpoints(every=2)
    for batch in range(1, 6):  # versions 1..5
        spark.range(batch * 10, batch * 10 + 4).selectExpr("id", f"CAST({batch} AS BIGINT) AS batch").write.format(
            "delta"
        ).mode("append").save(path)
        checkpoints.after_commits(spark, [path])
    # Version 0 is the CREATE: two commits past "none" (-1) is version 1, then 3 and 5; the commits wrote none.
    assert _checkpoints(path) == [1, 3, 5] and checkpoints.written == [(path, 1), (path, 3), (path, 5)]
    last = json.loads(Path(path, "_delta_log", "_last_checkpoint").read_text())
    assert last["version"] == 5
    expected = sorted((batch * 10 + i, batch) for batch in range(1, 6) for i in range(4))
    assert _rows(spark, path) == expected
    # A cold reader starts from the checkpoint: Spark with its log cache cleared, and delta-rs.
    jvm_class(spark, "org.apache.spark.sql.delta.DeltaLog").clearCache()
    assert _rows(spark, path) == expected
    arrow = table_rows_at(path, version=5)
    assert arrow is not None and sorted((r["id"], r["batch"]) for r in arrow) == expected
    # A fresh object learns the last checkpoint from the log: one more commit is not due, the second is.
    later = LogCheckpoints(every=2)
    for batch in (6, 7):
        spark.range(1).selectExpr("id", f"CAST({batch} AS BIGINT) AS batch").write.format("delta").mode("append").save(
            path
        )
        later.after_commits(spark, [path])
    assert later.written == [(path, 7)] and _checkpoints(path) == [1, 3, 5, 7]


def _changes(spark: SparkSession, path: str) -> list[tuple[int, str, int]]:
    feed = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 1).load(path)
    return sorted((r["id"], r["_change_type"], r["_commit_version"]) for r in feed.collect())


def _create(spark: SparkSession, path: str, properties: dict[str, str]) -> None:
    options = {CHECKPOINT_PROPERTY: str(DEFERRED_INTERVAL), **properties}
    listed = ", ".join(f"'{k}' = '{v}'" for k, v in options.items())
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, batch BIGINT) USING delta TBLPROPERTIES ({listed})")


def test_deletion_vectors_and_the_change_feed_read_the_same_after_a_delta_rs_checkpoint(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The table features of the engine's tables (the bucket state and cooldown memory: deletion vectors; the alerts:
    the change data feed, append-only, invariants), each in use when delta-rs checkpoints the log."""
    vectors, feed = str(tmp_path / "vectors"), str(tmp_path / "feed")
    _create(spark, vectors, {"delta.enableDeletionVectors": "true"})
    _create(spark, feed, {"delta.enableChangeDataFeed": "true", "delta.appendOnly": "true"})
    for batch in range(1, 4):
        frame = spark.range(batch * 10, batch * 10 + 6).selectExpr("id", f"CAST({batch} AS BIGINT) AS batch")
        frame.write.format("delta").mode("append").save(vectors)
        frame.write.format("delta").mode("append").save(feed)
    spark.sql(f"DELETE FROM delta.`{vectors}` WHERE id % 3 = 0")  # version 4: deletion vectors, no rewrite
    log_text = "".join(p.read_text() for p in Path(vectors, "_delta_log").glob("*.json"))
    assert '"deletionVector"' in log_text  # the DELETE marked rows rather than rewriting files
    before = {path: _rows(spark, path) for path in (vectors, feed)}
    changes = _changes(spark, feed)
    checkpoints = LogCheckpoints(every=3)
    assert sorted(checkpoints.after_commits(spark, [vectors, feed])) == sorted([(vectors, 4), (feed, 3)])
    jvm_class(spark, "org.apache.spark.sql.delta.DeltaLog").clearCache()
    assert {path: _rows(spark, path) for path in (vectors, feed)} == before
    assert len(before[vectors]) == 12  # 18 rows, 6 deleted
    again = _changes(spark, feed)
    assert again == changes and len(changes) == 18
    with pytest.raises(Exception, match=r"(?i)append"):  # the append-only property came through the checkpoint
        spark.sql(f"DELETE FROM delta.`{feed}` WHERE id = 10")


def test_spark_writes_a_checkpoint_where_delta_rs_does_not_apply_one_table_a_call(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A table feature outside DELTA_RS_FEATURES (here column mapping): Spark's own checkpoint, the most overdue
    table first and one per call, so that two never fall in one batch. A table that does not defer its checkpoints
    is left to Delta."""
    paths = [str(tmp_path / name) for name in ("a", "b")]
    for path, commits in zip(paths, (3, 4), strict=True):
        _create(spark, path, {"delta.columnMapping.mode": "name"})
        for batch in range(commits):
            spark.range(2).selectExpr("id", f"CAST({batch} AS BIGINT) AS batch").write.format("delta").mode(
                "append"
            ).save(path)
    checkpoints = LogCheckpoints(every=2)
    assert checkpoints.after_commits(spark, paths) == [(paths[1], 4)]
    assert checkpoints.after_commits(spark, paths) == [(paths[0], 3)]
    assert checkpoints.after_commits(spark, paths) == []
    assert _checkpoints(paths[0]) == [3] and _checkpoints(paths[1]) == [4]
    assert LogCheckpoints(every=0).after_commits(spark, paths) == []  # off: Delta's own only
    own = str(tmp_path / "own")  # another interval (a lakehouse made before): Delta's own, left alone here
    _create(spark, own, {CHECKPOINT_PROPERTY: "10"})
    spark.range(2).selectExpr("id", "CAST(1 AS BIGINT) AS batch").write.format("delta").mode("append").save(own)
    assert LogCheckpoints(every=1).after_commits(spark, [own]) == [] and _checkpoints(own) == []


def test_the_tables_every_batch_commits_to_defer_their_checkpoints_on_this_disk_and_stagger_them_elsewhere(
    spark: SparkSession, settings: Settings
) -> None:
    """Bronze, the bucket state and the batch log commit once per micro-batch, the alerts and the cooldown memory
    once per alert-raising batch: Delta's own checkpoint in their commits would hold up one batch in a few. On this
    machine's disk the engine writes them after the batch; on an object store Delta's own, staggered."""
    fresh_lakehouse(spark, settings)
    for path in EnginePaths.of(settings).every_batch():
        properties = spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()
        assert {r["key"]: r["value"] for r in properties}[CHECKPOINT_PROPERTY] == str(DEFERRED_INTERVAL), path
    specs = [bronze_spec(settings.transaction_schema), BUCKET_STATE, BATCH_LOG, ALERTS, ALERT_COOLDOWN]
    every = {
        spec.name: int(spec.all_properties(f"s3a://bucket/lake/{spec.name}")[CHECKPOINT_PROPERTY]) for spec in specs
    }
    assert len(set(every.values())) == 5, every
    # Version v of each is batch v - 1 (version 0 is the CREATE); a checkpoint goes with each multiple of its interval.
    assert max(sum(v % n == 0 for n in every.values()) for v in range(1, 110)) == 1, every
    assert max(sum(v % n == 0 for n in every.values()) for v in range(1, 1001)) == 2, every
