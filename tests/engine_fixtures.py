"""Helpers for the engine tests: rules into the rules table, transactions as raw source frames, alerts out."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType

from delta_tables.idempotent import CommitTag
from delta_tables.rules_seed import put_rule_rows
from delta_tables.table_snapshot import table_version
from pipelines.base.settings import Settings
from pipelines.engine.parse_transactions import RAW_SCHEMA
from rules_cdc.rule_model import Rule, RuleState
from rules_cdc.rule_rows import rule_to_row, tombstone_row


def make_rule(rule_id: int, **fields: Any) -> Rule:
    """A rule: SUM of paymentAmount per payer over 10 minutes, GREATER 100, unless overridden (camelCase)."""
    base: dict[str, Any] = {
        "ruleId": rule_id,
        "groupingKeyNames": ["payerId"],
        "aggregateFieldName": "paymentAmount",
        "aggregatorFunctionType": "SUM",
        "limitOperatorType": "GREATER",
        "limit": 100,
        "windowMinutes": 10,
    }
    return Rule.model_validate(base | fields)


def put_rules(
    spark: SparkSession, settings: Settings, rules: Sequence[Rule], *, deleted: Sequence[int] = (), tick: int = 0
) -> int:
    """Write these rules (and tombstones for ``deleted`` ids) to the rules table; return the new version."""
    rows = [rule_to_row(r, source_position=f"test:{tick:08d}", source_op="u", source_ts_ms=None) for r in rules]
    rows += [
        tombstone_row(rule_id, source_position=f"test:{tick:08d}", source_op="d", source_ts_ms=None)
        for rule_id in deleted
    ]
    put_rule_rows(spark, settings.table_path("rules"), rows)
    return table_version(spark, settings.table_path("rules"))


def paused(rule: Rule) -> Rule:
    return rule.model_copy(update={"rule_state": RuleState.PAUSED})


def json_line(record: Mapping[str, Any]) -> str:
    """A transaction as a JSON line; Decimals are written as JSON numbers with their exact digits."""
    marked = {k: (f"@@{v}@@" if isinstance(v, Decimal) else v) for k, v in record.items()}
    text = json.dumps(marked, separators=(",", ":"))
    return text.replace('"@@', "").replace('@@"', "")


def raw_frame(spark: SparkSession, records: Sequence[Mapping[str, Any] | str], *, name: str = "batch") -> DataFrame:
    """A RAW_SCHEMA frame as the files source would give it (one line per record).

    Built in the JVM from one literal, the lines as a JSON array (exact for any text), exploded: not
    ``createDataFrame(rows)``, a Python RDD whose every scan starts Python workers to unpickle the rows.
    """
    lines = F.lit(json.dumps([r if isinstance(r, str) else json_line(r) for r in records]))
    constants = {"source": F.lit("files"), "sourceOffset": F.lit(f"file:/test/{name}.jsonl")}
    exploded = spark.range(1).select(F.explode(F.from_json(lines, ArrayType(StringType()))).alias("raw"))
    return exploded.select(
        *[
            (F.col("raw") if f.name == "raw" else constants.get(f.name, F.lit(None))).cast(f.dataType).alias(f.name)
            for f in RAW_SCHEMA.fields
        ]
    )


def alerts_by_id(spark: SparkSession, settings: Settings) -> dict[tuple[int, str], tuple[str, Decimal]]:
    """(ruleId, transactionId) -> (keyValue, aggregateValue) of the alerts table."""
    frame = spark.read.format("delta").load(settings.table_path("alerts"))
    rows = frame.select("ruleId", "transactionId", "keyValue", "aggregateValue").collect()
    return {(r["ruleId"], r["transactionId"]): (r["keyValue"], r["aggregateValue"]) for r in rows}


def tagged_writes(spark: SparkSession, path: str) -> list[tuple[int, str]]:
    """(batch id, write) of each tagged commit of a Delta table, oldest first: which of the engine's writes landed."""
    history = DeltaTable.forPath(spark, path).history().orderBy("version")
    tags = [CommitTag.parse(r["userMetadata"]) for r in history.collect()]
    return [(t.batch_id, t.write) for t in tags if t is not None]


def table_rows(spark: SparkSession, path: str, *, drop: Sequence[str] = ()) -> list[tuple[Any, ...]]:
    """Every row of a Delta table (minus volatile columns), sorted: to compare two tables by content."""
    frame = spark.read.format("delta").load(path)
    frame = frame.drop(*drop) if drop else frame
    rows = [tuple(r) for r in frame.select(*[F.col(c) for c in frame.columns]).collect()]
    return sorted(rows, key=lambda row: tuple((v is None, str(v)) for v in row))


TILE_LEVEL_SIZES = (1, 60, 1440)  # tile widths in buckets: bucket, hour, day (with 60-second buckets)
SIX = Decimal("0.000001")


def independent_tiles(
    records: Sequence[Mapping[str, Any]], rules: Sequence[Rule], *, bucket_seconds: int = 60
) -> set[tuple[Any, ...]]:
    """The bucket state the engine should hold for these transactions, computed in plain Python (not with the
    engine's code): per state of ``rules``, key and tile at each level its widest window can read, (sum, count,
    valueCount, min, max). A level's tiles are kept when that window is longer than one of them (docs/engine.md:
    a state of windows up to an hour keeps its buckets only)."""
    from reference_evaluator import filter_passes, key_of  # tests/ is on sys.path under pytest

    from pipelines.engine.keys import encode_key
    from rules_cdc.rule_model import COUNT_FIELD

    bucket_ms = bucket_seconds * 1000
    tiles: dict[tuple[Any, ...], list[Any]] = {}
    states = {rule.state_id: rule for rule in rules}
    widest = {sid: max(r.history_minutes for r in rules if r.state_id == sid) * 60 // bucket_seconds for sid in states}
    for state_id, rule in states.items():
        field = None if rule.aggregate_field_name == COUNT_FIELD else rule.aggregate_field_name
        for record in records:
            if not filter_passes(rule.filter, record):
                continue
            raw = record.get(field) if field else None
            value = None if raw is None else Decimal(str(raw))
            bucket = record["eventTime"] // bucket_ms
            for level, size in enumerate(TILE_LEVEL_SIZES):
                if level > 0 and widest[state_id] <= size:
                    break
                key = (state_id, encode_key(key_of(record, rule)), level, bucket // size * size * bucket_ms)
                agg = tiles.setdefault(key, [None, 0, 0, None, None])
                agg[1] += 1
                if value is not None:
                    agg[0] = value if agg[0] is None else agg[0] + value
                    agg[2] += 1
                    agg[3] = value if agg[3] is None else min(agg[3], value)
                    agg[4] = value if agg[4] is None else max(agg[4], value)
    return {(*key, _six(s), c, vc, _six(lo), _six(hi)) for key, (s, c, vc, lo, hi) in tiles.items()}


def _six(value: Decimal | None) -> Decimal | None:
    return None if value is None else value.quantize(SIX)


def folded_state(spark: SparkSession, settings: Settings) -> set[tuple[Any, ...]]:
    """The bucket state table folded per tile in Python (it is append-only: a tile may have a row per batch)."""
    rows = spark.read.format("delta").load(settings.table_path("bucket_state")).collect()
    tiles: dict[tuple[Any, ...], list[Any]] = {}
    for row in rows:
        key = (row["stateId"], row["keyValue"], row["level"], row["bucketStart"])
        agg = tiles.setdefault(key, [None, 0, 0, None, None])
        agg[0] = row["sum"] if agg[0] is None else agg[0] if row["sum"] is None else agg[0] + row["sum"]
        agg[1] += row["count"]
        agg[2] += row["valueCount"]
        agg[3] = row["min"] if agg[3] is None else agg[3] if row["min"] is None else min(agg[3], row["min"])
        agg[4] = row["max"] if agg[4] is None else agg[4] if row["max"] is None else max(agg[4], row["max"])
    return {(*key, *agg) for key, agg in tiles.items()}


SAMPLE_RULE_CATCHES = {
    "large_payment": {6},
    "velocity_burst": {2, 3},
    "structuring": {4},
    "fan_out": {5, 7},
    "amount_spike": {8},
}
"""Which sample rules (conf/sample_rules.json) are designed to catch which generator pattern (7: COUNT_DISTINCT,
8: a relative limit)."""
