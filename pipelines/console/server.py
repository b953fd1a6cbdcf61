"""Serving the console: one uvicorn server in this process, in the foreground (the CLI) or a thread (tests).

Example::

    server = ConsoleServer(app, host="127.0.0.1", port=0)
    server.start_in_thread()            # server.url -> 'http://127.0.0.1:41234'
    server.stop()
"""

from __future__ import annotations

import threading
import time

import uvicorn
from fastapi import FastAPI

from pipelines.local.ports import free_port

APP_PORT_ENV = "DATABRICKS_APP_PORT"
"""The port a Databricks App must listen on (set by the Apps runtime)."""


class ConsoleServer:
    """A uvicorn server for the console app; ``port=0`` picks a free one."""

    def __init__(self, app: FastAPI, *, host: str = "127.0.0.1", port: int = 8050) -> None:
        self.host = host
        self.port = port or free_port(host)
        config = uvicorn.Config(
            app, host=host, port=self.port, log_level="warning", access_log=False, timeout_graceful_shutdown=5
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def run(self) -> None:
        """Serve in the foreground until interrupted (Ctrl-C, SIGTERM)."""
        self._server.run()

    def start_in_thread(self, wait_s: float = 30.0) -> None:
        self._thread = threading.Thread(target=self._server.run, name="fraudlake-console", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + wait_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the console did not start on {self.url}")
            time.sleep(0.05)

    def stop(self, wait_s: float = 10.0) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(wait_s)
