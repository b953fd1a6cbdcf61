"""Backtest a candidate rule: the alerts it would have raised over the ``bronze_transactions`` history.

The candidate is a ``Rule`` that is not in the rules table; nothing is written anywhere. The engine's own pure
steps compute the answer (``states_of`` -> ``tag_rows``/``tiles`` -> ``range_aggregates`` ->
``running_in_bucket``/``evaluate`` -> ``apply_cooldown``), with the whole selected history treated as **one
micro-batch on an empty prior state**. So, by the contract of docs/engine.md:

* precedence is ``(eventTime, transactionId)`` over the whole history (not the order the engine saw batches in);
* nothing is late: bronze's ``isLate`` flag is ignored and every transaction is evaluated (in hindsight nothing
  arrived late). The engine did not evaluate its late rows, so a backtest can alert on some the engine skipped;
* a ``transactionId`` present more than once in bronze (a producer resending it in a later batch) keeps its first
  copy by (eventTime, batchId, sourceOffset), as a repeat within one micro-batch does;
* the candidate is evaluated as ACTIVE whatever its ``ruleState``: a SHADOW rule (being tried on live traffic)
  or a PAUSED one gives the alerts it would have raised as ACTIVE;
* its cooldown is applied, with an empty memory at the start of the backtest.

``from_ms``/``to_ms`` select which transactions are *evaluated* (``from_ms <= eventTime < to_ms``, epoch ms).
Lookbacks stay exact at ``from_ms``: the rows of the window before it (from bucket ``bucket(from_ms) - reach``
on) are read and count, they are only not evaluated. Rows at or after ``to_ms`` are not read: nothing after a
transaction counts for it.

Example::

    rule = parse_rule(json.loads(Path("candidate.json").read_text()), settings.transaction_schema)
    alerts = backtest_rule(spark, settings, rule, from_ms=parse_instant_ms("2024-06-01"))
    backtest_per_day(alerts).show()            # day, alerts, keys
    Path("alerts.jsonl").write_text("".join(line + "\n" for line in alert_json_lines(alerts)))
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from delta_tables.alert_cooldown import ALERT_COOLDOWN_SCHEMA
from delta_tables.bronze_transactions import bronze_spec
from delta_tables.bucket_state import BUCKET_STATE_SCHEMA, TILE_COLUMNS
from pipelines.base.settings import Settings
from pipelines.engine.buckets import tag_rows, tiles
from pipelines.engine.cooldown import apply_cooldown
from pipelines.engine.evaluate import candidate_alerts, has_baselines, reach_buckets, rules_frame, running_in_bucket
from pipelines.engine.states import LiveRule, states_of
from pipelines.engine.units import AGGREGATE_FIELDS, WIDE_UNITS
from rules_cdc.rule_model import Rule, RuleState

BACKTEST_COLUMNS = ("ruleId", "transactionId", "keyValue", "eventTime", "aggregateValue", "limit", "baselineValue")
"""The columns of ``backtest_rule``'s result: one row per alert the candidate would have raised."""
PER_DAY_COLUMNS = ("day", "alerts", "keys")
_TILES_SCHEMA = StructType(
    [
        StructField(f.name, WIDE_UNITS if f.name in AGGREGATE_FIELDS else f.dataType, f.nullable)
        for f in BUCKET_STATE_SCHEMA.fields
        if f.name in TILE_COLUMNS
    ]
)
_KEEP = ("transactionId", "eventTime")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def parse_instant_ms(text: str | None) -> int | None:
    """Epoch milliseconds of an ISO-8601 date or date-time (no offset: UTC) or of a digit string; blank: None.

    >>> parse_instant_ms("2024-06-01"), parse_instant_ms("2024-06-01T00:00:01+00:00"), parse_instant_ms("")
    (1717200000000, 1717200001000, None)
    """
    if text is None or not text.strip():
        return None
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    instant = dt.datetime.fromisoformat(text)
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=dt.UTC)
    return (instant - _EPOCH) // dt.timedelta(milliseconds=1)  # exact: no float on the way


def _history(spark: SparkSession, settings: Settings, *, read_from_ms: int | None, to_ms: int | None) -> DataFrame:
    """Bronze rows with ``read_from_ms <= eventTime < to_ms`` (+ ``eventTimeMs``), one copy per transactionId."""
    bronze = spark.read.format("delta").load(settings.table_path(bronze_spec(settings.transaction_schema).name))
    if read_from_ms is not None:
        since = F.timestamp_millis(F.lit(read_from_ms))
        # eventDate is the partition column: the day before too, whatever time zone wrote it.
        bronze = bronze.where((F.col("eventDate") >= F.date_sub(F.to_date(since), 1)) & (F.col("eventTime") >= since))
    if to_ms is not None:
        until = F.timestamp_millis(F.lit(to_ms))
        bronze = bronze.where((F.col("eventDate") <= F.date_add(F.to_date(until), 1)) & (F.col("eventTime") < until))
    first = Window.partitionBy("transactionId").orderBy("eventTime", "batchId", "sourceOffset")
    return (
        bronze.withColumn("_copy", F.row_number().over(first))
        .where(F.col("_copy") == 1)
        .drop("_copy")
        .withColumn("eventTimeMs", F.unix_millis("eventTime"))
    )


def backtest_rule(
    spark: SparkSession, settings: Settings, rule: Rule, *, from_ms: int | None = None, to_ms: int | None = None
) -> DataFrame:
    """The alerts ``rule`` would have raised on bronze (BACKTEST_COLUMNS), as one micro-batch (module docstring).

    Lazy and side-effect free: reads bronze, writes nothing, collects nothing.
    """
    rule.check_against(settings.transaction_schema)
    candidate = rule.model_copy(update={"rule_state": RuleState.ACTIVE, "disabled": False})
    states = states_of([LiveRule(candidate, source_position=None)])
    bucket_seconds = settings.engine.bucket_seconds
    bucket_ms = bucket_seconds * 1000
    reach = reach_buckets(candidate.history_minutes, bucket_seconds)
    read_from_ms = None if from_ms is None else (from_ms // bucket_ms - reach) * bucket_ms
    history = _history(spark, settings, read_from_ms=read_from_ms, to_ms=to_ms)

    # Exact 38-digit units: a backtest is one query, not a hot path, and must not overflow (pipelines.engine.units).
    tagged = tag_rows(history, states, bucket_ms=bucket_ms, keep=_KEEP, units=WIDE_UNITS)
    running = running_in_bucket(tagged)  # over every row read: the window's rows before from_ms count too
    if from_ms is not None:
        running = running.where(F.col("eventTimeMs") >= from_ms)
    rules = rules_frame(spark, states, bucket_seconds=bucket_seconds, units=WIDE_UNITS)
    no_prior = spark.createDataFrame([], _TILES_SCHEMA)
    cap = settings.engine.distinct_cap
    alerts = candidate_alerts(
        running,
        rules,
        no_prior,
        tiles(tagged, bucket_ms=bucket_ms, distinct_cap=cap),
        bucket_ms=bucket_ms,
        distinct_cap=cap if candidate.counts_distinct else None,
        relative=has_baselines(states),
    )
    if candidate.cooldown_minutes:
        alerts = apply_cooldown(alerts, spark.createDataFrame([], ALERT_COOLDOWN_SCHEMA))
    return alerts.select(*BACKTEST_COLUMNS)


def backtest_per_day(alerts: DataFrame) -> DataFrame:
    """Per day of event time (session time zone; UTC on fraudlake's sessions): alerts and distinct keys, by day."""
    return (
        alerts.groupBy(F.to_date("eventTime").alias("day"))
        .agg(F.count(F.lit(1)).alias("alerts"), F.countDistinct("keyValue").alias("keys"))
        .orderBy("day")
    )


def alert_json_lines(alerts: DataFrame) -> Iterator[str]:
    """Each alert as one JSON object, in (eventTime, transactionId) order; streamed to the driver, not all at once."""
    ordered = alerts.orderBy("eventTime", "transactionId").select(F.to_json(F.struct(*alerts.columns)).alias("json"))
    for row in ordered.toLocalIterator():
        yield row["json"]
