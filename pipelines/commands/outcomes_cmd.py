"""``fraudlake outcomes mark|import-labels|accuracy``: what alerts turned out to be, and each rule's accuracy.

Examples::

    fraudlake outcomes mark 7:tx-123 --as false-positive --by ana --note "known payroll run"
    fraudlake outcomes import-labels chargebacks.csv --source chargebacks [--format csv|json|delta]
    fraudlake outcomes accuracy [--silent-days 14] [--min-precision 0.2]
"""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
from typing import Any

from pyspark.sql import functions as F

from delta_tables.rules import RULES
from pipelines.commands.context import settings_from, spark_from
from pipelines.outcomes.accuracy import alert_outcomes, outcome_tables, rule_accuracy, watch_list
from pipelines.outcomes.dispositions import DispositionError, record_disposition
from pipelines.outcomes.labels import LabelImportError, import_labels
from rules_cdc.rule_rows import live_rules


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("outcomes", help="mark alerts, import fraud labels, each rule's accuracy")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    mark = actions.add_parser("mark", parents=[parent], help="record what an alert turned out to be")
    mark.add_argument("alert_id")
    mark.add_argument("--as", dest="disposition", required=True, help="fraud | false-positive | unsure")
    mark.add_argument("--by", default=None, help="who decided (default: this OS user)")
    mark.add_argument("--note")
    labels = actions.add_parser("import-labels", parents=[parent], help="confirmed-fraud labels by transaction id")
    labels.add_argument("path", help="a CSV (header) or JSON-lines file, or a Delta table path")
    labels.add_argument("--format", choices=("csv", "json", "delta"), default="csv")
    labels.add_argument("--source", required=True, help="the labels' origin, e.g. chargebacks")
    labels.add_argument("--by", default=None, help="who imports (default: this OS user)")
    accuracy = actions.add_parser("accuracy", parents=[parent], help="per rule and week: precision, catch, rate")
    accuracy.add_argument("--silent-days", type=int, default=14, help="watch rules without an alert this long")
    accuracy.add_argument("--min-precision", type=float, default=0.2, help="watch rules less precise than this")
    accuracy.add_argument("--min-decided", type=int, default=5, help="decided alerts before precision counts")
    parser.set_defaults(handler=run)


DECISIONS = {"fraud": "CONFIRMED_FRAUD", "false-positive": "FALSE_POSITIVE", "unsure": "UNSURE"}


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    spark = spark_from(settings, "outcomes")
    who = getattr(args, "by", None) or getpass.getuser()
    try:
        if args.action == "mark":
            decision = DECISIONS.get(args.disposition, args.disposition)
            made = record_disposition(
                spark, settings, alert_id=args.alert_id, disposition=decision, decided_by=who, note=args.note
            )
            print(f"outcomes: alert {args.alert_id} marked {decision} by {who} ({made})")
        elif args.action == "import-labels":
            result = import_labels(
                spark, settings, args.path, fmt=args.format, label_source=args.source, imported_by=who
            )
            print(
                f"outcomes: {result.labels} labels from {args.path}: {result.inserted} new, "
                f"{result.already_known} already known, {result.quarantined} quarantined"
            )
        else:
            print(_accuracy_text(spark, settings, args))
    except (DispositionError, LabelImportError) as error:
        print(f"outcomes: {error}")
        return 2
    return 0


def _accuracy_text(spark: Any, settings: Any, args: argparse.Namespace) -> str:
    alerts, dispositions, labels, bronze = outcome_tables(spark, settings)
    weekly = rule_accuracy(alerts, dispositions, labels, bronze).collect()
    lines = ["rule  week        alerts decided precision caught/labelled alert-rate"]
    for r in weekly:
        precision = "-" if r["precision"] is None else f"{r['precision']:.2f}"
        lines.append(
            f"{r['ruleId']:>4}  {r['week']:%Y-%m-%d}  {r['alerts']:>6} {r['decided']:>7} {precision:>9} "
            f"{r['caught']:>6}/{r['labelledFraud']:<8} {r['alertRate']:.4f}"
        )
    live = live_rules(spark.read.format("delta").load(settings.table_path(RULES.name)))
    live_ids = [int(r["ruleId"]) for r in live.select(F.col("ruleId")).collect()]
    watch = watch_list(
        live_ids,
        alerts,
        alert_outcomes(alerts, dispositions, labels),
        now=dt.datetime.now(dt.UTC),
        silent_days=args.silent_days,
        min_precision=args.min_precision,
        min_decided=args.min_decided,
    )
    lines.append("watch list:" if watch else "watch list: empty")
    lines.extend(f"  rule {item.rule_id}: {item.reason}" for item in watch)
    return "\n".join(lines)
