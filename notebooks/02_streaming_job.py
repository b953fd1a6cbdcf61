# Databricks notebook source
# MAGIC %md
# MAGIC # 02 · Streaming job
# MAGIC
# MAGIC Starts the fraud-rules engine: transactions from the landing folder, Kafka or a Delta table, through the
# MAGIC `foreachBatch` handler, into bronze, the bucket state and the alerts table. It is the same entry point as
# MAGIC `fraudlake run` and the `fraudlake_engine` job (`pipelines.engine.job.run_engine`), with the same checkpoint
# MAGIC under `<lakehouse>/_checkpoints/engine-<source>`, so a notebook run and the job continue each other's
# MAGIC progress: **never run both at once** on one lakehouse. See `docs/engine.md`.
# MAGIC
# MAGIC Widgets: `conf`, `lakehouse`; `source` (`files`, `kafka`, `delta`); `input` (files: the landing folder,
# MAGIC blank = `<lakehouse>/_landing/transactions`; delta: the table path); `once` (`true`, the default:
# MAGIC process what is available now (availableNow) and stop, so the notebook finishes; `false`: run continuously
# MAGIC until the cell is cancelled); `max_files_per_trigger` (blank = conf); `alerts_to_kafka` (`conf`, `true`,
# MAGIC `false`); `checkpoint` (blank = the job's).

# COMMAND ----------

from pipelines.engine.sources import SOURCES
from pipelines.notebook_tools.widgets import declare_settings_widgets, settings_from_widgets, widget_flag

declare_settings_widgets(dbutils)
dbutils.widgets.dropdown("source", "files", list(SOURCES), "Source of transactions")
dbutils.widgets.text("input", "", "Input (files: folder, blank = landing; delta: table path)")
dbutils.widgets.dropdown("once", "true", ["true", "false"], "Once (availableNow) or continuous")
dbutils.widgets.text("max_files_per_trigger", "", "Files per micro-batch (blank: conf)")
dbutils.widgets.dropdown("alerts_to_kafka", "conf", ["conf", "true", "false"], "Also send alerts to Kafka")
dbutils.widgets.text("checkpoint", "", "Checkpoint folder (blank: <lakehouse>/_checkpoints/engine-<source>)")

# COMMAND ----------

from pipelines.engine.job import EngineRun, run_engine

settings = settings_from_widgets(dbutils)
max_files = dbutils.widgets.get("max_files_per_trigger").strip()
to_kafka = dbutils.widgets.get("alerts_to_kafka")
run = EngineRun(
    source=dbutils.widgets.get("source"),
    input_path=dbutils.widgets.get("input").strip() or None,
    once=widget_flag(dbutils, "once"),
    alerts_to_kafka=None if to_kafka == "conf" else to_kafka == "true",
    max_files_per_trigger=int(max_files) if max_files else None,
    checkpoint=dbutils.widgets.get("checkpoint").strip() or None,
)
run_engine(spark, settings, run)  # returns when caught up (once) or when the query stops

# COMMAND ----------

# MAGIC %md The engine's micro-batches, newest first (counts and step timings from `batch_log`):

# COMMAND ----------

from pyspark.sql import functions as F

batches = spark.read.format("delta").load(settings.table_path("batch_log")).where(F.col("job").startswith("engine-"))
display(batches.orderBy(F.col("finishedAt").desc()).select("job", "batchId", "durationMs", "counts").limit(20))

# COMMAND ----------

# MAGIC %md What the engine has done so far: rules, transactions, alerts per rule, latency:

# COMMAND ----------

from pipelines.engine.run_summary import engine_summary, format_summary

print(format_summary(engine_summary(spark, settings)))
