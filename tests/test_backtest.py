"""A rule backtest equals the reference evaluator over the same bronze history taken as one batch, writes nothing.

Bronze is written the way the engine writes it (``parse_raw`` -> ``bronze_rows``), in two batches: the second
resends one transaction id (the backtest keeps the first copy) and has rows flagged late (the backtest evaluates
them: in hindsight nothing is late). The history spans a UTC midnight, so day tiles, hour tiles and per-day counts
are all exercised.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from engine_fixtures import make_rule, paused, raw_frame
from lakehouse_template import fresh_lakehouse
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, DecimalType, LongType, StringType, StructField, StructType
from reference_evaluator import RefAlert, RefBatch, evaluate
from rules_cdc_support import write_conf

from delta_tables.catalog import all_tables
from delta_tables.table_snapshot import table_version
from pipelines.base.settings import Settings
from pipelines.cli import main
from pipelines.engine.backtest import BACKTEST_COLUMNS, backtest_per_day, backtest_rule, parse_instant_ms
from pipelines.engine.keys import encode_key
from pipelines.engine.parse_transactions import bronze_rows, flag_duplicates, parse_raw
from rules_cdc.rule_model import Rule, RuleState

MIN = 60_000
HOUR = 60 * MIN
T0 = 1_700_006_400_000  # a UTC midnight (2023-11-15)
CLUSTERS = (T0 + 10 * HOUR, T0 + 24 * HOUR - 12 * MIN, T0 + 33 * HOUR)  # day 1, across midnight, day 2
LATE_BEFORE = max(CLUSTERS) - 20 * MIN  # rows of the second batch before this are flagged late in bronze
ALERT_SCHEMA = StructType(
    [
        StructField("ruleId", LongType()),
        StructField("transactionId", StringType()),
        StructField("keyValue", StringType()),
        StructField("eventTimeMs", LongType()),
        StructField("aggregateValue", DecimalType(38, 6)),
        StructField("limit", DecimalType(38, 6)),
    ]
)
PER_DAY_SCHEMA = StructType(
    [StructField("day", DateType()), StructField("alerts", LongType()), StructField("keys", LongType())]
)


def _records(rng: random.Random, batch: int, count: int) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for n in range(count):
        center = CLUSTERS[n % len(CLUSTERS)]
        pick = rng.random()
        if pick < 0.15 and records:
            t = rng.choice(records)["eventTime"]  # an equal timestamp
        elif pick < 0.3:
            t = center + rng.randint(-5, 25) * MIN - rng.choice([0, 1])  # on or just before a bucket edge
        else:
            t = center + rng.randint(-5 * MIN, 25 * MIN)
        record = {
            "transactionId": f"b{batch}-{n:04d}",
            "eventTime": t,
            "payerId": rng.choice([1, 2, 3, None]),
            "beneficiaryId": rng.choice([10, 11, None]),
            "paymentAmount": Decimal(rng.randint(1, 20_000)) / 100,
            "paymentType": rng.choice(["CSH", "CRD", "TRF"]),
            "channel": rng.choice(["WEB", "POS", None]),
        }
        records.append({k: v for k, v in record.items() if v is not None})
    return records


def _append_bronze(spark: SparkSession, settings: Settings, records: Sequence[dict[str, Any]], batch_id: int) -> None:
    """Append records to bronze exactly as the engine does; rows older than the previous batch's max are late."""
    parsed = flag_duplicates(parse_raw(raw_frame(spark, records), settings.transaction_schema))
    valid = parsed.where("reason IS NULL").withColumn("ingestedAt", F.current_timestamp())
    late = F.col("eventTimeMs") < F.lit(LATE_BEFORE) if batch_id else F.lit(False)
    rows = bronze_rows(valid, settings.transaction_schema, batch_id=batch_id, late=late)
    rows.write.format("delta").mode("append").save(settings.table_path("bronze_transactions"))


def _late(transactions: Sequence[dict[str, Any]]) -> set[str]:
    return {
        t["transactionId"]
        for t in transactions
        if t["transactionId"].startswith("b1-") and t["eventTime"] < LATE_BEFORE
    }


class History:
    """The bronze history of this module: the records the backtest must treat as one batch."""

    def __init__(self, settings: Settings, transactions: list[dict[str, Any]], versions: dict[str, int]) -> None:
        self.settings = settings
        self.transactions = transactions
        self.versions = versions
        self.late_ids = _late(transactions)

    def reference(self, rule: Rule, *, since: int | None = None, until: int | None = None) -> list[RefAlert]:
        """The reference alerts of ``rule`` (as ACTIVE) over all transactions before ``until``, as one batch;
        only those of transactions from ``since`` on."""
        active = rule.model_copy(update={"rule_state": RuleState.ACTIVE})
        kept = [t for t in self.transactions if until is None or t["eventTime"] < until]
        alerts = evaluate([RefBatch(rules=[active], transactions=kept)], bucket_seconds=60)
        by_id = {t["transactionId"]: t for t in kept}
        return [a for a in alerts if since is None or by_id[a.transaction_id]["eventTime"] >= since]

    def expected_frame(self, spark: SparkSession, rule: Rule, alerts: Sequence[RefAlert]) -> DataFrame:
        by_id = {t["transactionId"]: t for t in self.transactions}
        rows = [
            (a.rule_id, a.transaction_id, encode_key(a.key), by_id[a.transaction_id]["eventTime"], a.aggregate_value)
            for a in alerts
        ]
        return spark.createDataFrame([(*row, rule.limit) for row in rows], ALERT_SCHEMA)

    def current_versions(self, spark: SparkSession) -> dict[str, int]:
        return {s.name: table_version(spark, self.settings.table_path(s.name)) for s in all_tables(self.settings)}


@pytest.fixture(scope="module")
def history(spark: SparkSession, base_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> History:
    settings = base_settings.with_lakehouse(str(tmp_path_factory.mktemp("backtest") / "lakehouse"))
    fresh_lakehouse(spark, settings)
    rng = random.Random(20240611)
    first, second = _records(rng, 0, 150), _records(rng, 1, 150)
    resent = {**first[7], "paymentAmount": Decimal("199.99"), "eventTime": first[7]["eventTime"] + MIN}
    _append_bronze(spark, settings, first, 0)
    _append_bronze(spark, settings, [*second, resent], 1)
    versions = {s.name: table_version(spark, settings.table_path(s.name)) for s in all_tables(settings)}
    return History(settings, [*first, *second], versions)  # the resent copy is not part of the history


def _actual(alerts: DataFrame) -> DataFrame:
    return alerts.select(
        "ruleId",
        "transactionId",
        "keyValue",
        F.unix_millis("eventTime").alias("eventTimeMs"),
        "aggregateValue",
        "limit",
    )


WEB_OR_MOBILE = {"field": "channel", "op": "IN", "value": ["WEB", "MOBILE"]}
RULES = {
    "sum_by_payer_and_beneficiary_with_filter": make_rule(
        11, groupingKeyNames=["payerId", "beneficiaryId"], limit=250, windowMinutes=20, filter=WEB_OR_MOBILE
    ),
    "count_global": make_rule(
        12,
        groupingKeyNames=[],
        aggregatorFunctionType="COUNT",
        limitOperatorType="GREATER_EQUAL",
        limit=9,
        windowMinutes=4,
    ),
    "count_with_cooldown": make_rule(
        13,
        aggregateFieldName="COUNT_FLINK",
        limitOperatorType="GREATER_EQUAL",
        limit=4,
        windowMinutes=5,
        cooldownMinutes=6,
    ),
    "paused_max_over_a_day": paused(
        make_rule(14, aggregatorFunctionType="MAX", limitOperatorType="GREATER_EQUAL", limit=190, windowMinutes=1500)
    ),
}


@pytest.mark.parametrize("name", sorted(RULES))
def test_backtest_equals_the_reference_as_one_batch(spark: SparkSession, history: History, name: str) -> None:
    rule = RULES[name]
    actual = backtest_rule(spark, history.settings, rule)
    assert tuple(actual.columns) == BACKTEST_COLUMNS
    expected_alerts = history.reference(rule)
    assert len(expected_alerts) >= 5, f"{name}: the data should make this rule alert"
    assert_df_equality(
        _actual(actual),
        history.expected_frame(spark, rule, expected_alerts),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    # Late-flagged rows are evaluated, and the cooldown suppressed some alerts: the data exercises both.
    assert history.late_ids & {a.transaction_id for a in expected_alerts}, f"{name}: no alert on a late row"
    if rule.cooldown_minutes:
        uncooled = history.reference(rule.model_copy(update={"cooldown_minutes": None}))
        assert len(uncooled) > len(expected_alerts)
    assert history.current_versions(spark) == history.versions, "a backtest must write nothing"


def test_late_rows_are_evaluated_and_resent_ids_counted_once(spark: SparkSession, history: History) -> None:
    bronze = spark.read.format("delta").load(history.settings.table_path("bronze_transactions"))
    late = {r["transactionId"] for r in bronze.where("isLate").select("transactionId").collect()}
    rule = make_rule(21, groupingKeyNames=[], aggregateFieldName="COUNT", aggregatorFunctionType="COUNT", limit=0)
    alerted = {r["transactionId"] for r in backtest_rule(spark, history.settings, rule).collect()}
    assert late and late <= alerted  # every transaction alerts under COUNT > 0, late-flagged ones too
    assert len(alerted) == len(history.transactions)  # the resent id once
    # The resent copy (amount 199.99, a minute later) is not the one counted: SUM over every transaction agrees.
    total = make_rule(22, groupingKeyNames=[], limit=-1, windowMinutes=43_200)
    assert_df_equality(
        _actual(backtest_rule(spark, history.settings, total)),
        history.expected_frame(spark, total, history.reference(total)),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def test_window_evaluates_from_to_with_the_lookback_before_from(spark: SparkSession, history: History) -> None:
    rule = RULES["sum_by_payer_and_beneficiary_with_filter"]
    since, until = CLUSTERS[1] + 5 * MIN, CLUSTERS[1] + 18 * MIN  # around midnight
    actual = backtest_rule(spark, history.settings, rule, from_ms=since, to_ms=until)
    expected = history.reference(rule, since=since, until=until)
    assert expected
    assert_df_equality(
        _actual(actual), history.expected_frame(spark, rule, expected), ignore_row_order=True, ignore_nullable=True
    )
    # Reading only [from, to) would give other answers: the rows of the window before ``from`` count.
    only_window = [t for t in history.transactions if since <= t["eventTime"] < until]
    cut = evaluate([RefBatch(rules=[rule], transactions=only_window)], bucket_seconds=60)
    assert {(a.transaction_id, a.aggregate_value) for a in cut} != {
        (a.transaction_id, a.aggregate_value) for a in expected
    }


def test_per_day_counts_alerts_and_distinct_keys(spark: SparkSession, history: History) -> None:
    rule = RULES["sum_by_payer_and_beneficiary_with_filter"]
    expected = history.reference(rule)
    by_id = {t["transactionId"]: t for t in history.transactions}
    days: dict[dt.date, list[str]] = {}
    for alert in expected:
        day = dt.datetime.fromtimestamp(by_id[alert.transaction_id]["eventTime"] / 1000, dt.UTC).date()
        days.setdefault(day, []).append(encode_key(alert.key))
    rows = [(day, len(keys), len(set(keys))) for day, keys in sorted(days.items())]
    assert len(rows) == 2
    per_day = backtest_per_day(backtest_rule(spark, history.settings, rule))
    assert_df_equality(per_day, spark.createDataFrame(rows, PER_DAY_SCHEMA), ignore_nullable=True)  # ordered by day


def test_cli_backtest_writes_the_alerts_as_json_lines(
    spark: SparkSession, history: History, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rule = RULES["count_with_cooldown"]
    candidate = tmp_path / "candidate.json"
    candidate.write_text(json.dumps(rule.to_json_dict()))
    conf = write_conf(history.settings, tmp_path)
    output = tmp_path / "out" / "alerts.jsonl"
    since, until = "2023-11-15T10:10:00", "2023-11-16T09:20:00Z"
    common = ["--conf", str(conf), "--lakehouse", history.settings.lakehouse_root]
    capsys.readouterr()
    code = main(["rules", "backtest", str(candidate), "--from", since, "--to", until, "--output", str(output), *common])
    out = capsys.readouterr().out
    assert code == 0
    from_ms, to_ms = parse_instant_ms(since), parse_instant_ms(until)
    assert (from_ms, to_ms) == (T0 + 10 * HOUR + 10 * MIN, T0 + 33 * HOUR + 20 * MIN)
    expected = backtest_rule(spark, history.settings, rule, from_ms=from_ms, to_ms=to_ms)
    lines = output.read_text().splitlines()
    assert lines
    assert f"rule 13: {len(lines)} alerts" in out
    written = spark.read.schema(expected.schema).json(str(output))
    assert_df_equality(written, expected, ignore_row_order=True, ignore_nullable=True)
    assert history.current_versions(spark) == history.versions

    candidate.write_text(json.dumps({**rule.to_json_dict(), "groupingKeyNames": ["nope"]}))
    assert main(["rules", "backtest", str(candidate), *common]) == 2
    assert "unknown transaction fields" in capsys.readouterr().err


def test_a_rule_naming_unknown_fields_is_refused(spark: SparkSession, history: History) -> None:
    rule = make_rule(31, aggregateFieldName="nope")
    with pytest.raises(ValueError, match="not a transaction field"):
        backtest_rule(spark, history.settings, rule)
