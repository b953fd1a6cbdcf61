"""The rules CDC streaming job: Debezium-style records from Kafka or a landing folder, applied per micro-batch.

Both sources feed the same ``foreachBatch`` handler, which collects the micro-batch's record values to the
driver (rules are small; at most ``MAX_BATCH_RECORDS`` per batch, bounded by ``maxOffsetsPerTrigger`` for
Kafka and ``maxFilesPerTrigger`` for files, and checked), validates them with pydantic and calls
``rules_cdc.apply_changes.apply_records`` with ``txn = (app id, batch id)``: a replayed batch writes nothing.

* ``kafka``: ``settings.kafka.topics.rules``, ``startingOffsets`` from conf; offsets ``kafka:topic/p/o``. The topic
  is created first when it is missing (Spark's source would fail at once on a fresh broker).
* ``files`` (the embedded default): JSON-lines files under ``settings.landing_path("rules")``, one record value
  per line, ``null`` for a Kafka tombstone; each file is read whole so that offsets are ``file:/path:line``.

Example::

    query = start_rules_job(spark, settings, source="files", once=True)
    query.awaitTermination()
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from pipelines.base.kafka_clients import ensure_topics, spark_kafka_source_options
from pipelines.base.settings import Settings
from rules_cdc.apply_changes import ApplyResult, apply_records, ensure_rules_tables
from rules_cdc.parse_events import RawRecord

Source = Literal["files", "kafka"]
JOB_NAME = "rules_cdc"
MAX_BATCH_RECORDS = 50_000
"""Records one micro-batch may bring to the driver. Rules change rarely; a larger batch is a misconfiguration."""
MAX_FILES_PER_TRIGGER = 100


class BatchTooLarge(RuntimeError):
    """A micro-batch with more records than the driver is allowed to collect."""


def app_id(settings: Settings, source: Source) -> str:
    """The Delta ``txnAppId`` of this job: stable per checkpoint, whose batch ids it numbers."""
    digest = hashlib.sha256(checkpoint(settings, source).encode()).hexdigest()[:12]
    return f"fraudlake-{JOB_NAME}-{source}-{digest}"


def checkpoint(settings: Settings, source: Source) -> str:
    return f"{settings.checkpoint_path(JOB_NAME)}/{source}"


def read_records(spark: SparkSession, settings: Settings, source: Source) -> DataFrame:
    """The raw stream: ``value`` (string, null for a Kafka tombstone) and ``offset`` (where it came from)."""
    if source == "kafka":
        stream = spark.readStream.format("kafka")
        for key, value in spark_kafka_source_options(settings).items():
            stream = stream.option(key, value)
        frame = (
            stream.option("subscribe", settings.kafka.topics.rules)
            .option("startingOffsets", settings.kafka.starting_offsets)
            .option("maxOffsetsPerTrigger", str(min(settings.kafka.max_offsets_per_trigger, MAX_BATCH_RECORDS)))
            .load()
        )
        offset = F.format_string("kafka:%s/%d/%d", "topic", "partition", "offset")
        return frame.select(F.col("value").cast("string").alias("value"), offset.alias("offset"))
    landing = settings.landing_path("rules")
    if "://" not in landing:
        Path(landing).mkdir(parents=True, exist_ok=True)
    frame = (
        spark.readStream.format("text")
        .option("wholetext", "true")
        .option("maxFilesPerTrigger", str(MAX_FILES_PER_TRIGGER))
        .load(landing)
    )
    return frame.select("value", F.col("_metadata.file_path").alias("offset"))


def records_of(rows: list[tuple[str | None, str]], source: Source) -> list[RawRecord]:
    """Collected ``(value, offset)`` rows as records: Kafka rows are records, file rows are split into lines."""
    if source == "kafka":
        return [RawRecord(value, offset) for value, offset in rows]
    records = []
    for text, path in rows:
        where = unquote(urlparse(path).path) if path.startswith("file:") else path
        for number, line in enumerate((text or "").splitlines(), start=1):
            if line.strip():
                records.append(RawRecord(line, f"file:{where}:{number}"))
    return records


def batch_handler(settings: Settings, source: Source) -> Callable[[DataFrame, int], ApplyResult]:
    """The ``foreachBatch`` function: collect (capped), parse, apply idempotently under this job's app id."""
    job_app_id = app_id(settings, source)

    def handle(batch: DataFrame, batch_id: int) -> ApplyResult:
        rows = [(r["value"], r["offset"]) for r in batch.limit(MAX_BATCH_RECORDS + 1).collect()]
        records = records_of(rows, source)
        if len(rows) > MAX_BATCH_RECORDS or len(records) > MAX_BATCH_RECORDS:
            raise BatchTooLarge(f"micro-batch {batch_id} has more than {MAX_BATCH_RECORDS} rule records")
        return apply_records(batch.sparkSession, settings, records, txn=(job_app_id, batch_id))

    return handle


def start_rules_job(spark: SparkSession, settings: Settings, *, source: Source, once: bool) -> StreamingQuery:
    """Start the job: ``once`` processes what is available now and stops; else a trigger every
    ``engine.trigger_interval_seconds``. The checkpoint is ``checkpoint_path("rules_cdc")/<source>``."""
    ensure_rules_tables(spark, settings)
    if source == "kafka":
        for topic in ensure_topics(settings, [settings.kafka.topics.rules]):
            print(f"rules run: created the missing Kafka topic {topic}", flush=True)
    handler = batch_handler(settings, source)

    def run_batch(batch: DataFrame, batch_id: int) -> None:
        handler(batch, batch_id)

    writer = (
        read_records(spark, settings, source)
        .writeStream.queryName(f"{JOB_NAME}_{source}")
        .foreachBatch(run_batch)
        .option("checkpointLocation", checkpoint(settings, source))
    )
    if once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{settings.engine.trigger_interval_seconds} seconds")
    return writer.start()
