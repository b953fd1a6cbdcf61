"""``fraudlake init``: create every lakehouse table that is missing (running it twice changes nothing).

Safe to run while the jobs start (they create the same tables): a table another writer made first is checked and
accepted. A table at a path that is not the one this release expects is an error naming the differences."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from delta_tables.catalog import init_lakehouse
from delta_tables.table_spec import TableConflictError, TableMismatchError
from pipelines.base.file_lock import LockTimeout
from pipelines.commands.context import settings_from, spark_from


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("init", parents=[parent], help="create the lakehouse tables idempotently")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    try:
        created = init_lakehouse(spark_from(settings, "init"), settings)
    except (TableMismatchError, TableConflictError, LockTimeout) as error:
        print(f"init: {error}", file=sys.stderr)
        return 1
    print(f"lakehouse {settings.lakehouse_root}: created {', '.join(created) if created else 'nothing (all present)'}")
    return 0
