"""What the engine has done, for people: rules, transactions, alerts per rule, latency; and the alerts export.

Everything here reads aggregates (counts, percentiles) or the alerts themselves, never transactions. Live alerts
(ACTIVE rules') are what the summary counts and the export writes; a SHADOW rule's alerts are reported apart
(``shadow_alerts_per_rule``; ``export_alerts(..., shadow=True)``), never added to the live figures.
``batch_log`` is the metrics table: one row per micro-batch with its counts, step timings and latency
percentiles (``metrics.latencyP50Ms`` ...; see ``pipelines.engine.latency``), which ``batch_latencies`` reads.

Example::

    print(format_summary(engine_summary(spark, settings)))
    print(format_batch_latencies(batch_latencies(spark, settings, last=20)))
    export_alerts(spark, settings, "alerts.jsonl")
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from delta_tables.alerts import is_shadow, live_alerts, shadow_alerts
from delta_tables.table_snapshot import table_version
from pipelines.base.settings import Settings
from pipelines.engine.alert_rows import alert_json
from pipelines.engine.latency import ALERT_PREFIX, EVALUATED_PREFIX, format_triple, latency_triple
from pipelines.engine.states import read_live_rules


@dataclass
class EngineSummary:
    rules: list[tuple[int, str, str]] = field(default_factory=list)  # (ruleId, state, name)
    rules_version: int = 0
    transactions: int = 0
    late: int = 0
    quarantined: int = 0
    batches: int = 0
    alerts_per_rule: dict[int, int] = field(default_factory=dict)  # live alerts
    shadow_alerts_per_rule: dict[int, int] = field(default_factory=dict)  # SHADOW rules' alerts, never acted on
    latency_ms: dict[str, float] = field(default_factory=dict)  # p50/p95/p99/max of live alerts, detected - ingested
    batch_seconds: dict[str, float] = field(default_factory=dict)  # p50/max micro-batch duration


def _percentiles(frame: Any, column: str, scale: float = 1.0) -> dict[str, float]:
    row = frame.agg(
        F.percentile(column, [0.5, 0.95, 0.99]).alias("p"), F.max(column).alias("max"), F.count(column).alias("n")
    ).first()
    if row is None or not row["n"]:
        return {}
    p50, p95, p99 = row["p"]
    return {"p50": p50 / scale, "p95": p95 / scale, "p99": p99 / scale, "max": row["max"] / scale}


def engine_summary(spark: SparkSession, settings: Settings) -> EngineSummary:
    """Counts and percentiles over the lakehouse tables (a few small aggregations)."""
    path = settings.table_path
    version = table_version(spark, path("rules"))
    rules = read_live_rules(spark, path("rules"), version=version, schema=settings.transaction_schema)
    bronze = spark.read.format("delta").load(path("bronze_transactions"))
    counts = bronze.agg(F.count(F.lit(1)).alias("n"), F.count(F.when(F.col("isLate"), 1)).alias("late")).first()
    alerts = spark.read.format("delta").load(path("alerts"))
    quarantine = spark.read.format("delta").load(path("quarantine")).where(F.col("source") == "transactions")
    batches = spark.read.format("delta").load(path("batch_log")).where(F.col("job").startswith("engine-"))
    counted = alerts.groupBy("ruleId", is_shadow(alerts).alias("shadow")).agg(F.count(F.lit(1)).alias("n")).collect()
    per_rule = {r["ruleId"]: r["n"] for r in counted if not r["shadow"]}
    per_shadow_rule = {r["ruleId"]: r["n"] for r in counted if r["shadow"]}
    return EngineSummary(
        rules=[(r.rule.rule_id, r.rule.rule_state.value, r.rule.rule_name or "") for r in rules],
        rules_version=version,
        transactions=counts["n"] if counts else 0,
        late=counts["late"] if counts else 0,
        quarantined=quarantine.count(),
        batches=batches.count(),
        alerts_per_rule=dict(sorted(per_rule.items())),
        shadow_alerts_per_rule=dict(sorted(per_shadow_rule.items())),
        latency_ms=_percentiles(live_alerts(alerts), "latencyMs"),
        batch_seconds=_percentiles(batches, "durationMs", scale=1000.0),
    )


def format_summary(summary: EngineSummary) -> str:
    """The summary as lines of text."""
    lines = [f"rules (version {summary.rules_version}):"]
    for rule_id, state, name in summary.rules:
        alerts = summary.alerts_per_rule.get(rule_id, 0)
        shadow = summary.shadow_alerts_per_rule.get(rule_id, 0)
        trial = f" (+{shadow} shadow)" if shadow else ""
        lines.append(f"  {rule_id:>4} {state:<7} {alerts:>6} alerts{trial}  {name}")
    listed = {r[0] for r in summary.rules}
    gone = sorted({*summary.alerts_per_rule, *summary.shadow_alerts_per_rule} - listed)
    for rule_id in gone:
        shadow = summary.shadow_alerts_per_rule.get(rule_id, 0)
        trial = f" (+{shadow} shadow)" if shadow else ""
        lines.append(f"  {rule_id:>4} (gone)  {summary.alerts_per_rule.get(rule_id, 0):>6} alerts{trial}")
    lines.append(
        f"transactions: {summary.transactions} in bronze ({summary.late} late), {summary.quarantined} quarantined,"
        f" {summary.batches} micro-batches"
    )
    lines.append(f"alerts: {sum(summary.alerts_per_rule.values())}")
    if summary.shadow_alerts_per_rule:
        shadow_total = sum(summary.shadow_alerts_per_rule.values())
        lines.append(f"shadow alerts (SHADOW rules, recorded, not acted on): {shadow_total}")
    if summary.latency_ms:
        lat = summary.latency_ms
        lines.append(
            f"latency ingestion -> alert: p50 {lat['p50'] / 1000:.1f} s, p95 {lat['p95'] / 1000:.1f} s,"
            f" p99 {lat['p99'] / 1000:.1f} s, max {lat['max'] / 1000:.1f} s"
        )
    if summary.batch_seconds:
        sec = summary.batch_seconds
        lines.append(f"micro-batch time: p50 {sec['p50']:.1f} s, p95 {sec['p95']:.1f} s, max {sec['max']:.1f} s")
    return "\n".join(lines)


@dataclass(frozen=True)
class BatchLatency:
    """One engine micro-batch of ``batch_log``: counts and ingestion-to-alert latency percentiles (ms)."""

    job: str
    batch_id: int
    finished_at: Any
    rules_version: int | None
    rows: int
    alerts: int  # live alerts
    duration_ms: float | None
    alert_latency: tuple[float, float, float] | None  # p50, p95, p99 over the batch's alerts
    evaluated_latency: tuple[float, float, float] | None  # p50, p95, p99 over its in-time valid transactions


def batch_latencies(spark: SparkSession, settings: Settings, *, last: int | None = 20) -> list[BatchLatency]:
    """The engine's batches from ``batch_log`` (the ``last`` most recent, oldest first; None: all)."""
    path = settings.table_path("batch_log")
    if not DeltaTable.isDeltaTable(spark, path):
        return []
    frame = spark.read.format("delta").load(path).where(F.col("job").startswith("engine-"))
    frame = frame.orderBy(F.col("finishedAt").desc(), F.col("batchId").desc())
    rows = (frame.limit(last) if last is not None else frame).collect()
    batches = []
    for row in reversed(rows):
        metrics, counts = row["metrics"] or {}, row["counts"] or {}
        batches.append(
            BatchLatency(
                job=row["job"],
                batch_id=row["batchId"],
                finished_at=row["finishedAt"],
                rules_version=row["rulesVersion"],
                rows=int(counts.get("rows", 0)),
                alerts=int(counts.get("alerts", 0)),
                duration_ms=row["durationMs"],
                alert_latency=latency_triple(metrics, ALERT_PREFIX),
                evaluated_latency=latency_triple(metrics, EVALUATED_PREFIX),
            )
        )
    return batches


def format_batch_latencies(batches: list[BatchLatency]) -> str:
    """A table of per-batch latency percentiles, one line per micro-batch."""
    if not batches:
        return "no engine micro-batches in batch_log yet"
    lines = [
        f"{'batch':>6}  {'finished (UTC)':<19}  {'rules':>5}  {'rows':>7}  {'alerts':>6}  {'time':>6}"
        f"  {'alert p50/p95/p99':>22}  {'evaluated p50/p95/p99':>22}"
    ]
    for b in batches:
        finished = b.finished_at.strftime("%Y-%m-%d %H:%M:%S") if b.finished_at else "-"
        took = "-" if b.duration_ms is None else f"{b.duration_ms / 1000:.1f} s"
        lines.append(
            f"{b.batch_id:>6}  {finished:<19}  {'v' + str(b.rules_version):>5}  {b.rows:>7}  {b.alerts:>6}  {took:>6}"
            f"  {format_triple(b.alert_latency):>22}  {format_triple(b.evaluated_latency):>22}"
        )
    jobs = sorted({b.job for b in batches})
    lines.append(f"(from batch_log; job{'s' if len(jobs) > 1 else ''} {', '.join(jobs)})")
    return "\n".join(lines)


def export_alerts(
    spark: SparkSession, settings: Settings, output: str | Path, *, rule_id: int | None = None, shadow: bool = False
) -> int:
    """Write the live alerts (``shadow``: the SHADOW rules' alerts instead) as JSON lines (alertId, ruleId,
    transactionId, key, aggregateValue, limit, eventTime, detectedAt, ...), oldest detection first; return how
    many. Streams rows to the driver, not all at once."""
    if not DeltaTable.isDeltaTable(spark, settings.table_path("alerts")):
        raise FileNotFoundError(f"no alerts table under {settings.lakehouse_root}: run `fraudlake init` / `run`")
    table = spark.read.format("delta").load(settings.table_path("alerts"))
    alerts = shadow_alerts(table) if shadow else live_alerts(table)
    if rule_id is not None:
        alerts = alerts.where(F.col("ruleId") == rule_id)
    ordered = alert_json(alerts.orderBy("detectedAt", "ruleId", "transactionId"))
    count = 0
    target = Path(output)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", encoding="utf-8") as out:
        for row in ordered.select("json").toLocalIterator():
            out.write(row["json"] + "\n")
            count += 1
    return count
