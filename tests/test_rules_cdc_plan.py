"""Order-independence of CDC application, on the pure planner and a model of the MERGE (many examples, fast).

``model_merge`` mirrors ``delta_tables.rules_merge.merge_rules`` clause by clause; test_rules_cdc_apply.py
runs the same property through the real Delta MERGE on a few examples.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rules_cdc_support import SEED

from pipelines.base.settings import load_settings
from rules_cdc.envelope import Op
from rules_cdc.parse_events import ChangeEvent
from rules_cdc.plan_changes import BatchPlan, TableView, Watermark, final_rows, plan_batch
from rules_cdc.rule_model import parse_rule
from rules_cdc.rule_rows import LIVE_STATES, TRUNCATE_MARKER_ID, tombstone_row
from rules_cdc.source_position import mysql_position, ts_position

NOW = dt.datetime(2024, 11, 22, 8, 0, 0)
SCHEMA = load_settings().transaction_schema
Table = dict[int, dict[str, Any]]


def make_event(op: str, rule_id: int, position: str, *, paused: bool = False, disabled: bool = False) -> ChangeEvent:
    if op == "t":
        return ChangeEvent(TRUNCATE_MARKER_ID, Op.TRUNCATE, position, 1, None, None, None, position)
    if op == "d":
        return ChangeEvent(rule_id, Op.DELETE, position, 1, None, {"rule_id": rule_id}, None, position)
    state = "PAUSED" if paused else "ACTIVE"
    rule = parse_rule({**SEED, "ruleId": rule_id, "ruleState": state, "disabled": disabled}, SCHEMA)
    return ChangeEvent(rule_id, Op(op), position, 1, rule, None, {"ruleId": rule_id, "p": position}, position)


def view_of(table: Table) -> TableView:
    marker = table.get(TRUNCATE_MARKER_ID)
    return TableView(
        positions={rid: row["sourcePosition"] for rid, row in table.items()},
        live_rows={rid: row for rid, row in table.items() if row["ruleState"] in LIVE_STATES},
        watermark=Watermark(marker["sourcePosition"], marker["sourceTsMs"]) if marker else None,
    )


def model_merge(table: Table, plan: BatchPlan) -> Table:
    """The rules MERGE in memory: matched & newer -> update; not matched -> insert; truncate by source."""
    result = dict(table)
    for row in plan.rows:
        current = result.get(row["ruleId"])
        if current is None or row["sourcePosition"] > current["sourcePosition"]:
            result[row["ruleId"]] = row
    if plan.truncate_below is not None:
        in_batch = {row["ruleId"] for row in plan.rows}
        for rule_id, row in table.items():
            if rule_id not in in_batch and rule_id != TRUNCATE_MARKER_ID:
                if row["sourcePosition"] < plan.truncate_below.position:
                    result[rule_id] = tombstone_row(
                        rule_id,
                        source_position=plan.truncate_below.position,
                        source_op="t",
                        source_ts_ms=plan.truncate_below.ts_ms,
                        now=NOW,
                    )
    return result


def apply_in_batches(batches: list[list[ChangeEvent]]) -> Table:
    table: Table = {}
    for batch in batches:
        table = model_merge(table, plan_batch(batch, view_of(table), NOW))
    return table


@st.composite
def event_streams(draw: st.DrawFn) -> list[ChangeEvent]:
    """Up to 14 events over rules 1..4, each at a distinct position; c/u/r/d and the odd truncate."""
    count = draw(st.integers(1, 14))
    positions = draw(st.lists(st.integers(1, 10_000), min_size=count, max_size=count, unique=True))
    events = []
    for position in positions:
        op = draw(st.sampled_from(["c", "u", "u", "r", "d", "t"]))
        rule_id = draw(st.integers(1, 4))
        events.append(
            make_event(op, rule_id, ts_position(position), paused=draw(st.booleans()), disabled=draw(st.booleans()))
        )
    return events


def arrivals(events: list[ChangeEvent], seed: int) -> list[list[ChangeEvent]]:
    """The events shuffled, some duplicated, cut into batches: one way a stream might deliver them."""
    rng = random.Random(seed)
    delivered = events + [rng.choice(events) for _ in range(rng.randint(0, len(events)))]
    rng.shuffle(delivered)
    cuts = sorted(rng.sample(range(1, len(delivered)), min(len(delivered) - 1, rng.randint(0, 4))))
    return [delivered[a:b] for a, b in zip([0, *cuts], [*cuts, len(delivered)], strict=True)]


@settings(max_examples=300, deadline=None)
@given(event_streams(), st.integers(0, 2**32), st.integers(0, 2**32))
def test_any_delivery_order_converges_to_the_same_table(events: list[ChangeEvent], seed_a: int, seed_b: int) -> None:
    expected = final_rows(events, NOW)
    assert apply_in_batches(arrivals(events, seed_a)) == expected
    assert apply_in_batches(arrivals(events, seed_b)) == expected


def test_a_tombstone_resists_a_stale_create() -> None:
    create, delete = make_event("c", 1, ts_position(10)), make_event("d", 1, ts_position(20))
    table = apply_in_batches([[delete], [create]])
    assert table[1]["ruleState"] == "DELETED" and table[1]["sourcePosition"] == ts_position(20)
    revived = apply_in_batches([[delete], [create], [make_event("c", 1, ts_position(30))]])
    assert revived[1]["ruleState"] == "ACTIVE"
    disabled = apply_in_batches([[make_event("u", 1, ts_position(20), disabled=True)], [create]])
    assert disabled[1]["ruleState"] == "DISABLED" and disabled[1]["limit"] == SEED["limit"]


def test_a_truncate_tombstones_older_rules_even_those_arriving_after_it() -> None:
    truncate = make_event("t", 0, ts_position(50))
    table = apply_in_batches([[make_event("c", 1, ts_position(10))], [truncate], [make_event("c", 2, ts_position(5))]])
    assert {rid: (r["ruleState"], r["sourcePosition"], r["sourceOp"]) for rid, r in table.items()} == {
        1: ("DELETED", ts_position(50), "t"),
        2: ("DELETED", ts_position(50), "t"),
        TRUNCATE_MARKER_ID: ("DELETED", ts_position(50), "t"),
    }
    assert apply_in_batches([[truncate], [make_event("c", 3, ts_position(60))]])[3]["ruleState"] == "ACTIVE"


def test_the_plan_logs_applied_events_and_counts_stale_ones() -> None:
    old, new = make_event("c", 1, ts_position(10)), make_event("u", 1, ts_position(20), paused=True)
    plan = plan_batch([new, old, new], TableView(), NOW)
    assert [(e.rule_id, e.op, e.position, e.resulting_state) for e in plan.log] == [
        (1, "c", ts_position(10), "ACTIVE"),  # superseded within the batch: logged with its own position
        (1, "u", ts_position(20), "PAUSED"),
    ]
    assert [r["sourcePosition"] for r in plan.rows] == [ts_position(20)]
    again = plan_batch([old, new], view_of(model_merge({}, plan)), NOW)
    assert (again.log, len(again.stale)) == ((), 2)


def test_events_of_another_connector_kind_are_rejected() -> None:
    table = apply_in_batches([[make_event("c", 1, ts_position(10))]])
    foreign = make_event("u", 1, mysql_position("mysql-bin.000001", 4))
    plan = plan_batch([foreign, make_event("u", 2, ts_position(11))], view_of(table), NOW)
    assert [e for e, _ in plan.rejected] == [foreign] and "not comparable" in plan.rejected[0][1]
    # An empty table takes the kind of most of the batch's distinct events.
    first = plan_batch(
        [foreign, foreign, make_event("c", 2, ts_position(1)), make_event("c", 3, ts_position(2))], TableView(), NOW
    )
    assert [e for e, _ in first.rejected] == [foreign, foreign]  # every record of it is quarantined
