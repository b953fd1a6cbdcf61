"""The continuous engine fed at a fixed rate: ingestion -> alerts committed, per transaction, p50/p95/p99.

What a user of a fraud system sees: how long after a payment arrives its alert (or its evaluation) is committed.
A feeder process sends the workload at a fixed wall-clock rate, event time = the moment of sending, either

* as landing files (``files``): a file every ``every_seconds``; ingestion time = the file's modification time
  (written atomically, so it is the moment the engine could first see it), or
* to the transactions topic (``kafka``): one record per transaction; ingestion time = the Kafka record timestamp,

while the engine runs continuously (``fraudlake run``, trigger ``engine.trigger_interval_seconds``). A
transaction's latency is its micro-batch's alerts commit (``batch_log.metrics.committedAtMs``, the instant the
alerts append committed, or the end of the batch's writes when it had none) minus its ingestion time. Percentiles
are over every transaction fed, the first micro-batch of the run included; the engine may be warm from an earlier
run in the same process (``make demo`` runs its backlog first, and says so).

The feeder is a process of its own, as a payment system's producers are: a thread of the driver's Python process
(until 2026-12-02) competed for its interpreter lock with the engine's thread, whose ~4,000 py4j round trips a
batch each wait for that lock after their socket read, and kafka-python's producer keeps a thread busy (docs
/engine.md, Latency).

Where the time goes: per transaction, *wait* = its micro-batch's trigger start (the query progress' ``timestamp``)
- its ingestion, *work* = the alerts commit - that trigger start; per batch, the medians of the query progress'
``durationMs`` parts (Spark's: offsets, WAL commit, planning, ``addBatch`` = the engine's ``foreachBatch``, the
commit log) and of the engine's own steps (``batch_log.metrics``: plan, evaluate, retention).

A *burst* (``burst=(start, length)`` as fractions of the run) makes every tenth transaction fed in that span a
payment of ``BURST_FACTOR`` times its amount by a payer of its own (an attack's volley of alerts: most rules fire on
each of them); the span's transactions' latency is reported apart.

Example::

    result = run_live(spark, settings, source="files", rate=2000, seconds=60)
    print(format_live(result))    # 'files at 2,000 tx/s: 120,000 transactions in 54 micro-batches, ...'
"""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from pipelines.base.settings import Settings
from pipelines.bench.workload import Workload, transactions, write_batches
from pipelines.engine.job import EngineRun, start_engine
from pipelines.engine.latency import COMMITTED_AT
from pipelines.generator.sinks import KafkaSink

LiveSource = Literal["files", "kafka"]


class StopEvent(Protocol):
    """What a feeder needs of its stop signal: a ``threading.Event`` or a ``multiprocessing`` one."""

    def wait(self, timeout: float | None = None) -> bool: ...


BURST_FACTOR = 100
"""A burst's amounts: every tenth transaction of the span at this many times its amount."""
BURST_PAYER_BASE = 3_000_000_000
"""A burst's transactions come from payers of their own (one payment each): the attack's volley of alerts, then
nothing left in anyone's window to alert on."""
STACK_PARTS = ("latestOffset", "walCommit", "queryPlanning", "getBatch", "addBatch", "commitOffsets")
"""The query progress' ``durationMs`` parts reported (``triggerExecution`` is their sum and a little more)."""


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
    wait_p50: float = float("nan")  # ingestion -> the batch's trigger start, median over transactions
    work_p50: float = float("nan")  # the batch's trigger start -> its alerts commit, median over transactions
    stack_ms: dict[str, float] = field(default_factory=dict)  # median durationMs part per batch (STACK_PARTS + trigger)
    steps_ms: dict[str, float] = field(default_factory=dict)  # median engine step per batch (batch_log.metrics)
    alerting: int = 0  # transactions with at least one live alert
    burst_p50: float = float("nan")  # latency of the burst's transactions (when there was one)
    burst_p99: float = float("nan")
    burst_transactions: int = 0


def run_live(
    spark: SparkSession,
    settings: Settings,
    *,
    source: LiveSource,
    rate: float,
    seconds: float,
    keys: int = 10_000,
    every_seconds: float = 0.25,
    burst: tuple[float, float] | None = None,
    report: Callable[[str], None] | None = None,
) -> LiveResult:
    """Start the engine continuously on ``source``, feed ``rate`` tx/s for ``seconds`` (with a ``burst`` of alerts),
    wait until every fed transaction is committed, stop the engine, and measure."""
    run = EngineRun(source=source)  # the lakehouse's landing folder or transactions topic, its usual checkpoint
    since = _last_batch_id(spark, settings)
    query = start_engine(spark, settings, run, report=report or (lambda _line: None))
    feed = Feed.at_rate(rate, seconds, keys, every_seconds, burst)
    progress = feed_and_drain(query, settings, feed, source=source, seconds=seconds)
    return measure(
        spark,
        settings,
        source=source,
        rate=rate,
        seconds=seconds,
        after_batch=since,
        progress=progress,
        burst_ms=feed.burst_ms,
    )


def feed_and_drain(
    query: StreamingQuery,
    settings: Settings,
    feed: Feed,
    *,
    source: LiveSource,
    seconds: float,
    landing: str | None = None,
    topic: str | None = None,
) -> list[dict[str, Any]]:
    """Feed ``feed`` to the running ``query``'s source (landing files, or records to the transactions topic; ``landing``
    / ``topic`` override them) from a process of its own, wait until every fed record is in a committed micro-batch,
    stop the query, and return its progress (one dict per micro-batch). A failed query or feeder raises."""
    context = multiprocessing.get_context("spawn")  # no copy of the driver's threads and JVM connection
    stop = context.Event()
    spans: Any = context.SimpleQueue()
    kwargs = {"landing": landing} if source == "files" else {"topic": topic}
    feeder = context.Process(
        target=_feed, args=(source, settings, feed, stop, spans, kwargs), name="fraudlake-live-feeder", daemon=True
    )
    try:
        feeder.start()
        feeder.join(timeout=seconds * 3 + 60)
        if feeder.is_alive():
            raise RuntimeError(f"the live feeder was still feeding {seconds * 3 + 60:.0f} s after its start")
        if feeder.exitcode != 0:
            raise RuntimeError(f"the live feeder failed (exit code {feeder.exitcode}; its error is above)")
        feed.burst_ms = spans.get()
        query.processAllAvailable()  # every fed transaction is in a committed micro-batch
        if query.exception() is not None:
            raise RuntimeError(f"the {query.name} query failed during the live run: {query.exception()}")
        return [json.loads(p.json) for p in query.recentProgress]
    finally:
        stop.set()
        feeder.join(timeout=30)
        query.stop()


def _feed(
    source: LiveSource, settings: Settings, feed: Feed, stop: StopEvent, spans: Any, kwargs: dict[str, Any]
) -> None:
    """The feeder process: the feed to its source, then its burst's span back to the parent."""
    (feed_files if source == "files" else feed_kafka)(settings, feed, stop, **kwargs)
    spans.put(feed.burst_ms)


def measure(
    spark: SparkSession,
    settings: Settings,
    *,
    source: LiveSource,
    rate: float,
    seconds: float,
    after_batch: int,
    progress: list[dict[str, Any]] | None = None,
    burst_ms: tuple[float, float] | None = None,
) -> LiveResult:
    """Latency percentiles of the transactions of the engine batches after ``after_batch`` (one engine query per
    lakehouse: batch ids are its own); with the query's ``progress``, where the time went."""
    logs = [
        r
        for r in _engine_batches(spark, settings).collect()
        if r["batchId"] > after_batch and (r["counts"] or {}).get("rows")
    ]
    started = {int(p["batchId"]): epoch_ms(p["timestamp"]) for p in progress or [] if p.get("numInputRows")}
    committed = [
        (int(r["batchId"]), float((r["metrics"] or {}).get(COMMITTED_AT, 0.0)), started.get(int(r["batchId"])))
        for r in logs
    ]
    bronze = spark.read.format("delta").load(settings.table_path("bronze_transactions"))
    figures = latency_figures(spark, bronze.where(F.col("batchId") > after_batch), committed, burst_ms=burst_ms)
    alerts = spark.read.format("delta").load(settings.table_path("alerts"))
    alerting = alerts.where((F.col("batchId") > after_batch) & ~F.col("shadow")).select("transactionId").distinct()
    return LiveResult(
        source=source,
        rate=rate,
        seconds=seconds,
        batches=len(logs),
        mean_batch_seconds=statistics.mean(r["durationMs"] / 1000 for r in logs) if logs else float("nan"),
        alerts=sum(int((r["counts"] or {}).get("alerts", 0)) for r in logs),
        stack_ms=median_parts([p["durationMs"] for p in progress or [] if p.get("numInputRows")], STACK_PARTS),
        steps_ms=median_parts([dict(r["metrics"] or {}) for r in logs], ("plan", "evaluate", "retention")),
        alerting=alerting.count(),
        **figures,
    )


def latency_figures(
    spark: SparkSession,
    rows: DataFrame,
    committed: list[tuple[int, float, float | None]],
    *,
    burst_ms: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """Per-transaction latency figures (``LiveResult`` fields) of ``rows`` (``batchId``, ``ingestedAt``), given each
    batch's (id, commit epoch ms, trigger start epoch ms or None), in one pass: the burst's figures are
    conditional aggregates of the same rows."""
    batches = spark.createDataFrame(committed, "batchId long, committedAtMs double, startedAtMs double")
    ingested = F.unix_millis("ingestedAt")
    latency = rows.join(F.broadcast(batches), "batchId").select(
        ((F.col("committedAtMs") - ingested) / 1000).alias("s"),
        ((F.col("startedAtMs") - ingested) / 1000).alias("wait"),
        ((F.col("committedAtMs") - F.col("startedAtMs")) / 1000).alias("work"),
        ingested.alias("ingestedMs"),
    )
    quantiles = F.percentile("s", F.array(F.lit(0.5), F.lit(0.95), F.lit(0.99)))
    in_burst = F.col("ingestedMs").between(*burst_ms) if burst_ms is not None else F.lit(False)
    row = latency.agg(
        F.count(F.lit(1)).alias("n"),
        quantiles.alias("p"),
        F.max("s").alias("max"),
        F.percentile("wait", 0.5).alias("wait"),
        F.percentile("work", 0.5).alias("work"),
        F.count(F.when(in_burst, 1)).alias("burstN"),
        F.percentile(F.when(in_burst, F.col("s")), F.array(F.lit(0.5), F.lit(0.99))).alias("burstP"),
    ).first()
    p = list(row["p"]) if row and row["p"] else [float("nan")] * 3
    figures: dict[str, Any] = {
        "transactions": int(row["n"]) if row else 0,
        "p50": p[0],
        "p95": p[1],
        "p99": p[2],
        "max": float(row["max"]) if row and row["max"] is not None else float("nan"),
        "wait_p50": _number(row["wait"] if row else None),
        "work_p50": _number(row["work"] if row else None),
    }
    if row and row["burstN"]:
        figures.update(burst_transactions=int(row["burstN"]), burst_p50=row["burstP"][0], burst_p99=row["burstP"][1])
    return figures


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)


def median_parts(rows: list[dict[str, Any]], parts: tuple[str, ...]) -> dict[str, float]:
    """Per part, the median over ``rows`` (a batch without the part counts as 0); ``triggerExecution`` too when
    the rows have it."""
    names = [*parts, *(("triggerExecution",) if any("triggerExecution" in r for r in rows) else ())]
    return {name: statistics.median(float(r.get(name) or 0) for r in rows) for name in names} if rows else {}


def epoch_ms(timestamp: str) -> float:
    """A query progress' ``timestamp`` (ISO 8601, UTC, ``Z``) as epoch milliseconds."""
    return dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000


def format_live(result: LiveResult) -> str:
    return (
        f"{result.source} at {result.rate:,.0f} tx/s for {result.seconds:.0f} s: {result.transactions:,} transactions"
        f" in {result.batches} micro-batches (mean {result.mean_batch_seconds:.1f} s), {result.alerts} alerts;"
        f" ingestion -> alerts committed p50 {result.p50:.2f} s, p95 {result.p95:.2f} s, p99 {result.p99:.2f} s,"
        f" max {result.max:.2f} s (wait {result.wait_p50:.2f} s + work {result.work_p50:.2f} s at the median)"
        + (
            f"; burst: {result.burst_transactions:,} transactions, p50 {result.burst_p50:.2f} s,"
            f" p99 {result.burst_p99:.2f} s"
            if result.burst_transactions
            else ""
        )
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


def first_id() -> int:
    """Transaction ids of this run, apart from any earlier run's (the workload numbers them from here)."""
    return int(time.time() * 1000) * 1000


class Feed:
    """The workload cut into chunks of ``every_seconds``, each due at its wall-clock instant, the chunks within the
    ``burst`` span with every tenth amount multiplied; ``burst_ms`` = the span's ingestion times once fed."""

    def __init__(self, workload: Workload, every_seconds: float, burst: tuple[float, float] | None) -> None:
        self.workload, self.every_seconds = workload, every_seconds
        per_chunk = max(1, round(workload.rate_per_second * every_seconds))
        self.sizes = [min(per_chunk, workload.count - sent) for sent in range(0, workload.count, per_chunk)]
        chunks = len(self.sizes)
        self.burst_chunks = (
            range(int(burst[0] * chunks), int((burst[0] + burst[1]) * chunks)) if burst is not None else range(0)
        )
        self.burst_ms: tuple[float, float] | None = None

    @classmethod
    def at_rate(
        cls, rate: float, seconds: float, keys: int, every_seconds: float, burst: tuple[float, float] | None = None
    ) -> Feed:
        """``rate`` tx/s for ``seconds`` over ``keys`` payers, ids after every earlier run's (``first_id``)."""
        workload = Workload(count=int(rate * seconds), keys=keys, rate_per_second=rate, first_id=first_id())
        return cls(workload, every_seconds, burst)

    def chunks(self, stop: StopEvent) -> Iterator[list[dict[str, Any]]]:
        """Each chunk's records at its due time (event time = now, ids following on), until ``stop``."""
        begin, next_id = time.time(), self.workload.first_id
        for index, count in enumerate(self.sizes):
            if stop.wait(max(0.0, begin + index * self.every_seconds - time.time())):
                return
            fresh = replace(
                self.workload,
                count=count,
                start_ms=int(time.time() * 1000),
                seed=self.workload.seed + index,
                first_id=next_id,
            )
            records = list(transactions(fresh))
            if index in self.burst_chunks:
                for record in records[::10]:  # a payer of its own: the burst leaves no lasting window behind
                    record["paymentAmount"] = str(Decimal(record["paymentAmount"]) * BURST_FACTOR)
                    record["payerId"] = BURST_PAYER_BASE + int(record["transactionId"][1:]) % 1_000_000_000
                now = time.time() * 1000
                self.burst_ms = (self.burst_ms[0] if self.burst_ms else now, now + 1000 * self.every_seconds)
            next_id += count
            yield records


def feed_files(settings: Settings, feed: Feed, stop: StopEvent, *, landing: str | None = None) -> None:
    """The feed as landing files (default: the lakehouse's landing folder), one per chunk, at their due times."""
    folder = Path(landing or settings.landing_path("transactions"))
    for index, records in enumerate(feed.chunks(stop)):
        write_batches(
            iter(records), folder, batch_size=len(records), prefix=f"live-{feed.workload.first_id}-{index:06d}-"
        )


def feed_kafka(settings: Settings, feed: Feed, stop: StopEvent, *, topic: str | None = None) -> None:
    """The feed as records to the transactions topic (or ``topic``), each chunk flushed at its due time."""
    sink = KafkaSink(settings, topic)
    try:
        for records in feed.chunks(stop):
            for record in records:
                sink.send(record)
            sink.flush()  # the record timestamps are the send times: no batching beyond the chunk
    finally:
        sink.close()
