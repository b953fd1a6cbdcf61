"""Which Delta errors mean "another writer committed first: look at the table again", and a bounded back-off.

Delta commits optimistically: a writer that loses a race fails with one of ``io.delta.exceptions``'
``ConcurrentModificationException`` family. From PySpark they arrive as ``delta.exceptions`` classes
(``ProtocolChangedException``, ``MetadataChangedException``, ``ConcurrentAppendException``, ...; Delta's
conversion leaves their ``getCondition()`` None, the condition is only in the message: ``[DELTA_PROTOCOL_CHANGED]
...``). Two writers creating one table on an empty directory also meet plain ``AnalysisException`` s while the
winner is half-way through its first commit (``_delta_log`` made, version 0 not yet there):
``TABLE_OR_VIEW_ALREADY_EXISTS`` and ``DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION``; and two writers adding one
column: ``FIELD_ALREADY_EXISTS``. Each is worth another look, after a pause, never an immediate failure.

Example::

    conflict_condition(error)            # 'DELTA_PROTOCOL_CHANGED', or None for an error a retry cannot cure
    for pause in Backoff().pauses():     # 0.05 s, 0.1 s, ... capped at 2 s, jittered; 12 in all
        ...
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass

from delta.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    ConcurrentWriteException,
    DeltaConcurrentModificationException,
    MetadataChangedException,
    ProtocolChangedException,
)

DELTA_CONFLICTS: tuple[type[Exception], ...] = (
    # Not subclasses of one another in Python (each derives from PySparkException): all eight are listed.
    DeltaConcurrentModificationException,
    ConcurrentWriteException,
    MetadataChangedException,
    ProtocolChangedException,
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    ConcurrentDeleteDeleteException,
    ConcurrentTransactionException,
)

RACE_CONDITIONS = frozenset(
    {
        "DELTA_PROTOCOL_CHANGED",
        "DELTA_METADATA_CHANGED",
        "DELTA_CONCURRENT_APPEND",
        "DELTA_CONCURRENT_WRITE",
        "DELTA_CONCURRENT_TRANSACTION",
        "DELTA_CONCURRENT_DELETE_READ",
        "DELTA_CONCURRENT_DELETE_DELETE",
        # A table being created by another writer right now (its _delta_log is there, version 0 not yet):
        "TABLE_OR_VIEW_ALREADY_EXISTS",
        "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION",
        # Another writer added the column we were adding.
        "FIELD_ALREADY_EXISTS",
    }
)
"""Error conditions (the part before any ``.``: ``DELTA_CONCURRENT_APPEND.WITHOUT_HINT``) a new attempt may cure."""

_LEADING_CONDITION = re.compile(r"\s*\[([A-Z0-9_]+)(?:\.[A-Z0-9_]+)*\]")


def error_condition(error: BaseException) -> str | None:
    """The error's condition (``DELTA_PROTOCOL_CHANGED``): ``getCondition()``, else the ``[...]`` its message
    starts with (Delta's converted exceptions carry it only there); the sub-condition after ``.`` dropped."""
    get = getattr(error, "getCondition", None)
    condition = get() if callable(get) else None
    if not condition:
        match = _LEADING_CONDITION.match(str(error))
        condition = match.group(1) if match else None
    return str(condition).split(".", 1)[0] if condition else None


def conflict_condition(error: BaseException) -> str | None:
    """The condition of ``error`` if it means another writer changed the table first (a new look may succeed),
    else None. Any of Delta's concurrent-modification exceptions counts, whatever its message."""
    condition = error_condition(error)
    if isinstance(error, DELTA_CONFLICTS):
        return condition or type(error).__name__
    return condition if condition in RACE_CONDITIONS else None


@dataclass(frozen=True)
class Backoff:
    """Pauses between attempts: ``first_s`` doubling up to ``max_s``, each jittered down to half (two writers that
    collided once do not collide again in step), ``attempts`` in all (the defaults wait ~13 s at most)."""

    first_s: float = 0.05
    max_s: float = 2.0
    attempts: int = 12

    def pauses(self) -> Iterator[float]:
        """One pause before each new attempt (``attempts - 1`` of them)."""
        for n in range(self.attempts - 1):
            yield min(self.max_s, self.first_s * 2**n) * random.uniform(0.5, 1.0)
