"""The pure part of applying a batch of rule change events: reduce, tombstone, and decide what to log.

``plan_batch(events, view, now)`` turns a batch into

* ``rows``: one rules-table row per rule id, from its newest event (the MERGE source; the MERGE then keeps,
  per rule, whichever of table row and batch row has the greater position);
* ``truncate_below``: the position of the batch's newest truncate, if newer than the table's watermark
  (the MERGE tombstones every other row older than it);
* ``applied``: the events newer than what the table held for their rule;
* ``log``: their change-log entries (a truncate has one for the table and one per live rule it tombstones);
* ``stale``: events no newer than the table's row (duplicates, replays, reordering): they change nothing.
  ``split_stale`` then tells a redelivery of a change already applied (its change is in the change log: a
  duplicate, counted) from a change that never reached the table (quarantined with ``stale_reason``:
  "stale: position X is older than rule N's Y"), so that no lost change is only a number in a log line;
* ``rejected``: events whose position kind differs from the table's (positions are not comparable); an
  empty table takes the kind of most of the batch's events.

The result of a sequence of batches depends only on the *set* of events, not their order, grouping or
duplicates: per rule the newest event wins, and an event older than the newest truncate ``W`` yields a
DELETED tombstone at ``W`` (so a truncate is order-independent too). ``final_rows`` states that target.

Within one batch, events superseded by a newer event of the same rule are still logged, each with its own
position and the state it would have produced; they never appear in a table version.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rules_cdc.envelope import Op
from rules_cdc.parse_events import Attribution, ChangeEvent, row_json
from rules_cdc.rule_model import RuleState
from rules_cdc.rule_rows import RULE_FIELDS, TRUNCATE_MARKER_ID, rule_to_row, tombstone_row
from rules_cdc.source_position import change_key, kind_of


@dataclass(frozen=True)
class Watermark:
    """The newest truncate: its position and time."""

    position: str
    ts_ms: int | None


@dataclass(frozen=True)
class TableView:
    """What a batch needs to know of the rules table before it is applied (the table is small)."""

    positions: Mapping[int, str] = field(default_factory=dict)  # every row, truncate marker included
    live_rows: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)  # ACTIVE/PAUSED rows
    watermark: Watermark | None = None

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(kind_of(p) for p in self.positions.values())


@dataclass(frozen=True)
class LogEntry:
    rule_id: int
    op: str
    position: str
    source_offset: str | None
    before: str | None
    after: str | None
    resulting_state: str
    attribution: Attribution = field(default_factory=Attribution)


@dataclass(frozen=True)
class BatchPlan:
    rows: tuple[dict[str, Any], ...]
    truncate_below: Watermark | None
    log: tuple[LogEntry, ...]
    applied: tuple[ChangeEvent, ...]
    stale: tuple[ChangeEvent, ...]
    rejected: tuple[tuple[ChangeEvent, str], ...]


def plan_batch(events: Sequence[ChangeEvent], view: TableView, now: dt.datetime) -> BatchPlan:
    """Reduce a batch against the table's view; see the module docstring."""
    accepted, rejected = _same_kind(events, view.kinds)
    unique = {e.identity: e for e in sorted(accepted, key=_order_key)}.values()
    batch_truncate = newest_truncate(unique)
    watermark = _newer(view.watermark, batch_truncate)
    rows = tuple(target_row(e, watermark, now) for e in newest_per_rule(unique).values())
    log: list[LogEntry] = []
    applied: list[ChangeEvent] = []
    stale: list[ChangeEvent] = []
    for event in unique:
        floor = max(view.positions.get(event.rule_id, ""), view.watermark.position if view.watermark else "")
        if event.position <= floor:
            stale.append(event)
            continue
        applied.append(event)
        if event.op is Op.TRUNCATE:
            log.extend(_truncate_entries(event, view))
        else:
            log.append(_entry(event, event.rule_id, event.before_json, event.state.value))
    newer = batch_truncate is not None and (view.watermark is None or batch_truncate.position > view.watermark.position)
    return BatchPlan(rows, batch_truncate if newer else None, tuple(log), tuple(applied), tuple(stale), tuple(rejected))


def change_identity(rule_id: int, position: str, op: str) -> tuple[int, str, str]:
    """What makes two events the same change: rule, ``change_key`` of the position, op (``ChangeEvent`` or a
    change-log row alike)."""
    return rule_id, change_key(position), op


def split_stale(
    stale: Iterable[ChangeEvent], view: TableView, logged: Collection[tuple[int, str, str]]
) -> tuple[tuple[ChangeEvent, ...], tuple[tuple[ChangeEvent, str], ...]]:
    """``(duplicates, rejected)``: a stale event whose change is in the change log (``logged``, identities by
    ``change_identity``) was applied before and is a duplicate; any other one never reached the table, and
    is rejected with ``stale_reason``.

    Example::

        split_stale(plan.stale, view, {(1, "pg:00000000000030777720", "u")})
    """
    duplicates: list[ChangeEvent] = []
    rejected: list[tuple[ChangeEvent, str]] = []
    for event in stale:
        if change_identity(event.rule_id, event.position, event.op.value) in logged:
            duplicates.append(event)
        else:
            rejected.append((event, stale_reason(event, view)))
    return tuple(duplicates), tuple(rejected)


def stale_reason(event: ChangeEvent, view: TableView) -> str:
    """Why a stale event changes nothing: the row (or the truncate) it is not newer than."""
    held = view.positions.get(event.rule_id, "")
    mark = view.watermark.position if view.watermark else ""
    relation = "older than" if event.position < max(held, mark) else "not newer than"
    if event.op is Op.TRUNCATE:
        return f"stale: truncate at {event.position} is {relation} the newest truncate {mark}"
    if held >= mark:
        return f"stale: position {event.position} is {relation} rule {event.rule_id}'s {held}"
    return f"stale: position {event.position} is {relation} the truncate of every rule at {mark}"


def newest_per_rule(events: Iterable[ChangeEvent]) -> dict[int, ChangeEvent]:
    """Per rule id, its event with the greatest position (ties broken by content, deterministically)."""
    newest: dict[int, ChangeEvent] = {}
    for event in events:
        current = newest.get(event.rule_id)
        if current is None or _order_key(event) > _order_key(current):
            newest[event.rule_id] = event
    return newest


def newest_truncate(events: Iterable[ChangeEvent]) -> Watermark | None:
    truncates = [e for e in events if e.op is Op.TRUNCATE]
    if not truncates:
        return None
    newest = max(truncates, key=_order_key)
    return Watermark(newest.position, newest.ts_ms)


def target_row(event: ChangeEvent, watermark: Watermark | None, now: dt.datetime) -> dict[str, Any]:
    """The rules-table row an event leads to (older than the newest truncate: a tombstone at the truncate)."""
    if event.op is Op.TRUNCATE:
        return tombstone_row(
            TRUNCATE_MARKER_ID, source_position=event.position, source_op="t", source_ts_ms=event.ts_ms, now=now
        )
    if watermark is not None and event.position < watermark.position:
        return tombstone_row(
            event.rule_id, source_position=watermark.position, source_op="t", source_ts_ms=watermark.ts_ms, now=now
        )
    if event.rule is None:
        return tombstone_row(
            event.rule_id, source_position=event.position, source_op=event.op.value, source_ts_ms=event.ts_ms, now=now
        )
    return rule_to_row(
        event.rule, source_position=event.position, source_op=event.op.value, source_ts_ms=event.ts_ms, now=now
    )


def final_rows(events: Iterable[ChangeEvent], now: dt.datetime) -> dict[int, dict[str, Any]]:
    """The table any order, grouping or duplication of ``events`` must converge to (the specification)."""
    events = list(events)
    watermark = newest_truncate(events)
    return {rid: target_row(e, watermark, now) for rid, e in newest_per_rule(events).items()}


def _truncate_entries(event: ChangeEvent, view: TableView) -> list[LogEntry]:
    """A truncate's log: one entry for the table (the marker) and one per live rule it tombstones."""
    entries = [_entry(event, TRUNCATE_MARKER_ID, None, RuleState.DELETED.value)]
    for rule_id, row in sorted(view.live_rows.items()):
        if view.positions.get(rule_id, "") < event.position:
            before = row_json({name: row.get(name) for name in RULE_FIELDS})
            entries.append(_entry(event, rule_id, before, RuleState.DELETED.value))
    return entries


def _entry(event: ChangeEvent, rule_id: int, before: str | None, state: str) -> LogEntry:
    attribution = event.attribution if event.op is not Op.TRUNCATE else Attribution()
    return LogEntry(
        rule_id, event.op.value, event.position, event.source_offset, before, event.after_json, state, attribution
    )


def _same_kind(
    events: Sequence[ChangeEvent], table_kinds: frozenset[str]
) -> tuple[list[ChangeEvent], list[tuple[ChangeEvent, str]]]:
    """Keep the events whose position kind is the table's; an empty table takes the batch's most common kind
    (most distinct events, ties by name), so the choice does not depend on order or duplicates."""
    counts = Counter(kind_of(position) for _, position, _ in {e.identity for e in events})
    majority = min(counts, key=lambda kind: (-counts[kind], kind)) if counts else None
    allowed = table_kinds or frozenset([majority] if majority else [])
    accepted: list[ChangeEvent] = []
    rejected: list[tuple[ChangeEvent, str]] = []
    for event in events:
        kind = kind_of(event.position)
        if kind in allowed:
            accepted.append(event)
        else:
            reason = (
                f"source position kind {kind!r} does not match the rules table's {sorted(allowed)}: "
                "positions of different connectors are not comparable"
            )
            rejected.append((event, reason))
    return accepted, rejected


def _newer(a: Watermark | None, b: Watermark | None) -> Watermark | None:
    if a is None or b is None:
        return a or b
    return b if b.position > a.position else a


def _order_key(event: ChangeEvent) -> tuple[str, str, str, str]:
    return event.position, event.op.value, event.after_json or "", event.before_json or ""
