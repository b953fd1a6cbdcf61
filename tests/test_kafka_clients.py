"""Kafka client settings from conf (security from the environment only), and topic creation on the real broker."""

from __future__ import annotations

import uuid

import pytest
from kafka.admin import KafkaAdminClient
from pyspark.sql import SparkSession

from pipelines.base.kafka_clients import (
    ensure_topics,
    python_client_config,
    spark_kafka_options,
    spark_kafka_source_options,
)
from pipelines.base.settings import KafkaSecurity, Settings
from pipelines.engine.sources import read_kafka
from pipelines.local.kafka_broker import KafkaBroker
from rules_cdc.streaming_job import read_records


def _with_kafka(settings: Settings, **update: object) -> Settings:
    return settings.model_copy(update={"kafka": settings.kafka.model_copy(update=update)})


def test_plaintext_config(settings: Settings) -> None:
    assert python_client_config(settings) == {
        "bootstrap_servers": settings.kafka.bootstrap_servers,
        "security_protocol": "PLAINTEXT",
    }
    assert spark_kafka_options(settings) == {
        "kafka.bootstrap.servers": settings.kafka.bootstrap_servers,
        "kafka.security.protocol": "PLAINTEXT",
    }


def test_sources_fetch_without_waiting_at_the_log_end(settings: Settings) -> None:
    """A source's consumers ask the broker to hold a fetch for more data only ``kafka.fetch_max_wait_ms`` (10), not
    Kafka's 500 ms: a micro-batch reads to the log end, and its next batch's first poll waits for that fetch."""
    assert spark_kafka_source_options(settings) == {**spark_kafka_options(settings), "kafka.fetch.max.wait.ms": "10"}
    assert spark_kafka_source_options(_with_kafka(settings, fetch_max_wait_ms=0))["kafka.fetch.max.wait.ms"] == "0"


def test_the_engine_and_the_rules_job_read_kafka_with_it(spark: SparkSession, settings: Settings) -> None:
    for frame in (read_kafka(spark, settings), read_records(spark, settings, "kafka")):
        assert "kafka.fetch.max.wait.ms=10" in frame._jdf.queryExecution().logical().toString()


def test_sasl_credentials_come_from_the_environment(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    security = KafkaSecurity(
        protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username_env="T_USER", sasl_password_env="T_PASS"
    )
    sasl = _with_kafka(settings, security=security)
    monkeypatch.setenv("T_USER", "svc")
    monkeypatch.setenv("T_PASS", "pa55")
    config = python_client_config(sasl)
    assert (config["sasl_plain_username"], config["sasl_plain_password"]) == ("svc", "pa55")
    options = spark_kafka_options(sasl)
    assert options["kafka.sasl.mechanism"] == "PLAIN"
    assert 'username="svc" password="pa55"' in options["kafka.sasl.jaas.config"]
    assert "pa55" not in sasl.model_dump_json()


@pytest.mark.kafka
def test_ensure_topics_creates_only_missing_topics(settings: Settings, kafka_broker: KafkaBroker) -> None:
    local = _with_kafka(settings, bootstrap_servers=kafka_broker.bootstrap, partitions=2)
    topic = f"ensure-{uuid.uuid4().hex[:8]}"
    assert ensure_topics(local, [topic, topic]) == [topic]
    assert ensure_topics(local, [topic]) == []
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        described = admin.describe_topics([topic])[0]
    finally:
        admin.close()
    assert len(described["partitions"]) == 2
