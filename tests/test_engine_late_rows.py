"""A late transaction still counts for the on-time transactions after it in its own micro-batch and bucket.

The lateness cut-off ``M - allowed lateness`` can fall inside a bucket: then a late row and an on-time row of
the same batch share that bucket, and the late one (earlier in event time) belongs to the on-time one's lookback.
The engine must agree with the reference evaluator there.
"""

from __future__ import annotations

from decimal import Decimal

from engine_fixtures import alerts_by_id, make_rule, put_rules, raw_frame
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession
from reference_evaluator import RefBatch, evaluate

from pipelines.base.settings import Settings
from pipelines.engine.batch_handler import BatchHandler
from pipelines.engine.keys import encode_key

MINUTE = 60_000
T0 = 1_700_006_400_000  # a whole minute


def test_a_late_row_counts_for_a_later_on_time_row_of_its_bucket(spark: SparkSession, settings: Settings) -> None:
    fresh_lakehouse(spark, settings)
    rule = make_rule(
        1,
        aggregatorFunctionType="COUNT",
        aggregateFieldName="COUNT",
        limitOperatorType="GREATER_EQUAL",
        limit=2,
        windowMinutes=1,
    )
    put_rules(spark, settings, [rule])
    lateness_ms = settings.engine.allowed_lateness_seconds * 1000
    high_water = T0 + lateness_ms + 30_000  # the cut-off M - L = T0 + 30 s: mid-bucket
    first = [{"transactionId": "hw", "eventTime": high_water, "payerId": 9, "paymentAmount": Decimal("1.00")}]
    second = [
        {"transactionId": "late", "eventTime": T0 + 10_000, "payerId": 1, "paymentAmount": Decimal("1.00")},
        {"transactionId": "on-time", "eventTime": T0 + 50_000, "payerId": 1, "paymentAmount": Decimal("1.00")},
    ]
    handler = BatchHandler(settings, app_id="late-rows")
    handler.process(raw_frame(spark, first, name="b0"), 0)
    counts = handler.process(raw_frame(spark, second, name="b1"), 1)

    assert counts["late"] == 1
    expected = {
        (a.rule_id, a.transaction_id): (encode_key(a.key), a.aggregate_value)
        for a in evaluate([RefBatch(rules=[rule], transactions=first), RefBatch(rules=[rule], transactions=second)])
    }
    assert expected == {(1, "on-time"): ("[1]", Decimal("2.000000"))}
    assert alerts_by_id(spark, settings) == expected
