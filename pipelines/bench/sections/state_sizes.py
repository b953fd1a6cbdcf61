"""The report's state-size section: bucket tiles against per-event rows at steady state."""

from __future__ import annotations

from pipelines.bench.report import Chart, Report, Table, fmt, fmt_bytes
from pipelines.bench.scenarios import Results
from pipelines.bench.sections.labels import window_label


def add_state_sizes(report: Report, results: Results) -> None:
    if not results.state_sizes:
        return
    section = report.section("State size at steady state (a full window of input)")
    section.text.append(
        f"{results.plan.state_keys:,} keys, each with N transactions in every minute of the window, each at a random"
        " millisecond of it with a random UUID for an id (as the generator's and a payment system's), 4 rules over one"
        " state. Both states are built from the same input in one Spark job each, as the two designs"
        " hold them once the whole window has streamed in: the engine's tiles (minute, hour and day levels, the"
        " levels the window can read: a 1-hour window keeps minutes only); the per-event baseline's lean events"
        " (state, key, time, id and the aggregated value: one row per transaction and state); and every whole"
        " transaction under its key, which is what the seeds' per-event design keeps"
        " (`MapState<Long, Set<Transaction>>`). Each is written the same way: one Delta table, one file sorted by key"
        " and time. The baselines scenario above checks, on a real engine run, that"
        " the state the engine builds batch by batch equals the tiles built this way (the engine row's *state rows*"
        " cell: mismatched rows)."
        " Sequential ids at the minute's start, this input until 2026-12-02, compressed to almost nothing: whole"
        " transactions came out 4.4x the tiles in bytes at 10 tx/key/min over a day then; the tiles' own bytes do not"
        " depend on the ids. `pipelines/bench/state_size.py`."
    )
    rows = [
        [
            window_label(r.window_minutes),
            f"{r.per_minute} tx/key/min",
            fmt(r.transactions),
            fmt(r.engine_rows),
            fmt_bytes(r.engine_bytes),
            fmt(r.per_event_rows),
            fmt_bytes(r.per_event_bytes),
            fmt_bytes(r.whole_bytes),
            f"{r.rows_ratio:.1f}x",
            f"{r.bytes_ratio:.1f}x",
            f"{r.whole_bytes_ratio:.1f}x",
        ]
        for r in results.state_sizes
    ]
    section.tables.append(
        Table(
            "bucket tiles vs per-event rows",
            [
                "window",
                "rate",
                "transactions",
                "engine rows",
                "engine size",
                "per-event rows",
                "per-event size (lean)",
                "whole transactions size",
                "rows: per-event / engine",
                "bytes: lean / engine",
                "bytes: whole / engine",
            ],
            rows,
        )
    )
    for window in sorted({r.window_minutes for r in results.state_sizes}):
        chosen = [r for r in results.state_sizes if r.window_minutes == window]
        section.charts.append(
            Chart(
                f"state_steady_{window}m",
                f"state size at steady state, {window_label(window)} window",
                "tx per key per minute",
                "bytes",
                {
                    "engine (bucket tiles)": [(float(r.per_minute), float(r.engine_bytes)) for r in chosen],
                    "per-event, lean": [(float(r.per_minute), float(r.per_event_bytes)) for r in chosen],
                    "per-event, whole transactions": [(float(r.per_minute), float(r.whole_bytes)) for r in chosen],
                },
                log_y=True,
            )
        )
