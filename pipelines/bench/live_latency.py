"""The continuous engine fed at a fixed rate: ingestion -> alerts committed, per transaction, p50/p95/p99.

What a user of a fraud system sees: how long after a payment arrives its alert (or its evaluation) is committed.
A feeder thread sends the workload at a fixed wall-clock rate, event time = the moment of sending, either

* as landing files (``files``): a file every ``every_seconds``; ingestion time = the file's modification time
  (written atomically, so it is the moment the engine could first see it), or
* to the transactions topic (``kafka``): one record per transaction; ingestion time = the Kafka record timestamp,

while the engine runs continuously (``fraudlake run``, trigger ``engine.trigger_interval_seconds``). A
transaction's latency is its micro-batch's alerts commit (``batch_log.metrics.committedAtMs``, the instant the
alerts append committed, or the end of the batch's writes when it had none) minus its ingestion time. Percentiles
are over every transaction fed, the first micro-batch of the run included; the engine may be warm from an earlier
run in the same process (``make demo`` runs its backlog first, and says so).

Example::

    result = run_live(spark, settings, source="files", rate=2000, seconds=60)
    print(format_live(result))    # 'files at 2,000 tx/s: 120,000 transactions in 54 micro-batches, ...'
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.base.settings import Settings
from pipelines.bench.workload import Workload, transactions, write_batches
from pipelines.engine.job import EngineRun, start_engine
from pipelines.engine.latency import COMMITTED_AT
from pipelines.generator.sinks import KafkaSink

LiveSource = Literal["files", "kafka"]


@dataclass
class LiveResult:
    """Per-transaction ingestion-to-commit latency of a live run, in seconds."""

    source: LiveSource
    rate: float
    seconds: float
    transactions: int
    batches: int
    p50: float
    p95: float
    p99: float
    max: float
    mean_batch_seconds: float
    alerts: int


def run_live(
    spark: SparkSession,
    settings: Settings,
    *,
    source: LiveSource,
    rate: float,
    seconds: float,
    keys: int = 10_000,
    every_seconds: float = 0.25,
    report: Callable[[str], None] | None = None,
) -> LiveResult:
    """Start the engine continuously on ``source``, feed ``rate`` tx/s for ``seconds``, wait until every fed
    transaction is committed, stop the engine, and measure."""
    run = EngineRun(source=source)  # the lakehouse's landing folder or transactions topic, its usual checkpoint
    since = _last_batch_id(spark, settings)
    query = start_engine(spark, settings, run, report=report or (lambda _line: None))
    stop = threading.Event()
    workload = Workload(count=int(rate * seconds), keys=keys, rate_per_second=rate, first_id=_first_id())
    feeder = threading.Thread(
        target=_feed_files if source == "files" else _feed_kafka,
        args=(settings, workload, stop, every_seconds),
        name="fraudlake-live-feeder",
        daemon=True,
    )
    try:
        feeder.start()
        feeder.join(timeout=seconds * 3 + 60)
        query.processAllAvailable()  # every fed transaction is in a committed micro-batch
        if query.exception() is not None:
            raise RuntimeError(f"the engine failed during the live run: {query.exception()}")
    finally:
        stop.set()
        query.stop()
    return measure(spark, settings, source=source, rate=rate, seconds=seconds, after_batch=since)


def measure(
    spark: SparkSession, settings: Settings, *, source: LiveSource, rate: float, seconds: float, after_batch: int
) -> LiveResult:
    """Latency percentiles of the transactions of the engine batches after ``after_batch`` (one engine query per
    lakehouse: batch ids are its own)."""
    logs = [
        r
        for r in _engine_batches(spark, settings).collect()
        if r["batchId"] > after_batch and (r["counts"] or {}).get("rows")
    ]
    committed = spark.createDataFrame(
        [(r["batchId"], float((r["metrics"] or {}).get(COMMITTED_AT, 0.0))) for r in logs],
        "batchId long, committedAtMs double",
    )
    bronze = spark.read.format("delta").load(settings.table_path("bronze_transactions"))
    latency = (
        bronze.where(F.col("batchId") > after_batch)
        .join(F.broadcast(committed), "batchId")
        .select(((F.col("committedAtMs") - F.unix_millis("ingestedAt")) / 1000).alias("s"))
    )
    quantiles = F.percentile("s", F.array(F.lit(0.5), F.lit(0.95), F.lit(0.99)))
    row = latency.agg(F.count(F.lit(1)).alias("n"), quantiles.alias("p"), F.max("s").alias("max")).first()
    p = list(row["p"]) if row and row["p"] else [float("nan")] * 3
    return LiveResult(
        source=source,
        rate=rate,
        seconds=seconds,
        transactions=int(row["n"]) if row else 0,
        batches=len(logs),
        p50=p[0],
        p95=p[1],
        p99=p[2],
        max=float(row["max"]) if row and row["max"] is not None else float("nan"),
        mean_batch_seconds=statistics.mean(r["durationMs"] / 1000 for r in logs) if logs else float("nan"),
        alerts=sum(int((r["counts"] or {}).get("alerts", 0)) for r in logs),
    )


def format_live(result: LiveResult) -> str:
    return (
        f"{result.source} at {result.rate:,.0f} tx/s for {result.seconds:.0f} s: {result.transactions:,} transactions"
        f" in {result.batches} micro-batches (mean {result.mean_batch_seconds:.1f} s), {result.alerts} alerts;"
        f" ingestion -> alerts committed p50 {result.p50:.2f} s, p95 {result.p95:.2f} s, p99 {result.p99:.2f} s,"
        f" max {result.max:.2f} s"
    )


def _engine_batches(spark: SparkSession, settings: Settings) -> DataFrame:
    frame = spark.read.format("delta").load(settings.table_path("batch_log"))
    return frame.where(F.col("job").startswith("engine-")).select("batchId", "counts", "metrics", "durationMs")


def _last_batch_id(spark: SparkSession, settings: Settings) -> int:
    try:
        row = _engine_batches(spark, settings).agg(F.max("batchId")).first()
    except Exception:  # no table yet: the engine creates it
        return -1
    return int(row[0]) if row and row[0] is not None else -1


def _first_id() -> int:
    """Transaction ids of this run, apart from any earlier run's (the workload numbers them from here)."""
    return int(time.time() * 1000) * 1000


def _paced(workload: Workload, every_seconds: float) -> list[tuple[float, Workload]]:
    """The workload cut into chunks of ``every_seconds`` each, with the wall-clock instant each is due."""
    per_chunk = max(1, round(workload.rate_per_second * every_seconds))
    chunks: list[tuple[float, Workload]] = []
    sent, begin = 0, time.time()
    while sent < workload.count:
        count = min(per_chunk, workload.count - sent)
        chunks.append((begin + len(chunks) * every_seconds, replace(workload, count=count)))
        sent += count
    return chunks


def _chunk_records(chunk: Workload, index: int, first_id: int) -> list[dict[str, Any]]:
    """The chunk's transactions, event time from now on, ids from ``first_id``."""
    fresh = replace(chunk, start_ms=int(time.time() * 1000), seed=chunk.seed + index, first_id=first_id)
    return list(transactions(fresh))


def _feed_files(settings: Settings, workload: Workload, stop: threading.Event, every_seconds: float) -> None:
    landing = Path(settings.landing_path("transactions"))
    first_id = workload.first_id
    for index, (due, chunk) in enumerate(_paced(workload, every_seconds)):
        if stop.wait(max(0.0, due - time.time())):
            return
        records = _chunk_records(chunk, index, first_id)
        write_batches(iter(records), landing, batch_size=len(records), prefix=f"live-{workload.first_id}-{index:06d}-")
        first_id += len(records)


def _feed_kafka(settings: Settings, workload: Workload, stop: threading.Event, every_seconds: float) -> None:
    sink = KafkaSink(settings)
    first_id = workload.first_id
    try:
        for index, (due, chunk) in enumerate(_paced(workload, every_seconds)):
            if stop.wait(max(0.0, due - time.time())):
                return
            records = _chunk_records(chunk, index, first_id)
            for record in records:
                sink.send(record)
            sink.flush()  # the record timestamps are the send times: no batching beyond the chunk
            first_id += len(records)
    finally:
        sink.close()
