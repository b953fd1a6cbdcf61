"""Kafka client settings from conf, for kafka-python and for Spark's Kafka source/sink, and topic creation.

Credentials come only from the environment variables named in ``kafka.security`` and are never logged.

Example::

    producer = KafkaProducer(**python_client_config(settings))
    spark.readStream.format("kafka").options(**spark_kafka_source_options(settings)).option("subscribe", topic)
    ensure_topics(settings, [settings.kafka.topics.alerts])
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pipelines.base.settings import Settings


def python_client_config(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for kafka-python clients (KafkaProducer, KafkaConsumer, KafkaAdminClient)."""
    security = settings.kafka.security
    config: dict[str, Any] = {
        "bootstrap_servers": settings.kafka.bootstrap_servers,
        "security_protocol": security.protocol,
    }
    if security.sasl_mechanism:
        password = security.password()
        config.update(
            sasl_mechanism=security.sasl_mechanism,
            sasl_plain_username=security.username(),
            sasl_plain_password=password.get_secret_value() if password else None,
        )
    if security.ssl_cafile:
        config["ssl_cafile"] = security.ssl_cafile
    return config


def spark_kafka_options(settings: Settings) -> dict[str, str]:
    """``kafka.*`` options for Spark's Kafka source and sink (JAAS config built from the environment)."""
    security = settings.kafka.security
    options = {
        "kafka.bootstrap.servers": settings.kafka.bootstrap_servers,
        "kafka.security.protocol": security.protocol,
    }
    if security.sasl_mechanism:
        password = security.password()
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if security.sasl_mechanism == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        secret = password.get_secret_value() if password else ""
        options["kafka.sasl.mechanism"] = security.sasl_mechanism
        options["kafka.sasl.jaas.config"] = (
            f'{module} required username="{security.username() or ""}" password="{secret}";'
        )
    if security.ssl_cafile:
        options["kafka.ssl.truststore.location"] = security.ssl_cafile
    return options


def spark_kafka_source_options(settings: Settings) -> dict[str, str]:
    """``spark_kafka_options`` for a Spark Kafka *source*, with the consumers' ``fetch.max.wait.ms``
    (``kafka.fetch_max_wait_ms``). A micro-batch reads its partitions up to the log end; the consumer has by then sent
    its next fetch, which the broker holds until data arrives or this much time passes, and the next batch's first
    poll on that consumer waits for it: with Kafka's 500 ms, reading 3,000 records to the log end took ~1.2 s
    instead of ~0.2 s (docs/engine.md, Latency)."""
    return {**spark_kafka_options(settings), "kafka.fetch.max.wait.ms": str(settings.kafka.fetch_max_wait_ms)}


def ensure_topics(settings: Settings, topics: Iterable[str]) -> list[str]:
    """Create the missing topics (partitions and retention from conf); return the names created."""
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(**python_client_config(settings))
    try:
        existing = set(admin.list_topics())
        missing = [t for t in dict.fromkeys(topics) if t not in existing]
        if not missing:
            return []
        new = [
            NewTopic(
                name,
                num_partitions=settings.kafka.partitions,
                replication_factor=1 if settings.environment in ("local", "test") else 3,
                topic_configs={"retention.ms": str(settings.kafka.retention_ms)},
            )
            for name in missing
        ]
        try:
            admin.create_topics(new)
        except TopicAlreadyExistsError:
            pass  # created concurrently by another client: the end state is what we wanted
        return missing
    finally:
        admin.close()
