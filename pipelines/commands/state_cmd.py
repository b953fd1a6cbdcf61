"""``fraudlake state clear``: CLEAR_STATE_ALL — delete every bucket of the engine's state table.

Rules are untouched; aggregates start again from the next transactions. The delete is a Delta commit, so
the state before it stays readable by time travel until VACUUM.
"""

from __future__ import annotations

import argparse
from typing import Any

from delta.tables import DeltaTable

from delta_tables.bucket_state import BUCKET_STATE
from pipelines.commands.context import settings_from, spark_from
from pipelines.local.smoke import last_operation_metrics


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("state", parents=[parent], help="engine state: clear (CLEAR_STATE_ALL)")
    parser.add_argument("action", choices=["clear"])
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    spark = spark_from(settings, "state")
    path = settings.table_path(BUCKET_STATE.name)
    if not DeltaTable.isDeltaTable(spark, path):
        print(f"state clear: no state table at {path} (nothing to clear)")
        return 0
    table = DeltaTable.forPath(spark, path)
    table.delete()
    deleted = last_operation_metrics(table).get("numDeletedRows", 0)
    print(f"state clear: deleted {deleted} buckets from {path}")
    return 0
