"""Apply a batch of rule CDC records: quarantine the invalid, MERGE the rest, log every applied event.

The same function serves ``fraudlake rules apply FILE``, ``rules delete-all`` and each micro-batch of the
streaming job. Writes, in order (each idempotent when ``txn=(app_id, batch_id)`` is given, so a replayed
micro-batch changes nothing and duplicates no log row):

1. quarantine append (``txnAppId``/``txnVersion`` write options): the invalid records, the events of another
   position kind, and the *stale* events: not newer than their rule's row and never applied (their change is
   not in the change log), each with "stale: position X is older than rule N's Y". A stale event whose change
   is in the change log is a redelivery and only counted (``duplicates``);
2. rules MERGE (``delta_tables.rules_merge``; the txn SQL confs, and a userMetadata tag to find its version);
3. change-log append with the version the MERGE committed.

On a replay whose MERGE had already committed, the table is read *as of the version before* that commit, so
the plan (and the change log written if the first attempt died before it) is the same as the first time.

Example::

    result = apply_records(spark, settings, [RawRecord(line, f"file:{path}:{n}") for n, line in ...])
    result.applied, result.quarantined, result.rules_version
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from delta_tables.local_rows import local_frame
from delta_tables.quarantine import QUARANTINE, QUARANTINE_SCHEMA
from delta_tables.rule_changes import RULE_CHANGES, RULE_CHANGES_SCHEMA
from delta_tables.rules import RULES
from delta_tables.rules_merge import commit_tag, find_commit, merge_rules, rules_frame
from delta_tables.table_spec import create_table, file_retention
from pipelines.base.settings import Settings
from rules_cdc.parse_events import ChangeEvent, ParsedBatch, RawRecord, Rejected, parse_records
from rules_cdc.plan_changes import BatchPlan, TableView, Watermark, change_identity, plan_batch, split_stale
from rules_cdc.rule_rows import LIVE_STATES, TRUNCATE_MARKER_ID
from rules_cdc.source_position import change_key

log = logging.getLogger(__name__)

QUARANTINE_SOURCE = "rules_cdc"


@dataclass
class ApplyResult:
    """What one batch did. Every record is an event, a parse rejection or a Kafka tombstone; of the distinct
    events of the table's position kind, ``applied + duplicates + stale`` counts each once. ``quarantined``
    counts the parse rejections, the events of another kind and the stale events."""

    records: int = 0
    events: int = 0
    applied: int = 0  # distinct events newer than the table's row for their rule
    logged: int = 0  # change-log rows of this batch (on a replay: those its first attempt wrote)
    duplicates: int = 0  # not newer, and their change is in the change log: a redelivery, counted
    stale: int = 0  # not newer, and never applied: quarantined with "stale: position X is older than ..."
    quarantined: int = 0
    kafka_tombstones: int = 0
    rules_version: int | None = None
    replayed: bool = False
    merge_metrics: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        version = "-" if self.rules_version is None else str(self.rules_version)
        return (
            f"{self.records} records: {self.applied} applied ({self.logged} change-log rows), "
            f"{self.duplicates} duplicate, {self.quarantined} quarantined ({self.stale} stale), "
            f"{self.kafka_tombstones} kafka tombstones; rules version {version}"
        )


def ensure_rules_tables(spark: SparkSession, settings: Settings) -> None:
    """Create the rules, rule_changes and quarantine tables if missing: idempotent, and safe while the engine's
    ``init_lakehouse`` (or another job) creates the same tables (``create_table`` takes a lost race)."""
    retention = file_retention(settings.maintenance.vacuum_retention_hours)
    for spec in (RULES, RULE_CHANGES, QUARANTINE):
        create_table(spark, spec, settings.table_path(spec.name), properties=retention)


def apply_records(
    spark: SparkSession,
    settings: Settings,
    records: Iterable[RawRecord],
    *,
    txn: tuple[str, int] | None = None,
    now: dt.datetime | None = None,
) -> ApplyResult:
    """Parse and apply one batch of records; ``txn=(app_id, batch_id)`` makes a replay of it a no-op."""
    parsed = parse_records(records, settings.transaction_schema)
    return apply_parsed(spark, settings, parsed, txn=txn, now=now)


def apply_parsed(
    spark: SparkSession,
    settings: Settings,
    parsed: ParsedBatch,
    *,
    txn: tuple[str, int] | None = None,
    now: dt.datetime | None = None,
) -> ApplyResult:
    """Apply an already parsed batch: plan against the table (as of before this batch's MERGE on a replay),
    then quarantine, MERGE and change-log writes; see the module docstring."""
    now = now or dt.datetime.now(dt.UTC).replace(tzinfo=None)
    result = ApplyResult(records=parsed.records, events=len(parsed.events), kafka_tombstones=parsed.kafka_tombstones)
    if parsed.records == 0:
        return result
    rules_path = settings.table_path(RULES.name)
    tag = commit_tag(txn[0], txn[1]) if txn else commit_tag(f"adhoc-{uuid.uuid4().hex}", 0)
    prior = find_commit(DeltaTable.forPath(spark, rules_path), tag) if txn else None
    view = read_view(spark, rules_path, version=None if prior is None else prior.version - 1)
    plan = plan_batch(parsed.events, view, now)
    logged = logged_changes(spark, settings, plan.stale) if plan.stale else set()
    duplicates, stale = split_stale(plan.stale, view, logged)
    refused = [*plan.rejected, *stale]
    rejected = parsed.rejected + [Rejected(RawRecord(e.raw, e.source_offset), why) for e, why in refused]
    batch_id = txn[1] if txn else None
    result.quarantined = write_quarantine(spark, settings, rejected, batch_id=batch_id, txn=txn, now=now)
    result.applied, result.duplicates, result.stale = len(plan.applied), len(duplicates), len(stale)
    if plan.rows:
        if prior is None:
            commit = merge_rules(
                spark,
                rules_path,
                rules_frame(spark, list(plan.rows)),
                truncate_below=_as_pair(plan.truncate_below),
                marker_id=TRUNCATE_MARKER_ID,
                commit_tag=tag,
                txn=txn,
            )
        else:
            commit, result.replayed = prior, True
        if commit is not None:
            result.rules_version, result.merge_metrics = commit.version, commit.metrics
    result.logged = write_change_log(spark, settings, plan, result.rules_version, batch_id=batch_id, txn=txn, now=now)
    log.info("rules CDC batch %s: %s", batch_id, result.summary())
    return result


def read_view(spark: SparkSession, rules_path: str, version: int | None = None) -> TableView:
    """Positions of every rules row, the live rows, and the truncate watermark (collected: the table is small)."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    rows = [r.asDict(recursive=True) for r in reader.load(rules_path).collect()]
    positions = {int(r["ruleId"]): str(r["sourcePosition"]) for r in rows}
    live = {int(r["ruleId"]): r for r in rows if r["ruleState"] in LIVE_STATES}
    marker = next((r for r in rows if r["ruleId"] == TRUNCATE_MARKER_ID), None)
    watermark = Watermark(marker["sourcePosition"], marker["sourceTsMs"]) if marker else None
    return TableView(positions=positions, live_rows=live, watermark=watermark)


def logged_changes(spark: SparkSession, settings: Settings, events: Iterable[ChangeEvent]) -> set[tuple[int, str, str]]:
    """The identities (``change_identity``) in the change log of the rules and positions of ``events``: which
    of them were applied before. Only their rules' rows in the span of their positions reach the driver."""
    events = list(events)
    keys = [change_key(e.position) for e in events]
    frame = spark.read.format("delta").load(settings.table_path(RULE_CHANGES.name))
    rows = (
        frame.where(F.col("ruleId").isin(*sorted({e.rule_id for e in events})))
        .where(F.col("sourcePosition").between(F.lit(min(keys)), F.lit(max(keys) + "~")))
        .select("ruleId", "sourcePosition", "op")
        .collect()
    )
    return {change_identity(int(r["ruleId"]), str(r["sourcePosition"]), str(r["op"])) for r in rows}


def write_quarantine(
    spark: SparkSession,
    settings: Settings,
    rejected: list[Rejected],
    *,
    batch_id: int | None,
    txn: tuple[str, int] | None,
    now: dt.datetime,
) -> int:
    """Append rejected records to the shared quarantine table (``source = 'rules_cdc'``)."""
    if not rejected:
        return 0
    rows = [
        {
            "quarantineId": quarantine_id(r.record),
            "source": QUARANTINE_SOURCE,
            "sourceOffset": r.record.offset,
            "rawPayload": r.record.value,
            "reason": r.reason,
            "batchId": batch_id,
            "quarantinedAt": now,
            "quarantineDate": now.date(),
        }
        for r in rejected
    ]
    _append(spark, rows, QUARANTINE_SCHEMA, settings.table_path(QUARANTINE.name), txn)
    for r in rejected:
        log.warning("quarantined %s: %s", r.record.offset, r.reason)
    return len(rows)


def write_change_log(
    spark: SparkSession,
    settings: Settings,
    plan: BatchPlan,
    rules_version: int | None,
    *,
    batch_id: int | None,
    txn: tuple[str, int] | None,
    now: dt.datetime,
) -> int:
    if not plan.log:
        return 0
    rows = [
        {
            "ruleId": e.rule_id,
            "op": e.op,
            "sourcePosition": e.position,
            "sourceOffset": e.source_offset,
            "before": e.before,
            "after": e.after,
            "resultingState": e.resulting_state,
            "appliedAt": now,
            "rulesVersion": rules_version,
            "batchId": batch_id,
            "changedBy": e.attribution.changed_by,
            "approvedBy": e.attribution.approved_by,
            "changeReason": e.attribution.change_reason,
            "proposalId": e.attribution.proposal_id,
        }
        for e in plan.log
    ]
    _append(spark, rows, RULE_CHANGES_SCHEMA, settings.table_path(RULE_CHANGES.name), txn)
    return len(rows)


def quarantine_id(record: RawRecord) -> str:
    """sha-256 of (source, sourceOffset, rawPayload), as the quarantine schema states."""
    digest = hashlib.sha256()
    for part in (QUARANTINE_SOURCE, record.offset, record.value or ""):
        digest.update(part.encode())
        digest.update(b"\x00")
    return digest.hexdigest()


def _append(
    spark: SparkSession, rows: list[dict[str, Any]], schema: Any, path: str, txn: tuple[str, int] | None
) -> None:
    writer = local_frame(spark, rows, schema).write.format("delta").mode("append")  # no Python RDD, no Python worker
    if txn is not None:
        writer = writer.option("txnAppId", txn[0]).option("txnVersion", str(txn[1]))
    writer.save(path)


def _as_pair(watermark: Watermark | None) -> tuple[str, int | None] | None:
    return None if watermark is None else (watermark.position, watermark.ts_ms)
