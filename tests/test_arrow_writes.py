"""The registry and the batch log written on the driver by delta-rs (``delta_tables.arrow_writes``) are what Spark
would have written: Spark's Delta reader reads the same rows at every version (past delta-rs' own checkpoint too),
the batch's tag is found where a replay looks for it, and Spark can write the table again after it. Where delta-rs
does not apply (a path on an object store, a table with table features) nothing is committed by it and Spark writes.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession

from delta_tables.arrow_writes import append_rows_at, overwrite_rows_at
from delta_tables.batch_log import BATCH_LOG_SCHEMA, log_batch, previous_batch
from delta_tables.idempotent import CommitTag, append_tagged, batch_commits
from delta_tables.local_rows import local_frame
from delta_tables.rule_states import RULE_STATES_SCHEMA, replace_registry
from delta_tables.table_snapshot import table_version
from pipelines.base.settings import Settings
from pipelines.engine.states import RegistryEntry, read_registry

CHECKPOINTED = 12
"""Writes enough for delta-rs to checkpoint the log (the registry's ``delta.checkpointInterval`` is 10)."""
NOW = dt.datetime(2026, 11, 29, 6, 30, 15, 123456)  # naive: UTC, as the engine's rows


def _rows(n: int, window: int) -> list[tuple[Any, ...]]:
    return [(f"s-{i}", '{"keys":["payerId"]}', window + i, i, 7, NOW) for i in range(n)]


def _spark_rows(spark: SparkSession, path: str, version: int) -> list[tuple[Any, ...]]:
    frame = spark.read.format("delta").option("versionAsOf", version).load(path)
    utc = frame.selectExpr("*", "to_utc_timestamp(updatedAt, current_timezone()) AS utc").drop("updatedAt")
    return sorted(
        (r.stateId, r.signature, r.windowMinutes, r.createdBatchId, r.updatedBatchId, r.utc) for r in utc.collect()
    )


def test_the_registry_written_by_delta_rs_is_what_spark_reads_and_tags_it_for_replays(
    spark: SparkSession, settings: Settings
) -> None:
    fresh_lakehouse(spark, settings)
    path = settings.table_path("rule_states")
    written: dict[int, list[tuple[Any, ...]]] = {}
    for batch in range(CHECKPOINTED):
        rows = _rows(1 + batch % 3, window=10 * (batch + 1))
        tag = CommitTag("engine-arrow", batch, "registry", {"rules": batch})
        replace_registry(spark, rows, path, tag=tag)
        version = table_version(spark, path)
        written[version] = sorted(rows)
        if batch in (0, CHECKPOINTED - 1):
            assert batch_commits(spark, path, "engine-arrow", batch) == [tag]
    assert any(p.name.endswith(".checkpoint.parquet") for p in Path(path, "_delta_log").iterdir())

    for version, rows in written.items():
        assert read_registry(spark, path, version=version) == {
            r[0]: RegistryEntry(r[0], r[2], r[3], r[4]) for r in rows
        }
    newest = max(written)
    for version in (min(written), newest // 2, newest):  # Spark's reader, before and past delta-rs' checkpoint
        assert _spark_rows(spark, path, version) == written[version]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where("version > 0").select("engineInfo").collect()
    assert {str(r.engineInfo).split(":")[0] for r in history} == {"delta-rs"}  # no Spark job wrote it

    spark_rows = _rows(2, window=5)  # Spark writes the table after delta-rs, as a Spark-only install would
    local_frame(spark, spark_rows, RULE_STATES_SCHEMA).write.format("delta").mode("overwrite").save(path)
    assert _spark_rows(spark, path, table_version(spark, path)) == sorted(spark_rows)
    replace_registry(spark, _rows(1, window=99), path, tag=None)
    assert _spark_rows(spark, path, table_version(spark, path)) == _rows(1, window=99)


def test_it_declines_what_it_cannot_write_as_spark_does_and_commits_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    assert not overwrite_rows_at("s3a://bucket/lake/rule_states", _rows(1, 10), RULE_STATES_SCHEMA, user_metadata=None)
    assert not overwrite_rows_at(str(tmp_path / "nothing"), _rows(1, 10), RULE_STATES_SCHEMA, user_metadata=None)
    assert not (tmp_path / "nothing").exists()

    for name, feature in (("with_vectors", "delta.enableDeletionVectors"), ("row_tracking", "delta.enableRowTracking")):
        path = str(tmp_path / name)  # table features: delta-rs 1.6 would write the first, refuses the second
        local_frame(spark, _rows(2, 10), RULE_STATES_SCHEMA).write.format("delta").option(feature, "true").save(path)
        before = table_version(spark, path)
        assert not overwrite_rows_at(path, _rows(1, 30), RULE_STATES_SCHEMA, user_metadata=None)
        assert table_version(spark, path) == before
    tag = CommitTag("engine-arrow", 3, "registry")
    replace_registry(spark, _rows(3, 60), path, tag=tag)
    assert _spark_rows(spark, path, table_version(spark, path)) == sorted(_rows(3, 60))
    assert batch_commits(spark, path, "engine-arrow", 3) == [tag]


def _log_row(batch: int) -> dict[str, Any]:
    return {
        "job": "engine-arrow",
        "batchId": batch,
        "rulesVersion": 3 if batch else None,
        "startedAt": NOW + dt.timedelta(seconds=batch),
        "finishedAt": NOW + dt.timedelta(seconds=batch, milliseconds=2500),
        "durationMs": 2500.5,
        "counts": {"rows": 2000 + batch, "alerts": batch},
        "metrics": {"plan": 350.25, "evaluate": 2033.0},
        "maxEventTimeMs": None if batch == 0 else 1_795_000_000_000 + batch,
        "pins": {"rules": 3, "state": None, "bronze": batch},
    }


def _log_rows(spark: SparkSession, path: str) -> list[tuple[Any, ...]]:
    frame = spark.read.format("delta").load(path)
    utc = frame.selectExpr(
        "*",
        "to_utc_timestamp(startedAt, current_timezone()) AS s",
        "to_utc_timestamp(finishedAt, current_timezone()) AS f",
    )
    return sorted(
        (r.job, r.batchId, r.rulesVersion, r.s, r.f, r.durationMs, r.counts, r.metrics, r.maxEventTimeMs, r.pins)
        for r in utc.collect()
    )


def test_the_batch_log_appended_by_delta_rs_is_what_spark_appends_and_tags_it_for_replays(
    spark: SparkSession, settings: Settings
) -> None:
    """The engine's end-of-batch row (maps, doubles, timestamps, nulls in a map and a column) by ``log_batch``, beside
    the same rows appended by Spark to a twin table: Spark reads the two alike, the tag is where a replay looks, and
    the engine's reader of the previous batch finds it."""
    fresh_lakehouse(spark, settings)
    path, twin = settings.table_path("batch_log"), settings.table_path("batch_log_twin")
    rows = [_log_row(batch) for batch in range(3)]
    local_frame(spark, [], BATCH_LOG_SCHEMA).write.format("delta").save(twin)
    for row in rows:
        tag = CommitTag("engine-arrow", row["batchId"], "batch-log", {"rules": 3})
        log_batch(spark, path, row, tag=tag)
        append_tagged(local_frame(spark, [row], BATCH_LOG_SCHEMA), twin, tag)
        assert batch_commits(spark, path, "engine-arrow", row["batchId"]) == [tag]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where("version > 0").select("engineInfo").collect()
    assert {str(r.engineInfo).split(":")[0] for r in history} == {"delta-rs"}  # no Spark job wrote it
    assert _log_rows(spark, path) == _log_rows(spark, twin)
    assert len(_log_rows(spark, path)) == 3 and _log_rows(spark, path)[2][6] == {"rows": 2002, "alerts": 2}
    previous = previous_batch(spark, path, "engine-arrow", 2)
    assert (
        previous is not None
        and previous["batchId"] == 1
        and previous["pins"] == {"rules": 3, "state": None, "bronze": 1}
    )
    assert not append_rows_at(
        "s3a://bucket/lake/batch_log", [tuple(rows[0].values())], BATCH_LOG_SCHEMA, user_metadata=None
    )
