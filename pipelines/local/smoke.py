"""Runtime smoke checks: a Delta MERGE round trip and a Kafka produce -> Spark read round trip."""

from __future__ import annotations

import uuid

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipelines.base.settings import Settings
from pipelines.local.kafka_broker import KafkaBroker


def last_operation_metrics(table: DeltaTable) -> dict[str, int]:
    """The operationMetrics of the table's newest commit, as integers (``numTargetRowsUpdated``, ...)."""
    row = table.history(1).select("operationMetrics").first()
    metrics = row["operationMetrics"] if row else {}
    return {key: int(value) for key, value in (metrics or {}).items() if value.lstrip("-").isdigit()}


def delta_smoke(spark: SparkSession, settings: Settings) -> str:
    """Write, MERGE and read back a two-row Delta table under the lakehouse; raise if anything is off."""
    path = settings.table_path(f"_smoke/delta-{uuid.uuid4().hex[:8]}")
    spark.createDataFrame([(1, "a"), (2, "b")], "id long, v string").write.format("delta").save(path)
    updates = spark.createDataFrame([(2, "B"), (3, "c")], "id long, v string")
    table = DeltaTable.forPath(spark, path)
    (
        table.alias("t")
        .merge(updates.alias("s"), "t.id = s.id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    metrics = last_operation_metrics(table)
    rows = sorted((r.id, r.v) for r in table.toDF().collect())
    if rows != [(1, "a"), (2, "B"), (3, "c")] or metrics.get("numTargetRowsUpdated") != 1:
        raise RuntimeError(f"Delta MERGE smoke check failed: rows={rows} metrics={metrics}")
    return f"MERGE updated 1, inserted {metrics.get('numTargetRowsInserted')} at {path}"


def kafka_smoke(spark: SparkSession, settings: Settings) -> str:
    """Start the local broker if needed, produce three records, read them back with Spark's Kafka source."""
    broker = KafkaBroker.from_settings(settings)
    was_running = broker.pid() is not None
    broker.start()
    try:
        return _round_trip(spark, broker)
    finally:
        if not was_running:
            broker.stop()


def _round_trip(spark: SparkSession, broker: KafkaBroker) -> str:
    from kafka import KafkaProducer

    topic = f"fraudlake.smoke.{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(3):
        producer.send(topic, key=str(i).encode(), value=f"hello-{i}".encode())
    producer.flush()
    producer.close()
    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .select(F.col("value").cast("string").alias("value"))
    )
    values = sorted(r.value for r in frame.collect())
    if values != ["hello-0", "hello-1", "hello-2"]:
        raise RuntimeError(f"Kafka smoke check failed: read {values}")
    return f"3 records through {topic} on {broker.bootstrap}"
