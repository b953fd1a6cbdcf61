"""Applying CDC batches to real Delta tables: replays of a batch, and convergence of shuffled deliveries."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from rules_cdc_support import records, rule_event, stable, table_rows

from delta_tables.rules_merge import commit_tag, merge_rules, rules_frame
from pipelines.base.settings import Settings
from rules_cdc.apply_changes import apply_records, ensure_rules_tables, read_view
from rules_cdc.parse_events import parse_records
from rules_cdc.plan_changes import final_rows, plan_batch
from rules_cdc.rule_rows import TRUNCATE_MARKER_ID


def test_a_replayed_batch_changes_nothing_and_completes_a_half_written_one(
    spark: SparkSession, settings: Settings
) -> None:
    ensure_rules_tables(spark, settings)
    lines = [rule_event("c", 1, 1000, settings.transaction_schema), "not json"]
    first = apply_records(spark, settings, records(lines), txn=("app-a", 0))
    again = apply_records(spark, settings, records(lines), txn=("app-a", 0))
    assert (first.applied, first.quarantined, first.replayed) == (1, 1, False)
    assert (again.replayed, again.rules_version) == (True, first.rules_version)
    assert len(table_rows(spark, settings, "rule_changes")) == 1
    assert len(table_rows(spark, settings, "quarantine")) == 1

    # Batch 1 dies after its MERGE committed and before its change-log append; the replay completes it.
    lines = [rule_event("u", 1, 2000, settings.transaction_schema, ruleState="PAUSED")]
    rules_path = settings.table_path("rules")
    now = dt.datetime(2024, 11, 22, 8, 0)
    plan = plan_batch(
        parse_records(records(lines), settings.transaction_schema).events, read_view(spark, rules_path), now
    )
    commit = merge_rules(
        spark,
        rules_path,
        rules_frame(spark, list(plan.rows)),
        truncate_below=None,
        marker_id=TRUNCATE_MARKER_ID,
        commit_tag=commit_tag("app-a", 1),
        txn=("app-a", 1),
    )
    assert commit is not None and commit.metrics["numTargetRowsUpdated"] == 1
    version = commit.version
    replay = apply_records(spark, settings, records(lines), txn=("app-a", 1))
    assert (replay.replayed, replay.rules_version, replay.applied) == (True, version, 1)
    log = sorted(table_rows(spark, settings, "rule_changes"), key=lambda r: r["sourcePosition"])
    assert [(r["op"], r["resultingState"], r["rulesVersion"], r["batchId"]) for r in log] == [
        ("c", "ACTIVE", first.rules_version, 0),
        ("u", "PAUSED", version, 1),
    ]
    assert DeltaTable.forPath(spark, rules_path).history(1).first()["version"] == version


def test_the_real_merge_converges_for_shuffled_duplicated_deliveries(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    schema = settings.transaction_schema
    stream = [
        rule_event("c", 1, 100, schema),
        rule_event("c", 2, 110, schema, limit=5),
        rule_event("u", 1, 120, schema, ruleState="PAUSED"),
        rule_event("d", 2, 130, schema),
        rule_event("c", 3, 140, schema),
        rule_event("t", 0, 150, schema),
        rule_event("c", 2, 160, schema, limit=7),
        rule_event("u", 2, 170, schema, limit=8, disabled=True),
        rule_event("c", 4, 145, schema),  # older than the truncate: ends as a tombstone at 150
    ]
    expected = stable(list(final_rows(parse_records(records(stream), schema).events, dt.datetime(2024, 1, 1)).values()))
    assert {rid: r["ruleState"] for rid, r in expected.items()} == {
        1: "DELETED",
        2: "DISABLED",
        3: "DELETED",
        4: "DELETED",
        TRUNCATE_MARKER_ID: "DELETED",
    }
    for seed, batch_size in ((7, 7), (11, len(stream) + 4)):  # two batches; then everything in one
        lake = settings.with_lakehouse(str(tmp_path / f"lake-{seed}"))
        ensure_rules_tables(spark, lake)
        rng = random.Random(seed)
        delivered = stream + rng.sample(stream, 4)
        rng.shuffle(delivered)
        for start in range(0, len(delivered), batch_size):
            apply_records(spark, lake, records(delivered[start : start + batch_size]))
        assert stable(table_rows(spark, lake, "rules")) == expected, f"delivery seed {seed}"
