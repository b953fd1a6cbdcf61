"""``fraudlake alerts tail``: follow the alerts topic with kafka-python and print one readable line per alert.

Each line shows when the alert was detected, the rule, the key, the aggregate against the rule's limit, the
transaction and the latency from ingestion (the transaction's Kafka record timestamp, ``ingestedAt`` in the alert)
to the alert's own record on the alerts topic (its Kafka timestamp), i.e. what a downstream consumer sees::

    10:42:07.118  rule 6  key [1000417]  MAX 81234.5 > 50000 (1 min)  tx 3f0c…  batch 4  latency 2.9 s

The alerts topic is at-least-once (a replayed micro-batch sends its alerts again, with the same ``alertId``), so
the tail skips an ``alertId`` it has already printed. The consumer has no group: it reads every partition from
the end (or ``from_beginning``) and commits nothing, so any number of tails can run side by side.

Example::

    summary = tail_alerts(settings, TailOptions(from_beginning=True, max_alerts=10, timeout_seconds=30))
    print(summary.text())
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pipelines.base.kafka_clients import ensure_topics, python_client_config
from pipelines.base.settings import Settings

OPERATORS = {
    "GREATER": ">",
    "GREATER_EQUAL": ">=",
    "LESS": "<",
    "LESS_EQUAL": "<=",
    "EQUAL": "=",
    "NOT_EQUAL": "!=",
}
REMEMBERED_IDS = 100_000
"""Alert ids remembered for de-duplication (the oldest are forgotten first)."""
POLL_MS = 200


@dataclass(frozen=True)
class TailOptions:
    """What to read: from the end (default) or the beginning; at most ``max_alerts``; stop after
    ``timeout_seconds`` without a new alert (None: until stopped); only ``rule_id`` (None: all)."""

    from_beginning: bool = False
    max_alerts: int | None = None
    timeout_seconds: float | None = None
    rule_id: int | None = None


@dataclass(frozen=True)
class TailedAlert:
    """One alert from the topic: its JSON (decimals as ``Decimal``) and its Kafka record timestamp (epoch ms)."""

    alert: dict[str, Any]
    record_ms: int | None

    @property
    def alert_id(self) -> str:
        return str(self.alert.get("alertId", ""))

    @property
    def latency_ms(self) -> float | None:
        """Ingestion -> this record on the alerts topic; the engine's ``latencyMs`` (to detection) as a fallback."""
        ingested = epoch_ms(self.alert.get("ingestedAt"))
        if ingested is not None and self.record_ms is not None and self.record_ms > 0:
            return float(self.record_ms - ingested)
        latency = self.alert.get("latencyMs")
        return None if latency is None else float(latency)


@dataclass
class TailSummary:
    """What a tail did: alerts printed, repeats skipped (at-least-once), records that were not alerts."""

    printed: int = 0
    duplicates: int = 0
    unreadable: int = 0
    latencies_ms: list[float] = field(default_factory=list)

    def text(self) -> str:
        line = f"alerts tail: {self.printed} alert(s)"
        if self.duplicates:
            line += f", {self.duplicates} repeat(s) skipped"
        if self.unreadable:
            line += f", {self.unreadable} unreadable record(s)"
        if self.latencies_ms:
            ordered = sorted(self.latencies_ms)
            pick = [ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in (0.5, 0.95, 0.99)]
            line += f"; latency p50/p95/p99 {'/'.join(f'{v:.0f}' for v in pick)} ms"
        return line


def epoch_ms(value: Any) -> int | None:
    """An ISO-8601 timestamp of the alert JSON (UTC when it has no offset) as epoch ms; None if absent."""
    if not value:
        return None
    parsed = dt.datetime.fromisoformat(str(value))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return round(parsed.timestamp() * 1000)


def plain(value: Any) -> str:
    """A number without exponent or trailing zeros (``81234.500000`` -> ``81234.5``)."""
    if isinstance(value, Decimal):
        return format(value.normalize(), "f")
    return "-" if value is None else str(value)


def format_alert(tailed: TailedAlert) -> str:
    """One line: detected time, rule, key, aggregate vs limit (window), transaction, batch, latency."""
    alert = tailed.alert
    detected = epoch_ms(alert.get("detectedAt"))
    when = dt.datetime.fromtimestamp(detected / 1000, dt.UTC).strftime("%H:%M:%S.%f")[:-3] if detected else "--:--:--"
    operator = OPERATORS.get(str(alert.get("limitOperatorType")), str(alert.get("limitOperatorType")))
    latency = tailed.latency_ms
    limit = plain(alert.get("limit"))
    if alert.get("baselineValue") is not None:  # a relative limit: a factor of the key's own baseline
        limit = f"{limit} x baseline {plain(alert.get('baselineValue'))}"
    return (
        f"{when}  rule {alert.get('ruleId')}  key {alert.get('key')}  "
        f"{alert.get('aggregatorFunctionType')} {plain(alert.get('aggregateValue'))} {operator} "
        f"{limit} ({alert.get('windowMinutes')} min)  tx {alert.get('transactionId')}  "
        f"batch {alert.get('batchId')}  latency {'-' if latency is None else f'{latency / 1000:.1f} s'}"
    )


def _consumer(settings: Settings, from_beginning: bool) -> Any:
    """A group-less consumer assigned every partition of the alerts topic, positioned at the start or the end."""
    from kafka import KafkaConsumer, TopicPartition

    topic = settings.kafka.topics.alerts
    ensure_topics(settings, [topic])
    consumer = KafkaConsumer(**python_client_config(settings), group_id=None, enable_auto_commit=False)
    partitions = consumer.partitions_for_topic(topic) or set()
    assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
    consumer.assign(assigned)
    if from_beginning:
        consumer.seek_to_beginning(*assigned)
    else:
        consumer.seek_to_end(*assigned)
    for partition in assigned:
        consumer.position(partition)  # resolve now: "from the end" means from this call, not from the first poll
    return consumer


def iter_alerts(
    settings: Settings, options: TailOptions, *, stop: threading.Event | None = None, summary: TailSummary | None = None
) -> Iterator[TailedAlert]:
    """Alerts as they arrive (repeats and other rules skipped), until ``max_alerts``, the idle timeout or ``stop``."""
    summary = summary if summary is not None else TailSummary()
    seen: OrderedDict[str, None] = OrderedDict()
    consumer = _consumer(settings, options.from_beginning)
    try:
        last_new = time.monotonic()
        while not (stop and stop.is_set()):
            if options.max_alerts is not None and summary.printed >= options.max_alerts:
                return
            batches = consumer.poll(timeout_ms=POLL_MS)
            if not batches:
                if options.timeout_seconds is not None and time.monotonic() - last_new >= options.timeout_seconds:
                    return
                continue
            last_new = time.monotonic()
            for record in (r for records in batches.values() for r in records):
                if options.max_alerts is not None and summary.printed >= options.max_alerts:
                    return  # the rest of this poll is not looked at (nor counted)
                try:
                    alert = json.loads(record.value, parse_float=Decimal)
                except (TypeError, ValueError):
                    alert = None
                if not isinstance(alert, dict) or "ruleId" not in alert:
                    summary.unreadable += 1
                    continue
                tailed = TailedAlert(alert, record.timestamp)
                if tailed.alert_id in seen:
                    summary.duplicates += 1
                    continue
                seen[tailed.alert_id] = None
                if len(seen) > REMEMBERED_IDS:
                    seen.popitem(last=False)
                if options.rule_id is not None and alert["ruleId"] != options.rule_id:
                    continue
                summary.printed += 1
                if tailed.latency_ms is not None:
                    summary.latencies_ms.append(tailed.latency_ms)
                yield tailed
    finally:
        consumer.close()


def tail_alerts(
    settings: Settings,
    options: TailOptions,
    *,
    out: Callable[[str], None] | None = None,
    stop: threading.Event | None = None,
) -> TailSummary:
    """Print (via ``out``) one line per alert of the alerts topic; return the summary (also when interrupted)."""
    write = out or (lambda line: print(line, flush=True))
    summary = TailSummary()
    try:
        for tailed in iter_alerts(settings, options, stop=stop, summary=summary):
            write(format_alert(tailed))
    except KeyboardInterrupt:
        pass
    return summary
