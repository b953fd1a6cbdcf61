# Databricks notebook source
# MAGIC %md
# MAGIC # 00 · Set up the lakehouse
# MAGIC
# MAGIC Creates every fraudlake table under the lakehouse root: bronze transactions, rules, rule changes,
# MAGIC bucket state, alerts, quarantine and the batch log. Idempotent: a second run creates nothing.
# MAGIC
# MAGIC The same call as `fraudlake init`. Widgets: `conf` (settings file; blank = `$FRAUDLAKE_CONF` or
# MAGIC `conf/local.yaml`) and `lakehouse` (blank = the settings file's `lakehouse_root`).

# COMMAND ----------

from pipelines.notebook_tools.widgets import declare_settings_widgets, lakehouse_overview, settings_from_widgets

declare_settings_widgets(dbutils)

# COMMAND ----------

from delta_tables.catalog import init_lakehouse

settings = settings_from_widgets(dbutils)
created = init_lakehouse(spark, settings)
print(f"lakehouse {settings.lakehouse_root}: created {', '.join(created) if created else 'nothing (all present)'}")

# COMMAND ----------

# MAGIC %md The tables, where they live and how they are partitioned:

# COMMAND ----------

display(lakehouse_overview(spark, settings))
