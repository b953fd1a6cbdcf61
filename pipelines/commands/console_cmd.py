"""``fraudlake console``: the analysts' web console (rules, live alerts with evidence, health, backtests).

::

    fraudlake console [--port 8050] [--host 127.0.0.1] [--writes auto|rulesdb|topic]
                      [--read-timeout 30] [--write-timeout 30]
    fraudlake console add-user NAME --role viewer|analyst|approver|admin [--replace]   # password: prompt or stdin
    fraudlake console remove-user NAME
    fraudlake console list-users

Same conf, lakehouse and rules database as the other commands. Rule edits go to the rules database when it is
configured (``FRAUDLAKE_RULESDB_DSN``) or answers, else to the rules topic (``--writes`` forces either). In a
Databricks App the port comes from ``DATABRICKS_APP_PORT`` and the server listens on every interface.

Every page needs sign-in (docs/console.md): locally, users of the users file (``console.users_file``), made here;
a password is read from the terminal (asked twice) or, when stdin is not a terminal, from its first line, never
from the command line. The console refuses to listen beyond loopback unless someone can sign in.
"""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import os
import sys
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
    users = parser.add_subparsers(dest="console_command", metavar="{add-user,remove-user,list-users}")
    add = users.add_parser("add-user", parents=[parent], help="add a person who may sign in (password asked for)")
    add.add_argument("name")
    add.add_argument("--role", required=True, choices=["viewer", "analyst", "approver", "admin"])
    add.add_argument("--replace", action="store_true", help="set a new role and password of an existing user")
    add.set_defaults(handler=add_user)
    remove = users.add_parser("remove-user", parents=[parent], help="remove a person (their sessions end at once)")
    remove.add_argument("name")
    remove.set_defaults(handler=remove_user)
    listing = users.add_parser("list-users", parents=[parent], help="the people who may sign in, with their roles")
    listing.set_defaults(handler=list_users)


def _users(args: argparse.Namespace) -> Any:
    from pipelines.console.users import UsersFile

    settings = settings_from(args)
    return UsersFile(settings.console.users_path(settings.work_dir))


def _password() -> str:
    """From the terminal (twice), else stdin's first line: never argv, never echoed."""
    if sys.stdin.isatty():
        first = getpass.getpass("password: ")
        if getpass.getpass("again: ") != first:
            raise SystemExit("console: the two passwords differ; nothing was changed")
        return first
    return sys.stdin.readline().rstrip("\r\n")


def add_user(args: argparse.Namespace) -> int:
    from pipelines.console.users import UserError

    users = _users(args)
    try:
        user = users.add(args.name, args.role, _password(), replace=args.replace)
    except UserError as error:
        print(f"console: {error}", file=sys.stderr)
        return 2
    print(f"console: {user.name} may sign in as {user.role} (users file {users.path})")
    return 0


def remove_user(args: argparse.Namespace) -> int:
    users = _users(args)
    if not users.remove(args.name):
        print(f"console: no user {args.name!r} in {users.path}", file=sys.stderr)
        return 2
    print(f"console: {args.name} removed (a running console ends their sessions at their next request)")
    return 0


def list_users(args: argparse.Namespace) -> int:
    users = _users(args)
    for user in users.users():
        print(f"{user.name}\t{user.role}")
    for who, role in sorted(users.proxy_roles().items()):
        print(f"{who}\t{role}\t(Databricks App proxy)")
    return 0


def run(args: argparse.Namespace) -> int:
    from pipelines.console.app import create_app
    from pipelines.console.auth import Auth, NotListening, check_listen
    from pipelines.console.context import ConsoleContext, SharedSpark
    from pipelines.console.rule_writes import choose_writer
    from pipelines.console.server import APP_PORT_ENV, ConsoleServer
    from pipelines.console.sessions import SecretProblem

    settings = settings_from(args)
    in_app = bool(os.environ.get(APP_PORT_ENV))
    port = args.port if args.port is not None else int(os.environ.get(APP_PORT_ENV) or 8050)
    host = args.host or ("0.0.0.0" if in_app else "127.0.0.1")  # an App's proxy reaches it there
    if min(args.read_timeout, args.write_timeout) <= 0:
        raise SystemExit("console: --read-timeout and --write-timeout must be positive")
    try:
        auth = Auth.from_settings(settings)
        check_listen(host, auth)  # before anything starts: no Spark, no writer, no socket
    except (NotListening, SecretProblem) as error:
        raise SystemExit(f"console: {error}") from None
    writer = choose_writer(settings, args.writes)
    spark = SharedSpark(settings)
    console = ConsoleContext.build(
        settings,
        writer=writer,
        spark=spark,
        stale_after=dt.timedelta(minutes=args.stale_after_minutes),
        read_timeout_s=args.read_timeout,
        write_timeout_s=args.write_timeout,
    )
    server = ConsoleServer(create_app(console, auth=auth), host=host, port=port)
    print(f"console: {server.url} (lakehouse {settings.lakehouse_root}; rule edits to {writer.target()})", flush=True)
    try:
        server.run()
    finally:
        console.shutdown()
        auth.shutdown()
        if spark.started:
            spark().stop()
    return 0
