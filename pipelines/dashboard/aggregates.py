"""Alerts aggregated in Spark into the small pandas frames the charts draw; raw rows never reach the driver.

Each frame is bounded: ``over_time`` by rules x time buckets (at most ``MAX_BUCKETS`` buckets), ``top_keys``
by ``top_n``, ``latency_bins`` by the number of log-spaced latency bins (a few dozen).

The dashboard counts live alerts: ``read_alerts`` leaves out the SHADOW rules' alerts (recorded, never acted on)
unless asked for them alone (``shadow=True``), so the two are drawn apart and never summed.

Example::

    alerts = read_alerts(spark, settings, since_hours=24)
    data = dashboard_data(alerts, grain="auto", top_n=10)
    data.over_time     # bucket, ruleId, alerts, minAggregate, avgAggregate, maxAggregate, limit
    trial = dashboard_data(read_alerts(spark, settings, since_hours=24, shadow=True))   # shadow rules apart
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from delta_tables.alerts import ALERTS, live_alerts, shadow_alerts
from pipelines.base.settings import Settings

GRAINS = ("auto", "minute", "hour", "day")
BUCKET_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}
MAX_BUCKETS = 2000
"""More time buckets than this is not a chart any more (and no longer a small frame): pick a coarser grain."""
LATENCY_BINS_PER_DECADE = 4
PERCENTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99}


@dataclass(frozen=True)
class DashboardData:
    """Everything the charts draw. Frames are empty (with their columns) when there are no alerts."""

    total_alerts: int
    grain: str
    over_time: pd.DataFrame  # bucket, ruleId, alerts, minAggregate, avgAggregate, maxAggregate, limit
    top_keys: pd.DataFrame  # ruleId, keyValue, alerts (most alerts first)
    latency_bins: pd.DataFrame  # bin, lowerMs, upperMs, alerts
    latency_percentiles: dict[str, float]  # p50/p95/p99 in ms (empty when no alert has a latency)

    def per_rule(self) -> pd.DataFrame:
        """One row per rule, most alerted first: alerts, first and last bucket, the (largest) limit."""
        frame = self.over_time
        if frame.empty:
            return pd.DataFrame(columns=["ruleId", "alerts", "firstBucket", "lastBucket", "limit"])
        grouped = frame.groupby("ruleId", as_index=False).agg(
            alerts=("alerts", "sum"),
            firstBucket=("bucket", "min"),
            lastBucket=("bucket", "max"),
            limit=("limit", "max"),
        )
        return grouped.sort_values(["alerts", "ruleId"], ascending=[False, True], ignore_index=True)


def read_alerts(
    spark: SparkSession, settings: Settings, since_hours: float | None = None, *, shadow: bool = False
) -> DataFrame:
    """The live alerts (``shadow``: the SHADOW rules' alerts instead), optionally only alerts detected in the last
    ``since_hours`` (pruning partitions)."""
    table = spark.read.format("delta").load(settings.table_path(ALERTS.name))
    alerts = shadow_alerts(table) if shadow else live_alerts(table)
    if since_hours is None:
        return alerts
    since = F.timestamp_seconds(F.unix_seconds(F.current_timestamp()) - F.lit(math.ceil(since_hours * 3600)))
    return alerts.where((F.col("detectedDate") >= F.to_date(since)) & (F.col("detectedAt") >= since))


def choose_grain(first: dt.datetime | None, last: dt.datetime | None) -> str:
    """Minutes for up to 3 hours of alerts, hours for up to 7 days, days beyond."""
    span = (last - first).total_seconds() if first is not None and last is not None else 0.0
    if span <= 3 * 3600:
        return "minute"
    return "hour" if span <= 7 * 86400 else "day"


def bucket_count(first: dt.datetime | None, last: dt.datetime | None, grain: str) -> int:
    if first is None or last is None:
        return 0
    return int((last - first).total_seconds() // BUCKET_SECONDS[grain]) + 1


def alerts_over_time(alerts: DataFrame, grain: str) -> DataFrame:
    """Per event-time bucket (``date_trunc(grain)``) and rule: alert count and the aggregate's range vs the limit
    (none for a relative rule's alerts: their limit is a factor of each key's own baseline, not a line to draw)."""
    aggregate = F.col("aggregateValue").cast("double")
    fixed_limit = F.col("limit").cast("double")
    if "baselineValue" in alerts.columns:
        fixed_limit = F.when(F.col("baselineValue").isNull(), fixed_limit)
    return (
        alerts.groupBy(F.date_trunc(grain, "eventTime").alias("bucket"), "ruleId")
        .agg(
            F.count(F.lit(1)).alias("alerts"),
            F.min(aggregate).alias("minAggregate"),
            F.avg(aggregate).alias("avgAggregate"),
            F.max(aggregate).alias("maxAggregate"),
            F.max(fixed_limit).alias("limit"),
        )
        .orderBy("bucket", "ruleId")
    )


def top_keys(alerts: DataFrame, n: int) -> DataFrame:
    """The ``n`` (rule, key) pairs with most alerts; ties by rule id, then key."""
    return (
        alerts.groupBy("ruleId", "keyValue")
        .agg(F.count(F.lit(1)).alias("alerts"))
        .orderBy(F.desc("alerts"), "ruleId", "keyValue")
        .limit(n)
    )


def latency_histogram(alerts: DataFrame, bins_per_decade: int = LATENCY_BINS_PER_DECADE) -> DataFrame:
    """Alert counts per log-spaced ``latencyMs`` bin: bin ``b`` holds ``[10^(b/k), 10^((b+1)/k))`` ms.

    Latencies under 1 ms (clock skew between ingestion and detection) count in the first bin; null ones in none.
    """
    latency = F.greatest(F.col("latencyMs").cast("double"), F.lit(1.0))
    return (
        alerts.where(F.col("latencyMs").isNotNull())
        .groupBy(F.floor(F.log10(latency) * bins_per_decade).cast("int").alias("bin"))
        .agg(F.count(F.lit(1)).alias("alerts"))
        .orderBy("bin")
    )


def with_bin_edges(bins: pd.DataFrame, bins_per_decade: int = LATENCY_BINS_PER_DECADE) -> pd.DataFrame:
    """Add ``lowerMs``/``upperMs`` to a pandas frame of latency bins."""
    frame = bins.copy()
    frame["lowerMs"] = [10 ** (b / bins_per_decade) for b in frame["bin"]]
    frame["upperMs"] = [10 ** ((b + 1) / bins_per_decade) for b in frame["bin"]]
    return frame[["bin", "lowerMs", "upperMs", "alerts"]]


def dashboard_data(alerts: DataFrame, *, grain: str = "auto", top_n: int = 10) -> DashboardData:
    """Run the dashboard's aggregations (four small Spark jobs) and bring their results to the driver.

    ``grain`` is ``minute``, ``hour``, ``day`` or ``auto`` (``choose_grain`` on the alerts' event-time span).
    Raises ValueError for an unknown grain or one that would draw more than ``MAX_BUCKETS`` buckets.
    """
    if grain not in GRAINS:
        raise ValueError(f"grain {grain!r} is not one of {list(GRAINS)}")
    quantiles = list(PERCENTILES.values())
    stats = alerts.agg(
        F.count(F.lit(1)).alias("n"),
        F.min("eventTime").alias("first"),
        F.max("eventTime").alias("last"),
        F.percentile_approx("latencyMs", quantiles).alias("latency"),
    ).first()
    total = int(stats["n"]) if stats is not None else 0
    first, last = (stats["first"], stats["last"]) if stats is not None else (None, None)
    chosen = choose_grain(first, last) if grain == "auto" else grain
    buckets = bucket_count(first, last, chosen)
    if buckets > MAX_BUCKETS:
        raise ValueError(f"{buckets} {chosen} buckets is too many to draw (max {MAX_BUCKETS}): use a coarser grain")
    latency = stats["latency"] if stats is not None else None
    percentiles = dict(zip(PERCENTILES, (float(v) for v in latency), strict=True)) if latency else {}
    return DashboardData(
        total_alerts=total,
        grain=chosen,
        over_time=alerts_over_time(alerts, chosen).toPandas(),
        top_keys=top_keys(alerts, top_n).toPandas(),
        latency_bins=with_bin_edges(latency_histogram(alerts).toPandas()),
        latency_percentiles=percentiles,
    )
