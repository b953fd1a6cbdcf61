"""``fraudlake rulesdb start|stop|status|psql|seed``: the local PostgreSQL rules database (the analysts' side).

::

    fraudlake rulesdb start                 initdb once, start on rulesdb.port, apply conf/rulesdb/NNN_*.sql
    fraudlake rulesdb seed [FILE] [--if-empty]   insert or update the rules of FILE (default conf/sample_rules.json)
    fraudlake rulesdb psql [PSQL ARGS...]   psql on the rules database, e.g. -c "UPDATE fraud_rules SET ..."
    fraudlake rulesdb status | stop

``--conf``/``--lakehouse`` go before the action: everything after ``psql`` or ``seed`` is theirs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pipelines.base.settings import REPO_ROOT, TransactionSchema
from pipelines.commands.context import settings_from
from pipelines.local.rules_database import RulesDb, RulesDbError
from rules_cdc.rule_model import RuleValidationError, parse_rule

SAMPLE_RULES = REPO_ROOT / "conf" / "sample_rules.json"


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "rulesdb", parents=[parent], help="the local PostgreSQL rules database: start, stop, status, psql, seed"
    )
    parser.add_argument("action", choices=["start", "stop", "status", "psql", "seed"])
    parser.add_argument(
        "args",
        nargs=argparse.REMAINDER,
        help='psql: its arguments (e.g. -c "UPDATE fraud_rules SET limit_value = 15 WHERE rule_id = 3"); '
        "seed: a JSON file of rules (default conf/sample_rules.json), --if-empty to skip when fraud_rules has rows",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    db = RulesDb.from_settings(settings)
    try:
        return _run(db, args, settings.transaction_schema)
    except RulesDbError as error:
        print(f"rulesdb {args.action}: {error}", file=sys.stderr)
        return 1


def _run(db: RulesDb, args: argparse.Namespace, schema: TransactionSchema) -> int:
    if args.action == "start":
        db.start()
        print(f"rulesdb: {db.status()}; schema version {db.schema_version()}")
    elif args.action == "stop":
        print("rulesdb: stopped" if db.stop() else "rulesdb: was not running")
    elif args.action == "status":
        print(f"rulesdb: {db.status()}")
    elif args.action == "psql":
        if not db.running():
            print("rulesdb psql: the rules database is not running (fraudlake rulesdb start)", file=sys.stderr)
            return 1
        return db.interactive(args.args)
    else:
        files = [a for a in args.args if a != "--if-empty"]
        if "--if-empty" in args.args and db.sql("SELECT count(*) FROM fraud_rules").strip() != "0":
            print("rulesdb seed: fraud_rules has rules; nothing loaded (--if-empty)")
            return 0
        return _seed(db, Path(files[0]) if files else SAMPLE_RULES, schema)
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
