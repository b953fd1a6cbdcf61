# Databricks notebook source
# MAGIC %md
# MAGIC # 03 · Alerts dashboard
# MAGIC
# MAGIC Four charts over the `alerts` table: alerts over time per rule, the most alerted keys, the alerting aggregate
# MAGIC against each rule's limit, and the detection latency. Spark aggregates first (counts per time bucket, key and
# MAGIC latency bin); only those small results reach the driver and matplotlib. The charts are shown here and saved
# MAGIC as PNG files (`alerts_over_time.png`, `top_keys.png`, `aggregate_vs_limit.png`, `latency.png`).
# MAGIC
# MAGIC Widgets: `conf`, `lakehouse`; `output_dir` (blank = `<lakehouse>/_reports/dashboard`; on Databricks a
# MAGIC `/Volumes/...` path, since the charts are written as files); `grain` of the time buckets (`auto`: minutes
# MAGIC for up to 3 hours of alerts, hours for up to 7 days, else days); `top_n` keys; `hours` (only alerts detected
# MAGIC in the last N hours; blank = all).

# COMMAND ----------

from pipelines.dashboard.aggregates import GRAINS
from pipelines.notebook_tools.widgets import declare_settings_widgets, settings_from_widgets

declare_settings_widgets(dbutils)
dbutils.widgets.text("output_dir", "", "Output folder for the PNGs (blank: <lakehouse>/_reports/dashboard)")
dbutils.widgets.dropdown("grain", "auto", list(GRAINS), "Time bucket")
dbutils.widgets.text("top_n", "10", "Top keys")
dbutils.widgets.text("hours", "", "Alerts detected in the last N hours (blank: all)")

# COMMAND ----------

from pipelines.dashboard.aggregates import dashboard_data, read_alerts
from pipelines.dashboard.charts import dashboard_figures, default_dashboard_dir, save_figures

settings = settings_from_widgets(dbutils)
hours = dbutils.widgets.get("hours").strip()
alerts = read_alerts(spark, settings, since_hours=float(hours) if hours else None)
data = dashboard_data(alerts, grain=dbutils.widgets.get("grain"), top_n=int(dbutils.widgets.get("top_n")))
figures = dashboard_figures(data)
paths = save_figures(figures, dbutils.widgets.get("output_dir").strip() or default_dashboard_dir(settings))
print(f"{data.total_alerts} alerts, per {data.grain}; charts: {', '.join(str(p) for p in paths)}")

# COMMAND ----------

# MAGIC %md Alerts per rule (most alerted first):

# COMMAND ----------

display(data.per_rule())

# COMMAND ----------

# MAGIC %md Alerts over time, one line per rule (by the transactions' event time; empty buckets count 0):

# COMMAND ----------

display(figures["alerts_over_time"])

# COMMAND ----------

# MAGIC %md The keys (grouping-key values, e.g. `[payer,beneficiary]`) with most alerts, colored by rule:

# COMMAND ----------

display(figures["top_keys"])

# COMMAND ----------

# MAGIC %md How far over (or under) its limit each rule's aggregate was when it alerted: per bucket the range and
# MAGIC the maximum, the limit dashed (one line per limit the rule had):

# COMMAND ----------

display(figures["aggregate_vs_limit"])

# COMMAND ----------

# MAGIC %md Detection latency: from ingestion of the transaction to the alert, with p50, p95 and p99:

# COMMAND ----------

display(figures["latency"])
