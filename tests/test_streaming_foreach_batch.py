"""Structured Streaming with foreachBatch writing Delta, on a file source under tmp_path."""

from __future__ import annotations

import json
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F


def test_foreach_batch_merges_into_delta_and_is_idempotent_per_batch(spark: SparkSession, tmp_path: Path) -> None:
    landing, target, checkpoint = tmp_path / "landing", str(tmp_path / "counts"), str(tmp_path / "ckpt")
    landing.mkdir()
    spark.createDataFrame([], "k string, n long").write.format("delta").save(target)
    (landing / "a.jsonl").write_text("\n".join(json.dumps({"k": k}) for k in ["x", "y", "x"]))

    def upsert_counts(batch: DataFrame, batch_id: int) -> None:
        counts = batch.groupBy("k").agg(F.count("*").alias("n"))
        session = batch.sparkSession
        # Idempotent MERGE: Delta skips a commit whose (txnAppId, txnVersion) it has already seen.
        session.conf.set("spark.databricks.delta.write.txnAppId", "test-counts")
        session.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
        try:
            (
                DeltaTable.forPath(session, target)
                .alias("t")
                .merge(counts.alias("s"), "t.k = s.k")
                .whenMatchedUpdate(set={"n": "t.n + s.n"})
                .whenNotMatchedInsertAll()
                .execute()
            )
        finally:
            session.conf.unset("spark.databricks.delta.write.txnAppId")
            session.conf.unset("spark.databricks.delta.write.txnVersion")

    stream = spark.readStream.schema("k string").json(str(landing))
    query = stream.writeStream.foreachBatch(upsert_counts).option("checkpointLocation", checkpoint)
    handle = query.trigger(availableNow=True).start()
    try:
        handle.awaitTermination(120)
    finally:
        handle.stop()
    assert sorted(tuple(r) for r in spark.read.format("delta").load(target).collect()) == [("x", 2), ("y", 1)]

    (landing / "b.jsonl").write_text(json.dumps({"k": "y"}))
    handle = query.trigger(availableNow=True).start()
    try:
        handle.awaitTermination(120)
    finally:
        handle.stop()
    assert sorted(tuple(r) for r in spark.read.format("delta").load(target).collect()) == [("x", 2), ("y", 2)]

    # Replaying batch 1 (as after a crash before the checkpoint commit) changes nothing.
    upsert_counts(spark.createDataFrame([("y",)], "k string"), 1)
    assert sorted(tuple(r) for r in spark.read.format("delta").load(target).collect()) == [("x", 2), ("y", 2)]
