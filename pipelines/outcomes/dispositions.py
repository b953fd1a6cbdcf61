"""Recording an analyst's disposition of an alert, and reading the one in force for each alert.

Example::

    record_disposition(spark, settings, alert_id="7:tx-1", disposition="FALSE_POSITIVE", decided_by="ana")
    current = current_dispositions(spark.read.format("delta").load(settings.table_path("alert_dispositions")))
"""

from __future__ import annotations

import datetime as dt
import uuid

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from delta_tables.alert_dispositions import ALERT_DISPOSITIONS, ALERT_DISPOSITIONS_SCHEMA, DISPOSITIONS
from delta_tables.alerts import ALERTS
from delta_tables.table_spec import create_table
from pipelines.base.settings import Settings

MAX_NAME = 200
MAX_NOTE = 2000


class DispositionError(ValueError):
    """A disposition that cannot be recorded: unknown alert, unknown decision, no author."""


def record_disposition(
    spark: SparkSession,
    settings: Settings,
    *,
    alert_id: str,
    disposition: str,
    decided_by: str,
    note: str | None = None,
    now: dt.datetime | None = None,
) -> str:
    """Append one disposition of an existing alert; return its id. Refuses an unknown alert or decision."""
    decision = disposition.strip().upper().replace("-", "_").replace(" ", "_")
    if decision not in DISPOSITIONS:
        raise DispositionError(f"disposition {disposition!r} is not one of {', '.join(DISPOSITIONS)}")
    author = decided_by.strip()
    if not author or len(author) > MAX_NAME:
        raise DispositionError(f"a disposition needs who made it (1 to {MAX_NAME} characters)")
    if note is not None and len(note) > MAX_NOTE:
        raise DispositionError(f"the note is longer than {MAX_NOTE} characters")
    alert = (
        spark.read.format("delta")
        .load(settings.table_path(ALERTS.name))
        .where(F.col("alertId") == F.lit(alert_id))
        .select("ruleId", "transactionId")
        .limit(1)
        .collect()
    )
    if not alert:
        raise DispositionError(f"no alert {alert_id!r}")
    decided_at = now or dt.datetime.now(dt.UTC)
    disposition_id = str(uuid.uuid4())
    row = (
        disposition_id,
        alert_id,
        int(alert[0]["ruleId"]),
        str(alert[0]["transactionId"]),
        decision,
        author,
        decided_at.replace(tzinfo=None) if decided_at.tzinfo is None else decided_at,
        note,
        decided_at.date(),
    )
    path = settings.table_path(ALERT_DISPOSITIONS.name)
    create_table(spark, ALERT_DISPOSITIONS, path)
    spark.createDataFrame([row], ALERT_DISPOSITIONS_SCHEMA).write.format("delta").mode("append").save(path)
    return disposition_id


def current_dispositions(dispositions: DataFrame) -> DataFrame:
    """The disposition in force per alert: the latest ``decidedAt`` (then the greatest id), with its author."""
    latest = Window.partitionBy("alertId").orderBy(F.col("decidedAt").desc(), F.col("dispositionId").desc())
    return dispositions.withColumn("_n", F.row_number().over(latest)).where(F.col("_n") == 1).drop("_n")
