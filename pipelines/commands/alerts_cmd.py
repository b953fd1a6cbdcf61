"""``fraudlake alerts export|summary``: the engine's alerts as JSON lines, or counts and latency per rule.

Examples::

    fraudlake alerts export --output alerts.jsonl [--rule 7]
    fraudlake alerts summary
"""

from __future__ import annotations

import argparse
from typing import Any

from pipelines.commands.context import settings_from, spark_from
from pipelines.engine.summary import engine_summary, export_alerts, format_summary


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("alerts", help="export the alerts, or summarise them")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    export = actions.add_parser("export", parents=[parent], help="write the alerts as JSON lines")
    export.add_argument("--output", required=True, help="file to write (JSON lines)")
    export.add_argument("--rule", type=int, help="only this rule id")
    actions.add_parser("summary", parents=[parent], help="rules, transactions, alerts per rule, latency")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    spark = spark_from(settings, "alerts")
    if args.action == "export":
        count = export_alerts(spark, settings, args.output, rule_id=args.rule)
        print(f"alerts: {count} written to {args.output}")
    else:
        print(format_summary(engine_summary(spark, settings)))
    return 0
