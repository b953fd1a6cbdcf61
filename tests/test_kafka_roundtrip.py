"""Kafka through the real local broker: kafka-python produce/consume, and Spark's Kafka source."""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipelines.local.kafka_broker import KafkaBroker

pytestmark = pytest.mark.kafka


def test_produce_consume_and_spark_read(kafka_broker: KafkaBroker, spark: SparkSession) -> None:
    topic = f"roundtrip-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    sent = {f"k{i}": f"v{i}" for i in range(10)}
    for key, value in sent.items():
        producer.send(topic, key=key.encode(), value=value.encode())
    producer.flush()
    producer.close()

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=kafka_broker.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
        group_id=f"g-{topic}",
    )
    received = {m.key.decode(): m.value.decode() for m in consumer}
    consumer.close()
    assert received == sent

    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka_broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    rows = frame.select(F.col("key").cast("string"), F.col("value").cast("string"), "partition").collect()
    assert {r.key: r.value for r in rows} == sent
    assert {r.partition for r in rows} <= {0, 1}


def test_broker_status_reports_running(kafka_broker: KafkaBroker) -> None:
    assert kafka_broker.answers()
    assert kafka_broker.status().startswith("running")
