"""The suite does not inherit the caller's fraudlake environment, and runs Spark on a JDK 17."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import SUITE_KNOBS, _isolated_environment, _worker_spark_conf
from pyspark.sql import SparkSession

from pipelines.base.settings import Settings, load_settings


def test_no_fraudlake_variable_of_the_caller_reaches_a_test() -> None:
    leaked = sorted(name for name in os.environ if name.startswith("FRAUDLAKE_") and name not in SUITE_KNOBS)
    assert leaked == []
    assert 'JAVA_VERSION="17' in Path(os.environ["JAVA_HOME"], "release").read_text()


def test_the_isolation_removes_what_a_caller_sets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FRAUDLAKE_LAKEHOUSE", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("FRAUDLAKE_KAFKA_BOOTSTRAP", "prod-broker:9093")
    monkeypatch.setenv("FRAUDLAKE_FAULT", "state@0")
    monkeypatch.setenv("FRAUDLAKE_FUZZ_EXAMPLES", "7")  # a knob of the suite itself: kept
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))  # not a JDK 17
    assert load_settings().kafka.bootstrap_servers == "prod-broker:9093"  # what a leak would do
    changes = _isolated_environment()
    assert {k: v for k, v in changes.items() if v is None} == {
        "FRAUDLAKE_LAKEHOUSE": None,
        "FRAUDLAKE_KAFKA_BOOTSTRAP": None,
        "FRAUDLAKE_FAULT": None,
    }
    assert 'JAVA_VERSION="17' in Path(str(changes["JAVA_HOME"]), "release").read_text()
    assert os.environ["JAVA_HOME"] == str(tmp_path)  # computing the changes changes nothing


def test_only_the_workers_own_session_runs_interpreted(spark: SparkSession, base_settings: Settings) -> None:
    """The worker's session has the suite's confs; the settings that subprocesses and conf files get do not, so
    every Spark subprocess runs production's code generation."""
    conf = _worker_spark_conf()  # WORKER_SPARK_CONF, or what FRAUDLAKE_TEST_WORKER_SPARK_CONF puts in its place
    assert {key: spark.conf.get(key) for key in conf} == conf
    assert not set(conf) & set(base_settings.spark.extra_conf)
