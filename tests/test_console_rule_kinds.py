"""The console with the rule model's newer kinds: COUNT_DISTINCT, VALUE and relative limits (a baseline), over HTTP
against a real server (uvicorn in a thread) on real Delta tables.

The form takes a COUNT_DISTINCT rule and a relative one and refuses invalid ones with the model's own message; the
rules pages describe both; an alert of each kind has evidence recomputed from bronze equal to the figures worked
out by hand below (the distinct values of the window and the cap; the baseline's transactions, n, B, B' and the
threshold k * B'), beside the alert's stored ``baselineValue``.

    .venv/bin/python -m pytest -p no:xdist -q tests/test_console_rule_kinds.py
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import html
import json
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from console_support import fetch, running_console
from dq_tables import BASE, MINUTE, alert, append, transaction
from engine_fixtures import make_rule, put_rules
from lakehouse_template import fresh_lakehouse
from polling import wait_for
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from delta_tables.alerts import ALERTS
from pipelines.base.settings import Settings
from pipelines.console.alerts_data import AlertQuery, recent_alerts
from pipelines.console.evidence import window_evidence
from pipelines.console.lake_reader import LakeReader
from pipelines.console.rule_form import RuleFormValues
from pipelines.console.rule_writes import Action, Committed
from pipelines.console.rules_data import describe
from pipelines.engine.keys import encode_key
from rules_cdc.plan_changes import TableView
from rules_cdc.rule_model import Aggregator, Baseline, BaselineAggregator, Rule
from rules_cdc.rule_rows import rule_to_row
from rules_cdc.rules_views import TIMES

HOUR = 60 * MINUTE
UTC_BASE = BASE.replace(tzinfo=dt.UTC)

# Rule 21: how many different beneficiaries a payer paid within the hour.
DISTINCT = make_rule(
    21, aggregateFieldName="beneficiaryId", aggregatorFunctionType="COUNT_DISTINCT", limit=2, windowMinutes=60
)
# Rule 22: a payment more than 5 times the payer's average payment of the last day (at least 3 of them).
RELATIVE = make_rule(
    22,
    aggregatorFunctionType="VALUE",
    limit=5,
    windowMinutes=60,
    baseline={"aggregatorFunctionType": "AVG", "windowMinutes": 1440, "minCount": 3},
)
# Rule 23: an hour's sum at least twice the payer's hourly sum of the last 7 hours (per window).
PER_WINDOW = make_rule(
    23,
    limitOperatorType="GREATER_EQUAL",
    limit=2,
    windowMinutes=60,
    baseline={"aggregatorFunctionType": "SUM", "windowMinutes": 420, "minCount": 2, "perWindow": True},
)


def tx(tx_id: str, payer: int, at: dt.datetime, amount: str | None, beneficiary: int | None = 7) -> dict[str, Any]:
    return {**transaction(tx_id, amount, event=at, payer=payer), "beneficiaryId": beneficiary}


# Payer 5 (rule 21), x = d6 at BASE: d1..d4 are in its hour, d5 is not; payer 6 is another key.
# Distinct beneficiaries in the window: 11 (d1, d3), 12 (d2), 13 (d6); d4's is null and does not count -> 3 > 2.
DISTINCT_ROWS = [
    tx("d1", 5, BASE - 50 * MINUTE, "10", 11),
    tx("d2", 5, BASE - 40 * MINUTE, "10", 12),
    tx("d3", 5, BASE - 30 * MINUTE, "10", 11),
    tx("d4", 5, BASE - 20 * MINUTE, "10", None),
    tx("d5", 5, BASE - 90 * MINUTE, "10", 99),
    tx("d6", 5, BASE, "10", 13),
    tx("e1", 6, BASE - 10 * MINUTE, "10", 14),
]
# Payer 7 (rule 22), x = v6 at BASE + 30 s. Its day back from its bucket starts at BASE - 24 h (that bucket counts):
# v1 (the oldest bucket), v2, v3 (its own bucket, before it) are the baseline; v4 is a minute older than the day,
# v5 has no amount, v7 comes after x in its bucket. n = 3, B = (100 + 200 + 250.01) / 3 = 183.336666.. -> 183.336667
# (HALF_UP), B' = B, threshold 5 * B = 916.683335, VALUE = 1000 > 916.683335.
RELATIVE_ROWS = [
    tx("v1", 7, BASE - 24 * HOUR, "100.00"),
    tx("v2", 7, BASE - 10 * HOUR, "200.00"),
    tx("v3", 7, BASE + dt.timedelta(seconds=10), "250.01"),
    tx("v4", 7, BASE - 24 * HOUR - MINUTE, "5000.00"),
    tx("v5", 7, BASE - HOUR, None),
    tx("v6", 7, BASE + dt.timedelta(seconds=30), "1000.00"),
    tx("v7", 7, BASE + dt.timedelta(seconds=40), "7777.00"),
]
# Payer 8 (rule 23), x = s4 at BASE: its hour holds s3 and s4 (SUM 70); the 7 hours without it hold s1, s2, s3:
# n = 3, B = 90, B' = 90 * 60 / 420 = 90/7, threshold 2 * 90/7 = 180/7 = 25.714285.. ; 70 >= 180/7.
PER_WINDOW_ROWS = [
    tx("s1", 8, BASE - 170 * MINUTE, "30.00"),
    tx("s2", 8, BASE - 100 * MINUTE, "40.00"),
    tx("s3", 8, BASE - 30 * MINUTE, "20.00"),
    tx("s4", 8, BASE, "50.00"),
]


def stored_alert(
    rule: Rule, tx_id: str, payer: int, at: dt.datetime, value: str, baseline: str | None
) -> dict[str, Any]:
    """An alerts row as the engine writes it (``baselineValue`` dropped by ``append`` where the table lacks it)."""
    return {
        **alert(f"{rule.rule_id}:{tx_id}", rule, value),
        "transactionId": tx_id,
        "keyValue": encode_key([payer]),
        "eventTime": at,
        "baselineValue": None if baseline is None else Decimal(baseline),
    }


@dataclasses.dataclass
class RecordingWriter:
    """Where the form's rules go in these tests: kept, so that a test sees exactly the Rule the model made."""

    written: list[tuple[Action, Rule | None]] = dataclasses.field(default_factory=list)
    mode: str = "topic"

    def target(self) -> str:
        return "a test's list"

    def write(self, action: Action, *, rule_id: int, rule: Rule | None, view: TableView) -> Committed:
        self.written.append((action, rule))
        return Committed(action, rule_id, "topic", "test:0", dt.datetime.now(dt.UTC), "kept by the test")


@pytest.fixture(scope="module")
def lakehouse(spark: SparkSession, base_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    settings = base_settings.with_lakehouse(str(tmp_path_factory.mktemp("console-rule-kinds") / "lakehouse"))
    fresh_lakehouse(spark, settings)
    append(spark, settings, "bronze_transactions", DISTINCT_ROWS + RELATIVE_ROWS + PER_WINDOW_ROWS)
    put_rules(spark, settings, [DISTINCT, RELATIVE, PER_WINDOW])
    alerts = [
        stored_alert(DISTINCT, "d6", 5, BASE, "3", None),
        stored_alert(RELATIVE, "v6", 7, BASE + dt.timedelta(seconds=30), "1000", "183.336667"),
        stored_alert(PER_WINDOW, "s4", 8, BASE, "70", "90"),
    ]
    append(spark, settings, "alerts", alerts)
    return settings


@pytest.fixture(scope="module")
def site(lakehouse: Settings, spark: SparkSession) -> Iterator[tuple[str, RecordingWriter]]:
    writer = RecordingWriter()
    with running_console(lakehouse, writer=writer, spark=lambda: spark) as (server, _):  # type: ignore[arg-type]
        yield server.url, writer


def text_of(page: str, element_id: str) -> str:
    """The text of the element with this id (tags dropped, spaces squeezed)."""
    found = re.search(rf'<(\w+)\b[^>]*\bid="{element_id}"[^>]*>(.*?)</\1>', page, re.S)
    assert found, f"no #{element_id} in the page"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", found.group(2))).split())


def form_of(rule_id: int, **typed: str) -> dict[str, str]:
    return {**dataclasses.asdict(RuleFormValues(ruleId=str(rule_id))), **typed}


# ---- the form -------------------------------------------------------------------------------------------------


def test_the_form_offers_both_kinds_and_takes_a_distinct_count_and_a_relative_rule(
    site: tuple[str, RecordingWriter],
) -> None:
    url, writer = site
    status, page, _ = fetch(url + "/rules/new")
    assert status == 200
    assert "<option >COUNT_DISTINCT</option>" in page and "<option >VALUE</option>" in page
    assert 'id="f-baselineAggregator"' in page and "none: a fixed limit" in page
    assert 'name="baselinePerWindow"' in page and 'id="f-baselineMinCount"' in page
    assert '<optgroup label="any type: COUNT_DISTINCT only">' in page and "<option >paymentType</option>" in page

    typed = {"groupingKeyNames": "payerId", "limit": "5", "windowMinutes": "60"}
    distinct = form_of(31, aggregatorFunctionType="COUNT_DISTINCT", aggregateFieldName="paymentType", **typed)
    status, page, _ = fetch(url + "/rules/new", form=distinct)
    assert status == 200 and 'id="step-applied"' in page, page[:2000]  # redirected to the edit's progress
    action, rule = writer.written[-1]
    assert action == "create" and rule is not None
    assert (rule.rule_id, rule.aggregator_function_type, rule.aggregate_field_name) == (
        31,
        Aggregator.COUNT_DISTINCT,
        "paymentType",
    )
    assert rule.baseline is None and rule.limit == Decimal(5)

    relative = form_of(
        32,
        aggregatorFunctionType="VALUE",
        baselineAggregator="AVG",
        baselineWindowMinutes="43200",
        baselineMinCount="5",
        **typed,
    )
    status, page, _ = fetch(url + "/rules/new", form=relative)
    assert status == 200 and 'id="step-applied"' in page, page[:2000]
    action, rule = writer.written[-1]
    assert rule is not None and rule.aggregator_function_type is Aggregator.VALUE
    assert rule.baseline == Baseline(aggregator=BaselineAggregator.AVG, window_minutes=43200, min_count=5)
    assert describe(rule_to_row(rule, source_position="x", source_op="c", source_ts_ms=None)) == (
        f"VALUE(paymentAmount) > 5 {TIMES} AVG over 30 days (min 5 tx) by [payerId]"
    )

    per_window = form_of(33, baselineAggregator="SUM", baselineWindowMinutes="420", baselinePerWindow="on", **typed)
    status, page, _ = fetch(url + "/rules/new", form=per_window)
    assert status == 200 and 'id="step-applied"' in page, page[:2000]
    rule = writer.written[-1][1]
    assert rule is not None and rule.baseline is not None and rule.baseline.per_window
    assert (rule.baseline.min_count, rule.baseline.aggregator) == (1, BaselineAggregator.SUM)  # the model's default


REFUSED = [
    (
        {"aggregatorFunctionType": "COUNT_DISTINCT", "baselineAggregator": "AVG", "baselineWindowMinutes": "600"},
        "COUNT_DISTINCT takes a fixed limit, not a baseline",
    ),
    (
        {"aggregatorFunctionType": "VALUE", "baselineAggregator": "AVG", "baselineWindowMinutes": "30"},
        "baseline.windowMinutes must be at least the rule's windowMinutes",
    ),
    (
        {"baselinePerWindow": "on"},
        "baseline.aggregatorFunctionType: Field required; baseline.windowMinutes: Field required",
    ),
    ({"baselineAggregator": "AVG", "baselineWindowMinutes": "600", "baselineMinCount": "-1"}, "baseline.minCount"),
    ({"baselineAggregator": "MEDIAN", "baselineWindowMinutes": "600"}, "baseline.aggregatorFunctionType"),
    ({"aggregatorFunctionType": "SUM", "aggregateFieldName": "paymentType"}, "is not numeric"),
    ({"aggregatorFunctionType": "COUNT_DISTINCT", "limit": "20000"}, "a COUNT_DISTINCT limit must be at most 10000"),
]


@pytest.mark.parametrize(("typed", "message"), REFUSED, ids=[m for _, m in REFUSED])
def test_an_invalid_rule_of_either_kind_is_refused_with_the_models_message(
    site: tuple[str, RecordingWriter], typed: dict[str, str], message: str
) -> None:
    url, writer = site
    before = len(writer.written)
    form = form_of(40, groupingKeyNames="payerId", limit="5", windowMinutes="60") | typed
    status, page, _ = fetch(url + "/rules/new", form=form)
    assert status == 422 and message in text_of(page, "form-error"), text_of(page, "form-error")
    assert len(writer.written) == before  # nothing written
    for name in ("baselineWindowMinutes", "baselineMinCount"):  # what was typed is kept
        if typed.get(name):
            assert f'value="{typed[name]}"' in page
    if typed.get("baselineAggregator"):
        assert f"<option selected>{typed['baselineAggregator']}</option>" in page
    if typed.get("baselinePerWindow"):
        assert re.search(r'id="f-baselinePerWindow" value="on"\s+checked', page)


def test_the_rules_pages_describe_both_kinds_and_the_edit_form_keeps_the_baseline(
    site: tuple[str, RecordingWriter],
) -> None:
    url, _ = site
    status, page, _ = fetch(url + "/rules")
    assert status == 200
    text = html.unescape(page)
    assert "COUNT_DISTINCT(beneficiaryId) > 2 in 60 min by [payerId]" in text
    assert f"VALUE(paymentAmount) > 5 {TIMES} AVG over 1 day (min 3 tx) by [payerId]" in text
    assert f"SUM(paymentAmount) in 60 min >= 2 {TIMES} SUM per 60 min over 420 min (min 2 tx) by [payerId]" in text
    status, page, _ = fetch(url + "/rules/22")
    assert status == 200 and f"{TIMES} AVG over 1 day" in text_of(page, "rule-definition")
    status, page, _ = fetch(url + "/rules/22/edit")
    assert status == 200 and "<option selected>AVG</option>" in page
    assert 'id="f-baselineWindowMinutes" value="1440"' in page and 'id="f-baselineMinCount" value="3"' in page
    assert "Limit (factor k of the baseline)" in page
    status, page, _ = fetch(url + "/rules/23/edit")
    assert re.search(r'id="f-baselinePerWindow" value="on"\s+checked', page)


# ---- evidence -------------------------------------------------------------------------------------------------


def test_a_distinct_count_alerts_evidence_lists_the_windows_distinct_values(site: tuple[str, RecordingWriter]) -> None:
    url, _ = site
    status, page, _ = fetch(url + "/alerts/evidence?id=21:d6")
    assert status == 200
    assert text_of(page, "window-count") == "4"  # d1, d2, d3, d6 (d4's beneficiary is null, d5 is too old)
    assert text_of(page, "distinct-count") == "3" and text_of(page, "distinct-cap") == "100"
    assert text_of(page, "recomputed-value") == "3" and "= the alert's 3 ✓" in text_of(page, "match")
    values = re.findall(
        r'<tr data-value="([^"]*)"[^>]*>\s*<td class="num">\d+</td><td><code>[^<]*</code></td>'
        r'<td class="num">(\d+)</td><td><code>([^<]*)</code>',
        page,
    )
    assert values == [("11", "2", "d1"), ("12", "1", "d2"), ("13", "1", "d6")]
    assert "holds ✓" in text_of(page, "limit-check") and "GREATER 2" in text_of(page, "limit-check")


def test_the_distinct_count_saturates_at_the_cap(lakehouse: Settings) -> None:
    capped = lakehouse.model_copy(update={"engine": lakehouse.engine.model_copy(update={"distinct_cap": 2})})
    evidence = window_evidence(
        LakeReader(capped),
        capped,
        rule=DISTINCT,
        key_value="[5]",
        transaction_id="d6",
        event_time=UTC_BASE,
        batch_id=0,
        alert_value=Decimal(2),
        precedence="engine",
    )
    assert [d.text for d in evidence.distinct] == ["11", "12", "13"] and evidence.saturated
    assert evidence.recomputed == Decimal(2) and evidence.matches and not evidence.holds  # 2 > 2 does not hold


def test_a_relative_alerts_evidence_shows_the_baseline_and_the_threshold(site: tuple[str, RecordingWriter]) -> None:
    url, _ = site
    status, page, _ = fetch(url + "/alerts/evidence?id=22:v6")
    assert status == 200
    assert text_of(page, "recomputed-value") == "1000" and "✓" in text_of(page, "match")
    assert text_of(page, "baseline-n") == "3"
    assert text_of(page, "baseline-value") == "183.336667"
    assert text_of(page, "baseline-stored") == "= the alert's baselineValue 183.336667 ✓"
    assert text_of(page, "alert-baseline") == "183.336667"
    assert text_of(page, "threshold") == "916.683335"
    assert text_of(page, "baseline-enough") == "3 ≥ 3"
    assert text_of(page, "limit-check") == "Limit: 1000 GREATER 916.683335 holds ✓"
    baseline_table = page.split('id="baseline-rows"', 1)[1].split("</table>", 1)[0]
    assert re.findall(r"<td>(v\d)</td>", baseline_table) == ["v1", "v2", "v3"]
    window_table = page.split('id="window-rows"', 1)[1].split("</table>", 1)[0]
    assert re.findall(r"<td>(v\d)</td>", window_table) == ["v6"]  # VALUE: the transaction itself

    status, page, _ = fetch(url + "/alerts/evidence?id=23:s4")
    assert status == 200
    assert text_of(page, "recomputed-value") == "70" and "✓" in text_of(page, "match")
    assert (text_of(page, "baseline-n"), text_of(page, "baseline-value")) == ("3", "90")
    assert text_of(page, "baseline-scaled") == "≈12.857143"  # 90 * 60 / 420 = 90/7
    assert text_of(page, "threshold") == "≈25.714286"  # 2 * 90/7
    assert text_of(page, "limit-check") == "Limit: 70 GREATER_EQUAL ≈25.714286 holds ✓"

    status, page, _ = fetch(url + "/alerts?rule=22")
    assert status == 200 and f"GREATER 5 {TIMES} baseline 183.336667 (60 min)" in html.unescape(page)


def test_an_alerts_table_without_the_baseline_column_still_reads(
    spark: SparkSession, lakehouse: Settings, tmp_path: Path
) -> None:
    """An alerts table of an older release (no ``baselineValue``): the list reads, the evidence says so."""
    older = lakehouse.with_lakehouse(str(tmp_path / "older"))
    columns = [f for f in ALERTS.schema.fields if f.name != "baselineValue"]
    rows = [stored_alert(RELATIVE, "v6", 7, BASE + dt.timedelta(seconds=30), "1000", None)]
    frame = spark.createDataFrame([tuple(row.get(f.name) for f in columns) for row in rows], StructType(columns))
    frame.write.format("delta").save(older.table_path(ALERTS.name))
    listed = recent_alerts(LakeReader(older), AlertQuery())
    assert [a["alertId"] for a in listed] == ["22:v6"] and "baselineValue" not in listed[0]
    evidence = window_evidence(
        LakeReader(lakehouse),
        lakehouse,
        rule=RELATIVE,
        key_value="[7]",
        transaction_id="v6",
        event_time=UTC_BASE + dt.timedelta(seconds=30),
        batch_id=0,
        alert_value=Decimal(1000),
        precedence="engine",
    )
    assert evidence.baseline is not None and evidence.baseline.stored_value is None and not evidence.baseline.matches
    assert evidence.holds and evidence.baseline.figures.value == Decimal("183.336667")


# ---- backtests ------------------------------------------------------------------------------------------------


def hidden_inputs(form_html: str) -> dict[str, str]:
    return {
        html.unescape(name): html.unescape(value)
        for name, value in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form_html)
    }


def test_backtests_of_both_kinds_show_their_alerts_evidence_and_publish_the_candidate(
    site: tuple[str, RecordingWriter],
) -> None:
    """Over the whole of bronze as one batch (worked out by hand from the rows above): rule 21 alerts on d2 and d3
    (d5's beneficiary 99 is still in their hour) and d6; rule 22 on v6 (B 183.336667) and on v7 (its baseline takes
    v6 in: (100 + 200 + 250.01 + 1000) / 4 = 387.5025, and 7777 > 5 * 387.5025)."""
    url, writer = site
    expected: dict[int, list[tuple[str, str | None]]] = {
        21: [("d2", None), ("d3", None), ("d6", None)],
        22: [("v6", "183.336667"), ("v7", "387.5025")],
    }
    jobs: dict[int, str] = {}
    for rule in (DISTINCT, RELATIVE):
        form = dataclasses.asdict(RuleFormValues.from_rule(rule.to_json_dict()))
        status, page, _ = fetch(url + "/backtest", form=form | {"since": "2024-02-28", "until": "2024-03-02"})
        assert status == 200 and 'id="backtest-result"' in page, page[:2000]
        jobs[rule.rule_id] = page.split('data-job="', 1)[1].split('"', 1)[0]

    def finished(job: str) -> str | None:
        state = json.loads(fetch(url + f"/api/backtest/{job}")[1])
        return None if state["state"] in ("queued", "running") else str(state["state"])

    for rule_id, job in jobs.items():
        assert wait_for(f"backtest of rule {rule_id}", functools.partial(finished, job), seconds=300) == "done"
        status, page, _ = fetch(url + f"/backtest/{job}")
        assert status == 200 and text_of(page, "backtest-total") == str(len(expected[rule_id])), page[:3000]
        sample = page.split('id="sample"', 1)[1].split("</table>", 1)[0]
        assert re.findall(r"<td><code>([dv]\d)</code></td>", sample) == [t for t, _ in expected[rule_id]]
        for number, (tx_id, baseline) in enumerate(expected[rule_id]):
            status, evidence, _ = fetch(url + f"/backtest/{job}/evidence/{number}")
            assert status == 200 and "✓" in text_of(evidence, "match"), (tx_id, text_of(evidence, "match"))
            assert "holds ✓" in text_of(evidence, "limit-check")
            if baseline is not None:
                assert text_of(evidence, "baseline-value") == baseline
                assert text_of(evidence, "baseline-stored") == f"= the alert's baselineValue {baseline} ✓"
        # Publish: the candidate as typed, the relative-limit block included, goes through the form's create path.
        published = hidden_inputs(page.split('id="publish-form"', 1)[1].split("</form>", 1)[0])
        status, page, _ = fetch(url + "/rules/new", form=published | {"ruleId": str(rule_id + 100)})
        assert status == 200 and 'id="step-applied"' in page, page[:2000]
        action, made = writer.written[-1]
        original = DISTINCT if rule_id == 21 else RELATIVE
        assert made == original.model_copy(update={"rule_id": rule_id + 100}) and action == "create"
