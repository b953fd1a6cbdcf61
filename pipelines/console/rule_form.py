"""The rule form: what a person typed -> the rule model's input, validated by the model alone.

The form does no validation of its own. Text goes to ``parse_rule`` as typed (pydantic converts "10" to 10 and
says why "ten" is not a number); blank optional fields are left out; the grouping keys are split at commas; the
filter is passed as the JSON text it is. A refusal is the model's own one-line message, shown above the form,
with everything the person typed kept.

The relative-limit block (baseline aggregator, its window, the least history, per window) becomes the model's
``baseline`` as soon as any of it is filled in, blank parts left out, so a half-filled block is refused by the model
("baseline.windowMinutes: Field required") rather than dropped; all blank (the aggregator "none") is a fixed limit.

Example::

    values = RuleFormValues.from_form(await request.form())
    rule = values.to_rule(settings.transaction_schema)      # raises RuleValidationError(reason)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from pipelines.base.settings import TransactionSchema
from rules_cdc.rule_model import Aggregator, BaselineAggregator, LimitOperator, Rule, parse_rule

AGGREGATORS = tuple(a.value for a in Aggregator)
BASELINE_AGGREGATORS = tuple(a.value for a in BaselineAggregator)
BASELINE_FIELDS = {
    "baselineAggregator": "aggregatorFunctionType",
    "baselineWindowMinutes": "windowMinutes",
    "baselineMinCount": "minCount",
    "baselinePerWindow": "perWindow",
}
"""The form's relative-limit fields -> the keys of the model's ``baseline`` object."""
OPERATORS = tuple(o.value for o in LimitOperator)
STATES = ("ACTIVE", "PAUSED", "SHADOW")
"""The states a person may choose: SHADOW releases a rule on trial (evaluated, its alerts recorded, never acted on).
An edit form must offer a rule's own state, else the browser submits the first option and the edit would change it."""


@dataclass(frozen=True)
class RuleFormValues:
    """The form's text fields, as typed."""

    ruleId: str = ""
    ruleName: str = ""
    ruleState: str = "ACTIVE"
    groupingKeyNames: str = ""
    aggregateFieldName: str = "paymentAmount"
    aggregatorFunctionType: str = "SUM"
    limitOperatorType: str = "GREATER"
    limit: str = ""
    windowMinutes: str = ""
    filter: str = ""
    cooldownMinutes: str = ""
    baselineAggregator: str = ""  # blank: a fixed limit
    baselineWindowMinutes: str = ""
    baselineMinCount: str = ""
    baselinePerWindow: str = ""  # a checkbox: "on" when ticked

    @property
    def relative(self) -> bool:
        """Whether the relative-limit block is filled in (the limit is then a factor of the baseline)."""
        return any(getattr(self, name).strip() for name in BASELINE_FIELDS)

    @classmethod
    def from_form(cls, form: Mapping[str, Any]) -> RuleFormValues:
        return cls(**{f.name: str(form.get(f.name, "") or "") for f in fields(cls)})

    @classmethod
    def from_rule(cls, document: Mapping[str, Any]) -> RuleFormValues:
        """Prefilled from a rule in the camelCase vocabulary (``Rule.to_json_dict`` / ``rules_views.rule_json``)."""
        filter_value = document.get("filter")
        baseline = document.get("baseline") or {}
        if isinstance(baseline, str):
            baseline = json.loads(baseline)
        return cls(
            ruleId=str(document.get("ruleId", "")),
            ruleName=document.get("ruleName") or "",
            ruleState=str(document.get("ruleState") or "ACTIVE"),
            groupingKeyNames=", ".join(document.get("groupingKeyNames") or []),
            aggregateFieldName=str(document.get("aggregateFieldName") or ""),
            aggregatorFunctionType=str(document.get("aggregatorFunctionType") or ""),
            limitOperatorType=str(document.get("limitOperatorType") or ""),
            limit="" if document.get("limit") is None else str(document["limit"]),
            windowMinutes="" if document.get("windowMinutes") is None else str(document["windowMinutes"]),
            filter=json.dumps(filter_value) if filter_value else "",
            cooldownMinutes="" if document.get("cooldownMinutes") is None else str(document["cooldownMinutes"]),
            baselineAggregator=str(baseline.get("aggregatorFunctionType") or ""),
            baselineWindowMinutes="" if baseline.get("windowMinutes") is None else str(baseline["windowMinutes"]),
            baselineMinCount="" if baseline.get("minCount") is None else str(baseline["minCount"]),
            baselinePerWindow="on" if baseline.get("perWindow") else "",
        )

    def model_input(self) -> dict[str, Any]:
        """What ``parse_rule`` gets: the typed text, blank optional fields left out, keys split at commas, the
        relative-limit block as ``baseline`` when any of it is filled in."""
        data: dict[str, Any] = {}
        baseline: dict[str, Any] = {}
        for name, value in asdict(self).items():
            text = value.strip()
            if name in BASELINE_FIELDS:
                if text:
                    baseline[BASELINE_FIELDS[name]] = text
            elif name == "groupingKeyNames":
                data[name] = [part.strip() for part in text.split(",") if part.strip()]
            elif text:  # blank: left out, so the model applies its default or says the field is required
                data[name] = text
        if baseline:
            data["baseline"] = baseline
        return data

    def to_rule(self, schema: TransactionSchema) -> Rule:
        return parse_rule(self.model_input(), schema)

    def with_rule_id(self, rule_id: str) -> RuleFormValues:
        return RuleFormValues(**{**asdict(self), "ruleId": rule_id})
