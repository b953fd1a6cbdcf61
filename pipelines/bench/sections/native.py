"""The report's native-state section: the engine beside the same rules on ``transformWithState`` + RocksDB.

Example::

    add_native_state(report, [NativeComparison("2,000-row batches, 10,000 keys", native_result, engine_result)])
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from pipelines.bench.engine_runs import BacklogResult
from pipelines.bench.native_state import NativeComparison, NativeStateResult
from pipelines.bench.report import Report, Table, fmt, fmt_bytes, ratio

COLUMNS = ["input", "approach", "tx/s", "median batch", "alerts", "state rows", "state size", "recovery"]


def add_native_state(report: Report, comparisons: Sequence[NativeComparison]) -> None:
    """One section with a table: per input, the engine's row (when it ran beside) and the native baseline's."""
    if not comparisons:
        return
    section = report.section("Against what a Spark user would write: transformWithState on RocksDB")
    section.text.append(
        "The same rules and the same landing files (one per micro-batch) through Structured Streaming's own state"
        " store: `groupBy(payerId).transformWithState(...)` (PySpark's row API) on the RocksDB provider with changelog"
        " checkpointing, a map per payer from minute to that minute's aggregates (sum, count, min, max for each"
        " filter the rules use), pruned by event time and with a TTL for payers never seen again, alerts appended"
        " to a Delta table (`pipelines/bench/native_state.py`). *Recovery*: the last file is held back; a new query"
        " starts on the same checkpoint with it, timed from its start to its batch's commit (the state store reloaded"
        " from the checkpoint, in the same JVM). Its tx/s and median batch leave that batch out."
    )
    rows = []
    for c in comparisons:
        if c.engine is not None:
            rows.append(_engine_row(c.label, c.engine))
        rows.append(_native_row(c.label, c.native, c.engine))
    section.tables.append(
        Table(
            "throughput, batch time, alerts, state, recovery",
            COLUMNS,
            rows,
            note="tx/s: rows after the first batch / time after it (both). Median batch: the engine's batch log"
            " duration, the native query's `triggerExecution`, first batch left out. State: the engine's"
            " `bucket_state` Delta table (rows, bytes); the native query's state operator rows (`numRowsTotal`) and"
            " the checkpoint's `state` folder on disk.",
        )
    )


def _median_after_first(seconds: Sequence[float]) -> float:
    steady = seconds[1:] or seconds
    return statistics.median(steady) if steady else float("nan")


def _engine_row(label: str, engine: BacklogResult) -> list[str]:
    return [
        label,
        "engine",
        fmt(engine.sustained_tps),
        f"{_median_after_first(engine.batch_seconds):.2f} s",
        fmt(engine.alerts),
        fmt(engine.state_rows),
        fmt_bytes(engine.state_bytes),
        "-",
    ]


def _native_row(label: str, native: NativeStateResult, engine: BacklogResult | None) -> list[str]:
    alerts = fmt(native.alerts)
    if engine is not None:
        alerts += " (= engine)" if native.alerts == engine.alerts else f" (engine: {engine.alerts:,})"
    speed = fmt(native.sustained_tps)
    if engine is not None:
        speed += f" (engine: {ratio(native.sustained_tps, engine.sustained_tps)})"
    recovery = "-"
    if native.recovery_seconds is not None:
        recovery = f"{native.recovery_seconds:.1f} s"
        if native.recovery_batch_seconds is not None:
            recovery += f" (batch {native.recovery_batch_seconds:.1f} s)"
    return [
        label,
        "transformWithState + RocksDB",
        speed,
        f"{native.median_batch_seconds:.2f} s",
        alerts,
        fmt(native.state_rows),
        fmt_bytes(native.state_bytes),
        recovery,
    ]
