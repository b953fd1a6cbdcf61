"""Waiting in tests for something another process or a streaming query does: poll a probe until a deadline."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")
WAIT_SECONDS = 180.0
"""Per wait. Seconds on an idle machine; generous for a shared 2-core box running other suites."""


def wait_for(what: str, probe: Callable[[], T | None], *, seconds: float = WAIT_SECONDS, every: float = 0.5) -> T:
    """Poll ``probe`` every ``every`` seconds until it returns something truthy (returned); fail with ``what``
    after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {seconds:.0f} s waiting for {what}")
        time.sleep(every)


def newest_version(table: str | Path) -> int:
    """The newest commit of a local Delta table (-1 before its first): a listing of its log, no Spark job. A commit
    file appears whole (Delta writes it aside and renames it), so a version listed here can be read."""
    try:
        names = os.listdir(Path(table) / "_delta_log")
    except FileNotFoundError:
        return -1
    return max((int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()), default=-1)


class RowsAtNewest:
    """A table's rows at its newest version, read again only when a commit has landed since the last read: a wait
    that polls a table another job writes costs a directory listing per poll, not a Spark query (whose CPU the
    job under test would share)."""

    def __init__(self, read: Callable[[str, int], list[dict[str, Any]]]) -> None:
        self._read = read  # (table path, version) -> rows at that version
        self._seen: dict[str, tuple[int, list[dict[str, Any]]]] = {}

    def __call__(self, table: str) -> list[dict[str, Any]]:
        version = newest_version(table)
        if version < 0:
            return []
        seen = self._seen.get(table)
        if seen is None or seen[0] != version:
            seen = (version, self._read(table, version))
            self._seen[table] = seen
        return seen[1]
