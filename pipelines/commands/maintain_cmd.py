"""``fraudlake maintain``: OPTIMIZE then VACUUM every lakehouse table (the scheduled maintenance job).

VACUUM keeps ``maintenance.vacuum_retention_hours`` of history (conf; 168 by default). State retention, the
deletion of buckets older than every rule's window, is the engine's and runs inside the streaming job.
"""

from __future__ import annotations

import argparse
from typing import Any

from delta_tables.table_maintenance import maintain_lakehouse
from pipelines.commands.context import settings_from, spark_from


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("maintain", parents=[parent], help="OPTIMIZE and VACUUM every lakehouse table")
    parser.add_argument("--tables", nargs="+", metavar="TABLE", help="only these tables (default: all)")
    parser.add_argument("--no-vacuum", action="store_true", help="compact only; keep every old file")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    spark = spark_from(settings, "maintain")
    try:
        results = maintain_lakehouse(spark, settings, args.tables, vacuum=not args.no_vacuum)
    except ValueError as error:
        print(f"maintain: {error}")
        return 2
    hours = settings.maintenance.vacuum_retention_hours
    for r in results:
        if not r.present:
            print(f"maintain: {r.table}: not present at {r.path} (skipped)")
            continue
        vacuumed = f", vacuumed (retention {hours} h)" if r.vacuumed else ""
        print(f"maintain: {r.table}: optimized ({r.files_removed} files -> {r.files_added}){vacuumed}")
    return 0
