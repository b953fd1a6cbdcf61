"""A micro-batch's small appends (its alerts, its cooldown memory) written from the driver by delta-rs
(``append_tagged`` with ``rows_at_most``: ``arrow_writes.append_frame_at``) are what Spark would have appended:
Spark reads the same rows (decimals, dates, booleans, nulls, the partition column), the change data feed sees them
as inserts, the batch's tag is where a replay looks for it, the version has its checksum, and Spark appends after
them. Where delta-rs does not apply (too many rows for the driver, a feature it is not trusted with), Spark writes.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from delta_checks import checksum_agrees
from lakehouse_template import fresh_lakehouse
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from delta_tables.alert_cooldown import ALERT_COOLDOWN_SCHEMA, append_last_alerts
from delta_tables.alerts import ALERTS_SCHEMA
from delta_tables.arrow_writes import DRIVER_APPEND_ROWS
from delta_tables.bucket_state import BUCKET_STATE_SCHEMA, append_tiles
from delta_tables.idempotent import CommitTag, append_tagged, batch_commits
from delta_tables.local_rows import local_frame
from delta_tables.table_snapshot import table_version
from pipelines.base.settings import Settings

NOW = dt.datetime(2026, 12, 2, 21, 30, 15, 123456)  # naive: UTC, as the engine's rows


def _alert(i: int, *, day: int = 2) -> dict[str, Any]:
    detected = NOW.replace(day=day) + dt.timedelta(seconds=i)
    return {
        "alertId": f"a-{i}",
        "ruleId": 100 + i % 3,
        "ruleSourcePosition": None if i % 2 else f"lsn:{i}",
        "ruleSnapshot": json.dumps({"ruleId": 100 + i % 3}),
        "rulesVersion": 4,
        "keyValue": f"payer-{i}",
        "transactionId": f"tx-{i}",
        "eventTime": detected - dt.timedelta(seconds=2),
        "aggregateValue": Decimal("1234567890123.456789") + i,
        "aggregatorFunctionType": "SUM",
        "limitOperatorType": "GREATER",
        "limit": Decimal("1000.5"),
        "windowMinutes": 60,
        "detectedAt": detected,
        "batchId": 7,
        "ingestedAt": None if i == 0 else detected - dt.timedelta(seconds=1),
        "latencyMs": 1000 + i,
        "detectedDate": detected.date(),
        "shadow": i == 1,
        "baselineValue": None if i % 2 else Decimal("-0.000001"),
    }


def _rows(frame: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in frame.collect())


def _engines(spark: SparkSession, path: str, after: int) -> list[str]:
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where(f"version > {after}").orderBy("version")
    return [str(r.engineInfo).split(":")[0] for r in history.select("engineInfo").collect()]


def _with_twin(
    spark: SparkSession, settings: Settings, table: str, schema: StructType, partition: str
) -> tuple[str, str, int]:
    """A fresh lakehouse's ``table``, an empty twin of it for Spark's appends, and the table's version now."""
    fresh_lakehouse(spark, settings)
    path, twin = settings.table_path(table), str(Path(settings.lakehouse_root) / f"{table}_twin")
    local_frame(spark, [], schema).write.format("delta").partitionBy(partition).save(twin)
    return path, twin, table_version(spark, path)


def test_alerts_appended_by_delta_rs_read_as_spark_appends_them_and_carry_the_tag(
    spark: SparkSession, settings: Settings
) -> None:
    path, twin, start = _with_twin(spark, settings, "alerts", ALERTS_SCHEMA, "detectedDate")
    batches = [[_alert(i) for i in range(4)], [_alert(i, day=3) for i in range(4, 6)]]
    for batch, alerts in enumerate(batches):
        tag = CommitTag("engine-arrow", batch, "alerts", {"rules": 4})
        frame = local_frame(spark, alerts, ALERTS_SCHEMA)
        append_tagged(frame, path, tag, files=1, rows_at_most=len(alerts))
        append_tagged(frame, twin, tag, files=1)
        assert batch_commits(spark, path, "engine-arrow", batch) == [tag]
        checksum_agrees(spark, path, table_version(spark, path))  # carried: Spark reconstructs no state for it
    assert _engines(spark, path, start) == ["delta-rs", "delta-rs"]  # no Spark job wrote them
    table = spark.read.format("delta").load(path)
    assert _rows(table) == _rows(spark.read.format("delta").load(twin))
    assert table.where("detectedDate = DATE'2026-12-03'").count() == 2  # the partition column as Spark writes it
    changes = (
        spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", start + 1).load(path)
    )
    assert sorted((r.alertId, r._change_type) for r in changes.collect()) == [(f"a-{i}", "insert") for i in range(6)]

    append_tagged(local_frame(spark, [_alert(9)], ALERTS_SCHEMA), path, None)  # Spark appends after delta-rs
    assert spark.read.format("delta").load(path).count() == 7
    checksum_agrees(spark, path, table_version(spark, path))  # Spark's own, derived from the carried one


def test_the_cooldown_memory_appended_by_delta_rs_beside_its_deletion_vectors(
    spark: SparkSession, settings: Settings
) -> None:
    fresh_lakehouse(spark, settings)
    path = settings.table_path("alert_cooldown")
    start = table_version(spark, path)
    rows = [(101, f"payer-{i}", 1_796_000_000_000 + i, 7, NOW) for i in range(3)]
    tag = CommitTag("engine-arrow", 7, "cooldown", {"rules": 4})
    append_last_alerts(
        local_frame(spark, rows, ALERT_COOLDOWN_SCHEMA), path, batch_id=None, tag=tag, files=1, rows_at_most=3
    )
    assert _engines(spark, path, start) == ["delta-rs"]
    assert batch_commits(spark, path, "engine-arrow", 7) == [tag]
    checksum_agrees(spark, path, start + 1)
    assert _rows(spark.read.format("delta").load(path).drop("updatedAt")) == sorted(r[:4] for r in rows)


def test_a_batchs_tiles_appended_by_delta_rs_into_their_state_partitions(
    spark: SparkSession, settings: Settings
) -> None:
    """The state table (partitioned by state, deletion vectors enabled): tiles with and without distinct values."""
    path, twin, start = _with_twin(spark, settings, "bucket_state", BUCKET_STATE_SCHEMA, "stateId")
    tiles = [
        (
            "aa01",
            f"payer-{k}",
            k % 2,
            1_796_000_000_000 + k * 60_000,
            Decimal(f"{k}.5"),
            k + 1,
            k,
            None,
            Decimal("9.000001"),
            7,
            NOW,
            None if k % 2 else [f"v{k}", "w"],
        )
        for k in range(5)
    ] + [("bb02", "payer-1", 0, 1_796_000_000_000, None, 1, 0, None, None, 7, NOW, None)]
    tag = CommitTag("engine-arrow", 7, "state", {"rules": 4})
    frame = local_frame(spark, tiles, BUCKET_STATE_SCHEMA)
    append_tiles(frame, path, batch_id=None, tag=tag, files=1, rows_at_most=len(tiles))
    append_tiles(frame, twin, batch_id=None, tag=tag, files=1)
    assert _engines(spark, path, start) == ["delta-rs"]
    assert batch_commits(spark, path, "engine-arrow", 7) == [tag]
    checksum_agrees(spark, path, start + 1)
    assert _rows(spark.read.format("delta").load(path)) == _rows(spark.read.format("delta").load(twin))
    assert spark.read.format("delta").load(path).where("stateId = 'bb02'").count() == 1


def test_spark_appends_what_delta_rs_is_not_given(spark: SparkSession, settings: Settings, tmp_path: Path) -> None:
    fresh_lakehouse(spark, settings)
    path = settings.table_path("alerts")
    start = table_version(spark, path)
    frame = local_frame(spark, [_alert(0)], ALERTS_SCHEMA)
    append_tagged(frame, path, None, rows_at_most=DRIVER_APPEND_ROWS + 1)  # too many for the driver
    append_tagged(frame, path, None)  # no bound given
    tracked = str(tmp_path / "row_tracking")  # a feature delta-rs is not trusted with here
    local_frame(spark, [], ALERTS_SCHEMA).write.format("delta").option("delta.enableRowTracking", "true").save(tracked)
    append_tagged(frame, tracked, None, rows_at_most=1)
    engines = _engines(spark, path, start)
    assert len(engines) == 2 and all(e.startswith("Apache-Spark") for e in engines)
    assert all(e.startswith("Apache-Spark") for e in _engines(spark, tracked, 0))
    assert spark.read.format("delta").load(tracked).count() == 1
