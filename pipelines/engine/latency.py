"""Ingestion-to-alert latency per micro-batch, without an extra Spark job: percentiles of *ingestion time*.

Latency ``p`` of a batch is ``commit - ingestedAt`` at that percentile. ``commit`` is one instant per batch, so
the latency distribution is the ingestion-time distribution mirrored: latency p99 = commit - ingestion p1,
p95 = commit - p5, p50 = commit - p50. The engine therefore adds ``percentile_approx`` of ``ingestedAt`` (epoch
ms) to aggregations it runs anyway (the batch ``_stats``, the alerts count), notes the wall-clock instant the
alerts append commits, and subtracts. Two series per batch go to ``batch_log.metrics``:

* ``latencyP50Ms``/``latencyP95Ms``/``latencyP99Ms``: over the batch's alerts (ingestion -> alert committed);
* ``evaluatedP50Ms``/``evaluatedP95Ms``/``evaluatedP99Ms``: over every in-time valid transaction of the batch
  (ingestion -> its evaluation committed), so batches without alerts have a figure too.

Example::

    agg = frame.agg(ingestion_percentiles(F.col("ingestedAt")).alias("ingestMs")).first()
    metrics = latency_metrics("latency", commit_ms=time.time() * 1000, ingestion_ms=agg["ingestMs"])
    print(format_latency(metrics))     # 'alert latency p50/p95/p99 1830/2410/2950 ms'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F

INGESTION_QUANTILES = (0.5, 0.05, 0.01)
"""Ingestion-time quantiles whose distances to the commit are latency p50, p95, p99 (in that order)."""
LATENCY_LABELS = ("P50", "P95", "P99")
COMMITTED_AT = "committedAtMs"
"""Also in ``batch_log.metrics``: the instant (epoch ms) the batch's alerts committed (or its writes ended)."""
ALERT_PREFIX = "latency"
EVALUATED_PREFIX = "evaluated"
PERCENTILE_ACCURACY = 10_000  # relative error 1/10,000 of the rank: well under a millisecond of spread here


def ingestion_percentiles(ingested_at: Column) -> Column:
    """``array<bigint>``: the ingestion-time quantiles (epoch ms) of ``ingested_at`` (nulls ignored; null if none)."""
    return F.percentile_approx(F.unix_millis(ingested_at), list(INGESTION_QUANTILES), PERCENTILE_ACCURACY)


def latency_metrics(prefix: str, *, commit_ms: float, ingestion_ms: Sequence[int | None] | None) -> dict[str, float]:
    """``{<prefix>P50Ms, <prefix>P95Ms, <prefix>P99Ms}`` from ingestion quantiles; ``{}`` when there were none."""
    if not ingestion_ms or any(value is None for value in ingestion_ms):
        return {}
    return {
        f"{prefix}{label}Ms": round(max(commit_ms - float(value), 0.0), 1)
        for label, value in zip(LATENCY_LABELS, ingestion_ms, strict=True)
        if value is not None
    }


def latency_triple(metrics: Mapping[str, float], prefix: str) -> tuple[float, float, float] | None:
    """(p50, p95, p99) in ms of one series of ``metrics``, or None when the batch has none."""
    values = [metrics.get(f"{prefix}{label}Ms") for label in LATENCY_LABELS]
    if any(value is None for value in values):
        return None
    p50, p95, p99 = (float(v) for v in values if v is not None)
    return p50, p95, p99


def format_triple(triple: tuple[float, float, float] | None) -> str:
    """``1830/2410/2950 ms``, or ``-`` for none."""
    return "-" if triple is None else "/".join(f"{value:.0f}" for value in triple) + " ms"


def format_latency(metrics: Mapping[str, float]) -> str:
    """The progress line's latency part: alert latency if the batch had alerts, and the evaluated latency."""
    alerts, evaluated = latency_triple(metrics, ALERT_PREFIX), latency_triple(metrics, EVALUATED_PREFIX)
    parts = []
    if alerts is not None:
        parts.append(f"alert latency p50/p95/p99 {format_triple(alerts)}")
    if evaluated is not None:
        parts.append(f"evaluated p50/p95/p99 {format_triple(evaluated)}")
    return ", ".join(parts)
