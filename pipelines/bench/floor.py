"""The floor of the stack: the cheapest ``foreachBatch`` jobs doing the I/O the engine does, on the same files.

Two minimal Structured Streaming jobs over the bench's JSON-lines landing folder (files source,
``maxFilesPerTrigger=1``, ``availableNow``), each writing into its own fresh tables:

* ``append``: parse the batch with ``from_json`` and append it to a Delta table (bronze, in effect);
* ``append+merge``: the same, then one MERGE of the batch's per-(payer, minute) sum and count into a keyed Delta
  table (additive on match, insert otherwise): the smallest job that keeps pre-aggregated state.

Nothing else: no tags, no quarantine, no evaluation. The engine's batch time divided by the ``append+merge``
batch time, measured in the same run on the same files, is the figure the bench reports beside every engine row:
on a noisy shared machine the ratio holds where absolute seconds do not.

Example::

    result = run_floor(spark, landing, work / "floor", kind="append+merge")
    result.median_batch_seconds
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

FloorKind = Literal["append", "append+merge"]
FLOOR_KINDS: tuple[FloorKind, ...] = ("append", "append+merge")
TRANSACTION_DDL = (
    "transactionId STRING, eventTime LONG, payerId LONG, beneficiaryId LONG, paymentAmount DECIMAL(18,2), "
    "paymentType STRING, channel STRING, country STRING, currency STRING"
)


def add_batch_seconds(query: StreamingQuery) -> list[float]:
    """Each micro-batch's ``foreachBatch`` wall time (``durationMs.addBatch`` of the query's progress), in order:
    the same measure for the floor jobs and the engine."""
    return [p["durationMs"]["addBatch"] / 1000 for p in query.recentProgress if p["numInputRows"]]


@dataclass
class FloorResult:
    """Per-batch wall seconds of one floor job (the first batch is warm-up)."""

    kind: FloorKind
    batch_seconds: list[float] = field(default_factory=list)
    rows: int = 0

    @property
    def median_batch_seconds(self) -> float:
        steady = self.batch_seconds[1:] or self.batch_seconds
        return statistics.median(steady) if steady else 0.0


def parsed(batch: DataFrame) -> DataFrame:
    """The raw JSON lines as typed columns (one ``from_json``)."""
    return batch.select(F.from_json("value", TRANSACTION_DDL).alias("t")).select("t.*")


def create_minute_state(spark: SparkSession, path: str) -> None:
    """The floor's keyed state table: per (payer, minute) the sum and count of the amounts."""
    (
        DeltaTable.createIfNotExists(spark)
        .location(path)
        .addColumn("payerId", "LONG")
        .addColumn("minute", "LONG")
        .addColumn("amount", "DECIMAL(38,2)")
        .addColumn("n", "LONG")
        .execute()
    )


def merge_minutes(spark: SparkSession, state: str, rows: DataFrame) -> None:
    """One MERGE of the rows' per-(payer, minute) sum and count into ``state`` (additive on match, else insert)."""
    minutes = rows.groupBy("payerId", (F.col("eventTime") / 60_000).cast("long").alias("minute")).agg(
        F.sum("paymentAmount").alias("amount"), F.count(F.lit(1)).alias("n")
    )
    (
        DeltaTable.forPath(spark, state)
        .alias("t")
        .merge(minutes.alias("s"), "t.payerId = s.payerId AND t.minute = s.minute")
        .whenMatchedUpdate(set={"amount": "t.amount + s.amount", "n": "t.n + s.n"})
        .whenNotMatchedInsertAll()
        .execute()
    )


def floor_batch(spark: SparkSession, kind: FloorKind, work: Path) -> Callable[[DataFrame, int], None]:
    """The ``foreachBatch`` function of one floor job."""
    bronze, state = str(work / "bronze"), str(work / "state")

    def run(batch: DataFrame, batch_id: int) -> None:
        rows = parsed(batch)
        rows.write.format("delta").mode("append").save(bronze)
        if kind == "append+merge":
            merge_minutes(spark, state, rows)

    return run


def run_floor(spark: SparkSession, landing: Path, work: Path, *, kind: FloorKind) -> FloorResult:
    """Run one floor job over every file of ``landing`` (one per micro-batch) with fresh tables under ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    create_minute_state(spark, str(work / "state"))
    query = (
        spark.readStream.format("text")
        .option("maxFilesPerTrigger", 1)
        .load(str(landing))
        .writeStream.foreachBatch(floor_batch(spark, kind, work))
        .option("checkpointLocation", str(work / "_checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"floor job {kind} failed: {query.exception()}")
    rows = spark.read.format("delta").load(str(work / "bronze")).count()
    return FloorResult(kind, add_batch_seconds(query), rows)
