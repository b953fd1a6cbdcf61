"""Where the console's rule edits go: the operational ``fraud_rules`` table in PostgreSQL, else the rules topic.

An analyst's edit is a change to the rules database, exactly like an ``UPDATE`` typed in psql: Debezium streams it,
the rules CDC job validates and MERGEs it into the Delta ``rules`` table. Where no rules database is configured,
the edit is published to the rules topic as ``fraudlake rules upsert|pause|resume|delete`` does (the CLI
publisher's events). Either way nothing reaches the lakehouse but through the rules CDC job.

The console logs in as ``fraudlake_console`` (SELECT on ``fraud_rules``, proposals, and approval only through
``approve_rule_proposal()``: conf/rulesdb/007_operator_role.sql; a direct ``write`` needs ``role="operator"``),
its password from ``FRAUDLAKE_RULESDB_CONSOLE_PASSWORD`` or its secret file, passed to libpq apart from the
connection string (which may be shown). Every session sets ``lock_timeout`` and
``statement_timeout`` (``rulesdb.*`` settings), and the connection ``connect_timeout``: an edit of a row another
session holds locked fails with a clear :class:`WriteFailed` instead of hanging the request.

Every statement is parameterized (``psycopg``): no SQL is ever built from what a person typed. Each write returns
the *position floor* of its change: every CDC event of that change sorts at or after it (the WAL insert position
read in the same transaction before the write; the CLI event's own position), which is how ``edit_progress``
recognises it in the change log.

Example::

    writer = RulesDbWriter.from_settings(settings)       # or RulesDbWriter.for_database(db, limits)
    committed = writer.write("pause", rule_id=7, rule=None, view=table_view(reader))
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pipelines.base.rulesdb_settings import RoleKey
from pipelines.base.runtime_env import SetupMissingError
from pipelines.base.settings import Settings
from pipelines.local.rules_database import RULES_TABLE, RulesDb
from pipelines.local.rulesdb_secrets import SecretError
from rules_cdc.plan_changes import TableView
from rules_cdc.publisher import PublishRefused, edit_events, publish
from rules_cdc.rule_model import Rule, RuleState
from rules_cdc.rule_rows import DATABASE_COLUMNS, rule_from_row
from rules_cdc.rulesdb_edits import database_placeholder, database_values
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


def floor_of_lsn(lsn: int) -> str:
    """The position floor of a change written after WAL insert position ``lsn``: its events' ``pg:`` positions sort
    at or after it, whatever their commit LSN.

    >>> floor_of_lsn(42)
    'pg:00000000000000000042:'
    """
    return pg_position(lsn, 0).rsplit(":", 1)[0] + ":"


def approved_edit(kind: Action, rule_id: int, lsn: int, detail: str) -> Committed:
    """An approved proposal as the edit the console follows (``edit_progress``): applied by the rules database's
    ``approve_rule_proposal`` after WAL position ``lsn``."""
    return Committed(kind, rule_id, "rulesdb", floor_of_lsn(lsn), _now(), detail)


class RuleWriter(Protocol):
    mode: WriteMode

    def target(self) -> str: ...

    def write(self, action: Action, *, rule_id: int, rule: Rule | None, view: TableView) -> Committed: ...


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True)
class SessionLimits:
    """How long a console connection may wait: to connect, for a row lock, for one statement."""

    connect_timeout_s: int = 5
    lock_timeout_ms: int = 5000
    statement_timeout_ms: int = 10_000

    @classmethod
    def from_settings(cls, settings: Settings) -> SessionLimits:
        conf = settings.rulesdb
        return cls(conf.connect_timeout_s, conf.lock_timeout_ms, conf.statement_timeout_ms)

    def options(self) -> str:
        """libpq ``options``: the timeouts are set at connection start, before any statement of ours."""
        return f"-c lock_timeout={self.lock_timeout_ms} -c statement_timeout={self.statement_timeout_ms}"


class RulesDbWriter:
    """Edits as parameterized statements on ``fraud_rules``, one transaction each, as ``fraudlake_console``."""

    mode: WriteMode = "rulesdb"

    def __init__(
        self,
        conninfo: str,
        label: str,
        *,
        password: str | None = None,
        limits: SessionLimits = SessionLimits(),
        unavailable: str | None = None,
    ) -> None:
        self.conninfo = conninfo  # no password in it: it may be shown
        self.label = label
        self._password = password
        self.limits = limits
        self.unavailable = unavailable  # why no connection can be made (a missing secret), said by every write

    @classmethod
    def for_database(
        cls, db: RulesDb, limits: SessionLimits = SessionLimits(), role: RoleKey = "console"
    ) -> RulesDbWriter:
        """A writer on the local rules database ``db``, as ``fraudlake_console`` with its password (proposals and
        approval only: 007_operator_role.sql); ``role="operator"`` for direct writes of ``fraud_rules``."""
        info = f"host=127.0.0.1 port={db.effective_port()} dbname={db.database} user={db.role_name(role)}"
        label = f"PostgreSQL {RULES_TABLE} at {db.dsn(role)}"
        try:
            password = db.secrets.password(role)
        except SecretError as error:
            return cls(info, label, limits=limits, unavailable=str(error))
        return cls(info, label, password=password, limits=limits)

    @classmethod
    def from_settings(cls, settings: Settings) -> RulesDbWriter:
        limits = SessionLimits.from_settings(settings)
        dsn = os.environ.get(DSN_ENV)
        if dsn:
            return cls(dsn, f"PostgreSQL ({DSN_ENV})", limits=limits)
        return cls.for_database(RulesDb.from_settings(settings), limits)

    def target(self) -> str:
        return self.label

    def _connect(self, connect_timeout_s: int | None = None) -> Any:
        import psycopg

        if self.unavailable:
            raise WriteFailed(f"cannot connect to the rules database: {self.unavailable}")
        extra: dict[str, Any] = {} if self._password is None else {"password": self._password}
        return psycopg.connect(
            self.conninfo,
            connect_timeout=connect_timeout_s or self.limits.connect_timeout_s,
            options=self.limits.options(),
            **extra,
        )

    def reachable(self) -> bool:
        import psycopg

        try:
            with self._connect(min(3, self.limits.connect_timeout_s)) as conn:
                conn.execute("SELECT 1")
        except (psycopg.Error, WriteFailed):
            return False
        return True

    def write(self, action: Action, *, rule_id: int, rule: Rule | None, view: TableView) -> Committed:
        import psycopg

        try:
            with self._connect() as conn, conn.cursor() as cur:
                cur.execute("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint")
                lsn_row = cur.fetchone()
                floor = floor_of_lsn(int(lsn_row[0]) if lsn_row else 0)
                detail = self._apply(cur, action, rule_id, rule, view)
        except psycopg.errors.LockNotAvailable:
            raise WriteFailed(
                f"rule {rule_id} is being changed in another session: its row stayed locked for more than "
                f"{self.limits.lock_timeout_ms / 1000:g} s (lock_timeout). Nothing was written; try again"
            ) from None
        except psycopg.errors.QueryCanceled:
            raise WriteFailed(
                f"the rules database did not finish the edit of rule {rule_id} within "
                f"{self.limits.statement_timeout_ms / 1000:g} s (statement_timeout). Nothing was written"
            ) from None
        except psycopg.Error as error:
            raise WriteFailed(f"the rules database refused or could not be reached: {error}".strip()) from None
        return Committed(action, rule_id, self.mode, floor, _now(), detail)

    def _apply(self, cur: Any, action: Action, rule_id: int, rule: Rule | None, view: TableView) -> str:
        from psycopg import sql

        table = sql.Identifier(RULES_TABLE)
        if action in ("create", "update"):
            assert rule is not None
            columns = sql.SQL(", ").join(sql.Identifier(c) for c in DATABASE_COLUMNS)
            values = sql.SQL(", ").join(sql.SQL(database_placeholder(c)) for c in DATABASE_COLUMNS)
            conflict: sql.Composable = sql.SQL("DO NOTHING")
            if action == "update":
                conflict = sql.SQL("DO UPDATE SET ") + sql.SQL(", ").join(
                    sql.SQL("{} = excluded.{}").format(sql.Identifier(c), sql.Identifier(c))
                    for c in DATABASE_COLUMNS
                    if c != "rule_id"
                )
            statement = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT (rule_id) ").format(table, columns, values)
            cur.execute(statement + conflict, database_values(rule))
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
