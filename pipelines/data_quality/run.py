"""Run the suites against the lakehouse with GX's Spark dataframe datasource in an ephemeral context.

A table that exists is validated even when empty (an empty table passes; the expectations still prove its
columns exist). A table that does not exist fails with a clear message, or is skipped with ``allow_missing``.

Example::

    run = run_quality(spark, settings)                       # every suite
    run = run_quality(spark, settings, tables=["alerts"], allow_missing=True)
    run.success, [t.status for t in run.tables]
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import great_expectations as gx
from delta.tables import DeltaTable
from great_expectations.core import ExpectationSuite
from great_expectations.data_context.types.base import ProgressBarsConfig
from pyspark.sql import DataFrame, SparkSession

from pipelines.base.settings import Settings
from pipelines.data_quality.checks import (
    alerts_checked,
    bronze_checked,
    bucket_state_checked,
    known_rule_ids,
    rules_checked,
)
from pipelines.data_quality.suites import TABLES, build_suites, suite_parameters

log = logging.getLogger(__name__)

Status = Literal["passed", "failed", "missing", "skipped"]
_SAMPLE = 5


@dataclass(frozen=True)
class ExpectationOutcome:
    """One expectation's result, reduced to what the report shows."""

    expectation: str
    columns: str
    description: str
    success: bool
    observed: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TableOutcome:
    table: str
    path: str
    status: Status
    rows: int | None = None
    expectations: tuple[ExpectationOutcome, ...] = ()
    message: str = ""

    @property
    def failed(self) -> tuple[ExpectationOutcome, ...]:
        return tuple(e for e in self.expectations if not e.success)


@dataclass(frozen=True)
class QualityRun:
    lakehouse: str
    started_at: dt.datetime
    seconds: float
    parameters: Mapping[str, Any]
    tables: tuple[TableOutcome, ...]

    @property
    def success(self) -> bool:
        return all(t.status in ("passed", "skipped") for t in self.tables)


def read_table(spark: SparkSession, path: str) -> DataFrame | None:
    """The Delta table at ``path``, or None when there is none."""
    if not DeltaTable.isDeltaTable(spark, path):
        return None
    return spark.read.format("delta").load(path)


DAY_MS = 24 * 3600 * 1000
TILE_BUCKETS = 60 * 24
"""Buckets in the engine's widest tile (level 2: a day of minute buckets), which starts up to a tile early."""


def bucket_retention_ms(settings: Settings) -> int:
    """How far before the newest bucket a tile may start: the backfill retention plus the widest tile."""
    engine = settings.engine
    return engine.backfill_retention_days * DAY_MS + TILE_BUCKETS * engine.bucket_seconds * 1000


def checked_frame(spark: SparkSession, settings: Settings, table: str, frame: DataFrame) -> DataFrame:
    """``frame`` with the table's derived ``dq_*`` columns (alerts also read rules and rule_changes)."""
    if table == "bronze_transactions":
        return bronze_checked(frame, settings.quality)
    if table == "rules":
        return rules_checked(frame)
    if table == "bucket_state":
        return bucket_state_checked(frame, bucket_retention_ms(settings))
    if table == "alerts":
        rule_ids = known_rule_ids(
            spark,
            read_table(spark, settings.table_path("rules")),
            read_table(spark, settings.table_path("rule_changes")),
        )
        return alerts_checked(frame, rule_ids)
    raise ValueError(f"no data-quality suite for table {table!r}; known: {', '.join(TABLES)}")


def _observed(result: Mapping[str, Any], exception: str | None) -> str:
    if exception:
        return f"error: {exception}"
    if "unexpected_count" in result:
        unexpected, total = result.get("unexpected_count") or 0, result.get("element_count")
        text = f"{unexpected} of {total} rows unexpected" if total is not None else f"{unexpected} rows unexpected"
        sample = list(result.get("partial_unexpected_list") or [])[:_SAMPLE]
        return f"{text}, e.g. {sample}" if sample else text
    if "observed_value" in result:
        return f"observed {result['observed_value']}"
    return ""


def _exception_message(info: Any) -> str | None:
    """GX reports exceptions as one dict, or one dict per metric; return the first message if any raised."""
    if not isinstance(info, Mapping):
        return None
    candidates = [info] if "raised_exception" in info else [v for v in info.values() if isinstance(v, Mapping)]
    for candidate in candidates:
        if candidate.get("raised_exception"):
            return str(candidate.get("exception_message") or "exception").splitlines()[0]
    return None


def _outcomes(result: Any) -> tuple[ExpectationOutcome, ...]:
    outcomes = []
    for item in result.results:
        config = item.expectation_config
        kwargs = {k: v for k, v in config.kwargs.items() if k != "batch_id"}
        columns = ", ".join(str(kwargs[k]) for k in ("column", "column_A", "column_B") if k in kwargs)
        error = _exception_message(item.exception_info)
        outcomes.append(
            ExpectationOutcome(
                expectation=config.type,
                columns=columns,
                description=config.description or "",
                success=bool(item.success) and error is None,
                observed=_observed(item.result or {}, error),
                kwargs=kwargs,
            )
        )
    return tuple(outcomes)


class _Validator:
    """One ephemeral GX context with one Spark datasource; one dataframe asset per table."""

    def __init__(self, parameters: Mapping[str, Any]) -> None:
        self.context = gx.get_context(mode="ephemeral")
        self.context.variables.progress_bars = ProgressBarsConfig(globally=False)
        self.source = self.context.data_sources.add_spark(name="fraudlake_lakehouse")
        self.parameters = dict(parameters)

    def validate(self, table: str, frame: DataFrame, suite: ExpectationSuite) -> tuple[ExpectationOutcome, ...]:
        asset = self.source.add_dataframe_asset(name=table)
        batch = asset.add_batch_definition_whole_dataframe("whole_table").get_batch(
            batch_parameters={"dataframe": frame}
        )
        result = batch.validate(suite, expectation_parameters=self.parameters, result_format="BASIC")
        return _outcomes(result)


def run_quality(
    spark: SparkSession,
    settings: Settings,
    tables: Sequence[str] | None = None,
    *,
    allow_missing: bool = False,
) -> QualityRun:
    """Validate each table's suite (default: all of ``TABLES``) and return the outcome of every expectation."""
    selected = list(tables or TABLES)
    unknown = sorted(set(selected) - set(TABLES))
    if unknown:
        raise ValueError(f"no data-quality suite for {unknown}; known: {', '.join(TABLES)}")
    started, clock = dt.datetime.now(dt.UTC), time.monotonic()
    suites = build_suites(settings)
    parameters = suite_parameters(settings)
    validator: _Validator | None = None
    outcomes: list[TableOutcome] = []
    for table in [t for t in TABLES if t in selected]:
        path = settings.table_path(table)
        frame = read_table(spark, path)
        if frame is None:
            status: Status = "skipped" if allow_missing else "missing"
            message = f"no Delta table at {path}" + (" (allowed by --allow-missing)" if allow_missing else "")
            outcomes.append(TableOutcome(table, path, status, message=message))
            continue
        validator = validator or _Validator(parameters)
        checked = checked_frame(spark, settings, table, frame).persist()
        try:
            rows = checked.count()
            results = validator.validate(table, checked, suites[table])
        finally:
            checked.unpersist()
        failed = any(not r.success for r in results)
        outcomes.append(TableOutcome(table, path, "failed" if failed else "passed", rows, results))
        log.info("dq %s: %s (%d rows, %d expectations)", table, outcomes[-1].status, rows, len(results))
    return QualityRun(settings.lakehouse_root, started, time.monotonic() - clock, parameters, tuple(outcomes))
