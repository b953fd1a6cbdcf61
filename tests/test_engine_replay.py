"""Replay safety: a micro-batch run again after a crash (or after it completed) has exactly-once effects.

The crashes are injected in-process at the engine's own crash points (right after a write), then the batch is
run again by a fresh handler, as Structured Streaming would after a restart. The result must equal what the
contract says: alerts as the reference evaluator, bucket state equal to tiles computed in plain Python from the
transactions (nothing counted twice), cooldown memory as the alerts imply, no duplicate bronze row, one tagged
commit per write per batch.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from engine_fixtures import (
    alerts_by_id,
    folded_state,
    independent_tiles,
    make_rule,
    put_rules,
    raw_frame,
    table_rows,
    tagged_writes,
)
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from reference_evaluator import RefBatch, evaluate

import pipelines.engine.batch_handler as batch_handler
import pipelines.engine.retention as retention
from delta_tables.table_snapshot import table_version
from pipelines.base.settings import Settings
from pipelines.engine.batch_handler import BatchHandler
from pipelines.engine.keys import encode_key

T0 = 1_700_006_400_000
TABLES = ("bronze_transactions", "bucket_state", "alerts", "alert_cooldown", "quarantine", "batch_log", "rule_states")


class InjectedCrash(RuntimeError):
    pass


def _batch(n: int) -> list[dict[str, Any]]:
    return [
        {
            "transactionId": f"b{n}-{i:02d}",
            "eventTime": T0 + n * 90_000 + i * 7_000,
            "payerId": i % 3,
            "paymentAmount": Decimal(10 + 7 * i) + Decimal("0.25"),
            "paymentType": "CSH" if i % 2 else "CRD",
        }
        for i in range(12)
    ]


def _versions(spark: SparkSession, settings: Settings) -> dict[str, int]:
    return {name: table_version(spark, settings.table_path(name)) for name in TABLES}


def test_replayed_batches_have_exactly_once_effects(
    spark: SparkSession, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh_lakehouse(spark, settings)
    # Batch 1 dies after its state maintenance (the backfill of r3's new state), then (re-run) after its alerts
    # append, which runs beside the bronze, state and cooldown appends; one crash per attempt. Batch 2 dies after
    # its maintenance: r2's state dropped and r3's (window widened) rebuilt, both in one commit. Batch 3 dies after its
    # maintenance: r2 back in force, its state backfilled and its cooldown memory from before it left forgotten.
    crashes = {1: ["maintenance", "alerts"], 2: ["maintenance"], 3: ["maintenance"]}
    armed: list[tuple[str, int]] = []

    def crash_point(point: str, batch_id: int) -> None:
        if armed and armed[0] == (point, batch_id):
            armed.clear()
            raise InjectedCrash(f"after {point} of batch {batch_id}")

    monkeypatch.setattr(batch_handler, "crash_point", crash_point)
    # Retention's step on batch 1 rewrites its state even though folding would not halve its rows: the compaction's
    # commit is one of the writes that must happen once (tests/test_retention_rewrites.py: when it is skipped).
    monkeypatch.setattr(retention, "FOLD_GAIN", 1)
    r1 = make_rule(1, limit=40, windowMinutes=2, cooldownMinutes=1)
    # r2's cooldown outlasts its absence: its memory of batch 1 would suppress its alerts of batch 3 if it were kept
    r2 = make_rule(2, groupingKeyNames=[], aggregatorFunctionType="COUNT", limit=5, windowMinutes=1, cooldownMinutes=9)
    r3 = make_rule(
        3,
        aggregatorFunctionType="MAX",
        limit=50,
        windowMinutes=5,
        filter={"field": "paymentType", "op": "EQUAL", "value": "CRD"},
    )
    r3_wide = r3.model_copy(update={"window_minutes": 10})
    # r3 is new in batch 1: a new state, backfilled from batch 0's bronze; in batch 2 r2 is gone and r3 wider; in
    # batch 3 r2 is back
    timeline = [[r1, r2], [r1, r2, r3], [r1, r3_wide], [r1, r2, r3_wide]]
    refs = []
    for batch_id, live in enumerate(timeline):
        put_rules(spark, settings, live, deleted=[2] if batch_id == 2 else [], tick=batch_id)
        frame = raw_frame(spark, _batch(batch_id))
        refs.append(RefBatch(rules=live, transactions=_batch(batch_id)))
        attempts, planned = 0, len(crashes.get(batch_id, []))
        while True:
            attempts += 1
            armed[:] = [(crashes[batch_id].pop(0), batch_id)] if crashes.get(batch_id) else []
            try:  # a fresh handler per attempt: a restarted job remembers nothing
                handler = BatchHandler(settings, app_id="engine-replay", report=lambda line: None)
                handler.process(frame, batch_id)
                break
            except InjectedCrash:
                assert attempts <= 2
        assert attempts == 1 + planned

    # A completed batch run again changes nothing: no commit anywhere.
    before = _versions(spark, settings)
    assert BatchHandler(settings, app_id="engine-replay").process(raw_frame(spark, _batch(1)), 1) == {}
    assert _versions(spark, settings) == before
    # The handler that ran it, replaying it (its checkpoint commit failed), also skips it.
    assert handler.process(raw_frame(spark, _batch(1)), 1) == {}
    assert _versions(spark, settings) == before

    expected = {(a.rule_id, a.transaction_id): (encode_key(a.key), a.aggregate_value) for a in evaluate(refs)}
    assert alerts_by_id(spark, settings) == expected
    assert any(rule == 2 and tx.startswith("b3-") for rule, tx in expected)  # r2 back: its old memory forgotten
    alerts = spark.read.format("delta").load(settings.table_path("alerts"))
    assert alerts.count() == len(expected)

    bronze = spark.read.format("delta").load(settings.table_path("bronze_transactions"))
    assert bronze.count() == bronze.select("transactionId").distinct().count() == 48

    # The state holds every transaction exactly once: it equals the tiles computed from the transactions.
    records = [*_batch(0), *_batch(1), *_batch(2), *_batch(3)]
    assert folded_state(spark, settings) == independent_tiles(records, [r1, r2, r3_wide])

    # Cooldown memory = the latest alert per (rule, key), r2's only since it came back (its earlier memory went).
    last = (
        alerts.where((F.col("ruleId") != 2) | (F.col("batchId") == 3))
        .groupBy("ruleId", "keyValue")
        .agg(F.max(F.unix_millis("eventTime")).alias("t"))
    )
    memory = spark.read.format("delta").load(settings.table_path("alert_cooldown"))
    folded_memory = memory.groupBy("ruleId", "keyValue").agg(F.max("lastAlertTimeMs"))
    assert sorted(tuple(r) for r in last.collect()) == sorted(tuple(r) for r in folded_memory.collect())

    # One commit per write and batch, whatever the attempts: a replay skipped the writes already committed.
    def writes(name: str) -> list[tuple[int, str]]:
        return tagged_writes(spark, settings.table_path(name))

    assert writes("bronze_transactions") == [(0, "bronze"), (1, "bronze"), (2, "bronze"), (3, "bronze")]
    assert writes("batch_log") == [(0, "batch-log"), (1, "batch-log"), (2, "batch-log"), (3, "batch-log")]
    # batch 0's tiles, the backfill of r3's new state (batch 1's maintenance), batch 1's tiles, and the retention step
    # that falls on batch 1 (one state's tiles compacted: pipelines.engine.retention.retention_steps), once; batch 2's
    # maintenance (r2's state dropped, r3's rebuilt for its wider window) in one commit, once, then its tiles; batch 3's
    # backfill of r2's state, back, once, then its tiles
    assert writes("bucket_state") == [
        (0, "state"),
        (1, "state-backfill"),
        (1, "state"),
        (1, "state-compact"),
        (2, "state-replace"),
        (2, "state"),
        (3, "state-backfill"),
        (3, "state"),
    ]
    assert writes("alerts") == [(0, "alerts"), (1, "alerts"), (2, "alerts"), (3, "alerts")]
    # r2 leaving in batch 2 writes nothing to the memory; its return in batch 3 forgets its rows of before, once
    assert writes("alert_cooldown") == [
        (0, "cooldown"),
        (1, "cooldown"),
        (2, "cooldown"),
        (3, "cooldown-forget"),
        (3, "cooldown"),
    ]
    assert table_rows(spark, settings.table_path("quarantine")) == []


def test_a_rule_back_under_a_new_checkpoint_forgets_the_memory_it_left(spark: SparkSession, settings: Settings) -> None:
    # A new checkpoint numbers its micro-batches from 0 again and continues from the lakehouse's last batch: r2 (every
    # transaction a candidate, a 60-minute cooldown) alerts in batch 0 of the first checkpoint and leaves in batch 1;
    # back in batch 0 of a second checkpoint, its memory of the first batch 0 must be gone, whatever its batch id.
    fresh_lakehouse(spark, settings)
    r1 = make_rule(1, limit=40, windowMinutes=2)
    r2 = make_rule(
        2,
        groupingKeyNames=[],
        aggregatorFunctionType="COUNT",
        limitOperatorType="GREATER_EQUAL",
        limit=1,
        windowMinutes=1,
        cooldownMinutes=60,
    )
    runs = [("engine-first", 0, [r1, r2]), ("engine-first", 1, [r1]), ("engine-second", 0, [r1, r2])]
    refs = []
    for tick, (app, batch_id, live) in enumerate(runs):
        put_rules(spark, settings, live, deleted=[2] if r2 not in live else [], tick=tick)
        refs.append(RefBatch(rules=live, transactions=_batch(tick)))
        BatchHandler(settings, app_id=app, report=lambda line: None).process(raw_frame(spark, _batch(tick)), batch_id)

    expected = {(a.rule_id, a.transaction_id): (encode_key(a.key), a.aggregate_value) for a in evaluate(refs)}
    assert (2, "b0-00") in expected and (2, "b2-00") in expected  # back: it alerts at once
    assert alerts_by_id(spark, settings) == expected
    assert tagged_writes(spark, settings.table_path("alert_cooldown"))[-2:] == [(0, "cooldown-forget"), (0, "cooldown")]
