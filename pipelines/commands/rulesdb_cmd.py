"""``fraudlake rulesdb ...``: the local PostgreSQL rules database (the analysts' side) and its administration.

::

    fraudlake rulesdb init | start          initdb once (SCRAM), start on rulesdb.port, secure, migrate; the same
    fraudlake rulesdb migrate               on the running cluster: secure, apply conf/rulesdb/NNN_*.sql, set passwords
    fraudlake rulesdb seed [FILE] [--if-empty]   insert or update the rules of FILE (default conf/sample_rules.json)
    fraudlake rulesdb [--as ROLE] psql [PSQL ARGS...]   psql as fraudlake_console (default), _operator (direct
                                            edits of fraud_rules), _reader, _debezium, or the admin
    fraudlake rulesdb drop-slot [--name SLOT] [--wait S]   drop the connector's replication slot (default: conf's)
    fraudlake rulesdb status | stop

``--conf``/``--lakehouse``/``--as`` go before the action: everything after ``psql`` or ``seed`` is theirs.
``init``, ``migrate``, ``seed`` and ``drop-slot`` are administration: they log in as the bootstrap superuser.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, cast

from pipelines.base.rulesdb_settings import RoleKey
from pipelines.base.settings import REPO_ROOT, TransactionSchema
from pipelines.commands.context import settings_from
from pipelines.local.debezium_config import ConnectorConfigError, slot_name
from pipelines.local.rules_database import RulesDb, RulesDbError
from pipelines.local.rulesdb_secrets import ROLE_KEYS, SecretError
from rules_cdc.rule_model import RuleValidationError, parse_rule

SAMPLE_RULES = REPO_ROOT / "conf" / "sample_rules.json"
ACTIONS = ["init", "start", "migrate", "stop", "status", "psql", "seed", "drop-slot"]


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "rulesdb",
        parents=[parent],
        help="the local PostgreSQL rules database: init/start, migrate, stop, status, psql, seed, drop-slot",
    )
    parser.add_argument(
        "--as",
        dest="as_role",
        choices=ROLE_KEYS,
        default="console",
        help="psql: the role to log in as (default console: read rules, propose and approve through "
        "approve_rule_proposal(), no direct writes; operator: edit fraud_rules directly; admin: the superuser)",
    )
    parser.add_argument("action", choices=ACTIONS)
    parser.add_argument(
        "args",
        nargs=argparse.REMAINDER,
        help='psql: its arguments (e.g. -c "UPDATE fraud_rules SET limit_value = 15 WHERE rule_id = 3"); '
        "seed: a JSON file of rules (default conf/sample_rules.json), --if-empty to skip when fraud_rules has rows; "
        "drop-slot: --name SLOT (default: the connector's slot.name), --wait SECONDS (default 10)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    db = RulesDb.from_settings(settings)
    try:
        if args.action == "drop-slot":
            return _drop_slot(db, args.args, default=slot_name(settings))
        return _run(db, args, settings.transaction_schema)
    except (RulesDbError, SecretError, ConnectorConfigError) as error:
        print(f"rulesdb {args.action}: {error}", file=sys.stderr)
        return 1


def _run(db: RulesDb, args: argparse.Namespace, schema: TransactionSchema) -> int:
    if args.action in ("init", "start"):
        db.start()
        print(f"rulesdb: {db.status()}; schema version {db.schema_version()}")
        print(f"rulesdb: passwords of the roles from FRAUDLAKE_RULESDB_<ROLE>_PASSWORD or {db.secrets.folder}")
    elif args.action == "stop":
        print("rulesdb: stopped" if db.stop() else "rulesdb: was not running")
    elif args.action == "status":
        print(f"rulesdb: {db.status()}")
    elif not db.running():
        print(f"rulesdb {args.action}: the rules database is not running (fraudlake rulesdb start)", file=sys.stderr)
        return 1
    elif args.action == "migrate":
        applied = db.migrate()
        print(f"rulesdb migrate: applied {', '.join(applied) or 'nothing new'}; schema version {db.schema_version()}")
    elif args.action == "psql":
        return db.interactive(args.args, role=cast(RoleKey, args.as_role))
    else:
        files = [a for a in args.args if a != "--if-empty"]
        if "--if-empty" in args.args and db.sql("SELECT count(*) FROM fraud_rules").strip() != "0":
            print("rulesdb seed: fraud_rules has rules; nothing loaded (--if-empty)")
            return 0
        return _seed(db, Path(files[0]) if files else SAMPLE_RULES, schema)
    return 0


def _drop_slot(db: RulesDb, argv: list[str], *, default: str) -> int:
    """Drop a replication slot whose connector is gone for good, or whose slot the server invalidated."""
    parser = argparse.ArgumentParser(prog="fraudlake rulesdb drop-slot", exit_on_error=False)
    parser.add_argument("--name", default=default)
    parser.add_argument("--wait", type=float, default=10.0, help="seconds to wait for the slot's consumer to let go")
    try:
        options, unknown = parser.parse_known_args(argv)
    except argparse.ArgumentError as error:
        unknown = [str(error)]
    if unknown:
        print(
            f"rulesdb drop-slot: unexpected {' '.join(unknown)}; usage: drop-slot [--name SLOT] [--wait S]",
            file=sys.stderr,
        )
        return 2
    if not db.running():
        print("rulesdb drop-slot: the rules database is not running (fraudlake rulesdb start)", file=sys.stderr)
        return 1
    if db.drop_slot(options.name, wait_s=options.wait):
        print(
            f"rulesdb drop-slot: dropped {options.name}. A connector started again with its old offsets would miss "
            "what changed meanwhile: delete its offsets (fraudlake connect stop; rm the offsets file) for a fresh "
            "snapshot, after `fraudlake rules delete-all` (docs/rules-cdc.md)"
        )
    else:
        print(f"rulesdb drop-slot: no replication slot {options.name}; slots: {sorted(db.replication_slots()) or '-'}")
    return 0


def _seed(db: RulesDb, path: Path, schema: TransactionSchema) -> int:
    try:
        raw = json.loads(path.read_text())
        rules = [parse_rule(item, schema) for item in (raw if isinstance(raw, list) else [raw])]
    except (OSError, ValueError, RuleValidationError) as error:
        print(f"rulesdb seed: {path}: {error}", file=sys.stderr)
        return 2
    count = db.upsert_rules(rules)
    print(f"rulesdb seed: {count} rule(s) from {path} inserted or updated in fraud_rules")
    return 0
