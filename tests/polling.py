"""Waiting in tests for something another process or a streaming query does: poll a probe until a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

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
