"""``fraudlake init``: create every lakehouse table that is missing (running it twice changes nothing)."""

from __future__ import annotations

import argparse
from typing import Any

from delta_tables.catalog import init_lakehouse
from pipelines.commands.context import settings_from, spark_from


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("init", parents=[parent], help="create the lakehouse tables idempotently")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    created = init_lakehouse(spark_from(settings, "init"), settings)
    print(f"lakehouse {settings.lakehouse_root}: created {', '.join(created) if created else 'nothing (all present)'}")
    return 0
