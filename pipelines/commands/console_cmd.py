"""``fraudlake console``: the analysts' web console (rules, live alerts with evidence, health, backtests).

::

    fraudlake console [--port 8050] [--host 127.0.0.1] [--writes auto|rulesdb|topic]
                      [--read-timeout 30] [--write-timeout 30]

Same conf, lakehouse and rules database as the other commands. Rule edits go to the rules database when it is
configured (``FRAUDLAKE_RULESDB_DSN``) or answers, else to the rules topic (``--writes`` forces either). In a
Databricks App the port comes from ``DATABRICKS_APP_PORT`` and the server listens on every interface. See
docs/console.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
from typing import Any

from pipelines.commands.context import settings_from


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "console", parents=[parent], help="the analysts' web console: rules, live alerts, evidence, health, backtests"
    )
    parser.add_argument("--host", help="interface to listen on (default 127.0.0.1; 0.0.0.0 in a Databricks App)")
    parser.add_argument("--port", type=int, help="port (default $DATABRICKS_APP_PORT, else 8050; 0: a free one)")
    parser.add_argument(
        "--writes",
        choices=["auto", "rulesdb", "topic"],
        default="auto",
        help="where rule edits go: the rules database, the rules topic, or auto (the database when configured)",
    )
    parser.add_argument(
        "--stale-after-minutes",
        type=float,
        default=5.0,
        help="no engine micro-batch for this long: the health page says the engine is stopped or idle",
    )
    parser.add_argument(
        "--read-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="longest a page waits for the lakehouse before it answers 504 (default 30)",
    )
    parser.add_argument(
        "--write-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="longest a save waits for the rules database or topic before it answers 504 (default 30)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pipelines.console.app import create_app
    from pipelines.console.context import ConsoleContext, SharedSpark
    from pipelines.console.rule_writes import choose_writer
    from pipelines.console.server import APP_PORT_ENV, ConsoleServer

    settings = settings_from(args)
    in_app = bool(os.environ.get(APP_PORT_ENV))
    port = args.port if args.port is not None else int(os.environ.get(APP_PORT_ENV) or 8050)
    host = args.host or ("0.0.0.0" if in_app else "127.0.0.1")  # an App's proxy reaches it there
    writer = choose_writer(settings, args.writes)
    spark = SharedSpark(settings)
    if min(args.read_timeout, args.write_timeout) <= 0:
        raise SystemExit("console: --read-timeout and --write-timeout must be positive")
    console = ConsoleContext.build(
        settings,
        writer=writer,
        spark=spark,
        stale_after=dt.timedelta(minutes=args.stale_after_minutes),
        read_timeout_s=args.read_timeout,
        write_timeout_s=args.write_timeout,
    )
    server = ConsoleServer(create_app(console), host=host, port=port)
    print(f"console: {server.url} (lakehouse {settings.lakehouse_root}; rule edits to {writer.target()})", flush=True)
    try:
        server.run()
    finally:
        console.shutdown()
        if spark.started:
            spark().stop()
    return 0
