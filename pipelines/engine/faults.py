"""Fault injection for the crash-recovery tests: die with SIGKILL right after a chosen write of a chosen batch.

Set ``FRAUDLAKE_FAULT=<point>@<batchId>`` (e.g. ``state@1``) in the environment of a ``fraudlake run``; the
engine calls ``crash_point(point, batch_id)`` after each of its writes. Unset (always, in production) it does
nothing. The points: ``maintenance`` (after state maintenance, when the rules needed some), ``pinned`` (every read
pinned, nothing written yet), ``quarantine``, ``bronze``, ``state``, ``alerts``, ``cooldown`` (these five run in
parallel threads: when one fires, the others may or may not have committed), ``retention`` and ``logged`` (after
the batch log, before the checkpoint commit).
"""

from __future__ import annotations

import os
import signal
import sys

FAULT_ENV = "FRAUDLAKE_FAULT"


def crash_point(point: str, batch_id: int) -> None:
    """SIGKILL this process if ``$FRAUDLAKE_FAULT`` names this point and batch (no cleanup, like a real crash)."""
    wanted = os.environ.get(FAULT_ENV)
    if wanted and wanted == f"{point}@{batch_id}":
        print(f"fault injection: SIGKILL after '{point}' of batch {batch_id}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
