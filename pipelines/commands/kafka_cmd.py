"""``fraudlake kafka start|stop|status``: the local KRaft broker from the Maven jars."""

from __future__ import annotations

import argparse
from typing import Any

from pipelines.commands.context import settings_from
from pipelines.local.kafka_broker import KafkaBroker


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("kafka", parents=[parent], help="start, stop or inspect the local Kafka broker")
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    broker = KafkaBroker.from_settings(settings_from(args))
    if args.action == "start":
        broker.start()
        print(f"kafka: {broker.status()}; data in {broker.data_dir}")
    elif args.action == "stop":
        print("kafka: stopped" if broker.stop() else "kafka: was not running")
    else:
        print(f"kafka: {broker.status()}")
    return 0
