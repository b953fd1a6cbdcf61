"""Kafka end to end, live: the rules CDC job and the engine running continuously on a real broker (issue #5).

The rules job and the engine run as two continuous streaming queries in the test's one Spark session, as
``fraudlake rules run --source kafka`` and ``fraudlake run --source kafka`` would in two terminals: the same
code (``start_rules_job``, ``start_engine``), the same topics and Delta tables, far cheaper than three JVMs on
a 2-core machine. Rules are published by the CLI publisher (``edit_rules(..., publish_to="kafka")``),
transactions by the generator's Kafka sink, alerts read back from Delta and from the alerts topic (kafka-python).

Sequence: sample rules -> rules table; seeded transactions with injected fraud patterns -> alerts in Delta and on
the topic, every pattern kind caught by its sample rule; then, without restarting anything, a new rule, a pause
and a delete -> from the micro-batch that pins the new rules version on, the new rule alerts and the paused and
deleted rules do not (tied to the batch through ``batch_log.rulesVersion`` and ``alerts.rulesVersion``).
Every wait polls with a deadline; the queries are stopped in ``finally``.

Example::

    make test PYTEST_ARGS="tests/test_kafka_live.py -x -q"
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from engine_fixtures import SAMPLE_RULE_CATCHES, json_line
from kafka import KafkaConsumer, KafkaProducer
from polling import wait_for
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from rules_cdc_support import cli, write_conf

from delta_tables.table_snapshot import table_version
from pipelines.base.kafka_clients import ensure_topics
from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.dashboard.alerts_tail import TailedAlert, TailOptions, format_alert, tail_alerts
from pipelines.engine.job import EngineRun, start_engine
from pipelines.engine.latency import format_latency, latency_metrics
from pipelines.engine.run_summary import batch_latencies
from pipelines.generator.sinks import KafkaSink, RatePlan
from pipelines.generator.sinks import run as send_records
from pipelines.generator.transactions import PATTERNS, FraudRates, GeneratorConfig, Transaction, TransactionGenerator
from pipelines.local.kafka_broker import KafkaBroker
from rules_cdc.apply_changes import read_view
from rules_cdc.manage import edit_rules
from rules_cdc.rule_model import Rule, parse_rule
from rules_cdc.streaming_job import start_rules_job

pytestmark = pytest.mark.kafka

DEADLINE_SECONDS = 420.0
"""Per wait. About 30 s on an idle machine; generous because a shared 2-core box can make a micro-batch take 2 min."""
MAX_LATENCY_MS = 3_600_000  # a sanity bound (units, clocks), far above the slowest batch seen on a loaded machine
CATCHES = SAMPLE_RULE_CATCHES
NEW_ID = 9
"""The rule added mid-run (the sample rules are 1-8)."""
NEW_RULE = {
    "ruleId": NEW_ID,
    "ruleName": "single transfer of 9,000 or more",
    "ruleState": "ACTIVE",
    "groupingKeyNames": ["payerId"],
    "aggregateFieldName": "paymentAmount",
    "aggregatorFunctionType": "MAX",
    "limitOperatorType": "GREATER_EQUAL",
    "limit": 9000,
    "windowMinutes": 1,
    "filter": {"field": "paymentType", "op": "EQUAL", "value": "TRF"},
}
PAUSED, DELETED = 6, 5  # large payment (paused), fan-out (deleted): phase 2 injects both patterns again
LINE = re.compile(
    r"^\d\d:\d\d:\d\d\.\d{3}  rule (?P<rule>\d+)  key (?P<key>\[.*\])  (?P<agg>[A-Z]+) (?P<value>[\d.]+)"
    r" (?P<op>[<>=!]+) (?P<limit>[\d.]+) \((?P<window>\d+) min\)  tx (?P<tx>\S+)  batch (?P<batch>\d+)"
    r"  latency (?P<latency>-?[\d.]+) s$"
)
live_wait = partial(wait_for, seconds=DEADLINE_SECONDS, every=1.0)
"""``wait_for`` with this module's deadline, polling once a second (most probes are Spark reads of Delta tables)."""


def live_settings(settings: Settings, broker: KafkaBroker) -> Settings:
    """This test's own topics on the test broker; 1 s triggers; alerts to Kafka; nothing late in this test."""
    suffix = uuid.uuid4().hex[:8]
    topics = settings.kafka.topics.model_copy(
        update={"transactions": f"tx-{suffix}", "rules": f"rules-{suffix}", "alerts": f"alerts-{suffix}"}
    )
    kafka = settings.kafka.model_copy(update={"bootstrap_servers": broker.bootstrap, "topics": topics})
    engine = settings.engine.model_copy(
        update={"trigger_interval_seconds": 1, "alerts_to_kafka": True, "allowed_lateness_seconds": 3600}
    )
    return settings.model_copy(update={"kafka": kafka, "engine": engine})


def sample_rules(settings: Settings) -> list[Rule]:
    raw: list[dict[str, Any]] = json.loads((REPO_ROOT / "conf" / "sample_rules.json").read_text())
    return [parse_rule(r, settings.transaction_schema) for r in raw]


def generated(seed: int, start_ms: int, arrivals: int) -> tuple[list[Transaction], dict[str, int]]:
    """A seeded run: ``arrivals`` steps plus the rest of the episodes in progress; the episodes per pattern."""
    config = GeneratorConfig(
        seed=seed,
        start_ms=start_ms,
        events_per_second=5.0,
        payers=2000,
        beneficiaries=2000,
        fraud=FraudRates.split(0.02),
    )
    generator = TransactionGenerator(config)
    records: list[Transaction] = []
    for _ in range(arrivals):
        records.extend(generator.step())
    records.extend(generator.drain())
    return records, dict(generator.episodes)


def rule_states(spark: SparkSession, settings: Settings) -> dict[int, str]:
    return {rid: str(row["ruleState"]) for rid, row in read_view(spark, settings.table_path("rules")).live_rows.items()}


def engine_batches(spark: SparkSession, settings: Settings) -> list[dict[str, Any]]:
    frame = spark.read.format("delta").load(settings.table_path("batch_log"))
    rows = frame.where(F.col("job").startswith("engine-")).collect()
    return sorted((r.asDict(recursive=True) for r in rows), key=lambda r: r["batchId"])


def processed(spark: SparkSession, settings: Settings) -> int:
    return sum(int(b["counts"]["rows"]) for b in engine_batches(spark, settings))


def delta_alerts(spark: SparkSession, settings: Settings) -> list[dict[str, Any]]:
    frame = spark.read.format("delta").load(settings.table_path("alerts"))
    return [
        r.asDict()
        for r in frame.select("alertId", "ruleId", "transactionId", "rulesVersion", "batchId", "latencyMs").collect()
    ]


def topic_alerts(settings: Settings) -> Iterator[TailedAlert]:
    """Every record on the alerts topic so far (kafka-python, from the beginning, no group)."""
    consumer = KafkaConsumer(
        settings.kafka.topics.alerts,
        bootstrap_servers=settings.kafka.bootstrap_servers,
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
        group_id=None,
    )
    try:
        for record in consumer:
            yield TailedAlert(json.loads(record.value, parse_float=Decimal), record.timestamp)
    finally:
        consumer.close()


def all_on_topic(settings: Settings, alerts: list[dict[str, Any]]) -> dict[str, TailedAlert] | None:
    """The topic's alerts by id once every one of ``alerts`` is there (else None: poll again)."""
    found = {t.alert_id: t for t in topic_alerts(settings)}
    return found if {a["alertId"] for a in alerts} <= set(found) else None


def report(lines: list[str]) -> Callable[[str], None]:
    """The engine's progress lines: kept for the assertions, and printed (pytest shows them on a failure)."""

    def keep(line: str) -> None:
        lines.append(line)
        print(line, flush=True)

    return keep


def produce(settings: Settings, records: list[Transaction]) -> None:
    sent = send_records(iter(records), KafkaSink(settings), RatePlan(rate=None))
    assert sent == len(records)


def test_rules_and_transactions_live_through_kafka(
    spark: SparkSession,
    settings: Settings,
    kafka_broker: KafkaBroker,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FRAUDLAKE_KAFKA_BOOTSTRAP", raising=False)
    settings = live_settings(settings, kafka_broker)
    topics = settings.kafka.topics
    ensure_topics(settings, [topics.transactions, topics.rules, topics.alerts])
    first, first_episodes = generated(seed=7, start_ms=int(time.time() * 1000) - 45 * 60_000, arrivals=1000)
    second, second_episodes = generated(seed=6, start_ms=max(r["eventTime"] for r in first) + 60_000, arrivals=600)
    assert all(first_episodes.get(p, 0) >= 2 for p in PATTERNS), first_episodes
    assert all(second_episodes.get(p, 0) >= 1 for p in PATTERNS), second_episodes
    pattern_of = {r["transactionId"]: r["fraudPattern"] for r in first + second}
    first_ids, second_ids = {r["transactionId"] for r in first}, {r["transactionId"] for r in second}

    progress: list[str] = []
    queries: list[StreamingQuery] = []
    started = time.monotonic()
    try:
        queries.append(start_rules_job(spark, settings, source="kafka", once=False))
        queries.append(start_engine(spark, settings, EngineRun(source="kafka"), report=report(progress)))

        # 1. The sample rules, through the rules topic and the rules job.
        rules = sample_rules(settings)
        edit_rules(spark, settings, "upsert", rules=rules, publish_to="kafka")
        live_wait(
            "the sample rules in the rules table",
            lambda: rule_states(spark, settings) == {r.rule_id: "ACTIVE" for r in rules},
        )

        # 2. Transactions with injected patterns: alerts in Delta, and the same alerts on the alerts topic.
        produce(settings, first)
        live_wait("the first transactions processed", lambda: processed(spark, settings) == len(first))
        phase_one = delta_alerts(spark, settings)
        caught = {p: {a["ruleId"] for a in phase_one if pattern_of.get(a["transactionId"]) == p} for p in PATTERNS}
        assert {p: CATCHES[p] - caught[p] for p in PATTERNS} == {p: set() for p in PATTERNS}, caught
        assert {a["transactionId"] for a in phase_one} <= first_ids

        # 3. Mid-run, without restarting anything: a new rule, a pause, a delete.
        new_rule_model = parse_rule(NEW_RULE, settings.transaction_schema)
        edit_rules(spark, settings, "upsert", rules=[new_rule_model], publish_to="kafka")
        edit_rules(spark, settings, "pause", rule_id=PAUSED, publish_to="kafka")
        edit_rules(spark, settings, "delete", rule_id=DELETED, publish_to="kafka")
        expected = {r.rule_id: "ACTIVE" for r in rules if r.rule_id != DELETED} | {PAUSED: "PAUSED", NEW_ID: "ACTIVE"}
        live_wait("the edits in the rules table", lambda: rule_states(spark, settings) == expected)
        changed = table_version(spark, settings.table_path("rules"))

        produce(settings, second)
        live_wait("the second transactions processed", lambda: processed(spark, settings) == len(first) + len(second))
        batches = engine_batches(spark, settings)
        alerts = delta_alerts(spark, settings)
        on_topic = live_wait(
            "every Delta alert on the alerts topic", lambda: all_on_topic(settings, alerts), seconds=60
        )
        elapsed = time.monotonic() - started
    finally:
        for query in queries:
            query.stop()

    # The micro-batches: those before the edits hold exactly the first transactions, those after the second.
    before = [b for b in batches if b["rulesVersion"] < changed]
    after = [b for b in batches if b["rulesVersion"] >= changed]
    assert sum(b["counts"]["rows"] for b in before) == len(first)
    assert sum(b["counts"]["rows"] for b in after) == len(second)
    assert after and min(b["batchId"] for b in after) > max(b["batchId"] for b in before)

    # From the first batch on the new rules version: the new rule alerts, the paused and deleted ones do not.
    new_rule = [a for a in alerts if a["ruleId"] == NEW_ID]
    assert new_rule and all(a["rulesVersion"] >= changed and a["transactionId"] in second_ids for a in new_rule)
    large_after = {r["transactionId"] for r in second if r["fraudPattern"] == "large_payment"}
    assert large_after and large_after <= {a["transactionId"] for a in new_rule}  # each one a transfer >= 75,000
    silenced = [a for a in alerts if a["ruleId"] in (PAUSED, DELETED)]
    assert silenced and all(a["rulesVersion"] < changed and a["transactionId"] in first_ids for a in silenced)
    assert not any(a["ruleId"] in (PAUSED, DELETED) for a in alerts if a["transactionId"] in second_ids)
    still_active = {a["ruleId"] for a in alerts if a["transactionId"] in second_ids}
    assert {2, 3, 4, NEW_ID} <= still_active, still_active

    # The alerts topic: every Delta alert (at-least-once: ids may repeat, none is missing or foreign).
    assert set(on_topic) == {a["alertId"] for a in alerts}
    for tailed in on_topic.values():
        assert tailed.alert["ingestedAt"] and tailed.alert["detectedAt"]
        assert tailed.latency_ms is not None and 0 <= tailed.latency_ms < MAX_LATENCY_MS

    # Latency per batch (batch_log is the metrics table): p50 <= p95 <= p99, in the progress lines too.
    for batch in batches:
        metrics = batch["metrics"]
        evaluated = [metrics[f"evaluatedP{p}Ms"] for p in (50, 95, 99)]
        assert 0 <= evaluated[0] <= evaluated[1] <= evaluated[2] < MAX_LATENCY_MS, metrics
        if batch["counts"]["alerts"]:
            latency = [metrics[f"latencyP{p}Ms"] for p in (50, 95, 99)]
            assert 0 <= latency[0] <= latency[1] <= latency[2] < MAX_LATENCY_MS, metrics
    assert len(progress) == len(batches)
    assert all(re.search(r"evaluated p50/p95/p99 \d+/\d+/\d+ ms$", line) for line in progress), progress
    assert any(re.search(r"alert latency p50/p95/p99 \d+/\d+/\d+ ms", line) for line in progress), progress
    table = batch_latencies(spark, settings, last=None)
    assert [(b.batch_id, b.alerts) for b in table] == [(b["batchId"], b["counts"]["alerts"]) for b in batches]

    # `fraudlake alerts tail` on the live topic, and `fraudlake alerts latency` on the live lakehouse.
    printed: list[str] = []
    summary = tail_alerts(
        settings,
        TailOptions(from_beginning=True, rule_id=NEW_ID, max_alerts=len(new_rule), timeout_seconds=20),
        out=printed.append,
    )
    parsed = [LINE.match(line) for line in printed]
    assert all(parsed) and summary.printed == len(new_rule), printed
    assert {m["tx"] for m in parsed if m} == {a["transactionId"] for a in new_rule}
    assert all(
        m["rule"] == str(NEW_ID) and m["agg"] == "MAX" and m["op"] == ">=" and m["limit"] == "9000" for m in parsed if m
    )
    assert all(Decimal(m["value"]) >= 9000 and m["window"] == "1" for m in parsed if m)
    conf = write_conf(settings, tmp_path)
    code, out = cli(capsys, settings, conf, "alerts", "latency", "--last", "0")
    assert code == 0 and len(out.strip().splitlines()) == len(batches) + 2, out
    print("\n".join(["", *progress, out, f"live test: {elapsed:.0f} s from start to the last alert on Kafka"]))


def _iso(epoch_ms: int) -> str:
    """A timestamp as the alert JSON has it (``2025-03-01T10:41:59.000Z``)."""
    return dt.datetime.fromtimestamp(epoch_ms / 1000, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def alert_record(rule_id: int, tx: str, *, ingested: str, value: str = "12.000000") -> dict[str, Any]:
    """An alert as the engine writes it to the topic (``alert_rows.alert_json``: the export fields)."""
    return {
        "alertId": f"{rule_id}:{tx}",
        "ruleId": rule_id,
        "transactionId": tx,
        "key": "[1000042]",
        "aggregateValue": Decimal(value),
        "aggregatorFunctionType": "COUNT",
        "limitOperatorType": "GREATER_EQUAL",
        "limit": Decimal("12.000000"),
        "windowMinutes": 3,
        "eventTime": "2025-03-01T10:41:58.000Z",
        "ingestedAt": ingested,
        "detectedAt": "2025-03-01T10:42:01.250Z",
        "latencyMs": 2250,
        "rulesVersion": 4,
        "batchId": 9,
    }


def test_alerts_tail_prints_each_alert_once(
    kafka_broker: KafkaBroker,
    settings: Settings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tail's lines on a real topic: repeats skipped, other rules filtered, latency from the record time."""
    monkeypatch.delenv("FRAUDLAKE_KAFKA_BOOTSTRAP", raising=False)
    settings = live_settings(settings, kafka_broker)
    ensure_topics(settings, [settings.kafka.topics.alerts])
    # Record times of a minute ago, not of the alerts' own (2025) day: the broker rolls a new log segment when a
    # batch is over 7 days newer than a segment's first record (the producer sends the first record alone, the junk
    # one is stamped now), and its retention check (every 5 minutes) deletes a segment whose records are all older
    # than the topic's 7 days; "from the beginning" then starts at offset 1 (the CLI tail once printed 9.0 s).
    ingested_ms = (int(time.time()) - 60) * 1000
    ingested, half_later = _iso(ingested_ms), _iso(ingested_ms + 500)
    sent = [
        (alert_record(5, "tx-a", ingested=ingested, value="14.000000"), ingested_ms + 3100),
        (alert_record(5, "tx-a", ingested=ingested, value="14.000000"), ingested_ms + 9000),
        (alert_record(2, "tx-b", ingested=ingested), ingested_ms + 3300),
        (alert_record(5, "tx-c", ingested=half_later), ingested_ms + 4700),
    ]
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    for alert, timestamp_ms in sent:  # one partition: the order is the send order
        value = json_line(alert).encode()  # decimals as JSON numbers with their digits, as Spark's to_json
        producer.send(settings.kafka.topics.alerts, value=value, partition=0, timestamp_ms=timestamp_ms)
    producer.send(settings.kafka.topics.alerts, value=b"not an alert", partition=0)
    producer.flush()
    producer.close()

    printed: list[str] = []
    summary = tail_alerts(settings, TailOptions(from_beginning=True, rule_id=5, timeout_seconds=3), out=printed.append)
    assert printed == [
        "10:42:01.250  rule 5  key [1000042]  COUNT 14 >= 12 (3 min)  tx tx-a  batch 9  latency 3.1 s",
        "10:42:01.250  rule 5  key [1000042]  COUNT 12 >= 12 (3 min)  tx tx-c  batch 9  latency 4.2 s",
    ]
    assert (summary.printed, summary.duplicates, summary.unreadable) == (2, 1, 1)
    assert summary.text() == (
        "alerts tail: 2 alert(s), 1 repeat(s) skipped, 1 unreadable record(s); latency p50/p95/p99 4200/4200/4200 ms"
    )
    assert format_alert(TailedAlert(alert_record(2, "tx-d", ingested=""), None)).endswith("latency 2.2 s")
    relative = {**alert_record(3, "tx-e", ingested="", value="100"), "aggregatorFunctionType": "VALUE"}
    relative.update(limitOperatorType="GREATER", limit=Decimal("5.000000"), baselineValue=Decimal("17.000000"))
    assert "VALUE 100 > 5 x baseline 17 (3 min)" in format_alert(TailedAlert(relative, None))

    conf = write_conf(settings, tmp_path)
    code, out = cli(capsys, settings, conf, "alerts", "tail", "--from-beginning", "--max", "1", "--timeout", "5")
    assert code == 0
    assert out.splitlines()[1:] == [
        "10:42:01.250  rule 5  key [1000042]  COUNT 14 >= 12 (3 min)  tx tx-a  batch 9  latency 3.1 s",
        "alerts tail: 1 alert(s); latency p50/p95/p99 3100/3100/3100 ms",
    ]


def test_latency_percentiles_mirror_the_ingestion_percentiles() -> None:
    """Latency pX = commit - ingestion p(100-X); the progress line shows both series, alerts first."""
    alerts = latency_metrics("latency", commit_ms=10_000.0, ingestion_ms=[9_000, 8_000, 7_500])
    assert alerts == {"latencyP50Ms": 1000.0, "latencyP95Ms": 2000.0, "latencyP99Ms": 2500.0}
    evaluated = latency_metrics("evaluated", commit_ms=10_000.0, ingestion_ms=[9_100, 8_000, 7_000])
    assert latency_metrics("latency", commit_ms=10_000.0, ingestion_ms=None) == {}
    assert latency_metrics("latency", commit_ms=10_000.0, ingestion_ms=[None, None, None]) == {}
    assert format_latency({**alerts, **evaluated}) == (
        "alert latency p50/p95/p99 1000/2000/2500 ms, evaluated p50/p95/p99 900/2000/3000 ms"
    )
    assert format_latency(evaluated) == "evaluated p50/p95/p99 900/2000/3000 ms"
