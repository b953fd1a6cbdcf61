"""``fraudlake alerts export|summary|latency|tail``: the engine's alerts as JSON lines, counts per rule, per-batch
latency percentiles (from the ``batch_log`` metrics table), or the alerts topic followed live.

Examples::

    fraudlake alerts export --output alerts.jsonl [--rule 7]
    fraudlake alerts summary
    fraudlake alerts latency --last 20
    fraudlake alerts tail [--from-beginning] [--max 10] [--timeout 30] [--rule 6]
"""

from __future__ import annotations

import argparse
from typing import Any

from pipelines.commands.context import settings_from, spark_from
from pipelines.dashboard.alerts_tail import TailOptions, tail_alerts
from pipelines.engine.run_summary import (
    batch_latencies,
    engine_summary,
    export_alerts,
    format_batch_latencies,
    format_summary,
)


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("alerts", help="export, summarise or follow the alerts; per-batch latency")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    export = actions.add_parser("export", parents=[parent], help="write the alerts as JSON lines")
    export.add_argument("--output", required=True, help="file to write (JSON lines)")
    export.add_argument("--rule", type=int, help="only this rule id")
    actions.add_parser("summary", parents=[parent], help="rules, transactions, alerts per rule, latency")
    latency = actions.add_parser(
        "latency", parents=[parent], help="ingestion-to-alert latency p50/p95/p99 per micro-batch (batch_log)"
    )
    latency.add_argument("--last", type=int, default=20, help="the N most recent micro-batches (0: all)")
    tail = actions.add_parser("tail", parents=[parent], help="follow the alerts topic (Kafka), one line per alert")
    tail.add_argument("--from-beginning", action="store_true", help="start at the oldest alert on the topic")
    tail.add_argument("--max", type=int, dest="max_alerts", help="stop after N alerts")
    tail.add_argument("--timeout", type=float, help="stop after S seconds without a new alert")
    tail.add_argument("--rule", type=int, help="only this rule id")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.action == "tail":  # Kafka only: no Spark session
        options = TailOptions(
            from_beginning=args.from_beginning,
            max_alerts=args.max_alerts,
            timeout_seconds=args.timeout,
            rule_id=args.rule,
        )
        print(f"alerts tail: {settings.kafka.topics.alerts} on {settings.kafka.bootstrap_servers}", flush=True)
        print(tail_alerts(settings, options).text(), flush=True)
        return 0
    spark = spark_from(settings, "alerts")
    if args.action == "export":
        count = export_alerts(spark, settings, args.output, rule_id=args.rule)
        print(f"alerts: {count} written to {args.output}")
    elif args.action == "latency":
        print(format_batch_latencies(batch_latencies(spark, settings, last=args.last or None)))
    else:
        print(format_summary(engine_summary(spark, settings)))
    return 0
