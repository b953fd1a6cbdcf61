"""The ``foreachBatch`` function: one micro-batch of raw records -> bronze, quarantine, state, alerts, logs.

Order of a batch (every read at a version pinned in ``engine_progress``; every write idempotent per batch):

1. parse; record the *intent* (rules, registry and bronze versions, high-water marks) unless a first attempt did;
2. state maintenance if the rules need it (drop, rebuild, backfill, forget cooldowns; registry), then pin the
   state and cooldown versions to evaluate against (READY);
3. quarantine and bronze appends (background threads), beside
4. evaluation against the pinned state + the batch itself; alerts append (+ Kafka, background), cooldown MERGE;
5. the batch's tiles MERGEd into the state; retention when due; the batch log row last (the batch is complete).

A re-run of a batch (crash before the checkpoint commit) reads the same snapshots, so it computes the same
writes, and Delta skips every one already committed (``txnAppId/txnVersion``): exactly-once effects.

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
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from delta_tables.alert_cooldown import forget_rules, merge_last_alerts
from delta_tables.batch_log import batch_logged, log_batch
from delta_tables.bucket_state import merge_tiles, trim_states
from delta_tables.engine_progress import PLANNED, previous_progress, read_progress, trim_progress
from delta_tables.idempotent import Txn, append_idempotent
from pipelines.engine.alert_rows import alert_rows, write_alerts_to_kafka
from pipelines.engine.buckets import lowest_tile_starts, reachable_tiles, tag_rows, tiles
from pipelines.engine.cooldown import apply_cooldown, last_alert_times
from pipelines.engine.evaluate import candidate_alerts, reach_buckets, rules_frame, running_in_bucket
from pipelines.engine.faults import crash_point
from pipelines.engine.latency import (
    ALERT_PREFIX,
    EVALUATED_PREFIX,
    format_latency,
    ingestion_percentiles,
    latency_metrics,
)
from pipelines.engine.maintenance import EnginePaths, maintain_states, record_intent_for
from pipelines.engine.parse_transactions import bronze_rows, flag_duplicates, parse_raw, quarantine_rows
from pipelines.engine.retention import cooldown_horizon_ms, retention_due, state_horizons
from pipelines.engine.states import RulesCache, StateSpec, states_of
from pipelines.settings import Settings

log = logging.getLogger(__name__)
PROGRESS_ROWS_KEPT = 10
AUTO_COMPACT_CONF = "spark.databricks.delta.autoCompact.enabled"
TAGGED_KEEP = ("transactionId", "eventTime", "isLate", "ingestedAt")


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
        self._pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="fraudlake-write")
        self._futures: list[Future[None]] = []

    def submit(self, point: str, batch_id: int, write: Callable[..., None], *args: Any) -> None:
        def run() -> None:
            write(*args)
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
        self._cache = RulesCache(self.paths.rules, self.paths.rule_states, settings.transaction_schema)
        self._previous: dict[str, Any] | None = None  # ledger row of the last batch this handler completed
        self.last_latency: dict[str, float] = {}  # latency metrics of the last batch (pipelines.engine.latency)
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
        """Run one micro-batch; return its counts (rows, valid, late, quarantined, alerts, ...)."""
        try:
            return self._process(batch, batch_id)
        except BaseException:
            self._previous = None  # whatever failed, the next call must read the ledger again
            raise

    def _process(self, batch: DataFrame, batch_id: int) -> dict[str, int]:
        spark, app, steps = batch.sparkSession, self.app_id, _Steps()
        # Delta's auto compaction runs synchronously after a commit: keep it off the hot path, on for the
        # batches that run retention (every retention_every_batches).
        compact = retention_due(batch_id, self.settings.engine.retention_every_batches)
        spark.conf.set(AUTO_COMPACT_CONF, str(compact).lower())
        progress: dict[str, Any] | None = None
        previous = self._previous if self._previous and self._previous["batchId"] == batch_id - 1 else None
        if previous is None:  # first batch of this handler, or a replay: ask the ledger
            if batch_logged(spark, self.paths.batch_log, app, batch_id):
                self.report(f"batch {batch_id}: already committed; replay skipped")
                return {}
            progress = read_progress(spark, self.paths.progress, app, batch_id)
            if progress is None:
                previous = previous_progress(spark, self.paths.progress, app, batch_id)
        # else: this handler completed batch_id - 1, so nobody can have started batch_id yet.
        m_before = progress["maxEventTimeBefore"] if progress else previous["maxEventTimeAfter"] if previous else None
        started = progress["startedAt"] if progress else _utcnow()
        lateness_ms = self.settings.engine.allowed_lateness_seconds * 1000
        late = F.lit(False) if m_before is None else F.col("eventTimeMs") < F.lit(m_before - lateness_ms)
        # Cache the parse without this batch's constants (lateness bound, start time): Spark compiles the code of
        # a plan once and reuses it while the plan's text is the same, and the parse is the biggest piece.
        base = flag_duplicates(parse_raw(batch, self.settings.transaction_schema)).persist()
        cached: list[DataFrame] = [base]
        parsed = base.withColumns(
            {
                "ingestedAt": F.coalesce("ingestedAt", F.lit(started).cast("timestamp")),
                "isLate": F.col("reason").isNull() & late,
            }
        )
        try:
            stats = self._stats(parsed)
            if stats["rows"] == 0 and progress is None:
                return {}
            if progress is None:
                progress = record_intent_for(
                    spark,
                    self.settings,
                    self._cache,
                    app_id=app,
                    batch_id=batch_id,
                    started=started,
                    previous=previous,
                    batch_max_event_ms=stats["maxMs"],
                )
                crash_point("intent", batch_id)
            steps.done("intent")
            rules = self._cache.rules(spark, progress["rulesVersion"])
            states = states_of(rules)
            txn = Txn(app, batch_id)
            if progress["status"] == PLANNED:
                if previous is None:
                    previous = previous_progress(spark, self.paths.progress, app, batch_id)
                progress = maintain_states(spark, self.settings, self._cache, progress, states, txn, previous=previous)
                crash_point("maintenance", batch_id)
            steps.done("maintenance")
            counts = self._write_batch(spark, parsed, progress, states, txn, stats, cached, steps)
            counts.update(rules=len(rules), activeRules=sum(r.active for r in rules), states=len(states))
            log_batch(
                spark,
                self.paths.batch_log,
                {
                    "job": app,
                    "batchId": batch_id,
                    "rulesVersion": progress["rulesVersion"],
                    "startedAt": started,
                    "finishedAt": _utcnow(),
                    "durationMs": round(steps.total_seconds * 1000, 1),
                    "counts": counts,
                    "metrics": {**steps.ms, **self.last_latency},
                },
                txn=txn.part("batch-log"),
            )
            crash_point("logged", batch_id)
            self._previous = progress
            self.last_counts = counts
            self.report(
                f"batch {batch_id}: {counts['rows']} rows ({counts['late']} late, {counts['quarantined']} quarantined),"
                f" {counts['alerts']} alerts, {steps.total_seconds:.1f} s, rules v{progress['rulesVersion']}"
                f" ({counts['activeRules']} active / {counts['rules']} live, {counts['states']} states)"
                + (f", {format_latency(self.last_latency)}" if self.last_latency else "")
            )
            return counts
        finally:
            for frame in cached:
                frame.unpersist()

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
        progress: dict[str, Any],
        states: Sequence[StateSpec],
        txn: Txn,
        stats: Any,
        cached: list[DataFrame],
        steps: _Steps,
    ) -> dict[str, int]:
        engine, batch_id = self.settings.engine, txn.version
        lateness_ms = engine.allowed_lateness_seconds * 1000
        m_after = progress["maxEventTimeAfter"]
        valid = parsed.where(F.col("reason").isNull())
        quarantined = stats["rows"] - stats["valid"]
        alerts = 0
        self._alerts_ingest_ms = self._alerts_committed_ms = None
        # Appends carry their own txn options, so they run beside the evaluation and the MERGEs (which use the
        # session's txn confs one at a time, on this thread).
        with _Background() as background:
            if quarantined:
                quarantine = quarantine_rows(parsed, batch_id=batch_id)
                background.submit(
                    "quarantine", batch_id, append_idempotent, quarantine, self.paths.quarantine, txn.part("quarantine")
                )
            if stats["valid"]:
                bronze = bronze_rows(valid, self.settings.transaction_schema, batch_id=batch_id, late=F.col("isLate"))
                background.submit("bronze", batch_id, append_idempotent, bronze, self.paths.bronze, txn.part("bronze"))
            if states and stats["valid"]:
                alerts = self._evaluate_and_merge(
                    spark, valid, progress, states, txn, stats["minMs"], cached, steps, background
                )
        steps.done("writes")
        # Latency at the alerts' commit (or, without alerts, at the end of the batch's writes): latency.py
        committed_ms = self._alerts_committed_ms or time.time() * 1000
        self.last_latency = {
            **latency_metrics(ALERT_PREFIX, commit_ms=committed_ms, ingestion_ms=self._alerts_ingest_ms),
            **latency_metrics(EVALUATED_PREFIX, commit_ms=committed_ms, ingestion_ms=stats["ingestMs"]),
        }
        if m_after is not None and retention_due(batch_id, engine.retention_every_batches):
            trim_states(
                spark,
                self.paths.bucket_state,
                state_horizons(
                    states, high_water_ms=m_after, lateness_ms=lateness_ms, bucket_seconds=engine.bucket_seconds
                ),
                txn=txn.part("state-trim"),
            )
            forget_rules(
                spark,
                self.paths.alert_cooldown,
                (),
                older_than_ms=cooldown_horizon_ms(high_water_ms=m_after, lateness_ms=lateness_ms),
                txn=txn.part("cooldown-trim"),
            )
            trim_progress(spark, self.paths.progress, txn.app_id, batch_id - PROGRESS_ROWS_KEPT)
            crash_point("retention", batch_id)
            steps.done("retention")
        return {
            "rows": stats["rows"],
            "valid": stats["valid"],
            "late": stats["late"],
            "quarantined": quarantined,
            "alerts": alerts,
        }

    def _publish_alerts(self, rows: DataFrame, txn: Txn) -> None:
        """The alerts append (idempotent), then the Kafka copy when configured (at-least-once)."""
        append_idempotent(rows, self.paths.alerts, txn.part("alerts"))
        self._alerts_committed_ms = time.time() * 1000
        if self.alerts_to_kafka:
            write_alerts_to_kafka(rows, self.settings)

    def _evaluate_and_merge(
        self,
        spark: SparkSession,
        valid: DataFrame,
        progress: dict[str, Any],
        states: Sequence[StateSpec],
        txn: Txn,
        min_event_ms: int,
        cached: list[DataFrame],
        steps: _Steps,
        background: _Background,
    ) -> int:
        """Evaluate the batch against the pinned state, write alerts and cooldowns, then MERGE its tiles."""
        engine, batch_id = self.settings.engine, txn.version
        bucket_ms = engine.bucket_seconds * 1000
        tagged = tag_rows(valid, states, bucket_ms=bucket_ms, keep=TAGGED_KEEP).persist()
        batch_tiles = tiles(tagged, bucket_ms=bucket_ms).persist()
        cached.extend([tagged, batch_tiles])
        active_ids = [s.state_id for s in states if s.active_rules]
        alerts = 0
        if active_ids:
            rules = rules_frame(spark, states, bucket_seconds=engine.bucket_seconds)
            reach = max(
                reach_buckets(r.rule.window_minutes, engine.bucket_seconds) for s in states for r in s.active_rules
            )
            prior = (
                spark.read.format("delta")
                .option("versionAsOf", progress["stateVersion"])
                .load(self.paths.bucket_state)
                .where(F.col("stateId").isin(*active_ids))
                # Only tiles a lookback of this batch can reach (file skipping; less to join).
                .where(reachable_tiles((min_event_ms // bucket_ms - reach) * bucket_ms, bucket_ms=bucket_ms))
            )
            active_rows = tagged.where(F.col("stateId").isin(*active_ids))
            # Late rows are not evaluated but count for the rows after them, also within their bucket.
            running = running_in_bucket(active_rows).where(~F.col("isLate"))
            active_tiles = batch_tiles.where(F.col("stateId").isin(*active_ids))
            emitted = candidate_alerts(running, rules, prior, active_tiles, bucket_ms=bucket_ms).persist()
            cached.append(emitted)
            if any(r.rule.cooldown_minutes for s in states for r in s.active_rules):
                memory = (
                    spark.read.format("delta")
                    .option("versionAsOf", progress["cooldownVersion"])
                    .load(self.paths.alert_cooldown)
                )
                emitted = apply_cooldown(emitted, memory).persist()
                cached.append(emitted)
            counted = emitted.agg(F.count(F.lit(1)), ingestion_percentiles(F.col("ingestedAt"))).first()
            alerts, self._alerts_ingest_ms = (counted[0], counted[1]) if counted else (0, None)
            steps.done("evaluate")
            if alerts:
                rows = alert_rows(
                    emitted, rules_version=progress["rulesVersion"], batch_id=batch_id, detected_at=_utcnow()
                ).persist()
                cached.append(rows)
                background.submit("alerts", batch_id, self._publish_alerts, rows, txn)
                merge_last_alerts(
                    spark,
                    self.paths.alert_cooldown,
                    last_alert_times(emitted),
                    batch_id=batch_id,
                    txn=txn.part("cooldown"),
                )
                crash_point("cooldown", batch_id)
                steps.done("alerts")
        merge_tiles(
            spark,
            self.paths.bucket_state,
            batch_tiles,
            state_ids=[s.state_id for s in states],
            lowest_starts=lowest_tile_starts(min_event_ms, bucket_ms=bucket_ms),
            batch_id=batch_id,
            txn=txn.part("state"),
        )
        crash_point("state", batch_id)
        steps.done("state")
        return alerts
