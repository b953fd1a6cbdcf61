"""The report's driver-memory section: one engine's heap after a full GC, batch by batch, as its state grows."""

from __future__ import annotations

from pipelines.bench.driver_memory import WARMUP_BATCHES, MemorySample, own_growth
from pipelines.bench.report import Chart, Report, Table, fmt
from pipelines.bench.scenarios import Results

MEMORY_TARGET_MB = 256
"""The driver's own heap may grow by at most this much over the run (after its warm-up batches)."""


def _heap(sample: MemorySample) -> tuple[float, float, float]:
    return sample.heap.used_mb, sample.heap.blocks_mb, sample.heap.own_mb


def add_memory(report: Report, results: Results) -> None:
    samples = results.memory
    if not samples:
        return
    plan = results.plan
    section = report.section("Driver memory")
    section.text.append(
        f"One engine handler, {len(samples)} batches of {plan.memory_rows:,} new transactions over"
        f" {plan.memory_keys:,} payers (20 rules in 4 states, 1-hour windows, ~1% alerting), so the state grows with"
        " every batch; after each batch a full GC (`System.gc()`), then the JVM's used heap and the part of it that"
        " cached RDD blocks hold (the state cached between batches, local checkpoints: on a cluster they live on the"
        " executors). *Own* = heap - cached blocks: the driver's plans, status store, Delta log caches and broadcast"
        " relations. Spark's size estimate of deserialized cached rows is low (a heap histogram counted ~700 MB of"
        " rows where it said 550), so *own* still carries part of the cache."
        f" Own growth after the first {WARMUP_BATCHES} batches: {own_growth(samples):+,.0f} MB (target: under"
        f" {MEMORY_TARGET_MB} MB)."
    )
    section.tables.append(
        Table(
            "driver heap",
            ["after batch", "state rows", "used heap MB", "cached blocks MB", "own MB"],
            [[str(s.batch), fmt(s.state_rows), *(fmt(mb, 0) for mb in _heap(s))] for s in samples],
        )
    )
    section.charts.append(
        Chart(
            "driver_heap",
            "driver heap vs state rows",
            "state rows",
            "MB (after a full GC)",
            {
                "used heap": [(float(s.state_rows), s.heap.used_mb) for s in samples],
                "own (heap - cached blocks)": [(float(s.state_rows), s.heap.own_mb) for s in samples],
            },
        )
    )
