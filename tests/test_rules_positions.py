"""Source positions are taken only as their connector writes them; a stale change is visible, never only counted.

A forged position (``pg:::::``, 40 digits, an LSN at or beyond 2^64, a CLI position on a table fed by a database,
a source mixing two connectors' fields) is quarantined with its reason, the rule keeps its last good version, and
the next genuine database change of it applies. A change older than its rule's row that was never applied is
quarantined as "stale: position X is older than rule N's Y" (``rules rejected``, ``rules history``); a redelivery of
a change already applied is a duplicate and only counted. Pure checks first, then the real Delta tables.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from rules_cdc_support import (
    SEED,
    cli,
    records,
    reshaped,
    rule_event,
    sample,
    sample_lsns,
    sample_pg_position,
    table_rows,
    write_conf,
)

from pipelines.base.settings import Settings, load_settings
from pipelines.cli import main
from rules_cdc.apply_changes import apply_records, ensure_rules_tables
from rules_cdc.envelope import Op
from rules_cdc.parse_events import ChangeEvent, RawRecord, parse_records
from rules_cdc.plan_changes import TableView, Watermark, change_identity, split_stale
from rules_cdc.source_position import (
    U64,
    PositionError,
    check_position,
    pg_position,
    position_of,
    ts_position,
)

SCHEMA = load_settings().transaction_schema


UPDATE = "pg_update_schema_string"  # rule 1's limit to 2500000.50
LSN, LAST_COMMIT = sample_lsns(UPDATE)
SNAPSHOT = sample_pg_position("pg_snapshot_read_no_schema_string")  # rule 1 at 1000000
CLI = {"connector": "fraudlake-cli", "version": "fraudlake", "ts_ms": 1_700_000_000_000}


def _pg(lsn: int, last_commit: int | None = None) -> dict[str, Any]:
    first = "null" if last_commit is None else f'"{last_commit}"'
    return {"connector": "postgresql", "lsn": lsn, "sequence": f'[{first},"{lsn}"]'}


FORGED: dict[str, tuple[dict[str, Any], str]] = {
    "CLI position pg:::::": ({**CLI, "position": "pg:::::"}, "claims a pg position"),
    "CLI position of 40 digits": ({**CLI, "position": "9" * 40}, "is not a source position"),
    "CLI pg position of 40 digits": ({**CLI, "position": "pg:" + "9" * 40}, "claims a pg position"),
    "CLI ts position of 40 digits": ({**CLI, "position": "ts:" + "9" * 40}, "is not a source position"),
    "CLI ts position beyond a long": ({**CLI, "ts_ms": None, "position": "ts:" + str(2**63).zfill(20)}, "beyond"),
    "CLI position on a pg-fed table": (
        {**CLI, "position": f"{pg_position(LSN, LSN - 1)}+cli:{'1'.zfill(20)}"},
        "must never outrank the database",
    ),
    "CLI position with database fields": ({**CLI, "position": ts_position(1), "lsn": 5}, "database log fields"),
    "CLI ts position and ts_ms disagreeing": ({**CLI, "position": ts_position(1)}, "disagree"),
    "pg LSN of 2^64": (_pg(U64), "lsn 18446744073709551616 is outside 0 .. 18446744073709551615"),
    "pg LSN of 40 digits": (_pg(10**39), "is outside 0 .. 18446744073709551615"),
    "pg last commit LSN of 2^64": (_pg(LSN, U64), "beyond the 64-bit range of a PostgreSQL LSN"),
    "pg negative LSN": (_pg(-1), "is outside 0 .."),
    "pg sequence not ending with the LSN": ({**_pg(LSN), "sequence": '[null,"5"]'}, "does not end with"),
    "pg sequence of three": ({**_pg(LSN), "sequence": f'["1","2","{LSN}"]'}, "not a JSON array of two LSNs"),
    "pg sequence with numbers": ({**_pg(LSN), "sequence": f"[1,{LSN}]"}, "is not a decimal LSN"),
    "pg sequence with padding": ({**_pg(LSN), "sequence": f'["007","{LSN}"]'}, "is not a decimal LSN"),
    "pg without a sequence": ({**_pg(LSN), "sequence": None}, "without source.sequence"),
    "pg without an LSN": ({"connector": "postgresql", "ts_ms": 5}, "without source.lsn"),
    "pg with the CLI's position field": ({**_pg(LSN), "position": "ts:1"}, "is the fraudlake CLI's field"),
    "mixed kinds: lsn and binlog": ({**_pg(LSN), "file": "mysql-bin.000001", "pos": 4}, "mixes a PostgreSQL lsn"),
    "mixed kinds: mysql with an lsn": ({"connector": "mysql", "lsn": 5}, "without source.file/pos"),
    "mysql file index beyond 2^31": ({"connector": "mysql", "file": f"b.{2**31}", "pos": 4}, "beyond MySQL's"),
    "mysql pos beyond a long": ({"connector": "mysql", "file": "b.000001", "pos": 2**63}, "pos 9223372036854775808"),
    "mysql short file index": ({"connector": "mysql", "file": "b.1", "pos": 4}, "six or more digits"),
    "ts beyond a long": ({"ts_ms": 2**63}, "ts_ms 9223372036854775808 is outside"),
}


@pytest.mark.parametrize("name", sorted(FORGED))
def test_a_forged_position_is_refused_with_its_reason(name: str) -> None:
    source, reason = FORGED[name]
    with pytest.raises(PositionError) as raised:
        position_of(source, 1)
    assert reason in str(raised.value), str(raised.value)
    assert "\n" not in str(raised.value) and len(str(raised.value)) < 400


def test_positions_at_the_edge_of_their_range_are_accepted() -> None:
    top = U64 - 1
    assert position_of(_pg(top, top), 1) == f"pg:{top}:{top}"
    assert position_of({"connector": "mysql", "file": "mysql-bin.2147483647", "pos": 2**63 - 1, "row": 2**31 - 1}, 1)
    assert position_of({**CLI, "ts_ms": 2**63 - 1, "position": ts_position(2**63 - 1)}, 1) == ts_position(2**63 - 1)
    assert check_position(f"{pg_position(5)}+cli:{'7'.zfill(20)}", cli_suffix=True)  # rules delete-all's own
    with pytest.raises(PositionError, match="made only by fraudlake rules delete-all"):
        check_position(f"{pg_position(5)}+cli:{'7'.zfill(20)}")


def test_positions_as_text_are_refused_where_the_connector_writes_numbers() -> None:
    event = json.loads(sample("pg_update_no_schema_double"))
    for name, value in (("lsn", str(LSN)), ("lsn", float(LSN)), ("lsn", True), ("ts_ms", "1")):
        forged = {**event, "source": {**event["source"], name: value}}
        batch = parse_records([RawRecord(json.dumps(forged), "kafka:rules/0/1")], SCHEMA)
        assert batch.events == [] and f"source.{name}" in batch.rejected[0].reason, (name, value)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="pgmysqlt:+cli0123456789", max_size=48) | st.from_regex(r"\Ats:[0-9]{20}\Z"))
def test_a_cli_position_is_taken_only_as_the_publisher_writes_it(position: str) -> None:
    """Whatever the text, a CLI event's position is accepted only as ``ts:<20 digits>`` below 2^63."""
    exact = re.fullmatch(r"ts:([0-9]{20})", position) is not None and int(position[3:]) < 2**63
    try:
        accepted = position_of({"connector": "fraudlake-cli", "position": position}, 1) == position
    except PositionError:
        accepted = False
    assert accepted == exact


@settings(max_examples=300, deadline=None)
@given(
    st.integers(-(2**70), 2**70) | st.sampled_from([0, U64 - 1, U64, 2**63]),
    st.none() | st.integers(-1, 2**66).map(str) | st.text(max_size=22),
)
def test_an_accepted_pg_position_never_outranks_the_largest_lsn(lsn: int, last_commit: str | None) -> None:
    sequence = json.dumps([last_commit, str(lsn)])
    try:
        position = position_of({"connector": "postgresql", "lsn": lsn, "sequence": sequence}, 1)
    except PositionError:
        assert not (0 <= lsn < U64) or last_commit is not None
        return
    assert 0 <= lsn < U64 and check_position(position) == position
    assert position <= pg_position(U64 - 1, U64 - 1)


def _event(rule_id: int, position: str, op: Op = Op.UPDATE) -> ChangeEvent:
    return ChangeEvent(rule_id, op, position, 1, None, None, None, f"test:{position}")


def test_stale_events_are_duplicates_only_when_their_change_was_applied() -> None:
    view = TableView(positions={1: pg_position(200, 150), -1: pg_position(50)}, watermark=Watermark(pg_position(50), 1))
    applied = _event(1, pg_position(100, 90))
    resent = _event(1, pg_position(100))  # a connector restart re-sends it with sequence[0] null
    never = _event(1, pg_position(120, 110))
    gone = _event(2, pg_position(40))  # older than the truncate, rule 2 has no row
    logged = {change_identity(1, pg_position(100, 90), "u")}
    duplicates, rejected = split_stale([applied, resent, never, gone], view, logged)
    assert duplicates == (applied, resent)
    assert [(e, reason) for e, reason in rejected] == [
        (never, f"stale: position {never.position} is older than rule 1's {pg_position(200, 150)}"),
        (gone, f"stale: position {gone.position} is older than the truncate of every rule at {pg_position(50)}"),
    ]


# ---- through the real Delta tables ---------------------------------------------------------------------------------


def _rule_1(spark: SparkSession, settings: Settings) -> tuple[Decimal, str]:
    row = next(r for r in table_rows(spark, settings, "rules") if r["ruleId"] == 1)
    return row["limit"], row["sourcePosition"]


def test_forged_positions_are_quarantined_and_the_next_genuine_change_applies(
    spark: SparkSession, settings: Settings
) -> None:
    ensure_rules_tables(spark, settings)
    apply_records(spark, settings, records([sample("pg_snapshot_read_no_schema_string")], "snapshot"))
    forged_sources = {
        "CLI position pg:::::": {**CLI, "position": "pg:::::", "ts_ms": None},
        "CLI pg position of 40 digits": {**CLI, "position": "pg:" + "9" * 40, "ts_ms": None},
        "pg LSN of 40 digits": _pg(10**39),
        "pg LSN of 2^64": _pg(U64),
        "CLI position on a pg-fed table": {**CLI, "position": f"{SNAPSHOT}+cli:{'9' * 20}", "ts_ms": None},
        "mixed kinds: lsn and binlog": {**_pg(LSN + 8), "file": "mysql-bin.000001", "pos": 4},
        "mixed kinds: a CLI ts position on a pg-fed table": {**CLI, "position": ts_position(9 * 10**18), "ts_ms": None},
    }
    names = list(forged_sources)
    lines = [reshaped(UPDATE, source=forged_sources[n], replace_source=True, limit_value="1") for n in names]
    result = apply_records(spark, settings, records(lines, "forged"))
    assert (result.applied, result.quarantined) == (0, len(names))
    quarantine = {q["sourceOffset"]: q for q in table_rows(spark, settings, "quarantine")}
    reasons = {name: quarantine[f"file:/forged.jsonl:{n}"]["reason"] for n, name in enumerate(names, start=1)}
    assert all(quarantine[f"file:/forged.jsonl:{n}"]["rawPayload"] == lines[n - 1] for n in range(1, len(names) + 1))
    assert "claims a pg position" in reasons["CLI position pg:::::"]
    assert "claims a pg position" in reasons["CLI pg position of 40 digits"]
    assert "lsn 1000000000000000000000000000000000000000 is outside" in reasons["pg LSN of 40 digits"]
    assert "lsn 18446744073709551616 is outside" in reasons["pg LSN of 2^64"]
    assert "must never outrank the database" in reasons["CLI position on a pg-fed table"]
    assert "mixes a PostgreSQL lsn" in reasons["mixed kinds: lsn and binlog"]
    assert reasons["mixed kinds: a CLI ts position on a pg-fed table"].startswith("source position kind 'ts' does not")
    assert _rule_1(spark, settings) == (Decimal("1000000.000000"), SNAPSHOT)  # the last good version stays

    genuine = apply_records(spark, settings, records([sample(UPDATE)], "genuine"))
    assert (genuine.applied, genuine.stale, genuine.quarantined) == (1, 0, 0)
    assert _rule_1(spark, settings) == (Decimal("2500000.500000"), pg_position(LSN, LAST_COMMIT))


def test_a_stale_replay_is_quarantined_with_its_reason_and_a_redelivery_is_only_counted(
    spark: SparkSession, settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ensure_rules_tables(spark, settings)
    applied = [sample("pg_snapshot_read_no_schema_string"), sample(UPDATE)]
    apply_records(spark, settings, records(applied, "applied"))
    held = pg_position(LSN, LAST_COMMIT)
    # An older change of rule 1 that never reached the lake (a transaction the lake never saw, replayed now), among
    # redeliveries of what it applied: the same change in another converter format, and one re-sent after a
    # connector restart (sequence[0] null).
    older = reshaped(UPDATE, source=_pg(LSN - 720, LSN - 1000), limit_value="7")
    replay = [
        older,
        sample("pg_update_no_schema_double"),
        reshaped(UPDATE, source=_pg(LSN)),
        *applied,
    ]
    result = apply_records(spark, settings, records(replay, "replay"))
    assert (result.applied, result.duplicates, result.stale, result.quarantined) == (0, 3, 1, 1)
    assert "1 quarantined (1 stale)" in result.summary()
    (row,) = table_rows(spark, settings, "quarantine")
    reason = f"stale: position {pg_position(LSN - 720, LSN - 1000)} is older than rule 1's {held}"
    assert (row["reason"], row["rawPayload"], row["sourceOffset"]) == (reason, older, "file:/replay.jsonl:1")
    assert _rule_1(spark, settings) == (Decimal("2500000.500000"), held)
    assert len(table_rows(spark, settings, "rule_changes")) == 2  # the log holds what was applied, once

    conf = write_conf(settings, tmp_path)
    code, out = cli(capsys, settings, conf, "rules", "rejected")
    assert code == 0 and reason in out and "quarantined rule changes, newest first (1;" in out
    code, out = cli(capsys, settings, conf, "rules", "history", "1")
    assert code == 0 and "refused changes of rule 1 (1;" in out and reason in out
    code, out = cli(capsys, settings, conf, "rules", "list")
    assert code == 0 and "rejected changes" not in out  # stale: never pending, the rule has moved past it
    (listed,) = json.loads(cli(capsys, settings, conf, "rules", "rejected", "--rule", "1", "--json")[1])
    assert (listed["rule_id"], listed["reason"]) == (1, reason)


def test_cli_edits_of_a_table_fed_by_a_database_are_refused_without_one(
    spark: SparkSession, settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ensure_rules_tables(spark, settings)
    apply_records(spark, settings, records([sample("pg_snapshot_read_no_schema_string")], "snapshot"))
    conf = write_conf(settings, tmp_path)
    capsys.readouterr()
    assert main(["rules", "pause", "1", "--conf", str(conf), "--lakehouse", settings.lakehouse_root]) == 2
    assert "fed by a database (pg positions): write the change to the rules database" in capsys.readouterr().err
    rule = tmp_path / "rule.json"
    rule.write_text(json.dumps({**SEED, "limit": 5}))
    assert main(["rules", "upsert", str(rule), "--conf", str(conf), "--lakehouse", settings.lakehouse_root]) == 2
    assert "fed by a database" in capsys.readouterr().err
    assert _rule_1(spark, settings) == (Decimal("1000000.000000"), SNAPSHOT)


def test_a_cli_table_takes_cli_events_and_delete_all_on_it_is_a_ts_truncate(
    spark: SparkSession, settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ensure_rules_tables(spark, settings)
    apply_records(spark, settings, records([rule_event("c", 1, 1_700_000_000_000, SCHEMA)], "cli"))
    code, out = cli(capsys, settings, write_conf(settings, tmp_path), "rules", "delete-all")
    assert code == 0 and "1 applied (2 change-log rows)" in out
    marker = next(r for r in table_rows(spark, settings, "rules") if r["ruleId"] == -1)
    assert re.fullmatch(r"ts:\d{20}", marker["sourcePosition"])
