"""Alert cooldown memory: per (rule, key) the latest event time of an *emitted* alert.

A rule with ``cooldownMinutes = C`` suppresses an alert for a transaction at ``t`` when its pair has an earlier
emitted alert at ``t_a`` with ``t < t_a + C``. Rows live while the rule id is live; the engine deletes a rule's
rows when its id leaves the rules in force, and rows older than any possible cooldown at retention time.

Example::

    merge_last_alerts(spark, settings.table_path("alert_cooldown"), last_alerts, batch_id=7, txn=txn)
"""

from __future__ import annotations

from collections.abc import Collection

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from delta_tables.idempotent import Txn, idempotent_dml
from delta_tables.table_spec import TableSpec

ALERT_COOLDOWN_SCHEMA = StructType(
    [
        StructField("ruleId", LongType(), False),
        StructField("keyValue", StringType(), False),
        StructField("lastAlertTimeMs", LongType(), False),
        StructField("lastBatchId", LongType(), False),
        StructField("updatedAt", TimestampType(), False),
    ]
)

ALERT_COOLDOWN = TableSpec(
    name="alert_cooldown",
    schema=ALERT_COOLDOWN_SCHEMA,
    comment="Latest emitted alert event time per (rule, key), for rule cooldowns.",
    properties={"delta.enableDeletionVectors": "true"},
)


def merge_last_alerts(
    spark: SparkSession, path: str, last_alerts: DataFrame, *, batch_id: int, txn: Txn | None
) -> None:
    """MERGE a batch's latest emitted alert per (ruleId, keyValue, lastAlertTimeMs).

    Condition: ``t.ruleId = s.ruleId AND t.keyValue = s.keyValue``. Clauses, in this order:

    1. ``whenMatchedUpdate`` — ``lastAlertTimeMs = greatest(t, s)`` (an older alert never moves it back).
    2. ``whenNotMatchedInsert`` — the pair's first alert.

    ``greatest`` makes a repeat harmless; ``txn`` also skips the repeated commit.
    """
    last_alerts = last_alerts.withColumn("lastBatchId", F.lit(batch_id).cast("long"))  # a column: same code each batch
    stamp: dict[str, str | Column] = {"lastBatchId": F.col("s.lastBatchId"), "updatedAt": F.current_timestamp()}
    update: dict[str, str | Column] = {"lastAlertTimeMs": F.expr("greatest(t.lastAlertTimeMs, s.lastAlertTimeMs)")}
    insert: dict[str, str | Column] = {name: F.col(f"s.{name}") for name in ("ruleId", "keyValue", "lastAlertTimeMs")}
    with idempotent_dml(spark, txn):
        (
            DeltaTable.forPath(spark, path)
            .alias("t")
            .merge(last_alerts.alias("s"), "t.ruleId = s.ruleId AND t.keyValue = s.keyValue")
            .whenMatchedUpdate(set=update | stamp)
            .whenNotMatchedInsert(values=insert | stamp)
            .execute()
        )


def forget_rules(
    spark: SparkSession, path: str, rule_ids: Collection[int], *, older_than_ms: int | None, txn: Txn | None
) -> None:
    """Delete the memory of these rule ids, and (``older_than_ms``) every row older than any cooldown can reach."""
    parts = []
    if rule_ids:
        parts.append(f"ruleId IN ({', '.join(str(int(r)) for r in sorted(rule_ids))})")
    if older_than_ms is not None:
        parts.append(f"lastAlertTimeMs < {int(older_than_ms)}")
    if not parts:
        return
    with idempotent_dml(spark, txn):
        DeltaTable.forPath(spark, path).delete(" OR ".join(parts))
