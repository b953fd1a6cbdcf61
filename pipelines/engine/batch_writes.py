"""A micro-batch's appends: each at most once per batch, tagged, on a small thread pool beside the evaluation.

Every append of a batch follows one pattern: skip it if an earlier attempt of the batch committed it (its commit
tag is in the table: ``recovery.Attempt``), else run it in the background with its commit tag, then pass the
crash point named after it (``faults.crash_point``; the handler hands its own in, which tests replace). Leaving the
block waits for every append, so no write outlives its batch attempt.

Example::

    with BatchWrites(attempt, pins, after=crash_point) as writes:
        writes.append("bronze", lambda tag: append_tagged(bronze, paths.bronze, tag))
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from delta_tables.idempotent import CommitTag
from pipelines.engine.recovery import Attempt, Pins


class BatchWrites:
    """A batch's appends, each written at most once per batch and run on a small thread pool beside the evaluation.

    ``append(write, commit)``: unless an earlier attempt of the batch committed ``write``, ``commit`` runs in the
    background with the write's commit tag, then ``after(write, batch_id)`` (the crash points of the tests).
    Leaving the block waits for every write and raises the first error.
    """

    def __init__(self, attempt: Attempt, pins: Pins, *, after: Callable[[str, int], None]) -> None:
        self._attempt, self._pins, self._after = attempt, pins, after
        self._pool = ThreadPoolExecutor(max_workers=5, thread_name_prefix="fraudlake-write")
        self._futures: list[Future[None]] = []

    def append(self, write: str, commit: Callable[[CommitTag], None]) -> None:
        if self._attempt.done(write):
            return
        tag, batch_id = self._attempt.tag(write, self._pins), self._attempt.batch_id

        def run() -> None:
            commit(tag)
            self._after(write, batch_id)

        self._futures.append(self._pool.submit(run))

    def __enter__(self) -> BatchWrites:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            for future in self._futures:
                future.result()  # waits even when the block failed: no write may outlive its batch attempt
        finally:
            self._pool.shutdown(wait=True)
