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
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType, TimestampType

from delta_tables.alert_cooldown import append_last_alerts, compact_memory, fold_memory
from delta_tables.batch_log import log_batch, previous_batch
from delta_tables.bucket_state import TILE_COLUMNS, append_tiles, compact_tiles, fold_tiles, trim_condition
from delta_tables.idempotent import append_tagged, files_for, table_version
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
TAGGED_KEEP = ("transactionId", "eventTime", "isLate", "ingestedAt", "batchId", "batchStartedAt")
BATCH_CONSTANTS = StructType(
    [
        StructField("batchId", LongType(), False),
        StructField("batchStartedAt", TimestampType(), False),
        StructField("lateBeforeMs", LongType(), True),  # event times before this are late (null: nothing is)
    ]
)
STATE_ROWS = (*TILE_COLUMNS, "lastBatchId", *COORDINATES)  # coordinates: computed once per tile, not per batch
MEMORY_ROWS = ("ruleId", "keyValue", "lastAlertTimeMs", "lastBatchId")
DETECTION_CONSTANTS = StructType(
    [
        StructField("_detectedAt", TimestampType(), False),
        StructField("_rulesVersion", LongType(), False),
        StructField("_batchId", LongType(), False),
    ]
)


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class _Steps:
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


class _Background:
    """Writes running on a small thread pool; leaving the block waits for all and raises the first error."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=5, thread_name_prefix="fraudlake-write")
        self._futures: list[Future[None]] = []

    def submit(self, point: str, batch_id: int, write: Callable[[], None]) -> None:
        def run() -> None:
            write()
            crash_point(point, batch_id)

        self._futures.append(self._pool.submit(run))

    def __enter__(self) -> _Background:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            for future in self._futures:
                future.result()  # waits even when the block failed: no write may outlive its batch attempt
        finally:
            self._pool.shutdown(wait=True)


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
        self._constants: DataFrame | None = None  # the batch's constants (BATCH_CONSTANTS), one row
        self._alerts_ingest_ms: list[int] | None = None  # ingestion quantiles of this batch's alerts
        self._alerts_committed_ms: float | None = None  # wall clock (epoch ms) when its alerts append committed

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
        spark, app, steps = batch.sparkSession, self.app_id, _Steps()
        continuing = self._previous is not None and self._previous["batchId"] == batch_id - 1
        # A handler that completed batch_id - 1 knows nobody has started batch_id; anyone else asks the tables.
        attempt = Attempt.first(app, batch_id) if continuing else Attempt.recover(spark, self.paths, app, batch_id)
        if attempt.complete:
            self.report(f"batch {batch_id}: already committed; replay skipped")
            return {}
        previous = self._previous if continuing else previous_batch(spark, self.paths.batch_log, app, batch_id)
        m_before = attempt.pins.m_before if attempt.pins else (previous or {}).get("maxEventTimeMs")
        started = _utcnow()
        lateness_ms = self.settings.engine.allowed_lateness_seconds * 1000
        # The batch's constants come in as a one-row frame, not as literals: a literal number is compiled into the
        # generated code, which would then differ (and be compiled again) on every batch.
        constants = local_frame(
            spark,
            [
                {
                    "batchId": batch_id,
                    "batchStartedAt": started,
                    "lateBeforeMs": None if m_before is None else m_before - lateness_ms,
                }
            ],
            BATCH_CONSTANTS,
        )
        # Cache the parse without this batch's constants (lateness bound, start time): Spark compiles the code of
        # a plan once and reuses it while the plan's text is the same, and the parse is the biggest piece.
        base = kept(flag_duplicates(parse_raw(batch, self.settings.transaction_schema)))
        cached: list[DataFrame] = [base]
        self._constants = constants
        parsed = base.crossJoin(F.broadcast(constants)).withColumns(
            {
                "ingestedAt": F.coalesce("ingestedAt", "batchStartedAt"),
                "isLate": F.col("reason").isNull()
                & F.coalesce(F.col("eventTimeMs") < F.col("lateBeforeMs"), F.lit(False)),
            }
        )
        try:
            stats = self._stats(parsed)
            if stats["rows"] == 0 and not attempt.committed:
                return {}
            pins, states = self._pin(spark, attempt, previous, m_before)
            crash_point("pinned", batch_id)  # not a write: a hook for tests (reads pinned, nothing evaluated)
            steps.done("plan")
            counts = self._write_batch(spark, parsed, attempt, pins, states, stats, cached, steps)
            counts.update(rules=sum(len(s.rules) for s in states), states=len(states))
            counts["activeRules"] = sum(len(s.active_rules) for s in states)
            known = [m for m in (m_before, stats["maxMs"]) if m is not None]
            row = {
                "job": app,
                "batchId": batch_id,
                "rulesVersion": pins.rules,
                "startedAt": started,
                "finishedAt": _utcnow(),
                "durationMs": round(steps.total_seconds * 1000, 1),
                "counts": counts,
                "metrics": {**steps.ms, **self.last_latency},
                "maxEventTimeMs": max(known) if known else None,
                "pins": {k: v for k, v in pins.as_map().items() if v is not None},
            }
            log_batch(spark, self.paths.batch_log, row, tag=attempt.tag(BATCH_LOG_WRITE, pins))
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

    @staticmethod
    def _stats(parsed: DataFrame) -> dict[str, Any]:
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
        return row.asDict()

    def _write_batch(
        self,
        spark: SparkSession,
        parsed: DataFrame,
        attempt: Attempt,
        pins: Pins,
        states: Sequence[StateSpec],
        stats: dict[str, Any],
        cached: list[DataFrame],
        steps: _Steps,
    ) -> dict[str, int]:
        batch_id, paths = attempt.batch_id, self.paths
        valid = parsed.where(F.col("reason").isNull())
        quarantined = stats["rows"] - stats["valid"]
        alerts, written = 0, None
        self._alerts_ingest_ms = self._alerts_committed_ms = None
        # Appends carry their own tags (writer options), so they run beside the evaluation.
        with _Background() as background:
            if quarantined and not attempt.done("quarantine"):
                rows = quarantine_rows(parsed, batch_id=F.col("batchId"), now=F.col("batchStartedAt"))
                tag = attempt.tag("quarantine", pins)
                background.submit("quarantine", batch_id, lambda: append_tagged(rows, paths.quarantine, tag, files=1))
            files = files_for(stats["valid"])
            if stats["valid"] and not attempt.done("bronze"):
                bronze = bronze_rows(
                    valid, self.settings.transaction_schema, batch_id=F.col("batchId"), late=F.col("isLate")
                )
                bronze_tag = attempt.tag("bronze", pins)
                background.submit(
                    "bronze", batch_id, lambda: append_tagged(bronze, paths.bronze, bronze_tag, files=files)
                )
            if states and stats["valid"]:
                written = self._evaluate(spark, valid, attempt, pins, states, stats, cached, background)
        steps.done("evaluate")
        # The caches move to the versions just written, on this thread, once no job reads them any more.
        if written is not None:
            alerts = written.alerts
            self._take_over(spark, self._state, written.tiles, "state", attempt, _pinned(pins.state))
            if written.memory is not None:
                self._take_over(spark, self._memory, written.memory, "cooldown", attempt, _pinned(pins.cooldown))
        # Latency at the alerts' commit (or, without alerts, at the end of the batch's writes): latency.py
        committed_ms = self._alerts_committed_ms or time.time() * 1000
        self.last_latency = {
            COMMITTED_AT: round(committed_ms, 1),  # per-transaction latency = this - its ingestion (live_latency)
            **latency_metrics(ALERT_PREFIX, commit_ms=committed_ms, ingestion_ms=self._alerts_ingest_ms),
            **latency_metrics(EVALUATED_PREFIX, commit_ms=committed_ms, ingestion_ms=stats["ingestMs"]),
        }
        known = [m for m in (pins.m_before, stats["maxMs"]) if m is not None]
        if known and retention_due(batch_id, self.settings.engine.retention_every_batches):
            self._compact(spark, attempt, pins, states, high_water_ms=max(known))
            steps.done("retention")
        return {
            "rows": stats["rows"],
            "valid": stats["valid"],
            "late": stats["late"],
            "quarantined": quarantined,
            "alerts": alerts,
        }

    def _evaluate(
        self,
        spark: SparkSession,
        valid: DataFrame,
        attempt: Attempt,
        pins: Pins,
        states: Sequence[StateSpec],
        stats: dict[str, Any],
        cached: list[DataFrame],
        background: _Background,
    ) -> _Written:
        """Evaluate the batch; its tiles, alerts and cooldown memory are appended in the background."""
        engine, batch_id = self.settings.engine, attempt.batch_id
        bucket_ms = engine.bucket_seconds * 1000
        files = files_for(stats["valid"] * len(states) * 3)  # at most three tiles (levels) per row and state
        tagged = tag_rows(valid, states, bucket_ms=bucket_ms, keep=TAGGED_KEEP, units=self._units)
        tagged = co_partitioned(tagged, self._partitions())
        tagged = kept(tagged)
        cached.append(tagged)
        # Materialized (a local checkpoint): the append and the evaluation read it, then the state cache keeps it.
        assert self._constants is not None, "set by _process for the batch"
        stamp = self._constants.select(
            F.col("batchId").alias("lastBatchId"), F.col("batchStartedAt").alias("updatedAt")
        )
        batch_tiles = materialize(
            with_coordinates(tiles(tagged, bucket_ms=bucket_ms), bucket_ms=bucket_ms).crossJoin(F.broadcast(stamp))
        )
        self._state.ensure(spark, _pinned(pins.state))
        if not attempt.done("state"):
            state_tag, state_path = attempt.tag("state", pins), self.paths.bucket_state
            background.submit(
                "state",
                batch_id,
                lambda: append_tiles(
                    tiles_to_table(batch_tiles), state_path, batch_id=None, tag=state_tag, files=files
                ),
            )
        written = _Written(batch_tiles)
        active = [s for s in states if s.active_rules]
        if not active:
            return written
        active_ids = [s.state_id for s in active]
        rules = rules_frame(spark, states, bucket_seconds=engine.bucket_seconds, units=self._units)
        prior = self._state.frame().where(F.col("stateId").isin(*active_ids))
        # Late rows are not evaluated but count for the rows after them, also within their bucket.
        running = running_in_bucket(tagged.where(F.col("stateId").isin(*active_ids))).where(~F.col("isLate"))
        active_tiles = batch_tiles.where(F.col("stateId").isin(*active_ids))
        emitted = materialize(candidate_alerts(running, rules, prior, active_tiles, bucket_ms=bucket_ms))
        cached.append(emitted)
        if any(r.rule.cooldown_minutes for s in active for r in s.active_rules):
            self._memory.ensure(spark, _pinned(pins.cooldown))
            emitted = materialize(apply_cooldown(emitted, fold_memory(self._memory.frame())))
            cached.append(emitted)
        # Candidates are few: one task over all of them, one stage (an aggregation over several partitions would
        # add a shuffle and a second stage, the larger part of this step's cost on a small batch).
        counted = emitted.coalesce(1).agg(F.count(F.lit(1)), ingestion_percentiles(F.col("ingestedAt"))).first()
        written.alerts, self._alerts_ingest_ms = (counted[0], counted[1]) if counted else (0, None)
        if written.alerts:
            detection = local_frame(spark, [(_utcnow(), pins.rules, batch_id)], DETECTION_CONSTANTS)
            rows = alert_rows(
                emitted.crossJoin(F.broadcast(detection)),
                rules_version=F.col("_rulesVersion"),
                batch_id=F.col("_batchId"),
                detected_at=F.col("_detectedAt"),
            )
            rows = kept(rows)
            cached.append(rows)
            if not attempt.done("alerts"):
                alerts_tag = attempt.tag("alerts", pins)
                background.submit("alerts", batch_id, lambda: self._publish_alerts(rows, alerts_tag))
            memory = materialize(last_alert_times(emitted).crossJoin(F.broadcast(stamp)))
            written.memory = memory  # the memory cache takes it over after the append
            if not attempt.done("cooldown"):
                memory_tag, memory_path = attempt.tag("cooldown", pins), self.paths.alert_cooldown
                background.submit(
                    "cooldown",
                    batch_id,
                    lambda: append_last_alerts(memory, memory_path, batch_id=None, tag=memory_tag, files=1),
                )
        return written

    def _take_over(
        self, spark: SparkSession, cache: TableCache, frame: DataFrame, write: str, attempt: Attempt, read: int
    ) -> None:
        """Give the cache the frame this batch appended (or, if an earlier attempt did, make it reload)."""
        if attempt.done(write):
            cache.invalidate()
            release(frame)
        else:
            cache.appended(spark, frame, read_version=read)

    def _publish_alerts(self, rows: DataFrame, tag: Any) -> None:
        """The alerts append, then the Kafka copy when configured (at-least-once)."""
        append_tagged(rows, self.paths.alerts, tag, files=1)
        self._alerts_committed_ms = time.time() * 1000
        if self.alerts_to_kafka:
            write_alerts_to_kafka(rows, self.settings)

    def _compact(
        self, spark: SparkSession, attempt: Attempt, pins: Pins, states: Sequence[StateSpec], *, high_water_ms: int
    ) -> None:
        """Retention: rewrite the state and the cooldown memory folded, without what no lookback can reach."""
        engine = self.settings.engine
        lateness_ms = engine.allowed_lateness_seconds * 1000
        if not attempt.done("state-compact"):
            horizons = state_horizons(
                states, high_water_ms=high_water_ms, lateness_ms=lateness_ms, bucket_seconds=engine.bucket_seconds
            )
            read = table_version(spark, self.paths.bucket_state)
            self._state.ensure(spark, read)
            folded = with_coordinates(fold_tiles(self._state.frame()), bucket_ms=engine.bucket_seconds * 1000)
            folded = folded.where(trim_condition(horizons))
            folded = materialize(folded.withColumn("updatedAt", F.current_timestamp()))
            compact_tiles(tiles_to_table(folded), self.paths.bucket_state, tag=attempt.tag("state-compact", pins))
            self._state.reset(spark, folded, written_version=read + 1)
        if not attempt.done("cooldown-compact"):
            horizon = cooldown_horizon_ms(high_water_ms=high_water_ms, lateness_ms=lateness_ms)
            read = table_version(spark, self.paths.alert_cooldown)
            self._memory.ensure(spark, read)
            recent = fold_memory(self._memory.frame()).where(F.col("lastAlertTimeMs") >= F.lit(horizon))
            recent = materialize(recent.withColumn("updatedAt", F.current_timestamp()))
            compact_memory(recent, self.paths.alert_cooldown, tag=attempt.tag("cooldown-compact", pins))
            self._memory.reset(spark, recent, written_version=read + 1)
        crash_point("retention", attempt.batch_id)


@dataclass
class _Written:
    """What the evaluation hands back: the batch's tiles and cooldown rows (persisted; appended in the
    background, then taken over by the caches) and its alert count."""

    tiles: DataFrame
    alerts: int = 0
    memory: DataFrame | None = None


def _pinned(version: int | None) -> int:
    if version is None:
        raise RuntimeError("the state and cooldown versions are pinned before evaluation")
    return version
