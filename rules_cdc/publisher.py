"""The CLI publisher: Debezium-style events for rule edits, produced to the rules topic with kafka-python.

It stands in for a database connector (``source.connector = "fraudlake-cli"``) where there is no rules database,
so that rules can be managed from the CLI or a notebook; the rules job applies its events like any other. Each
event carries a ``ts`` position in ``source.position`` (``source_position.cli_position``): newer than everything
the rules table has seen and than this process's earlier edits. On a table fed by a database (``pg``/``mysql``
positions) it refuses (``PublishRefused``): edits go to the database (``rules_cdc.rulesdb_edits``), so that
one log orders them all. ``delete_all_event`` is the exception: ``rules delete-all``'s truncate, applied at once
in this process, never published.

Example::

    events = edit_events(read_view(spark, rules_path), "pause", rule_id=2)   # [{"op": "u", ...}]
    publish(settings, events)                               # to settings.kafka.topics.rules
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from typing import Any

from pipelines.base.kafka_clients import ensure_topics, python_client_config
from pipelines.base.settings import Settings
from rules_cdc.envelope import Op
from rules_cdc.parse_events import ChangeEvent
from rules_cdc.plan_changes import TableView
from rules_cdc.rule_model import Rule, RuleState
from rules_cdc.rule_rows import TRUNCATE_MARKER_ID, database_row, rule_from_row
from rules_cdc.source_position import CLI_CONNECTOR, PositionError, cli_position, local_truncate_position

_lock = threading.Lock()
_last_issued_ms = 0


class PublishRefused(RuntimeError):
    """A CLI edit that cannot be expressed as a newer event for this rules table."""


def db_row(rule: Rule) -> dict[str, Any]:
    """The rule's ``fraud_rules`` row (``database_row``) as Debezium carries it (``decimal.handling.mode=string``):
    the jsonb filter and baseline as JSON text; the limit as text, with all the places the model keeps."""
    row = database_row(rule)
    jsonb = {column: None if row[column] is None else json.dumps(row[column]) for column in ("filter", "baseline")}
    return {**row, "limit_value": format(rule.limit, "f"), **jsonb}


def cli_event(op: Op, before: Rule | None, after: Rule | None, position: tuple[str, int]) -> dict[str, Any]:
    """A Debezium change event payload (no schema wrapper) as the CLI publisher writes it."""
    source_position, ts_ms = position
    return {
        "before": db_row(before) if before else None,
        "after": db_row(after) if after else None,
        "source": {
            "version": "fraudlake",
            "connector": CLI_CONNECTOR,
            "name": "fraudlake",
            "ts_ms": ts_ms,
            "snapshot": "false",
            "db": "fraudlake",
            "table": "fraud_rules",
            "position": source_position,
        },
        "op": op.value,
        "ts_ms": ts_ms,
    }


def next_position(view: TableView, *, local_truncate: bool = False) -> tuple[str, int]:
    """A CLI position newer than every position of the table and every one this process issued (with
    ``local_truncate``, ``delete-all``'s: possibly ``+cli:`` on a database-fed table)."""
    global _last_issued_ms
    make = local_truncate_position if local_truncate else cli_position
    with _lock:
        try:
            position, _last_issued_ms = make(view.positions.values(), int(time.time() * 1000), _last_issued_ms)
        except PositionError as error:
            raise PublishRefused(str(error)) from None
        return position, _last_issued_ms


def delete_all_event(view: TableView, source_offset: str = "cli:delete-all") -> ChangeEvent:
    """``rules delete-all``'s truncate as an event for ``apply_changes.apply_parsed``, built here, not parsed: on a
    database-fed table its ``+cli:`` position is one no record read from a topic or a file may carry."""
    position, ms = next_position(view, local_truncate=True)
    raw = json.dumps(cli_event(Op.TRUNCATE, None, None, (position, ms)))
    return ChangeEvent(TRUNCATE_MARKER_ID, Op.TRUNCATE, position, ms, None, None, None, source_offset, raw)


def edit_events(
    view: TableView, action: str, *, rule_id: int | None = None, rules: Sequence[Rule] = ()
) -> list[dict[str, Any]]:
    """Events for ``upsert`` (``rules``) or ``pause``/``resume``/``delete`` (``rule_id``).

    ``view`` is the rules table as read now: it gives the ``before`` images and the position floor. Raises
    ``PublishRefused`` on a table fed by a database: such edits are written to the database.
    """
    if action == "upsert":
        events = []
        for rule in rules:
            before = _current(view, rule.rule_id)
            op = Op.UPDATE if before else Op.CREATE
            events.append(cli_event(op, before, rule, next_position(view)))
        return events
    if rule_id is None:
        raise ValueError(f"{action} needs a rule id")
    current = _current(view, rule_id)
    if current is None:
        raise PublishRefused(f"rule {rule_id} is not a live rule (absent or tombstoned)")
    if action == "delete":
        return [cli_event(Op.DELETE, current, None, next_position(view))]
    state = {"pause": RuleState.PAUSED, "resume": RuleState.ACTIVE}[action]
    if current.rule_state is state:
        raise PublishRefused(f"rule {rule_id} is already {state.value}")
    return [cli_event(Op.UPDATE, current, current.model_copy(update={"rule_state": state}), next_position(view))]


def _current(view: TableView, rule_id: int) -> Rule | None:
    row = view.live_rows.get(rule_id)
    return rule_from_row(dict(row)) if row is not None else None


def publish(settings: Settings, events: Sequence[dict[str, Any]]) -> int:
    """Produce events to the rules topic, keyed like Debezium (``{"rule_id": n}``); return how many."""
    from kafka import KafkaProducer

    topic = settings.kafka.topics.rules
    ensure_topics(settings, [topic])
    producer = KafkaProducer(**python_client_config(settings), acks="all")
    try:
        for event in events:
            image = event["after"] or event["before"]
            key = json.dumps({"rule_id": image["rule_id"]}).encode() if image else None
            producer.send(topic, key=key, value=json.dumps(event).encode())
        producer.flush(timeout=30)
    finally:
        producer.close()
    return len(events)
