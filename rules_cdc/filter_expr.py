"""Rule filters: a nested JSON condition, validated by pydantic and compiled to a Spark Column (never SQL text).

Grammar::

    {"all": [c, ...]}   {"any": [c, ...]}   {"not": c}
    {"field": F, "op": OP, "value": V}      OP in GREATER, GREATER_EQUAL, LESS, LESS_EQUAL, EQUAL, NOT_EQUAL, IN

A leaf whose field is null is false (so ``{"not": leaf}`` is true there): compiled as ``coalesce(cmp, false)``.

Example::

    cond = parse_filter('{"all": [{"field": "paymentType", "op": "EQUAL", "value": "CSH"}]}')
    frame.where(compile_filter(cond, schema))
"""

from __future__ import annotations

import json
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter, model_validator
from pyspark.sql import Column
from pyspark.sql import functions as F

from pipelines.base.settings import TransactionSchema

MAX_FILTER_DEPTH = 16
MAX_FILTER_LEAVES = 256
MAX_IN_VALUES = 1000
MAX_VALUE_PRECISION = 38  # digits: what a Spark decimal literal holds
MAX_VALUE_SCALE = 18  # decimal places: beyond, Spark narrows a comparison with an integer field and rounds

Scalar = str | int | float | Decimal | bool


class FilterOperator(StrEnum):
    GREATER = "GREATER"
    GREATER_EQUAL = "GREATER_EQUAL"
    LESS = "LESS"
    LESS_EQUAL = "LESS_EQUAL"
    EQUAL = "EQUAL"
    NOT_EQUAL = "NOT_EQUAL"
    IN = "IN"


class _Node(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Leaf(_Node):
    field: str = Field(min_length=1, max_length=128)
    op: FilterOperator
    value: Scalar | tuple[Scalar, ...]

    @model_validator(mode="after")
    def _value_fits_op(self) -> Leaf:
        if self.op is FilterOperator.IN:
            if not isinstance(self.value, tuple) or not self.value:
                raise ValueError("IN takes a non-empty list value")
            if len(self.value) > MAX_IN_VALUES:
                raise ValueError(f"IN takes at most {MAX_IN_VALUES} values")
        elif isinstance(self.value, tuple):
            raise ValueError(f"{self.op} takes a single value, not a list")
        for value in self.value if isinstance(self.value, tuple) else (self.value,):
            _check_number(value)
        return self


def _check_number(value: Scalar) -> None:
    """Refuse a number Spark cannot compare exactly: a long beyond 64 bits, or a decimal beyond 38 digits or with
    more than 18 places (a rule with one would pass CDC and then fail, or silently round, in every micro-batch)."""
    if isinstance(value, bool) or isinstance(value, str):
        return
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise ValueError(f"filter value {value} is beyond the 64-bit integer range")
        return
    number = Decimal(repr(value)) if isinstance(value, float) else value
    if not number.is_finite():
        raise ValueError(f"filter value {value!r} is not a finite number")
    _sign, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)  # finite
    scale = max(0, -exponent)
    whole_digits = max(0, len(digits) + exponent)
    if scale > MAX_VALUE_SCALE or whole_digits + scale > MAX_VALUE_PRECISION:
        raise ValueError(
            f"filter value {value!r} needs more than {MAX_VALUE_PRECISION} digits or {MAX_VALUE_SCALE} decimal places"
        )


class All(_Node):
    all: tuple[Condition, ...] = Field(min_length=1)


class AnyOf(_Node):
    any: tuple[Condition, ...] = Field(min_length=1)


class Not(_Node):
    not_: Condition = Field(alias="not")
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


def _kind(value: Any) -> str:
    """Which node a filter object is, by its keys: errors then name that node only, not every union branch."""
    if isinstance(value, dict):
        return next((key for key in ("all", "any", "not") if key in value), "leaf")
    kinds: dict[type, str] = {All: "all", AnyOf: "any", Not: "not"}
    return kinds.get(type(value), "leaf")


Condition = Annotated[
    Union[  # noqa: UP007 - a runtime Union of Annotated members, which pydantic needs for the tags
        Annotated[All, Tag("all")],
        Annotated[AnyOf, Tag("any")],
        Annotated[Not, Tag("not")],
        Annotated[Leaf, Tag("leaf")],
    ],
    Discriminator(_kind),
]
All.model_rebuild()
AnyOf.model_rebuild()
Not.model_rebuild()

_CONDITION: TypeAdapter[All | AnyOf | Not | Leaf] = TypeAdapter(Condition)


def parse_filter(raw: Any) -> All | AnyOf | Not | Leaf | None:
    """A filter from a JSON object, a JSON string holding one, or None/"" (no filter)."""
    if raw is None or raw == "" or raw == {}:
        return None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except RecursionError:
            raise ValueError(f"filter nests deeper than {MAX_FILTER_DEPTH}") from None
    cond = _CONDITION.validate_python(raw)
    depth, leaves = _shape(cond)
    if depth > MAX_FILTER_DEPTH:
        raise ValueError(f"filter nests {depth} deep; at most {MAX_FILTER_DEPTH}")
    if leaves > MAX_FILTER_LEAVES:
        raise ValueError(f"filter has {leaves} conditions; at most {MAX_FILTER_LEAVES}")
    return cond


def _shape(cond: All | AnyOf | Not | Leaf) -> tuple[int, int]:
    """(depth, number of leaves) of a condition tree."""
    if isinstance(cond, Leaf):
        return 1, 1
    children = cond.all if isinstance(cond, All) else cond.any if isinstance(cond, AnyOf) else (cond.not_,)
    shapes = [_shape(c) for c in children]
    return 1 + max(d for d, _ in shapes), sum(n for _, n in shapes)


def filter_to_json(cond: All | AnyOf | Not | Leaf | None) -> str | None:
    """Canonical JSON of a filter (sorted keys, no spaces): equal filters give equal strings."""
    if cond is None:
        return None
    return json.dumps(cond.model_dump(mode="json", by_alias=True), sort_keys=True, separators=(",", ":"))


def filter_fields(cond: All | AnyOf | Not | Leaf | None) -> set[str]:
    if cond is None:
        return set()
    if isinstance(cond, Leaf):
        return {cond.field}
    children = cond.all if isinstance(cond, All) else cond.any if isinstance(cond, AnyOf) else (cond.not_,)
    return set().union(*(filter_fields(c) for c in children))


def check_filter(cond: All | AnyOf | Not | Leaf | None, schema: TransactionSchema) -> None:
    """Raise ValueError unless every leaf names a declared field with a value of a fitting type."""
    if cond is None:
        return
    if isinstance(cond, Leaf):
        try:
            field = schema.field(cond.field)
        except KeyError:
            raise ValueError(f"filter names unknown transaction field {cond.field!r}") from None
        values = cond.value if isinstance(cond.value, tuple) else (cond.value,)
        for value in values:
            numeric_value = isinstance(value, int | float | Decimal) and not isinstance(value, bool)
            if field.is_numeric and not numeric_value:
                raise ValueError(f"filter compares numeric field {field.name!r} with {value!r}")
            if field.type == "string" and not isinstance(value, str):
                raise ValueError(f"filter compares string field {field.name!r} with {value!r}")
            if field.type == "boolean" and not isinstance(value, bool):
                raise ValueError(f"filter compares boolean field {field.name!r} with {value!r}")
        if field.type in {"boolean"} and cond.op not in {FilterOperator.EQUAL, FilterOperator.NOT_EQUAL}:
            raise ValueError(f"boolean field {field.name!r} supports only EQUAL and NOT_EQUAL")
        return
    children = cond.all if isinstance(cond, All) else cond.any if isinstance(cond, AnyOf) else (cond.not_,)
    for child in children:
        check_filter(child, schema)


def compile_filter(cond: All | AnyOf | Not | Leaf | None) -> Column:
    """The filter as a boolean Spark Column over transaction columns (true when there is no filter)."""
    if cond is None:
        return F.lit(True)
    if isinstance(cond, All):
        return _fold([compile_filter(c) for c in cond.all], "and")
    if isinstance(cond, AnyOf):
        return _fold([compile_filter(c) for c in cond.any], "or")
    if isinstance(cond, Not):
        return ~compile_filter(cond.not_)
    column = F.col(cond.field)
    comparison: Column
    if cond.op is FilterOperator.IN:
        assert isinstance(cond.value, tuple)
        comparison = column.isin([_literal(v) for v in cond.value])
    else:
        assert not isinstance(cond.value, tuple)  # a list value is only valid with IN (Leaf's validator)
        value = _literal(cond.value)
        comparison = {
            FilterOperator.GREATER: lambda: column > value,
            FilterOperator.GREATER_EQUAL: lambda: column >= value,
            FilterOperator.LESS: lambda: column < value,
            FilterOperator.LESS_EQUAL: lambda: column <= value,
            FilterOperator.EQUAL: lambda: column == value,
            FilterOperator.NOT_EQUAL: lambda: column != value,
        }[cond.op]()
    return F.coalesce(comparison, F.lit(False))


def _literal(value: Scalar) -> Column:
    """A literal that compares exactly: a float becomes a Decimal of its shortest repr (0.1 stays 0.1)."""
    if isinstance(value, float):
        return F.lit(Decimal(repr(value)))
    return F.lit(value)


def _fold(columns: list[Column], how: str) -> Column:
    result = columns[0]
    for column in columns[1:]:
        result = (result & column) if how == "and" else (result | column)
    return result
