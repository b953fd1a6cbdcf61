"""Measure a lookback's cost against its window: ``python -m pipelines.bench.lookback_cost [--keys N]``.

Builds a dense prior state (every bucket of 8 days for ``keys`` keys, with its hour and day tiles), then evaluates
the same batch of query points with a 1-hour and a 7-day window, by the tile probes the engine uses and, for
comparison, by a naive range join over the buckets. Prints rows joined and seconds for each (docs/engine.md).
"""

from __future__ import annotations

import argparse
import time
from decimal import Decimal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.engine.buckets import tiles
from pipelines.engine.lookback import probes, range_aggregates, tile_coordinates

BUCKET_MS = 60_000
DAYS = 8


def dense_state(spark: SparkSession, keys: int) -> DataFrame:
    buckets = spark.range(DAYS * 1440).withColumnRenamed("id", "bucket")
    rows = spark.range(keys).withColumnRenamed("id", "k").crossJoin(buckets)
    tagged = rows.select(
        F.lit("s").alias("stateId"),
        F.concat(F.lit("["), F.col("k").cast("string"), F.lit("]")).alias("keyValue"),
        "bucket",
        F.lit(Decimal(1)).cast("decimal(38,6)").alias("value"),
    )
    return tiles(tagged, bucket_ms=BUCKET_MS)


def points_frame(spark: SparkSession, keys: int, per_key: int, reach: int) -> DataFrame:
    last = DAYS * 1440 - 1
    return (
        spark.range(keys)
        .crossJoin(spark.range(per_key).withColumnRenamed("id", "j"))
        .select(
            F.lit("s").alias("stateId"),
            F.concat(F.lit("["), F.col("id").cast("string"), F.lit("]")).alias("keyValue"),
            (F.lit(last) - F.col("j")).alias("bucket"),
            F.lit(reach).cast("long").alias("reach"),
        )
    )


def measure(spark: SparkSession, keys: int, per_key: int) -> list[str]:
    state = dense_state(spark, keys).persist()
    state.count()
    lines = [f"dense state: {keys} keys x {DAYS} days, {state.count()} tiles; {keys * per_key} lookbacks per run"]
    empty = state.limit(0)
    coords = tile_coordinates(state, bucket_ms=BUCKET_MS, prior=True).persist()
    level0 = state.where("level = 0").select(
        "stateId", "keyValue", (F.col("bucketStart") / BUCKET_MS).alias("b"), "count", "min", "max"
    )
    range_aggregates(points_frame(spark, keys, 1, 60), state, empty, bucket_ms=BUCKET_MS).count()  # warm-up
    for label, reach in (("1 hour", 60), ("7 days", 7 * 1440)):
        points = points_frame(spark, keys, per_key, reach)
        matched = probes(points).join(coords, ["stateId", "keyValue", "level", "parent"])
        joined = matched.where(F.col("tile").between(F.col("lo"), F.col("hi"))).count()
        start = time.monotonic()
        range_aggregates(points, state, empty, bucket_ms=BUCKET_MS).agg(F.sum("rCount")).collect()
        tiled = time.monotonic() - start
        start = time.monotonic()
        naive = points.join(level0, ["stateId", "keyValue"]).where(
            F.col("b").between(F.col("bucket") - F.col("reach"), F.col("bucket"))
        )
        per_point = naive.groupBy("keyValue", "bucket", "reach").agg(
            F.sum("count").alias("n"), F.min("min").alias("lo"), F.max("max").alias("hi")
        )
        total = per_point.agg(F.sum("n")).first()
        naive_rows = total[0] if total else 0
        naive_seconds = time.monotonic() - start
        lines.append(
            f"{label:>7}: tiles {joined:>9} rows joined, {tiled:5.1f} s | bucket range join {naive_rows:>9} rows,"
            f" {naive_seconds:5.1f} s"
        )
    state.unpersist()
    coords.unpersist()
    return lines


def main() -> None:
    from pipelines.base.settings import load_settings
    from pipelines.base.spark_session import get_spark

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--per-key", type=int, default=50)
    args = parser.parse_args()
    spark = get_spark(load_settings(), app_name="fraudlake-bench-lookback")
    for line in measure(spark, args.keys, args.per_key):
        print(line)


if __name__ == "__main__":
    main()
