"""Run our engine for a benchmark over a prepared backlog (``--once``); fed at a fixed rate: ``live_latency``.

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
from pipelines.base.settings import Settings
from pipelines.bench.floor import add_batch_seconds
from pipelines.engine.job import EngineRun, start_engine
from pipelines.engine.latency import COMMITTED_AT
from rules_cdc.rule_model import Rule
from rules_cdc.rule_rows import rule_to_row


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
    foreach_seconds: list[float] = field(default_factory=list)  # each batch's foreachBatch time (addBatch), in order
    batch_steps: list[dict[str, float]] = field(default_factory=list)  # each batch's ms per step, in order
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median_foreach_seconds(self) -> float:
        """The median ``foreachBatch`` time of the batches after the first (warm-up): what the floor is compared to."""
        steady = self.foreach_seconds[1:] or self.foreach_seconds
        return statistics.median(steady) if steady else float("nan")


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
    names = sorted({name for row in logs for name in (row["metrics"] or {})} - {COMMITTED_AT})
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
    foreach = add_batch_seconds(query)
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
        foreach_seconds=foreach,
        batch_steps=[
            {name: float(ms) for name, ms in (row["metrics"] or {}).items() if name != COMMITTED_AT} for row in logs
        ],
    )
