"""The engine's pure pieces on small frames: keys, parsing, tiles, lookback probes, in-bucket order, cooldown."""

from __future__ import annotations

import json
import random
from decimal import Decimal

from engine_fixtures import raw_frame
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipelines.base.settings import Settings
from pipelines.engine.buckets import LEVEL_FANOUT, LEVEL_SIZES, TOP_LEVEL, tiles, top_level
from pipelines.engine.cooldown import apply_cooldown
from pipelines.engine.evaluate import running_in_bucket
from pipelines.engine.keys import encode_key, key_column
from pipelines.engine.lookback import probes, range_aggregates, tile_coordinates
from pipelines.engine.parse_transactions import flag_duplicates, parse_raw


def test_key_encoding_is_the_same_in_spark_and_python(spark: SparkSession) -> None:
    rows = [(1, "CSH", True), (None, 'q"uo\\te/é', False), (-7, None, None)]
    frame = spark.createDataFrame(rows, "a long, b string, c boolean")
    keys = frame.select(key_column(["a", "b", "c"]).alias("k"), key_column([]).alias("g"), key_column(["b"]).alias("s"))
    got = [(r["k"], r["g"], r["s"]) for r in keys.collect()]
    assert got == [(encode_key(list(row)), "[]", encode_key([row[1]])) for row in rows]
    assert encode_key([1001, 2002]) == "[1001,2002]" and encode_key([None, "x"]) == '[null,"x"]'
    assert json.loads(got[1][0]) == [None, 'q"uo\\te/é', False]
    types = {f.name: f.dataType for f in frame.schema.fields}  # the typed (cast) path writes the same text
    typed = frame.select(key_column(["a", "b", "c"], types).alias("k"), key_column(["b"], types).alias("s"))
    assert [(r["k"], r["s"]) for r in typed.collect()] == [(k, s) for k, _, s in got]


def test_parse_types_fields_keeps_extras_and_gives_reasons(spark: SparkSession, settings: Settings) -> None:
    records = [
        '{"transactionId": "a", "eventTime": 1700000000123, "paymentAmount": 12.5, "payerId": 7, "x": {"y": [1]}}',
        '{"transactionId": "b", "eventTime": "1700000000123", "paymentAmount": "12.50", "payerId": "7"}',
        '{"transactionId": "c", "eventTime": "2023-11-14T22:13:20.123Z", "paymentAmount": 1, "channel": null}',
        '{"transactionId": "d", "eventTime": "2023-11-14T23:13:20.123+01:00", "paymentAmount": 1}',
        "not json",
        "[1, 2]",
        '{"eventTime": 1, "paymentAmount": 1}',
        '{"transactionId": "e", "eventTime": 1}',
        '{"transactionId": "f", "eventTime": "yesterday", "paymentAmount": 1}',
        '{"transactionId": "g", "eventTime": 1, "paymentAmount": 1, "payerId": "seven"}',
        '{"transactionId": "a", "eventTime": 1700000000999, "paymentAmount": 1}',
    ]
    parsed = flag_duplicates(parse_raw(raw_frame(spark, records), settings.transaction_schema))
    rows = {r["raw"]: r for r in parsed.collect()}
    good = [rows[records[i]] for i in range(4)]
    assert [r["reason"] for r in good] == [None] * 4
    assert {r["eventTimeMs"] for r in good} == {1_700_000_000_123}
    assert good[0]["paymentAmount"] == good[1]["paymentAmount"] == Decimal("12.50")
    assert good[0]["payerId"] == good[1]["payerId"] == 7
    assert json.loads(good[0]["extraFields"]) == {"x": {"y": [1]}} and good[1]["extraFields"] is None
    reasons = [rows[r]["reason"] for r in records[4:]]
    assert reasons == [
        "unparseable: not a JSON object",
        "unparseable: not a JSON object",
        "missing required field transactionId",
        "missing required field paymentAmount",
        "field eventTime is not a timestamp",
        "field payerId is not a long",
        "duplicate transactionId in this batch",
    ]


def _covered(probe: dict[str, int]) -> set[int]:
    """The buckets (level-0 indexes) a probe's matching tiles cover."""
    level, size = probe["level"], LEVEL_SIZES[probe["level"]]
    buckets: set[int] = set()
    for tile in range(probe["lo"], probe["hi"] + 1):
        parent = tile // LEVEL_FANOUT[level] if level < TOP_LEVEL else 0
        if parent == probe["parent"]:
            buckets.update(range(tile * size, (tile + 1) * size))
    return buckets


def test_probes_cover_each_lookback_bucket_exactly_once_with_a_bounded_count(spark: SparkSession) -> None:
    rng = random.Random(3)
    reaches = [0, 1, 59, 60, 61, 62, 1439, 1440, 1441, 1561, 1562, 10_080, 43_200]
    reaches += [rng.randrange(43_200) for _ in range(30)]
    points = [(b, r) for r in reaches for b in (rng.randrange(-5000, 5000), 28_333_333 + rng.randrange(2880))]
    frame = spark.createDataFrame(
        [("s", "[]", b, r) for b, r in points], "stateId string, keyValue string, bucket long, reach long"
    )
    found: dict[tuple[int, int], list[dict[str, int]]] = {}
    for row in probes(frame).collect():
        found.setdefault((row["bucket"], row["reach"]), []).append(row.asDict())
    for bucket, reach in points:
        items = found.get((bucket, reach), [])
        assert len(items) <= 2 * len(LEVEL_FANOUT) + 2
        shared = [p for p in items if not p["priorOnly"]]
        covered = [_covered(p) for p in shared]
        assert sum(len(c) for c in covered) == len(set().union(*covered)) == reach  # disjoint, complete
        assert set().union(*covered) == set(range(bucket - reach, bucket))
        assert [(_covered(p), p["level"]) for p in items if p["priorOnly"]] == [({bucket}, 0)]
        # a state keeps tiles up to top_level of its widest reach: no probe reads a coarser one
        assert max(p["level"] for p in items) <= top_level(reach), (bucket, reach)
        # tiles touched: at most 60 + 60 buckets, 24 + 24 hours, and the days strictly inside
        touched = sum(p["hi"] - p["lo"] + 1 if p["level"] == TOP_LEVEL else 0 for p in shared)
        assert touched <= reach // LEVEL_SIZES[TOP_LEVEL] + 1
    # an hour's window (60 one-minute buckets) keeps its buckets only; longer ones add hours, then days
    assert [top_level(r) for r in (0, 60, 61, 1440, 1441, 10_080)] == [0, 0, 1, 1, 2, 2]


def test_a_week_costs_about_what_an_hour_does(spark: SparkSession) -> None:
    """Dense state (a tile at every bucket, hour and day for 8 days): the rows joined per lookback stay bounded."""
    bucket_ms, days = 60_000, 8
    prior = spark.range(days * 1440).select(
        F.lit("s").alias("stateId"),
        F.lit("[]").alias("keyValue"),
        F.col("id").alias("bucket"),
        F.lit(Decimal(1)).cast("decimal(38,6)").alias("value"),
    )
    prior_tiles = tiles(prior, bucket_ms=bucket_ms)
    last = days * 1440 - 1
    points = spark.createDataFrame(
        [("s", "[]", last, 60), ("s", "[]", last, 10_080)], "stateId string, keyValue string, bucket long, reach long"
    )
    ranges = {
        r["reach"]: r
        for r in range_aggregates(points, prior_tiles, prior_tiles.limit(0), bucket_ms=bucket_ms).collect()
    }
    assert ranges[60]["rCount"] == 61 and ranges[10_080]["rCount"] == 10_081  # [b - reach, b], all of it prior
    coords = tile_coordinates(prior_tiles, bucket_ms=bucket_ms, prior=True)
    matched = (
        probes(points)
        .join(coords, ["stateId", "keyValue", "level", "parent"])
        .where(F.col("tile").between(F.col("lo"), F.col("hi")))
        .groupBy("reach")
        .agg(F.count(F.lit(1)).alias("n"))
    )
    rows = {r["reach"]: r["n"] for r in matched.collect()}
    assert rows[60] <= 61 + 1 and rows[10_080] <= 2 * 60 + 2 * 24 + 7 + 1  # not 10_081


def test_running_aggregates_follow_event_time_then_transaction_id(spark: SparkSession) -> None:
    rows = [
        ("s", "[]", 5, 1000, "b", Decimal(2)),
        ("s", "[]", 5, 1000, "a", Decimal(1)),
        ("s", "[]", 5, 999, "c", None),
    ]
    frame = spark.createDataFrame(
        rows,
        "stateId string, keyValue string, bucket long, eventTimeMs long, transactionId string, value decimal(38,6)",
    )
    got = {
        r["transactionId"]: (r["cCount"], r["cValueCount"], r["cSum"], r["cMax"])
        for r in running_in_bucket(frame).collect()
    }
    assert got == {"c": (1, 0, None, None), "a": (2, 1, Decimal(1), Decimal(1)), "b": (3, 2, Decimal(3), Decimal(2))}


def test_cooldown_suppresses_within_the_window_of_the_last_emitted_alert(spark: SparkSession) -> None:
    minute = 60_000
    candidates = spark.createDataFrame(
        [(1, "[1]", f"t{i}", t, 5 * minute) for i, t in enumerate([0, 4 * minute, 5 * minute, 9 * minute, 12 * minute])]
        + [(2, "[1]", "free", 0, 0)],
        "ruleId long, keyValue string, transactionId string, eventTimeMs long, cooldownMs long",
    )
    memory = spark.createDataFrame([], "ruleId long, keyValue string, lastAlertTimeMs long")
    emitted = sorted(r["transactionId"] for r in apply_cooldown(candidates, memory).collect())
    assert emitted == ["free", "t0", "t2", "t4"]  # t1 within 5 min of t0; t3 within 5 min of t2 (t1 did not count)
    remembered = spark.createDataFrame([(1, "[1]", 7 * minute)], "ruleId long, keyValue string, lastAlertTimeMs long")
    emitted = sorted(r["transactionId"] for r in apply_cooldown(candidates, remembered).collect())
    assert emitted == ["free", "t4"]  # earlier batches' alert at 7 min suppresses everything before 12 min but t4
