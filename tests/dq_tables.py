"""Lakehouse tables for the data-quality tests: a clean set, and corruptions each guarded by one expectation.

Rows are written with the real table schemas, read from delta_tables at run time: a column a row does not name
gets null, or a neutral value when it is NOT NULL, so a column the engine adds later does not break the tests.
Rules are written with ``rules_cdc.rule_rows.rule_to_row``. Tests import it as ``from dq_tables import ...``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampType,
)

from delta_tables.catalog import all_tables
from delta_tables.table_spec import create_table
from pipelines.base.settings import Settings
from pipelines.data_quality.suites import TABLES
from rules_cdc.rule_model import Rule, RuleState, parse_rule
from rules_cdc.rule_rows import rule_snapshot_json, rule_to_row

BASE = dt.datetime(2024, 3, 1, 12, 0, 0)
BASE_MS = int(BASE.replace(tzinfo=dt.UTC).timestamp() * 1000)
DAY_MS = 24 * 3600 * 1000
MINUTE = dt.timedelta(minutes=1)
_NEUTRAL: dict[type[DataType], Any] = {
    StringType: "",
    LongType: 0,
    IntegerType: 0,
    DoubleType: 0.0,
    BooleanType: False,
    TimestampType: BASE,
    DateType: BASE.date(),
    DecimalType: Decimal(0),
}


def _neutral(data_type: DataType) -> Any:
    if isinstance(data_type, ArrayType):
        return []
    if isinstance(data_type, MapType):
        return {}
    return _NEUTRAL[type(data_type)]


def frame(spark: SparkSession, schema: StructType, rows: list[dict[str, Any]]) -> DataFrame:
    """Rows as a frame of ``schema``: keys it lacks are dropped, columns a row lacks get null or a neutral value."""
    values = [
        tuple(row[f.name] if f.name in row else (None if f.nullable else _neutral(f.dataType)) for f in schema.fields)
        for row in rows
    ]
    return spark.createDataFrame(values, schema)


def append(spark: SparkSession, settings: Settings, table: str, rows: list[dict[str, Any]]) -> None:
    (spec,) = [s for s in all_tables(settings) if s.name == table]
    frame(spark, spec.schema, rows).write.format("delta").mode("append").save(settings.table_path(table))


def transaction(tx_id: str, amount: str | None, *, event: dt.datetime = BASE, payer: int = 1) -> dict[str, Any]:
    return {
        "transactionId": tx_id,
        "eventTime": event,
        "payerId": payer,
        "beneficiaryId": 7,
        "paymentAmount": None if amount is None else Decimal(amount),
        "paymentType": "CSH",
        "currency": "EUR",
        "eventDate": event.date(),
        "ingestedAt": BASE + MINUTE,
        "source": "files",
        "batchId": 0,
        "isLate": False,
    }


def bucket(start_ms: int, count: int, total: str | None, low: str | None, high: str | None) -> dict[str, Any]:
    def dec(value: str | None) -> Decimal | None:
        return None if value is None else Decimal(value)

    return {
        "stateId": "s1",
        "keyValue": "1",
        "level": 0,
        "bucketStart": start_ms,
        "sum": dec(total),
        "count": count,
        "valueCount": count,
        "min": dec(low),
        "max": dec(high),
        "lastBatchId": 0,
        "updatedAt": BASE,
    }


def alert(
    alert_id: str, rule: Rule, value: str, *, rule_id: int | None = None, snapshot: str | None = ""
) -> dict[str, Any]:
    return {
        "alertId": alert_id,
        "ruleId": rule.rule_id if rule_id is None else rule_id,
        "ruleSourcePosition": f"pos-{rule.rule_id}",
        "ruleSnapshot": rule_snapshot_json(rule) if snapshot == "" else snapshot,
        "rulesVersion": 1,
        "keyValue": "1",
        "transactionId": "t3",
        "eventTime": BASE,
        "aggregateValue": Decimal(value),
        "aggregatorFunctionType": rule.aggregator_function_type.value,
        "limitOperatorType": rule.limit_operator_type.value,
        "limit": rule.limit,
        "windowMinutes": rule.window_minutes,
        "detectedAt": BASE + 2 * MINUTE,
        "batchId": 0,
        "ingestedAt": BASE + MINUTE,
        "latencyMs": 500,
        "detectedDate": BASE.date(),
    }


def rules_of(settings: Settings) -> tuple[Rule, Rule]:
    schema = settings.transaction_schema
    sums = parse_rule(
        {
            "ruleId": 1,
            "ruleName": "big sums",
            "groupingKeyNames": ["payerId"],
            "aggregateFieldName": "paymentAmount",
            "aggregatorFunctionType": "SUM",
            "limitOperatorType": "GREATER",
            "limit": 100,
            "windowMinutes": 60,
        },
        schema,
    )
    counts = parse_rule(
        {
            "ruleId": 2,
            "groupingKeyNames": ["payerId"],
            "aggregateFieldName": "COUNT",
            "aggregatorFunctionType": "COUNT",
            "limitOperatorType": "GREATER_EQUAL",
            "limit": 3,
            "windowMinutes": 10,
        },
        schema,
    )
    return sums, counts


def rule_row(rule: Rule, position: str, **overrides: Any) -> dict[str, Any]:
    row = rule_to_row(rule, source_position=position, source_op="c", source_ts_ms=BASE_MS, now=BASE)
    return {**row, **overrides}


def build_clean(spark: SparkSession, settings: Settings) -> None:
    for spec in all_tables(settings):
        if spec.name in (*TABLES, "rule_changes"):
            create_table(spark, spec, settings.table_path(spec.name))
    sums, counts = rules_of(settings)
    append(
        spark,
        settings,
        "bronze_transactions",
        [transaction("t1", "10.00"), transaction("t2", "20.00"), transaction("t3", "130.00", payer=2)],
    )
    deleted_counts = rule_row(counts, "pos-2b", ruleState=RuleState.DELETED.value, sourceOp="d", tombstonedAt=BASE)
    # A content-free tombstone, as a delete event without a "before" image leaves it.
    bare_tombstone = {
        "ruleId": 3,
        "ruleState": "DELETED",
        "disabled": False,
        "sourcePosition": "pos-3",
        "sourceOp": "d",
        "tombstonedAt": BASE,
        "updatedAt": BASE,
    }
    append(spark, settings, "rules", [rule_row(sums, "pos-1"), deleted_counts, bare_tombstone])
    append(
        spark,
        settings,
        "rule_changes",
        [
            {"ruleId": 1, "op": "c", "sourcePosition": "pos-1", "after": rule_snapshot_json(sums), "appliedAt": BASE},
            {"ruleId": 2, "op": "c", "sourcePosition": "pos-2", "after": rule_snapshot_json(counts), "appliedAt": BASE},
            {"ruleId": 2, "op": "d", "sourcePosition": "pos-2b", "appliedAt": BASE},
        ],
    )
    append(
        spark,
        settings,
        "bucket_state",
        [
            bucket(BASE_MS, 2, "30", "10", "20"),
            bucket(BASE_MS - 60_000, 1, "130", "130", "130"),
            bucket(BASE_MS - 20 * DAY_MS, 1, "5", "5", "5"),
        ],
    )
    append(spark, settings, "alerts", [alert("a1", sums, "150"), alert("a2", counts, "3")])


@dataclass(frozen=True)
class Corruption:
    name: str
    table: str
    expectation: str
    columns: str


CORRUPTIONS = [
    Corruption("duplicate transactionId", "bronze_transactions", "expect_column_values_to_be_unique", "transactionId"),
    Corruption("negative amount", "bronze_transactions", "expect_column_values_to_be_between", "paymentAmount"),
    Corruption("required field missing", "bronze_transactions", "expect_column_values_to_not_be_null", "paymentAmount"),
    Corruption(
        "event time far in the future",
        "bronze_transactions",
        "expect_column_values_to_be_in_set",
        "dq_event_time_not_in_future",
    ),
    Corruption("two current rows for one rule id", "rules", "expect_column_values_to_be_unique", "ruleId"),
    Corruption(
        "tombstone without tombstonedAt", "rules", "expect_column_values_to_be_in_set", "dq_tombstone_consistent"
    ),
    Corruption("unknown limit operator", "rules", "expect_column_values_to_be_in_set", "limitOperatorType"),
    Corruption("bucket with min > max", "bucket_state", "expect_column_pair_values_a_to_be_greater_than_b", "max, min"),
    Corruption(
        "sum beyond count * max", "bucket_state", "expect_column_values_to_be_in_set", "dq_sum_within_count_bounds"
    ),
    Corruption("bucket beyond retention", "bucket_state", "expect_column_values_to_be_in_set", "dq_within_retention"),
    Corruption("empty bucket", "bucket_state", "expect_column_values_to_be_between", "count"),
    Corruption(
        "alert whose value fails its operator", "alerts", "expect_column_values_to_be_in_set", "dq_operator_holds"
    ),
    Corruption(
        "alert of a rule that never existed", "alerts", "expect_column_values_to_be_in_set", "dq_refers_to_known_rule"
    ),
    Corruption("duplicate alertId", "alerts", "expect_column_values_to_be_unique", "alertId"),
    Corruption("snapshot of another rule", "alerts", "expect_column_values_to_be_in_set", "dq_snapshot_matches"),
]


def seed_corruptions(spark: SparkSession, settings: Settings) -> None:
    sums, counts = rules_of(settings)
    future = transaction("t91", "5.00", event=BASE + dt.timedelta(days=1))
    append(
        spark,
        settings,
        "bronze_transactions",
        [transaction("t1", "10.00"), transaction("t90", "-5.00"), future, transaction("t92", None)],
    )
    append(
        spark,
        settings,
        "rules",
        [
            rule_row(sums, "pos-1c"),
            rule_row(counts, "pos-5", ruleId=5, ruleState="DELETED", sourceOp="d", tombstonedAt=None),
            rule_row(sums, "pos-6", ruleId=6, limitOperatorType="ABOVE"),
        ],
    )
    append(
        spark,
        settings,
        "bucket_state",
        [
            bucket(BASE_MS + 60_000, 2, "60", "50", "10"),
            bucket(BASE_MS + 120_000, 2, "100", "10", "20"),
            bucket(BASE_MS - 40 * DAY_MS, 1, "5", "5", "5"),
            bucket(BASE_MS + 180_000, 0, None, None, None),
        ],
    )
    append(
        spark,
        settings,
        "alerts",
        [
            alert("a90", sums, "50"),
            alert("a91", sums, "150", rule_id=999, snapshot=None),
            alert("a1", sums, "150"),
            alert("a92", sums, "150", snapshot=rule_snapshot_json(counts)),
        ],
    )
