"""The engine over its other sources: a Delta table of transactions, and Kafka (with alerts sent back to Kafka)."""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from engine_fixtures import alerts_by_id, json_line, make_rule, put_rules
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from lakehouse_template import fresh_lakehouse
from polling import wait_for
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from reference_evaluator import RefBatch, evaluate

from pipelines.base.settings import Settings
from pipelines.engine.batch_handler import BatchHandler
from pipelines.engine.job import EngineRun, run_engine
from pipelines.engine.keys import encode_key
from pipelines.local.kafka_broker import KafkaBroker

T0 = 1_700_006_400_000
RULES = [
    make_rule(1, limit=50, windowMinutes=5),
    make_rule(
        2,
        groupingKeyNames=[],
        aggregatorFunctionType="COUNT",
        limitOperatorType="GREATER_EQUAL",
        limit=4,
        windowMinutes=1,
    ),
]


def _records(n: int) -> list[dict[str, object]]:
    return [
        {
            "transactionId": f"t{i:03d}",
            "eventTime": T0 + i * 9_000,
            "payerId": i % 3,
            "paymentAmount": Decimal(5 * i) + Decimal("0.50"),
            "paymentType": "CRD",
            "note": f"n{i}",
        }
        for i in range(n)
    ]


def _expected(records: list[dict[str, object]]) -> dict[tuple[int, str], tuple[str, Decimal]]:
    return {
        (a.rule_id, a.transaction_id): (encode_key(a.key), a.aggregate_value)
        for a in evaluate([RefBatch(rules=RULES, transactions=records)])
    }


def _cached_rdds(spark: SparkSession) -> set[int]:
    """The ids of the RDDs with blocks in the block manager (cached frames, local checkpoints), Delta's own cached
    snapshot states aside (its log cache keeps and bounds those)."""
    infos = spark.sparkContext._jsc.sc().getRDDStorageInfo()
    return {int(i.id()) for i in infos if not str(i.name()).startswith("Delta Table State")}


def _python_listeners(spark: SparkSession) -> int:
    """How many Python streaming query listeners the session has (``ReleaseOnTermination`` is one per engine)."""
    listeners = spark._jsparkSession.streams().listListeners()
    return sum(1 for listener in listeners if "Python" in listener.getClass().getName())


def test_delta_table_source(
    spark: SparkSession, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _records(20)
    source = str(tmp_path / "raw_transactions")
    rows = [
        (
            r["transactionId"],
            dt.datetime.fromtimestamp(int(r["eventTime"]) / 1000, dt.UTC).replace(tzinfo=None),
            r["payerId"],
            r["paymentAmount"],
            r["paymentType"],
            r["note"],
        )
        for r in records
    ]
    schema = (
        "transactionId string, eventTime timestamp, payerId long, paymentAmount decimal(18,2), paymentType string,"
        " note string"
    )
    spark.createDataFrame(rows, schema).write.format("delta").save(source)
    fresh_lakehouse(spark, settings)
    put_rules(spark, settings, RULES)
    cached_before, listeners_before = _cached_rdds(spark), _python_listeners(spark)
    released: list[float] = []
    release = BatchHandler.release

    def slow_release(handler: BatchHandler) -> None:  # as slow as unpersisting a large state
        time.sleep(1.5)
        release(handler)
        released.append(time.monotonic())

    monkeypatch.setattr(BatchHandler, "release", slow_release)
    run_engine(spark, settings, EngineRun(source="delta", input_path=source, once=True), report=lambda line: None)
    returned = time.monotonic()
    # Before run_engine returned (a CLI process then exits), its listener left the session and its callback had
    # finished releasing the handler: no call from the JVM into a Python process that is exiting.
    assert _python_listeners(spark) == listeners_before
    assert len(released) == 1 and released[0] <= returned

    assert alerts_by_id(spark, settings) == _expected(records)
    # The query has ended: the state and cooldown memory its handler cached are released, nothing of it stays cached.
    wait_for("the ended engine's caches released", lambda: _cached_rdds(spark) <= cached_before, seconds=30)
    bronze = spark.read.format("delta").load(settings.table_path("bronze_transactions"))
    extras = {r["transactionId"]: json.loads(r["extraFields"]) for r in bronze.collect()}
    assert extras["t007"] == {"note": "n7"} and len(extras) == 20
    assert bronze.where(F.col("source") == "delta").count() == 20


@pytest.mark.kafka
def test_kafka_source_and_alerts_to_kafka(kafka_broker: KafkaBroker, spark: SparkSession, settings: Settings) -> None:
    suffix = uuid.uuid4().hex[:8]
    topics = settings.kafka.topics.model_copy(update={"transactions": f"tx-{suffix}", "alerts": f"alerts-{suffix}"})
    kafka = settings.kafka.model_copy(update={"bootstrap_servers": kafka_broker.bootstrap, "topics": topics})
    settings = settings.model_copy(update={"kafka": kafka})
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    admin.create_topics(
        [NewTopic(t, num_partitions=2, replication_factor=1) for t in (topics.transactions, topics.alerts)]
    )
    admin.close()
    records = _records(20)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    for record in records:
        producer.send(topics.transactions, key=str(record["payerId"]).encode(), value=json_line(record).encode())
    producer.send(topics.transactions, value=b"{not json")
    producer.flush()
    producer.close()

    fresh_lakehouse(spark, settings)
    put_rules(spark, settings, RULES)
    run_engine(spark, settings, EngineRun(source="kafka", once=True, alerts_to_kafka=True), report=lambda line: None)

    expected = _expected(records)
    assert alerts_by_id(spark, settings) == expected
    bronze = spark.read.format("delta").load(settings.table_path("bronze_transactions"))
    assert bronze.where(F.col("kafkaOffset").isNotNull() & F.col("kafkaPartition").isin(0, 1)).count() == 20
    quarantined = spark.read.format("delta").load(settings.table_path("quarantine")).collect()
    assert len(quarantined) == 1 and quarantined[0]["sourceOffset"].startswith(f"kafka:{topics.transactions}/")

    consumer = KafkaConsumer(
        topics.alerts,
        bootstrap_servers=kafka_broker.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
        group_id=f"g-{suffix}",
    )
    sent = [json.loads(m.value) for m in consumer]
    consumer.close()
    assert {(a["ruleId"], a["transactionId"]) for a in sent} == set(expected)
    assert {"alertId", "ruleId", "transactionId", "key", "aggregateValue", "limit", "eventTime", "detectedAt"} <= set(
        sent[0]
    )
