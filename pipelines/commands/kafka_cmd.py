"""``fraudlake kafka start|stop|status``: the local KRaft broker from the Maven jars.

Starts and stops of one broker take turns (a lock beside its pid file); ``stop`` signals only the process its pid
file records, and removes a stale file with a warning saying why."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pipelines.base.file_lock import LockTimeout
from pipelines.commands.context import settings_from
from pipelines.local.kafka_broker import BrokerError, KafkaBroker


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("kafka", parents=[parent], help="start, stop or inspect the local Kafka broker")
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    broker = KafkaBroker.from_settings(settings_from(args))
    try:
        return _run(broker, args.action)
    except (BrokerError, LockTimeout) as error:  # LockTimeout: another start/stop of this broker held on too long
        print(f"kafka {args.action}: {error}", file=sys.stderr)
        return 1


def _run(broker: KafkaBroker, action: str) -> int:
    if action == "start":
        broker.start()
        print(f"kafka: {broker.status()}; data in {broker.data_dir}")
    elif action == "stop":
        print("kafka: stopped" if broker.stop() else "kafka: was not running")
    else:
        print(f"kafka: {broker.status()}")
    return 0
