"""One attempt at one micro-batch, as the values its steps work with: ``BatchRun`` and what it is made of.

The handler builds the run once its reads are pinned; every later step (the writes, the evaluation, retention, the
batch-log row) takes this one object instead of the same eight parameters. It is frozen: a step never changes what
the batch is. What the batch produces travels separately (``batch_evaluation.Evaluated``); only ``cached`` (the
frames to release when the batch ends) and ``steps`` (the step timer) collect along the way.

Example::

    stats = batch_stats(parsed)            # one pass over the cached parse
    run = BatchRun(spark=spark, settings=settings, ..., stats=stats, steps=StepTimer(), cached=[])
    run.tag("bronze")                      # the commit tag of the batch's bronze append
    run.high_water_ms                      # the max event time up to and including the batch
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, LongType, StructField, StructType, TimestampType

from delta_tables.idempotent import CommitTag
from delta_tables.local_rows import local_frame
from pipelines.base.settings import Settings
from pipelines.engine.latency import ingestion_percentiles
from pipelines.engine.recovery import Attempt, EnginePaths, Pins
from pipelines.engine.states import StateSpec

BATCH_CONSTANTS = StructType(
    [
        StructField("batchId", LongType(), False),
        StructField("batchStartedAt", TimestampType(), False),
        StructField("lateBeforeMs", LongType(), True),  # event times before this are late (null: nothing is)
    ]
)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class StepTimer:
    """Wall-clock milliseconds per step of a batch, for the batch log."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self._last = self.started
        self.ms: dict[str, float] = {}

    def done(self, step: str) -> None:
        now = time.monotonic()
        self.ms[step] = round((now - self._last) * 1000, 1)
        self._last = now

    @property
    def total_seconds(self) -> float:
        return time.monotonic() - self.started


@dataclass(frozen=True)
class BatchStats:
    """Row counts and event-time range of a batch (its valid rows'), and its ingestion-time quantiles."""

    rows: int
    valid: int
    late: int
    min_ms: int | None
    max_ms: int | None
    ingest_ms: list[int] | None  # ``latency.ingestion_percentiles`` of the valid, in-time rows

    @property
    def quarantined(self) -> int:
        return self.rows - self.valid


def batch_stats(parsed: DataFrame) -> BatchStats:
    """Row counts and event-time range of the batch, in one pass over the cached frame."""
    valid = F.col("reason").isNull()
    row = parsed.agg(
        F.count(F.lit(1)).alias("rows"),
        F.count(F.when(valid, 1)).alias("valid"),
        F.count(F.when(F.col("isLate"), 1)).alias("late"),
        F.min(F.when(valid, F.col("eventTimeMs"))).alias("minMs"),
        F.max(F.when(valid, F.col("eventTimeMs"))).alias("maxMs"),
        ingestion_percentiles(F.when(valid & ~F.col("isLate"), F.col("ingestedAt"))).alias("ingestMs"),
    ).first()
    assert row is not None
    return BatchStats(row["rows"], row["valid"], row["late"], row["minMs"], row["maxMs"], row["ingestMs"])


def batch_constants(
    spark: SparkSession, *, batch_id: int, started: dt.datetime, late_before_ms: int | None
) -> DataFrame:
    """The batch's constants (BATCH_CONSTANTS) as a one-row frame, not as literals: a literal number is compiled
    into the generated code, which would then differ (and be compiled again) on every batch."""
    row = {"batchId": batch_id, "batchStartedAt": started, "lateBeforeMs": late_before_ms}
    return local_frame(spark, [row], BATCH_CONSTANTS)


def with_batch_constants(base: DataFrame, constants: DataFrame) -> DataFrame:
    """The parsed rows with the batch's constants, their ingestion time (the batch's start if the source had
    none) and ``isLate``."""
    parsed = base.crossJoin(F.broadcast(constants))
    return parsed.withColumns(
        {
            "ingestedAt": F.coalesce("ingestedAt", "batchStartedAt"),
            "isLate": F.col("reason").isNull() & F.coalesce(F.col("eventTimeMs") < F.col("lateBeforeMs"), F.lit(False)),
        }
    )


@dataclass(frozen=True)
class BatchRun:
    """What one attempt at one micro-batch works with, from its pins on: the steps take this one object.

    ``cached`` collects the frames the batch keeps on the executors (released when it ends); ``steps`` times it.
    """

    spark: SparkSession
    settings: Settings
    paths: EnginePaths
    attempt: Attempt
    pins: Pins
    states: tuple[StateSpec, ...]
    stats: BatchStats
    parsed: DataFrame  # every record, with the batch's constants (``with_batch_constants``)
    valid: DataFrame  # the parsed transactions without a ``reason``
    constants: DataFrame  # BATCH_CONSTANTS, one row
    units: DataType  # the hot path's arithmetic (``pipelines.engine.units``)
    partitions: int  # the hot path's layout (``buckets.co_partitioned``)
    started: dt.datetime
    steps: StepTimer = field(repr=False)
    cached: list[DataFrame] = field(repr=False)

    @property
    def batch_id(self) -> int:
        return self.attempt.batch_id

    @property
    def state_version(self) -> int:
        """The bucket-state version the batch evaluates against (pinned after any state maintenance)."""
        return _pinned(self.pins.state)

    @property
    def cooldown_version(self) -> int:
        """The cooldown-memory version the batch evaluates against."""
        return _pinned(self.pins.cooldown)

    @property
    def high_water_ms(self) -> int | None:
        """The greatest event time seen up to and including this batch (None before any valid row)."""
        known = [m for m in (self.pins.m_before, self.stats.max_ms) if m is not None]
        return max(known) if known else None

    def tag(self, write: str) -> CommitTag:
        return self.attempt.tag(write, self.pins)

    def log_row(self, counts: dict[str, int], *, metrics: dict[str, float]) -> dict[str, Any]:
        """The batch's ``batch_log`` row, finished now."""
        return {
            "job": self.attempt.app_id,
            "batchId": self.batch_id,
            "rulesVersion": self.pins.rules,
            "startedAt": self.started,
            "finishedAt": utcnow(),
            "durationMs": round(self.steps.total_seconds * 1000, 1),
            "counts": counts,
            "metrics": metrics,
            "maxEventTimeMs": self.high_water_ms,
            "pins": {k: v for k, v in self.pins.as_map().items() if v is not None},
        }


def _pinned(version: int | None) -> int:
    if version is None:
        raise RuntimeError("the state and cooldown versions are pinned before evaluation")
    return version
