"""The expectation suites, built in code (the one source of truth) and versioned as JSON under conf/expectations.

Thresholds that differ per environment are GX suite parameters (``{"$PARAMETER": "max_amount"}``) filled from
``settings.quality`` at validation time, so the JSON does not change per conf. Column lists come from conf
(``transaction_schema``) and enums from the rule model, so a change there shows up as a JSON diff:
``fraudlake dq --write-suites`` regenerates the files and a test fails while they are stale.

Example::

    suites = build_suites(settings)                  # {'bronze_transactions': ExpectationSuite, ...}
    batch.validate(suites["alerts"], expectation_parameters=suite_parameters(settings))
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from great_expectations.core import ExpectationSuite

# Imported from their defining modules: great_expectations.expectations re-exports them without __all__.
from great_expectations.expectations.core.expect_column_pair_values_a_to_be_greater_than_b import (
    ExpectColumnPairValuesAToBeGreaterThanB,
)
from great_expectations.expectations.core.expect_column_values_to_be_between import ExpectColumnValuesToBeBetween
from great_expectations.expectations.core.expect_column_values_to_be_in_set import ExpectColumnValuesToBeInSet
from great_expectations.expectations.core.expect_column_values_to_be_unique import ExpectColumnValuesToBeUnique
from great_expectations.expectations.core.expect_column_values_to_not_be_null import ExpectColumnValuesToNotBeNull
from great_expectations.expectations.expectation import Expectation

from delta_tables.bucket_state import BUCKET_STATE_SCHEMA
from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.data_quality.checks import DERIVED_CHECKS
from rules_cdc.rule_model import MAX_WINDOW_MINUTES, Aggregator, LimitOperator, RuleState

SUITES_DIR = REPO_ROOT / "conf" / "expectations"
SUITE_PREFIX = "fraudlake."
TABLES = ("bronze_transactions", "rules", "bucket_state", "alerts")
"""The tables that have a suite, in the order they are validated and reported."""


def suite_parameters(settings: Settings) -> dict[str, Any]:
    """Values of the ``$PARAMETER`` references in the suites, from ``settings.quality``."""
    return {"max_amount": float(settings.quality.max_amount)}


def _derived(table: str) -> list[Expectation]:
    return [
        ExpectColumnValuesToBeInSet(column=check.column, value_set=[True], description=check.description)
        for check in DERIVED_CHECKS[table]
    ]


def _in_enum(column: str, values: list[str], what: str) -> Expectation:
    return ExpectColumnValuesToBeInSet(column=column, value_set=values, description=f"{column} is a known {what}")


def _window(column: str, low: int, what: str) -> Expectation:
    return ExpectColumnValuesToBeBetween(
        column=column, min_value=low, max_value=MAX_WINDOW_MINUTES, description=f"{what} within the rule model's bounds"
    )


def bronze_expectations(settings: Settings) -> list[Expectation]:
    fields = settings.transaction_schema
    expectations: list[Expectation] = [
        ExpectColumnValuesToBeUnique(
            column="transactionId", description="transactionId is unique: a replayed batch must not re-insert"
        ),
    ]
    expectations += [
        ExpectColumnValuesToNotBeNull(column=f.name, description=f"required field {f.name} is present")
        for f in fields.fields
        if f.required
    ]
    amount = settings.quality.amount_field
    if amount in fields.names():
        expectations.append(
            ExpectColumnValuesToBeBetween(
                column=amount,
                min_value=0,
                max_value={"$PARAMETER": "max_amount"},
                description=f"{amount} is non-negative and at most quality.max_amount",
            )
        )
    return expectations + _derived("bronze_transactions")


def rules_expectations() -> list[Expectation]:
    return [
        ExpectColumnValuesToBeUnique(column="ruleId", description="one current row per ruleId"),
        _in_enum("ruleState", [s.value for s in RuleState], "rule state"),
        _in_enum("aggregatorFunctionType", [a.value for a in Aggregator], "aggregator"),
        _in_enum("limitOperatorType", [o.value for o in LimitOperator], "limit operator"),
        _window("windowMinutes", 1, "window"),
        _window("cooldownMinutes", 0, "cooldown"),
        *_derived("rules"),
    ]


def bucket_state_expectations() -> list[Expectation]:
    # Read from the table's schema: the engine's tiles count values separately (valueCount <= count).
    value_count: list[Expectation] = []
    if "valueCount" in BUCKET_STATE_SCHEMA.fieldNames():
        value_count.append(
            ExpectColumnPairValuesAToBeGreaterThanB(
                column_A="count",
                column_B="valueCount",
                or_equal=True,
                ignore_row_if="either_value_is_missing",
                description="valueCount <= count (values are counted among the transactions)",
            )
        )
    return [
        ExpectColumnValuesToBeBetween(column="count", min_value=1, description="a bucket holds >= 1 transaction"),
        *value_count,
        ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="max",
            column_B="min",
            or_equal=True,
            ignore_row_if="either_value_is_missing",
            description="min <= max in every bucket",
        ),
        *_derived("bucket_state"),
    ]


def alerts_expectations() -> list[Expectation]:
    return [
        ExpectColumnValuesToBeUnique(column="alertId", description="no duplicate alertId (replays are idempotent)"),
        _in_enum("aggregatorFunctionType", [a.value for a in Aggregator], "aggregator"),
        _in_enum("limitOperatorType", [o.value for o in LimitOperator], "limit operator"),
        _window("windowMinutes", 1, "window"),
        ExpectColumnValuesToBeBetween(column="latencyMs", min_value=0, description="detection latency >= 0"),
        *_derived("alerts"),
    ]


def build_suites(settings: Settings) -> dict[str, ExpectationSuite]:
    """Every table's suite, keyed by table name (in ``TABLES`` order)."""
    expectations = {
        "bronze_transactions": bronze_expectations(settings),
        "rules": rules_expectations(),
        "bucket_state": bucket_state_expectations(),
        "alerts": alerts_expectations(),
    }
    return {
        table: ExpectationSuite(name=f"{SUITE_PREFIX}{table}", expectations=expectations[table]) for table in TABLES
    }


def suite_json(suite: ExpectationSuite) -> str:
    """The suite as versioned in the repo: GX's JSON form, without the (unset) id, keys sorted."""
    data = suite.to_json_dict()
    data.pop("id", None)
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def write_suites(settings: Settings, directory: Path = SUITES_DIR) -> list[Path]:
    """Write every suite as ``<directory>/<table>.json``; return the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for table, suite in build_suites(settings).items():
        path = directory / f"{table}.json"
        path.write_text(suite_json(suite))
        written.append(path)
    return written


def stale_suites(settings: Settings, directory: Path = SUITES_DIR) -> list[str]:
    """Tables whose JSON under ``directory`` is missing or differs from the suite the code builds."""
    stale = []
    for table, suite in build_suites(settings).items():
        path = directory / f"{table}.json"
        if not path.exists() or path.read_text() != suite_json(suite):
            stale.append(table)
    return stale


def referenced_columns(suite: ExpectationSuite) -> set[str]:
    """Every column an expectation of ``suite`` names (``column``, ``column_A``, ``column_B``)."""
    names: set[str] = set()
    for expectation in suite.expectations:
        kwargs = expectation.configuration.kwargs
        names.update(str(kwargs[key]) for key in ("column", "column_A", "column_B") if key in kwargs)
    return names
