"""Dispositions, fraud labels and each rule's accuracy, against figures computed by hand from a small fixture.

Two weeks (BASE is Friday 2024-03-01; ISO weeks start Monday 2024-02-26 and 2024-03-04). Ten transactions in the
first week (t1..t10), four in the second (t11..t14). Rule 1 alerts on t1-t4 and t11, rule 2 on t1 and t5.
Labels (chargebacks): t1, t6 (no rule caught it), t11. Dispositions: rule 1/t2 false positive then confirmed
fraud (the later wins), rule 1/t3 false positive, rule 1/t4 unsure, rule 1/t1 false positive (the label wins),
rule 2/t5 false positive.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from dq_tables import BASE
from outcomes_fixture import WEEK1, WEEK2, two_weeks
from pyspark.sql import SparkSession

from delta_tables.fraud_labels import FRAUD_LABELS
from delta_tables.quarantine import QUARANTINE
from pipelines.base.settings import Settings
from pipelines.cli import main
from pipelines.outcomes.accuracy import WatchItem, alert_outcomes, outcome_tables, rule_accuracy, watch_list
from pipelines.outcomes.dispositions import DispositionError, record_disposition
from pipelines.outcomes.labels import ImportResult, LabelImportError, import_labels


@pytest.fixture(scope="module")
def lakehouse(spark: SparkSession, base_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """One lakehouse for the module (the tests read it; the CLI test, last, adds a disposition)."""
    folder = tmp_path_factory.mktemp("outcomes")
    settings = base_settings.with_lakehouse(str(folder / "lakehouse"))
    labels = two_weeks(
        spark,
        settings,
        folder,
        extra_rows=(
            "t1,2024-03-21T10:00:00,4837",  # the same chargeback twice in one file: one label
            ",2024-03-29T10:00:00,4863",  # no transaction id: quarantined, not dropped
        ),
    )
    marks = [
        ("1:t2", "FALSE_POSITIVE", 1),
        ("1:t2", "CONFIRMED_FRAUD", 2),
        ("1:t3", "FALSE_POSITIVE", 1),
        ("1:t4", "UNSURE", 1),
        ("1:t1", "FALSE_POSITIVE", 1),
        ("2:t5", "FALSE_POSITIVE", 1),
    ]
    for alert_id, decision, hour in marks:
        at = dt.datetime(2024, 3, 5, hour, tzinfo=dt.UTC)
        record_disposition(spark, settings, alert_id=alert_id, disposition=decision, decided_by="ana", now=at)
    result = import_labels(spark, settings, str(labels), label_source="chargebacks", imported_by="ops")
    assert result == ImportResult(labels=3, inserted=3, already_known=0, quarantined=1)
    return settings


def test_precision_catch_and_rate_per_rule_and_week_equal_the_hand_computed_figures(
    spark: SparkSession, lakehouse: Settings
) -> None:
    weekly = rule_accuracy(*outcome_tables(spark, lakehouse))
    got = {
        (r["ruleId"], r["week"]): (
            r["alerts"],
            r["decided"],
            r["fraud"],
            r["notFraud"],
            r["precision"],
            r["labelledFraud"],
            r["caught"],
            r["fraudCaughtShare"],
            r["transactions"],
            r["alertRate"],
        )
        for r in weekly.collect()
    }
    assert got == {
        (1, WEEK1): (4, 3, 2, 1, pytest.approx(2 / 3), 2, 1, 0.5, 10, 0.4),
        (1, WEEK2): (1, 1, 1, 0, 1.0, 1, 1, 1.0, 4, 0.25),
        (2, WEEK1): (2, 2, 1, 1, 0.5, 2, 1, 0.5, 10, 0.2),
    }


def test_a_label_outranks_a_false_positive_and_a_later_disposition_wins(
    spark: SparkSession, lakehouse: Settings
) -> None:
    alerts, dispositions, labels, _ = outcome_tables(spark, lakehouse)
    outcome = {r["alertId"]: r["outcome"] for r in alert_outcomes(alerts, dispositions, labels).collect()}
    assert outcome == {
        "1:t1": "fraud",  # analyst said false positive; the chargeback says fraud
        "1:t2": "fraud",  # false positive at 01:00, confirmed fraud at 02:00
        "1:t3": "not_fraud",
        "1:t4": "unknown",
        "1:t11": "fraud",
        "2:t1": "fraud",
        "2:t5": "not_fraud",
    }
    assert dispositions.count() == 6, "dispositions are append-only: the superseded one is kept"


def test_the_watch_list_names_silent_and_imprecise_rules(spark: SparkSession, lakehouse: Settings) -> None:
    alerts, dispositions, labels, _ = outcome_tables(spark, lakehouse)
    items = watch_list(
        [1, 2, 3],
        alerts,
        alert_outcomes(alerts, dispositions, labels),
        now=(BASE + dt.timedelta(days=8)).replace(tzinfo=dt.UTC),
        silent_days=5,
        min_precision=0.6,
        min_decided=2,
    )
    assert [(i.rule_id, i.reason.split(" (")[0]) for i in items] == [
        (2, "no alert in 5 days"),
        (3, "no alert in 5 days"),
        (2, "precision 0.50 over 2 decided alerts"),
    ]
    assert isinstance(items[0], WatchItem)


def test_a_second_import_adds_nothing_and_bad_rows_are_kept_in_quarantine(
    spark: SparkSession, lakehouse: Settings
) -> None:
    source = str(Path(lakehouse.lakehouse_root).parent / "chargebacks.csv")
    again = import_labels(spark, lakehouse, source, label_source="chargebacks", imported_by="ops")
    assert (again.inserted, again.already_known) == (0, 3)
    labels = spark.read.format("delta").load(lakehouse.table_path(FRAUD_LABELS.name))
    assert sorted(r["transactionId"] for r in labels.collect()) == ["t1", "t11", "t6"]
    quarantined = spark.read.format("delta").load(lakehouse.table_path(QUARANTINE.name)).collect()
    assert len(quarantined) == 1, "the bad row is kept once, however often the file is imported"
    assert {(r["source"], r["reason"]) for r in quarantined} == {("fraud_labels", "label without a transactionId")}
    assert all('"reason":"4863"' in r["rawPayload"] for r in quarantined)


def test_refusals(spark: SparkSession, lakehouse: Settings, tmp_path: Path) -> None:
    with pytest.raises(DispositionError, match="no alert"):
        record_disposition(spark, lakehouse, alert_id="9:nope", disposition="UNSURE", decided_by="ana")
    with pytest.raises(DispositionError, match="not one of"):
        record_disposition(spark, lakehouse, alert_id="1:t1", disposition="MAYBE", decided_by="ana")
    with pytest.raises(DispositionError, match="who made it"):
        record_disposition(spark, lakehouse, alert_id="1:t1", disposition="UNSURE", decided_by="  ")
    no_id = tmp_path / "no_id.csv"
    no_id.write_text("txn,reason\nt1,4837\n")
    with pytest.raises(LabelImportError, match="transactionId column"):
        import_labels(spark, lakehouse, str(no_id), label_source="chargebacks", imported_by="ops")


def test_the_cli_marks_an_alert_and_prints_the_accuracy(
    lakehouse: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--lakehouse", lakehouse.lakehouse_root]
    assert main(["outcomes", "mark", "1:t4", "--as", "fraud", "--by", "bo", *where]) == 0
    assert "alert 1:t4 marked CONFIRMED_FRAUD by bo" in capsys.readouterr().out
    assert main(["outcomes", "accuracy", *where]) == 0
    shown = capsys.readouterr().out
    first_week = next(line for line in shown.splitlines() if line.startswith("   1  2024-02-26"))
    assert first_week.split()[2:5] == ["4", "4", "0.75"]  # t4 now decided: 3 fraud of 4
    assert main(["outcomes", "mark", "1:t4", "--as", "maybe", *where]) == 2
    assert "not one of" in capsys.readouterr().out
