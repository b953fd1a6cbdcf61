"""Helpers of the real-Debezium tests: a database of their own, connectors from the conf file, topic reads."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, TopicPartition

from pipelines.base.kafka_clients import ensure_topics
from pipelines.base.settings import Settings
from pipelines.local.connect_worker import ConnectWorker
from pipelines.local.debezium_config import connector_config
from pipelines.local.rules_database import RulesDb


def own_database(rulesdb: RulesDb, name: str) -> RulesDb:
    """The session cluster's database ``name`` with the schema applied: changes made there reach only the
    connectors that read it (a slot and a publication belong to one database)."""
    db = dataclasses.replace(rulesdb, database=name)
    db.start()  # the cluster runs: creates the database and applies the schema files
    return db


def connector(
    settings: Settings, db: RulesDb, *, name: str, topic: str, overrides: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The connector of conf/connect/rules-postgres.properties for ``db``, writing to ``topic``, with its own
    name, slot and topic prefix (so that several can share one worker and one cluster). It logs in as
    ``fraudlake_debezium``, its password a reference to ``db``'s secret file."""
    ident = name.replace("-", "_")
    topics = settings.kafka.topics.model_copy(update={"rules": topic})
    local = settings.model_copy(update={"kafka": settings.kafka.model_copy(update={"topics": topics})})
    return connector_config(
        local,
        db_port=db.effective_port(),
        secrets=db.secrets,  # the cluster's own: its Debezium password, by reference
        overrides={
            "name": name,
            "slot.name": ident,
            "topic.prefix": name,
            "database.dbname": db.database,
            **(overrides or {}),
        },
    )


def cdc_settings(base: Settings, folder: Path, *, bootstrap: str, rules_topic: str) -> Settings:
    """The real path's settings: a lakehouse in ``folder``, the broker at ``bootstrap`` with a rules topic of the
    test's own (``rules_topic`` + a random suffix), 1 s engine triggers, nothing late."""
    topics = base.kafka.topics.model_copy(update={"rules": f"{rules_topic}-{uuid.uuid4().hex[:8]}"})
    return base.with_lakehouse(str(folder / "lakehouse")).model_copy(
        update={
            "kafka": base.kafka.model_copy(update={"bootstrap_servers": bootstrap, "topics": topics}),
            "engine": base.engine.model_copy(update={"trigger_interval_seconds": 1, "allowed_lateness_seconds": 3600}),
        }
    )


@contextmanager
def running_connector(worker: ConnectWorker, settings: Settings, db: RulesDb, *, name: str) -> Iterator[dict[str, Any]]:
    """The conf file's connector (``connector``) from ``db`` to the rules topic of ``settings`` (created first), added
    to ``worker``; on leaving the block it is removed (if the worker still runs) and its replication slot dropped."""
    topic = settings.kafka.topics.rules
    ensure_topics(settings, [topic])
    config = connector(settings, db, name=name, topic=topic)
    worker.add_connector(config)
    try:
        yield config
    finally:
        if worker.answers():
            worker.remove_connector(str(config["name"]))
        db.drop_slot(str(config["config"]["slot.name"]))


def topic_records(bootstrap: str, topic: str) -> list[tuple[int, int, str | None, str | None]]:
    """Every record of ``topic``: (partition, offset, key, value), by partition then offset."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=1000)
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
        if not assigned:
            return []
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        ends = consumer.end_offsets(assigned)
        records: list[tuple[int, int, str | None, str | None]] = []
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp] for tp in assigned) and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                for m in batch:
                    key = m.key.decode() if m.key is not None else None
                    value = m.value.decode() if m.value is not None else None
                    records.append((m.partition, m.offset, key, value))
        return sorted(records)
    finally:
        consumer.close()


def record_count(bootstrap: str, topic: str) -> int:
    """How many records ``topic`` holds (end minus beginning offsets over its partitions)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        assigned = [TopicPartition(topic, p) for p in partitions]
        if not assigned:
            return 0
        ends, starts = consumer.end_offsets(assigned), consumer.beginning_offsets(assigned)
        return sum(ends[tp] - starts[tp] for tp in assigned)
    finally:
        consumer.close()


def sql_literal(value: Any) -> str:
    """A JSON-able value as a PostgreSQL literal (strings quoted, lists as text[], dicts as jsonb)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list):
        return "ARRAY[" + ",".join(sql_literal(v) for v in value) + "]::text[]" if value else "'{}'::text[]"
    if isinstance(value, dict):
        return sql_literal(json.dumps(value)) + "::jsonb"
    return "'" + str(value).replace("'", "''") + "'"
