"""A process for tests/test_concurrent_start.py: one of two commands started together, on fresh lakehouses in turn.

Run as ``python tests/concurrent_start_driver.py ROLE CONF ROOT COUNT RECORDS``. ROLE ``init`` runs ``fraudlake
init`` (the engine's ``init_lakehouse``), ROLE ``rules`` runs ``fraudlake rules apply RECORDS`` (the rules job's
``ensure_rules_tables``, then a rules MERGE), through the CLI's own ``main``, on ``ROOT/lakehouse-<n>`` for n < COUNT.
Its JVM is started first (a command's ``get_spark`` then finds it): the processes meet at a file barrier before each
lakehouse (``ROOT/ready-<n>-<role>``), so the two commands start within milliseconds of each other, COUNT times for
the price of two JVM starts. One line per lakehouse: ``RESULT <n> ok`` or ``RESULT <n> failed <error>``.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

from pipelines.base.settings import load_settings
from pipelines.base.spark_session import get_spark
from pipelines.cli import main as fraudlake

ROLES = ("init", "rules")
BARRIER_WAIT_S = 120.0


def barrier(root: Path, n: int, role: str) -> None:
    """Say this process is ready for lakehouse ``n`` and wait until the other one is."""
    (root / f"ready-{n}-{role}").touch()
    other = root / f"ready-{n}-{next(r for r in ROLES if r != role)}"
    deadline = time.monotonic() + BARRIER_WAIT_S
    while not other.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the other process never got ready for lakehouse {n}")
        time.sleep(0.002)


def main(role: str, conf: str, root: Path, count: int, records: str) -> None:
    get_spark(load_settings(conf), app_name=f"fraudlake-{role}")  # the JVM up before the first race
    for n in range(count):
        lakehouse = str(root / f"lakehouse-{n}")
        command = ["init"] if role == "init" else ["rules", "apply", records]
        barrier(root, n, role)
        try:
            code = fraudlake([*command, "--conf", conf, "--lakehouse", lakehouse])
            outcome = "ok" if code == 0 else f"failed exit code {code}"
        except Exception as error:
            traceback.print_exc()
            outcome = f"failed {type(error).__name__}: {str(error).splitlines()[0][:300]}"
        print(f"RESULT {n} {outcome}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
