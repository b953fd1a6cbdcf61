"""The health page's data: per-batch metrics from ``batch_log``, quarantine reasons, the engine's liveness, the last
data-quality report.

``batch_log`` is the engine's metrics table (docs/engine.md, Latency): one row per committed micro-batch with its
counts (rows, late, quarantined, alerts, ...), duration and latency percentiles. Nothing marks an engine as
running between batches, so liveness is read from the newest batch's age: an engine with no micro-batch for
``stale_after`` is either stopped or getting no transactions, and the page says exactly that.

Example::

    series = batch_series(reader, last=200)
    status = engine_status(series, now=dt.datetime.now(dt.UTC), stale_after=dt.timedelta(minutes=5))
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from delta_tables.batch_log import BATCH_LOG
from delta_tables.quarantine import QUARANTINE
from pipelines.base.settings import Settings
from pipelines.console.lake_reader import LakeReader

LATENCY_KEYS = ("latencyP50Ms", "latencyP95Ms", "latencyP99Ms", "evaluatedP50Ms", "evaluatedP95Ms", "evaluatedP99Ms")
COUNT_KEYS = ("rows", "valid", "late", "quarantined", "alerts")


@dataclass(frozen=True)
class Batch:
    job: str
    batch_id: int
    finished_at: dt.datetime
    duration_ms: float | None
    rules_version: int | None
    counts: dict[str, int]
    metrics: dict[str, float]


@dataclass(frozen=True)
class EngineStatus:
    """``running`` (a batch within ``stale_after``), ``quiet`` (none since: stopped or idle), or ``never``."""

    state: str
    message: str
    last_batch: Batch | None


def batch_series(reader: LakeReader, *, last: int = 200) -> list[Batch]:
    """The engine's newest ``last`` micro-batches, oldest first."""
    if not reader.exists(BATCH_LOG.name):
        return []
    rows = reader.rows(
        BATCH_LOG.name,
        columns=["job", "batchId", "finishedAt", "durationMs", "rulesVersion", "counts", "metrics"],
        where=[("job", "startswith", "engine-")],
    )
    rows.sort(key=lambda r: (r["finishedAt"], r["batchId"]))
    return [
        Batch(
            job=r["job"],
            batch_id=int(r["batchId"]),
            finished_at=r["finishedAt"],
            duration_ms=r["durationMs"],
            rules_version=r["rulesVersion"],
            counts={k: int(v) for k, v in (r["counts"] or {}).items()},
            metrics={k: float(v) for k, v in (r["metrics"] or {}).items()},
        )
        for r in rows[-last:]
    ]


def engine_status(batches: list[Batch], *, now: dt.datetime, stale_after: dt.timedelta) -> EngineStatus:
    if not batches:
        return EngineStatus("never", "The engine has not committed a micro-batch in this lakehouse yet.", None)
    newest = batches[-1]
    age = now - newest.finished_at
    when = f"{newest.finished_at:%Y-%m-%d %H:%M:%S} UTC ({_ago(age)})"
    if age <= stale_after:
        return EngineStatus(
            "running", f"The engine's last micro-batch (batch {newest.batch_id}) finished {when}.", newest
        )
    return EngineStatus(
        "quiet",
        f"No micro-batch for {_ago(age).removesuffix(' ago')}: the engine is stopped, or no transactions are arriving. "
        f"Its last micro-batch (batch {newest.batch_id}) finished {when}. Start it with fraudlake run.",
        newest,
    )


def chart_data(batches: list[Batch]) -> dict[str, Any]:
    """Columns for the charts (uPlot takes one x array and one array per series; missing values are null)."""
    return {
        "x": [b.finished_at.timestamp() for b in batches],
        "batch": [b.batch_id for b in batches],
        "durationS": [None if b.duration_ms is None else round(b.duration_ms / 1000, 2) for b in batches],
        **{key: [b.metrics.get(key) for b in batches] for key in LATENCY_KEYS},
        **{key: [b.counts.get(key) for b in batches] for key in COUNT_KEYS},
    }


@dataclass(frozen=True)
class ReasonCount:
    source: str
    reason: str
    count: int
    last_seen: dt.datetime


def quarantine_reasons(reader: LakeReader, *, top: int = 25) -> tuple[int, list[ReasonCount]]:
    """How many records are quarantined, and the most frequent (source, reason) pairs with their newest time."""
    if not reader.exists(QUARANTINE.name):
        return 0, []
    rows = reader.rows(QUARANTINE.name, columns=["source", "reason", "quarantinedAt"])
    counts = Counter((r["source"], _reason_kind(r["reason"])) for r in rows)
    newest: dict[tuple[str, str], dt.datetime] = {}
    for r in rows:
        key = (r["source"], _reason_kind(r["reason"]))
        newest[key] = max(newest.get(key, r["quarantinedAt"]), r["quarantinedAt"])
    ranked = [ReasonCount(s, reason, n, newest[(s, reason)]) for (s, reason), n in counts.most_common(top)]
    return len(rows), ranked


def dq_report(settings: Settings) -> tuple[Path, str | None]:
    """Where ``fraudlake dq`` writes its report, and its markdown (None when there is none yet).

    The path is ``data_quality.report.default_report_path``'s, restated: that module imports great_expectations,
    which the console does not need."""
    root = settings.lakehouse_root
    path = (Path(settings.work_dir) if "://" in root else Path(root)) / "_reports" / "dq.md"
    return path, path.read_text(encoding="utf-8") if path.is_file() else None


def _reason_kind(reason: str) -> str:
    """A reason without its per-record tail, so that equal causes group: ``rule 7: x`` -> ``x``."""
    head, sep, rest = reason.partition(": ")
    if sep and head.startswith("rule ") and head[5:].isdigit():
        return rest
    return reason


def _ago(delta: dt.timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 7200:
        return f"{seconds // 60} min ago"
    if seconds < 172800:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86400} days ago"
