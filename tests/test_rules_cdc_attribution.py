"""Attribution in the CDC path without a broker: the columns are kept, never rule content, and reach the log.

A Debezium record of ``fraud_rules`` with ``changed_by``/``approved_by``/``change_reason``/``proposal_id``
(conf/rulesdb/005_attribution.sql) parses to the same rule as without them; a change of the reason alone gives
the same rules-table row and engine state id, and its change-log entry carries the names; a row without them is
unattributed in ``rules history``.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from rules_cdc_support import SAMPLES, reshaped

from pipelines.base.settings import load_settings
from rules_cdc.parse_events import Attribution, RawRecord, parse_record
from rules_cdc.plan_changes import TableView, plan_batch
from rules_cdc.rule_rows import RULE_FIELDS
from rules_cdc.rules_views import history_text, parse_at

SCHEMA = load_settings().transaction_schema
NOW = dt.datetime(2024, 11, 22, 8, 0, 0)
WHO = {"changed_by": "alice", "approved_by": "bob", "change_reason": "tune after the promo", "proposal_id": 12}


def _event(name: str, lsn: int, **after: object):  # type: ignore[no-untyped-def]
    source = {"lsn": lsn, "sequence": json.dumps(["30777200", str(lsn)])}
    event = parse_record(RawRecord(reshaped(name, source=source, **after), f"file:{name}:{lsn}"), SCHEMA)
    assert event is not None
    return event


def test_attribution_columns_are_kept_but_are_not_rule_content() -> None:
    plain = _event("pg_update_no_schema_double", 40_000_000)
    attributed = _event("pg_update_no_schema_double", 40_000_100, **WHO)
    assert attributed.rule == plain.rule  # validated without them: the same rule, the same engine state id
    assert attributed.rule is not None and plain.rule is not None
    assert attributed.rule.state_id == plain.rule.state_id
    assert attributed.attribution == Attribution("alice", "bob", "tune after the promo", 12)
    assert json.loads(attributed.after_json or "{}")["change_reason"] == "tune after the promo"  # kept in the log
    assert plain.attribution == Attribution()
    # A value of the wrong type is dropped, never guessed (and never fails the rule).
    odd = _event("pg_update_no_schema_double", 40_000_200, changed_by=7, proposal_id="12")
    assert odd.attribution == Attribution() and odd.rule == plain.rule


def test_a_reason_only_change_keeps_the_rules_row_and_logs_who() -> None:
    first = _event("pg_update_no_schema_double", 40_000_000, **WHO)
    reason_only = _event("pg_update_no_schema_double", 40_000_100, **{**WHO, "change_reason": "typo fixed"})
    before = plan_batch([first], TableView(), NOW)
    row = before.rows[0]
    view = TableView(positions={first.rule_id: first.position}, live_rows={first.rule_id: row})
    after = plan_batch([reason_only], view, NOW)
    assert [e.attribution.change_reason for e in after.log] == ["typo fixed"]
    assert {k: after.rows[0][k] for k in RULE_FIELDS} == {k: row[k] for k in RULE_FIELDS}
    assert before.log[0].attribution.approved_by == "bob"


def test_deletes_and_truncates_are_unattributed_in_the_log() -> None:
    name = "pg_delete_no_schema"
    assert (SAMPLES / f"{name}.json").exists()
    delete = parse_record(RawRecord((SAMPLES / f"{name}.json").read_text(), "file:d:1"), SCHEMA)
    assert delete is not None and delete.attribution == Attribution()


def test_history_text_says_who_and_unattributed() -> None:
    rows = [
        {
            "appliedAt": NOW,
            "ruleId": 7,
            "op": "u",
            "resultingState": "ACTIVE",
            "rulesVersion": 3,
            "after": "{}",
            "changedBy": "alice",
            "approvedBy": "bob",
            "changeReason": "tune",
        },
        {
            "appliedAt": NOW,
            "ruleId": 7,
            "op": "u",
            "resultingState": "ACTIVE",
            "rulesVersion": 4,
            "after": "{}",
            "changedBy": None,
            "approvedBy": None,
            "changeReason": None,
        },
    ]
    lines = history_text(rows).splitlines()
    assert "alice" in lines[1] and "bob" in lines[1] and "tune" in lines[1]
    assert "unattributed" in lines[2] and "alice" not in lines[2]


def test_history_at_takes_dates_times_and_offsets() -> None:
    assert parse_at("2024-11-03") == dt.datetime(2024, 11, 3, 23, 59, 59, 999999)
    assert parse_at("2024-11-03T14:00:00Z") == dt.datetime(2024, 11, 3, 14)
    assert parse_at("2024-11-03T16:00:00+02:00") == dt.datetime(2024, 11, 3, 14)
    with pytest.raises(ValueError, match="expected an ISO date or time"):
        parse_at("the 3rd")
