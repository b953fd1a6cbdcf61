"""The hot path counts in 64-bit millionths; a sum beyond that range switches the run to 38-digit decimals, exactly.

Amounts of a few trillion are valid (``paymentAmount`` is decimal(18,2)), and two of them under one key make a
sum of about 1e13, past the ±9.2e12 that 64-bit units hold at 6 decimals. The engine must neither wrap nor drop
anything: the batch fails with an ANSI overflow, runs again as a replay of itself in decimal(38,0) units, and
every alert equals the reference evaluator's, as do the state (folded) and the later batches.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from engine_fixtures import alerts_by_id, folded_state, independent_tiles, make_rule, put_rules, raw_frame
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession
from reference_evaluator import RefBatch, evaluate

from pipelines.base.settings import Settings
from pipelines.engine.batch_handler import BatchHandler
from pipelines.engine.keys import encode_key

T0 = 1_700_006_400_000
MIN = 60_000


def _tx(n: int, minute: int, amount: str, payer: int = 7) -> dict[str, Any]:
    return {
        "transactionId": f"t{n:03d}",
        "eventTime": T0 + minute * MIN + n,
        "payerId": payer,
        "paymentAmount": Decimal(amount),
        "paymentType": "TRF",
    }


def test_a_sum_beyond_64_bit_units_runs_in_decimal_and_equals_the_reference(
    spark: SparkSession, settings: Settings
) -> None:
    fresh_lakehouse(spark, settings)
    rules = [
        make_rule(1, limit=Decimal("9000000000000"), windowMinutes=30),  # SUM > 9e12: only the big sums
        make_rule(2, aggregatorFunctionType="AVG", limit=Decimal("4000000000000.125"), windowMinutes=30),
        make_rule(3, aggregatorFunctionType="MAX", limit=100, windowMinutes=30, groupingKeyNames=[]),
        make_rule(4, aggregatorFunctionType="COUNT", limitOperatorType="GREATER_EQUAL", limit=2, windowMinutes=5),
    ]
    put_rules(spark, settings, rules)
    batches = [
        [_tx(1, 0, "12.50"), _tx(2, 1, "4999999999999.99"), _tx(3, 1, "0.01", payer=8)],
        # the second trillion-sized amount: payer 7's SUM reaches ~1e13 (> 9.2e12 units), AVG stays below
        [_tx(4, 2, "4999999999999.99"), _tx(5, 3, "1.00"), _tx(6, 3, "-3.33", payer=8)],
        [_tx(7, 4, "2.00"), _tx(8, 5, "7.77", payer=8)],
    ]
    lines: list[str] = []
    handler = BatchHandler(settings, app_id="engine-overflow", report=lines.append)
    for batch_id, records in enumerate(batches):
        handler.process(raw_frame(spark, records, name=f"b{batch_id}"), batch_id)

    assert any("38-digit decimal" in line for line in lines), lines  # the switch happened, and was said
    reference = evaluate([RefBatch(rules=rules, transactions=b) for b in batches])
    expected = {(a.rule_id, a.transaction_id): (encode_key(a.key), a.aggregate_value) for a in reference}
    assert (1, "t004") in expected and expected[(1, "t004")][1] > Decimal("9.2e12")
    assert alerts_by_id(spark, settings) == expected
    assert folded_state(spark, settings) == independent_tiles([r for b in batches for r in b], rules)
