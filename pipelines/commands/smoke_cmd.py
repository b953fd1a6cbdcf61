"""``fraudlake smoke [--kafka]``: prove the runtime works — Delta MERGE round trip, optionally Kafka too."""

from __future__ import annotations

import argparse
import time
from typing import Any

from pipelines.commands.context import settings_from, spark_from
from pipelines.local.smoke import delta_smoke, kafka_smoke


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("smoke", parents=[parent], help="check Spark + Delta (and Kafka) work here")
    parser.add_argument("--kafka", action="store_true", help="also start the local broker and round-trip a topic")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    spark = spark_from(settings, "smoke")
    started = time.monotonic()
    print(f"smoke: delta ok — {delta_smoke(spark, settings)} ({time.monotonic() - started:.1f}s)")
    if args.kafka:
        print(f"smoke: kafka ok — {kafka_smoke(spark, settings)}")
    return 0
