"""``fraudlake connect start|stop|status``: Kafka Connect with the Debezium PostgreSQL connector, locally.

``start`` needs the broker (``fraudlake kafka start``) and the rules database (``fraudlake rulesdb start``). It
creates the rules topic if missing (partitions and retention from conf), then starts a standalone worker with the
connector of ``connect.connector_conf`` (conf/connect/rules-postgres.properties) and waits until its task runs.
The first start snapshots every existing rule; later starts resume from the offsets kept under the work dir.
Two starts at once make one worker (they take turns on a lock beside its pid file); ``stop`` signals only the process
the pid file records.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pipelines.base.file_lock import LockTimeout
from pipelines.base.kafka_clients import ensure_topics
from pipelines.base.settings import Settings
from pipelines.commands.context import settings_from
from pipelines.local.connect_worker import ConnectError, ConnectWorker
from pipelines.local.debezium_config import connector_config
from pipelines.local.kafka_broker import KafkaBroker
from pipelines.local.rules_database import RulesDb
from pipelines.local.rulesdb_secrets import SecretError


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "connect",
        parents=[parent],
        help="Kafka Connect + Debezium (rules database -> rules topic): start, stop, status",
    )
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    worker = ConnectWorker.from_settings(settings)
    if args.action == "status":
        print(f"connect: {worker.status()}")
        return 0
    try:
        if args.action == "stop":
            print("connect: stopped (offsets kept)" if worker.stop() else "connect: was not running")
            return 0
        return _start(settings, worker)
    # SecretError: the Debezium role's password, named not shown; LockTimeout: another start/stop held on too long
    except (ConnectError, SecretError, LockTimeout) as error:
        print(f"connect {args.action}: {error}", file=sys.stderr)
        return 1


def _start(settings: Settings, worker: ConnectWorker) -> int:
    db = RulesDb.from_settings(settings)
    if not db.running():
        print("connect start: the rules database is not running (fraudlake rulesdb start)", file=sys.stderr)
        return 1
    local = KafkaBroker.from_settings(settings)
    if settings.kafka.bootstrap_servers == local.bootstrap and not local.answers():
        print("connect start: the Kafka broker is not running (fraudlake kafka start)", file=sys.stderr)
        return 1
    ensure_topics(settings, [settings.kafka.topics.rules])
    connector = connector_config(settings, db_port=db.effective_port())
    worker.start([connector])
    print(f"connect: {worker.status()}")
    print(
        f"connect: {db.dsn()} table fraud_rules -> topic {settings.kafka.topics.rules} "
        f"(offsets {worker.offsets_file}, log {worker.log_file})"
    )
    return 0
