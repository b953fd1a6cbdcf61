"""Jobs and commands started together on a fresh lakehouse: every table created once, nobody dies of the race.

The engine (``init_lakehouse``) and the rules CDC job (``ensure_rules_tables``) both create the rules, rule_changes
and quarantine tables on start. Before ``create_table`` took a lost race, one of them died with
``ProtocolChangedException`` (DELTA_PROTOCOL_CHANGED) on nearly every fresh lakehouse (20 of 20 in threads).
Raced here in threads of one session, in two processes (the real CLI commands, each in its own JVM), and without
the local creation lock (the path storage other than a local disk takes: optimistic retries alone).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from delta_tables import table_spec
from delta_tables.catalog import all_tables, init_lakehouse
from delta_tables.rules import RULES
from delta_tables.table_spec import TableSpec, create_table, file_retention
from pipelines.base.settings import REPO_ROOT, Settings
from rules_cdc.apply_changes import ensure_rules_tables

ROUNDS = 4
"""Fresh lakehouses per thread test (each ~1-2 s on a quiet 2-core machine); the old code failed nearly every one."""

PROCESS_ROUNDS = 2
"""Fresh lakehouses for the two processes (two JVM starts, then a create race and a rules MERGE per lakehouse)."""

SAMPLE_CREATE = REPO_ROOT / "tests" / "data" / "debezium" / "pg_create_no_schema_precise.json"


def _together(*actions: Callable[[], object]) -> list[BaseException]:
    """Run the actions in threads released at once; the exceptions they raised."""
    start, errors = threading.Barrier(len(actions)), []

    def run(action: Callable[[], object]) -> None:
        start.wait()
        try:
            action()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(action,)) for action in actions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return errors


def _commits(table: str) -> dict[int, str]:
    """The table's commit files (version -> text), read straight from its ``_delta_log`` (milliseconds, where
    ``DeltaTable.history()`` is a Spark job per table)."""
    return {int(p.stem): p.read_text() for p in sorted((Path(table) / "_delta_log").glob("*.json"))}


def _created_once(table: str) -> bool:
    commits = _commits(table)
    creates = [v for v, text in commits.items() if '"operation":"CREATE TABLE"' in text]
    return creates == [0]


def _assert_created_once(settings: Settings) -> None:
    """Every table is there, made by one CREATE TABLE (version 0) and nothing after it."""
    for spec in all_tables(settings):
        table = settings.table_path(spec.name)
        assert _created_once(table) and list(_commits(table)) == [0], spec.name


def _race_jobs_init(spark: SparkSession, settings: Settings, rounds: int) -> list[str]:
    failures = []
    for n in range(rounds):
        lakehouse = settings.with_lakehouse(f"{settings.lakehouse_root}-{n}")
        errors = _together(
            lambda s=lakehouse: init_lakehouse(spark, s), lambda s=lakehouse: ensure_rules_tables(spark, s)
        )
        failures += [f"round {n}: {type(e).__name__}: {str(e).splitlines()[0][:200]}" for e in errors]
        if not errors:
            _assert_created_once(lakehouse)
    return failures


def test_the_engine_and_the_rules_job_start_together_on_fresh_lakehouses(
    spark: SparkSession, settings: Settings
) -> None:
    assert _race_jobs_init(spark, settings, ROUNDS) == []


def test_without_the_local_lock_a_lost_race_is_retried_and_the_winners_table_accepted(
    spark: SparkSession, settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # As on cloud storage (no file lock there): only the optimistic retries stand between the two writers.
    monkeypatch.setattr(table_spec, "local_folder", lambda path: None)
    caplog.set_level(logging.INFO, logger=table_spec.__name__)
    assert _race_jobs_init(spark, settings, ROUNDS) == []
    assert "another writer" in caplog.text  # the race did happen, and was taken


def test_two_processes_started_together_create_each_table_once(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    conf = tmp_path / "conf.yaml"
    smaller = settings.spark.model_copy(update={"driver_memory": "1g"})
    conf.write_text(yaml.safe_dump(settings.model_copy(update={"spark": smaller}).model_dump(mode="json")))
    records = tmp_path / "rules.jsonl"
    records.write_text(SAMPLE_CREATE.read_text().replace("\n", " ") + "\n")
    root = tmp_path / "race"
    root.mkdir()
    driver = str(REPO_ROOT / "tests" / "concurrent_start_driver.py")
    processes = {
        role: subprocess.Popen(
            [sys.executable, driver, role, str(conf), str(root), str(PROCESS_ROUNDS), str(records)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for role in ("init", "rules")
    }
    outputs = {}
    try:
        for role, process in processes.items():
            outputs[role], _ = process.communicate(timeout=400)
    finally:
        for process in processes.values():
            process.kill()
    results = {role: [line for line in out.splitlines() if line.startswith("RESULT ")] for role, out in outputs.items()}
    for role, lines in results.items():
        assert lines == [f"RESULT {n} ok" for n in range(PROCESS_ROUNDS)], f"{role}:\n{outputs[role][-3000:]}"
    for n in range(PROCESS_ROUNDS):
        lakehouse = settings.with_lakehouse(str(root / f"lakehouse-{n}"))
        for spec in all_tables(lakehouse):
            assert _created_once(lakehouse.table_path(spec.name)), spec.name
        rules = spark.read.format("delta").load(lakehouse.table_path(RULES.name))
        assert [r["ruleId"] for r in rules.collect()] == [2]  # the rules MERGE after the race landed


SMALL = StructType([StructField("id", LongType()), StructField("day", StringType())])


def test_a_table_that_is_not_the_wanted_one_is_refused_with_the_differences(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "t")
    create_table(spark, TableSpec("t", SMALL, "a table", partition_by=("day",)), path)
    other_types = StructType([StructField("id", StringType()), StructField("day", StringType())])
    with pytest.raises(table_spec.TableMismatchError, match="column id is bigint, not string"):
        create_table(spark, TableSpec("t", other_types, "a table", partition_by=("day",)), path)
    mismatches = table_spec.table_mismatches(
        spark, TableSpec("t", SMALL, "a table"), path, {**file_retention(24), "delta.autoOptimize.autoCompact": "true"}
    )
    assert mismatches == [
        "partitioned by ['day'], not []",
        "property delta.deletedFileRetentionDuration is None, not 'interval 24 hours'",
    ]


def test_a_table_half_way_through_its_first_commit_is_waited_for(spark: SparkSession, tmp_path: Path) -> None:
    """Another process made ``_delta_log`` and has not committed version 0 yet: Delta refuses the create
    (TABLE_OR_VIEW_ALREADY_EXISTS); the writer looks again until the table is there, then accepts it.

    The other process's commit lands from outside this JVM, in one step: its finished ``_delta_log`` (made beside)
    is renamed over the empty one, so there is no moment without a ``_delta_log`` for this writer to create the
    table in itself. It also shows the JVM's cached "no table here" is looked past (Delta's ``isDeltaTable``
    answers from a cache that only a read refreshes)."""
    path, beside = tmp_path / "t", tmp_path / "other"
    (path / "_delta_log").mkdir(parents=True)
    spec = TableSpec("t", SMALL, "a table")
    builder = DeltaTable.create(spark).location(str(beside)).addColumns(SMALL).comment("a table")
    for key, value in spec.all_properties().items():
        builder = builder.property(key, value)
    builder.execute()
    assert not DeltaTable.isDeltaTable(spark, str(path))  # this JVM has now cached "no table at path"

    def finish_the_other_writers_commit() -> None:
        (beside / "_delta_log").rename(path / "_delta_log")  # onto the empty folder: atomic on POSIX

    timer = threading.Timer(1.0, finish_the_other_writers_commit)
    timer.start()
    try:
        assert create_table(spark, spec, str(path)) is False  # the other writer's table, accepted
    finally:
        timer.join()
    assert _commits(str(path)).keys() == {0}
