"""The report's latency section: ingestion to alerts committed, continuous at a fixed input rate."""

from __future__ import annotations

from pipelines.bench.live_latency import BURST_FACTOR, STACK_PARTS, LiveResult
from pipelines.bench.report import Report, Table, fmt
from pipelines.bench.scenarios import Results


def add_latency(report: Report, results: Results) -> None:
    if not results.live:
        return
    section = report.section("Ingestion-to-alert latency (continuous, fixed input rate)")
    runs = [*results.live.items(), *((f"floor, {source}", floor) for source, floor in results.live_floor.items())]
    section.text.append(
        "`fraudlake run` (continuous, trigger `engine.trigger_interval_seconds`) on a fresh lakehouse with 20 rules in"
        f" 4 states over {results.plan.base_keys:,} keys, while a feeder sends transactions at a fixed rate (event"
        " time = the moment of sending): landing files every 0.25 s (ingestion time = the file's modification"
        " time), or records to the transactions topic of a local broker (ingestion time = the Kafka record"
        " timestamp). Latency of a transaction = its micro-batch's alerts commit (`batch_log.metrics.committedAtMs`)"
        " - its ingestion time, over every transaction fed, the first micro-batch included"
        " (`pipelines/bench/live_latency.py`). The rules' limits are calibrated on the workload so that about"
        f" {results.plan.alert_share:.0%} of the transactions raise an alert"
        + (
            f"; from {results.plan.latency_burst[0]:.0%} of the run for {results.plan.latency_burst[1]:.0%} of it,"
            f" every tenth transaction is a payment of {BURST_FACTOR}x its amount by a payer of its own (a burst of"
            " alerts, an attack's shape): that span's transactions' latency is given apart."
            if results.plan.latency_burst
            else "."
        )
    )
    if results.latency_jvm == "cold":
        section.text.append(
            "This run's JVM was **cold**: the latency scenario ran first in its process (`--only latency`), so its"
            " first micro-batches carry the JVM's class loading, JIT and Spark's code generation and set the p99;"
            " not comparable with a run after other scenarios (a warm JVM, as a continuous engine runs)."
        )
    elif results.latency_jvm == "warm":
        section.text.append(
            "This run's JVM was **warm**: other scenarios ran engine micro-batches in the same process before it."
        )
    section.tables.append(
        Table(
            "latency",
            [
                "source",
                "input rate",
                "transactions",
                "alerting",
                "batches",
                "mean batch s",
                "p50 s",
                "p95 s",
                "p99 s",
                "max s",
                "burst p50 / p99 s",
            ],
            [_latency_row(label, live) for label, live in runs],
        )
    )
    if results.live_floor:
        section.text.append(
            "*floor* rows: the stack's own latency at the same rate (`pipelines/bench/live_floor.py`): the cheapest"
            " continuous job doing the engine's I/O (parse, Delta append, one MERGE of per-(payer, minute) sums; no"
            " evaluation, no alerts), on the same kind of source, fed the same workload by the same feeder with the"
            " same trigger interval; latency = its micro-batch's MERGE commit - ingestion. What the engine adds to"
            " it is the engine's; the floor's is Structured Streaming's and Delta's on this machine."
        )
    section.text.append(
        "Where a transaction's time goes: *wait* = from its ingestion to its micro-batch's trigger (the batch before"
        " it running, then the trigger interval), *work* = from that trigger to the alerts commit (medians over"
        " transactions); then, per micro-batch, the medians of the query progress' `durationMs` parts (Spark's own"
        " work around the engine: offsets, the WAL commit, planning, the commit log; `addBatch` is the engine's"
        " foreachBatch) and of the engine's steps (`batch_log.metrics`)."
    )
    parts = [*STACK_PARTS, "triggerExecution"]
    section.tables.append(
        Table(
            "where the time goes (ms)",
            ["source", "wait p50", "work p50", *parts, "engine plan", "engine evaluate", "engine retention"],
            [
                [
                    label,
                    fmt(live.wait_p50 * 1000),
                    fmt(live.work_p50 * 1000),
                    *[fmt(live.stack_ms.get(name, float("nan"))) for name in parts],
                    *[fmt(live.steps_ms.get(name, float("nan"))) for name in ("plan", "evaluate", "retention")],
                ]
                for label, live in runs
            ],
        )
    )


def _latency_row(label: str, live: LiveResult) -> list[str]:
    return [
        label,
        f"{live.rate:,.0f} tx/s",
        fmt(live.transactions),
        f"{live.alerting / live.transactions:.1%}" if live.transactions else "-",
        str(live.batches),
        fmt(live.mean_batch_seconds, 2),
        fmt(live.p50, 2),
        fmt(live.p95, 2),
        fmt(live.p99, 2),
        fmt(live.max, 2),
        f"{fmt(live.burst_p50, 2)} / {fmt(live.burst_p99, 2)}" if live.burst_transactions else "-",
    ]
