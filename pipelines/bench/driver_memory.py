"""Driver memory as the state grows: one engine, batch after batch, its JVM's heap after a full GC.

In a local session the driver JVM is also the executor, so its heap holds the engine's cached state (the bucket
tiles kept on the executors between batches, ``pipelines.engine.table_cache``) beside what is the driver's own
(plans, the status store, Delta's log caches, broadcast relations being built). After each batch this measures the
heap in use after ``System.gc()`` and the part of it that cached RDD blocks hold (cached frames and local
checkpoints, as the Storage tab lists them): on a cluster those live on the executors. What is left, the driver's
own (broadcast relations among it: the driver builds and keeps those on a cluster too), is what must stay flat as
the state grows. Spark's size estimate of deserialized cached rows is low (a heap histogram where it said 550 MB
counted ~700 MB of rows), so "own" still carries a fifth or so of the cache.

The batches go through the engine's ``foreachBatch`` handler (``BatchHandler.process``) one by one, as in
``profile_handler``: each batch a file of new transactions over many payers, so the state grows with every batch.

Example::

    samples = driver_memory(spark, base, folder, rows=20_000, batches=25, keys=1_000_000)
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from delta_tables.table_snapshot import table_row_counts, table_version
from pipelines.base.settings import Settings
from pipelines.bench.engine_runs import lakehouse_for
from pipelines.bench.engine_workload import raw_file_frame
from pipelines.bench.workload import Workload, alerting_rule_set, transactions, write_batches
from pipelines.engine.batch_handler import BatchHandler

MB = 2**20
WARMUP_BATCHES = 2
"""The first batches, left out of the growth (``own_growth``): the JVM's and Spark's own warm-up."""


@dataclass(frozen=True)
class HeapAfterGc:
    """The JVM's used heap after a full GC, and how much of it cached RDD blocks hold (cached frames, local
    checkpoints: on a cluster they live on the executors), in MB."""

    used_mb: float
    blocks_mb: float

    @property
    def own_mb(self) -> float:
        """The heap that is the driver's own: plans, the status store, Delta's log caches, broadcast relations."""
        return self.used_mb - self.blocks_mb

    def __str__(self) -> str:
        blocks, own = f"{self.blocks_mb:,.0f}", f"{self.own_mb:,.0f}"
        return f"heap {self.used_mb:,.0f} MB after GC, cached blocks {blocks} MB, own {own} MB"


def heap_after_gc(spark: SparkSession) -> HeapAfterGc:
    """``HeapAfterGc`` now: a full collection on both sides of py4j (Python's ``gc.collect()``, then
    ``System.gc()``), then the heap in use and the memory of the cached RDD blocks (cached frames and local
    checkpoints, as the Storage tab lists them). In a local session those blocks are in this heap; broadcast relations
    are not among them (the driver builds and keeps those on a cluster too), so they count as the driver's own.

    Python's first: a Python object in a reference cycle (PySpark's and py4j's wrappers among them) keeps the JVM
    object it wraps alive until Python's cycle collector frees it, at a time of its own. Without it the sample counted
    such garbage as the driver's: the run's own heap rose 106 -> 172 MB with a 360-MB spike at the retention batch;
    with it 103 -> 116 MB, the spike 200 MB (the memory scenario alone, same code)."""
    jvm: Any = spark.sparkContext._jvm
    gc.collect()
    jvm.java.lang.System.gc()
    used = jvm.java.lang.management.ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getUsed()
    blocks = sum(int(info.memSize()) for info in spark.sparkContext._jsc.sc().getRDDStorageInfo())
    return HeapAfterGc(round(float(used) / MB, 1), round(float(blocks) / MB, 1))


@dataclass(frozen=True)
class MemorySample:
    """After one batch: the batch, the state's rows (bucket tiles), the heap."""

    batch: int
    state_rows: int
    heap: HeapAfterGc


def driver_memory(
    spark: SparkSession, base: Settings, folder: Path, *, rows: int, batches: int, keys: int
) -> list[MemorySample]:
    """``batches`` batches of ``rows`` new transactions over ``keys`` payers (20 rules in 4 states, 1-hour windows,
    limits met by ~1% of the transactions) through one engine handler in ``folder``; a sample after each."""
    workload = Workload.backlog(rows * batches, keys)
    rules = alerting_rule_set(20, workload, window_minutes=60, states=4, alert_share=0.01)
    settings = lakehouse_for(base, str(folder / "lakehouse"), rules, spark=spark)
    write_batches(transactions(workload), folder / "landing", batch_size=rows)
    handler = BatchHandler(settings, app_id="bench-driver-memory", report=lambda line: None)
    state = settings.table_path("bucket_state")
    samples = []
    try:
        for batch_id, path in enumerate(sorted((folder / "landing").glob("*.jsonl"))):
            handler.process(raw_file_frame(spark, path), batch_id)
            state_rows = sum(table_row_counts(spark, state, table_version(spark, state)).values())
            samples.append(MemorySample(batch_id, state_rows, heap_after_gc(spark)))
    finally:
        handler.release()  # the scenarios after this one do not carry its cached state
    return samples


def own_growth(samples: list[MemorySample], *, warmup: int = WARMUP_BATCHES) -> float:
    """How much the driver's own heap grew over the run: its largest after the warm-up batches minus its first."""
    steady = samples[warmup:] or samples
    return max(s.heap.own_mb for s in steady) - steady[0].heap.own_mb
