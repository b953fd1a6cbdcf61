"""Rule edits written to the rules database: parameterised statements on ``fraud_rules``, one transaction each.

Where a rules database feeds the rules table, ``fraudlake rules upsert|pause|resume|delete`` (and notebook 01 with
``publish_to=rulesdb``) change ``fraud_rules`` exactly as an analyst's ``UPDATE`` in psql would: Debezium streams
the change with its real WAL position, and the rules CDC job applies it. Every change of a rule is then ordered by
one log, the database's. (A CLI event with a position of its own could not be: it would have to guess where it
sits among transactions still open in the database.) These are the operators' direct edits: they log in as
``fraudlake_operator`` (conf/rulesdb/007_operator_role.sql); the console role may only propose.

Statements are built with ``psycopg.sql`` from constant identifiers; every value is a parameter: no SQL is ever
built from a rule's text. The connection string comes from the caller (the CLI: ``FRAUDLAKE_RULESDB_DSN`` or the
local rules database of conf); a password reaches libpq from the environment (``PGPASSWORD``/``PGPASSFILE``) or
the DSN variable, never from a command line.

Example::

    edit = write_edit(conninfo, "pause", rule_id=7)
    edit.detail            # "set rule_state = PAUSED for rule_id = 7 in fraud_rules"
    edit.wal_lsn           # the WAL insert position before the write: the change's CDC event sorts after it
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rules_cdc.publisher import PublishRefused
from rules_cdc.rule_model import Rule, RuleState
from rules_cdc.rule_rows import DATABASE_COLUMNS, database_row

RULES_TABLE = "fraud_rules"  # conf/rulesdb/001_fraud_rules.sql (pipelines.local.rules_database.RULES_TABLE)
RULESDB_DSN_ENV = "FRAUDLAKE_RULESDB_DSN"
"""A libpq connection string for the rules database (a managed PostgreSQL, say); the console reads it too."""
_CASTS = {
    "grouping_key_names": "%s::text[]",
    "limit_value": "%s::numeric",
    "filter": "%s::jsonb",
    "baseline": "%s::jsonb",
}
_JSONB = ("filter", "baseline")


class RulesDbRefused(PublishRefused):
    """An edit the rules database cannot take as asked (the rule is not there, is already paused, ...)."""


class RulesDbUnavailable(RuntimeError):
    """The rules database could not be reached, or refused the statement; nothing was written."""


@dataclass(frozen=True)
class DatabaseEdit:
    """A committed edit: what it changed in ``fraud_rules``, and the WAL insert position read just before."""

    action: str
    rule_ids: tuple[int, ...]
    detail: str
    wal_lsn: int


def dsn_from_environment() -> str | None:
    """``FRAUDLAKE_RULESDB_DSN`` when set (blank: unset)."""
    return os.environ.get(RULESDB_DSN_ENV, "").strip() or None


def write_edit(conninfo: str, action: str, *, rules: Sequence[Rule] = (), rule_id: int | None = None) -> DatabaseEdit:
    """``upsert`` ``rules`` (insert or update every column), or ``pause``/``resume``/``delete`` ``rule_id``, in one
    transaction. Raises ``RulesDbRefused`` (nothing written) when the rule is absent or already in that state."""
    import psycopg

    if action == "upsert" and not rules:
        raise ValueError("upsert needs at least one rule")
    if action != "upsert" and rule_id is None:
        raise ValueError(f"{action} needs a rule id")
    try:
        with psycopg.connect(conninfo, connect_timeout=5) as conn, conn.cursor() as cur:
            cur.execute("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint")
            found = cur.fetchone()
            wal_lsn = int(found[0]) if found else 0
            if action == "upsert":
                detail = _upsert(cur, rules)
                ids = tuple(rule.rule_id for rule in rules)
            else:
                assert rule_id is not None
                detail, ids = _change(cur, action, rule_id), (rule_id,)
    except psycopg.Error as error:
        message = " ".join(str(error).split())
        raise RulesDbUnavailable(f"the rules database refused or could not be reached: {message}") from None
    return DatabaseEdit(action, ids, detail, wal_lsn)


def _upsert(cur: Any, rules: Sequence[Rule]) -> str:
    from psycopg import sql

    columns = sql.SQL(", ").join(sql.Identifier(c) for c in DATABASE_COLUMNS)
    values = sql.SQL(", ").join(sql.SQL(database_placeholder(c)) for c in DATABASE_COLUMNS)
    updates = sql.SQL(", ").join(
        sql.SQL("{0} = excluded.{0}").format(sql.Identifier(c)) for c in DATABASE_COLUMNS if c != "rule_id"
    )
    statement = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT (rule_id) DO UPDATE SET {}").format(
        sql.Identifier(RULES_TABLE), columns, values, updates
    )
    cur.executemany(statement, [database_values(rule) for rule in rules])
    return f"upserted rule_id {', '.join(str(r.rule_id) for r in rules)} in {RULES_TABLE}"


def _change(cur: Any, action: str, rule_id: int) -> str:
    from psycopg import sql

    table = sql.Identifier(RULES_TABLE)
    if action == "delete":
        cur.execute(sql.SQL("DELETE FROM {} WHERE rule_id = %s").format(table), (rule_id,))
        if cur.rowcount == 0:
            raise RulesDbRefused(f"rule {rule_id} is not in the rules database ({RULES_TABLE}): nothing to delete")
        return f"deleted rule_id = {rule_id} from {RULES_TABLE}"
    states = {"pause": RuleState.PAUSED, "resume": RuleState.ACTIVE}
    if action not in states:
        raise ValueError(f"action {action!r} is not one of ['upsert', 'pause', 'resume', 'delete']")
    state = states[action]
    cur.execute(sql.SQL("SELECT rule_state FROM {} WHERE rule_id = %s FOR UPDATE").format(table), (rule_id,))
    found = cur.fetchone()
    if found is None:
        raise RulesDbRefused(f"rule {rule_id} is not in the rules database ({RULES_TABLE}): upsert it first")
    if str(found[0]).upper() == state.value:
        raise RulesDbRefused(f"rule {rule_id} is already {state.value} in the rules database")
    cur.execute(sql.SQL("UPDATE {} SET rule_state = %s WHERE rule_id = %s").format(table), (state.value, rule_id))
    return f"set rule_state = {state.value} for rule_id = {rule_id} in {RULES_TABLE}"


def database_placeholder(column: str) -> str:
    """The statement's placeholder for a ``fraud_rules`` column, with the cast its parameter needs."""
    return _CASTS.get(column, "%s")


def database_values(rule: Rule) -> list[Any]:
    """The parameters of a ``fraud_rules`` row (``DATABASE_COLUMNS`` order) for ``database_placeholder``'s SQL."""
    row = database_row(rule)
    for column in _JSONB:  # JSON text, cast to jsonb by the statement: a parameter, never SQL text
        row[column] = json.dumps(row[column]) if row[column] is not None else None
    return [row[column] for column in DATABASE_COLUMNS]
