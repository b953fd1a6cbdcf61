"""The floor of the stack fed live: the append+MERGE ``foreachBatch`` at the engine's input rate, same source.

What the latency targets are measured against. The engine's live run (``live_latency.run_live``) says how long after
its ingestion a transaction's alerts are committed; this runs the cheapest job that does the engine's I/O
(``floor``: parse, append, one MERGE of per-(payer, minute) sums: no evaluation, no alerts, no tags) as a continuous
query on the same kind of source, fed the same workload at the same rate by the same feeder, with the engine's
trigger interval. A transaction's latency here = its micro-batch's MERGE commit - its ingestion time. What the
engine adds to that is the engine's; what the floor takes is the stack's (Structured Streaming's trigger, offsets and
commit log, two Delta commits, on this machine).

Everything it writes is under ``work`` (bronze, state, checkpoint, landing files); over Kafka it reads a topic of
its own (``<transactions topic>.floor``).

Example::

    floor = run_live_floor(spark, settings, work, source="files", rate=2000, seconds=60)
    print(format_live(floor))
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from delta_tables.local_rows import local_frame
from pipelines.base.kafka_clients import ensure_topics
from pipelines.base.settings import Settings
from pipelines.bench.floor import TRANSACTION_DDL, create_minute_state, merge_minutes
from pipelines.bench.live_latency import (
    STACK_PARTS,
    Feed,
    LiveResult,
    LiveSource,
    epoch_ms,
    feed_and_drain,
    latency_figures,
    median_parts,
)
from pipelines.engine.sources import read_source

BATCH_ID = StructType([StructField("batchId", LongType(), False)])


def run_live_floor(
    spark: SparkSession,
    settings: Settings,
    work: Path,
    *,
    source: LiveSource,
    rate: float,
    seconds: float,
    keys: int = 10_000,
    every_seconds: float = 0.25,
) -> LiveResult:
    """Start the floor job continuously on ``source``, feed ``rate`` tx/s for ``seconds``, wait until every fed
    transaction is committed, stop it, and measure (``alerts`` 0: the floor raises none)."""
    work.mkdir(parents=True, exist_ok=True)
    bronze, state = str(work / "bronze"), str(work / "state")
    create_minute_state(spark, state)
    landing, topic = str(work / "landing"), f"{settings.kafka.topics.transactions}.floor"
    if source == "files":
        Path(landing).mkdir(parents=True, exist_ok=True)
    else:
        ensure_topics(settings, [topic])
    committed: dict[int, float] = {}  # batch id -> epoch ms of its MERGE commit

    def batch(raw: DataFrame, batch_id: int) -> None:
        ids = local_frame(spark, [{"batchId": batch_id}], BATCH_ID)  # not a literal: no recompile per batch
        rows = raw.select(F.from_json("raw", TRANSACTION_DDL).alias("t"), "ingestedAt").select("t.*", "ingestedAt")
        rows = rows.crossJoin(F.broadcast(ids))
        rows.write.format("delta").mode("append").save(bronze)
        merge_minutes(spark, state, rows)
        committed[batch_id] = time.time() * 1000

    raw = read_source(spark, settings, source, path=landing if source == "files" else topic)
    query = (
        raw.writeStream.queryName(f"fraudlake-floor-{source}")
        .foreachBatch(batch)
        .option("checkpointLocation", str(work / "_checkpoint"))
        .trigger(processingTime=f"{settings.engine.trigger_interval_seconds} seconds")
        .start()
    )
    progress = feed_and_drain(
        query,
        settings,
        Feed.at_rate(rate, seconds, keys, every_seconds),
        source=source,
        seconds=seconds,
        landing=landing,
        topic=topic,
    )
    progress = [p for p in progress if p["numInputRows"]]
    started = {int(p["batchId"]): epoch_ms(p["timestamp"]) for p in progress}
    batches = [(batch_id, at, started.get(batch_id)) for batch_id, at in sorted(committed.items())]
    figures = latency_figures(spark, spark.read.format("delta").load(bronze), batches)
    add_batch = [p["durationMs"]["addBatch"] / 1000 for p in progress]
    return LiveResult(
        source=source,
        rate=rate,
        seconds=seconds,
        batches=len(batches),
        mean_batch_seconds=statistics.mean(add_batch) if add_batch else float("nan"),
        alerts=0,
        stack_ms=median_parts([p["durationMs"] for p in progress], STACK_PARTS),
        **figures,
    )
