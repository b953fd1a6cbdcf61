"""``fraudlake dq``: validate the lakehouse tables against the expectation suites and write a markdown report.

Exits 0 when every expectation holds, 1 when any fails or a table is missing (unless ``--allow-missing``).
``--write-suites`` regenerates ``conf/expectations/*.json`` from code instead of validating.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from pipelines.base.settings import Settings
from pipelines.commands.context import settings_from, spark_from

SUITE_TABLES = ("bronze_transactions", "rules", "bucket_state", "alerts")
"""Tables with a suite; kept here so the parser needs no GX import (checked against suites.TABLES by a test)."""


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "dq", parents=[parent], help="run the Great Expectations suites on the lakehouse; exit 1 on any failure"
    )
    parser.add_argument("--report", type=Path, help="markdown report path (default: <lakehouse>/_reports/dq.md)")
    parser.add_argument("--tables", nargs="+", choices=SUITE_TABLES, metavar="TABLE", help="only these tables")
    parser.add_argument("--allow-missing", action="store_true", help="skip (not fail) tables that do not exist")
    parser.add_argument("--write-suites", action="store_true", help="write conf/expectations/*.json from code and exit")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.write_suites:
        from pipelines.data_quality.suites import write_suites

        for path in write_suites(settings):
            print(f"dq: wrote {path}")
        return 0
    spark = spark_from(settings, "dq")
    return validate_and_report(spark, settings, args.tables, allow_missing=args.allow_missing, report=args.report)


def validate_and_report(
    spark: SparkSession,
    settings: Settings,
    tables: Sequence[str] | None = None,
    *,
    allow_missing: bool = False,
    report: Path | None = None,
) -> int:
    """Validate the lakehouse, write the markdown report, print a line per table and per failure; 0 or 1.

    ``fraudlake dq`` calls it in a session of its own; ``fraudlake demo --dq`` in the demo's, already warm."""
    # GX is the optional `dq` extra and slow to import: only its callers pay for it. Its INFO logs are noise.
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    from pipelines.data_quality.report import default_report_path, write_report
    from pipelines.data_quality.run import run_quality

    result = run_quality(spark, settings, tables, allow_missing=allow_missing)
    written = write_report(result, report or default_report_path(settings))
    for table in result.tables:
        print(f"dq: {table.table}: {table.status}" + (f" — {table.message}" if table.message else ""))
        for failed in table.failed:
            print(f"dq:   FAIL {failed.expectation} on {failed.columns}: {failed.observed}")
    print(f"dq: {'PASSED' if result.success else 'FAILED'}; report {written}")
    return 0 if result.success else 1
