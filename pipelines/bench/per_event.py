"""Baseline 1, per-event state: every transaction is kept, and each lookback is recomputed from raw events.

The same parse and the same rules as the engine, but no buckets: each micro-batch appends its tagged rows (one
per transaction and state) to an ``events`` Delta table and evaluates transaction ``x`` under rule ``r`` by a
range join with every event ``y`` of its state and key with ``t(x) - W ≤ t(y) ≤ t(x)`` that precedes ``x``
(an earlier batch, or the same batch and ``(eventTime, transactionId) ≤``). Exact per-event windows: on
bucket-aligned data (every event time a bucket start) they contain exactly the buckets ``[b - R, b]`` of the
engine's contract, so the alerts must be the engine's (``tests/test_bench.py``). No late data, no cooldowns:
the benchmark workloads have neither; SUM, COUNT, AVG, MIN, MAX and VALUE, but no COUNT_DISTINCT and no relative
limits (the baselines' rule sets have none). Its cost grows with the events inside the window; its state is every
event of the widest window.

Example::

    handler = PerEventHandler(settings, rules, root="/tmp/bench/per-event")
    raw.writeStream.foreachBatch(handler).trigger(availableNow=True).start().awaitTermination()
    handler.alerts(spark)            # DataFrame: ruleId, transactionId, keyValue, aggregateValue
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from delta_tables.transaction_types import AGGREGATE_TYPE
from pipelines.base.settings import Settings
from pipelines.engine.buckets import tag_rows
from pipelines.engine.evaluate import LIMIT_CHECK_COLUMNS, aggregate_units, holds, rules_frame
from pipelines.engine.parse_transactions import parse_raw
from pipelines.engine.states import LiveRule, states_of
from pipelines.engine.units import WIDE_UNITS, to_units, units_to_decimal
from rules_cdc.rule_model import Rule

EVENTS_SCHEMA = StructType(
    [
        StructField("stateId", StringType(), False),
        StructField("keyValue", StringType(), False),
        StructField("eventTimeMs", LongType(), False),
        StructField("transactionId", StringType(), False),
        StructField("value", AGGREGATE_TYPE, True),
        StructField("batchId", LongType(), False),
    ]
)


class PerEventHandler:
    """``foreachBatch`` function of the per-event baseline: alerts and events under ``root`` (Delta tables)."""

    def __init__(self, settings: Settings, rules: Sequence[Rule], *, root: str) -> None:
        self.settings = settings
        self.states = states_of([LiveRule(r, None) for r in rules])
        self.events_path = f"{root.rstrip('/')}/events"
        self.alerts_path = f"{root.rstrip('/')}/alerts"
        self.batch_seconds: list[float] = []
        self.batch_rows: list[int] = []
        self._high_water: int | None = None
        self._widest_ms = max(r.window_minutes for r in rules) * 60_000

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        spark = batch.sparkSession
        bucket_ms = self.settings.engine.bucket_seconds * 1000
        valid = parse_raw(batch, self.settings.transaction_schema).where(F.col("reason").isNull())
        tagged = tag_rows(valid, self.states, bucket_ms=bucket_ms, keep=("transactionId",)).persist()
        try:
            stats = tagged.agg(F.count(F.lit(1)).alias("n"), F.max("eventTimeMs").alias("maxMs")).first()
            if stats is None or not stats["n"]:
                return
            prior = self._events(spark)
            alerts = self.evaluate(spark, tagged, prior)
            alerts.write.format("delta").mode("append").save(self.alerts_path)
            events = tagged.select(*[f.name for f in EVENTS_SCHEMA.fields if f.name != "batchId"]).withColumn(
                "batchId", F.lit(batch_id).cast("long")
            )
            events.write.format("delta").mode("append").save(self.events_path)
            self._high_water = max(self._high_water or stats["maxMs"], stats["maxMs"])
            if batch_id % 20 == 19:  # retention, like the engine's: only the widest window (+ lateness) is needed
                horizon = self._high_water - self._widest_ms - self.settings.engine.allowed_lateness_seconds * 1000
                spark.sql(f"DELETE FROM delta.`{self.events_path}` WHERE eventTimeMs < {horizon}")
            self.batch_rows.append(int(stats["n"]))
        finally:
            tagged.unpersist()
        self.batch_seconds.append(time.monotonic() - started)

    def _events(self, spark: SparkSession) -> DataFrame:
        try:
            return spark.read.format("delta").load(self.events_path)
        except Exception:  # the first batch: no table yet
            return spark.createDataFrame([], EVENTS_SCHEMA)

    def evaluate(self, spark: SparkSession, tagged: DataFrame, prior: DataFrame) -> DataFrame:
        """Alerts of the batch (``tagged``: tag_rows output) against every prior event and the batch's own."""
        engine = self.settings.engine
        rules = F.broadcast(rules_frame(spark, self.states, bucket_seconds=engine.bucket_seconds, units=WIDE_UNITS))
        x = (
            tagged.join(rules, "stateId")
            .where(F.col("countsTransactions") | F.col("value").isNotNull())
            .select(
                "stateId",
                "keyValue",
                "transactionId",
                "eventTimeMs",
                "ruleId",
                (F.col("windowMinutes").cast("long") * 60_000).alias("windowMs"),
                F.col("value").alias("ownValue"),  # VALUE rules: the transaction's own value
                *LIMIT_CHECK_COLUMNS,
            )
        )
        y = prior.select(
            "stateId", "keyValue", F.col("eventTimeMs").alias("yTime"), F.col("transactionId").alias("yId"), "value"
        ).withColumn("isPrior", F.lit(True))
        own = tagged.select(
            "stateId", "keyValue", F.col("eventTimeMs").alias("yTime"), F.col("transactionId").alias("yId"), "value"
        ).withColumn("isPrior", F.lit(False))
        precedes = F.col("isPrior") | (F.col("yTime") < F.col("eventTimeMs"))
        precedes |= (F.col("yTime") == F.col("eventTimeMs")) & (F.col("yId") <= F.col("transactionId"))
        joined = x.join(y.unionByName(own), ["stateId", "keyValue"]).where(
            F.col("yTime").between(F.col("eventTimeMs") - F.col("windowMs"), F.col("eventTimeMs")) & precedes
        )
        per_rule = joined.groupBy(
            "ruleId",
            "transactionId",
            "keyValue",
            "ownValue",
            *LIMIT_CHECK_COLUMNS,
        ).agg(
            F.sum("value").alias("rSum"),
            F.count(F.lit(1)).alias("rCount"),
            F.count("value").alias("rValueCount"),
            F.min("value").alias("rMin"),
            F.max("value").alias("rMax"),
        )
        # The engine's own limit check, in exact 38-digit units (pipelines.engine.units).
        in_units = per_rule.withColumns({c: to_units(F.col(c), WIDE_UNITS) for c in ("rSum", "rMin", "rMax")})
        none = F.lit(None).cast(WIDE_UNITS)
        valued = aggregate_units(
            in_units.withColumns(
                {
                    "cSum": none,
                    "cCount": F.lit(0),
                    "cValueCount": F.lit(0),
                    "cMin": none,
                    "cMax": none,
                    "value": to_units(F.col("ownValue"), WIDE_UNITS),
                }
            ),
            WIDE_UNITS,
        )
        return valued.where(holds(F.col("aggregateUnits"))).select(
            "ruleId", "transactionId", "keyValue", units_to_decimal(F.col("aggregateUnits")).alias("aggregateValue")
        )

    def alerts(self, spark: SparkSession) -> DataFrame:
        return spark.read.format("delta").load(self.alerts_path)
