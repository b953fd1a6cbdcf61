"""Measured outcomes of the reliability tests (faults, fuzzing, hostile input), for docs/reliability.md.

Each reliability test calls ``record_outcome`` with what went in and where it ended up. When the environment
variable ``FRAUDLAKE_RELIABILITY_REPORT`` names a file (``make reliability`` sets it), one JSON line per outcome
is appended to it; ``scripts/reliability_report.py`` renders those lines into the table of docs/reliability.md.
Unset (a plain ``make test``), nothing is written. Appending (not a session fixture) lets any test module
record without a shared conftest, and keeps outcomes of separate pytest runs in one file.

Example::

    record_outcome("engine SIGKILL after state@1", "fault", records_in=400, applied=398, quarantined=2)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence

from pipelines.base.settings import REPO_ROOT

REPORT_ENV = "FRAUDLAKE_RELIABILITY_REPORT"


def record_outcome(
    scenario: str,
    kind: str,
    *,
    records_in: int,
    applied: int,
    quarantined: int,
    lost: int = 0,
    duplicated: int = 0,
    outcome: str = "",
    seconds: float | None = None,
) -> None:
    """Append one measured outcome to ``$FRAUDLAKE_RELIABILITY_REPORT`` (no-op when unset); check it adds up."""
    assert records_in == applied + quarantined + lost, (scenario, records_in, applied, quarantined, lost)
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    row = {
        "scenario": scenario,
        "kind": kind,
        "in": records_in,
        "applied": applied,
        "quarantined": quarantined,
        "lost": lost,
        "duplicated": duplicated,
        "outcome": outcome,
        "seconds": None if seconds is None else round(seconds, 1),
        "recordedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


def run_in_own_group(command: Sequence[str], env: Mapping[str, str], *, timeout: float = 600) -> tuple[int, str]:
    """Run ``command`` from the repository root in a process group of its own (a fault test SIGKILLs it);
    return its exit code and output once it and the rest of its group (its Spark JVM) are gone."""
    process = subprocess.Popen(
        list(command),
        cwd=REPO_ROOT,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    finally:
        _reap_group(process.pid)
    return process.returncode, output


def _reap_group(pgid: int) -> None:
    """Wait for the rest of the subprocess's own group to exit; kill it after 60 s."""
    deadline = time.monotonic() + 60
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        if time.monotonic() > deadline:
            os.killpg(pgid, signal.SIGKILL)
        time.sleep(0.5)
