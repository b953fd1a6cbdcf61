# Databricks notebook source
# MAGIC %md
# MAGIC # 06 · Rule accuracy and shadow rules
# MAGIC
# MAGIC Each rule's accuracy per ISO week (alerts, decided, precision, fraud caught, alert rate: from the alerts, the
# MAGIC analysts' dispositions and the imported fraud labels; `pipelines/outcomes/accuracy.py`), with the rules now in
# MAGIC state SHADOW marked (`shadow`: their alerts were recorded, never acted on). Then a SHADOW rule beside the rule
# MAGIC it would replace (`pipelines/outcomes/shadow_comparison.py`, what the console's `/rules/{id}/shadow` shows):
# MAGIC alerts per day of each, the transactions both flag, only one flags, and each rule's precision over the range.
# MAGIC The same as `fraudlake outcomes accuracy` for the first part. Reads only; writes nothing.
# MAGIC
# MAGIC Widgets: `conf`, `lakehouse`; `shadow_rule` (blank: the SHADOW rule with the lowest id); `compared_rule`
# MAGIC (blank: the ACTIVE rule with the same grouping keys and aggregate field, the same aggregator first);
# MAGIC `from` / `to` (days `2024-06-01`, UTC, both included; blank: the 14 days ending with the newest alert of
# MAGIC either rule; at most 92 days).

# COMMAND ----------

from pipelines.notebook_tools.widgets import declare_settings_widgets, settings_from_widgets

declare_settings_widgets(dbutils)
dbutils.widgets.text("shadow_rule", "", "SHADOW rule id (blank: the first)")
dbutils.widgets.text("compared_rule", "", "Compared with rule id (blank: its live counterpart)")
dbutils.widgets.text("from", "", "From day (UTC; blank: 14 days before 'to')")
dbutils.widgets.text("to", "", "To day, included (blank: the newest alert's day)")

# COMMAND ----------

import datetime as dt

from delta_tables.rules import RULES
from pipelines.outcomes.accuracy import outcome_tables, rule_accuracy
from pipelines.outcomes.shadow_comparison import lakehouse_comparison, with_rule_states


def _number(name):
    text = dbutils.widgets.get(name).strip()
    return int(text) if text else None


def _day(name):
    text = dbutils.widgets.get(name).strip()
    return dt.date.fromisoformat(text) if text else None


settings = settings_from_widgets(dbutils)
rules = spark.read.format("delta").load(settings.table_path(RULES.name))
weekly = with_rule_states(rule_accuracy(*outcome_tables(spark, settings)), rules)
comparison = lakehouse_comparison(
    spark,
    settings,
    shadow_rule_id=_number("shadow_rule"),
    compared_rule_id=_number("compared_rule"),
    first=_day("from"),
    last=_day("to"),
)

# COMMAND ----------

# MAGIC %md Accuracy per rule and ISO week (Monday, UTC, of the event time); `shadow` marks rules on trial:

# COMMAND ----------

display(weekly)

# COMMAND ----------

# MAGIC %md The shadow comparison: each rule's precision over the range, the transactions flagged by both or only one
# MAGIC (how many were fraud, the first ones), and alerts per day.

# COMMAND ----------

if comparison is None:
    print("no SHADOW rule, or no rule to compare it with: set shadow_rule / compared_rule")
else:
    shadow_id, compared_id, days = comparison.shadow_rule_id, comparison.compared_rule_id, comparison.days
    print(f"rule {shadow_id} (shadow) vs rule {compared_id}, {days.first} to {days.last}")
    for side, figures in comparison.sides.items():
        shown = "-" if figures.precision is None else f"{figures.precision:.3f}"
        counts = f"{figures.alerts} alerts, {figures.decided} decided"
        print(f"  {side:9} rule {figures.rule_id}: {counts}, precision {shown}")
    for category, group in comparison.groups.items():
        first = ", ".join(str(t["transactionId"]) for t in group.first[:5])
        print(f"  {category:14} {group.transactions} transactions, {group.fraud} fraud; first: {first or '-'}")
    display(spark.createDataFrame(comparison.per_day, "day date, shadowAlerts long, comparedAlerts long"))
