"""The report's baselines section: the engine against per-event state and Spark's sliding windows."""

from __future__ import annotations

from pipelines.bench.report import Chart, Report, Table, fmt, fmt_bytes, ratio
from pipelines.bench.scenarios import Results


def add_baselines(report: Report, results: Results) -> None:
    if not results.baselines:
        return
    section = report.section("Against the baselines: per-event state and Spark sliding windows")
    section.text.append(
        "Same bucket-aligned input (every event time on a minute start), 4 rules (SUM, COUNT, AVG, MAX per payer,"
        f" 1-hour windows, limits met by about {results.plan.alert_share:.0%} of the transactions) for the engine and"
        " the per-event baseline; the"
        " sliding-window baseline runs the SUM rule (same limit) as `window(eventTime, 1 hour, 1 minute)` + a"
        " 5-minute watermark, append mode. *Alert delay* is in event time: how far the stream's max event time had"
        " moved past the last transaction of a window when the window came out (for sliding windows: every closed"
        " window, the delay an alert on it has; the engine alerts in the micro-batch of the transaction: 0). A window"
        " closes once the watermark passes its end, so the last 5 minutes of the input close none, and a sum that"
        " the rest of the stream pushes over the limit is seen 6 or more minutes later."
    )
    rows, state_rows = [], []
    lateness_min = 5  # the engine's default allowed lateness, which the sliding-window watermark uses
    for b in results.baselines:
        ours, sliding = b["ours"], b["sliding"]
        label = f"{b['perKeyPerMinute']} tx/key/min, {b['keys']:,} keys, {b['minutes']} min"
        rows.append(
            [
                label,
                "engine",
                fmt(ours.sustained_tps),
                fmt(ours.alerts),
                "0 s",
                fmt(ours.state_rows) + (f" (mismatched: {b['stateMismatched']})" if "stateMismatched" in b else ""),
                fmt_bytes(ours.state_bytes),
                "1.0x",
            ]
        )
        rows.append(
            [
                label,
                "per-event",
                fmt(b["perEventTps"]),
                f"{b['perEventAlerts']:,} (mismatched: {b['alertsMismatched']})",
                "0 s",
                fmt(b["perEventRows"]),
                fmt_bytes(b["perEventBytes"]),
                ratio(ours.state_bytes, b["perEventBytes"]),
            ]
        )
        rows.append(
            [
                label,
                "sliding window",
                fmt(sliding.rows / sliding.wall_seconds if sliding.wall_seconds else None),
                f"{sliding.alert_windows:,} windows / {sliding.alerted_keys:,} keys (of {sliding.closed_windows:,}"
                " windows closed)",
                f"p50 {sliding.delay_p50_seconds:,.0f} s, p95 {sliding.delay_p95_seconds:,.0f} s"
                if sliding.closed_windows
                else f"none closed: a window needs the watermark past its end, >= {lateness_min + 1} min of event"
                " time after its first transaction",
                fmt(sliding.state_rows),
                fmt_bytes(sliding.state_bytes),
                ratio(ours.state_bytes, sliding.state_bytes),
            ]
        )
        state_rows.append((b["perKeyPerMinute"], ours.state_bytes, b["perEventBytes"], sliding.state_bytes))
    section.tables.append(
        Table(
            "throughput, alerts, alert delay, state",
            ["input", "approach", "tx/s", "alerts", "alert delay", "state rows", "state size", "state vs engine"],
            rows,
            note="Per-event tx/s is over its batches after the first (its own timer); sliding-window tx/s is rows"
            " / wall time of its whole run. State sizes: Delta table bytes for the engine and per-event, the state"
            " store's memory for sliding windows.",
        )
    )
    section.charts.append(
        Chart(
            "state_size",
            "state size by input rate",
            "tx per key per minute",
            "bytes",
            {
                "engine (bucket tiles)": [(float(r), float(o)) for r, o, _, _ in state_rows],
                "per-event": [(float(r), float(p)) for r, _, p, _ in state_rows],
                "sliding window": [(float(r), float(s)) for r, _, _, s in state_rows],
            },
            log_y=True,
        )
    )
