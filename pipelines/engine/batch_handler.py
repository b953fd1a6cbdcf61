"""The ``foreachBatch`` function: one micro-batch of raw records -> bronze, quarantine, state, alerts, batch log.

Order of a batch:

1. parse (cached) and one aggregation for the batch's counts and event-time range;
2. pin what it reads: the rules-table version, the registry, bronze (what a backfill may read); state maintenance
   if the rules need it (``maintenance``); then the state and cooldown-memory versions to evaluate against;
3. in parallel: the quarantine and bronze appends, the append of the batch's tiles to the state, and the
   evaluation against the pinned state (held on the executors: ``table_cache``) plus the batch itself, followed
   by the alerts append (+ Kafka) and the cooldown-memory append;
4. compaction of the state and cooldown memory when retention is due; the batch-log row last.

Every write carries a commit tag naming the batch and its pins (``delta_tables.idempotent``). A replayed batch
(a crash before the checkpoint commit) finds the tags of what its first attempt committed (``recovery``),
reuses those pins, so it computes exactly the same writes, and skips the ones already there: exactly-once
effects. Nothing the batch reads is something it writes.

Example::

    handler = BatchHandler(settings, app_id="engine-test")
    handler(raw_batch_frame, 0)          # what foreachBatch calls
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, LongType, StructField, StructType, TimestampType

from delta_tables.alert_cooldown import append_last_alerts, compact_memory, fold_memory
from delta_tables.batch_log import log_batch, previous_batch
from delta_tables.bucket_state import TILE_COLUMNS, append_tiles, compact_tiles, fold_tiles, trim_condition
from delta_tables.idempotent import CommitTag, append_tagged, files_for, table_version
from delta_tables.local_rows import local_frame
from pipelines.base.settings import Settings
from pipelines.base.spark_session import session_confs
from pipelines.engine.alert_rows import alert_rows, write_alerts_to_kafka
from pipelines.engine.buckets import co_partitioned, tag_rows, tiles
from pipelines.engine.cooldown import apply_cooldown, last_alert_times
from pipelines.engine.evaluate import candidate_alerts, rules_frame, running_in_bucket
from pipelines.engine.faults import crash_point
from pipelines.engine.latency import (
    ALERT_PREFIX,
    COMMITTED_AT,
    EVALUATED_PREFIX,
    format_latency,
    ingestion_percentiles,
    latency_metrics,
)
from pipelines.engine.lookback import COORDINATES, with_coordinates
from pipelines.engine.parse_transactions import bronze_rows, flag_duplicates, parse_raw, quarantine_rows
from pipelines.engine.recovery import BATCH_LOG_WRITE, Attempt, EnginePaths, Pins
from pipelines.engine.retention import cooldown_horizon_ms, retention_due, state_horizons
from pipelines.engine.state_rebuild import forgotten_rule_ids, maintain_states, needs_maintenance
from pipelines.engine.states import RulesCache, StateSpec, plan_states, states_of
from pipelines.engine.table_cache import TableCache, kept, materialize, release
from pipelines.engine.units import (
    ANSI_CONF,
    LONG_UNITS,
    UNIT_TYPES,
    WIDE_UNITS,
    is_overflow,
    tiles_from_table,
    tiles_to_table,
)

log = logging.getLogger(__name__)
AUTO_COMPACT_CONF = "spark.databricks.delta.autoCompact.enabled"
SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"
ADAPTIVE_CONF = "spark.sql.adaptive.enabled"
CO_PARTITION_CONF = "spark.sql.requireAllClusterKeysForCoPartition"
STATE_ROWS = (*TILE_COLUMNS, "lastBatchId", *COORDINATES)  # coordinates: computed once per tile, not per batch
MEMORY_ROWS = ("ruleId", "keyValue", "lastAlertTimeMs", "lastBatchId")


class BatchHandler:
    """Processes micro-batches of RAW_SCHEMA frames for one streaming query (``app_id``)."""

    def __init__(
        self,
        settings: Settings,
        *,
        app_id: str | Callable[[], str],
        alerts_to_kafka: bool | None = None,
        report: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.paths = EnginePaths.of(settings)
        self._app_id = app_id
        self.alerts_to_kafka = settings.engine.alerts_to_kafka if alerts_to_kafka is None else alerts_to_kafka
        self.report = report or (lambda line: print(line, flush=True))
        self.last_counts: dict[str, int] = {}
        self.last_steps: dict[str, float] = {}  # step timings (ms) of the last batch
        self.last_latency: dict[str, float] = {}  # latency metrics of the last batch (pipelines.engine.latency)
        self._rules = RulesCache(self.paths.rules, self.paths.rule_states, settings.transaction_schema)
        bucket_ms = settings.engine.bucket_seconds * 1000
        self._layout: int | None = None  # hash partitions of the hot path's frames (``co_partitioned``)
        self._units = UNIT_TYPES[settings.engine.units]  # the hot path's arithmetic (``pipelines.engine.units``)
        self._state = TableCache(
            self.paths.bucket_state,
            fold=lambda rows: with_coordinates(fold_tiles(rows), bucket_ms=bucket_ms),
            columns=STATE_ROWS,
            layout=lambda rows: co_partitioned(tiles_from_table(rows, self._units), self._partitions()),
        )
        self._memory = TableCache(self.paths.alert_cooldown, fold=fold_memory, columns=MEMORY_ROWS)
        self._previous: dict[str, Any] | None = None  # batch-log row of the last batch this handler completed

    @property
    def app_id(self) -> str:
        if callable(self._app_id):
            self._app_id = self._app_id()
        return self._app_id

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self.process(batch, batch_id)

    def process(self, batch: DataFrame, batch_id: int) -> dict[str, int]:
        """Run one micro-batch; return its counts (rows, valid, late, quarantined, alerts, ...).

        An aggregate beyond the 64-bit units (±9.2e12 at 6 decimals) fails the batch with an ANSI overflow; it
        then runs again, as a replay of itself, in 38-digit decimal units, and so does every later batch of
        this handler (``pipelines.engine.units``).
        """
        try:
            return self._attempt(batch, batch_id)
        except Exception as error:
            if self._units != LONG_UNITS or not is_overflow(error):
                raise
            self.report(
                f"batch {batch_id}: an aggregate left the 64-bit range (±9.2e12 with 6 decimals);"
                " running it again, and every later batch, in 38-digit decimal arithmetic"
            )
            self._units = WIDE_UNITS
            return self._attempt(batch, batch_id)

    def _attempt(self, batch: DataFrame, batch_id: int) -> dict[str, int]:
        try:
            with session_confs(batch.sparkSession, self._batch_confs(batch.sparkSession, batch_id)):
                return self._process(batch, batch_id)
        except BaseException:
            # Whatever failed, the next call must recover from the tables, and reload what it reads.
            self._previous = None
            self._state.invalidate()
            self._memory.invalidate()
            raise

    def _process(self, batch: DataFrame, batch_id: int) -> dict[str, int]:
        spark, app, steps = batch.sparkSession, self.app_id, StepTimer()
        continuing = self._previous is not None and self._previous["batchId"] == batch_id - 1
        # A handler that completed batch_id - 1 knows nobody has started batch_id; anyone else asks the tables.
        attempt = Attempt.first(app, batch_id) if continuing else Attempt.recover(spark, self.paths, app, batch_id)
        if attempt.complete:
            self.report(f"batch {batch_id}: already committed; replay skipped")
            return {}
        previous = self._previous if continuing else previous_batch(spark, self.paths.batch_log, app, batch_id)
        m_before = attempt.pins.m_before if attempt.pins else (previous or {}).get("maxEventTimeMs")
        started = utcnow()
        lateness_ms = self.settings.engine.allowed_lateness_seconds * 1000
        late_before_ms = None if m_before is None else m_before - lateness_ms
        constants = batch_constants(spark, batch_id=batch_id, started=started, late_before_ms=late_before_ms)
        # Cache the parse without this batch's constants (lateness bound, start time): Spark compiles the code of
        # a plan once and reuses it while the plan's text is the same, and the parse is the biggest piece.
        base = kept(flag_duplicates(parse_raw(batch, self.settings.transaction_schema)))
        cached: list[DataFrame] = [base]
        parsed = with_batch_constants(base, constants)
        try:
            stats = batch_stats(parsed)
            if stats.rows == 0 and not attempt.committed:
                return {}
            pins, states = self._pin(spark, attempt, previous, m_before)
            crash_point("pinned", batch_id)  # not a write: a hook for tests (reads pinned, nothing evaluated)
            steps.done("plan")
            run = BatchRun(
                spark=spark,
                settings=self.settings,
                paths=self.paths,
                attempt=attempt,
                pins=pins,
                states=tuple(states),
                stats=stats,
                parsed=parsed,
                valid=parsed.where(F.col("reason").isNull()),
                constants=constants,
                units=self._units,
                partitions=self._partitions(),
                started=started,
                steps=steps,
                cached=cached,
            )
            counts = self._write_batch(run)
            counts.update(rules=sum(len(s.rules) for s in states), states=len(states))
            counts["activeRules"] = sum(len(s.active_rules) for s in states)
            row = run.log_row(counts, metrics={**steps.ms, **self.last_latency})
            log_batch(spark, self.paths.batch_log, row, tag=run.tag(BATCH_LOG_WRITE))
            crash_point("logged", batch_id)
            self._previous = row
            self.last_counts, self.last_steps = counts, steps.ms
            self.report(
                f"batch {batch_id}: {counts['rows']} rows ({counts['late']} late, {counts['quarantined']} quarantined),"
                f" {counts['alerts']} alerts, {steps.total_seconds:.1f} s, rules v{pins.rules}"
                f" ({counts['activeRules']} active / {counts['rules']} live, {counts['states']} states)"
                + (f", {format_latency(self.last_latency)}" if self.last_latency else "")
            )
            return counts
        finally:
            for frame in cached:
                release(frame)

    def _pin(
        self, spark: SparkSession, attempt: Attempt, previous: dict[str, Any] | None, m_before: int | None
    ) -> tuple[Pins, list[StateSpec]]:
        """The versions this batch reads (an earlier attempt's, or the newest), after any state maintenance."""
        paths = self.paths
        pins = attempt.pins or Pins(
            rules=table_version(spark, paths.rules),
            registry=table_version(spark, paths.rule_states),
            bronze=table_version(spark, paths.bronze),
            m_before=m_before,
        )
        states = states_of(self._rules.rules(spark, pins.rules))
        if pins.ready:
            return pins, states
        previous_rules = previous["rulesVersion"] if previous else None
        previous_live = (
            None
            if previous_rules is None
            else {r.rule.rule_id for r in self._rules.rules(spark, previous_rules)}
            if previous_rules != pins.rules
            else {r.rule.rule_id for s in states for r in s.rules}
        )
        forgotten = forgotten_rule_ids(previous_live, states)
        plan = plan_states(states, self._rules.registry(spark, pins.registry))
        if needs_maintenance(plan, forgotten):
            maintain_states(spark, self.settings, self._rules, attempt, pins, states, forgotten=forgotten)
            crash_point("maintenance", attempt.batch_id)
        ready = pins.evaluating(
            state=table_version(spark, paths.bucket_state), cooldown=table_version(spark, paths.alert_cooldown)
        )
        return ready, states

    def _batch_confs(self, spark: SparkSession, batch_id: int) -> dict[str, str]:
        """The session confs a batch runs with, set for the attempt and put back after it (``session_confs``): a
        handler called on a shared session (a notebook's, the tests') leaves it as it found it. In a streaming
        query the batch's session is the query's own clone anyway."""
        # One layout for every keyed frame of the batch and the cached state: hash partitions by (state, key), so
        # the evaluation's joins and aggregations need no shuffle but the probes' (``buckets.co_partitioned``).
        self._layout = self._layout or self.settings.engine.state_partitions or spark.sparkContext.defaultParallelism
        return {
            # Delta's auto compaction runs synchronously after a commit: off on the hot path, on for the batches
            # that run retention (every retention_every_batches).
            AUTO_COMPACT_CONF: str(retention_due(batch_id, self.settings.engine.retention_every_batches)).lower(),
            SHUFFLE_PARTITIONS_CONF: str(self._layout),
            CO_PARTITION_CONF: "false",
            # Overflow must fail, not wrap or turn null: the units arithmetic relies on it (``process``).
            ANSI_CONF: "true",
            # Adaptive execution plans one stage at a time, after the one before it finished: for a micro-batch's
            # small, well-sized shuffles that doubles the stages (44 -> 24 per batch) for nothing to adapt.
            ADAPTIVE_CONF: "false",
        }

    def _partitions(self) -> int:
        if self._layout is None:
            raise RuntimeError("the layout is chosen at the start of a batch")
        return self._layout

    def _write_batch(self, run: BatchRun) -> dict[str, int]:
        """The batch's writes: quarantine and bronze appends beside the evaluation (tiles, alerts, cooldown memory),
        the caches moved to what was appended, then retention when it is due."""
        stats, paths = run.stats, run.paths
        evaluated: Evaluated | None = None
        # Appends carry their own tags (writer options), so they run beside the evaluation.
        with BatchWrites(run.attempt, run.pins, after=crash_point) as writes:
            if stats.quarantined:
                rows = quarantine_rows(run.parsed, batch_id=F.col("batchId"), now=F.col("batchStartedAt"))
                writes.append("quarantine", lambda tag: append_tagged(rows, paths.quarantine, tag, files=1))
            if stats.valid:
                bronze = bronze_rows(
                    run.valid, run.settings.transaction_schema, batch_id=F.col("batchId"), late=F.col("isLate")
                )
                files = files_for(stats.valid)
                writes.append("bronze", lambda tag: append_tagged(bronze, paths.bronze, tag, files=files))
            if run.states and stats.valid:
                evaluated = evaluate_batch(
                    run, writes, state_cache=self._state, memory_cache=self._memory, to_kafka=self.alerts_to_kafka
                )
        run.steps.done("evaluate")
        if evaluated is not None:
            take_over_appends(run, evaluated, state_cache=self._state, memory_cache=self._memory)
        self.last_latency = batch_latency(stats, evaluated)
        high_water_ms = run.high_water_ms
        if high_water_ms is not None and retention_due(run.batch_id, run.settings.engine.retention_every_batches):
            compact_state(run, state_cache=self._state, memory_cache=self._memory, high_water_ms=high_water_ms)
            crash_point("retention", run.batch_id)
            run.steps.done("retention")
        return {
            "rows": stats.rows,
            "valid": stats.valid,
            "late": stats.late,
            "quarantined": stats.quarantined,
            "alerts": evaluated.alerts if evaluated else 0,
        }


# --- the values of one batch run ------------------------------------------------------------------------------

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


# --- the batch's tagged appends ----------------------------------------------------------------------------------


class BatchWrites:
    """A batch's appends, each written at most once per batch and run on a small thread pool beside the evaluation.

    ``append(write, commit)``: unless an earlier attempt of the batch committed ``write``, ``commit`` runs in the
    background with the write's commit tag, then ``after(write, batch_id)`` (the crash points of the tests).
    Leaving the block waits for every write and raises the first error.
    """

    def __init__(self, attempt: Attempt, pins: Pins, *, after: Callable[[str, int], None]) -> None:
        self._attempt, self._pins, self._after = attempt, pins, after
        self._pool = ThreadPoolExecutor(max_workers=5, thread_name_prefix="fraudlake-write")
        self._futures: list[Future[None]] = []

    def append(self, write: str, commit: Callable[[CommitTag], None]) -> None:
        if self._attempt.done(write):
            return
        tag, batch_id = self._attempt.tag(write, self._pins), self._attempt.batch_id

        def run() -> None:
            commit(tag)
            self._after(write, batch_id)

        self._futures.append(self._pool.submit(run))

    def __enter__(self) -> BatchWrites:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            for future in self._futures:
                future.result()  # waits even when the block failed: no write may outlive its batch attempt
        finally:
            self._pool.shutdown(wait=True)


# --- the evaluation ------------------------------------------------------------------------------------------

TAGGED_KEEP = ("transactionId", "eventTime", "isLate", "ingestedAt", "batchId", "batchStartedAt")
DETECTION_CONSTANTS = StructType(
    [
        StructField("_detectedAt", TimestampType(), False),
        StructField("_rulesVersion", LongType(), False),
        StructField("_batchId", LongType(), False),
    ]
)


@dataclass
class Evaluated:
    """What the evaluation hands back: the batch's tiles and cooldown rows (materialized; appended in the
    background, then taken over by the caches), its alert count, and what its latency is measured from."""

    tiles: DataFrame
    alerts: int = 0
    memory: DataFrame | None = None
    alerts_ingest_ms: list[int] | None = None  # ingestion quantiles of the batch's alerts
    alerts_committed_ms: float | None = None  # wall clock (epoch ms) when the alerts append committed


def evaluate_batch(
    run: BatchRun, writes: BatchWrites, *, state_cache: TableCache, memory_cache: TableCache, to_kafka: bool
) -> Evaluated:
    """Evaluate the batch; its tiles, alerts and cooldown memory are appended in the background."""
    spark, engine, paths, states = run.spark, run.settings.engine, run.paths, run.states
    bucket_ms = engine.bucket_seconds * 1000
    files = files_for(run.stats.valid * len(states) * 3)  # at most three tiles (levels) per row and state
    tagged = tag_rows(run.valid, states, bucket_ms=bucket_ms, keep=TAGGED_KEEP, units=run.units)
    tagged = co_partitioned(tagged, run.partitions)
    tagged = kept(tagged)
    run.cached.append(tagged)
    # Materialized (a local checkpoint): the append and the evaluation read it, then the state cache keeps it.
    stamp = run.constants.select(F.col("batchId").alias("lastBatchId"), F.col("batchStartedAt").alias("updatedAt"))
    batch_tiles = materialize(
        with_coordinates(tiles(tagged, bucket_ms=bucket_ms), bucket_ms=bucket_ms).crossJoin(F.broadcast(stamp))
    )
    state_cache.ensure(spark, run.state_version)
    writes.append(
        "state",
        lambda tag: append_tiles(tiles_to_table(batch_tiles), paths.bucket_state, batch_id=None, tag=tag, files=files),
    )
    evaluated = Evaluated(batch_tiles)
    active = [s for s in states if s.active_rules]
    if not active:
        return evaluated
    active_ids = [s.state_id for s in active]
    rules = rules_frame(spark, states, bucket_seconds=engine.bucket_seconds, units=run.units)
    prior = state_cache.frame().where(F.col("stateId").isin(*active_ids))
    # Late rows are not evaluated but count for the rows after them, also within their bucket.
    running = running_in_bucket(tagged.where(F.col("stateId").isin(*active_ids))).where(~F.col("isLate"))
    active_tiles = batch_tiles.where(F.col("stateId").isin(*active_ids))
    emitted = materialize(candidate_alerts(running, rules, prior, active_tiles, bucket_ms=bucket_ms))
    run.cached.append(emitted)
    if any(r.rule.cooldown_minutes for s in active for r in s.active_rules):
        memory_cache.ensure(spark, run.cooldown_version)
        emitted = materialize(apply_cooldown(emitted, fold_memory(memory_cache.frame())))
        run.cached.append(emitted)
    # Candidates are few: one task over all of them, one stage (an aggregation over several partitions would
    # add a shuffle and a second stage, the larger part of this step's cost on a small batch).
    counted = emitted.coalesce(1).agg(F.count(F.lit(1)), ingestion_percentiles(F.col("ingestedAt"))).first()
    evaluated.alerts, evaluated.alerts_ingest_ms = (counted[0], counted[1]) if counted else (0, None)
    if evaluated.alerts:
        detection = local_frame(spark, [(utcnow(), run.pins.rules, run.batch_id)], DETECTION_CONSTANTS)
        rows = alert_rows(
            emitted.crossJoin(F.broadcast(detection)),
            rules_version=F.col("_rulesVersion"),
            batch_id=F.col("_batchId"),
            detected_at=F.col("_detectedAt"),
        )
        rows = kept(rows)
        run.cached.append(rows)

        def publish(tag: CommitTag) -> None:
            """The alerts append, then the Kafka copy when configured (at-least-once)."""
            append_tagged(rows, paths.alerts, tag, files=1)
            evaluated.alerts_committed_ms = time.time() * 1000
            if to_kafka:
                write_alerts_to_kafka(rows, run.settings)

        writes.append("alerts", publish)
        memory = materialize(last_alert_times(emitted).crossJoin(F.broadcast(stamp)))
        evaluated.memory = memory  # the memory cache takes it over after the append
        writes.append(
            "cooldown",
            lambda tag: append_last_alerts(memory, paths.alert_cooldown, batch_id=None, tag=tag, files=1),
        )
    return evaluated


def take_over_appends(
    run: BatchRun, evaluated: Evaluated, *, state_cache: TableCache, memory_cache: TableCache
) -> None:
    """The caches move to the versions just written, on the batch's thread, once no job reads them any more."""
    _take_over(run, state_cache, evaluated.tiles, "state", run.state_version)
    if evaluated.memory is not None:
        _take_over(run, memory_cache, evaluated.memory, "cooldown", run.cooldown_version)


def _take_over(run: BatchRun, cache: TableCache, frame: DataFrame, write: str, read: int) -> None:
    """Give the cache the frame this batch appended (or, if an earlier attempt did, make it reload)."""
    if run.attempt.done(write):
        cache.invalidate()
        release(frame)
    else:
        cache.appended(run.spark, frame, read_version=read)


def batch_latency(stats: BatchStats, evaluated: Evaluated | None) -> dict[str, float]:
    """Latency at the alerts' commit (or, without alerts, at the end of the batch's writes): latency.py"""
    committed_ms = (evaluated.alerts_committed_ms if evaluated else None) or time.time() * 1000
    return {
        COMMITTED_AT: round(committed_ms, 1),  # per-transaction latency = this - its ingestion (live_latency)
        **latency_metrics(
            ALERT_PREFIX, commit_ms=committed_ms, ingestion_ms=evaluated.alerts_ingest_ms if evaluated else None
        ),
        **latency_metrics(EVALUATED_PREFIX, commit_ms=committed_ms, ingestion_ms=stats.ingest_ms),
    }


# --- retention -----------------------------------------------------------------------------------------------


def compact_state(run: BatchRun, *, state_cache: TableCache, memory_cache: TableCache, high_water_ms: int) -> None:
    """Retention: rewrite the state and the cooldown memory folded, without what no lookback can reach; each is
    skipped when an earlier attempt of the batch committed it, and its cache then holds what was written."""
    lateness_ms = run.settings.engine.allowed_lateness_seconds * 1000
    if not run.attempt.done("state-compact"):
        horizons = state_horizons(
            run.states,
            high_water_ms=high_water_ms,
            lateness_ms=lateness_ms,
            bucket_seconds=run.settings.engine.bucket_seconds,
        )
        compact_state_tiles(run, state_cache, horizons)
    if not run.attempt.done("cooldown-compact"):
        horizon = cooldown_horizon_ms(high_water_ms=high_water_ms, lateness_ms=lateness_ms)
        compact_cooldown_memory(run, memory_cache, horizon)


def compact_state_tiles(run: BatchRun, cache: TableCache, horizons: dict[str, int]) -> None:
    """The bucket state folded (one row per tile), each state's tiles before its horizon dropped, in one commit."""
    spark, path = run.spark, run.paths.bucket_state
    read = table_version(spark, path)
    cache.ensure(spark, read)
    folded = with_coordinates(fold_tiles(cache.frame()), bucket_ms=run.settings.engine.bucket_seconds * 1000)
    folded = folded.where(trim_condition(horizons))
    folded = materialize(folded.withColumn("updatedAt", F.current_timestamp()))
    compact_tiles(tiles_to_table(folded), path, tag=run.tag("state-compact"))
    cache.reset(spark, folded, written_version=read + 1)


def compact_cooldown_memory(run: BatchRun, cache: TableCache, horizon_ms: int) -> None:
    """The cooldown memory folded (one row per rule and key), without rows older than ``horizon_ms``."""
    spark, path = run.spark, run.paths.alert_cooldown
    read = table_version(spark, path)
    cache.ensure(spark, read)
    recent = fold_memory(cache.frame()).where(F.col("lastAlertTimeMs") >= F.lit(horizon_ms))
    recent = materialize(recent.withColumn("updatedAt", F.current_timestamp()))
    compact_memory(recent, path, tag=run.tag("cooldown-compact"))
    cache.reset(spark, recent, written_version=read + 1)
