"""Baseline 3, what a Spark user would write instead: the rules on Structured Streaming's own state store.

One streaming query over the engine's landing files (files source, ``maxFilesPerTrigger=1``, ``availableNow``):
the engine's parse (``parse_raw``, the transaction schema of conf), each transaction's filter results and values
per state computed as columns, then ``groupBy(<grouping key>).transformWithState(WindowProcessor)`` — PySpark 4.1's
row-based API (``transformWithStateInPandas`` is the other: the docs advise the row API for many keys, and the
per-key work here is a loop over a handful of rows, which pandas would only slow down) — on the RocksDB state
store provider, appending alerts to a Delta table (the Delta sink: exactly once per batch id).

State: per key, a map bucket -> that bucket's aggregates for every filter the rules use (``native_processor``:
why a map and not a list of events, and how it is pruned). The map has a **TTL** of the widest window + the allowed
lateness, in processing time: the backstop for keys never seen again (pruning by event time happens only when a key
is seen). TTL counts processing time, not event time: it cannot be the window itself, and in a backlog replayed in
minutes (this benchmark) it never fires.

Measured: sustained tx/s (rows after the first batch / time after it, as ``engine_runs.run_backlog``), the
median batch time (``durationMs.triggerExecution``), alerts, the state (the checkpoint's ``state`` folder on
disk; ``numRowsTotal`` of the state operator: the map entries), and **recovery**: the last file
of ``landing_dir`` is held back; once the first query has run the others, a new query starts on the same
checkpoint with it, timed from ``start()`` to its batch's commit file (the state store loaded from the
checkpoint, in the same warm JVM).

Same alerts as the engine on the same input (``tests/test_bench_native_state.py`` checks them against the
reference evaluator): SUM, COUNT, AVG, MIN, MAX and VALUE with filters, ACTIVE and SHADOW rules, one grouping key
for all rules. Not: COUNT_DISTINCT, relative limits, cooldowns (refused), late rows (evaluated here; the engine
does not evaluate a row older than the max event time of earlier batches minus the lateness: a key's processor
does not see the other keys' times), duplicate transaction ids within a batch (the engine quarantines them; a
window function is not allowed on a stream), rule changes (the rules are fixed when the query starts).

The Python workers must run this project's interpreter (``PYSPARK_PYTHON``, as the Makefile exports): they import
``native_processor``.

Example::

    result = run_native_state(spark, landing, work / "native", rule_set(20, window_minutes=60, states=4),
                              settings=settings)
    result.sustained_tps, result.median_batch_seconds, result.alerts, result.state_bytes, result.recovery_seconds
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import LongType

from pipelines.base.settings import Settings
from pipelines.base.spark_session import session_confs
from pipelines.bench.engine_runs import BacklogResult
from pipelines.bench.native_processor import ALERTS_DDL, WindowProcessor, rule_checks
from pipelines.engine.parse_transactions import parse_raw
from pipelines.engine.sources import read_files
from pipelines.engine.states import LiveRule, StateSpec, states_of
from pipelines.engine.units import to_units
from rules_cdc.filter_expr import compile_filter
from rules_cdc.rule_model import Rule

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
STATE_CONFS: Mapping[str, str] = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    # A batch commits a changelog of what it changed, not a snapshot of the whole store (snapshots in the background).
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # In processing-time mode (TTL) a transformWithState query always wants another batch (a timer may be due):
    # availableNow would run empty batches forever. TTL eviction still runs in every batch with data.
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
}


@dataclass(frozen=True)
class NativeStateResult:
    """What one run measured; the held-back file's batch is in ``rows``, ``batches`` and ``alerts`` but not in the
    throughput figures."""

    rows: int
    batches: int
    sustained_tps: float  # first query: rows after its first batch / time after it
    batch_seconds: tuple[float, ...]  # first query: triggerExecution of each batch that read rows
    alerts: int
    state_rows: int  # numRowsTotal of the state operator after the last batch
    state_bytes: int  # the checkpoint's state folder on disk
    recovery_seconds: float | None  # new query on the checkpoint: start() -> its batch's commit file
    recovery_batch_seconds: float | None  # that batch's triggerExecution
    wall_seconds: float
    alerts_path: str

    @property
    def median_batch_seconds(self) -> float:
        steady = self.batch_seconds[1:] or self.batch_seconds
        return statistics.median(steady) if steady else float("nan")


@dataclass(frozen=True)
class NativeComparison:
    """One input through the native baseline and (when run beside it) the engine: a row pair of the report."""

    label: str
    native: NativeStateResult
    engine: BacklogResult | None = None


def tagged_transactions(raw: DataFrame, settings: Settings, states: Sequence[StateSpec]) -> DataFrame:
    """Valid transactions as the processor's input: the grouping key columns, ``eventTimeMs``, ``transactionId``,
    and per state (in order) whether the row passes its filter (``passes``) and its field's value in units
    (``units``; null for a null field or the COUNT pseudo-field)."""
    valid = parse_raw(raw, settings.transaction_schema).where(F.col("reason").isNull())
    passes = [F.coalesce(compile_filter(s.filter), F.lit(False)) for s in states]
    units = [
        to_units(F.col(s.aggregate_field), LongType()) if s.aggregate_field else F.lit(None).cast("long")
        for s in states
    ]
    return valid.select(
        *states[0].grouping_key_names,
        "eventTimeMs",
        "transactionId",
        F.array(*passes).alias("passes"),
        F.array(*units).alias("units"),
    )


def alerts_stream(raw: DataFrame, settings: Settings, rules: Sequence[Rule], *, ttl: bool = True) -> DataFrame:
    """The alerts of ``rules`` over a stream of raw records (``ALERTS_DDL`` columns), by ``transformWithState``."""
    states = states_of([LiveRule(r, None) for r in rules])
    engine = settings.engine
    checks = rule_checks(rules, states, bucket_seconds=engine.bucket_seconds)
    lateness_ms = engine.allowed_lateness_seconds * 1000
    widest_ms = max(r.window_minutes for r in rules) * 60_000 + engine.bucket_seconds * 1000
    processor = WindowProcessor(
        checks,
        states=len(states),
        bucket_ms=engine.bucket_seconds * 1000,
        lateness_ms=lateness_ms,
        ttl_ms=widest_ms + lateness_ms if ttl else None,
    )
    tagged = tagged_transactions(raw, settings, states)
    return tagged.groupBy(*states[0].grouping_key_names).transformWithState(
        processor, ALERTS_DDL, "Append", "ProcessingTime" if ttl else "None"
    )


def run_native_state(
    spark: SparkSession,
    landing_dir: Path,
    work_dir: Path,
    rules: Sequence[Rule],
    *,
    settings: Settings,
    recovery: bool = True,
    ttl: bool = True,
) -> NativeStateResult:
    """Run the baseline over the JSON-lines files of ``landing_dir`` (one per micro-batch, in name order) and
    measure it; ``work_dir`` is emptied first and holds the input links, checkpoint and alerts table.

    With ``recovery`` the last file is held back for the recovery run (at least two files needed); the alerts
    then cover every file, as the engine's over the same folder."""
    files = sorted(p for p in landing_dir.iterdir() if p.is_file() and not p.name.startswith("."))
    if len(files) < (2 if recovery else 1):
        raise ValueError(f"{landing_dir} has {len(files)} files: too few for the run")
    shutil.rmtree(work_dir, ignore_errors=True)
    inputs, checkpoint, alerts_path = work_dir / "input", work_dir / "_checkpoint", work_dir / "alerts"
    inputs.mkdir(parents=True)
    first, held = (files[:-1], files[-1:]) if recovery else (files, [])
    _link(first, inputs)
    started = time.monotonic()
    with session_confs(spark, STATE_CONFS):
        query = _start(spark, inputs, settings, rules, checkpoint=checkpoint, alerts_path=alerts_path, ttl=ttl)
        first_run = _finished(query)
        recovered: list[dict[str, Any]] = []
        recovery_seconds = recovery_batch = None
        if held:
            _link(held, inputs)
            restarted = time.time()
            again = _start(spark, inputs, settings, rules, checkpoint=checkpoint, alerts_path=alerts_path, ttl=ttl)
            recovered = _with_rows(_finished(again))
            if recovered:
                commit = checkpoint / "commits" / str(recovered[-1]["batchId"])
                recovery_seconds = commit.stat().st_mtime - restarted
                recovery_batch = recovered[-1]["durationMs"]["triggerExecution"] / 1000
    wall = time.monotonic() - started
    measured = _with_rows(first_run)
    progress = measured + recovered
    operators = [op for p in progress for op in p.get("stateOperators", [])]
    return NativeStateResult(
        rows=sum(int(p["numInputRows"]) for p in progress),
        batches=len(progress),
        sustained_tps=_sustained(measured),
        batch_seconds=tuple(p["durationMs"]["triggerExecution"] / 1000 for p in measured),
        alerts=spark.read.format("delta").load(str(alerts_path)).count(),
        state_rows=int(operators[-1].get("numRowsTotal", 0)) if operators else 0,
        state_bytes=_folder_bytes(checkpoint / "state"),
        recovery_seconds=recovery_seconds,
        recovery_batch_seconds=recovery_batch,
        wall_seconds=wall,
        alerts_path=str(alerts_path),
    )


def _link(files: Sequence[Path], folder: Path) -> None:
    """The files into ``folder`` as hard links: same bytes, same modification time (the files source's order)."""
    for path in files:
        try:
            os.link(path, folder / path.name)
        except OSError:  # another file system: a copy that keeps the time
            shutil.copy2(path, folder / path.name)


def _start(
    spark: SparkSession,
    inputs: Path,
    settings: Settings,
    rules: Sequence[Rule],
    *,
    checkpoint: Path,
    alerts_path: Path,
    ttl: bool,
) -> StreamingQuery:
    raw = read_files(spark, str(inputs), max_files_per_trigger=1)
    return (
        alerts_stream(raw, settings, rules, ttl=ttl)
        .writeStream.format("delta")
        .outputMode("append")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(alerts_path))
    )


def _finished(query: StreamingQuery) -> list[dict[str, Any]]:
    """Wait for an availableNow query; its progress reports, oldest first (it failed: RuntimeError)."""
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"native state query failed: {query.exception()}")
    return list(query.recentProgress)


def _with_rows(progress: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in progress if p["numInputRows"]]


def _end_seconds(progress: dict[str, Any]) -> float:
    began = dt.datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()
    return float(began + progress["durationMs"]["triggerExecution"] / 1000)


def _sustained(batches: Sequence[dict[str, Any]]) -> float:
    """Rows after the first batch / time from its end to the last one's (one batch: its rows / its time)."""
    if not batches:
        return 0.0
    if len(batches) == 1:
        seconds = batches[0]["durationMs"]["triggerExecution"] / 1000
        return float(batches[0]["numInputRows"]) / seconds if seconds else 0.0
    span = _end_seconds(batches[-1]) - _end_seconds(batches[0])
    return sum(float(b["numInputRows"]) for b in batches[1:]) / span if span > 0 else 0.0


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
