"""An edit's way to the engine: committed (rules database or topic) -> applied to the Delta rules table (its version)
-> the first micro-batch that evaluated with it; or refused by the lake, with the reason.

Each step is read from the lakehouse, never assumed: the change log (``rule_changes``) holds the first event of the
rule at or after the edit's position floor, and the version its MERGE committed; ``batch_log`` the first engine
micro-batch whose pinned rules version is at least that. A quarantined event of the rule past the floor is a
refusal (``rejected_changes``).

Example::

    edits = EditLog()
    record = edits.add(committed)
    progress = edit_progress(reader, record)        # progress.applied_version, progress.first_batch, ...
"""

from __future__ import annotations

import datetime as dt
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass

from pipelines.console.health_data import Batch, batch_series
from pipelines.console.lake_reader import LakeReader
from pipelines.console.rule_writes import Committed
from pipelines.console.rules_data import rule_history
from rules_cdc.apply_changes import QUARANTINE_SOURCE
from rules_cdc.rejected_changes import rejection_of

MAX_KEPT = 200


@dataclass(frozen=True)
class EditRecord:
    id: str
    committed: Committed


@dataclass(frozen=True)
class Progress:
    record: EditRecord
    applied_version: int | None = None
    applied_at: dt.datetime | None = None
    applied_op: str | None = None
    resulting_state: str | None = None
    refused: str | None = None
    first_batch: Batch | None = None

    @property
    def applied_after(self) -> str:
        """How long after the commit the rules table had the change (``3.1 s``), or ``-``."""
        return _seconds_after(self.record.committed.committed_at, self.applied_at)

    @property
    def used_after(self) -> str:
        """How long after the commit the first micro-batch using it finished, or ``-``."""
        return _seconds_after(
            self.record.committed.committed_at, self.first_batch.finished_at if self.first_batch else None
        )

    @property
    def done(self) -> bool:
        return self.refused is not None or self.first_batch is not None

    def as_json(self) -> dict[str, object]:
        batch = self.first_batch
        return {
            "id": self.record.id,
            "committed": {
                "at": self.record.committed.committed_at.isoformat(),
                "detail": self.record.committed.detail,
                "mode": self.record.committed.mode,
            },
            "applied": None
            if self.applied_version is None
            else {
                "version": self.applied_version,
                "at": self.applied_at.isoformat() if self.applied_at else None,
                "op": self.applied_op,
                "state": self.resulting_state,
                "after": self.applied_after,
            },
            "refused": self.refused,
            "firstBatch": None
            if batch is None
            else {
                "batchId": batch.batch_id,
                "job": batch.job,
                "finishedAt": batch.finished_at.isoformat(),
                "rulesVersion": batch.rules_version,
                "after": self.used_after,
            },
            "done": self.done,
        }


def _seconds_after(start: dt.datetime, end: dt.datetime | None) -> str:
    if end is None:
        return "-"
    aware = end if end.tzinfo else end.replace(tzinfo=dt.UTC)
    return f"{max((aware - start).total_seconds(), 0.0):.1f} s"


class EditLog:
    """The edits made through this console process (newest last), by id."""

    def __init__(self) -> None:
        self._records: OrderedDict[str, EditRecord] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, committed: Committed) -> EditRecord:
        record = EditRecord(secrets.token_hex(6), committed)
        with self._lock:
            self._records[record.id] = record
            while len(self._records) > MAX_KEPT:
                self._records.popitem(last=False)
        return record

    def get(self, edit_id: str) -> EditRecord | None:
        with self._lock:
            return self._records.get(edit_id)

    def recent(self, limit: int = 10) -> list[EditRecord]:
        with self._lock:
            return list(reversed(self._records.values()))[:limit]


def _same_kind_at_or_after(position: str, floor: str) -> bool:
    return position.split(":", 1)[0] == floor.split(":", 1)[0] and position >= floor


def edit_progress(reader: LakeReader, record: EditRecord) -> Progress:
    committed = record.committed
    changes = [
        c
        for c in rule_history(reader, committed.rule_id)
        if _same_kind_at_or_after(str(c["sourcePosition"]), committed.floor)
    ]
    if not changes:
        return Progress(record, refused=_refusal(reader, record))
    first = changes[0]
    version = first["rulesVersion"]
    progress = Progress(
        record,
        applied_version=None if version is None else int(version),
        applied_at=first["appliedAt"],
        applied_op=first["op"],
        resulting_state=first["resultingState"],
    )
    if progress.applied_version is None:
        return progress
    for batch in batch_series(reader, last=100_000):
        if batch.rules_version is not None and batch.rules_version >= progress.applied_version:
            return Progress(**{**progress.__dict__, "first_batch": batch})
    return progress


def _refusal(reader: LakeReader, record: EditRecord) -> str | None:
    if not reader.exists("quarantine"):
        return None
    rows = reader.rows(
        "quarantine",
        columns=["rawPayload", "reason", "sourceOffset", "quarantinedAt"],
        where=[
            ("source", "=", QUARANTINE_SOURCE),
            ("quarantinedAt", ">=", record.committed.committed_at - dt.timedelta(minutes=5)),
        ],
    )
    for row in rows:
        rejection = rejection_of(row["rawPayload"], row["reason"], row["sourceOffset"], row["quarantinedAt"])
        if rejection.rule_id == record.committed.rule_id and rejection.position is not None:
            if _same_kind_at_or_after(rejection.position, record.committed.floor):
                return rejection.reason
    return None
