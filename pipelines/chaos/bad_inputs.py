"""The bad input a campaign sends into the running streams: malformed and hostile records for each topic.

Rules topic: text that is not JSON, a rule whose filter names no field of the schema, an oversize change event
(a 600 KB rule name), and two change events with forged source positions (the CLI publisher's connector name with
a position that is not one, ``pg:::::``, or 40 digits long, both sorting after every real PostgreSQL position).
Transactions topic: text that is not JSON, a record missing its required fields, an oversize record (a 600 KB
amount), and one over the broker's 1 MB record limit. Rule ids 9101+ and transaction ids ``chaos-bad-*`` are not
used by the database or the generator, so each input's fate can be looked up alone.

Example::

    [b.name for b in rule_inputs(now_ms=0)][:2]   # ['invalid JSON', 'a rule with a bad filter']
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

Topic = Literal["rules", "transactions"]
OVERSIZE_CHARS = 600_000
TOO_LARGE_CHARS = 2_000_000  # over the broker's default message.max.bytes (1 MB): refused when produced
FORGED_RULE_IDS = (9104, 9105)


@dataclass(frozen=True)
class BadInput:
    """One hostile record: a short name for the report, the topic kind, its value, and the rule id or
    transaction id it carries (None when it has none)."""

    name: str
    topic: Topic
    value: bytes
    rule_id: int | None = None
    transaction_id: str | None = None
    forged: bool = False


def _rule_row(rule_id: int, **changes: Any) -> dict[str, Any]:
    """A fraud_rules row as Debezium's JSON converter writes it (jsonb as text, numeric as a string)."""
    row: dict[str, Any] = {
        "rule_id": rule_id,
        "rule_name": f"chaos {rule_id}",
        "rule_state": "ACTIVE",
        "grouping_key_names": ["payerId"],
        "aggregate_field_name": "paymentAmount",
        "aggregator_function_type": "SUM",
        "limit_operator_type": "GREATER",
        "limit_value": "1000",
        "window_minutes": 5,
        "filter": None,
        "cooldown_minutes": None,
        "disabled": False,
    }
    return row | changes


def _event(row: dict[str, Any], source: dict[str, Any], ts_ms: int) -> bytes:
    payload = {"before": None, "after": row, "source": source, "op": "c", "ts_ms": ts_ms, "transaction": None}
    return json.dumps(payload).encode()


def _pg_source(ts_ms: int) -> dict[str, Any]:
    # An old LSN: a real-looking position that every later database change sorts after.
    source = {"connector": "postgresql", "db": "fraudlake", "table": "fraud_rules", "lsn": 1, "ts_ms": ts_ms}
    return source | {"sequence": '["1","1"]'}  # as Debezium sends it: a source block that is not itself refused


def rule_inputs(now_ms: int) -> list[BadInput]:
    """Hostile records for the rules topic."""
    bad_filter = json.dumps({"field": "noSuchField", "op": "EQUAL", "value": 1})
    return [
        BadInput("invalid JSON", "rules", b'{"op": "c", "after": {"rule_id": 9101,'),
        BadInput(
            "a rule with a bad filter",
            "rules",
            _event(_rule_row(9102, filter=bad_filter), _pg_source(now_ms), now_ms),
            rule_id=9102,
        ),
        BadInput(
            f"oversize change event ({OVERSIZE_CHARS // 1000} KB rule name)",
            "rules",
            _event(_rule_row(9103, rule_name="x" * OVERSIZE_CHARS), _pg_source(now_ms), now_ms),
            rule_id=9103,
        ),
        BadInput(
            "forged position: connector fraudlake-cli, position 'pg:::::'",
            "rules",
            _event(_rule_row(FORGED_RULE_IDS[0]), {"connector": "fraudlake-cli", "position": "pg:::::"}, now_ms),
            rule_id=FORGED_RULE_IDS[0],
            forged=True,
        ),
        BadInput(
            "forged position: connector fraudlake-cli, a 40-digit position",
            "rules",
            _event(_rule_row(FORGED_RULE_IDS[1]), {"connector": "fraudlake-cli", "position": "pg:" + "9" * 40}, now_ms),
            rule_id=FORGED_RULE_IDS[1],
            forged=True,
        ),
    ]


def transaction_inputs(now_ms: int) -> list[BadInput]:
    """Hostile records for the transactions topic."""
    missing = {"transactionId": "chaos-bad-missing", "payerId": 1}
    oversize = {"transactionId": "chaos-bad-oversize", "eventTime": now_ms, "paymentAmount": "9" * OVERSIZE_CHARS}
    too_large = {"transactionId": "chaos-bad-too-large", "eventTime": now_ms, "note": "y" * TOO_LARGE_CHARS}
    return [
        BadInput("invalid JSON", "transactions", b'{"transactionId": "chaos-bad-json", "eventTime": ', None),
        BadInput(
            "missing required fields (eventTime, paymentAmount)",
            "transactions",
            json.dumps(missing).encode(),
            transaction_id="chaos-bad-missing",
        ),
        BadInput(
            f"oversize record ({OVERSIZE_CHARS // 1000} KB amount)",
            "transactions",
            json.dumps(oversize).encode(),
            transaction_id="chaos-bad-oversize",
        ),
        BadInput(
            f"record over the broker's 1 MB limit ({TOO_LARGE_CHARS // 1_000_000} MB)",
            "transactions",
            json.dumps(too_large).encode(),
            transaction_id="chaos-bad-too-large",
        ),
    ]
