# Databricks notebook source
# MAGIC %md
# MAGIC # 04 · Data quality
# MAGIC
# MAGIC Runs the Great Expectations suites (`conf/expectations/*.json`) against the lakehouse tables and writes
# MAGIC the markdown report, as `fraudlake dq` and the scheduled data-quality job do. See `docs/data-quality.md`
# MAGIC for what each expectation guards.
# MAGIC
# MAGIC Widgets: `conf`, `lakehouse`; `tables` (comma-separated, blank = all); `allow_missing` (skip tables
# MAGIC that do not exist instead of failing); `fail_on_error` (raise at the end when an expectation fails, so a
# MAGIC job running this notebook fails).

# COMMAND ----------

from pipelines.notebook_tools.widgets import declare_settings_widgets, settings_from_widgets, widget_flag

declare_settings_widgets(dbutils)
dbutils.widgets.text("tables", "", "Tables (comma-separated; blank = all)")
dbutils.widgets.dropdown("allow_missing", "false", ["true", "false"], "Skip missing tables")
dbutils.widgets.dropdown("fail_on_error", "true", ["true", "false"], "Fail when an expectation fails")

# COMMAND ----------

from pipelines.data_quality.report import default_report_path, outcome_rows, write_report, OUTCOME_SCHEMA
from pipelines.data_quality.run import run_quality

settings = settings_from_widgets(dbutils)
tables = [t.strip() for t in dbutils.widgets.get("tables").split(",") if t.strip()] or None
run = run_quality(spark, settings, tables, allow_missing=widget_flag(dbutils, "allow_missing"))
report_path = write_report(run, default_report_path(settings))
print(f"data quality {'PASSED' if run.success else 'FAILED'}; report {report_path}")

# COMMAND ----------

# MAGIC %md Every expectation, failures first:

# COMMAND ----------

display(spark.createDataFrame(outcome_rows(run), OUTCOME_SCHEMA))

# COMMAND ----------

if widget_flag(dbutils, "fail_on_error") and not run.success:
    failed = [f"{row['table']}: {row['expectation']} on {row['columns']}" for row in outcome_rows(run) if not row["success"]]
    raise AssertionError(f"data quality failed ({len(failed)}): {failed}")
