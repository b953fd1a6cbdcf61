"""``fraudlake demo``: the main job end to end on embedded defaults.

Until the engine lands this creates the lakehouse and proves Delta and Kafka work here.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from delta_tables.catalog import init_lakehouse
from pipelines.commands.context import settings_from, spark_from
from pipelines.smoke import delta_smoke, kafka_smoke


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("demo", parents=[parent], help="run the main job end to end on embedded defaults")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    settings = settings_from(args)
    spark = spark_from(settings, "demo")
    created = init_lakehouse(spark, settings)
    print(f"demo: lakehouse {settings.lakehouse_root} ({len(created)} tables created)")
    print(f"demo: delta — {delta_smoke(spark, settings)}")
    print(f"demo: kafka — {kafka_smoke(spark, settings)}")
    print(f"demo: done in {time.monotonic() - started:.0f}s")
    return 0
