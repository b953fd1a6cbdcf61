"""What the real PostgreSQL connector writes, and what the hand-written samples had wrong (no Spark, no services).

The samples were regenerated from Debezium 3.3 (tests/test_debezium_modes.py). Against them, the parser had to
learn: the table's own ``updated_at`` column is not a rule field; a delete under REPLICA IDENTITY DEFAULT carries
only the key, the other NOT NULL columns filled with type defaults ("" / 0 / 1970-01-01), in whatever decimal
encoding; an UPDATE under DEFAULT has no ``before``; an unchanged TOASTed value arrives as a placeholder.
"""

from __future__ import annotations

import json
from decimal import Decimal

from rules_cdc_support import sample, sample_record

from pipelines.base.settings import Settings
from rules_cdc.envelope import Op
from rules_cdc.parse_events import UNAVAILABLE, RawRecord, parse_record, parse_records
from rules_cdc.rule_model import RuleState


def _payload(name: str) -> dict[str, object]:
    document = json.loads(sample(name))
    payload: dict[str, object] = document["payload"] if set(document) == {"schema", "payload"} else document
    return payload


def test_updated_at_is_the_database_s_own_column_kept_in_the_row_not_validated(base_settings: Settings) -> None:
    event = parse_record(sample_record("pg_create_no_schema_precise"), base_settings.transaction_schema)
    assert event is not None and event.rule is not None
    assert event.after is not None and "updated_at" in event.after  # the change log keeps the row as it came
    assert event.rule.limit == Decimal(5) and event.rule.counts_transactions
    # Any other column the model does not know is still refused: a renamed column must not pass silently.
    payload = _payload("pg_create_no_schema_precise")
    payload["after"] = {**payload["after"], "updated_by": "analyst-7"}  # type: ignore[dict-item]
    batch = parse_records([RawRecord(json.dumps(payload), "o")], base_settings.transaction_schema)
    assert len(batch.rejected) == 1 and "updated_by: Extra inputs are not permitted" in batch.rejected[0].reason


def test_a_delete_under_replica_identity_default_needs_only_the_key(base_settings: Settings) -> None:
    payload = _payload("pg_delete_no_schema")
    before = payload["before"]
    assert isinstance(before, dict)
    assert (before["aggregate_field_name"], before["window_minutes"]) == ("", 0)  # defaults, not the rule
    event = parse_record(sample_record("pg_delete_no_schema"), base_settings.transaction_schema)
    assert event is not None and (event.rule_id, event.op, event.state) == (2, Op.DELETE, RuleState.DELETED)
    # A before column that cannot be decoded (a scaled decimal without its schema) does not lose the delete.
    payload["before"] = {**before, "limit_value": "BfXhAA=="}
    event = parse_record(RawRecord(json.dumps(payload), "o"), base_settings.transaction_schema)
    assert event is not None and event.rule_id == 2 and event.before is not None
    assert event.before["limit_value"] == "BfXhAA=="  # kept as it came, for the change log


def test_an_update_under_replica_identity_default_has_no_before(base_settings: Settings) -> None:
    assert _payload("pg_update_schema_double")["before"] is None
    assert _payload("pg_update_schema_string")["before"] is not None  # written under REPLICA IDENTITY FULL
    for name in ("pg_update_schema_double", "pg_update_schema_string"):
        assert parse_record(sample_record(name), base_settings.transaction_schema) is not None


def test_an_unchanged_toasted_value_is_quarantined_with_the_fix(base_settings: Settings) -> None:
    payload = _payload("pg_update_no_schema_double")
    payload["after"] = {**payload["after"], "filter": UNAVAILABLE}  # type: ignore[dict-item]
    batch = parse_records([RawRecord(json.dumps(payload), "kafka:r/0/1")], base_settings.transaction_schema)
    assert batch.events == [] and len(batch.rejected) == 1
    reason = batch.rejected[0].reason
    assert reason.startswith("after.filter: Debezium could not read the unchanged value")
    assert "REPLICA IDENTITY FULL" in reason


def test_snapshot_markers_and_variable_scale_decimals_as_the_connector_writes_them(base_settings: Settings) -> None:
    schema = base_settings.transaction_schema
    for name in ("pg_snapshot_read_no_schema_string", "pg_snapshot_read_schema_precise"):
        source = _payload(name)["source"]
        assert isinstance(source, dict) and source["snapshot"] in ("true", "first", "last")
        event = parse_record(sample_record(name), schema)
        assert event is not None and event.rule is not None and event.rule.limit == Decimal(1000000)
    # numeric without a declared scale: precise mode writes {scale, value}, decodable with or without the schema
    after = _payload("pg_create_no_schema_precise")["after"]
    assert isinstance(after, dict) and after["limit_value"] == {"scale": 0, "value": "BQ=="}
