"""Shadow mode end to end: a SHADOW rule is evaluated like an ACTIVE one, recorded, and never acted on.

One engine run (two micro-batches through ``BatchHandler`` with ``alerts_to_kafka``, real broker) with r1 ACTIVE
and r2, its twin in content, SHADOW; r1 paused in the second batch, so that batch raises shadow alerts only. Then:

* Delta holds r2's alerts, flagged ``shadow``, exactly where r1 alerts (and equal to the reference's);
* the alerts topic holds r1's alerts and none of r2's; the batch counts say ``alerts`` (live) and
  ``shadowAlerts`` apart;
* the readers that count live alerts (``alerts summary``, the dashboard, the export, the console's list and
  per-rule counts) leave r2's out, and the ones asked for shadow alerts give only r2's;
* a backtest of the SHADOW rule gives what the engine recorded for it (a SHADOW rule is backtested as ACTIVE);
* an alerts table of an older release (no ``shadow`` column) gets it on ``init``, its rows reading as live.
"""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from contract_scenarios import engine_alerts, reference_alerts
from engine_fixtures import make_rule, paused, put_rules, raw_frame
from kafka import KafkaConsumer
from kafka.admin import KafkaAdminClient, NewTopic
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession
from reference_evaluator import RefBatch, evaluate

from delta_tables.alerts import ALERTS, ALERTS_SCHEMA, live_alerts, shadow_alerts
from delta_tables.table_spec import TableSpec, create_table
from pipelines.base.settings import Settings
from pipelines.console.alerts_data import AlertQuery, recent_alerts
from pipelines.console.lake_reader import LakeReader
from pipelines.console.rules_data import alert_counts
from pipelines.dashboard.aggregates import read_alerts
from pipelines.engine.backtest import backtest_rule
from pipelines.engine.batch_handler import BatchHandler
from pipelines.engine.run_summary import engine_summary, export_alerts, format_summary
from pipelines.local.kafka_broker import KafkaBroker
from rules_cdc.rule_model import RuleState

T0 = 1_700_006_400_000
R1 = make_rule(1, limit=50, windowMinutes=5)
R2 = make_rule(2, limit=50, windowMinutes=5).model_copy(update={"rule_state": RuleState.SHADOW})
TIMELINE = [[R1, R2], [paused(R1), R2]]


def _records(batch: int, n: int) -> list[dict[str, Any]]:
    return [
        {
            "transactionId": f"b{batch}-t{i:02d}",
            "eventTime": T0 + batch * 60_000 + i * 5_000,
            "payerId": i % 2,
            "paymentAmount": Decimal(4 * i) + Decimal("0.25"),
        }
        for i in range(n)
    ]


BATCHES = [_records(0, 12), _records(1, 6)]


def _sent_to_topic(settings: Settings, bootstrap: str) -> list[dict[str, Any]]:
    consumer = KafkaConsumer(
        settings.kafka.topics.alerts,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5_000,
        group_id=f"g-{uuid.uuid4().hex[:8]}",
    )
    try:
        return [json.loads(m.value) for m in consumer]
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def run(
    kafka_broker: KafkaBroker, spark: SparkSession, base_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Settings, list[dict[str, int]]]:
    suffix = uuid.uuid4().hex[:8]
    topics = base_settings.kafka.topics.model_copy(update={"alerts": f"alerts-shadow-{suffix}"})
    kafka = base_settings.kafka.model_copy(update={"bootstrap_servers": kafka_broker.bootstrap, "topics": topics})
    settings = base_settings.with_lakehouse(str(tmp_path_factory.mktemp("shadow") / "lakehouse"))
    settings = settings.model_copy(update={"kafka": kafka})
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    admin.create_topics([NewTopic(topics.alerts, num_partitions=1, replication_factor=1)])
    admin.close()
    fresh_lakehouse(spark, settings)
    handler = BatchHandler(settings, app_id="engine-shadow", report=lambda _line: None, alerts_to_kafka=True)
    counts = []
    for batch_id, (rules, records) in enumerate(zip(TIMELINE, BATCHES, strict=True)):
        put_rules(spark, settings, rules, tick=batch_id)
        counts.append(handler.process(raw_frame(spark, records, name=f"shadow-b{batch_id}"), batch_id))
    return settings, counts


def test_shadow_alerts_are_recorded_in_delta_and_never_sent_to_the_alerts_topic(
    run: tuple[Settings, list[dict[str, int]]], spark: SparkSession, kafka_broker: KafkaBroker
) -> None:
    settings, counts = run
    expected = reference_alerts(evaluate([RefBatch(r, t) for r, t in zip(TIMELINE, BATCHES, strict=True)]))
    actual = engine_alerts(spark, settings)
    assert actual == expected
    live = {k for k, facts in actual.items() if not facts[2]}
    shadow = {k for k, facts in actual.items() if facts[2]}
    # r2 is r1's twin: in the first batch it alerts exactly where r1 does, as shadow; r1 is paused in the second.
    first = {tx for rule_id, tx in live if rule_id == 1}
    assert first and {tx for rule_id, tx in shadow if tx.startswith("b0-")} == first
    assert {rule_id for rule_id, _ in shadow} == {2} and {rule_id for rule_id, _ in live} == {1}
    assert any(tx.startswith("b1-") for _, tx in shadow)  # the second batch: shadow alerts only
    sent = _sent_to_topic(settings, kafka_broker.bootstrap)
    assert sorted((a["ruleId"], a["transactionId"]) for a in sent) == sorted(live)
    assert [c["alerts"] for c in counts] == [len(first), 0]
    assert sum(c["shadowAlerts"] for c in counts) == len(shadow) and counts[0]["shadowRules"] == 1


def test_live_readers_leave_shadow_alerts_out(
    run: tuple[Settings, list[dict[str, int]]], spark: SparkSession, tmp_path: Path
) -> None:
    settings, _ = run
    facts = engine_alerts(spark, settings)
    live = sorted(k for k, f in facts.items() if not f[2])
    shadow = sorted(k for k, f in facts.items() if f[2])

    summary = engine_summary(spark, settings)
    assert summary.alerts_per_rule == {1: len(live)} and summary.shadow_alerts_per_rule == {2: len(shadow)}
    text = format_summary(summary)
    assert f"alerts: {len(live)}\n" in text and f"shadow alerts (SHADOW rules, recorded, not acted on): {len(shadow)}"
    assert f"SHADOW       0 alerts (+{len(shadow)} shadow)" in text

    assert read_alerts(spark, settings).count() == len(live)
    assert read_alerts(spark, settings, shadow=True).count() == len(shadow)
    assert export_alerts(spark, settings, tmp_path / "live.jsonl") == len(live)
    assert export_alerts(spark, settings, tmp_path / "shadow.jsonl", shadow=True) == len(shadow)

    reader = LakeReader(settings)
    listed = sorted((a["ruleId"], a["transactionId"]) for a in recent_alerts(reader, AlertQuery()))
    assert listed == live
    assert {rule_id: n for rule_id, (n, _) in alert_counts(reader).items()} == {1: len(live)}


def test_a_shadow_rule_is_backtested_as_active(run: tuple[Settings, list[dict[str, int]]], spark: SparkSession) -> None:
    settings, _ = run
    backtested = {r["transactionId"] for r in backtest_rule(spark, settings, R2).collect()}
    recorded = {tx for (rule_id, tx), facts in engine_alerts(spark, settings).items() if rule_id == 2 and facts[2]}
    assert recorded and backtested == recorded


def test_an_older_alerts_table_gets_the_shadow_column_and_its_rows_read_as_live(
    spark: SparkSession, base_settings: Settings, tmp_path: Path
) -> None:
    path = str(tmp_path / "alerts")
    older = TableSpec(
        name=ALERTS.name,
        schema=type(ALERTS_SCHEMA)([f for f in ALERTS_SCHEMA.fields if f.name != "shadow"]),
        comment=ALERTS.comment,
        partition_by=ALERTS.partition_by,
        properties=ALERTS.properties,
    )
    create_table(spark, older, path)
    row = spark.createDataFrame(
        [("1:t", 1, "[1]", "t", Decimal(1), "SUM", "GREATER", Decimal(0), 5, 0)],
        "alertId string, ruleId long, keyValue string, transactionId string, aggregateValue decimal(38,6), "
        "aggregatorFunctionType string, limitOperatorType string, limit decimal(38,6), windowMinutes int, "
        "batchId long",
    ).selectExpr("*", "timestamp'2024-01-01 00:00:00' AS eventTime", "timestamp'2024-01-01 00:00:01' AS detectedAt")
    row.selectExpr("*", "to_date(detectedAt) AS detectedDate").write.format("delta").mode("append").save(path)
    before = spark.read.format("delta").load(path)
    assert "shadow" not in before.columns and live_alerts(before).count() == 1 and shadow_alerts(before).count() == 0

    create_table(spark, ALERTS, path)  # what init does on every start
    after = spark.read.format("delta").load(path)
    assert "shadow" in after.columns and after.first()["shadow"] is None
    assert live_alerts(after).count() == 1 and shadow_alerts(after).count() == 0
