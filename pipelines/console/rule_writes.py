"""Where the console's rule edits go: the operational ``fraud_rules`` table in PostgreSQL, else the rules topic.

An analyst's edit is a change to the rules database, exactly like an ``UPDATE`` typed in psql: Debezium streams it,
the rules CDC job validates and MERGEs it into the Delta ``rules`` table. Where no rules database is configured,
the edit is published to the rules topic as ``fraudlake rules upsert|pause|resume|delete`` does (the CLI
publisher's events). Either way nothing reaches the lakehouse but through the rules CDC job.

Every statement is parameterized (``psycopg``): no SQL is ever built from what a person typed. Each write returns
the *position floor* of its change: every CDC event of that change sorts at or after it (the WAL insert position
read in the same transaction before the write; the CLI event's own position), which is how ``edit_progress``
recognises it in the change log.

Example::

    writer = RulesDbWriter.from_settings(settings)
    committed = writer.write("pause", rule_id=7, rule=None, view=table_view(reader))
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pipelines.base.runtime_env import SetupMissingError
from pipelines.base.settings import Settings
from pipelines.local.rules_database import RULES_TABLE, RulesDb
from rules_cdc.plan_changes import TableView
from rules_cdc.publisher import PublishRefused, edit_events, publish
from rules_cdc.rule_model import Rule, RuleState
from rules_cdc.rule_rows import DATABASE_COLUMNS, database_row, rule_from_row
from rules_cdc.source_position import pg_position

Action = Literal["create", "update", "pause", "resume", "delete"]
WriteMode = Literal["rulesdb", "topic"]
DSN_ENV = "FRAUDLAKE_RULESDB_DSN"
"""A libpq connection string for the rules database (e.g. a managed PostgreSQL on Databricks); overrides conf."""


class EditRefused(ValueError):
    """An edit that cannot be made (the rule exists already, is not there, is already paused, ...)."""


class WriteFailed(RuntimeError):
    """The rules database or the rules topic could not be reached; nothing was written."""


@dataclass(frozen=True)
class Committed:
    """A committed edit: where it went and the position floor of its CDC event(s)."""

    action: Action
    rule_id: int
    mode: WriteMode
    floor: str
    committed_at: dt.datetime
    detail: str


class RuleWriter(Protocol):
    mode: WriteMode

    def target(self) -> str: ...

    def write(self, action: Action, *, rule_id: int, rule: Rule | None, view: TableView) -> Committed: ...


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class RulesDbWriter:
    """Edits as parameterized statements on ``fraud_rules``, one transaction each."""

    mode: WriteMode = "rulesdb"

    def __init__(self, conninfo: str, label: str) -> None:
        self.conninfo = conninfo
        self.label = label

    @classmethod
    def from_settings(cls, settings: Settings) -> RulesDbWriter:
        dsn = os.environ.get(DSN_ENV)
        if dsn:
            return cls(dsn, f"PostgreSQL ({DSN_ENV})")
        db = RulesDb.from_settings(settings)
        info = f"host=127.0.0.1 port={db.effective_port()} dbname={db.database} user={db.user} connect_timeout=5"
        return cls(info, f"PostgreSQL {RULES_TABLE} at {db.dsn()}")

    def target(self) -> str:
        return self.label

    def reachable(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.conninfo, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True

    def write(self, action: Action, *, rule_id: int, rule: Rule | None, view: TableView) -> Committed:
        import psycopg

        try:
            with psycopg.connect(self.conninfo, connect_timeout=5) as conn, conn.cursor() as cur:
                cur.execute("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint")
                lsn_row = cur.fetchone()
                floor = pg_position(int(lsn_row[0]) if lsn_row else 0, 0).rsplit(":", 1)[0] + ":"
                detail = self._apply(cur, action, rule_id, rule, view)
        except psycopg.Error as error:
            raise WriteFailed(f"the rules database refused or could not be reached: {error}".strip()) from None
        return Committed(action, rule_id, self.mode, floor, _now(), detail)

    def _apply(self, cur: Any, action: Action, rule_id: int, rule: Rule | None, view: TableView) -> str:
        from psycopg import sql

        table = sql.Identifier(RULES_TABLE)
        if action in ("create", "update"):
            assert rule is not None
            columns = sql.SQL(", ").join(sql.Identifier(c) for c in DATABASE_COLUMNS)
            values = sql.SQL(", ").join(sql.SQL(_CASTS.get(c, "%s")) for c in DATABASE_COLUMNS)
            conflict: sql.Composable = sql.SQL("DO NOTHING")
            if action == "update":
                conflict = sql.SQL("DO UPDATE SET ") + sql.SQL(", ").join(
                    sql.SQL("{} = excluded.{}").format(sql.Identifier(c), sql.Identifier(c))
                    for c in DATABASE_COLUMNS
                    if c != "rule_id"
                )
            statement = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT (rule_id) ").format(table, columns, values)
            cur.execute(statement + conflict, _row_values(rule))
            if cur.rowcount == 0:
                raise EditRefused(f"rule {rule_id} already exists in the rules database: edit it instead")
            return f"{'inserted' if action == 'create' else 'upserted'} row rule_id = {rule_id} in {RULES_TABLE}"
        if action == "delete":
            cur.execute(sql.SQL("DELETE FROM {} WHERE rule_id = %s").format(table), (rule_id,))
            if cur.rowcount == 0:
                raise EditRefused(f"rule {rule_id} is not in the rules database: there is no row to delete")
            return f"deleted row rule_id = {rule_id} from {RULES_TABLE}"
        state = RuleState.PAUSED if action == "pause" else RuleState.ACTIVE
        cur.execute(sql.SQL("SELECT rule_state FROM {} WHERE rule_id = %s FOR UPDATE").format(table), (rule_id,))
        found = cur.fetchone()
        if found is None:
            current = view.live_rows.get(rule_id)
            if current is None:
                raise EditRefused(f"rule {rule_id} is neither in the rules database nor live in the lakehouse")
            # A rule that reached the lake another way (the CLI): the database takes it over, in the new state.
            moved = rule_from_row(dict(current)).model_copy(update={"rule_state": state})
            return self._apply(cur, "create", rule_id, moved, view)
        if str(found[0]).upper() == state.value:
            raise EditRefused(f"rule {rule_id} is already {state.value} in the rules database")
        cur.execute(sql.SQL("UPDATE {} SET rule_state = %s WHERE rule_id = %s").format(table), (state.value, rule_id))
        return f"set rule_state = {state.value} for rule_id = {rule_id} in {RULES_TABLE}"


_CASTS = {"grouping_key_names": "%s::text[]", "limit_value": "%s::numeric", "filter": "%s::jsonb"}


def _row_values(rule: Rule) -> list[Any]:
    import json

    row = database_row(rule)
    row["filter"] = json.dumps(row["filter"]) if row["filter"] is not None else None
    return [row[c] for c in DATABASE_COLUMNS]


class TopicWriter:
    """Edits as the CLI publisher's CDC events on the rules topic (``fraudlake rules upsert|pause|...``)."""

    mode: WriteMode = "topic"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def target(self) -> str:
        return f"Kafka topic {self.settings.kafka.topics.rules} at {self.settings.kafka.bootstrap_servers}"

    def write(self, action: Action, *, rule_id: int, rule: Rule | None, view: TableView) -> Committed:
        if action == "create" and rule_id in view.live_rows:
            raise EditRefused(f"rule {rule_id} already exists: edit it instead")
        try:
            if action in ("create", "update"):
                assert rule is not None
                events = edit_events(view, "upsert", rules=[rule])
            else:
                events = edit_events(view, action, rule_id=rule_id)
        except PublishRefused as error:
            raise EditRefused(str(error)) from None
        try:
            sent = publish(self.settings, events)
        except Exception as error:  # kafka-python's errors: no broker, no topic, a timeout
            raise WriteFailed(f"could not publish to {self.target()}: {type(error).__name__}: {error}") from None
        floor = min(str(e["source"]["position"]) for e in events)
        return Committed(action, rule_id, self.mode, floor, _now(), f"published {sent} event(s) to {self.target()}")


def choose_writer(settings: Settings, mode: str = "auto") -> RuleWriter:
    """``rulesdb``, ``topic``, or ``auto``: the rules database when one is configured (``FRAUDLAKE_RULESDB_DSN``)
    or the local one answers, else the rules topic."""
    if mode == "topic":
        return TopicWriter(settings)
    database = RulesDbWriter.from_settings(settings)
    if mode == "rulesdb" or os.environ.get(DSN_ENV):
        return database
    try:
        running = RulesDb.from_settings(settings).running()
    except (SetupMissingError, OSError):
        running = False
    return database if running else TopicWriter(settings)
