"""The README's live session on a fresh broker, in the README's order: the jobs start before any topic exists.

``make kafka-start`` gives a broker without topics; the README then starts ``fraudlake rules run --source kafka``
and ``fraudlake run --source kafka --alerts-to-kafka`` and only later publishes rules and transactions (which create
their topics). Spark's Kafka source dies at once on a missing topic, so each job creates what it reads first. Here:
a broker of its own (no topic), both jobs started as their commands start them, then ``fraudlake rules upsert`` and
``fraudlake generate --sink kafka``; both queries must still be running, and the alerts must be the reference
evaluator's over the engine's micro-batches.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from engine_fixtures import alerts_by_id
from kafka.admin import KafkaAdminClient
from polling import wait_for
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from reference_evaluator import RefBatch, evaluate
from rules_cdc_support import write_conf

from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.cli import main
from pipelines.engine.job import EngineRun, start_engine
from pipelines.engine.keys import encode_key
from pipelines.generator.transactions import FraudRates, GeneratorConfig, generate
from pipelines.local.kafka_broker import KafkaBroker, started_broker
from rules_cdc.rule_model import parse_rule
from rules_cdc.streaming_job import start_rules_job

pytestmark = pytest.mark.kafka
T = TypeVar("T")
COUNT, SEED, START_MS, FRAUD = 300, 21, 1_700_000_000_000, 0.05


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    with started_broker(tmp_path / "kafka", heap="256m") as broker:
        yield broker


def _wait(what: str, probe: Callable[[], T | None], queries: list[StreamingQuery]) -> T:
    """``wait_for`` that fails at once when a query dies (its error said) rather than at the deadline."""

    def checked() -> T | None:
        for query in queries:
            assert query.isActive, f"{query.name} died waiting for {what}: {query.exception()}"
        return probe()

    return wait_for(what, checked, seconds=600, every=1.0)


def test_the_readme_order_works_on_a_fresh_broker(
    spark: SparkSession, settings: Settings, fresh_broker: KafkaBroker, tmp_path: Path
) -> None:
    kafka = settings.kafka.model_copy(update={"bootstrap_servers": fresh_broker.bootstrap})
    engine = settings.engine.model_copy(update={"trigger_interval_seconds": 1})
    settings = settings.model_copy(update={"kafka": kafka, "engine": engine})
    topics = settings.kafka.topics
    admin = KafkaAdminClient(bootstrap_servers=fresh_broker.bootstrap)
    try:
        assert not {topics.rules, topics.transactions, topics.alerts} & set(admin.list_topics())
        queries = [start_rules_job(spark, settings, source="kafka", once=False)]
        queries.append(start_engine(spark, settings, EngineRun(source="kafka", alerts_to_kafka=True)))
        try:
            time.sleep(5)  # several triggers on the empty topics
            assert all(q.isActive and q.exception() is None for q in queries), [q.exception() for q in queries]
            assert {topics.rules, topics.transactions, topics.alerts} <= set(admin.list_topics())
            _live_session(spark, settings, tmp_path, queries)
        finally:
            for query in queries:
                query.stop()
    finally:
        admin.close()


def _live_session(spark: SparkSession, settings: Settings, tmp_path: Path, queries: list[StreamingQuery]) -> None:
    """The README's terminal 3: the sample rules, then generated transactions; alerts as the contract says."""
    conf, root = str(write_conf(settings, tmp_path)), settings.lakehouse_root
    samples = REPO_ROOT / "conf" / "sample_rules.json"
    assert main(["rules", "upsert", str(samples), "--conf", conf, "--lakehouse", root]) == 0
    rules = [parse_rule(r, settings.transaction_schema) for r in json.loads(samples.read_text())]
    rules_table = settings.table_path("rules")
    _wait("the sample rules", lambda: spark.read.format("delta").load(rules_table).count() == len(rules), queries)

    args = ["generate", "--sink", "kafka", "--count", str(COUNT), "--rate", "0", "--seed", str(SEED)]
    args += ["--start-ms", str(START_MS), "--fraud-rate", str(FRAUD), "--conf", conf, "--lakehouse", root]
    assert main(args) == 0
    records = generate(
        GeneratorConfig(seed=SEED, start_ms=START_MS, events_per_second=10.0, fraud=FraudRates.split(FRAUD)), COUNT
    )
    log = settings.table_path("batch_log")

    def processed() -> bool:
        rows = spark.read.format("delta").load(log).agg(F.sum(F.col("counts")["rows"])).first()
        return rows is not None and (rows[0] or 0) >= COUNT

    _wait("every transaction processed", processed, queries)
    bronze = spark.read.format("delta").load(settings.table_path("bronze_transactions"))
    batch_of = {r["transactionId"]: r["batchId"] for r in bronze.select("transactionId", "batchId").collect()}
    assert sorted(batch_of) == sorted(r["transactionId"] for r in records)
    batches = [[r for r in records if batch_of[r["transactionId"]] == b] for b in sorted(set(batch_of.values()))]
    expected = {
        (a.rule_id, a.transaction_id): (encode_key(a.key), a.aggregate_value)
        for a in evaluate([RefBatch(rules, batch) for batch in batches])
    }
    assert expected, "the generated fraud must raise alerts"
    assert alerts_by_id(spark, settings) == expected
