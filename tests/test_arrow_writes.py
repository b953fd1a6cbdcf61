"""The registry written on the driver by delta-rs (``delta_tables.arrow_writes``) is what Spark would have written:
Spark's Delta reader reads the same rows at every version (past delta-rs' own checkpoint too), the batch's tag is
found where a replay looks for it, and Spark can write the table again after it. Where delta-rs does not apply
(a path on an object store, a table with table features) nothing is committed by it and Spark writes.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession

from delta_tables.arrow_writes import overwrite_rows_at
from delta_tables.idempotent import CommitTag, batch_commits
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
