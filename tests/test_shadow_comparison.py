"""A SHADOW rule beside the rule it would replace: the comparison (pipelines/outcomes/shadow_comparison.py) against
figures computed by hand, the console's page (signed in, over HTTP to a real server on real Delta tables), the
SHADOW state in the rules list, form and accuracy page, and notebook 06 on the same lakehouse.

The fixture (event days of March 2024 unless said; Feb 10 is outside the default range):

    rule 1 ACTIVE  SUM(paymentAmount) by payerId           alerts t1 (1), t2 (1), t3 (2), t5 (3), t9 (Feb 10)
    rule 3 SHADOW  SUM(paymentAmount) by payerId, limit 50  alerts t1 (1), t3 (2), t4 (2), t6 (3), t7 (3)
    rule 2 ACTIVE  COUNT by payerId                         alert  t2 (1)         (another field: not a counterpart)
    rule 4 ACTIVE  MAX(paymentAmount) by payerId            no alert              (a counterpart, another aggregator)
    rule 5 ACTIVE  SUM(paymentAmount) by beneficiaryId      no alert              (other keys: not a counterpart)

Labels (fraud): t2, t4. Dispositions in force: 1:t1 false positive, 3:t1 false positive, 1:t5 confirmed fraud,
3:t6 false positive (after an earlier "unsure"), 3:t7 unsure, 1:t9 confirmed fraud (outside the range).

By hand, default range Feb 19 - Mar 3 (the 14 days ending with the newest alert of rules 3 and 1):
per day (shadow, compared) Mar 1 (1, 2), Mar 2 (2, 1), Mar 3 (2, 1), the 11 other days (0, 0); flagged by both t1,
t3 (0 fraud), only the shadow rule t4, t6, t7 (1 fraud: t4), only rule 1 t2, t5 (2 fraud); rule 3: 5 alerts, 3
decided (t1, t4, t6), 1 fraud, precision 1/3; rule 1: 4 alerts, 3 decided (t1, t2, t5), 2 fraud, precision 2/3.

    .venv/bin/python -m pytest -p no:xdist -q tests/test_shadow_comparison.py
"""

from __future__ import annotations

import datetime as dt
import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_support import Visitor, running_console
from dq_tables import alert, append, rule_row, transaction
from engine_fixtures import make_rule
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession

from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.console.rule_writes import TopicWriter
from pipelines.notebook_tools.runner import NOTEBOOKS_DIR, run_notebook
from pipelines.outcomes.accuracy import outcome_tables, rule_accuracy
from pipelines.outcomes.shadow_comparison import (
    ComparisonError,
    DayRange,
    FlagGroup,
    SideAccuracy,
    compare_rules,
    counterparts,
    default_days,
    with_rule_states,
)

LOCAL_CONF = str(REPO_ROOT / "conf" / "local.yaml")
RULES = {
    1: make_rule(1, ruleName="sums"),
    2: make_rule(2, aggregateFieldName="COUNT", aggregatorFunctionType="COUNT", limit=3),
    3: make_rule(3, ruleName="sums, lower", limit=50, ruleState="SHADOW"),
    4: make_rule(4, aggregatorFunctionType="MAX"),
    5: make_rule(5, groupingKeyNames=["beneficiaryId"]),
}
DAYS = {"t1": 1, "t2": 1, "t3": 2, "t4": 2, "t5": 3, "t6": 3, "t7": 3}
ALERTED = {1: ["t1", "t2", "t3", "t5", "t9"], 3: ["t1", "t3", "t4", "t6", "t7"], 2: ["t2"]}
DEFAULT = DayRange(dt.date(2024, 2, 19), dt.date(2024, 3, 3))


def _when(tx: str) -> dt.datetime:
    return dt.datetime(2024, 3, DAYS[tx], 12) if tx in DAYS else dt.datetime(2024, 2, 10, 12)


def _alert(rule_id: int, tx: str) -> dict[str, Any]:
    row = alert(f"{rule_id}:{tx}", RULES[rule_id], "100")
    return {**row, "transactionId": tx, "eventTime": _when(tx), "shadow": rule_id == 3}


def _decided(alert_id: str, disposition: str, hour: int) -> dict[str, Any]:
    rule, tx = alert_id.split(":")
    at = dt.datetime(2024, 3, 5, hour)
    return {
        "dispositionId": f"d-{alert_id}-{hour}",
        "alertId": alert_id,
        "ruleId": int(rule),
        "transactionId": tx,
        "disposition": disposition,
        "decidedBy": "ana",
        "decidedAt": at,
        "decidedDate": at.date(),
    }


@pytest.fixture(scope="module")
def lakehouse(spark: SparkSession, base_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    settings = base_settings.with_lakehouse(str(tmp_path_factory.mktemp("shadow") / "lakehouse"))
    fresh_lakehouse(spark, settings)
    append(spark, settings, "rules", [rule_row(rule, f"pos-{i}") for i, rule in RULES.items()])
    txs = [f"t{i}" for i in range(1, 10)]
    append(spark, settings, "bronze_transactions", [transaction(t, "60", event=_when(t)) for t in txs])
    append(spark, settings, "alerts", [_alert(rule_id, tx) for rule_id, alerted in ALERTED.items() for tx in alerted])
    marks = [
        _decided("1:t1", "FALSE_POSITIVE", 1),
        _decided("3:t1", "FALSE_POSITIVE", 1),
        _decided("1:t5", "CONFIRMED_FRAUD", 1),
        _decided("3:t6", "UNSURE", 1),
        _decided("3:t6", "FALSE_POSITIVE", 2),  # the later one is in force
        _decided("3:t7", "UNSURE", 1),
        _decided("1:t9", "CONFIRMED_FRAUD", 1),
    ]
    append(spark, settings, "alert_dispositions", marks)
    now = dt.datetime(2024, 3, 20)
    labels = [
        {"transactionId": t, "labelSource": "chargebacks", "importedAt": now, "importedBy": "ops"} for t in ("t2", "t4")
    ]
    append(spark, settings, "fraud_labels", labels)
    return settings


def _ids(group: FlagGroup) -> list[str]:
    return [str(t["transactionId"]) for t in group.first]


def test_the_comparison_equals_the_hand_computed_figures(spark: SparkSession, lakehouse: Settings) -> None:
    alerts, dispositions, labels, _ = outcome_tables(spark, lakehouse)
    days = default_days(alerts, [3, 1], today=dt.date(2030, 1, 1))
    assert days == DEFAULT, "the 14 days ending with the newest alert of either rule"
    result = compare_rules(alerts, dispositions, labels, shadow_rule_id=3, compared_rule_id=1, days=days)

    per_day = {str(d["day"]): (d["shadowAlerts"], d["comparedAlerts"]) for d in result.per_day}
    assert len(result.per_day) == 14 and [d["day"] for d in result.per_day] == sorted(d["day"] for d in result.per_day)
    assert {day: counts for day, counts in per_day.items() if counts != (0, 0)} == {
        "2024-03-01": (1, 2),
        "2024-03-02": (2, 1),
        "2024-03-03": (2, 1),
    }
    groups = {name: (g.transactions, g.fraud, _ids(g)) for name, g in result.groups.items()}
    assert groups == {
        "both": (2, 0, ["t1", "t3"]),
        "shadow_only": (3, 1, ["t4", "t6", "t7"]),
        "compared_only": (2, 2, ["t2", "t5"]),
    }
    assert result.groups["both"].first[0]["shadowAlertId"] == "3:t1"
    assert result.groups["both"].first[0]["comparedAlertId"] == "1:t1"
    assert result.sides == {
        "shadow": SideAccuracy(3, alerts=5, decided=3, fraud=1, not_fraud=2, precision=pytest.approx(1 / 3)),
        "compared": SideAccuracy(1, alerts=4, decided=3, fraud=2, not_fraud=1, precision=pytest.approx(2 / 3)),
    }


def test_a_narrower_range_and_a_short_sample(spark: SparkSession, lakehouse: Settings) -> None:
    """Mar 2-3 only: t1, t2 (Mar 1) and t9 (Feb 10) drop out; one transaction listed per category."""
    alerts, dispositions, labels, _ = outcome_tables(spark, lakehouse)
    days = DayRange(dt.date(2024, 3, 2), dt.date(2024, 3, 3))
    result = compare_rules(alerts, dispositions, labels, shadow_rule_id=3, compared_rule_id=1, days=days, sample=1)
    assert [(str(d["day"]), d["shadowAlerts"], d["comparedAlerts"]) for d in result.per_day] == [
        ("2024-03-02", 2, 1),
        ("2024-03-03", 2, 1),
    ]
    groups = {name: (g.transactions, g.fraud, _ids(g)) for name, g in result.groups.items()}
    assert groups == {"both": (1, 0, ["t3"]), "shadow_only": (3, 1, ["t4"]), "compared_only": (1, 1, ["t5"])}
    assert result.sides["shadow"] == SideAccuracy(3, 4, 2, 1, 1, 0.5)
    assert result.sides["compared"] == SideAccuracy(1, 2, 1, 1, 0, 1.0)


def test_counterparts_ranges_and_states(spark: SparkSession, lakehouse: Settings) -> None:
    rules = spark.read.format("delta").load(lakehouse.table_path("rules"))
    rows = [r.asDict() for r in rules.collect()]
    shadow = next(r for r in rows if r["ruleId"] == 3)
    assert counterparts(shadow, rows) == [1, 4], "same keys and field; the same aggregator first"
    assert counterparts({**shadow, "groupingKeyNames": ["beneficiaryId"]}, rows) == [5]
    with pytest.raises(ComparisonError, match="must not be after"):
        DayRange(dt.date(2024, 3, 2), dt.date(2024, 3, 1))
    with pytest.raises(ComparisonError, match="at most 92 days"):
        DayRange(dt.date(2024, 1, 1), dt.date(2024, 4, 2))
    alerts, dispositions, labels, _ = outcome_tables(spark, lakehouse)
    with pytest.raises(ComparisonError, match="itself"):
        compare_rules(alerts, dispositions, labels, shadow_rule_id=3, compared_rule_id=3, days=DEFAULT)
    assert default_days(alerts, [4], today=dt.date(2024, 6, 30)) == DayRange.ending(dt.date(2024, 6, 30))
    weekly = with_rule_states(rule_accuracy(alerts, dispositions, labels, outcome_tables(spark, lakehouse)[3]), rules)
    assert {(r["ruleId"], r["ruleState"], r["shadow"]) for r in weekly.collect()} == {
        (1, "ACTIVE", False),
        (2, "ACTIVE", False),
        (3, "SHADOW", True),
    }


# The console ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def url(lakehouse: Settings, spark: SparkSession) -> Iterator[str]:
    with running_console(lakehouse, writer=TopicWriter(lakehouse), spark=lambda: spark) as (server, _):
        yield server.url


@pytest.fixture(scope="module")
def ana(url: str) -> Visitor:
    person = Visitor(url)
    status, text, _ = person.sign_in("ana")
    assert status == 200, text[:2000]
    return person


def _cells(text: str, row_attr: str, classes: list[str]) -> dict[str, tuple[str, ...]]:
    """Per table row with ``row_attr="..."``: the text of the cells with these classes, in order."""
    found = {}
    for match in re.finditer(rf'<tr {row_attr}="([^"]+)"(.*?)</tr>', text, re.S):
        row = match.group(2)
        values = [re.search(rf'class="num {c}">([^<]*)<', row) for c in classes]
        found[match.group(1)] = tuple(v.group(1) if v else "?" for v in values)
    return found


def test_the_page_shows_the_hand_computed_figures(ana: Visitor) -> None:
    status, text, _ = ana.fetch("/rules/3/shadow")
    assert status == 200, text[:3000]
    assert 'id="compared-rule">1<' in text, "the default counterpart: rule 1"
    assert "From 2024-02-19 to 2024-03-03 (14 days" in text
    assert _cells(text, "data-side", ["alerts", "decided", "fraud", "precision"]) == {
        "shadow": ("5", "3", "1", "0.333"),
        "compared": ("4", "3", "2", "0.667"),
    }
    assert _cells(text, "data-category", ["transactions", "fraud"]) == {
        "both": ("2", "0"),
        "shadow_only": ("3", "1"),
        "compared_only": ("2", "2"),
    }
    assert re.findall(r'class="flagged-tx" data-tx="([^"]+)"', text) == ["t1", "t3", "t4", "t6", "t7", "t2", "t5"]
    days = _cells(text, "data-day", ["shadow-alerts", "compared-alerts"])
    assert len(days) == 14 and {d: c for d, c in days.items() if c != ("0", "0")} == {
        "2024-03-01": ("1", "2"),
        "2024-03-02": ("2", "1"),
        "2024-03-03": ("2", "1"),
    }
    evidence = re.findall(r'class="evidence" href="([^"]+)"', text)
    assert "/alerts/evidence?id=3%3At4" in evidence and "/alerts/evidence?id=1%3At1" in evidence
    status, shown, _ = ana.fetch("/alerts/evidence?id=3%3At4")
    assert status == 200 and "t4" in shown, "a shadow alert's evidence opens"


def test_another_rule_and_range_from_the_address(ana: Visitor, url: str) -> None:
    status, text, _ = ana.fetch("/rules/3/shadow?compared=4&from=2024-03-02&to=2024-03-03")
    assert status == 200, text[:3000]
    assert 'id="compared-rule">4<' in text and "From 2024-03-02 to 2024-03-03 (2 days" in text
    assert _cells(text, "data-side", ["alerts", "decided", "precision"]) == {
        "shadow": ("4", "2", "0.500"),
        "compared": ("0", "0", "-"),
    }
    assert _cells(text, "data-category", ["transactions", "fraud"]) == {
        "both": ("0", "0"),
        "shadow_only": ("4", "1"),
        "compared_only": ("0", "0"),
    }
    # A viewer reads it too (nothing is changed by this page).
    vic = Visitor(url)
    assert vic.sign_in("vic")[0] == 200
    assert vic.fetch("/rules/3/shadow?to=2024-03-03")[0] == 200


@pytest.mark.parametrize(
    ("address", "status", "message"),
    [
        ("/rules/3/shadow?compared=x", 400, "compared must be a rule id"),
        ("/rules/3/shadow?compared=3", 400, "not compared with itself"),
        ("/rules/3/shadow?from=2024-03-05&to=2024-03-01", 400, "must not be after"),
        ("/rules/3/shadow?from=2024-01-01&to=2024-06-01", 400, "at most 92 days"),
        ("/rules/3/shadow?from=2024-02-30", 400, "from is not a real date"),
        ("/rules/3/shadow?to=2024-03-01T12:00", 400, "to must be a date such as 2024-06-01"),
        ("/rules/3/shadow?compared=424242", 404, "no rule 424242 to compare with"),
        ("/rules/424242/shadow", 404, "no rule 424242"),
        ("/rules/%C2%B2/shadow", 400, "the rule id must be a rule id"),
    ],
)
def test_bad_addresses_are_refused_with_their_reason(ana: Visitor, address: str, status: int, message: str) -> None:
    got, text, _ = ana.fetch(address)
    assert got == status and message in html.unescape(text), text[:2000]
    assert "Traceback" not in text


def test_shadow_rules_are_marked_offered_and_labelled(ana: Visitor) -> None:
    status, text, _ = ana.fetch("/rules")
    assert status == 200
    row = re.search(r'<tr data-rule-id="3" class="shadow-rule">(.*?)</tr>', text, re.S)
    assert row and 'class="badge shadow">SHADOW<' in row.group(1) and 'href="/rules/3/shadow"' in row.group(1)
    assert 'data-rule-id="1" class="shadow-rule"' not in text
    status, text, _ = ana.fetch("/rules/3")
    assert status == 200 and 'id="compare-shadow"' in text and 'id="promote-rule"' in text
    status, text, _ = ana.fetch("/rules/new")
    assert status == 200 and "<option >SHADOW</option>" in text, "an analyst can create a rule in shadow"
    status, text, _ = ana.fetch("/rules/3/edit")
    assert status == 200 and "<option selected>SHADOW</option>" in text, "editing keeps a SHADOW rule in shadow"
    status, text, _ = ana.fetch("/accuracy")
    assert status == 200
    labelled = re.findall(r'<tr data-rule="(\d+)" data-week="[\d-]+" class="shadow-rule">', text)
    assert labelled and set(labelled) == {"3"}
    assert re.search(r'data-rule="3".*?class="badge shadow">SHADOW<', text, re.S)


# The notebook -----------------------------------------------------------------------------------------------------


def test_notebook_06_shows_accuracy_and_the_comparison(
    spark: SparkSession, lakehouse: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parameters = {"conf": LOCAL_CONF, "lakehouse": lakehouse.lakehouse_root}
    result = run_notebook(NOTEBOOKS_DIR / "06_rule_accuracy.py", spark, parameters=parameters, output_dir=tmp_path)
    printed = capsys.readouterr().out
    assert "rule 3 (shadow) vs rule 1, 2024-02-19 to 2024-03-03" in printed
    assert "shadow    rule 3: 5 alerts, 3 decided, precision 0.333" in printed
    assert "compared  rule 1: 4 alerts, 3 decided, precision 0.667" in printed
    assert "shadow_only    3 transactions, 1 fraud; first: t4, t6, t7" in printed
    weekly, per_day = [o.text for o in result.outputs if o.kind == "table"]
    assert any(line.split()[:3] == ["3", "SHADOW", "True"] for line in weekly.splitlines())
    assert len(per_day.splitlines()) == 1 + 14
