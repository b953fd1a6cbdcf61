# Databricks notebook source
# MAGIC %md
# MAGIC # 01 · Manage rules
# MAGIC
# MAGIC Creates, updates, pauses, resumes or deletes a rule **through CDC events**: the same Debezium-style events
# MAGIC `fraudlake rules upsert|pause|resume|delete` publish, with a source position newer than everything the rules
# MAGIC table has seen. Then shows the current rules, the rule's history (the `rule_changes` log) and the rules
# MAGIC table as it was before the edit (Delta time travel). See `docs/rules-cdc.md`.
# MAGIC
# MAGIC Widgets: `conf`, `lakehouse`; `action` (`upsert`, `pause`, `resume`, `delete`); `rule_json` (a rule object
# MAGIC or an array of them, for `upsert`; default: the seed rule of `conf/sample_rules.json`); `rule_id` (for the
# MAGIC other actions; blank = the rule in `rule_json`); `publish_to`: `apply` (default) applies the events at once
# MAGIC through the rules job's own code path (parse, MERGE, change log), `kafka` publishes them to the rules topic,
# MAGIC where the continuous `fraudlake_rules_cdc` job applies them, `rulesdb` writes `fraud_rules` through
# MAGIC `FRAUDLAKE_RULESDB_DSN`, a direct operator edit: that login must be `fraudlake_operator` (the console role may
# MAGIC only propose, docs/rules-cdc.md "Attribution and four eyes"); `as_of` (a rules-table version or a UTC
# MAGIC timestamp for the time-travel view; blank = the version before this edit); `history_at` (an ISO date or
# MAGIC time, UTC: who made the rule what it was then, and why; blank = skip).
# MAGIC
# MAGIC Besides SUM, COUNT, AVG, MIN and MAX, a rule may count **distinct values** of a field of any type
# MAGIC (`COUNT_DISTINCT`, capped at conf `engine.distinct_cap`, no baseline) or take **the transaction's own value**
# MAGIC (`VALUE`), and its limit may be **relative**: with a `baseline`, `limit` is a factor of an aggregate of the
# MAGIC key's own history (AVG, SUM or COUNT over `windowMinutes` at least the rule's; `minCount` transactions needed;
# MAGIC `perWindow` scales it to the rule's window). Two `rule_json` examples (docs/rules-cdc.md, "The rule"):
# MAGIC
# MAGIC ```json
# MAGIC {"ruleId": 21, "ruleName": "fan-out: more than 5 beneficiaries of one payer in an hour", "groupingKeyNames": ["payerId"],
# MAGIC  "aggregateFieldName": "beneficiaryId", "aggregatorFunctionType": "COUNT_DISTINCT", "limitOperatorType": "GREATER",
# MAGIC  "limit": 5, "windowMinutes": 60}
# MAGIC {"ruleId": 22, "ruleName": "a payment over 5 times the payer's 30-day average", "groupingKeyNames": ["payerId"],
# MAGIC  "aggregateFieldName": "paymentAmount", "aggregatorFunctionType": "VALUE", "limitOperatorType": "GREATER",
# MAGIC  "limit": 5, "windowMinutes": 1, "baseline": {"aggregatorFunctionType": "AVG", "windowMinutes": 43200, "minCount": 5}}
# MAGIC ```

# COMMAND ----------

from pipelines.notebook_tools.widgets import declare_settings_widgets, settings_from_widgets
from rules_cdc.manage import ACTIONS, DESTINATIONS, seed_rule_text

declare_settings_widgets(dbutils)
dbutils.widgets.dropdown("action", "upsert", list(ACTIONS), "Action")
dbutils.widgets.text("rule_json", seed_rule_text(dbutils.widgets.get("conf") or None), "Rule JSON (upsert)")
dbutils.widgets.text("rule_id", "", "Rule id (blank: the rule in Rule JSON)")
dbutils.widgets.dropdown("publish_to", "apply", list(DESTINATIONS), "Apply now or publish to Kafka")
dbutils.widgets.text("as_of", "", "Time travel to version or timestamp (blank: before this edit)")
dbutils.widgets.text("history_at", "", "Who made the rule(s) what they were at (ISO time, UTC; blank: skip)")

# COMMAND ----------

from rules_cdc.manage import edit_rules, parse_rules_text

settings = settings_from_widgets(dbutils)
rule_id = dbutils.widgets.get("rule_id").strip()
outcome = edit_rules(
    spark,
    settings,
    dbutils.widgets.get("action"),
    rules=parse_rules_text(dbutils.widgets.get("rule_json"), settings),
    rule_id=int(rule_id) if rule_id else None,
    publish_to=dbutils.widgets.get("publish_to"),
)
print(outcome.summary())

# COMMAND ----------

# MAGIC %md The live rules now (ACTIVE, PAUSED, SHADOW; with `publish_to=kafka`, once the rules job applied the events):

# COMMAND ----------

from rules_cdc.rules_views import history_frame, rules_frame

display(rules_frame(spark, settings, include_tombstones=False))

# COMMAND ----------

# MAGIC %md The history of the edited rule(s): every applied change, oldest first, with the rules-table version it
# MAGIC produced (`rulesVersion`), the rule before and after, who changed it (`changedBy`; `unattributed` for an
# MAGIC edit typed in SQL that did not say), who approved it (`approvedBy`) and why (`changeReason`).

# COMMAND ----------

display(history_frame(spark, settings, outcome.rule_ids))

# COMMAND ----------

# MAGIC %md Who made the rule(s) what they were at `history_at`: per rule, the change in force then.

# COMMAND ----------

history_at = dbutils.widgets.get("history_at").strip()
if history_at:
    display(history_frame(spark, settings, outcome.rule_ids, at=history_at))

# COMMAND ----------

# MAGIC %md Time travel: the whole rules table, tombstones included, as it was before this edit.

# COMMAND ----------

from rules_cdc.manage import default_as_of

as_of = dbutils.widgets.get("as_of").strip() or default_as_of(spark, settings, outcome)
print(f"rules table as of {as_of}")
display(rules_frame(spark, settings, as_of))
