"""Cheap probes of progress, read without Spark: Delta commits, topic end offsets, a streaming checkpoint's reach.

A campaign polls these every fraction of a second while a part is down, so they must not start a JVM: a Delta
table's newest version is the highest ``_delta_log/NNN.json``; a query's committed offsets are the last
``offsets/N`` file that has a ``commits/N`` beside it.

Example::

    delta_version("/lake/batch_log")                      # 41, or -1 before the table exists
    committed_offsets("/lake/_checkpoints/engine-kafka", "tx")   # {0: 120, 1: 98, 2: 101}
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition

from pipelines.base.kafka_clients import python_client_config
from pipelines.base.settings import Settings


def delta_version(table_path: str) -> int:
    """The newest committed version of a local Delta table (-1 when it has none yet)."""
    log = Path(table_path) / "_delta_log"
    versions = [int(p.stem) for p in log.glob("*.json") if p.stem.isdigit()] if log.is_dir() else []
    return max(versions, default=-1)


def end_offsets(settings: Settings, topic: str) -> dict[int, int] | None:
    """The topic's end offset per partition; None when the broker does not answer (it is down)."""
    try:
        consumer = KafkaConsumer(
            **python_client_config(settings),
            request_timeout_ms=5000,
            session_timeout_ms=3000,
            heartbeat_interval_ms=1000,
        )
    except Exception:
        return None
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
        return {tp.partition: int(offset) for tp, offset in consumer.end_offsets(assigned).items()} if assigned else {}
    except Exception:
        return None
    finally:
        consumer.close()


def committed_offsets(checkpoint: str, topic: str) -> dict[int, int]:
    """The Kafka offsets a streaming query has committed up to (its newest batch with a commit file)."""
    root = Path(checkpoint)
    commits = [int(p.name) for p in (root / "commits").glob("[0-9]*") if p.name.isdigit()]
    if not commits:
        return {}
    lines = (root / "offsets" / str(max(commits))).read_text().splitlines()
    for line in lines[2:]:
        offsets = json.loads(line)
        if topic in offsets:
            return {int(p): int(o) for p, o in offsets[topic].items()}
    return {}


def caught_up(reached: dict[int, int], ends: dict[int, int] | None) -> bool:
    """Whether a query has committed every record up to the topic's ends (partitions without records aside)."""
    if ends is None:
        return False
    return all(reached.get(p, 0) >= end for p, end in ends.items() if end > 0)


def topic_positions(settings: Settings, topic: str) -> list[tuple[int, int]]:
    """(partition, offset) of every record the topic holds, read from the beginning (the broker's acceptances)."""
    consumer = KafkaConsumer(**python_client_config(settings), enable_auto_commit=False, consumer_timeout_ms=2000)
    try:
        assigned = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or set())]
        if not assigned:
            return []
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        ends = consumer.end_offsets(assigned)
        found: list[tuple[int, int]] = []
        deadline = time.monotonic() + 120
        while any(consumer.position(tp) < ends[tp] for tp in assigned) and time.monotonic() < deadline:
            batches = consumer.poll(timeout_ms=1000, max_records=5000)
            if not batches and all(consumer.position(tp) >= ends[tp] for tp in assigned):
                break
            found += [(m.partition, m.offset) for batch in batches.values() for m in batch]
        return found
    finally:
        consumer.close()
