"""Kafka record values -> validated rule change events, or rejections with a reason (for the quarantine).

Every record ends up in exactly one place: ``events``, ``rejected``, or ``kafka_tombstones`` (null values,
which Debezium sends after a delete for log compaction and which carry no change). Blank lines of a
JSON-lines file are not records.

Example::

    batch = parse_records([RawRecord('{"op": "d", "before": {"rule_id": 1}, ...}', "file:/x.jsonl:1")], schema)
    batch.events[0].rule_id, batch.events[0].op        # (1, Op.DELETE)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pipelines.base.settings import TransactionSchema
from rules_cdc.envelope import EnvelopeError, Op, read_envelope
from rules_cdc.rule_model import Rule, RuleState, RuleValidationError, parse_rule
from rules_cdc.rule_rows import TRUNCATE_MARKER_ID
from rules_cdc.source_position import PositionError, position_of

_ID_COLUMNS = ("rule_id", "ruleId")
MAX_REASON_CHARS = 500
ATTRIBUTION_COLUMNS = ("changed_by", "approved_by", "change_reason", "proposal_id")
"""Who wrote a version of a rule, who approved it, why, and from which proposal (conf/rulesdb/005_attribution.sql):
the change log's ``changedBy``, ``approvedBy``, ``changeReason``, ``proposalId``; NULL: unattributed."""
DATABASE_COLUMNS = frozenset({"updated_at", *ATTRIBUTION_COLUMNS})
"""Columns of ``fraud_rules`` that are not part of the rule (the database's bookkeeping and the attribution):
not validated as rule fields, so a change of the reason alone leaves the rule, and the engine's state, as they
were; the change log keeps them with the rest of the row."""
UNAVAILABLE = "__debezium_unavailable_value"
"""What Debezium's PostgreSQL connector sends for an unchanged value stored out of line (TOAST) when the table's
REPLICA IDENTITY is DEFAULT: the value itself is not in the WAL record."""
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RawRecord:
    """One record value as it arrived, and where from (``kafka:topic/2/1043`` or ``file:/x.jsonl:17``)."""

    value: str | None
    offset: str


@dataclass(frozen=True)
class Attribution:
    """A change's author, approver, reason and proposal id (each None when the row did not say)."""

    changed_by: str | None = None
    approved_by: str | None = None
    change_reason: str | None = None
    proposal_id: int | None = None

    @classmethod
    def of(cls, row: dict[str, Any] | None) -> Attribution:
        """From a ``fraud_rules`` row; values of another type than the column's are dropped, never guessed."""
        row = row or {}
        names = [_text_or_none(row.get(c)) for c in ATTRIBUTION_COLUMNS[:3]]
        proposal = row.get("proposal_id")
        valid_id = isinstance(proposal, int) and not isinstance(proposal, bool)
        return cls(names[0], names[1], names[2], proposal if valid_id else None)


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value != UNAVAILABLE else None


@dataclass(frozen=True)
class ChangeEvent:
    """A valid change to one rule (or, for ``t``, to the whole table: ``rule_id`` is the truncate marker)."""

    rule_id: int
    op: Op
    position: str
    ts_ms: int | None
    rule: Rule | None  # the validated ``after`` of c/u/r
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    source_offset: str
    raw: str | None = field(default=None, repr=False, compare=False)  # the record value, for the quarantine

    @property
    def state(self) -> RuleState:
        """The state this event leaves its rule in, on its own."""
        if self.rule is None:
            return RuleState.DELETED
        return RuleState.DISABLED if self.rule.disabled else self.rule.rule_state

    @property
    def identity(self) -> tuple[int, str, str]:
        """Equal for duplicates (a redelivered event): rule, position, op."""
        return self.rule_id, self.position, self.op.value

    @property
    def attribution(self) -> Attribution:
        """Who, who approved and why, from the row the event carries (``after``; a delete's ``before``)."""
        return Attribution.of(self.after if self.after is not None else self.before)

    @property
    def before_json(self) -> str | None:
        return row_json(self.before)

    @property
    def after_json(self) -> str | None:
        return row_json(self.after)


@dataclass(frozen=True)
class Rejected:
    record: RawRecord
    reason: str


@dataclass
class ParsedBatch:
    events: list[ChangeEvent] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    kafka_tombstones: int = 0

    @property
    def records(self) -> int:
        return len(self.events) + len(self.rejected) + self.kafka_tombstones


def row_json(row: dict[str, Any] | None) -> str | None:
    """A row as canonical JSON (sorted keys; decimals as strings, exactly)."""
    if row is None:
        return None
    return json.dumps(row, sort_keys=True, separators=(",", ":"), default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def parse_records(records: Iterable[RawRecord], schema: TransactionSchema) -> ParsedBatch:
    """Validate every record; nothing is dropped: each is an event, a rejection or a Kafka tombstone."""
    batch = ParsedBatch()
    for record in records:
        try:
            event = parse_record(record, schema)
        except (EnvelopeError, RuleValidationError, PositionError) as error:
            batch.rejected.append(Rejected(record, _reason(str(error))))
            continue
        except Exception as error:  # bad input must never stop the stream: quarantine it, with the error
            log.warning("unexpected %s parsing %s", type(error).__name__, record.offset, exc_info=True)
            batch.rejected.append(Rejected(record, _reason(f"invalid record ({type(error).__name__}: {error})")))
            continue
        if event is None:
            batch.kafka_tombstones += 1
        else:
            batch.events.append(event)
    return batch


def _reason(text: str) -> str:
    """One line of at most MAX_REASON_CHARS: a reason quoting a huge payload stays readable."""
    line = " ".join(text.split())
    return line if len(line) <= MAX_REASON_CHARS else f"{line[: MAX_REASON_CHARS - 20]}... ({len(line)} chars)"


def parse_record(record: RawRecord, schema: TransactionSchema) -> ChangeEvent | None:
    """One record: a ChangeEvent, None for a Kafka tombstone; raises with a one-line reason otherwise."""
    envelope = read_envelope(record.value)
    if envelope is None:
        return None
    payload = envelope.payload
    if payload.op is Op.DELETE:
        # Only the key is needed. PostgreSQL's DEFAULT replica identity sends nothing else (Debezium fills the other
        # NOT NULL columns with type defaults), so a column that cannot be decoded must not lose the delete.
        before, after = envelope.lenient_before(), None
    else:
        before, after = envelope.rows()
    position = position_of(envelope.source_dict(), payload.ts_ms)
    ts_ms = payload.source.ts_ms if payload.source and payload.source.ts_ms is not None else payload.ts_ms

    def event(rule_id: int, rule: Rule | None, old: dict[str, Any] | None, new: dict[str, Any] | None) -> ChangeEvent:
        return ChangeEvent(rule_id, payload.op, position, ts_ms, rule, old, new, record.offset, record.value)

    if payload.op is Op.TRUNCATE:
        return event(TRUNCATE_MARKER_ID, None, None, None)
    if payload.op is Op.DELETE:
        if before is None:
            raise EnvelopeError("delete event without 'before': the rule id is unknown")
        return event(_rule_id(before, "before"), None, before, None)
    if after is None:
        raise EnvelopeError(f"op {payload.op.value!r} event without 'after'")
    _check_available(after)
    try:
        rule = parse_rule(rule_columns(after), schema)
    except RuleValidationError as error:
        raise RuleValidationError(f"rule {_maybe_id(after)}: {error.reason}") from None
    if before is not None and _maybe_id(before) not in (None, rule.rule_id):
        raise EnvelopeError(f"update changes the rule id from {_maybe_id(before)} to {rule.rule_id}")
    return event(rule.rule_id, rule, before, after)


def rule_columns(row: dict[str, Any]) -> dict[str, Any]:
    """The row without the columns the database keeps for itself (``DATABASE_COLUMNS``)."""
    return {column: value for column, value in row.items() if column not in DATABASE_COLUMNS}


def _check_available(row: dict[str, Any]) -> None:
    missing = sorted(column for column, value in row.items() if value == UNAVAILABLE)
    if missing:
        raise EnvelopeError(
            f"after.{', after.'.join(missing)}: Debezium could not read the unchanged value (stored out of line, "
            "TOAST, and the table's REPLICA IDENTITY is DEFAULT); set REPLICA IDENTITY FULL or STORAGE PLAIN "
            "(conf/rulesdb/001_fraud_rules.sql), then update the rule again"
        )


def _maybe_id(row: dict[str, Any]) -> int | None:
    for column in _ID_COLUMNS:
        value = row.get(column)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _rule_id(row: dict[str, Any], side: str) -> int:
    rule_id = _maybe_id(row)
    if rule_id is None or rule_id < 0:
        raise EnvelopeError(f"{side} has no valid rule_id")
    return rule_id
