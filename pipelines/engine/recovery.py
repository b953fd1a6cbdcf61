"""What a micro-batch attempt knows before it runs: the writes an earlier attempt committed, and its pins.

Structured Streaming runs a batch again after a crash between its writes and the checkpoint commit. Every write
of the engine carries a commit tag (``delta_tables.idempotent``) with the batch id and the batch's *pins* — the
snapshot versions it reads (rules, registry, bronze, state, cooldown memory) and the max event time before it.
A handler that continues its own run knows nothing was written for the next batch (``Attempt.first``); any
other call (a restarted job, or after a failure) reads the tags of the batch from the newest commits of each
engine table (``Attempt.recover``): the writes found are skipped, and the pins found are reused, so the batch
reads the same snapshots and computes exactly the same writes as the attempt that crashed.

Example::

    attempt = Attempt.recover(spark, paths, "engine-1f2e", 7)
    attempt.done("bronze")        # True if the crashed attempt's bronze append committed
    attempt.pins                  # the versions it read, or None if it wrote nothing
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from pyspark.sql import SparkSession

from delta_tables.idempotent import CommitTag, batch_commits
from pipelines.base.settings import Settings

BATCH_LOG_WRITE = "batch-log"


@dataclass(frozen=True)
class EnginePaths:
    """Where the engine's tables live under the lakehouse root."""

    rules: str
    rule_states: str
    bucket_state: str
    alert_cooldown: str
    bronze: str
    alerts: str
    quarantine: str
    batch_log: str

    @classmethod
    def of(cls, settings: Settings) -> EnginePaths:
        names = {
            "rules": "rules",
            "rule_states": "rule_states",
            "bucket_state": "bucket_state",
            "alert_cooldown": "alert_cooldown",
            "bronze": "bronze_transactions",
            "alerts": "alerts",
            "quarantine": "quarantine",
            "batch_log": "batch_log",
        }
        return cls(**{attr: settings.table_path(name) for attr, name in names.items()})

    def written(self) -> tuple[str, ...]:
        """The tables the engine writes (the rules table is the rules CDC job's)."""
        return (
            self.rule_states,
            self.bucket_state,
            self.alert_cooldown,
            self.bronze,
            self.alerts,
            self.quarantine,
            self.batch_log,
        )

    def every_batch(self) -> tuple[str, ...]:
        """The tables a micro-batch commits to (the alerts and the cooldown memory when it raises an alert), whose
        log checkpoints the engine writes after the batch (``delta_tables.log_checkpoints``)."""
        return (self.bronze, self.bucket_state, self.batch_log, self.alerts, self.alert_cooldown)


@dataclass(frozen=True)
class Pins:
    """The snapshot versions one micro-batch reads, and the high-water mark before it."""

    rules: int
    registry: int
    bronze: int
    m_before: int | None
    state: int | None = None  # set once state maintenance (if any) is done
    cooldown: int | None = None

    def as_map(self) -> dict[str, int | None]:
        return {
            "rules": self.rules,
            "registry": self.registry,
            "bronze": self.bronze,
            "mBefore": self.m_before,
            "state": self.state,
            "cooldown": self.cooldown,
        }

    @classmethod
    def of_map(cls, data: Mapping[str, int | None]) -> Pins:
        def value(key: str) -> int:
            found = data.get(key)
            if found is None:
                raise ValueError(f"commit tag pins lack {key!r}: {dict(data)}")
            return int(found)

        return cls(
            rules=value("rules"),
            registry=value("registry"),
            bronze=value("bronze"),
            m_before=data.get("mBefore"),
            state=data.get("state"),
            cooldown=data.get("cooldown"),
        )

    @property
    def ready(self) -> bool:
        """Whether the state and cooldown versions to evaluate against are pinned too."""
        return self.state is not None and self.cooldown is not None

    def evaluating(self, *, state: int, cooldown: int) -> Pins:
        return replace(self, state=state, cooldown=cooldown)


@dataclass(frozen=True)
class Attempt:
    """One attempt at one micro-batch: the writes already committed for it, and the pins they carried."""

    app_id: str
    batch_id: int
    committed: frozenset[str] = frozenset()
    pins: Pins | None = None
    tags_seen: tuple[CommitTag, ...] = field(default=(), repr=False)

    @classmethod
    def first(cls, app_id: str, batch_id: int) -> Attempt:
        """The attempt of a batch nobody has started (its handler completed the batch before)."""
        return cls(app_id, batch_id)

    @classmethod
    def recover(cls, spark: SparkSession, paths: EnginePaths, app_id: str, batch_id: int) -> Attempt:
        """Read the batch's commit tags from every engine table (a few small Spark jobs: restarts only)."""
        tags = tuple(tag for path in paths.written() for tag in batch_commits(spark, path, app_id, batch_id))
        # The most complete pins: writes after state maintenance carry the state and cooldown versions too.
        ready = [t for t in tags if Pins.of_map(t.pins).ready]
        chosen = (ready or list(tags))[:1]
        pins = Pins.of_map(chosen[0].pins) if chosen else None
        return cls(app_id, batch_id, frozenset(t.write for t in tags), pins, tags)

    @property
    def complete(self) -> bool:
        """The batch log row is the batch's last write: once it committed, the batch has nothing left to do."""
        return BATCH_LOG_WRITE in self.committed

    def done(self, write: str) -> bool:
        return write in self.committed

    def tag(self, write: str, pins: Pins) -> CommitTag:
        return CommitTag(self.app_id, self.batch_id, write, pins.as_map())
