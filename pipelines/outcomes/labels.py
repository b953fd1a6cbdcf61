"""Importing confirmed-fraud labels (chargebacks, case outcomes) keyed by transaction id, from a file or a table.

The source needs a ``transactionId`` column; ``labelledAt`` (a timestamp) and ``reason`` are kept when present.
Rows without a transaction id are not labels: they go to quarantine with their raw payload and the reason. A
second import of the same source adds nothing (a MERGE that only inserts on (transactionId, labelSource)).

Example::

    result = import_labels(spark, settings, "chargebacks.csv", label_source="chargebacks", imported_by="ops")
    # ImportResult(labels=118, inserted=118, already_known=0, quarantined=2)
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass
from typing import Literal

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from delta_tables.fraud_labels import FRAUD_LABELS
from delta_tables.quarantine import QUARANTINE, QUARANTINE_SCHEMA
from delta_tables.table_spec import create_table
from pipelines.base.settings import Settings

LabelFormat = Literal["csv", "json", "delta"]
QUARANTINE_SOURCE = "fraud_labels"
MAX_ID = 200


class LabelImportError(ValueError):
    """A label source that cannot be read as labels at all (no transactionId column)."""


@dataclass(frozen=True)
class ImportResult:
    labels: int  # distinct valid transaction ids in the source
    inserted: int
    already_known: int
    quarantined: int


def read_label_source(spark: SparkSession, source: str, fmt: LabelFormat) -> DataFrame:
    """The source as a frame: CSV with a header, JSON lines, or a Delta table path."""
    if fmt == "csv":
        return spark.read.option("header", "true").csv(source)
    if fmt == "json":
        return spark.read.json(source)
    return spark.read.format("delta").load(source)


def label_rows(raw: DataFrame, *, label_source: str, imported_by: str, now: dt.datetime) -> tuple[DataFrame, DataFrame]:
    """``(labels, rejected)``: the valid rows as ``fraud_labels`` rows (one per transaction id) and the others as
    quarantine material (``rawPayload``, ``reason``)."""
    if "transactionId" not in raw.columns:
        raise LabelImportError(f"a label source needs a transactionId column (it has: {', '.join(raw.columns)})")
    tx = F.trim(F.col("transactionId").cast("string"))
    checked = raw.select(
        tx.alias("_tx"),
        F.to_json(F.struct(*[F.col(f"`{c}`") for c in raw.columns])).alias("_payload"),
        (F.col("labelledAt").cast("timestamp") if "labelledAt" in raw.columns else F.lit(None)).alias("_at"),
        (F.col("reason").cast("string") if "reason" in raw.columns else F.lit(None)).alias("_reason"),
    ).withColumn(
        "_invalid",
        F.when(F.col("_tx").isNull() | (F.col("_tx") == ""), F.lit("label without a transactionId"))
        .when(F.length("_tx") > MAX_ID, F.lit(f"transactionId longer than {MAX_ID} characters"))
        .otherwise(F.lit(None).cast("string")),
    )
    labels = (
        checked.where(F.col("_invalid").isNull())
        .dropDuplicates(["_tx"])
        .select(
            F.col("_tx").alias("transactionId"),
            F.lit(label_source).alias("labelSource"),
            F.col("_at").alias("labelledAt"),
            F.lit(now.replace(tzinfo=None)).cast("timestamp").alias("importedAt"),
            F.lit(imported_by).alias("importedBy"),
            F.col("_reason").alias("reason"),
        )
    )
    rejected = checked.where(F.col("_invalid").isNotNull()).select(
        F.col("_payload").alias("rawPayload"), F.col("_invalid").alias("reason")
    )
    return labels, rejected


def import_labels(
    spark: SparkSession,
    settings: Settings,
    source: str,
    *,
    fmt: LabelFormat = "csv",
    label_source: str,
    imported_by: str,
    now: dt.datetime | None = None,
) -> ImportResult:
    """Insert the source's new labels into ``fraud_labels`` and quarantine its invalid rows; see the module doc."""
    if not label_source.strip() or not imported_by.strip():
        raise LabelImportError("an import needs a label source name and who imports it")
    at = now or dt.datetime.now(dt.UTC)
    labels, rejected = label_rows(
        read_label_source(spark, source, fmt), label_source=label_source, imported_by=imported_by, now=at
    )
    labels = labels.localCheckpoint()  # read the source once for the counts and the MERGE
    path = settings.table_path(FRAUD_LABELS.name)
    create_table(spark, FRAUD_LABELS, path)
    table = DeltaTable.forPath(spark, path)
    before = table.toDF().count()
    # Only inserts: a label, once known, never changes; a MERGE that changes nothing may not commit at all, so the
    # new labels are counted from the table, not read from the last commit's metrics.
    table.alias("t").merge(
        labels.alias("s"), "t.transactionId = s.transactionId AND t.labelSource = s.labelSource"
    ).whenNotMatchedInsertAll().execute()
    inserted = DeltaTable.forPath(spark, path).toDF().count() - before
    valid = labels.count()
    bad = _quarantine(spark, settings, rejected, source, at)
    return ImportResult(labels=valid, inserted=inserted, already_known=valid - inserted, quarantined=bad)


def _quarantine(spark: SparkSession, settings: Settings, rejected: DataFrame, source: str, at: dt.datetime) -> int:
    rows = rejected.collect()  # invalid label rows: few, and each must be kept
    if not rows:
        return 0
    naive = at.replace(tzinfo=None)
    frame = spark.createDataFrame(
        [
            (
                hashlib.sha256(f"{QUARANTINE_SOURCE}|file:{source}:{i}|{r['rawPayload']}".encode()).hexdigest(),
                QUARANTINE_SOURCE,
                f"file:{source}:{i}",
                r["rawPayload"],
                r["reason"],
                None,
                naive,
                naive.date(),
            )
            for i, r in enumerate(rows)
        ],
        QUARANTINE_SCHEMA,
    )
    path = settings.table_path(QUARANTINE.name)
    create_table(spark, QUARANTINE, path)
    # The id hashes the source, the row's place and its payload: importing the same file again adds nothing.
    DeltaTable.forPath(spark, path).alias("t").merge(
        frame.alias("s"), "t.quarantineId = s.quarantineId"
    ).whenNotMatchedInsertAll().execute()
    return len(rows)
