"""Emitted alerts -> rows of the alerts table, and their JSON for the Kafka alerts topic (live alerts only: a
SHADOW rule's alerts are rows of the table with ``shadow = true`` and never reach the topic).

``alertId`` is ``<ruleId>:<transactionId>``: deterministic, so a replayed batch produces the same ids (and the
Delta append is skipped as already committed; Kafka consumers can deduplicate on it: that sink is at-least-once).
The JSON carries ``ingestedAt`` (the transaction's Kafka record timestamp or file time) and ``detectedAt``, so a
consumer (``fraudlake alerts tail``) can measure ingestion-to-alert latency against the alert's own record time.

Example::

    rows = alert_rows(emitted, rules_version=12, batch_id=7, detected_at=now)
    write_alerts_to_kafka(rows, settings)
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from delta_tables.alerts import ALERTS_SCHEMA, live_alerts
from pipelines.base.column_memo import per_jvm
from pipelines.base.kafka_clients import spark_kafka_options
from pipelines.base.settings import Settings
from pipelines.engine.parse_transactions import as_column

EXPORT_FIELDS = (
    "alertId",
    "ruleId",
    "transactionId",
    "keyValue",
    "aggregateValue",
    "aggregatorFunctionType",
    "limitOperatorType",
    "limit",
    "windowMinutes",
    "eventTime",
    "ingestedAt",
    "detectedAt",
    "latencyMs",
    "rulesVersion",
    "batchId",
    "baselineValue",
)


def alert_rows(
    emitted: DataFrame, *, rules_version: int | Column, batch_id: int | Column, detected_at: dt.datetime | Column
) -> DataFrame:
    """ALERTS_SCHEMA rows of the emitted candidates (``evaluate`` + ``cooldown`` output); the per-batch values may
    be columns (of the batch's constants, joined in: see ``parse_transactions.as_column``)."""
    detected = detected_at if isinstance(detected_at, Column) else F.lit(detected_at).cast("timestamp")
    frame = emitted.select(
        F.concat(F.col("ruleId").cast("string"), F.lit(":"), F.col("transactionId")).alias("alertId"),
        "ruleId",
        "ruleSourcePosition",
        "ruleSnapshot",
        as_column(rules_version).alias("rulesVersion"),
        "keyValue",
        "transactionId",
        "eventTime",
        "aggregateValue",
        "aggregatorFunctionType",
        "limitOperatorType",
        "limit",
        "windowMinutes",
        detected.alias("detectedAt"),
        as_column(batch_id).alias("batchId"),
        "ingestedAt",
        (F.unix_millis(detected) - F.unix_millis("ingestedAt")).alias("latencyMs"),
        F.to_date(detected).alias("detectedDate"),
        F.col("shadow") if "shadow" in emitted.columns else F.lit(False).alias("shadow"),
        F.col("baselineValue") if "baselineValue" in emitted.columns else F.lit(None).alias("baselineValue"),
    )
    return frame.select(*_alert_columns())


@per_jvm
def _alert_columns() -> tuple[Column, ...]:
    """The alerts table's columns, each cast to its type (built once per JVM: ``column_memo``)."""
    return tuple(F.col(f.name).cast(f.dataType) for f in ALERTS_SCHEMA.fields)


def alert_json(alerts: DataFrame) -> DataFrame:
    """One JSON object per alert (the export fields, ``key`` = the key string), column ``json``."""
    fields = [F.col(name).alias("key" if name == "keyValue" else name) for name in EXPORT_FIELDS]
    return alerts.select(F.col("alertId"), F.to_json(F.struct(*fields)).alias("json"))


def write_alerts_to_kafka(alerts: DataFrame, settings: Settings) -> None:
    """Send the live alerts to the alerts topic (key = alertId, value = JSON); a SHADOW rule's alerts never go
    there (``delta_tables.alerts.live_alerts``). At-least-once: a replay may resend."""
    (
        alert_json(live_alerts(alerts))
        .select(F.col("alertId").alias("key"), F.col("json").alias("value"))
        .write.format("kafka")
        .options(**spark_kafka_options(settings))
        .option("topic", settings.kafka.topics.alerts)
        .save()
    )
