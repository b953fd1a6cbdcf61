"""The engine on a Spark standalone cluster: a master and two workers, each its own JVM, one core each.

``fraudlake cluster start`` brings the cluster up from pyspark's own ``spark-class`` and writes settings pointing
``spark.master`` at it; a driver process (tests/cluster_driver.py) runs a random contract scenario through the
engine with those settings: its executors live in the workers' JVMs, so the Delta and Kafka jars must reach them
(``spark.jars``, served by the driver) and every table is written by executors. The alerts must equal the
reference evaluator's, both executors must have run tasks, and ``cluster stop`` must leave no daemon behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from contract_scenarios import scenario, scenario_reference
from engine_fixtures import alerts_by_id
from pyspark.sql import SparkSession
from rules_cdc_support import write_conf

from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.cli import main
from pipelines.engine.keys import encode_key
from pipelines.local.ports import free_port

pytestmark = pytest.mark.cluster
SEED, BATCHES = 20261126, 3  # 60 s buckets, retention every batch, rules deleted, disabled and re-created


def test_the_contract_scenario_on_a_standalone_cluster(
    spark: SparkSession, settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    base = settings.model_copy(update={"work_dir": str(tmp_path / "work")})
    conf = write_conf(base, tmp_path)
    ports = ["--port", str(free_port()), "--ui-port", str(free_port())]
    cli = ["--conf", str(conf), "--lakehouse", settings.lakehouse_root, *ports]
    cluster_dir = tmp_path / "work" / "cluster"
    try:
        assert main(["cluster", "start", *cli]) == 0
        out = capsys.readouterr().out
        assert "2/2 workers alive" in out, out
        result = tmp_path / "result.json"
        driver = [sys.executable, str(REPO_ROOT / "tests" / "cluster_driver.py"), str(cluster_dir / "conf.yaml")]
        driver += [settings.lakehouse_root, str(SEED), str(BATCHES), str(result)]
        # The driver's JVM gets the suite's options (tests/conftest.py: C1 only), the executors SHORT_LIVED_JVM.
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        run = subprocess.run(driver, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    finally:
        assert main(["cluster", "stop", *cli]) == 0
        stopped = capsys.readouterr().out
    wall = time.monotonic() - started
    assert stopped.startswith("cluster: stopped worker-2, worker-1, master"), stopped
    assert not list(cluster_dir.glob("*.pid"))

    report = json.loads(result.read_text())
    assert report["master"] == f"spark://127.0.0.1:{ports[1]}" and report["executors"] == 2, report
    # Each worker launched an executor for the driver's application, and each executor ran tasks.
    for worker in ("worker-1", "worker-2"):
        logs = list((cluster_dir / worker).glob("app-*/*/stderr"))
        assert logs and any("Running task" in log.read_text(errors="replace") for log in logs), worker

    case = scenario(SEED, batches=BATCHES, rows_per_batch=30)
    for counts, batch in zip(report["counts"], case.batches, strict=True):
        assert counts["rows"] == len(batch.transactions) + len(batch.invalid)
        assert counts["quarantined"] == len(batch.invalid)
    expected = {(a.rule_id, a.transaction_id): (encode_key(a.key), a.aggregate_value) for a in scenario_reference(case)}
    assert expected and alerts_by_id(spark, settings) == expected
    print(
        f"cluster test: {wall:.0f} s from cluster start to stop ({len(expected)} alerts); driver: "
        f"{report['seconds'][0]} s to executors ready, batches (tables, rules, batch) {report['seconds'][1:]} s"
    )
