"""The report's latency section: ingestion to alerts committed, continuous at a fixed input rate."""

from __future__ import annotations

from pipelines.bench.report import Report, Table, fmt
from pipelines.bench.scenarios import Results


def add_latency(report: Report, results: Results) -> None:
    if not results.live:
        return
    section = report.section("Ingestion-to-alert latency (continuous, fixed input rate)")
    section.text.append(
        "`fraudlake run` (continuous, trigger `engine.trigger_interval_seconds`) on a fresh lakehouse with 20 rules in"
        f" 4 states over {results.plan.base_keys:,} keys, while a feeder sends transactions at a fixed rate (event"
        " time = the moment of sending): landing files every 0.25 s (ingestion time = the file's modification"
        " time), or records to the transactions topic of a local broker (ingestion time = the Kafka record"
        " timestamp). Latency of a transaction = its micro-batch's alerts commit (`batch_log.metrics.committedAtMs`)"
        " - its ingestion time, over every transaction fed, the first micro-batch included"
        " (`pipelines/bench/live_latency.py`)."
    )
    section.tables.append(
        Table(
            "latency",
            ["source", "input rate", "transactions", "batches", "mean batch s", "p50 s", "p95 s", "p99 s", "max s"],
            [
                [
                    live.source,
                    f"{live.rate:,.0f} tx/s",
                    fmt(live.transactions),
                    str(live.batches),
                    fmt(live.mean_batch_seconds, 2),
                    fmt(live.p50, 2),
                    fmt(live.p95, 2),
                    fmt(live.p99, 2),
                    fmt(live.max, 2),
                ]
                for live in results.live.values()
            ],
        )
    )
