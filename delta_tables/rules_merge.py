"""The rules-table MERGE: newest source position wins, tombstones instead of deletes, replay-safe.

Example::

    commit = merge_rules(spark, settings.table_path("rules"), rows_df, truncate_below=None, marker_id=-1,
                         commit_tag=commit_tag("app", 7), txn=("app", 7))
    commit.version, commit.metrics["numTargetRowsUpdated"]
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from delta_tables.local_rows import local_frame
from delta_tables.rules import RULE_CONTENT_COLUMNS, RULES_SCHEMA
from pipelines.base.spark_session import session_confs

TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
# The MERGE source is a small local frame built on the driver: deterministic, no need to materialise it.
MATERIALIZE_SOURCE_CONF = "spark.databricks.delta.merge.materializeSource"
_HISTORY_SCAN = 50


def merge_rules(
    spark: SparkSession,
    path: str,
    rows: DataFrame,
    *,
    truncate_below: tuple[str, int | None] | None,
    marker_id: int,
    commit_tag: str,
    txn: tuple[str, int] | None,
) -> MergeCommit | None:
    """MERGE one row per rule id into the rules table; return its commit (version and metrics).

    Condition: ``t.ruleId = s.ruleId``. Clauses, in this order:

    1. ``whenMatchedUpdateAll(s.sourcePosition > t.sourcePosition)`` — a newer event replaces the row
       (content, state, position); an older or equal one changes nothing, so replays and reordering are inert.
    2. ``whenNotMatchedInsertAll()`` — the first event of a rule, a tombstone included (so a stale create
       arriving later cannot resurrect it).
    3. only with ``truncate_below = (W, ts)``: ``whenNotMatchedBySourceUpdate(t.ruleId <> marker AND
       t.sourcePosition < W)`` — the truncate tombstones every other older row: state DELETED, content
       cleared, position W, op ``t``. (Rows of this batch older than W arrive already as such tombstones.)

    ``rows`` has RULES_SCHEMA and at most one row per ruleId. With ``txn = (appId, version)`` the commit is
    idempotent: Delta skips it if that app id already committed that version (a replayed micro-batch).
    ``commit_tag`` goes into the commit's userMetadata; ``find_commit`` finds the commit by it.
    """
    table = DeltaTable.forPath(spark, path)
    merge = (
        table.alias("t")
        .merge(rows.alias("s"), "t.ruleId = s.ruleId")
        .whenMatchedUpdateAll(condition="s.sourcePosition > t.sourcePosition")
        .whenNotMatchedInsertAll()
    )
    if truncate_below is not None:
        position, ts_ms = truncate_below
        tombstone: dict[str, str | Column] = {name: F.lit(None) for name in RULE_CONTENT_COLUMNS}
        tombstone.update(
            {
                "ruleState": F.lit("DELETED"),
                "disabled": F.lit(False),
                "sourcePosition": F.lit(position),
                "sourceOp": F.lit("t"),
                "sourceTsMs": F.lit(ts_ms).cast("long"),
                "tombstonedAt": F.current_timestamp(),
                "updatedAt": F.current_timestamp(),
            }
        )
        merge = merge.whenNotMatchedBySourceUpdate(
            condition=(F.col("t.ruleId") != F.lit(marker_id)) & (F.col("t.sourcePosition") < F.lit(position)),
            set=tombstone,
        )
    confs = _txn_confs(txn) | {USER_METADATA_CONF: commit_tag, MATERIALIZE_SOURCE_CONF: "none"}
    with session_confs(spark, confs):
        merge.execute()
    return find_commit(table, commit_tag)


@dataclass(frozen=True)
class MergeCommit:
    """A commit of the rules table: its version and integer operationMetrics (``numTargetRowsUpdated``, ...)."""

    version: int
    metrics: dict[str, int]


def find_commit(table: DeltaTable, commit_tag: str, scan: int = _HISTORY_SCAN) -> MergeCommit | None:
    """The recent commit whose userMetadata is ``commit_tag``, if any (the newest commit is checked first)."""
    columns = ("version", "userMetadata", "operationMetrics")
    row = table.history(1).select(*columns).first()
    if row is None or row["userMetadata"] != commit_tag:
        row = table.history(scan).where(F.col("userMetadata") == commit_tag).select(*columns).first()
    if row is None:
        return None
    metrics = row["operationMetrics"] or {}
    return MergeCommit(int(row["version"]), {k: int(v) for k, v in metrics.items() if v.lstrip("-").isdigit()})


def commit_tag(app_id: str, batch_id: int) -> str:
    return json.dumps({"app": app_id, "batch": batch_id}, separators=(",", ":"))


def rules_frame(spark: SparkSession, rows: list[dict[str, object]]) -> DataFrame:
    """A batch's rule rows as a MERGE source: a local relation, no Python RDD (``local_rows``)."""
    return local_frame(spark, rows, RULES_SCHEMA)


def _txn_confs(txn: tuple[str, int] | None) -> dict[str, str]:
    if txn is None:
        return {}
    app_id, version = txn
    return {TXN_APP_ID_CONF: app_id, TXN_VERSION_CONF: str(version)}
