"""Blocking calls off the event loop: each backend on a bounded pool of its own threads, each call with a deadline.

The console's routes are ``async``; every call that can wait on something outside the process (a Delta read, a
rules-database transaction, a Kafka publish, a Spark job) runs in a ``BlockingPool`` instead, so that a blocked
call delays only its own request: the event loop keeps answering every other page.

A pool bounds three things:

* **threads** (``workers``): how many calls of that backend run at once;
* **admission** (``workers + queue``): calls running, waiting for a thread, or given up on but still running. A
  full pool refuses at once (``PoolBusy``, 503) rather than letting requests pile up behind a hung backend;
* **time** (``timeout_s``): past it the request gets ``PoolTimeout`` (504) and the loop moves on. A Python thread
  cannot be killed: a call already running keeps its admission slot until it returns (so a backend that hangs
  for good fills its pool and further requests get 503 at once, never a growing heap of threads); a call still
  waiting for a thread is cancelled and never runs.

Reads and writes get separate pools: saves blocked on a row lock cannot starve the pages, and the other way round.

Example::

    lake = BlockingPool("the lakehouse", name="lake", workers=4, queue=16, timeout_s=30)
    rows = await lake.run(recent_alerts, reader, query, limit=200)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class PoolBusy(RuntimeError):
    """The backend's pool is full (calls running or hung); the request was not started."""

    def __init__(self, backend: str, admitted: int) -> None:
        super().__init__(
            f"{backend} is busy: {admitted} call(s) still running or waiting; nothing was started, try again shortly"
        )
        self.backend = backend


class PoolTimeout(TimeoutError):
    """The backend did not answer within the pool's deadline."""

    def __init__(self, backend: str, seconds: float, *, may_complete: bool) -> None:
        tail = (
            "; the change may still be made when it answers: check the rule's page before trying again"
            if may_complete
            else ""
        )
        super().__init__(f"{backend} did not answer within {seconds:g} s{tail}")
        self.backend = backend


class BlockingPool:
    """Runs blocking calls of one backend on its own threads, with admission and time bounds (module docs)."""

    def __init__(
        self, backend: str, *, name: str, workers: int, queue: int, timeout_s: float, writes: bool = False
    ) -> None:
        if workers < 1 or queue < 0 or timeout_s <= 0:
            raise ValueError("a pool needs workers >= 1, queue >= 0 and a positive timeout")
        self.backend = backend
        self.timeout_s = timeout_s
        self.capacity = workers + queue
        self._writes = writes
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"console-{name}")
        self._admitted = 0
        self._lock = threading.Lock()

    @property
    def admitted(self) -> int:
        """Calls running, waiting for a thread, or given up on but not yet returned."""
        with self._lock:
            return self._admitted

    async def run(self, call: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``call(*args, **kwargs)`` on a thread of this pool; ``PoolBusy`` when full, ``PoolTimeout`` when late."""
        with self._lock:
            if self._admitted >= self.capacity:
                raise PoolBusy(self.backend, self._admitted)
            self._admitted += 1
        try:
            future: Future[T] = self._executor.submit(call, *args, **kwargs)
        except BaseException:
            self._release()
            raise
        future.add_done_callback(self._release)
        try:
            # shield: a timeout must not cancel the thread's future through the wrapper (a running call cannot be
            # stopped anyway); a call that has not started is cancelled below.
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), self.timeout_s)
        except TimeoutError:
            started = not future.cancel()
            raise PoolTimeout(self.backend, self.timeout_s, may_complete=self._writes and started) from None

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _release(self, _: Any = None) -> None:
        with self._lock:
            self._admitted -= 1
