"""Baseline 2, Spark's built-in sliding windows: ``window(eventTime, W, slide)`` + a watermark, append mode.

One SUM rule per payer (``sum(paymentAmount) > limit`` over ``W``) as a stateful streaming aggregation over the
same landing files the engine reads. Append mode emits a window once the watermark (max event time - lateness)
passes its end, so an alert comes at least ``slide + lateness`` of event time after the transaction that
triggered it, and every key holds ``W / slide`` open windows in the state store. What it reports: the windows
that closed and, of them, the alert windows (sum over the limit); the *event-time delay* of each closed window's
output (the stream's max event time when it came out - the window's last transaction: what an alert on it
waits, whether or not this input's sums reach the limit); the state store's rows and bytes (``stateOperators`` of
the query progress), and the wall time.

Example::

    result = run_sliding_window(spark, landing, window_minutes=60, limit=Decimal(20000), lateness_seconds=300,
                                checkpoint="/tmp/bench/sw-ckpt")
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.engine.sources import read_files

TRANSACTION_DDL = "transactionId string, eventTime long, payerId long, paymentAmount decimal(18,2)"


@dataclass
class SlidingWindowResult:
    alert_windows: int
    alerted_keys: int
    delay_p50_seconds: float  # over every closed window's output (an alert's delay is the same)
    delay_p95_seconds: float
    state_rows: int
    state_bytes: int
    wall_seconds: float
    rows: int
    closed_windows: int = 0


def sliding_windows(raw: DataFrame, *, window_minutes: int, slide_minutes: int, lateness_s: int) -> DataFrame:
    """Closed windows (append mode): payerId, window, total, lastEventMs; an alert where ``total`` > the limit."""
    parsed = raw.select(F.from_json("raw", TRANSACTION_DDL).alias("t")).select("t.*")
    timed = parsed.withColumn("ts", F.timestamp_millis("eventTime")).withWatermark("ts", f"{lateness_s} seconds")
    return timed.groupBy(F.window("ts", f"{window_minutes} minutes", f"{slide_minutes} minutes"), "payerId").agg(
        F.sum("paymentAmount").alias("total"), F.max("eventTime").alias("lastEventMs")
    )


def run_sliding_window(
    spark: SparkSession,
    landing: Path,
    *,
    window_minutes: int,
    limit: Decimal,
    lateness_seconds: int,
    checkpoint: str,
    slide_minutes: int = 1,
    files_per_batch: int = 1,
) -> SlidingWindowResult:
    """Run the sliding-window query over every file of ``landing`` (availableNow) and measure it."""
    emitted: list[tuple[int, int, int, bool]] = []  # (batchId, payerId, lastEventMs, alert): closed windows

    def collect(batch: DataFrame, batch_id: int) -> None:
        over = (F.col("total") > F.lit(limit)).alias("alert")
        rows = batch.select("payerId", "lastEventMs", over).collect()  # a few windows per key
        emitted.extend((batch_id, r["payerId"], r["lastEventMs"], r["alert"]) for r in rows)

    raw = read_files(spark, str(landing), max_files_per_trigger=files_per_batch)
    windows = sliding_windows(
        raw, window_minutes=window_minutes, slide_minutes=slide_minutes, lateness_s=lateness_seconds
    )
    started = time.monotonic()
    query = (
        windows.writeStream.outputMode("append")
        .foreachBatch(collect)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    wall = time.monotonic() - started
    progress: list[dict[str, Any]] = list(query.recentProgress)
    max_event_ms: dict[int, int] = {}  # per batch, the stream's max event time so far
    stream_max: int | None = None
    for p in sorted(progress, key=lambda p: int(p["batchId"])):
        batch_max = _max_event_ms(p)
        if batch_max is not None and (stream_max is None or batch_max > stream_max):
            stream_max = batch_max
        if stream_max is not None:
            max_event_ms[int(p["batchId"])] = stream_max
    delays = [(now - last) / 1000 for b, _, last, _ in emitted if (now := max_event_ms.get(b)) is not None]
    operators = [op for p in progress for op in p.get("stateOperators", [])]
    alerts = [key for _, key, _, alert in emitted if alert]
    return SlidingWindowResult(
        alert_windows=len(alerts),
        alerted_keys=len(set(alerts)),
        delay_p50_seconds=statistics.median(delays) if delays else float("nan"),
        delay_p95_seconds=_quantile(delays, 0.95),
        state_rows=max((int(op.get("numRowsTotal", 0)) for op in operators), default=0),
        state_bytes=max((int(op.get("memoryUsedBytes", 0)) for op in operators), default=0),
        wall_seconds=wall,
        rows=sum(int(p.get("numInputRows", 0)) for p in progress),
        closed_windows=len(emitted),
    )


def _max_event_ms(progress: dict[str, Any]) -> int | None:
    """The max event time a batch read (``eventTime.max``; none in a no-data batch): the stream's max event time at
    a batch is the largest of these so far."""
    value = (progress.get("eventTime") or {}).get("max")
    if not value:
        return None
    return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
