"""The console on bad input and slow backends, over HTTP against a real server (uvicorn in a thread, real Delta tables,
a real PostgreSQL): every malformed address answers 400 and every unknown id 404, with a message and never a
traceback; a save waiting on a row another transaction holds delays only itself (the event loop keeps answering);
the backtest queue refuses beyond its bound and a backtest beyond its range.

    .venv/bin/python -m pytest -p no:xdist -q tests/test_console_bad_input.py
"""

from __future__ import annotations

import html
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from email.message import Message
from typing import Any

import psycopg
import pytest
from console_support import fetch, running_console, visitor
from debezium_support import own_database
from engine_fixtures import make_rule
from lakehouse_template import fresh_lakehouse
from polling import wait_for
from pyspark.sql import SparkSession

from pipelines.base.settings import Settings
from pipelines.console.rule_form import RuleFormValues
from pipelines.console.rule_writes import RulesDbWriter, TopicWriter
from pipelines.local.rules_database import RulesDb
from rules_cdc.proposals import propose

UNKNOWN_TOKEN = "0123456789ab"  # well-formed edit / backtest id that nothing has


def quoted(path: str) -> str:
    return urllib.parse.quote(path, safe="/?=&:%")


@pytest.fixture(scope="module")
def lakehouse(spark: SparkSession, base_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    settings = base_settings.with_lakehouse(str(tmp_path_factory.mktemp("console-bad-input") / "lakehouse"))
    fresh_lakehouse(spark, settings)
    return settings


@pytest.fixture(scope="module")
def console_url(lakehouse: Settings, spark: SparkSession) -> Iterator[str]:
    with running_console(lakehouse, writer=TopicWriter(lakehouse), spark=lambda: spark) as (server, _):
        yield server.url


BIG = "99999999999999999999"  # past 2^63 - 1, the rule model's largest rule id
BAD_ADDRESSES = [
    # (method, path, status, a piece of the message)
    ("GET", "/alerts?rule=²", 400, "rule must be a rule id (digits 0-9)"),
    ("GET", f"/alerts?rule={BIG}", 400, "from 0 to 9223372036854775807"),
    ("GET", "/alerts?rule=-3", 400, "rule must be a rule id"),
    ("GET", "/alerts?since=100000000000000000", 400, "from must be an ISO date or date-time"),
    ("GET", "/alerts?since=2024-02-30", 400, "from is not a real date"),
    ("GET", "/alerts?since=0001-01-01", 400, "from must lie between 1970-01-01 and 9999-12-01"),
    ("GET", "/alerts?since=2024-06-02&until=2024-06-01", 400, "from must be before to"),
    ("GET", "/alerts?key=" + "k" * 1001, 400, "key is 1001 characters long"),
    ("GET", "/api/alerts?after=yesterday", 400, "after must be an ISO date or date-time"),
    ("GET", "/api/alerts?after=2024-13-01T00:00", 400, "after is not a real date"),
    ("GET", "/api/alerts?rule=²", 400, "rule must be a rule id"),
    ("GET", f"/rules/{BIG}", 400, "the rule id must be a rule id from 0 to 9223372036854775807"),
    ("GET", "/rules/²", 400, "the rule id must be a rule id (digits 0-9)"),
    ("GET", "/rules/-1", 400, "the rule id must be a rule id"),
    ("GET", "/rules/424242", 404, "There is no rule 424242"),
    ("GET", f"/rules/{BIG}/edit", 400, "from 0 to 9223372036854775807"),
    ("GET", "/rules/424242/edit", 404, "not a live rule"),
    ("POST", f"/rules/{BIG}/pause", 400, "from 0 to 9223372036854775807"),
    ("POST", f"/rules/{BIG}/edit", 400, "from 0 to 9223372036854775807"),
    ("POST", "/rules/7/explode", 404, "There is no action"),
    ("GET", "/alerts/evidence", 400, "id must be an alert id <ruleId>:<transactionId>"),
    ("GET", "/alerts/evidence?id=²:tx", 400, "the rule of an alert id must be a rule id"),
    ("GET", f"/alerts/evidence?id={BIG}:tx", 400, "from 0 to 9223372036854775807"),
    ("GET", "/alerts/evidence?id=7:no-such-transaction", 404, "There is no alert 7:no-such-transaction"),
    ("GET", "/edits/nope", 400, "is not an edit id"),
    ("GET", f"/edits/{UNKNOWN_TOKEN}", 404, "There is no edit"),
    ("GET", "/api/edits/nope", 400, "is not an edit id"),
    ("GET", f"/api/edits/{UNKNOWN_TOKEN}", 404, "There is no edit"),
    ("GET", "/backtest?rule=²", 400, "rule must be a rule id"),
    ("GET", "/backtest?rule=424242", 404, "There is no live rule 424242"),
    ("GET", "/backtest/nope", 400, "is not a backtest id"),
    ("GET", f"/backtest/{UNKNOWN_TOKEN}", 404, "There is no backtest"),
    ("GET", f"/api/backtest/{UNKNOWN_TOKEN}", 404, "There is no backtest"),
    ("GET", f"/backtest/{UNKNOWN_TOKEN}/evidence/x", 404, "There is no backtest"),
    ("GET", "/nowhere", 404, "There is no page /nowhere"),
]


@pytest.mark.parametrize(
    ("method", "path", "status", "message"), BAD_ADDRESSES, ids=[p for _, p, _, _ in BAD_ADDRESSES]
)
def test_a_bad_address_gets_400_or_404_with_a_message(
    console_url: str, method: str, path: str, status: int, message: str
) -> None:
    got, text, headers = fetch(console_url + quoted(path), form={} if method == "POST" else None)
    shown = html.unescape(text)
    assert got == status, shown[:2000]
    assert message in shown and "Traceback" not in shown
    if path.startswith("/api/"):
        assert headers.get_content_type() == "application/json" and message in json.loads(text)["error"]
    else:
        assert headers.get_content_type() == "text/html"


def test_the_live_list_cursor_takes_every_documented_instant_form(console_url: str) -> None:
    """The page's own filter form (``2024-01-01T00:00``, no offset: UTC) and the cursor the page sends back."""
    for after, cursor in (
        ("2024-01-01T00:00", "2024-01-01T00:00:00+00:00"),
        ("2024-01-01 00:00:00.5", "2024-01-01T00:00:00.500000+00:00"),
        ("2024-01-01T02:00+02:00", "2024-01-01T00:00:00+00:00"),
        ("2024-01-01T00:00Z", "2024-01-01T00:00:00+00:00"),
    ):
        status, text, _ = fetch(console_url + quoted(f"/api/alerts?after={after}"))
        assert status == 200 and json.loads(text) == {"alerts": [], "cursor": cursor}, text


def test_a_body_over_the_bound_is_refused(console_url: str) -> None:
    status, text, _ = fetch(console_url + "/rules/new", body=b"ruleName=" + b"x" * 100_000)
    assert status == 413 and "larger than the 65536 bytes" in text


def _writer_and_admin(db: RulesDb) -> tuple[RulesDbWriter, dict[str, Any]]:
    """The console's writer on ``db`` and the superuser's connection arguments (another session's transaction).
    With the database's login roles (passwords from its secret files) when it has them, else trust."""
    admin: dict[str, Any] = {"host": "127.0.0.1", "port": db.effective_port(), "dbname": db.database, "user": db.user}
    secrets = getattr(db, "secrets", None)
    if secrets is None:
        writer = RulesDbWriter(" ".join(f"{k}={v}" for k, v in admin.items()), "test")
        return writer, admin
    return RulesDbWriter.for_database(db), admin | {"password": secrets.password("admin")}  # type: ignore[attr-defined]


def test_a_save_waiting_on_a_locked_row_delays_only_itself(
    rulesdb: RulesDb, lakehouse: Settings, spark: SparkSession
) -> None:
    """A real row lock held by another transaction while the approval of a change of that rule is posted (four eyes:
    approving is what writes fraud_rules): it waits (on the console's write pool), and the pages go on answering
    within a second."""
    db = own_database(rulesdb, "fraudlake_console_locks")
    writer, admin = _writer_and_admin(db)
    rule = make_rule(77)
    db.sql("DELETE FROM fraud_rules WHERE rule_id = 77")
    db.upsert_rules([rule])  # set-up as the superuser: the console role may not write fraud_rules
    db.sql("DELETE FROM rule_proposals WHERE rule_id = 77")
    raised = propose(writer._connect, "update", rule=make_rule(77, limit=555), proposed_by="ana", reason="higher")
    outcome: dict[str, tuple[int, str, Message]] = {}

    with running_console(lakehouse, writer=writer, spark=lambda: spark) as (server, _):
        assert fetch(server.url + "/alerts")[0] == 200  # warm: the first read of each table opens its log
        assert fetch(server.url + "/api/health")[0] == 200
        with psycopg.connect(**admin) as holder, psycopg.connect(**admin, autocommit=True) as watcher:
            holder.execute("SELECT 1 FROM fraud_rules WHERE rule_id = 77 FOR UPDATE")  # held until rollback

            def save() -> None:
                approver = visitor(server.url, "abe")
                outcome["save"] = approver.fetch(f"/proposals/{raised.id}/approve", form={"note": "ok"}, timeout=120)

            saving = threading.Thread(target=save, name="console-save")
            saving.start()

            def save_is_waiting_on_the_lock() -> bool:
                row = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
                    (db.database,),
                ).fetchone()
                return bool(row and row[0])

            wait_for("the save to wait on the locked row", save_is_waiting_on_the_lock, seconds=30, every=0.05)
            for path in ("/alerts", "/api/health", "/rules"):
                started = time.monotonic()
                status, _, _ = fetch(server.url + path, timeout=10)
                elapsed = time.monotonic() - started
                assert status == 200 and elapsed < 1.0, (path, status, elapsed)
            holder.rollback()  # the other transaction ends
        saving.join(60)
        assert not saving.is_alive()
    # The save then went through, or (a lock_timeout on the console's connection ends the wait sooner) it was
    # refused with the database's reason; either way the person reads what happened.
    status, text, _ = outcome["save"]
    assert "Traceback" not in text
    if status == 200:
        assert 'id="step-committed"' in text
        assert db.sql("SELECT limit_value FROM fraud_rules WHERE rule_id = 77").strip() == "555"
    else:
        assert status in (409, 504) and 'id="error-message"' in text, (status, text[:2000])


def test_the_backtest_queue_refuses_beyond_its_bound_and_a_backtest_beyond_its_range(lakehouse: Settings) -> None:
    """The console's SparkSession is held back (each backtest waits for it), so that the queue fills; released, it
    refuses to start (the backtests fail at once, with the reason on their page) and the queue drains. What a
    backtest computes is test_backtest.py's and the browser test's business: here only the bounds, in seconds."""
    gate = threading.Event()

    def held_back_spark() -> SparkSession:
        gate.wait(120)
        raise RuntimeError("no SparkSession in this test")

    form = dict(RuleFormValues.from_rule(make_rule(5).to_json_dict()).__dict__)
    with running_console(lakehouse, writer=TopicWriter(lakehouse), spark=held_back_spark) as (server, console):
        bound = console.backtests.max_pending
        try:
            # The range: at most MAX_RANGE_DAYS, and from before to (the form keeps what was typed).
            status, text, _ = fetch(
                server.url + "/backtest", form=form | {"since": "2024-01-01", "until": "2024-12-31"}
            )
            assert status == 422 and "at most 92 days of event time" in html.unescape(text)
            status, text, _ = fetch(
                server.url + "/backtest", form=form | {"since": "2024-06-02", "until": "2024-06-01"}
            )
            assert status == 422 and "from must be before to" in html.unescape(text)
            assert console.backtests.pending == 0

            jobs = []
            for _ in range(bound):  # one running (waiting for Spark), the rest queued
                status, text, _ = fetch(server.url + "/backtest", form=form)
                assert status == 200 and 'id="backtest-result"' in text
                jobs.append(text.split('data-job="', 1)[1].split('"', 1)[0])
            assert console.backtests.pending == bound
            status, text, headers = fetch(server.url + "/backtest", form=form)
            assert status == 429 and headers["Retry-After"] == "30"
            assert f"{bound} backtests are queued or running" in html.unescape(text)
            assert 'id="f-limit"' in text and 'value="100"' in text  # the form keeps the candidate
        finally:
            gate.set()

        def state(job: str) -> str:
            return str(json.loads(fetch(server.url + f"/api/backtest/{job}")[1])["state"])

        wait_for("the queue to drain", lambda: all(state(j) == "failed" for j in jobs), seconds=60, every=0.1)
        status, text, _ = fetch(server.url + f"/backtest/{jobs[0]}")
        assert status == 200 and "The backtest failed: RuntimeError: no SparkSession in this test" in text
        status, text, _ = fetch(server.url + "/backtest", form=form)  # room again
        assert status == 200 and 'id="backtest-result"' in text
        wait_for("the last backtest", lambda: console.backtests.pending == 0, seconds=60, every=0.1)
