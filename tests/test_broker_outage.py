"""The Kafka broker stopped under a running engine, then started again: nothing lost, nothing counted twice.

A dedicated broker (its own data folder and free ports; the session's shared broker is left alone) feeds the
engine's Kafka source. The engine runs continuously and catches up with a first set of transactions; the broker is
stopped (SIGTERM) for a while and started again from the same data folder, and a second set is produced. The
engine must ride out an outage this short (docs/reliability.md): Spark's Kafka source retries its offset requests
(each bounded by the admin client's 60 s API timeout, three attempts), so the query stays up and takes the second
set when the broker is back. In the end bronze holds every transaction once and the alerts are the contract's,
each once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from engine_fixtures import alerts_by_id, json_line, make_rule, put_rules
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from reference_evaluator import RefBatch, evaluate
from reliability_support import record_outcome

from pipelines.base.settings import Settings
from pipelines.engine.job import EngineRun, start_engine
from pipelines.engine.keys import encode_key
from pipelines.local.kafka_broker import KafkaBroker, started_broker

pytestmark = pytest.mark.kafka
T0 = 1_700_006_400_000
RULES = [make_rule(1, limit=80, windowMinutes=2), make_rule(2, groupingKeyNames=[], aggregatorFunctionType="MAX")]
OUTAGE_SECONDS = 15


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    with started_broker(tmp_path / "kafka", heap="256m") as broker:
        yield broker


def _records(part: int, n: int = 20) -> list[dict[str, Any]]:
    return [
        {
            "transactionId": f"k{part}-{i:02d}",
            "eventTime": T0 + part * 180_000 + i * 5_000,
            "payerId": i % 4,
            "paymentAmount": Decimal(15 + 3 * i) + Decimal("0.10"),
        }
        for i in range(n)
    ]


def _produce(broker: KafkaBroker, topic: str, records: list[dict[str, Any]]) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", retries=5)
    try:
        for record in records:
            producer.send(topic, key=str(record["payerId"]).encode(), value=json_line(record).encode())
        producer.flush(timeout=60)
    finally:
        producer.close()


def _completed_rows(spark: SparkSession, settings: Settings) -> int:
    """Records of the micro-batches that completed (logged last, after alerts and state), not just bronze's."""
    log = spark.read.format("delta").load(settings.table_path("batch_log"))
    row = log.agg(F.sum(F.col("counts")["rows"])).first()
    return int(row[0] or 0) if row is not None else 0


def _wait_for(spark: SparkSession, settings: Settings, query: StreamingQuery, rows: int, timeout_s: float) -> bool:
    """Poll until completed batches hold ``rows`` records; False if the query died first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not query.isActive:
            return False
        if _completed_rows(spark, settings) >= rows:
            return True
        time.sleep(2)
    raise AssertionError(f"completed batches did not reach {rows} records within {timeout_s:.0f} s")


def test_the_engine_recovers_from_a_broker_outage_without_loss_or_duplicates(
    spark: SparkSession, settings: Settings, own_broker: KafkaBroker
) -> None:
    started = time.monotonic()
    topic = f"tx-outage-{uuid.uuid4().hex[:8]}"
    kafka = settings.kafka.model_copy(
        update={
            "bootstrap_servers": own_broker.bootstrap,
            "topics": settings.kafka.topics.model_copy(update={"transactions": topic}),
        }
    )
    engine = settings.engine.model_copy(update={"trigger_interval_seconds": 1})
    settings = settings.model_copy(update={"kafka": kafka, "engine": engine})
    admin = KafkaAdminClient(bootstrap_servers=own_broker.bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    admin.close()
    fresh_lakehouse(spark, settings)
    put_rules(spark, settings, RULES)
    first, second = _records(0), _records(1)
    _produce(own_broker, topic, first)

    run, lines = EngineRun(source="kafka"), list[str]()
    query = start_engine(spark, settings, run, report=lines.append)
    try:
        assert _wait_for(spark, settings, query, len(first), timeout_s=300), query.exception()
        own_broker.stop()
        time.sleep(OUTAGE_SECONDS)  # triggers keep firing against a dead broker meanwhile
        assert query.isActive, f"the query died during a {OUTAGE_SECONDS} s outage: {query.exception()}"
        own_broker.start()
        _produce(own_broker, topic, second)
        rode_it_out = _wait_for(spark, settings, query, len(first) + len(second), timeout_s=300)
        assert rode_it_out, f"the query failed after the broker came back: {query.exception()}"
        time.sleep(3)  # a trigger or two more: nothing must arrive twice
        assert query.isActive and query.exception() is None
    finally:
        query.stop()

    bronze = spark.read.format("delta").load(settings.table_path("bronze_transactions")).select("transactionId")
    ids = [r["transactionId"] for r in bronze.collect()]
    produced = {r["transactionId"] for r in first + second}
    lost, duplicated = len(produced - set(ids)), len(ids) - len(set(ids))
    assert lost == 0 and duplicated == 0 and set(ids) == produced
    expected = {
        (a.rule_id, a.transaction_id): (encode_key(a.key), a.aggregate_value)
        for a in evaluate([RefBatch(RULES, first), RefBatch(RULES, second)])
    }
    alerts = spark.read.format("delta").load(settings.table_path("alerts"))
    assert alerts_by_id(spark, settings) == expected and alerts.count() == len(expected)
    record_outcome(
        f"Kafka broker stopped for {OUTAGE_SECONDS} s under the running engine, then restarted",
        "fault",
        records_in=len(produced),
        applied=len(set(ids)),
        quarantined=0,
        lost=lost,
        duplicated=duplicated,
        outcome=f"rode it out (query never failed); {len(lines)} batches; alerts = contract",
        seconds=time.monotonic() - started,
    )
