"""Backfill: the tiles of new (or rebuilt) states, from bronze, as if their rules had always existed.

Bronze is read at the version pinned before this batch wrote to it, so exactly the transactions of earlier
batches are counted (late ones too: they count for others), from the earliest horizon of the states on
(``retention.horizon_ms``; at most ``backfill_retention_days``). The batch's own transactions are added by
the normal path afterwards, so a backfilled state ends the batch exactly like an old one.

Example::

    tiles = backfill_tiles(bronze_at_version, [state], bucket_ms=60_000, from_ms=horizon, distinct_cap=100)
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipelines.engine.buckets import tag_rows, tiles
from pipelines.engine.states import StateSpec


def backfill_tiles(
    bronze: DataFrame, states: Sequence[StateSpec], *, bucket_ms: int, from_ms: int, distinct_cap: int
) -> DataFrame:
    """TILE_COLUMNS for ``states`` from the bronze rows with ``eventTime >= from_ms``."""
    since = F.timestamp_millis(F.lit(from_ms))
    rows = bronze.where((F.col("eventDate") >= F.to_date(since)) & (F.col("eventTime") >= since)).withColumn(
        "eventTimeMs", F.unix_millis("eventTime")
    )
    tagged = tag_rows(rows, states, bucket_ms=bucket_ms, keep=("transactionId",))
    return tiles(tagged, bucket_ms=bucket_ms, distinct_cap=distinct_cap)
