"""Every filter leaf operator, compiled to Spark, agrees with the reference's ``filter_passes`` on generated rows.

Hypothesis draws rows (nulls, missing fields, negative and zero amounts, values equal to, just above and just below
the filters' literals, strings differing in case, length or by a non-ASCII character) and filter trees of every
leaf operator on long, decimal, string and boolean fields (as JSON, the way a rule carries them: numbers with a
fraction are floats). The rows are typed by the engine's own parser (``parse_raw``), the filters compiled with
``compile_filter``, and every (row, filter) answer is compared with ``reference_evaluator.filter_passes`` on the
plain-Python record. One Spark job per example (all filters as columns), so the budget stays small:
``FRAUDLAKE_FUZZ_EXAMPLES`` / 5 examples (default 30).
"""

from __future__ import annotations

import json
import os
from decimal import Decimal
from typing import Any

from engine_fixtures import raw_frame
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from reference_evaluator import filter_passes

from pipelines.base.settings import TransactionField, TransactionSchema, load_settings
from pipelines.engine.parse_transactions import parse_raw
from rules_cdc.filter_expr import All, AnyOf, FilterOperator, Leaf, Not, check_filter, compile_filter, parse_filter

EXAMPLES = max(10, int(os.environ.get("FRAUDLAKE_FUZZ_EXAMPLES", "150")) // 5)
BASE = load_settings().transaction_schema
SCHEMA = TransactionSchema(fields=(*BASE.fields, TransactionField(name="flagged", type="boolean")))
T0 = 1_700_006_400_000
Condition = All | AnyOf | Not | Leaf

LONGS = (-2, -1, 0, 1, 2, 3, 10, 11, 2**53, -(2**53))
AMOUNTS = tuple(Decimal(v) for v in ("-5.00", "-0.01", "0", "0.01", "0.10", "20.49", "20.50", "20.51", "99.99", "150"))
STRINGS = ("", "CSH", "csh", "CS", "CSH ", "CSHX", "CRD", "TRF", "é", "É", "e\u0301", "😀", "Z", "a")
NUMERIC = {"payerId": LONGS, "beneficiaryId": LONGS, "paymentAmount": AMOUNTS}
TEXT = ("paymentType", "channel", "country")
OPERATORS = tuple(FilterOperator)

amounts = st.sampled_from(AMOUNTS) | st.decimals(
    min_value=Decimal("-1000"), max_value=Decimal("1000"), places=2, allow_nan=False, allow_infinity=False
)
longs = st.sampled_from(LONGS) | st.integers(-5, 5)
strings = st.sampled_from(STRINGS) | st.text(alphabet="ACDHRSTcshé😀 ", max_size=4)
MISSING = object()


def _maybe(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field's value, null, or absent from the record."""
    return st.one_of(values, values, values, st.none(), st.just(MISSING))


@st.composite
def records(draw: st.DrawFn, n: int) -> dict[str, Any]:
    fields = {
        "payerId": draw(_maybe(longs)),
        "beneficiaryId": draw(_maybe(longs)),
        "paymentType": draw(_maybe(strings)),
        "channel": draw(_maybe(strings)),
        "country": draw(_maybe(strings)),
        "flagged": draw(_maybe(st.booleans())),
    }
    record = {"transactionId": f"t{n:03d}", "eventTime": T0 + n, "paymentAmount": draw(amounts)}
    return record | {k: v for k, v in fields.items() if v is not MISSING}


def _numeric_literal(draw: st.DrawFn, name: str) -> Any:
    """A literal as JSON holds it: an int, or a float near the column's values (0.1, 20.505, -0.005...)."""
    base = draw(st.sampled_from(NUMERIC[name]))
    shift = draw(st.sampled_from((Decimal(0), Decimal(0), Decimal("0.005"), Decimal("-0.005"), Decimal("0.01"))))
    value = Decimal(base) + shift
    if value == value.to_integral_value() and draw(st.booleans()):
        return int(value)
    return float(value)


@st.composite
def leaves(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(("numeric", "text", "boolean")))
    if kind == "boolean":
        op = draw(st.sampled_from((FilterOperator.EQUAL, FilterOperator.NOT_EQUAL)))
        return {"field": "flagged", "op": op.value, "value": draw(st.booleans())}
    op = draw(st.sampled_from(OPERATORS))
    if kind == "numeric":
        name = draw(st.sampled_from(tuple(NUMERIC)))
        literal = lambda: _numeric_literal(draw, name)  # noqa: E731 - drawn afresh per call
    else:
        name = draw(st.sampled_from(TEXT))
        literal = lambda: draw(strings)  # noqa: E731
    value: Any = [literal() for _ in range(draw(st.integers(1, 4)))] if op is FilterOperator.IN else literal()
    return {"field": name, "op": op.value, "value": value}


filters = st.recursive(
    leaves(),
    lambda inner: st.one_of(
        st.builds(lambda c: {"not": c}, inner),
        st.lists(inner, min_size=1, max_size=3).map(lambda cs: {"all": cs}),
        st.lists(inner, min_size=1, max_size=3).map(lambda cs: {"any": cs}),
    ),
    max_leaves=6,
)


def _leaves(cond: Condition) -> list[Leaf]:
    if isinstance(cond, Leaf):
        return [cond]
    children = cond.all if isinstance(cond, All) else cond.any if isinstance(cond, AnyOf) else (cond.not_,)
    return [leaf for child in children for leaf in _leaves(child)]


def test_every_leaf_operator_is_generated() -> None:
    """The strategy reaches every operator on every kind of field (so the property below covers them)."""
    seen: set[tuple[str, str]] = set()

    @settings(max_examples=400, database=None, derandomize=True)
    @given(leaf=leaves())
    def collect(leaf: dict[str, Any]) -> None:
        kind = "boolean" if leaf["field"] == "flagged" else "numeric" if leaf["field"] in NUMERIC else "text"
        seen.add((kind, leaf["op"]))

    collect()
    expected = {(k, op.value) for k in ("numeric", "text") for op in OPERATORS} | {
        ("boolean", "EQUAL"),
        ("boolean", "NOT_EQUAL"),
    }
    assert seen == expected


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    rows=st.integers(1, 25).flatmap(lambda n: st.tuples(*[records(i) for i in range(n)])),
    raw_filters=st.lists(filters, min_size=1, max_size=8),
)
def test_compiled_filters_agree_with_the_reference(
    spark: SparkSession, rows: tuple[dict[str, Any], ...], raw_filters: list[dict[str, Any]]
) -> None:
    conditions: list[Condition] = []
    for raw in raw_filters:
        cond = parse_filter(json.dumps(raw))  # as a rule holds it: JSON numbers with a fraction are floats
        assert cond is not None
        check_filter(cond, SCHEMA)  # generated filters are valid rules' filters
        conditions.append(cond)
    parsed = parse_raw(raw_frame(spark, list(rows)), SCHEMA)
    answers = parsed.select(
        "transactionId", "reason", *[compile_filter(c).alias(f"f{i}") for i, c in enumerate(conditions)]
    ).collect()
    by_id = {r["transactionId"]: r for r in rows}
    assert len(answers) == len(rows) and all(a["reason"] is None for a in answers)
    for answer in answers:
        record = by_id[answer["transactionId"]]
        for i, cond in enumerate(conditions):
            expected = filter_passes(cond, record)
            assert answer[f"f{i}"] is expected, (
                f"filter {raw_filters[i]} on {record}: Spark {answer[f'f{i}']}, reference {expected}; "
                f"leaves {[(leaf.field, leaf.op.value, leaf.value) for leaf in _leaves(cond)]}"
            )


def test_a_leaf_on_a_missing_or_null_field_is_false_and_its_negation_true(spark: SparkSession) -> None:
    """The null rule the property relies on, on one row each way, so a regression names itself."""
    rows = [
        {"transactionId": "absent", "eventTime": T0, "paymentAmount": Decimal(1)},
        {"transactionId": "null", "eventTime": T0, "paymentAmount": Decimal(1), "paymentType": None},
    ]
    leaf = {"field": "paymentType", "op": "NOT_EQUAL", "value": "CSH"}
    compiled = [
        compile_filter(parse_filter(leaf)).alias("leaf"),
        compile_filter(parse_filter({"not": leaf})).alias("not"),
    ]
    frame = parse_raw(raw_frame(spark, rows), SCHEMA).select("transactionId", *compiled)
    assert {r["transactionId"]: (r["leaf"], r["not"]) for r in frame.collect()} == {
        "absent": (False, True),
        "null": (False, True),
    }
    assert [filter_passes(parse_filter(leaf), r) for r in rows] == [False, False]
