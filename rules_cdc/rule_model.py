"""The fraud rule: a pydantic model accepting the DB row's snake_case columns and the seeds' camelCase JSON.

Example (the seed's rule parses as is)::

    rule = parse_rule({"ruleId": 1, "ruleState": "ACTIVE", "groupingKeyNames": ["payerId", "beneficiaryId"],
                       "aggregateFieldName": "paymentAmount", "aggregatorFunctionType": "SUM",
                       "limitOperatorType": "GREATER", "limit": 1000000, "windowMinutes": 10080}, schema)
    rule.state_id        # shared by every rule with the same grouping keys, aggregate field and filter
"""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pipelines.base.settings import TransactionSchema
from rules_cdc.filter_expr import All, AnyOf, Leaf, Not, check_filter, filter_to_json, parse_filter

MAX_WINDOW_MINUTES = 43_200  # 30 days
COUNT_FIELD = "COUNT"
_COUNT_ALIASES = {"COUNT", "COUNT_FLINK"}
_LIMIT_BOUND = Decimal(10) ** 30


class RuleState(StrEnum):
    ACTIVE = "ACTIVE"  # evaluated; its alerts are acted on (alerts topic, live counts)
    PAUSED = "PAUSED"  # not evaluated; its state and cooldown memory are kept
    SHADOW = "SHADOW"  # evaluated exactly like ACTIVE; its alerts are recorded (shadow = true), never acted on
    DELETED = "DELETED"  # tombstone: a delete or truncate event
    DISABLED = "DISABLED"  # tombstone: disabled = true


TOMBSTONE_STATES = frozenset({RuleState.DELETED, RuleState.DISABLED})
EVALUATED_STATES = frozenset({RuleState.ACTIVE, RuleState.SHADOW})
"""The states whose rules the engine evaluates (a SHADOW rule's alerts are marked shadow, not published)."""


class Aggregator(StrEnum):
    SUM = "SUM"
    COUNT = "COUNT"
    AVG = "AVG"
    MIN = "MIN"
    MAX = "MAX"
    COUNT_DISTINCT = "COUNT_DISTINCT"  # how many different values of the field (any type), saturating at the cap
    VALUE = "VALUE"  # the evaluated transaction's own value of the field (its window only sizes nothing)


class BaselineAggregator(StrEnum):
    """What a relative limit multiplies: an aggregate of the same key's history (docs/engine.md, relative limits)."""

    AVG = "AVG"
    SUM = "SUM"
    COUNT = "COUNT"


MAX_FACTOR = 1_000_000
"""A relative limit's factor is at most this (the engine compares ``aggregate * W2`` with ``k * B * W`` exactly)."""
MAX_DISTINCT_LIMIT = 10_000
"""A COUNT_DISTINCT limit above this is refused: the engine keeps at most ``engine.distinct_cap`` values per tile."""


class LimitOperator(StrEnum):
    GREATER = "GREATER"
    GREATER_EQUAL = "GREATER_EQUAL"
    LESS = "LESS"
    LESS_EQUAL = "LESS_EQUAL"
    EQUAL = "EQUAL"
    NOT_EQUAL = "NOT_EQUAL"

    def holds(self, value: Decimal, limit: Decimal) -> bool:
        """Whether ``value OP limit`` holds (the alert condition)."""
        return {
            LimitOperator.GREATER: value > limit,
            LimitOperator.GREATER_EQUAL: value >= limit,
            LimitOperator.LESS: value < limit,
            LimitOperator.LESS_EQUAL: value <= limit,
            LimitOperator.EQUAL: value == limit,
            LimitOperator.NOT_EQUAL: value != limit,
        }[self]


def _names(camel: str, snake: str) -> AliasChoices:
    return AliasChoices(camel, snake)


class Baseline(BaseModel):
    """A relative limit: the rule's ``limit`` is a factor of this aggregate of the same key's history.

    The rule fires when ``aggregate OP limit * B``, with ``B`` the baseline's aggregate over the transactions of the
    key that count for the rule in its lookback of ``window_minutes`` (same buckets, same precedence), **the
    evaluated transaction excluded**; with ``per_window``, ``B`` is scaled to the rule's own window
    (``B * windowMinutes / baseline.windowMinutes``: "the hourly average of the last 7 days"). With fewer than
    ``min_count`` such transactions the rule does not fire.

    Example: ``{"aggregatorFunctionType": "AVG", "windowMinutes": 43200, "minCount": 5}``
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    aggregator: BaselineAggregator = Field(validation_alias=_names("aggregatorFunctionType", "aggregator"))
    window_minutes: int = Field(validation_alias=_names("windowMinutes", "window_minutes"), ge=1, le=MAX_WINDOW_MINUTES)
    min_count: int = Field(1, validation_alias=_names("minCount", "min_count"), ge=0, le=1_000_000)
    per_window: bool = Field(False, validation_alias=_names("perWindow", "per_window"))

    @field_validator("aggregator", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "aggregatorFunctionType": self.aggregator.value,
            "windowMinutes": self.window_minutes,
            "minCount": self.min_count,
            "perWindow": self.per_window,
        }


def _baseline_from_json(value: Any) -> Any:
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise ValueError(f"baseline must be a JSON object, got {_short(value)}") from None
    return value


class Rule(BaseModel):
    """One fraud rule. Field names are snake_case in Python; input accepts camelCase and snake_case."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    rule_id: int = Field(validation_alias=_names("ruleId", "rule_id"), ge=0, le=2**63 - 1)
    rule_name: str | None = Field(None, validation_alias=_names("ruleName", "rule_name"), max_length=256)
    rule_state: RuleState = Field(RuleState.ACTIVE, validation_alias=_names("ruleState", "rule_state"))
    grouping_key_names: tuple[str, ...] = Field(
        (), validation_alias=_names("groupingKeyNames", "grouping_key_names"), max_length=16
    )
    aggregate_field_name: str = Field(validation_alias=_names("aggregateFieldName", "aggregate_field_name"))
    aggregator_function_type: Aggregator = Field(
        validation_alias=_names("aggregatorFunctionType", "aggregator_function_type")
    )
    limit_operator_type: LimitOperator = Field(validation_alias=_names("limitOperatorType", "limit_operator_type"))
    limit: Decimal = Field(validation_alias=_names("limit", "limit_value"))
    window_minutes: int = Field(validation_alias=_names("windowMinutes", "window_minutes"), ge=1, le=MAX_WINDOW_MINUTES)
    filter: All | AnyOf | Not | Leaf | None = Field(None, validation_alias=_names("filter", "filter"))
    cooldown_minutes: int | None = Field(
        None, validation_alias=_names("cooldownMinutes", "cooldown_minutes"), ge=0, le=MAX_WINDOW_MINUTES
    )
    disabled: bool = Field(False, validation_alias=_names("disabled", "disabled"))
    baseline: Baseline | None = Field(None, validation_alias=_names("baseline", "baseline"))

    @field_validator("baseline", mode="before")
    @classmethod
    def _baseline_json(cls, value: Any) -> Any:
        return _baseline_from_json(value)

    @field_validator("aggregator_function_type", mode="before")
    @classmethod
    def _aggregator_upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _kinds_fit(self) -> Rule:
        aggregator = self.aggregator_function_type
        if aggregator is Aggregator.COUNT_DISTINCT:
            if self.baseline is not None:
                raise ValueError("COUNT_DISTINCT takes a fixed limit, not a baseline")
            if self.limit.copy_abs() > MAX_DISTINCT_LIMIT:
                raise ValueError(f"a COUNT_DISTINCT limit must be at most {MAX_DISTINCT_LIMIT}")
        if self.baseline is not None:
            if self.baseline.window_minutes < self.window_minutes:
                raise ValueError("baseline.windowMinutes must be at least the rule's windowMinutes")
            if self.limit.copy_abs() > MAX_FACTOR:
                raise ValueError(f"with a baseline the limit is a factor: at most {MAX_FACTOR}")
        return self

    @field_validator("rule_state", mode="before")
    @classmethod
    def _state_alias(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().upper() == "PAUSE":
            return RuleState.PAUSED
        if value in (RuleState.DELETED, RuleState.DISABLED, "DELETED", "DISABLED"):
            raise ValueError("ruleState DELETED/DISABLED is set by delete events or disabled=true, not by hand")
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("grouping_key_names", mode="before")
    @classmethod
    def _keys_from_json_string(cls, value: Any) -> Any:
        if value is None:
            return ()
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else []
            except RecursionError:
                raise ValueError("groupingKeyNames is nested too deeply") from None
        if isinstance(value, list | tuple):
            if not all(isinstance(name, str) for name in value):
                raise ValueError("groupingKeyNames must be a list of field names (strings)")
            if len(set(value)) != len(value):
                raise ValueError("groupingKeyNames has duplicates")
        return value

    @field_validator("aggregate_field_name", mode="before")
    @classmethod
    def _count_alias(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().upper() in _COUNT_ALIASES:
            return COUNT_FIELD
        return value

    @field_validator("limit", mode="before")
    @classmethod
    def _finite_limit(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("limit must be a number")
        try:
            number = Decimal(str(value))
        except (InvalidOperation, ValueError):
            raise ValueError(f"limit must be a number, got {_short(value)}") from None
        # copy_abs, not abs(): abs() rounds to the context and overflows on an exponent like 1e999999999.
        if not number.is_finite() or number.copy_abs() >= _LIMIT_BOUND:
            raise ValueError(f"limit must be a finite number below 1e30, got {_short(value)}")
        return number.quantize(Decimal("0.000001"))

    @field_validator("filter", mode="before")
    @classmethod
    def _filter_from_json(cls, value: Any) -> Any:
        return parse_filter(value)

    # ---- derived ----------------------------------------------------------------------------------------

    @property
    def is_tombstone(self) -> bool:
        return self.disabled

    @property
    def evaluated(self) -> bool:
        """ACTIVE or SHADOW: the engine computes this rule's alerts (PAUSED keeps its state only)."""
        return self.rule_state in EVALUATED_STATES

    @property
    def shadow(self) -> bool:
        """SHADOW: evaluated, its alerts recorded as shadow alerts and never acted on."""
        return self.rule_state is RuleState.SHADOW

    @property
    def counts_transactions(self) -> bool:
        """COUNT aggregator, or the COUNT pseudo-field: the rule counts transactions, not a field's values."""
        return self.aggregator_function_type is Aggregator.COUNT or self.aggregate_field_name == COUNT_FIELD

    @property
    def counts_distinct(self) -> bool:
        """COUNT_DISTINCT: the rule's state keeps the field's distinct values per tile."""
        return self.aggregator_function_type is Aggregator.COUNT_DISTINCT

    @property
    def history_minutes(self) -> int:
        """How far back the rule reads: its window, or its baseline's when longer."""
        return max(self.window_minutes, self.baseline.window_minutes if self.baseline else 0)

    @property
    def baseline_json(self) -> str | None:
        if self.baseline is None:
            return None
        return json.dumps(self.baseline.to_json_dict(), sort_keys=True, separators=(",", ":"))

    @property
    def filter_json(self) -> str | None:
        return filter_to_json(self.filter)

    @property
    def state_signature(self) -> str:
        """What rules sharing one bucket state have in common: grouping keys, aggregate field, filter (and, for
        COUNT_DISTINCT, that the state keeps distinct values: other states' ids are as they were before it)."""
        field = COUNT_FIELD if self.aggregate_field_name == COUNT_FIELD else self.aggregate_field_name
        signature: dict[str, Any] = {"keys": list(self.grouping_key_names), "field": field, "filter": self.filter_json}
        if self.counts_distinct:
            signature["distinct"] = True
        return json.dumps(signature, sort_keys=True, separators=(",", ":"))

    @property
    def state_id(self) -> str:
        return hashlib.sha256(self.state_signature.encode()).hexdigest()[:16]

    def check_against(self, schema: TransactionSchema) -> None:
        """Raise ValueError unless every field the rule names exists in the transaction schema, typed to fit."""
        names = set(schema.names())
        unknown = [k for k in self.grouping_key_names if k not in names]
        if unknown:
            raise ValueError(f"groupingKeyNames names unknown transaction fields {unknown}")
        if self.aggregate_field_name != COUNT_FIELD:
            if self.aggregate_field_name not in names:
                raise ValueError(f"aggregateFieldName {self.aggregate_field_name!r} is not a transaction field")
            if not self.counts_distinct and not schema.field(self.aggregate_field_name).is_numeric:
                raise ValueError(
                    f"aggregateFieldName {self.aggregate_field_name!r} is not numeric (only COUNT_DISTINCT counts "
                    "values of any type)"
                )
        else:
            if self.aggregator_function_type not in (Aggregator.COUNT, Aggregator.SUM):
                raise ValueError(f"{self.aggregator_function_type} over COUNT is meaningless; use COUNT")
            if self.baseline is not None and self.baseline.aggregator is BaselineAggregator.AVG:
                raise ValueError("a baseline AVG over COUNT is always 1; use COUNT")
        check_filter(self.filter, schema)

    def to_json_dict(self) -> dict[str, Any]:
        """The rule in the seeds' camelCase vocabulary, ready for ``json.dumps``."""
        return {
            "ruleId": self.rule_id,
            "ruleName": self.rule_name,
            "ruleState": self.rule_state.value,
            "groupingKeyNames": list(self.grouping_key_names),
            "aggregateFieldName": self.aggregate_field_name,
            "aggregatorFunctionType": self.aggregator_function_type.value,
            "limitOperatorType": self.limit_operator_type.value,
            "limit": int(self.limit) if self.limit == self.limit.to_integral_value() else float(self.limit),
            "windowMinutes": self.window_minutes,
            "filter": json.loads(self.filter_json) if self.filter_json else None,
            "cooldownMinutes": self.cooldown_minutes,
            "disabled": self.disabled,
            **({"baseline": self.baseline.to_json_dict()} if self.baseline is not None else {}),
        }


def _short(value: Any, limit: int = 80) -> str:
    """``repr`` of a rejected value, cut so that a huge payload does not become a huge reason."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


class RuleValidationError(ValueError):
    """A rule that fails validation; ``reason`` is one line a person can act on."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_rule(data: dict[str, Any], schema: TransactionSchema) -> Rule:
    """Validate a rule (camelCase or snake_case) and check it against the transaction schema."""
    try:
        rule = Rule.model_validate(data)
    except ValidationError as error:
        raise RuleValidationError(_one_line(error)) from None
    try:
        rule.check_against(schema)
    except ValueError as error:
        raise RuleValidationError(str(error)) from None
    return rule


def _one_line(error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False):
        where = ".".join(str(p) for p in item["loc"]) or "rule"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)
