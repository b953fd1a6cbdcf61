# Databricks notebook source
# MAGIC %md
# MAGIC # 05 · Backtest a rule
# MAGIC
# MAGIC Evaluates a **candidate** rule over the `bronze_transactions` history and shows the alerts it would have
# MAGIC raised, per day. The candidate is never written anywhere (not to the rules table, not to the alerts): the
# MAGIC engine's own steps run over the history as **one micro-batch on an empty state** — precedence by
# MAGIC (eventTime, transactionId), nothing late (rows bronze flagged late are evaluated too), the cooldown applied
# MAGIC from an empty memory. See `docs/databricks.md` (backtest semantics) and `pipelines/engine/backtest.py`.
# MAGIC The same as `fraudlake rules backtest FILE.json [--from ISO] [--to ISO] [--output PATH]`.
# MAGIC
# MAGIC Widgets: `conf`, `lakehouse`; `rule_json` (one rule object, the seeds' camelCase; default: the seed rule of
# MAGIC `conf/sample_rules.json`; a PAUSED or SHADOW rule is backtested as if ACTIVE); `from` / `to` (ISO date or
# MAGIC date-time, UTC unless an offset is given: only transactions with `from <= eventTime < to` are evaluated, but
# MAGIC those of the rule's window before `from` still count; blank = all); `output_dir` (blank =
# MAGIC `<lakehouse>/_reports/backtest`; on Databricks a `/Volumes/...` path): the chart `backtest_<ruleId>.png` and
# MAGIC the alerts `backtest_<ruleId>.jsonl` are written there.
# MAGIC
# MAGIC Any kind of rule can be a candidate, e.g. a distinct count or a relative limit (`baseline`: the limit is a factor
# MAGIC of the key's own history, here the payer's average payment of the last 30 days; docs/rules-cdc.md, "The rule"):
# MAGIC
# MAGIC ```json
# MAGIC {"ruleId": 21, "groupingKeyNames": ["payerId"], "aggregateFieldName": "beneficiaryId",
# MAGIC  "aggregatorFunctionType": "COUNT_DISTINCT", "limitOperatorType": "GREATER", "limit": 5, "windowMinutes": 60}
# MAGIC {"ruleId": 22, "groupingKeyNames": ["payerId"], "aggregateFieldName": "paymentAmount", "aggregatorFunctionType": "VALUE",
# MAGIC  "limitOperatorType": "GREATER", "limit": 5, "windowMinutes": 1,
# MAGIC  "baseline": {"aggregatorFunctionType": "AVG", "windowMinutes": 43200, "minCount": 5}}
# MAGIC ```

# COMMAND ----------

from pipelines.notebook_tools.widgets import declare_settings_widgets, settings_from_widgets
from rules_cdc.manage import seed_rule_text

declare_settings_widgets(dbutils)
dbutils.widgets.text("rule_json", seed_rule_text(dbutils.widgets.get("conf") or None), "Candidate rule (JSON)")
dbutils.widgets.text("from", "", "Evaluate from (ISO, UTC; blank: all)")
dbutils.widgets.text("to", "", "Evaluate before (ISO, UTC; blank: all)")
dbutils.widgets.text("output_dir", "", "Output folder (blank: <lakehouse>/_reports/backtest)")

# COMMAND ----------

from pathlib import Path

from pipelines.dashboard.charts import default_dashboard_dir
from pipelines.engine.backtest import alert_json_lines, backtest_per_day, backtest_rule, parse_instant_ms
from rules_cdc.manage import parse_rules_text

settings = settings_from_widgets(dbutils)
candidates = parse_rules_text(dbutils.widgets.get("rule_json"), settings)
if len(candidates) != 1:
    raise ValueError(f"rule_json must hold exactly one rule, got {len(candidates)}")
rule = candidates[0]
alerts = backtest_rule(
    spark,
    settings,
    rule,
    from_ms=parse_instant_ms(dbutils.widgets.get("from")),
    to_ms=parse_instant_ms(dbutils.widgets.get("to")),
).persist()  # read by the counts, the chart and the file below
per_day = backtest_per_day(alerts).toPandas()  # one row per day: small
output_dir = Path(dbutils.widgets.get("output_dir").strip() or default_dashboard_dir(settings).parent / "backtest")
output_dir.mkdir(parents=True, exist_ok=True)
alerts_file = output_dir / f"backtest_{rule.rule_id}.jsonl"
alerts_file.write_text("".join(f"{line}\n" for line in alert_json_lines(alerts)))
print(f"rule {rule.rule_id}: {int(per_day['alerts'].sum())} alerts on {len(per_day)} day(s); alerts in {alerts_file}")

# COMMAND ----------

# MAGIC %md Alerts and distinct keys per day (of the transactions' event time, UTC):

# COMMAND ----------

display(per_day)

# COMMAND ----------

# MAGIC %md The same as a chart (saved as `backtest_<ruleId>.png`): bars are alerts, the line the distinct keys.

# COMMAND ----------

from pipelines.dashboard.charts import new_figure, placeholder, rule_color, save_figures

title = f"Backtest of rule {rule.rule_id}: alerts per day"
if per_day.empty:
    figure = placeholder(title, "no alerts")
else:
    figure = new_figure()
    ax = figure.add_subplot()
    days = [str(day) for day in per_day["day"]]
    ax.bar(days, per_day["alerts"], color=rule_color(rule.rule_id), alpha=0.8, label="alerts")
    ax.plot(days, per_day["keys"], color="black", marker="o", label="distinct keys")
    ax.set_title(title)
    ax.set_ylabel("per day")
    ax.tick_params(axis="x", labelrotation=30)
    ax.legend()
    ax.grid(alpha=0.3)
save_figures({f"backtest_{rule.rule_id}": figure}, output_dir)
display(figure)

# COMMAND ----------

# MAGIC %md The first alerts, in event-time order:

# COMMAND ----------

display(alerts.orderBy("eventTime", "transactionId"))
alerts.unpersist()
