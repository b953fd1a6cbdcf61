"""The campaign's end checks, once every part is back and the input is drained: rules table = database,
every accepted transaction in bronze once, alerts = the independent reference evaluator, bad input placed.

The alert oracle is ``tests/reference_evaluator.py`` (plain Python, none of the engine's code), loaded by path
(``oracle.py``) so that the command and the test check against the same contract. It is fed what the engine
committed: each batch of ``batch_log`` (job ``engine-*``) with that batch's transactions from bronze
(``batchId``) and the live rules (ACTIVE/PAUSED) of the rules table at the version the batch pinned
(``rulesVersion``, read by Delta time travel).

Example::

    result = transactions_check(spark, settings, topic_positions(settings, topic))
    result.lost, result.doubled          # (0, 0)
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from delta_tables.rules import RULE_CONTENT_COLUMNS
from pipelines.base.settings import Settings
from pipelines.chaos.oracle import reference_alerts
from pipelines.local.rules_database import RulesDb
from rules_cdc.apply_changes import read_view
from rules_cdc.parse_events import rule_columns
from rules_cdc.rule_model import Rule, RuleValidationError, parse_rule
from rules_cdc.rule_rows import TRUNCATE_MARKER_ID, rule_from_row, rule_to_row

CONTENT = ("ruleState", *RULE_CONTENT_COLUMNS, "disabled")


@dataclass(frozen=True)
class RulesCheck:
    equal: bool
    rules: int  # rules in the database
    tombstones: int  # rules the lake keeps as DELETED (deleted in the database)
    mismatches: tuple[str, ...] = ()


@dataclass(frozen=True)
class TransactionsCheck:
    on_topic: int  # records the broker accepted
    in_bronze: int
    quarantined: int
    lost: int  # on the topic, in neither bronze nor quarantine
    doubled: int  # a topic record in bronze or quarantine more than once
    doubled_ids: int  # a transactionId in bronze more than once


@dataclass(frozen=True)
class AlertsCheck:
    batches: int
    alerts: int
    expected: int
    missing: int
    extra: int
    doubled: int  # alerts table rows beyond one per (ruleId, transactionId)
    examples: tuple[str, ...] = field(default=())

    @property
    def equal(self) -> bool:
        return self.missing == self.extra == self.doubled == 0


def database_rules(db: RulesDb) -> dict[int, dict[str, Any]]:
    """The database's fraud_rules rows by id (via psql, as JSON)."""
    out = db.sql("SELECT coalesce(json_agg(row_to_json(r)), '[]') FROM fraud_rules r")
    return {int(row["rule_id"]): row for row in json.loads(out)}


def rules_check(spark: SparkSession, settings: Settings, db: RulesDb, *, ignore: set[int]) -> RulesCheck:
    """Every database rule's content is the lake's; every other lake rule (``ignore`` aside) is a DELETED
    tombstone. Rows the model refuses are expected to be absent (their last good version would stay)."""
    rows = {
        r["ruleId"]: r
        for r in (
            x.asDict(recursive=True) for x in spark.read.format("delta").load(settings.table_path("rules")).collect()
        )
        if r["ruleId"] != TRUNCATE_MARKER_ID
    }
    mismatches = []
    in_db = database_rules(db)
    for rule_id, row in sorted(in_db.items()):
        try:
            rule = parse_rule(rule_columns(row), settings.transaction_schema)
        except RuleValidationError as error:
            mismatches.append(f"rule {rule_id}: the database row is not a valid rule ({error})")
            continue
        full = rule_to_row(rule, source_position="", source_op="", source_ts_ms=None)
        lake = rows.get(rule_id)
        if lake is None:
            mismatches.append(f"rule {rule_id}: in the database, not in the rules table")
        elif any(lake[k] != full[k] for k in CONTENT):
            differ = [k for k in CONTENT if lake[k] != full[k]]
            mismatches.append(f"rule {rule_id}: {', '.join(differ)} differ ({[lake[k] for k in differ]})")
    tombstones = 0
    for rule_id, lake in sorted(rows.items()):
        if rule_id in in_db or rule_id in ignore:
            continue
        if lake["ruleState"] == "DELETED":
            tombstones += 1
        else:
            mismatches.append(f"rule {rule_id}: {lake['ruleState']} in the rules table, not in the database")
    return RulesCheck(not mismatches, len(in_db), tombstones, tuple(mismatches))


def transactions_check(
    spark: SparkSession, settings: Settings, on_topic: list[tuple[int, int]], topic: str
) -> TransactionsCheck:
    """Each (partition, offset) the broker holds is in bronze or in the quarantine, exactly once."""
    bronze = spark.read.format("delta").load(settings.table_path("bronze_transactions"))
    placed = Counter(
        (r["kafkaPartition"], r["kafkaOffset"]) for r in bronze.select("kafkaPartition", "kafkaOffset").collect()
    )
    ids = Counter(r["transactionId"] for r in bronze.select("transactionId").collect())
    prefix = f"kafka:{topic}/"
    quarantine = spark.read.format("delta").load(settings.table_path("quarantine"))
    offsets = quarantine.where((F.col("source") == "transactions") & F.col("sourceOffset").startswith(prefix))
    quarantined = 0
    for row in offsets.select("sourceOffset").collect():
        partition, offset = row["sourceOffset"][len(prefix) :].split("/")
        placed[(int(partition), int(offset))] += 1
        quarantined += 1
    wanted = set(on_topic)
    lost = sum(1 for position in wanted if placed[position] == 0)
    doubled = sum(n - 1 for n in placed.values() if n > 1)
    return TransactionsCheck(
        on_topic=len(wanted),
        in_bronze=sum(ids.values()),
        quarantined=quarantined,
        lost=lost,
        doubled=doubled,
        doubled_ids=sum(n - 1 for n in ids.values() if n > 1),
    )


def alerts_check(spark: SparkSession, settings: Settings) -> AlertsCheck:
    """The alerts table against the reference evaluator over the engine's committed batches."""
    log = spark.read.format("delta").load(settings.table_path("batch_log")).where(F.col("job").startswith("engine-"))
    batches = sorted((int(r["batchId"]), r["rulesVersion"]) for r in log.select("batchId", "rulesVersion").collect())
    bronze = spark.read.format("delta").load(settings.table_path("bronze_transactions"))
    names = [f.name for f in settings.transaction_schema.fields if f.name != "eventTime"]
    by_batch: dict[int, list[dict[str, Any]]] = defaultdict(list)
    frame = bronze.select("batchId", F.unix_millis("eventTime").alias("eventTime"), *names)
    for row in frame.collect():
        record = row.asDict()
        by_batch[int(record.pop("batchId"))].append(record)
    rules_at: dict[int | None, list[Rule]] = {}
    plan = []
    for batch_id, version in batches:
        if version not in rules_at:
            rules_at[version] = _live_rules(spark, settings, version)
        plan.append((rules_at[version], by_batch.get(batch_id, [])))
    expected = reference_alerts(
        plan,
        bucket_seconds=settings.engine.bucket_seconds,
        allowed_lateness_seconds=settings.engine.allowed_lateness_seconds,
    )
    alerts = spark.read.format("delta").load(settings.table_path("alerts"))
    got_rows = [(int(r["ruleId"]), r["transactionId"], r["aggregateValue"]) for r in alerts.collect()]
    got: dict[tuple[int, str], Decimal] = {(rule, tx): value for rule, tx, value in got_rows}
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    wrong = sorted(k for k in set(got) & set(expected) if got[k] != expected[k])
    examples = [f"missing {k}" for k in missing[:3]] + [f"extra {k}" for k in extra[:3]]
    examples += [f"value {k}: {got[k]} != {expected[k]}" for k in wrong[:3]]
    return AlertsCheck(
        batches=len(batches),
        alerts=len(got_rows),
        expected=len(expected),
        missing=len(missing) + len(wrong),
        extra=len(extra),
        doubled=len(got_rows) - len(got),
        examples=tuple(examples),
    )


def _live_rules(spark: SparkSession, settings: Settings, version: int | None) -> list[Rule]:
    if version is None:
        return []
    view = read_view(spark, settings.table_path("rules"), version)
    return [
        rule_from_row(dict(row)) for rule_id, row in sorted(view.live_rows.items()) if rule_id != TRUNCATE_MARKER_ID
    ]
