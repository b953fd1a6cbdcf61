"""Filters compile to Column expressions whose results match the grammar's contract, null handling included."""

from __future__ import annotations

from pyspark.sql import SparkSession

from rules_cdc.filter_expr import compile_filter, parse_filter


def test_compiled_filter_selects_the_right_rows(spark: SparkSession) -> None:
    frame = spark.createDataFrame(
        [("t1", "CSH", 50.0), ("t2", "CRD", 500.0), ("t3", None, 5.0), ("t4", "CSH", 5.0)],
        "transactionId string, paymentType string, paymentAmount double",
    )
    cond = parse_filter(
        {
            "all": [
                {"field": "paymentType", "op": "IN", "value": ["CSH", "CRD"]},
                {"not": {"field": "paymentAmount", "op": "LESS", "value": 10}},
            ]
        }
    )
    assert sorted(r.transactionId for r in frame.where(compile_filter(cond)).collect()) == ["t1", "t2"]
    null_leaf = parse_filter({"not": {"field": "paymentType", "op": "EQUAL", "value": "CSH"}})
    # A leaf on a null field is false, so its negation holds for t3.
    assert sorted(r.transactionId for r in frame.where(compile_filter(null_leaf)).collect()) == ["t2", "t3"]
    assert frame.where(compile_filter(None)).count() == 4


def test_hostile_filter_text_stays_a_literal(spark: SparkSession) -> None:
    frame = spark.createDataFrame([("t1", "x' OR '1'='1")], "transactionId string, paymentType string")
    cond = parse_filter({"field": "paymentType", "op": "EQUAL", "value": "x' OR '1'='1"})
    assert [r.transactionId for r in frame.where(compile_filter(cond)).collect()] == ["t1"]
    cond = parse_filter({"field": "paymentType", "op": "EQUAL", "value": "' OR 1=1 --"})
    assert frame.where(compile_filter(cond)).count() == 0


def test_fractional_literals_compare_exactly_against_decimals(spark: SparkSession) -> None:
    frame = spark.createDataFrame([("t1", "0.10"), ("t2", "0.30")], "transactionId string, a string").selectExpr(
        "transactionId", "CAST(a AS DECIMAL(18,2)) AS paymentAmount"
    )
    cond = parse_filter({"field": "paymentAmount", "op": "EQUAL", "value": 0.1})
    assert [r.transactionId for r in frame.where(compile_filter(cond)).collect()] == ["t1"]
    cond = parse_filter({"field": "paymentAmount", "op": "IN", "value": [0.3, 7]})
    assert [r.transactionId for r in frame.where(compile_filter(cond)).collect()] == ["t2"]
