"""The analysts' console in a real browser (issue 15): Debian's Chromium, headless, driven by Playwright.

One end-to-end test on the real path: a rule created in the console's form is proposed by an analyst (four eyes: a
pending row of rule_proposals, fraud_rules untouched), approved by an approver, which commits it to PostgreSQL,
streamed by Debezium (Kafka Connect) to the rules topic, MERGEd into the Delta rules table by the rules CDC job,
used by the engine's next micro-batch; its alert appears in the live list without a reload, and its evidence
recomputes the alert's value from bronze. A backtest of a variant is proposed as a new rule and approved; a pause
travels the same way. Small page tests: form validation, an unknown rule, a lakehouse without tables, a stopped
engine. One browser for the module; every wait is bounded.

    make test PYTEST_ARGS="tests/test_console_browser.py -x -q"          # WRITE_CONSOLE_SCREENSHOTS=1: docs/console/
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from console_support import CHROMIUM_ARGS, PASSWORD, Screenshots, chromium_executable, running_console
from debezium_support import cdc_settings, own_database, running_connector
from engine_fixtures import json_line
from lakehouse_template import fresh_lakehouse
from playwright.sync_api import BrowserContext, Page, sync_playwright
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from delta_tables.batch_log import log_batch
from pipelines.base.rulesdb_settings import RulesDbSettings
from pipelines.base.settings import Settings
from pipelines.console.rule_form import RuleFormValues
from pipelines.console.rule_writes import RulesDbWriter, TopicWriter, choose_writer
from pipelines.console.server import ConsoleServer
from pipelines.engine.job import EngineRun, start_engine
from pipelines.local.connect_worker import ConnectWorker
from pipelines.local.kafka_broker import KafkaBroker
from pipelines.local.rules_database import RulesDb
from rules_cdc.rule_model import RuleValidationError, parse_rule
from rules_cdc.streaming_job import start_rules_job

RULE_ID, PAYER = 901, 4242
WAIT_S = 240.0


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=chromium_executable(),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1360, "height": 900},
        )
        context.set_default_timeout(60_000)
        try:
            yield context
        finally:
            context.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Screenshots:
    return Screenshots(tmp_path_factory.mktemp("console-screenshots"))


@dataclass
class Stack:
    settings: Settings
    db: RulesDb
    server: ConsoleServer
    spark: SparkSession

    def url(self, path: str) -> str:
        return self.server.url + path


@pytest.fixture(scope="module")
def stack(
    spark: SparkSession,
    rulesdb: RulesDb,
    connect_worker: ConnectWorker,
    kafka_broker: KafkaBroker,
    base_settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    """The real path, as `make cdc-start` + `fraudlake rules run --source kafka` + `fraudlake console` set it up."""
    folder = tmp_path_factory.mktemp("console-e2e")
    db = own_database(rulesdb, "fraudlake_console")
    settings = cdc_settings(base_settings, folder, bootstrap=kafka_broker.bootstrap, rules_topic="console-rules")
    rulesdb_settings = RulesDbSettings(data_dir=str(db.data_dir), port=db.effective_port(), database=db.database)
    settings = settings.model_copy(update={"rulesdb": rulesdb_settings})
    with running_connector(connect_worker, settings, db, name="console-rules"):
        fresh_lakehouse(spark, settings)
        rules_job = start_rules_job(spark, settings, source="kafka", once=False)
        writer = choose_writer(settings, "auto")  # the rules database answers: edits go there
        assert isinstance(writer, RulesDbWriter)
        try:
            with running_console(settings, writer=writer, spark=lambda: spark) as (server, _):
                yield Stack(settings, db, server, spark)
        finally:
            rules_job.stop()


def visit(page: Page, url: str, user: str = "ana") -> Any:
    """``page.goto``, signing in as ``user`` (the analyst ana) first when the console asks (each console has its own
    sessions; consoles of this module share 127.0.0.1, so their cookies replace each other)."""
    response = page.goto(url)
    if page.url.split("?")[0].endswith("/login"):
        page.fill("#f-username", user)
        page.fill("#f-password", PASSWORD)
        page.click("#sign-in")
        page.wait_for_load_state()
        response = page.goto(url)
    return response


def become(page: Page, url: str, user: str) -> None:
    """Sign out whoever is signed in, then open ``url`` as ``user``."""
    if page.locator("#sign-out").count():
        page.click("#sign-out")
        page.wait_for_load_state()
    visit(page, url, user)
    assert page.locator("#me-name").inner_text() == user


def approve_as(page: Page, user: str, note: str) -> None:
    """The page shows a pending proposal: open it as ``user`` (an approver), approve, land on the edit's progress."""
    become(page, page.url.split("?")[0], user)
    page.fill("#approve-form input[name=note]", note)
    page.click("#approve")
    page.wait_for_url("**/edits/*")


def db_rule(db: RulesDb, rule_id: int) -> dict[str, Any] | None:
    out = db.sql(f"SELECT coalesce(json_agg(row_to_json(r)), '[]') FROM fraud_rules r WHERE rule_id = {int(rule_id)}")
    rows = json.loads(out)
    return rows[0] if rows else None


def fill_rule(page: Page, **fields: str) -> None:
    for name, value in fields.items():
        locator = page.locator(f"#f-{name}")
        if locator.evaluate("e => e.tagName") == "SELECT":
            locator.select_option(value)
        else:
            locator.fill(value)


def wait_step(page: Page, step: str, state: str = "done") -> str:
    """Wait (the page polls by itself) until an edit step has ``state``; return its text."""
    page.wait_for_selector(f"#step-{step}.{state}", timeout=WAIT_S * 1000)
    return page.locator(f"#step-{step}").inner_text()


def feed(settings: Settings, transactions: list[dict[str, Any]], name: str) -> None:
    landing = Path(settings.landing_path("transactions"))
    landing.mkdir(parents=True, exist_ok=True)
    hidden = landing / f".{name}.json"
    hidden.write_text("".join(json_line(t) + "\n" for t in transactions))
    hidden.rename(landing / f"{name}.json")  # whole files only: Spark skips dot files


def run_engine_once(stack: Stack) -> None:
    query = start_engine(stack.spark, stack.settings, EngineRun(source="files", once=True))
    assert query.awaitTermination(600), "the engine did not finish its micro-batch in 10 minutes"
    assert query.exception() is None


def test_a_rule_from_the_form_reaches_the_engine_and_its_alert_explains_itself(
    stack: Stack, browser: BrowserContext, shots: Screenshots
) -> None:
    page = browser.new_page()
    # 1. The form refuses what the rule model refuses, with the model's own message, keeping what was typed.
    visit(page, stack.url("/rules"))
    page.click("#new-rule")
    typed = {
        "ruleId": str(RULE_ID),
        "ruleName": "many payments of one payer",
        "groupingKeyNames": "payerId",
        "aggregatorFunctionType": "SUM",
        "aggregateFieldName": "paymentAmount",
        "limitOperatorType": "GREATER",
        "limit": "100",
        "windowMinutes": "0",
    }
    fill_rule(page, **typed, reason="bursts of one payer")
    page.click("#save-rule")
    refusal = page.locator("#form-error").inner_text()
    with pytest.raises(RuleValidationError) as model:
        parse_rule(RuleFormValues(**typed).model_input(), stack.settings.transaction_schema)
    assert model.value.reason in refusal and "windowMinutes" in refusal
    assert page.locator("#f-ruleName").input_value() == typed["ruleName"]
    assert db_rule(stack.db, RULE_ID) is None  # nothing written
    shots.take(page, "rule-form-refused")

    # 2. Fixed, it is a pending proposal of ana: nothing in fraud_rules yet, and no decision offered to its author.
    fill_rule(page, windowMinutes="10")
    page.click("#save-rule")
    page.wait_for_url("**/proposals/*")
    assert page.locator("#proposal-status").inner_text() == "pending" and page.locator("#proposal-submitted").count()
    assert page.locator("#approve").count() == 0 and db_rule(stack.db, RULE_ID) is None
    shots.take(page, "proposal-pending")

    # 3. The approver abe sees the diff and approves: committed to PostgreSQL with its author, approver and reason,
    # then applied to the Delta rules table by the CDC path.
    become(page, page.url.split("?")[0], "abe")
    assert "limit_value" in page.locator("#proposal-diff").inner_text()
    shots.take(page, "proposal-approve")
    approve_as(page, "abe", "window and limit checked")
    committed = db_rule(stack.db, RULE_ID)
    assert committed is not None and committed["limit_value"] == 100
    assert (committed["changed_by"], committed["approved_by"]) == ("ana", "abe")
    assert committed["change_reason"] == "bursts of one payer"
    applied = wait_step(page, "applied")
    rules = stack.spark.read.format("delta").load(stack.settings.table_path("rules"))
    row = rules.where(F.col("ruleId") == RULE_ID).first()
    assert row is not None and row["ruleState"] == "ACTIVE" and row["limit"] == Decimal("100.000000")
    assert row["sourcePosition"].startswith("pg:")  # it came through Debezium, not the CLI publisher
    changes = stack.spark.read.format("delta").load(stack.settings.table_path("rule_changes"))
    version = changes.where(F.col("ruleId") == RULE_ID).agg(F.max("rulesVersion")).first()[0]
    assert f"rules table v{version}" in applied
    attributed = changes.where(F.col("ruleId") == RULE_ID).select("changedBy", "approvedBy").first()
    assert (attributed["changedBy"], attributed["approvedBy"]) == ("ana", "abe")  # Debezium carried the names
    edit_url = page.url

    # 3. The live list is open; transactions arrive and the engine runs: the alert appears without a reload.
    alerts = browser.new_page()
    visit(alerts, stack.url(f"/alerts?rule={RULE_ID}"))
    alerts.evaluate("window.__sameDocument = true")
    now_ms = int(time.time() * 1000) - 5_000
    feed(
        stack.settings,
        [
            {
                "transactionId": f"c-{n}",
                "eventTime": now_ms + n * 1000,
                "payerId": PAYER,
                "beneficiaryId": 7,
                "paymentAmount": 60,
                "paymentType": "CRD",
            }
            for n in (1, 2, 3)
        ]
        + [{"transactionId": "c-other", "eventTime": now_ms, "payerId": 1, "paymentAmount": 10}],
        "console-e2e-1",
    )
    run_engine_once(stack)
    alert_id = f"{RULE_ID}:c-3"
    alerts.wait_for_selector(f'tr[data-alert-id="{alert_id}"]', timeout=60_000)
    assert alerts.evaluate("window.__sameDocument") is True  # no reload happened
    assert alerts.locator("tr[data-alert-id]").count() == 2  # c-2 (120) and c-3 (180)
    shots.take(alerts, "alerts-live")

    # 4. Its evidence: the window's transactions from bronze, the aggregate recomputed = the alert's value.
    alerts.click(f'tr[data-alert-id="{alert_id}"] a.evidence')
    alerts.wait_for_selector("#verdict")
    recomputed = Decimal(alerts.locator("#recomputed-value").inner_text())
    stored = stack.spark.read.format("delta").load(stack.settings.table_path("alerts"))
    value = stored.where(F.col("alertId") == alert_id).first()["aggregateValue"]
    assert recomputed == value == Decimal(180)
    assert Decimal(alerts.locator("#alert-value").inner_text()) == value
    assert alerts.locator("#window-count").inner_text() == "3"
    assert "✓" in alerts.locator("#match").inner_text()
    assert alerts.locator("#window-rows tbody tr").count() == 3 and alerts.locator("#own-row").count() == 1
    assert '"limit": 100' in alerts.locator("#rule-text").inner_text()
    shots.take(alerts, "evidence")

    # 5. The edit's progress shows the first micro-batch that used the rule.
    visit(page, edit_url)
    batch_text = wait_step(page, "batch")
    first = stack.spark.read.format("delta").load(stack.settings.table_path("batch_log")).orderBy("finishedAt").first()
    assert f"batch {first['batchId']} " in batch_text and first["rulesVersion"] >= version
    shots.take(page, "edit-progress")

    # 6. The rules page and the rule's own page: state, version, history, alert counts.
    visit(page, stack.url("/rules"))
    listed = page.locator(f'#rules-table tr[data-rule-id="{RULE_ID}"]').inner_text()
    assert "ACTIVE" in listed and f"v{version}" in listed and "\t2\t" in listed
    shots.take(page, "rules")
    visit(page, stack.url(f"/rules/{RULE_ID}"))
    assert page.locator("#history tbody tr").count() >= 1 and page.locator("#rule-alerts").inner_text().startswith("2")
    shots.take(page, "rule")

    # 7. Health: per-batch charts drawn from batch_log.
    visit(page, stack.url("/health"))
    page.wait_for_selector("#chart-latency canvas")
    assert page.locator("#engine-status").get_attribute("data-state") == "running"
    shots.take(page, "health")


def test_a_backtested_variant_is_published_and_a_pause_travels_the_same_path(
    stack: Stack, browser: BrowserContext, shots: Screenshots
) -> None:
    page = browser.new_page()
    visit(page, stack.url(f"/backtest?rule={RULE_ID}"))
    assert page.locator("#f-limit").input_value() == "100"
    fill_rule(page, limit="150")
    page.click("#run-backtest")
    page.wait_for_selector("#backtest-total, #backtest-failed", timeout=WAIT_S * 1000)
    assert page.locator("#backtest-failed").count() == 0
    assert page.locator("#backtest-total").inner_text() == "1"  # only 180 is over 150
    shots.take(page, "backtest")
    page.click("#sample a.evidence")
    page.wait_for_selector("#verdict")
    assert Decimal(page.locator("#recomputed-value").inner_text()) == Decimal(180)
    assert "✓" in page.locator("#match").inner_text()
    page.go_back()

    page.fill("#publish-ruleId", "902")
    page.fill("#publish-reason", "limit 150 keeps the biggest burst")
    page.click("#publish-rule")
    page.wait_for_url("**/proposals/*")
    assert db_rule(stack.db, 902) is None
    proposer = page.locator("#me-name").inner_text()
    approve_as(page, "ada" if proposer != "ada" else "abe", "backtest seen")
    assert db_rule(stack.db, 902)["limit_value"] == 150
    assert "ACTIVE" in wait_step(page, "applied")

    visit(page, stack.url(f"/rules/{RULE_ID}"))
    page.fill("#pause-reason", "paused while the variant runs")
    page.click("#pause-rule")
    page.wait_for_url("**/proposals/*")
    assert db_rule(stack.db, RULE_ID)["rule_state"] == "ACTIVE"
    proposer = page.locator("#me-name").inner_text()
    approve_as(page, "abe" if proposer != "abe" else "ada", "fine")
    assert db_rule(stack.db, RULE_ID)["rule_state"] == "PAUSED"
    assert "PAUSED" in wait_step(page, "applied")
    visit(page, stack.url(f"/rules/{RULE_ID}"))
    assert page.locator("#rule-state").inner_text() == "PAUSED"


def test_an_unknown_rule_or_alert_gets_a_clear_page(stack: Stack, browser: BrowserContext) -> None:
    page = browser.new_page()
    for path, text in (
        ("/rules/424242", "There is no rule 424242"),
        ("/alerts/evidence?id=1:no-such-transaction", "There is no alert"),
        ("/edits/0123456789ab", "There is no edit"),
        ("/edits/nope", "is not an edit id"),
        ("/rules/not-a-number", "malformed"),
        ("/alerts/evidence?id=%C2%B2:x", "malformed"),
    ):
        response = visit(page, stack.url(path))
        assert response is not None and response.status in (400, 404)
        assert text in page.locator("#error-message").inner_text()
        assert "Traceback" not in page.content()


def test_a_lakehouse_without_tables_and_a_stopped_engine_get_clear_pages(
    spark: SparkSession, base_settings: Settings, tmp_path: Path, browser: BrowserContext, shots: Screenshots
) -> None:
    page = browser.new_page()
    empty = base_settings.with_lakehouse(str(tmp_path / "empty"))
    with running_console(empty, writer=TopicWriter(empty), spark=lambda: spark) as (server, _):
        for path, table in (("/rules", "rules"), ("/alerts", "alerts"), ("/health", "batch_log")):
            response = visit(page, server.url + path)
            assert response is not None and response.status == 503
            assert f"no {table} table yet" in page.locator("#no-tables h1").inner_text()
        shots.take(page, "no-tables")

    stopped = base_settings.with_lakehouse(str(tmp_path / "stopped"))
    fresh_lakehouse(spark, stopped)
    finished = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(hours=2)
    log_batch(
        spark,
        stopped.table_path("batch_log"),
        {
            "job": "engine-old",
            "batchId": 0,
            "rulesVersion": 0,
            "startedAt": finished - dt.timedelta(seconds=20),
            "finishedAt": finished,
            "durationMs": 20_000.0,
            "counts": {"rows": 10, "alerts": 0, "late": 1},
            "metrics": {"evaluatedP50Ms": 1500.0, "evaluatedP95Ms": 1900.0, "evaluatedP99Ms": 2000.0},
            "maxEventTimeMs": 0,
            "pins": {"rules": 0},
        },
        tag=None,
    )
    with running_console(stopped, writer=TopicWriter(stopped), spark=lambda: spark) as (server, _):
        visit(page, server.url + "/health")
        status = page.locator("#engine-status")
        assert status.get_attribute("data-state") == "quiet"
        assert "stopped" in status.inner_text() and "2 h ago" in status.inner_text()
        page.wait_for_selector("#chart-evaluated canvas")
        shots.take(page, "health-engine-stopped")

        # The form refuses bad input with the model's message and keeps it; nothing is sent anywhere.
        visit(page, server.url + "/rules/new")
        fill_rule(page, ruleId="5", limit="lots", windowMinutes="10", filter='{"field": "nope", "op": "EQUAL"')
        page.click("#save-rule")
        shown = page.locator("#form-error").inner_text()
        values = RuleFormValues(ruleId="5", limit="lots", windowMinutes="10", filter='{"field": "nope", "op": "EQUAL"')
        with pytest.raises(RuleValidationError) as model:
            values.to_rule(stopped.transaction_schema)
        assert model.value.reason in shown and "limit" in shown
        assert page.locator("#f-limit").input_value() == "lots"
