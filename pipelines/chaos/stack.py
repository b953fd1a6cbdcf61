"""Set up a campaign's live path: its settings and conf file, the rules database's sample rules, the Debezium
connector, and (for ``fraudlake chaos``) a broker, a PostgreSQL cluster and a Connect worker of its own.

The campaign kills these daemons, so the command never uses the ones ``make cdc-start`` runs: its own are on free
ports under one folder, removed at the end (the lakehouse and the logs are kept for a look afterwards).

Example::

    with own_daemons(folder, base_settings) as (broker, db, worker):
        stack = live_stack(base_settings, folder, broker, db, worker)
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from pipelines.base.kafka_clients import ensure_topics
from pipelines.base.settings import REPO_ROOT, Settings, SparkSettings
from pipelines.chaos.parts import LiveStack
from pipelines.local.connect_worker import ConnectWorker
from pipelines.local.debezium_config import connector_config
from pipelines.local.kafka_broker import KafkaBroker, started_broker
from pipelines.local.ports import free_port
from pipelines.local.rules_database import RulesDb
from rules_cdc.rule_model import parse_rule

DATABASE = "fraudlake_chaos"
CONNECTOR = "chaos-rules"


def chaos_settings(base: Settings, folder: Path, bootstrap: str) -> Settings:
    """Topics of this campaign's own, the lakehouse under ``folder``, 1 s triggers, a small Spark per job."""
    suffix = uuid.uuid4().hex[:8]
    topics = base.kafka.topics.model_copy(
        update={
            "transactions": f"chaos-tx-{suffix}",
            "rules": f"chaos-rules-{suffix}",
            "alerts": f"chaos-alerts-{suffix}",
        }
    )
    kafka = base.kafka.model_copy(update={"bootstrap_servers": bootstrap, "topics": topics})
    engine = base.engine.model_copy(
        update={"trigger_interval_seconds": 1, "allowed_lateness_seconds": 3600, "alerts_to_kafka": False}
    )
    spark = SparkSettings(master="local[2]", shuffle_partitions=2, driver_memory="1g", ui_enabled=False)
    return base.with_lakehouse(str(folder / "lakehouse")).model_copy(
        update={"kafka": kafka, "engine": engine, "spark": spark, "work_dir": str(folder)}
    )


def write_conf(settings: Settings, folder: Path) -> Path:
    conf = folder / "chaos-conf.yaml"
    conf.write_text(yaml.safe_dump(settings.model_dump(mode="json")))
    return conf


def load_sample_rules(db: RulesDb, settings: Settings) -> int:
    """conf/sample_rules.json into fraud_rules (before the connector starts: Debezium snapshots them)."""
    samples = json.loads((REPO_ROOT / "conf" / "sample_rules.json").read_text())
    return db.upsert_rules(parse_rule(r, settings.transaction_schema) for r in samples)


def chaos_connector(settings: Settings, db: RulesDb) -> dict[str, Any]:
    """The conf file's Debezium connector for ``db``, to this campaign's rules topic, with a slot of its own."""
    return connector_config(
        settings,
        db_port=db.effective_port(),
        secrets=db.secrets,  # the cluster's own: the Debezium role's password, by reference
        overrides={
            "name": CONNECTOR,
            "slot.name": CONNECTOR.replace("-", "_"),
            "topic.prefix": CONNECTOR,
            "database.dbname": db.database,
        },
    )


def live_stack(base: Settings, folder: Path, broker: KafkaBroker, cluster: RulesDb, worker: ConnectWorker) -> LiveStack:
    """Settings, conf file, a fresh database with the sample rules and the connector running: the stack."""
    settings = chaos_settings(base, folder, broker.bootstrap)
    db = dataclasses.replace(cluster, database=DATABASE)
    db.start()  # the cluster runs: creates the database, applies the schema
    db.sql("DELETE FROM fraud_rules")
    load_sample_rules(db, settings)
    ensure_topics(settings, [settings.kafka.topics.rules, settings.kafka.topics.transactions])
    connector = chaos_connector(settings, db)
    worker.add_connector(connector)
    return LiveStack(broker, db, worker, connector, settings, write_conf(settings, folder), folder / "logs")


def remove_connector(stack: LiveStack) -> None:
    """Take the connector off the worker (if it runs) and drop its replication slot."""
    name = str(stack.connector["name"])
    if stack.worker.answers() and name in (stack.worker.rest("GET", "/connectors") or []):
        stack.worker.remove_connector(name)
    stack.db.drop_slot(str(stack.connector["config"]["slot.name"]))


@contextmanager
def own_daemons(folder: Path) -> Iterator[tuple[KafkaBroker, RulesDb, ConnectWorker]]:
    """A broker, a PostgreSQL cluster and a Connect worker of the campaign's own, on free ports; stopped after."""
    db_folder = Path(tempfile.mkdtemp(prefix="fraudlake-chaos-db-"))  # reachable by the postgres user under root
    db_folder.chmod(0o755)
    db = RulesDb(data_dir=db_folder / "db", port=free_port())
    with started_broker(folder / "kafka") as broker:
        worker = ConnectWorker(data_dir=folder / "connect", bootstrap=broker.bootstrap, rest_port=free_port())
        try:
            db.start()
            worker.start()
            yield broker, db, worker
        finally:
            worker.stop()
            db.stop()
            shutil.rmtree(db_folder, ignore_errors=True)
