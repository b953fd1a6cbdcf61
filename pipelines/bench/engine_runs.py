"""Run our engine for a benchmark: over a prepared backlog (``--once``) or fed at a fixed rate (continuous).

Each run gets a fresh lakehouse; results come from the engine's own tables: ``batch_log`` (rows, duration and
per-step timings of each micro-batch), ``bronze_transactions`` (ingestion time of each transaction) and
``bucket_state`` (rows and bytes of the state).

Example::

    settings = lakehouse_for(base, "/tmp/bench/s1", rules)
    result = run_backlog(spark, settings, landing)     # every file of landing, one per micro-batch
    result.sustained_tps, result.steps
"""

from __future__ import annotations

import datetime as dt
import shutil
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from delta_tables.catalog import init_lakehouse
from delta_tables.rules_seed import put_rule_rows
from pipelines.bench.workload import Workload, transactions, write_batches
from pipelines.engine.job import EngineRun, start_engine
from pipelines.settings import Settings
from rules_cdc.rule_model import Rule
from rules_cdc.rules_table import rule_to_row


@dataclass
class BacklogResult:
    """What one ``--once`` run over a backlog measured."""

    rows: int
    batches: int
    wall_seconds: float
    sustained_tps: float  # rows after the first batch / wall time after the first batch
    batch_seconds: list[float]
    steps: dict[str, float]  # median ms per step over the batches after the first
    alerts: int
    state_rows: int
    state_bytes: int
    extra: dict[str, Any] = field(default_factory=dict)


def lakehouse_for(base: Settings, root: str, rules: Sequence[Rule], *, spark: SparkSession) -> Settings:
    """A fresh lakehouse at ``root`` with every table created and ``rules`` in the rules table."""
    shutil.rmtree(root, ignore_errors=True)
    settings = base.with_lakehouse(root)
    init_lakehouse(spark, settings)
    rows = [rule_to_row(r, source_position="bench:1", source_op="r", source_ts_ms=None) for r in rules]
    put_rule_rows(spark, settings.table_path("rules"), rows)
    return settings


def batch_log(spark: SparkSession, settings: Settings) -> list[dict[str, Any]]:
    """The engine's batch log rows (small: one per micro-batch), oldest first."""
    frame = spark.read.format("delta").load(settings.table_path("batch_log")).where(F.col("job").startswith("engine-"))
    return [r.asDict(recursive=True) for r in frame.orderBy("finishedAt").collect()]


def table_size(spark: SparkSession, path: str) -> tuple[int, int]:
    """Rows and bytes (sum of the current version's data files) of a Delta table."""
    detail = DeltaTable.forPath(spark, path).detail().select("sizeInBytes").first()
    rows = spark.read.format("delta").load(path).count()
    return rows, int(detail["sizeInBytes"]) if detail else 0


def median_steps(logs: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Median ms of each step over these batch-log rows (steps a batch skipped are not zeros)."""
    names = sorted({name for row in logs for name in (row["metrics"] or {})})
    return {
        name: round(statistics.median([row["metrics"][name] for row in logs if name in (row["metrics"] or {})]), 1)
        for name in names
    }


def run_backlog(
    spark: SparkSession,
    settings: Settings,
    landing: Path,
    *,
    files_per_batch: int = 1,
    report: Callable[[str], None] | None = None,
    checkpoint: str | None = None,
) -> BacklogResult:
    """``fraudlake run --once`` over the files of ``landing``; the first batch counts as warm-up.

    ``checkpoint``: a query of its own (a file source's checkpoint is tied to its input folder)."""
    run = EngineRun(
        source="files",
        input_path=str(landing),
        once=True,
        max_files_per_trigger=files_per_batch,
        checkpoint=checkpoint,
    )
    since = dt.datetime.now(dt.UTC).replace(tzinfo=None)  # batch_log times are naive UTC
    started = time.monotonic()
    query = start_engine(spark, settings, run, report=report or (lambda line: None))
    query.awaitTermination()
    wall = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(f"engine run failed: {query.exception()}")
    # Only this run's batches (a lakehouse may have run before: the windows scenario's seed batch).
    logs = [
        row for row in batch_log(spark, settings) if (row["counts"] or {}).get("rows") and row["startedAt"] >= since
    ]
    rows = sum(row["counts"]["rows"] for row in logs)
    steady = logs[1:] or logs
    span = (steady[-1]["finishedAt"] - logs[0]["finishedAt"]).total_seconds() if len(logs) > 1 else 0.0
    steady_rows = sum(row["counts"]["rows"] for row in logs[1:])
    sustained = steady_rows / span if span > 0 else rows / wall
    state_rows, state_bytes = table_size(spark, settings.table_path("bucket_state"))
    return BacklogResult(
        rows=rows,
        batches=len(logs),
        wall_seconds=wall,
        sustained_tps=sustained,
        batch_seconds=[row["durationMs"] / 1000 for row in logs],
        steps=median_steps(steady),
        alerts=sum(row["counts"].get("alerts", 0) for row in logs),
        state_rows=state_rows,
        state_bytes=state_bytes,
    )


@dataclass
class LatencyResult:
    """Ingestion-to-alert latency of a continuous run at a fixed input rate (seconds)."""

    rate: float
    seconds: float
    rows: int
    batches: int
    p50: float
    p95: float
    p99: float
    mean_batch_seconds: float
    driver_heap_mb: list[float]


def _feed(landing: Path, workload: Workload, stop: threading.Event, *, every_seconds: float) -> None:
    """Write the workload's transactions in files at its rate, event time = wall time of writing."""
    per_file = max(1, int(workload.rate_per_second * every_seconds))
    sent, index, begin = 0, 0, time.time()
    while not stop.is_set() and sent < workload.count:
        now_ms = int(time.time() * 1000)
        chunk = Workload(
            count=min(per_file, workload.count - sent),
            keys=workload.keys,
            rate_per_second=workload.rate_per_second,
            start_ms=now_ms,
            seed=workload.seed + index,
            first_id=workload.first_id + sent,
        )
        write_batches(transactions(chunk), landing, batch_size=per_file, prefix=f"f{index:06d}-")
        sent, index = sent + chunk.count, index + 1
        delay = begin + index * every_seconds - time.time()
        if delay > 0:
            stop.wait(delay)


def driver_heap_mb(spark: SparkSession) -> float:
    """The driver JVM's used heap in MB (after the last GC, as the runtime reports it)."""
    runtime: Any = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()  # type: ignore[union-attr]
    return float(runtime.totalMemory() - runtime.freeMemory()) / 2**20


def run_continuous(
    spark: SparkSession,
    settings: Settings,
    landing: Path,
    workload: Workload,
    *,
    seconds: float,
    trigger_seconds: float = 1.0,
) -> LatencyResult:
    """Feed ``workload.rate_per_second`` for ``seconds`` while the engine runs continuously; measure latency.

    Latency of a transaction = its batch's ``finishedAt`` (alerts and state committed) - its ``ingestedAt`` (the
    landing file's modification time). Percentiles over every transaction after the first batch (warm-up).
    """
    engine = settings.engine.model_copy(update={"trigger_interval_seconds": trigger_seconds})
    settings = settings.model_copy(update={"engine": engine})
    landing.mkdir(parents=True, exist_ok=True)
    query = start_engine(spark, settings, EngineRun(source="files", input_path=str(landing)), report=lambda _: None)
    stop, heap = threading.Event(), []
    # Spark starts the query before the first file: the first batch is the warm-up, excluded below.
    feeder = threading.Thread(target=_feed, args=(landing, workload, stop), kwargs={"every_seconds": 0.5})
    try:
        feeder.start()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and query.isActive:
            time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
            heap.append(round(driver_heap_mb(spark), 1))
        stop.set()
        feeder.join()
        query.processAllAvailable()
    finally:
        stop.set()
        query.stop()
    logs = [row for row in batch_log(spark, settings) if (row["counts"] or {}).get("rows")]
    first = logs[0]["batchId"] if logs else -1
    finished = spark.createDataFrame(
        [(r["batchId"], r["finishedAt"]) for r in logs], "batchId long, finishedAt timestamp"
    )
    bronze = spark.read.format("delta").load(settings.table_path("bronze_transactions"))
    latency = (
        bronze.where(F.col("batchId") > first)
        .join(finished, "batchId")
        .select((F.unix_micros("finishedAt") - F.unix_micros("ingestedAt")).alias("us"))
    )
    row = latency.agg(
        F.count(F.lit(1)).alias("n"), F.percentile("us", F.array(F.lit(0.5), F.lit(0.95), F.lit(0.99))).alias("p")
    ).first()
    p = [v / 1e6 for v in row["p"]] if row and row["p"] else [float("nan")] * 3
    steady = logs[1:] or logs
    return LatencyResult(
        rate=workload.rate_per_second,
        seconds=seconds,
        rows=int(row["n"]) if row else 0,
        batches=len(logs),
        p50=p[0],
        p95=p[1],
        p99=p[2],
        mean_batch_seconds=statistics.mean(r["durationMs"] / 1000 for r in steady) if steady else float("nan"),
        driver_heap_mb=heap,
    )
