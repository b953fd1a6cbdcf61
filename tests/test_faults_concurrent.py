"""Writers racing the engine: a rules change committed mid-batch, and table maintenance running beside it.

* **Rules change during a batch.** The rules CDC job commits to ``rules`` whenever it likes. A test hook at the
  engine's ``pinned`` point (the batch has pinned its rules version; nothing is evaluated yet) commits a change
  from another thread: rule 1's limit drops, rule 2 is paused, rule 3 appears. The batch must use the pinned
  version throughout — its alerts carry that ``rulesVersion`` and equal the contract's alerts under the old rules.
* **Maintenance during the engine.** OPTIMIZE, VACUUM and a retention DELETE run in a loop, in their own Spark
  session (as ``fraudlake maintain`` would in its own process), while the engine runs micro-batches. A batch may
  fail on a write conflict and is then retried (same batch id, fresh handler: what a restarted query does); the
  end state must equal the contract: alerts as the reference evaluator, state = tiles computed in plain Python from
  the transactions, every transaction once in bronze.
"""

from __future__ import annotations

import threading
import time
from decimal import Decimal
from typing import Any

import pytest
from delta.tables import DeltaTable
from engine_fixtures import alerts_by_id, folded_state, independent_tiles, make_rule, paused, put_rules, raw_frame
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from reference_evaluator import RefBatch, evaluate
from reliability_support import record_outcome

import pipelines.engine.batch_handler as batch_handler
from delta_tables.table_maintenance import optimize_table, vacuum_table
from pipelines.base.settings import Settings
from pipelines.engine.batch_handler import BatchHandler
from pipelines.engine.keys import encode_key

T0 = 1_700_006_400_000


def _batch(n: int, size: int = 12) -> list[dict[str, Any]]:
    return [
        {
            "transactionId": f"c{n}-{i:02d}",
            "eventTime": T0 + n * 60_000 + i * 4_000,
            "payerId": i % 3,
            "paymentAmount": Decimal(20 + 5 * i) + Decimal("0.50"),
            "paymentType": "CSH" if i % 2 else "CRD",
        }
        for i in range(size)
    ]


def _expected(batches: list[RefBatch]) -> dict[tuple[int, str], tuple[str, Decimal]]:
    return {(a.rule_id, a.transaction_id): (encode_key(a.key), a.aggregate_value) for a in evaluate(batches)}


def test_a_rules_change_committed_mid_batch_does_not_reach_that_batch(
    spark: SparkSession, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = time.monotonic()
    fresh_lakehouse(spark, settings)
    r1 = make_rule(1, limit=60, windowMinutes=3)
    r2 = make_rule(2, groupingKeyNames=[], aggregatorFunctionType="COUNT", limit=6, windowMinutes=2)
    pinned = put_rules(spark, settings, [r1, r2], tick=0)
    changed = [make_rule(1, limit=10, windowMinutes=3), paused(r2), make_rule(3, aggregatorFunctionType="MAX", limit=1)]
    committed: list[int] = []

    def commit_change_from_another_thread(point: str, batch_id: int) -> None:
        if (point, batch_id) != ("pinned", 1) or committed:
            return
        worker = threading.Thread(target=lambda: committed.append(put_rules(spark, settings, changed, tick=1)))
        worker.start()
        worker.join()

    monkeypatch.setattr(batch_handler, "crash_point", commit_change_from_another_thread)
    handler = BatchHandler(settings, app_id="engine-race", report=lambda _line: None)
    for batch_id in (0, 1):
        handler.process(raw_frame(spark, _batch(batch_id)), batch_id)
    assert committed == [pinned + 1]  # the change did commit while batch 1 was running

    alerts = spark.read.format("delta").load(settings.table_path("alerts"))
    versions = {(r["batchId"], r["rulesVersion"]) for r in alerts.select("batchId", "rulesVersion").collect()}
    assert versions == {(0, pinned), (1, pinned)}
    log = spark.read.format("delta").load(settings.table_path("batch_log")).where(F.col("batchId") == 1).first()
    assert log is not None and log["rulesVersion"] == pinned
    expected = _expected([RefBatch([r1, r2], _batch(0)), RefBatch([r1, r2], _batch(1))])
    got = alerts_by_id(spark, settings)
    assert got == expected and {rule for rule, _ in got} == {1, 2}
    record_outcome(
        "rules change committed between a batch's intent and its evaluation",
        "concurrency",
        records_in=24,
        applied=24,
        quarantined=0,
        duplicated=alerts.count() - len(got),
        outcome=f"batch 1 used rules v{pinned} throughout (change committed as v{pinned + 1}); alerts = contract",
        seconds=time.monotonic() - started,
    )


MAINTAINED = ("bronze_transactions", "bucket_state", "alerts", "alert_cooldown", "quarantine", "batch_log")


def _maintain_until(stop: threading.Event, spark: SparkSession, settings: Settings, done: list[str]) -> None:
    """OPTIMIZE + VACUUM each table, then a retention DELETE of old quarantine rows, round after round."""
    session = spark.newSession()  # its own SQL conf: the engine sets a commit-tag conf on its session around DML
    while not stop.is_set():
        for name in MAINTAINED:
            path = settings.table_path(name)
            optimize_table(session, path)
            done.append(f"optimize {name}")
            vacuum_table(session, path, settings.maintenance.vacuum_retention_hours, parallelism=2)
            done.append(f"vacuum {name}")
            if stop.is_set():
                return
        DeltaTable.forPath(session, settings.table_path("quarantine")).delete(F.col("batchId") < 0)
        done.append("retention delete quarantine")


def test_maintenance_running_beside_the_engine_fails_no_batch_or_retries_it_to_the_same_result(
    spark: SparkSession, settings: Settings
) -> None:
    started = time.monotonic()
    fresh_lakehouse(spark, settings)
    rules = [
        make_rule(1, limit=60, windowMinutes=3, cooldownMinutes=1),
        make_rule(2, groupingKeyNames=[], aggregatorFunctionType="MAX", limit=70, windowMinutes=2),
    ]
    put_rules(spark, settings, rules)
    bad: list[dict[str, Any] | str] = ["{not json", '{"transactionId":"x"}']
    batches = [[*_batch(n), *bad] for n in range(3)]
    # Batch 0 alone first, so that every table has files for maintenance to compact.
    BatchHandler(settings, app_id="engine-maint", report=lambda _line: None).process(raw_frame(spark, batches[0]), 0)
    stop, done, errors, retries = threading.Event(), list[str](), list[str](), 0
    maintenance = threading.Thread(target=_maintain_until, args=(stop, spark, settings, done), daemon=True)
    maintenance.start()
    try:
        for batch_id in (1, 2):
            for attempt in range(3):
                try:  # a fresh handler per attempt: a restarted query remembers nothing
                    handler = BatchHandler(settings, app_id="engine-maint", report=lambda _line: None)
                    handler.process(raw_frame(spark, batches[batch_id]), batch_id)
                    break
                except Exception as error:  # a write conflict with maintenance: retry the same batch
                    errors.append(f"batch {batch_id}: {type(error).__name__}: {str(error)[:200]}")
                    retries += 1
                    assert attempt < 2, errors
    finally:
        stop.set()
        maintenance.join(timeout=600)
    assert any(step.startswith("optimize") for step in done) and not maintenance.is_alive()

    expected = _expected([RefBatch(rules, _batch(n)) for n in range(3)])
    assert alerts_by_id(spark, settings) == expected
    alerts = spark.read.format("delta").load(settings.table_path("alerts"))
    assert alerts.count() == len(expected)
    bronze = spark.read.format("delta").load(settings.table_path("bronze_transactions"))
    assert bronze.count() == bronze.select("transactionId").distinct().count() == 36
    assert folded_state(spark, settings) == independent_tiles([r for n in range(3) for r in _batch(n)], rules)
    quarantine = spark.read.format("delta").load(settings.table_path("quarantine")).count()
    assert quarantine == 6
    record_outcome(
        "OPTIMIZE + VACUUM + retention DELETE looping beside the engine",
        "concurrency",
        records_in=42,
        applied=36,
        quarantined=quarantine,
        duplicated=alerts.count() - len(expected),
        outcome=f"{len(done)} maintenance operations, {retries} batch retries"
        + (f" ({', '.join(sorted({e.split(': ')[1] for e in errors}))})" if errors else "")
        + "; alerts = contract, state = tiles of the transactions",
        seconds=time.monotonic() - started,
    )
