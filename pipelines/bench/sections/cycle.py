"""The report's retention-cycle section: one engine with retention on at the production cadence, batch by batch,
and how much longer than the median its longest batch is (a stall in alerting, or not)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from pipelines.bench.engine_runs import BacklogResult
from pipelines.bench.report import Chart, Report, Table, fmt
from pipelines.bench.scenarios import Results

CYCLE_TARGET = 2.0
"""The longest batch of a retention cycle may take at most this many times the median batch."""


@dataclass(frozen=True)
class CycleStall:
    """The longest batch of a cycle run against its median (batches after the first, the warm-up)."""

    ratio: float
    longest_seconds: float
    longest_batch: int
    median_seconds: float
    longest_steps: dict[str, float]
    retention_batches: int  # batches (after the first) that ran a retention step
    retention_median_ms: float
    retention_longest_ms: float


def cycle_stall(result: BacklogResult) -> CycleStall | None:
    seconds, steps = result.foreach_seconds, result.batch_steps
    if len(seconds) < 2:
        return None
    median = result.median_foreach_seconds
    longest = max(range(1, len(seconds)), key=lambda i: seconds[i])
    retention = [s["retention"] for s in steps[1:] if "retention" in s]
    return CycleStall(
        ratio=seconds[longest] / median,
        longest_seconds=seconds[longest],
        longest_batch=longest,
        median_seconds=median,
        longest_steps=steps[longest] if len(steps) == len(seconds) else {},
        retention_batches=len(retention),
        retention_median_ms=statistics.median(retention) if retention else 0.0,
        retention_longest_ms=max(retention, default=0.0),
    )


def _steps(steps: dict[str, float]) -> str:
    shown = sorted(((k, v) for k, v in steps.items() if not k.endswith("Ms")), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v:,.0f} ms" for k, v in shown) or "-"


def add_cycle(report: Report, results: Results) -> None:
    result = results.cycle
    stall = None if result is None else cycle_stall(result)
    if result is None or stall is None:
        return
    plan = results.plan
    section = report.section("A retention cycle (maintenance without a stall)")
    section.text.append(
        f"One engine, retention on at the production cadence (`retention_every_batches` {plan.cycle_every}: each"
        " state's fold and trim, the cooldown memory and each append-only table's bin-packing are steps spread over"
        f" the cycle's batches), on the Flink demo's steady workload: {plan.cycle_keys:,} payers paying about once"
        f" per event-minute each, 20 rules in 4 states over 1-hour windows (~{plan.alert_share:.0%} alerting),"
        f" {plan.cycle_batches} batches of {plan.cycle_rows:,} rows (5 event-minutes each: the windows are full"
        " after 12 batches, then a whole cycle runs). Before 2026-11-29 retention ran whole on one batch in 20,"
        " and that batch took 21-26 s against 4-6 s for the others. Batch times are the stream's `addBatch`"
        " (the whole foreachBatch); steps from `batch_log.metrics`."
    )
    section.tables.append(
        Table(
            "longest batch vs median (batches after the first)",
            [
                "batches",
                "median batch s",
                "longest batch s",
                "longest / median",
                "its steps",
                "batches with a retention step",
                "retention step median / longest ms",
            ],
            [
                [
                    str(result.batches),
                    fmt(stall.median_seconds, 2),
                    f"{stall.longest_seconds:.2f} (batch {stall.longest_batch})",
                    f"{stall.ratio:.2f}x",
                    _steps(stall.longest_steps),
                    str(stall.retention_batches),
                    f"{fmt(stall.retention_median_ms, 0)} / {fmt(stall.retention_longest_ms, 0)}",
                ]
            ],
        )
    )
    section.charts.append(
        Chart(
            "retention_cycle",
            "batch time over a retention cycle",
            "batch",
            "s",
            {
                "batch (foreachBatch)": [(float(i), s) for i, s in enumerate(result.foreach_seconds)],
                "its retention step": [
                    (float(i), st.get("retention", 0.0) / 1000) for i, st in enumerate(result.batch_steps)
                ],
            },
        )
    )
