"""Streaming sources -> RAW_SCHEMA frames (the JSON text of each record, where and when it arrived).

* ``files``: JSON lines under a folder (default ``<lakehouse>/_landing/transactions``), read as text so that an
  unparseable line is kept verbatim; ingestion time = the file's modification time.
* ``kafka``: the transactions topic (conf ``kafka``); ingestion time = the record's Kafka timestamp. Spark's
  source fails at once on a topic that does not exist, so the job creates it first (``ensure_source_topics``).
* ``delta``: a Delta table of transactions (any columns; each row is turned into JSON and parsed like the
  others); ingestion time = the start of the micro-batch.

Example::

    raw = read_source(spark, settings, "files", max_files_per_trigger=10)
    raw.writeStream.foreachBatch(handler)...
"""

from __future__ import annotations

from typing import Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.base.kafka_clients import ensure_topics, spark_kafka_source_options
from pipelines.base.settings import Settings
from pipelines.engine.parse_transactions import RAW_SCHEMA

SourceKind = Literal["files", "kafka", "delta"]
SOURCES: tuple[SourceKind, ...] = ("files", "kafka", "delta")


def _conform(frame: DataFrame) -> DataFrame:
    return frame.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in RAW_SCHEMA.fields])


def read_files(spark: SparkSession, path: str, *, max_files_per_trigger: int | None = None) -> DataFrame:
    """JSON-lines files under ``path`` as raw records (one per line)."""
    reader = spark.readStream.format("text")
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", str(max_files_per_trigger))
    lines = reader.load(path).where(F.trim("value") != "")
    return _conform(
        lines.select(
            F.col("value").alias("raw"),
            F.lit("files").alias("source"),
            F.concat(F.lit("file:"), F.col("_metadata.file_path")).alias("sourceOffset"),
            F.lit(None).alias("kafkaPartition"),
            F.lit(None).alias("kafkaOffset"),
            F.col("_metadata.file_modification_time").alias("ingestedAt"),
        )
    )


def read_kafka(spark: SparkSession, settings: Settings, *, topic: str | None = None) -> DataFrame:
    """The transactions topic as raw records, with partition, offset and Kafka timestamp."""
    kafka = settings.kafka
    name = topic or kafka.topics.transactions
    records = (
        spark.readStream.format("kafka")
        .options(**spark_kafka_source_options(settings))
        .option("subscribe", name)
        .option("startingOffsets", kafka.starting_offsets)
        .option("maxOffsetsPerTrigger", str(kafka.max_offsets_per_trigger))
        .load()
    )
    return _conform(
        records.select(
            F.col("value").cast("string").alias("raw"),
            F.lit("kafka").alias("source"),
            F.format_string("kafka:%s/%d/%d", F.col("topic"), F.col("partition"), F.col("offset")).alias(
                "sourceOffset"
            ),
            F.col("partition").alias("kafkaPartition"),
            F.col("offset").alias("kafkaOffset"),
            F.col("timestamp").alias("ingestedAt"),
        )
    )


def ensure_source_topics(
    settings: Settings, kind: SourceKind, *, topic: str | None = None, alerts: bool = False
) -> list[str]:
    """Create the Kafka topics a run reads (and the alerts topic it writes, with ``alerts``) that are missing;
    return the names created. Idempotent; a broker that cannot be reached fails here, with Kafka's error."""
    wanted = [topic or settings.kafka.topics.transactions] if kind == "kafka" else []
    wanted += [settings.kafka.topics.alerts] if alerts else []
    return ensure_topics(settings, wanted) if wanted else []


def read_delta(spark: SparkSession, path: str) -> DataFrame:
    """A Delta table of transactions as raw records: each row as a JSON object (timestamps as ISO-8601)."""
    rows = spark.readStream.format("delta").load(path)
    return _conform(
        rows.select(
            F.to_json(F.struct(*[F.col(c) for c in rows.columns])).alias("raw"),
            F.lit("delta").alias("source"),
            F.lit(f"delta:{path}").alias("sourceOffset"),
            F.lit(None).alias("kafkaPartition"),
            F.lit(None).alias("kafkaOffset"),
            F.lit(None).alias("ingestedAt"),
        )
    )


def read_source(
    spark: SparkSession,
    settings: Settings,
    kind: SourceKind,
    *,
    path: str | None = None,
    max_files_per_trigger: int | None = None,
) -> DataFrame:
    """The streaming raw frame of a source kind; ``path`` overrides the landing folder or names the Delta table."""
    if kind == "files":
        return read_files(
            spark, path or settings.landing_path("transactions"), max_files_per_trigger=max_files_per_trigger
        )
    if kind == "kafka":
        return read_kafka(spark, settings, topic=path)
    if kind == "delta":
        if not path:
            raise ValueError("--source delta needs --input PATH (the Delta table of transactions)")
        return read_delta(spark, path)
    raise ValueError(f"unknown source {kind!r}; use one of {SOURCES}")
