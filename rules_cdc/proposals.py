"""Four eyes: rule changes proposed by one person and approved (applied) or rejected by another, in ``rule_proposals``.

An analyst's create, update, pause, resume or delete is a row of ``rule_proposals`` (conf/rulesdb/
006_rule_proposals.sql) until a different person approves it. Approval is the database's own function
``approve_rule_proposal``: one transaction that locks the proposal, refuses it unless it is pending, decided by
someone other than its author (a CHECK) and still based on the rule as it is (the rule's ``updated_at`` then and
now), then writes ``fraud_rules`` with ``changed_by`` = author, ``approved_by`` = approver, ``change_reason`` =
reason. Debezium streams that row like any other; the change log ``rule_changes`` keeps the three names. The
function runs as its NOLOGIN owner ``fraudlake_approver`` (SECURITY DEFINER, fixed ``search_path``; conf/rulesdb/
007_operator_role.sql): the console role that calls it may not write ``fraud_rules`` itself.

This module is the Python side for the console and the CLI alike: it takes a connection factory (``connector``)
so that each caller brings its own login (the console's ``RulesDbWriter``, the CLI's console-role password file)
and nothing here reaches into ``pipelines``. Every statement is parameterised; no SQL is built from text a person
typed. Who is a person and who may approve is the caller's (the console's signed-in user and role, the CLI's
``--as-user``): the database trusts the names it is given and enforces author != approver.

Example::

    connect = connector("host=127.0.0.1 port=15432 dbname=fraudlake user=fraudlake_console", password=secret)
    p = propose(connect, "pause", rule_id=7, proposed_by="alice", reason="false positives after the promo")
    approve(connect, p.id, approver="bob", note="checked the backtest")     # 'paused rule 7'
    approve(connect, p.id, approver="alice", note="")                       # ProposalRefused: already approved
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal, TypeVar

from pipelines.base.settings import TransactionSchema
from rules_cdc.rule_model import Rule, RuleState, parse_rule
from rules_cdc.rule_rows import DATABASE_COLUMNS, database_row

Kind = Literal["create", "update", "pause", "resume", "delete"]
KINDS: tuple[Kind, ...] = ("create", "update", "pause", "resume", "delete")
Status = Literal["pending", "approved", "rejected", "withdrawn"]
STATUSES: tuple[Status, ...] = ("pending", "approved", "rejected", "withdrawn")
MAX_NAME_CHARS = 128
MAX_TEXT_CHARS = 1000
_T = TypeVar("_T")
Connect = Callable[[], Any]
"""Opens a psycopg connection (a context manager committing on success), e.g. ``connector(...)``."""

_COLUMNS = (
    "id, kind, rule_id, proposed_rule, base_updated_at, proposed_by, reason, created_at, status, decided_by, "
    "decided_at, decision_note"
)


class ProposalRefused(ValueError):
    """A proposal or decision the rules database (or its checks here) refuses; nothing was written."""


class ProposalStale(ProposalRefused):
    """The rule changed since the proposal was made: approve a fresh proposal instead."""


class ProposalsUnavailable(RuntimeError):
    """The rules database could not be reached (or lacks schema version 6); nothing was written."""


@dataclass(frozen=True)
class Proposal:
    """One row of ``rule_proposals``."""

    id: int
    kind: Kind
    rule_id: int
    proposed_rule: dict[str, Any] | None  # fraud_rules columns (snake_case) for create/update
    base_updated_at: dt.datetime | None
    proposed_by: str
    reason: str
    created_at: dt.datetime
    status: Status
    decided_by: str | None = None
    decided_at: dt.datetime | None = None
    decision_note: str | None = None

    def rule(self, schema: TransactionSchema) -> Rule | None:
        """The proposed rule, validated (None for pause/resume/delete)."""
        return None if self.proposed_rule is None else parse_rule(self.proposed_rule, schema)

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "ruleId": self.rule_id,
            "proposedRule": self.proposed_rule,
            "baseUpdatedAt": _iso(self.base_updated_at),
            "proposedBy": self.proposed_by,
            "reason": self.reason,
            "createdAt": _iso(self.created_at),
            "status": self.status,
            "decidedBy": self.decided_by,
            "decidedAt": _iso(self.decided_at),
            "decisionNote": self.decision_note,
        }


def connector(
    conninfo: str, *, password: str | None = None, connect_timeout_s: int = 5, options: str | None = None
) -> Connect:
    """A ``Connect`` for ``conninfo`` (no password in it: it may be shown); ``password`` goes to libpq apart."""

    def connect() -> Any:
        import psycopg

        extra: dict[str, Any] = {}
        if password is not None:
            extra["password"] = password
        if options:
            extra["options"] = options
        return psycopg.connect(conninfo, connect_timeout=connect_timeout_s, **extra)

    return connect


def propose(
    connect: Connect,
    kind: str,
    *,
    proposed_by: str,
    reason: str,
    rule: Rule | None = None,
    rule_id: int | None = None,
) -> Proposal:
    """Record a pending proposal; checks it against the rule as it is now (create: absent; the others: present;
    pause: not paused; resume: paused), and keeps the rule's ``updated_at`` for the check at approval."""
    checked = _kind(kind)
    author, why = _name(proposed_by, "the author"), _text(reason, "a reason", required=True)
    if checked in ("create", "update"):
        if rule is None:
            raise ProposalRefused(f"a {checked} proposal needs the rule")
        if rule_id is not None and rule_id != rule.rule_id:
            raise ProposalRefused(f"rule id {rule_id} does not match the rule's {rule.rule_id}")
        rule_id = rule.rule_id
    elif rule_id is None:
        raise ProposalRefused(f"a {checked} proposal needs a rule id")
    content = None if rule is None or checked not in ("create", "update") else json.dumps(database_row(rule))

    def run(cur: Any) -> Proposal:
        cur.execute("SELECT rule_state, updated_at FROM fraud_rules WHERE rule_id = %s", (rule_id,))
        found = cur.fetchone()
        _check_against(checked, rule_id, None if found is None else str(found[0]))
        cur.execute(
            "INSERT INTO rule_proposals (kind, rule_id, proposed_rule, base_updated_at, proposed_by, reason) "
            f"VALUES (%s, %s, %s::jsonb, %s, %s, %s) RETURNING {_COLUMNS}",
            (checked, rule_id, content, None if found is None else found[1], author, why),
        )
        return _proposal(cur.fetchone())

    return _in_transaction(connect, run)


def list_proposals(
    connect: Connect, *, status: str | None = "pending", rule_id: int | None = None, limit: int = 200
) -> list[Proposal]:
    """Proposals, newest first: only ``status`` ones (None: all), only ``rule_id``'s if given."""
    if status is not None and status not in STATUSES:
        raise ProposalRefused(f"status {status!r} is not one of {list(STATUSES)}")

    def run(cur: Any) -> list[Proposal]:
        cur.execute(
            f"SELECT {_COLUMNS} FROM rule_proposals WHERE (%s::text IS NULL OR status = %s) "
            "AND (%s::bigint IS NULL OR rule_id = %s) ORDER BY id DESC LIMIT %s",
            (status, status, rule_id, rule_id, max(1, min(limit, 1000))),
        )
        return [_proposal(row) for row in cur.fetchall()]

    return _in_transaction(connect, run)


def get_proposal(connect: Connect, proposal_id: int) -> Proposal:
    """One proposal; ``ProposalRefused`` when there is none with that id."""

    def run(cur: Any) -> Proposal:
        cur.execute(f"SELECT {_COLUMNS} FROM rule_proposals WHERE id = %s", (proposal_id,))
        row = cur.fetchone()
        if row is None:
            raise ProposalRefused(f"proposal {proposal_id} does not exist")
        return _proposal(row)

    return _in_transaction(connect, run)


def rule_in_force(connect: Connect, rule_id: int) -> dict[str, Any] | None:
    """The rule's ``fraud_rules`` row (its columns, attribution and ``updated_at``), None when absent."""
    names = (*DATABASE_COLUMNS, "changed_by", "approved_by", "change_reason", "updated_at")

    def run(cur: Any) -> dict[str, Any] | None:
        cur.execute(f"SELECT {', '.join(names)} FROM fraud_rules WHERE rule_id = %s", (rule_id,))
        row = cur.fetchone()
        return None if row is None else dict(zip(names, row, strict=True))

    return _in_transaction(connect, run)


def approve(connect: Connect, proposal_id: int, *, approver: str, note: str = "") -> str:
    """Approve and apply ``proposal_id`` in one transaction (the database's ``approve_rule_proposal``); returns
    what it did (``'paused rule 7'``). Raises ``ProposalRefused`` (self-approval, not pending, unknown) or
    ``ProposalStale`` (the rule changed since)."""
    who, why = _name(approver, "the approver"), _text(note, "a note")

    def run(cur: Any) -> str:
        cur.execute("SELECT approve_rule_proposal(%s, %s, %s)", (proposal_id, who, why))
        row = cur.fetchone()
        return str(row[0]) if row else ""

    return _in_transaction(connect, run)


def approve_at(connect: Connect, proposal_id: int, *, approver: str, note: str = "") -> tuple[str, int]:
    """``approve``, and the WAL insert position (bytes) read in the same transaction just before: the applied
    change's CDC events sort at or after it, which is how the console's edit progress finds them."""
    who, why = _name(approver, "the approver"), _text(note, "a note")

    def run(cur: Any) -> tuple[str, int]:
        cur.execute("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint")
        lsn_row = cur.fetchone()
        cur.execute("SELECT approve_rule_proposal(%s, %s, %s)", (proposal_id, who, why))
        row = cur.fetchone()
        return (str(row[0]) if row else "", int(lsn_row[0]) if lsn_row else 0)

    return _in_transaction(connect, run)


def reject(connect: Connect, proposal_id: int, *, decided_by: str, note: str = "") -> Proposal:
    """Reject a pending proposal (by someone other than its author: the database refuses the author); the rule is
    not touched."""
    return _decide(connect, proposal_id, "rejected", _name(decided_by, "the rejecter"), _text(note, "a note"))


def withdraw(connect: Connect, proposal_id: int, *, by: str) -> Proposal:
    """Withdraw one's own pending proposal (only its author may)."""
    return _decide(connect, proposal_id, "withdrawn", _name(by, "the author"), None)


def diff_rows(current: dict[str, Any] | None, proposed: dict[str, Any] | None) -> list[tuple[str, Any, Any]]:
    """``(column, in force, proposed)`` for every rule column whose value differs (absent rule: every column).

    >>> diff_rows({"rule_id": 1, "limit_value": "10"}, {"rule_id": 1, "limit_value": "15"})
    [('limit_value', '10', '15')]
    """
    columns = [c for c in DATABASE_COLUMNS if (current and c in current) or (proposed and c in proposed)]
    out = []
    for column in columns:
        before = _comparable((current or {}).get(column))
        after = _comparable((proposed or {}).get(column))
        if before != after:
            out.append((column, before, after))
    return out


def proposed_row(proposal: Proposal, current: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``fraud_rules`` row the proposal would leave (None: deleted)."""
    if proposal.kind == "delete":
        return None
    if proposal.proposed_rule is not None:
        return dict(proposal.proposed_rule)
    state = RuleState.PAUSED.value if proposal.kind == "pause" else RuleState.ACTIVE.value
    return {**(current or {}), "rule_state": state}


# ---- internals -------------------------------------------------------------------------------------------------


def _decide(connect: Connect, proposal_id: int, status: Status, who: str, note: str | None) -> Proposal:
    def run(cur: Any) -> Proposal:
        cur.execute("SELECT status, proposed_by FROM rule_proposals WHERE id = %s FOR UPDATE", (proposal_id,))
        found = cur.fetchone()
        if found is None:
            raise ProposalRefused(f"proposal {proposal_id} does not exist")
        if found[0] != "pending":
            raise ProposalRefused(f"proposal {proposal_id} is already {found[0]}: a decision is final")
        if status == "withdrawn" and found[1] != who:
            raise ProposalRefused(f"only its author ({found[1]}) may withdraw proposal {proposal_id}")
        cur.execute(
            "UPDATE rule_proposals SET status = %s, decided_by = %s, decided_at = now(), decision_note = %s "
            f"WHERE id = %s RETURNING {_COLUMNS}",
            (status, who, note, proposal_id),
        )
        return _proposal(cur.fetchone())

    return _in_transaction(connect, run)


def _in_transaction(connect: Connect, run: Callable[[Any], _T]) -> _T:
    """``run(cursor)`` in one transaction; database refusals become ``ProposalRefused``/``ProposalStale``."""
    import psycopg
    from psycopg import errors

    try:
        with connect() as conn, conn.cursor() as cur:
            return run(cur)
    except errors.SerializationFailure as error:
        raise ProposalStale(_message(error)) from None
    except errors.CheckViolation as error:
        constraint = getattr(error.diag, "constraint_name", None) or ""
        if constraint in ("rule_proposals_four_eyes", "fraud_rules_four_eyes"):
            raise ProposalRefused(
                "four eyes: the author of a proposal cannot approve or reject it; another person must "
                f"(refused by the rules database: {constraint})"
            ) from None
        raise ProposalRefused(_message(error)) from None
    except (errors.NoDataFound, errors.IntegrityError, errors.DataError) as error:
        raise ProposalRefused(_message(error)) from None
    except errors.UndefinedTable:
        raise ProposalsUnavailable(
            "the rules database has no rule_proposals table: run `fraudlake rulesdb migrate` (schema version 6)"
        ) from None
    except psycopg.Error as error:
        raise ProposalsUnavailable(f"the rules database refused or could not be reached: {_message(error)}") from None


def _message(error: Exception) -> str:
    primary = getattr(getattr(error, "diag", None), "message_primary", None)
    return " ".join(str(primary or error).split())


def _check_against(kind: Kind, rule_id: int | None, state: str | None) -> None:
    if kind == "create" and state is not None:
        raise ProposalRefused(f"rule {rule_id} exists already: propose an update")
    if kind != "create" and state is None:
        raise ProposalRefused(f"rule {rule_id} is not in the rules database: propose a create")
    if kind == "pause" and state == RuleState.PAUSED.value:
        raise ProposalRefused(f"rule {rule_id} is already PAUSED")
    if kind == "resume" and state == RuleState.ACTIVE.value:
        raise ProposalRefused(f"rule {rule_id} is already ACTIVE")


def _kind(kind: str) -> Kind:
    for option in KINDS:
        if kind == option:
            return option
    raise ProposalRefused(f"kind {kind!r} is not one of {list(KINDS)}")


def _name(value: str, what: str) -> str:
    name = (value or "").strip()
    if not name or len(name) > MAX_NAME_CHARS or any(ch.isspace() and ch != " " for ch in name):
        raise ProposalRefused(f"{what} must be a name of 1 to {MAX_NAME_CHARS} characters on one line")
    return name


def _text(value: str | None, what: str, *, required: bool = False) -> str:
    text = (value or "").strip()
    if required and not text:
        raise ProposalRefused(f"{what} is required")
    if len(text) > MAX_TEXT_CHARS:
        raise ProposalRefused(f"{what} is longer than {MAX_TEXT_CHARS} characters")
    return text


def _proposal(row: Sequence[Any] | None) -> Proposal:
    assert row is not None
    content = row[3]
    if isinstance(content, str):
        content = json.loads(content)
    return Proposal(
        id=int(row[0]),
        kind=row[1],
        rule_id=int(row[2]),
        proposed_rule=content,
        base_updated_at=row[4],
        proposed_by=row[5],
        reason=row[6],
        created_at=row[7],
        status=row[8],
        decided_by=row[9],
        decided_at=row[10],
        decision_note=row[11],
    )


def _comparable(value: Any) -> Any:
    if isinstance(value, Decimal):
        return format(value.normalize(), "f")
    if isinstance(value, list | tuple):
        return list(value)
    if value is None or isinstance(value, bool | int | str | dict):
        return value
    return str(value)


def _iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.isoformat()
