"""The fault campaign's short form (``fraudlake chaos`` at CI size): the whole live path under load, each part
killed once (seeded plan: SIGKILL or SIGTERM) and restarted, SQL edits and bad input mid-run, then the checks.

Real parts only: the session's broker, PostgreSQL cluster (a database of the campaign's own) and Connect worker
(which the campaign kills and restarts in place, same ports and data, so later tests find them running), the rules
CDC job and the engine as ``fraudlake`` subprocesses, the generator in a thread. The end checks use the session's
Spark. ``make chaos`` runs the long form.

Example::

    make test PYTEST_ARGS="tests/test_chaos.py -q -s"
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from reliability_support import record_outcome

from pipelines.base.settings import Settings
from pipelines.chaos.campaign import CampaignReport, run_campaign
from pipelines.chaos.parts import LiveStack
from pipelines.chaos.plan import PARTS, ChaosConfig
from pipelines.chaos.report import as_markdown, write_report
from pipelines.chaos.stack import live_stack, remove_connector
from pipelines.local.connect_worker import ConnectWorker
from pipelines.local.kafka_broker import KafkaBroker
from pipelines.local.rules_database import RulesDb

pytestmark = [pytest.mark.slow, pytest.mark.subprocess, pytest.mark.kafka]
SHORT = ChaosConfig(seconds=45, rate=5, seed=20261125, faults_per_part=1, warmup_seconds=2)


@pytest.fixture(scope="module")
def stack(
    kafka_broker: KafkaBroker,
    rulesdb: RulesDb,
    connect_worker: ConnectWorker,
    base_settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LiveStack]:
    live = live_stack(base_settings, tmp_path_factory.mktemp("chaos"), kafka_broker, rulesdb, connect_worker)
    try:
        yield live
    finally:
        live.stop_jobs()
        remove_connector(live)


def test_the_live_path_rides_out_a_fault_of_every_part(stack: LiveStack, spark: SparkSession, tmp_path: Path) -> None:
    report: CampaignReport = run_campaign(stack, SHORT, spark=lambda: spark)
    write_report(report, tmp_path)
    print(as_markdown(report))
    assert json.loads((tmp_path / "chaos-report.json").read_text())["passed"] == report.passed

    assert sorted(f.part for f in report.faults) == sorted(PARTS)
    assert all(f.recovery_s is not None for f in report.faults), report.faults
    assert report.drained
    assert report.acked > 0  # failures at the producer during the broker's outage are counted, not asserted
    tx = report.transactions
    assert tx is not None and tx.lost == 0 and tx.doubled == 0, tx
    assert report.rules is not None and report.rules.equal, report.rules
    assert report.alerts is not None and report.alerts.equal, report.alerts
    assert report.alerts.expected > 0  # the injected fraud alerted: the comparison is not vacuous
    fates = {(b.topic, b.name): b for b in report.bad_inputs}
    for (topic, name), fate in fates.items():
        assert fate.where in ("quarantined", "refused by the producer"), (topic, name, fate)
        assert fate.reason, (topic, name)
    assert len(report.edits) >= 6
    record_outcome(
        "chaos campaign (short form): a fault of each part under load, SQL edits and bad input",
        "fault",
        records_in=tx.on_topic,
        applied=tx.in_bronze,
        quarantined=tx.quarantined,
        lost=tx.lost,
        duplicated=tx.doubled,
        outcome=", ".join(f"{f.part} {f.signal} {f.recovery_s} s" for f in report.faults)
        + f"; alerts {report.alerts.alerts} = reference; rules table = database",
        seconds=report.seconds,
    )
