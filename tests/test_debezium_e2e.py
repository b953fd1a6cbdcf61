"""The real CDC path end to end: SQL on PostgreSQL -> Debezium (Kafka Connect) -> rules topic -> rules CDC job ->
Delta ``rules`` -> the engine's next micro-batch (issue #14).

Real parts only: the session's PostgreSQL cluster (a database of this module's own), Kafka Connect worker with the
Debezium connector of conf/connect/rules-postgres.properties, and KRaft broker; the rules CDC job and the engine
run as continuous streaming queries in the session's Spark, as ``fraudlake rules run --source kafka`` and
``fraudlake run`` would. One connector, scenarios in sequence (each test starts from the state the one before
left): the initial snapshot; inserts, updates, pause, disable, delete, two updates in one transaction; an approved
proposal's author, approver and reason in the change log, a reason-only change, an unattributed SQL edit; REPLICA
IDENTITY DEFAULT vs FULL; rows the database accepts and the model refuses; Connect killed mid-stream; the
engine's rules pinned while Connect is down, and a SQL change in force from the next micro-batch, with its
latency. Every wait polls with a deadline.

Example::

    make test PYTEST_ARGS="tests/test_debezium_e2e.py -x -q -s"
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from debezium_support import cdc_settings, own_database, running_connector, topic_records
from engine_fixtures import json_line
from polling import wait_for
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from reliability_support import record_outcome
from rules_cdc_support import cli, table_rows, write_conf

from delta_tables.rules import RULE_CONTENT_COLUMNS
from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.chaos.progress import delta_version
from pipelines.engine.job import EngineRun, start_engine
from pipelines.local.connect_worker import ConnectWorker
from pipelines.local.kafka_broker import KafkaBroker
from pipelines.local.rules_database import RulesDb
from rules_cdc.apply_changes import ensure_rules_tables
from rules_cdc.parse_events import rule_columns
from rules_cdc.proposals import approve, connector, propose
from rules_cdc.rule_model import RuleValidationError, parse_rule
from rules_cdc.rule_rows import TRUNCATE_MARKER_ID, rule_to_row
from rules_cdc.streaming_job import start_rules_job

pytestmark = pytest.mark.kafka

CONTENT = ("ruleState", *RULE_CONTENT_COLUMNS, "disabled")
INSERT = (
    "INSERT INTO fraud_rules (rule_id, rule_name, grouping_key_names, aggregate_field_name, "
    "aggregator_function_type, limit_operator_type, limit_value, window_minutes) VALUES "
)


@dataclass
class Stack:
    settings: Settings
    db: RulesDb
    worker: ConnectWorker
    connector: dict[str, Any]
    bootstrap: str
    spark: SparkSession
    conf: Path
    queries: list[StreamingQuery] = field(default_factory=list)
    refused: set[int] = field(default_factory=set)  # rule ids whose newest DB row the lake rightly refused
    read: dict[str, tuple[int, list[dict[str, Any]]]] = field(default_factory=dict)  # table -> (version, rows)

    def rows(self, table: str) -> list[dict[str, Any]]:
        """A lake table's rows at its newest version, read again only once a commit has landed: a wait polling a
        table the jobs under test write costs a listing of its log per poll, not a Spark query beside them."""
        version = delta_version(self.settings.table_path(table))
        if version < 0:
            return []
        if self.read.get(table, (-1, []))[0] != version:
            self.read[table] = (version, table_rows(self.spark, self.settings, table, versionAsOf=str(version)))
        return self.read[table][1]


@pytest.fixture(scope="module")
def stack(
    spark: SparkSession,
    rulesdb: RulesDb,
    connect_worker: ConnectWorker,
    kafka_broker: KafkaBroker,
    base_settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    folder = tmp_path_factory.mktemp("debezium-e2e")
    settings = cdc_settings(base_settings, folder, bootstrap=kafka_broker.bootstrap, rules_topic="e2e-rules")
    db = own_database(rulesdb, "fraudlake_e2e")
    samples = json.loads((REPO_ROOT / "conf" / "sample_rules.json").read_text())
    db.upsert_rules(parse_rule(r, settings.transaction_schema) for r in samples)  # before the connector: a snapshot
    with running_connector(connect_worker, settings, db, name="e2e-rules") as config:
        ensure_rules_tables(spark, settings)
        conf = write_conf(settings, folder)
        result = Stack(settings, db, connect_worker, config, kafka_broker.bootstrap, spark, conf)
        result.queries.append(start_rules_job(spark, settings, source="kafka", once=False))
        try:
            yield result
        finally:
            for query in result.queries:
                query.stop()


# ---- the lake against the database ---------------------------------------------------------------------------


def db_rows(db: RulesDb) -> dict[int, dict[str, Any]]:
    out = db.sql("SELECT coalesce(json_agg(row_to_json(r)), '[]') FROM fraud_rules r")
    return {int(row["rule_id"]): row for row in json.loads(out)}


def expected_lake(stack: Stack) -> dict[int, dict[str, Any]]:
    """What the rules table must hold for each rule the database has (refused rows aside)."""
    expected = {}
    for rule_id, row in db_rows(stack.db).items():
        if rule_id in stack.refused:
            continue
        try:
            rule = parse_rule(rule_columns(row), stack.settings.transaction_schema)
        except RuleValidationError:
            continue
        full = rule_to_row(rule, source_position="", source_op="", source_ts_ms=None)
        expected[rule_id] = {k: full[k] for k in CONTENT}
    return expected


def lake(stack: Stack) -> dict[int, dict[str, Any]]:
    rows = stack.rows("rules")
    return {r["ruleId"]: r for r in rows if r["ruleId"] != TRUNCATE_MARKER_ID}


def lake_matches_db(stack: Stack) -> bool:
    """Every database rule's content and state is in the lake; every other lake rule is a DELETED tombstone."""
    expected, rows = expected_lake(stack), lake(stack)
    for rule_id, content in expected.items():
        row = rows.get(rule_id)
        if row is None or {k: row[k] for k in CONTENT} != content:
            return False
    live_elsewhere = [
        i for i, r in rows.items() if i not in expected and i not in stack.refused and r["ruleState"] != "DELETED"
    ]
    return not live_elsewhere


def history_limits(stack: Stack, rule_id: int) -> list[str]:
    """The limits of every applied change of a rule, by source position (the change log)."""
    rows = sorted(
        (r for r in stack.rows("rule_changes") if r["ruleId"] == rule_id),
        key=lambda r: r["sourcePosition"],
    )
    return [json.loads(r["after"])["limit_value"] for r in rows if r["after"]]


# ---- scenarios, in order -------------------------------------------------------------------------------------


def test_the_initial_snapshot_loads_every_existing_rule(stack: Stack) -> None:
    wait_for("the eight sample rules in the lake", lambda: lake_matches_db(stack))
    rows = lake(stack)
    assert sorted(rows) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert rows[8]["baseline"] and rows[7]["aggregatorFunctionType"] == "COUNT_DISTINCT"  # the newer kinds too
    assert {r["sourceOp"] for r in rows.values()} == {"r"}  # snapshot reads
    assert all(r["sourcePosition"].startswith("pg:") for r in rows.values())


def test_insert_update_pause_disable_delete_and_a_transaction_reach_the_rules_table(stack: Stack) -> None:
    db = stack.db
    db.sql(INSERT + "(17, 'one big card payment', '{payerId}', 'paymentAmount', 'MAX', 'GREATER', 1000, 1)")
    db.sql("UPDATE fraud_rules SET limit_value = 16 WHERE rule_id = 3")
    db.sql("UPDATE fraud_rules SET rule_state = 'PAUSED' WHERE rule_id = 2")
    db.sql("UPDATE fraud_rules SET disabled = true WHERE rule_id = 6")
    db.sql("DELETE FROM fraud_rules WHERE rule_id = 5")
    db.sql(
        "BEGIN; UPDATE fraud_rules SET limit_value = 5 WHERE rule_id = 4; "
        "UPDATE fraud_rules SET limit_value = 6 WHERE rule_id = 4; COMMIT"
    )
    wait_for("the lake to match the database", lambda: lake_matches_db(stack))
    rows = lake(stack)
    assert {i: r["ruleState"] for i, r in rows.items()} == {
        1: "ACTIVE",
        2: "PAUSED",
        3: "ACTIVE",
        4: "ACTIVE",
        5: "DELETED",
        6: "DISABLED",
        7: "ACTIVE",
        8: "ACTIVE",
        17: "ACTIVE",
    }
    assert rows[6]["limit"] is not None and rows[5]["limit"] is None  # DISABLED keeps its content, DELETED not
    # Both updates of one transaction, in commit order (the change log is appended right after the MERGE).
    wait_for("rule 4's two updates in the change log", lambda: history_limits(stack, 4)[-2:] == ["5", "6"])


def test_who_approved_and_why_travel_to_the_change_log_and_a_sql_edit_is_unattributed(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    db, schema = stack.db, stack.settings.transaction_schema
    info = f"host=127.0.0.1 port={db.effective_port()} dbname={db.database} user={db.role_name('console')}"
    connect = connector(info, password=db.secrets.password("console"))
    row = rule_columns(db_rows(db)[3])
    proposal = propose(
        connect, "update", rule=parse_rule({**row, "limit_value": "17"}, schema), proposed_by="alice", reason="tune"
    )
    assert approve(connect, proposal.id, approver="bob", note="ok") == "updated rule 3"

    def changes() -> list[dict[str, Any]]:
        rows = (r for r in stack.rows("rule_changes") if r["ruleId"] == 3)
        return sorted(rows, key=lambda r: r["sourcePosition"])

    wait_for("the approved change in the change log", lambda: changes()[-1]["changedBy"] == "alice")
    approved = changes()[-1]
    assert (approved["approvedBy"], approved["changeReason"], approved["proposalId"]) == ("bob", "tune", proposal.id)
    content_before = {k: lake(stack)[3][k] for k in CONTENT}
    cut = dt.datetime.now(dt.UTC).replace(tzinfo=None)

    # The reason alone: logged with its new reason, the rule (what the engine evaluates and keys state on) unchanged.
    db.sql("UPDATE fraud_rules SET change_reason = 'tune: the promo ended', changed_by = 'alice' WHERE rule_id = 3")
    wait_for("the reason-only change logged", lambda: changes()[-1]["changeReason"] == "tune: the promo ended")
    assert {k: lake(stack)[3][k] for k in CONTENT} == content_before
    assert changes()[-1]["approvedBy"] is None  # not named by that statement: cleared, never inherited

    # An edit typed in SQL that says nothing of who: unattributed, not alice's.
    db.sql("UPDATE fraud_rules SET limit_value = 18 WHERE rule_id = 3")
    wait_for("the SQL edit in the change log", lambda: history_limits(stack, 3)[-1] == "18")
    assert (changes()[-1]["changedBy"], changes()[-1]["changeReason"]) == (None, None)

    code, out = cli(capsys, stack.settings, stack.conf, "rules", "history", "--rule", "3")
    assert code == 0
    lines = [line for line in out.splitlines() if " 3  u " in line]
    assert "alice" in lines[-3] and "bob" in lines[-3] and "tune" in lines[-3], out
    assert "unattributed" in lines[-1] and "alice" not in lines[-1], out
    # Who made rule 3 what it was at the cut: alice, approved by bob, one row.
    code, out = cli(capsys, stack.settings, stack.conf, "rules", "history", "--rule", "3", "--at", cut.isoformat())
    body = out.splitlines()[1:]
    assert code == 0 and len(body) == 1 and "alice" in body[0] and "bob" in body[0], out


def test_replica_identity_default_and_full_give_the_same_rules(stack: Stack) -> None:
    db = stack.db

    def changes(base: int) -> None:
        for n in (1, 2, 3):
            db.sql(INSERT + f"({base + n}, 'identity {n}', '{{payerId}}', 'paymentAmount', 'SUM', 'GREATER', 100, 5)")
        db.sql(f"UPDATE fraud_rules SET limit_value = 250.5 WHERE rule_id = {base + 1}")
        db.sql(f"UPDATE fraud_rules SET rule_state = 'PAUSED' WHERE rule_id = {base + 2}")
        db.sql(f"UPDATE fraud_rules SET disabled = true WHERE rule_id = {base + 3}")
        db.sql(f"UPDATE fraud_rules SET disabled = false, window_minutes = 9 WHERE rule_id = {base + 3}")
        db.sql(f"DELETE FROM fraud_rules WHERE rule_id = {base + 2}")

    changes(100)
    db.sql("ALTER TABLE fraud_rules REPLICA IDENTITY FULL")
    try:
        changes(200)
    finally:
        db.sql("ALTER TABLE fraud_rules REPLICA IDENTITY DEFAULT")
    wait_for("the lake to match the database", lambda: lake_matches_db(stack))
    rows = lake(stack)

    def content(rule_id: int) -> dict[str, Any]:
        return {k: v for k, v in rows[rule_id].items() if k in (*CONTENT, "sourceOp")}

    for n in (1, 2, 3):
        assert content(100 + n) == content(200 + n), n
    assert [rows[100 + n]["ruleState"] for n in (1, 2, 3)] == ["ACTIVE", "DELETED", "ACTIVE"]


def test_rows_the_database_accepts_and_the_model_refuses_are_quarantined_and_listed(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    db, settings = stack.db, stack.settings
    before = lake(stack)[3]
    db.sql("UPDATE fraud_rules SET window_minutes = 0 WHERE rule_id = 3")
    db.sql(INSERT + "(18, 'median spend', '{payerId}', 'paymentAmount', 'MEDIAN', 'GREATER', 10, 5)")
    stack.refused.update({3, 18})

    def rejected() -> list[dict[str, Any]]:
        rows = [q for q in stack.rows("quarantine") if q["source"] == "rules_cdc"]
        return rows if len(rows) >= 2 else []

    quarantined = wait_for("two quarantined rule changes", rejected)
    reasons = sorted(q["reason"] for q in quarantined)
    assert len(reasons) == 2
    assert reasons[0].startswith("rule 18: aggregator_function_type: Input should be 'SUM'")
    assert reasons[1].startswith("rule 3: window_minutes: Input should be greater than or equal to 1")
    assert all(q["rawPayload"] and q["sourceOffset"].startswith("kafka:") for q in quarantined)
    now = lake(stack)
    assert {k: now[3][k] for k in CONTENT} == {k: before[k] for k in CONTENT}  # the last good version stays
    assert 18 not in now
    code, out = cli(capsys, settings, stack.conf, "rules", "list")
    assert code == 0 and "rejected changes (2;" in out, out
    assert "rule 3: window_minutes" in out and "rule 18: aggregator_function_type" in out

    db.sql("UPDATE fraud_rules SET window_minutes = 7 WHERE rule_id = 3")  # the analyst fixes rule 3
    stack.refused.discard(3)
    wait_for("rule 3's fix in the lake", lambda: lake(stack)[3]["windowMinutes"] == 7)
    code, out = cli(capsys, settings, stack.conf, "rules", "list")
    assert "rejected changes (1;" in out and "rule 3: window_minutes" not in out, out
    db.sql("DELETE FROM fraud_rules WHERE rule_id = 18")
    stack.refused.discard(18)
    record_outcome(
        "rules DB rows the model refuses (window 0, unknown aggregate), real Debezium",
        "bad input",
        records_in=2,
        applied=0,
        quarantined=2,
        outcome="quarantined with reasons; last good rule 3 kept; listed by `rules list` until fixed",
    )


def test_connect_killed_mid_stream_loses_no_change_and_duplicates_are_harmless(stack: Stack) -> None:
    db, worker = stack.db, stack.worker
    started = time.monotonic()
    updates, done = 40, threading.Event()
    progress: list[int] = []

    def write() -> None:
        try:
            for n in range(1, updates + 1):
                db.sql(f"UPDATE fraud_rules SET limit_value = {2000 + n} WHERE rule_id = 17")
                progress.append(n)
                time.sleep(0.05)
        finally:
            done.set()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    wait_for("a third of the updates", lambda: len(progress) >= updates // 3, every=0.05)
    worker.kill()  # SIGKILL: no offset flush
    done.wait(120)
    db.sql(INSERT + "(19, 'made while Connect was down', '{payerId}', 'paymentAmount', 'SUM', 'GREATER', 9, 9)")
    db.sql("DELETE FROM fraud_rules WHERE rule_id = 1")
    worker.start([stack.connector])
    wait_for("the lake to match the database after the restart", lambda: lake_matches_db(stack))
    written = [str(2000 + n) for n in range(1, updates + 1)]
    limits = wait_for("the last update logged", lambda: (h := history_limits(stack, 17))[-1:] == written[-1:] and h)
    assert limits[-updates:] == written  # every update applied once, in commit order: none lost
    records = topic_records(stack.bootstrap, stack.settings.kafka.topics.rules)
    sent = sum(1 for *_, key, value in records if value and key == '{"rule_id":17}' and '"op":"u"' in value)
    duplicates = sent - updates - 0  # rule 17 had no earlier updates
    assert duplicates >= 0
    snapshot_reads = sum(1 for *_, value in records if value and '"op":"r"' in value)
    assert snapshot_reads == 8  # the restart resumed from the offsets file: no second snapshot
    assert lake(stack)[1]["ruleState"] == "DELETED" and lake(stack)[19]["ruleState"] == "ACTIVE"
    record_outcome(
        "Kafka Connect SIGKILLed mid-stream (40 updates of one rule), real Debezium",
        "fault",
        records_in=updates,
        applied=updates,
        quarantined=0,
        duplicated=duplicates,
        outcome=f"none lost, {duplicates} re-sent after restart and ignored; changes made while down arrived in order",
        seconds=time.monotonic() - started,
    )
    print(f"\nconnect kill: {updates} updates, {duplicates} re-sent after the restart, none lost")


def test_a_truncate_tombstones_every_rule_and_a_later_insert_revives_one(stack: Stack) -> None:
    db = stack.db
    db.sql("TRUNCATE fraud_rules")
    db.sql(INSERT + "(3, 'back after the truncate', '{payerId}', 'COUNT', 'COUNT', 'GREATER_EQUAL', 15, 5)")
    wait_for("the lake to match the database after the truncate", lambda: lake_matches_db(stack))
    rows = lake(stack)
    assert {i for i, r in rows.items() if r["ruleState"] != "DELETED"} == {3}
    assert rows[3]["ruleName"] == "back after the truncate" and rows[3]["sourceOp"] == "c"
    marker = next(r for r in stack.rows("rules") if r["ruleId"] == TRUNCATE_MARKER_ID)
    assert marker["sourceOp"] == "t" and marker["sourcePosition"] < rows[3]["sourcePosition"]
    assert {rows[i]["sourcePosition"] for i in (1, 2, 7, 8, 17, 19)} == {marker["sourcePosition"]}  # tombstoned at it


# ---- the engine ----------------------------------------------------------------------------------------------


class Feeder:
    """One transaction file a second in the engine's landing folder (an amount of 150, a new payer each)."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.stop, self.count = folder, threading.Event(), 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        while not self.stop.is_set():
            self.count += 1
            now_ms = int(time.time() * 1000)
            line = json_line(
                {
                    "transactionId": f"e2e-{self.count}",
                    "eventTime": now_ms,
                    "payerId": 500_000 + self.count,
                    "beneficiaryId": 1,
                    "paymentAmount": 150,
                    "paymentType": "CRD",
                }
            )
            hidden = self.folder / f".tx-{self.count:06d}.json"
            hidden.write_text(line + "\n")
            hidden.rename(self.folder / f"tx-{self.count:06d}.json")  # whole files only: Spark skips dot files
            self.stop.wait(1.0)


def engine_batches(stack: Stack) -> list[dict[str, Any]]:
    rows = (
        r
        for r in stack.rows("batch_log")
        if (r["job"] or "").startswith("engine-") and int(r["counts"].get("rows", 0)) > 0
    )
    return sorted(rows, key=lambda r: r["batchId"])


def rule_alert_batches(stack: Stack, rule_id: int) -> set[int]:
    return {int(r["batchId"]) for r in stack.rows("alerts") if r["ruleId"] == rule_id}


def commit_ms(stack: Stack, version: int) -> int:
    """When a rules-table version was committed (the commit's own timestamp in the Delta log)."""
    log = Path(stack.settings.table_path("rules")) / "_delta_log" / f"{version:020d}.json"
    for line in log.read_text().splitlines():
        action = json.loads(line)
        if "commitInfo" in action:
            return int(action["commitInfo"]["timestamp"])
    raise AssertionError(f"no commitInfo in {log}")


def rules_version_with(stack: Stack, rule_id: int, limit: str) -> int | None:
    """The rules-table version whose MERGE applied this rule's limit (from the change log), once applied."""
    for row in stack.rows("rule_changes"):
        if row["ruleId"] == rule_id and row["after"] and json.loads(row["after"])["limit_value"] == limit:
            return int(row["rulesVersion"])
    return None


def _ms(value: dt.datetime) -> int:
    return int(value.replace(tzinfo=dt.UTC).timestamp() * 1000)


def test_the_engine_keeps_its_pinned_rules_while_connect_is_down_and_uses_a_sql_change_from_its_next_batch(
    stack: Stack,
) -> None:
    db, settings = stack.db, stack.settings
    db.sql(INSERT + "(50, 'a card payment over the limit', '{payerId}', 'paymentAmount', 'MAX', 'GREATER', 100, 1)")
    wait_for("rule 50 in the lake", lambda: 50 in lake(stack))
    landing = Path(settings.landing_path("transactions"))
    feeder = Feeder(landing)
    feeder.thread.start()
    stack.queries.append(start_engine(stack.spark, settings, EngineRun(source="files")))
    try:
        # 1. Rule 50 (MAX > 100) alerts on every 150 payment.
        first = wait_for("an engine batch alerting on rule 50", lambda: rule_alert_batches(stack, 50))
        # 2. Connect down: the engine goes on with the rules it pinned, a SQL change waits in the slot.
        stack.worker.stop()
        pinned = max(b["rulesVersion"] for b in engine_batches(stack))
        db.sql("UPDATE fraud_rules SET limit_value = 500 WHERE rule_id = 50")
        down_batch = wait_for(
            "an engine batch while Connect is down",
            lambda: [b for b in engine_batches(stack) if b["batchId"] > max(first)],
        )[0]
        assert down_batch["rulesVersion"] == pinned and down_batch["batchId"] in rule_alert_batches(stack, 50)
        stack.worker.start([stack.connector])
        raised = wait_for("limit 500 in the rules table", lambda: rules_version_with(stack, 50, "500"))
        quiet = wait_for(
            "a batch on the raised limit",
            lambda: [b for b in engine_batches(stack) if b["rulesVersion"] >= raised],
        )[0]
        assert quiet["batchId"] not in rule_alert_batches(stack, 50)  # 150 is not over 500
        # 3. Latency: a SQL change back under 150, from its commit to the first micro-batch that uses it.
        db.sql("UPDATE fraud_rules SET limit_value = 120 WHERE rule_id = 50")
        lowered = wait_for("limit 120 in the rules table", lambda: rules_version_with(stack, 50, "120"))
        using = wait_for(
            "a batch on the lowered limit",
            lambda: [b for b in engine_batches(stack) if b["rulesVersion"] >= lowered],
        )[0]
        previous = [b for b in engine_batches(stack) if b["batchId"] < using["batchId"]][-1]
        assert previous["rulesVersion"] < lowered  # `using` is the first batch on the new version
        alerting = rule_alert_batches(stack, 50)
        assert using["batchId"] in alerting and previous["batchId"] not in alerting
        committed = int(lake(stack)[50]["sourceTsMs"])  # PostgreSQL's commit time (Debezium's source.ts_ms)
        version_ms = commit_ms(stack, lowered)
        finished_ms = _ms(using["finishedAt"])  # a batch pins the rules after parsing its rows: it may start earlier
        print(
            f"\nrule-change latency: commit -> rules v{lowered} {version_ms - committed} ms -> first batch using it "
            f"(batch {using['batchId']}, {using['durationMs'] / 1000:.1f} s) done {finished_ms - version_ms} ms later; "
            f"{finished_ms - committed} ms from the commit"
        )
        assert 0 <= version_ms - committed < 120_000 and finished_ms > version_ms
    finally:
        feeder.stop.set()
        feeder.thread.join(10)
