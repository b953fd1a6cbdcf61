"""An exclusive ``fcntl.flock`` on a lock file, waited for with a bound: one holder at a time across processes.

Used where two commands may do the same thing at once on one machine: two ``fraudlake connect start`` (one JVM
must come of it, not two), two jobs creating one Delta table on a local lakehouse. The kernel drops the lock when
its holder exits, however it exits: a killed holder never leaves a stale lock behind (the file stays; it is only
a name to lock). Each ``with`` opens the file anew, so two threads of one process exclude each other as well.

Example::

    with exclusive_lock(folder / "worker.lock", wait_s=300, what="Kafka Connect start/stop"):
        ...   # no other process is inside a block on this file
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class LockTimeout(TimeoutError):
    """Another process held the lock for longer than the wait allowed."""


@contextmanager
def exclusive_lock(lock_file: Path, *, wait_s: float, what: str, every_s: float = 0.05) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_file`` (created if missing, folders too) for the block; wait up to
    ``wait_s`` for it, then raise ``LockTimeout`` naming ``what`` and the file."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(
                        f"{what}: another process has held {lock_file} for over {wait_s:.0f} s; try again later"
                    ) from None
                time.sleep(every_s)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
