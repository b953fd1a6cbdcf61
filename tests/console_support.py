"""Helpers of the console tests: Debian's Chromium driven by Playwright, a console served from a thread, screenshots.

No browser is downloaded: Playwright launches the executable of the Debian package ``chromium`` (scripts/
ensure_chromium.sh installs it), headless, with a fresh profile and the flags a closed network needs. Screenshots go
to the test's folder; with ``WRITE_CONSOLE_SCREENSHOTS=1`` they are also copied to docs/console/ (as
``WRITE_DEBEZIUM_SAMPLES=1`` rewrites the Debezium samples), so a normal run leaves the work tree alone.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.console.app import create_app
from pipelines.console.context import ConsoleContext
from pipelines.console.rule_writes import RuleWriter
from pipelines.console.server import ConsoleServer

CHROMIUM_ENV = "FRAUDLAKE_CHROMIUM"
SCREENSHOTS = REPO_ROOT / "docs" / "console"
WRITE_SCREENSHOTS_ENV = "WRITE_CONSOLE_SCREENSHOTS"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_executable() -> str:
    """Debian's chromium; a missing browser fails the test (a set-up error, never a skip)."""
    for candidate in (os.environ.get(CHROMIUM_ENV), shutil.which("chromium"), "/usr/bin/chromium"):
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail("Chromium not found: run `make setup` (scripts/ensure_chromium.sh installs Debian's chromium)")


@contextmanager
def running_console(
    settings: Settings,
    *,
    writer: RuleWriter,
    spark: Callable[[], SparkSession],
    stale_after: dt.timedelta = dt.timedelta(minutes=5),
    **options: float,
) -> Iterator[tuple[ConsoleServer, ConsoleContext]]:
    """A console on a free port of 127.0.0.1, served from a thread of this process, stopped after; ``options``
    are ``ConsoleContext.build``'s timeouts (``read_timeout_s``, ``write_timeout_s``)."""
    console = ConsoleContext.build(
        settings, writer=writer, spark=spark, stale_after=stale_after, poll_seconds=1.0, **options
    )
    server = ConsoleServer(create_app(console), host="127.0.0.1", port=0)
    server.start_in_thread()
    try:
        yield server, console
    finally:
        server.stop()
        console.shutdown()


class Screenshots:
    """Full-page PNGs of the console, named by page."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.taken: list[Path] = []

    def take(self, page: object, name: str) -> Path:
        path = self.folder / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
        assert path.stat().st_size > 5_000, f"screenshot {name} is nearly empty"
        self.taken.append(path)
        if os.environ.get(WRITE_SCREENSHOTS_ENV) == "1":
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, SCREENSHOTS / path.name)
        return path
