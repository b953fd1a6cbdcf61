"""Column expressions built once per JVM, not once per micro-batch.

A PySpark ``Column`` is a handle on a JVM expression: every ``F.col``, ``F.lit``, ``alias`` or ``+`` that builds one
is a py4j round trip, and every handle Python lets go of is one more (py4j's delete). The engine's hot path builds
the same expressions in every micro-batch (the parse of the transaction schema, the tagging of the states, the
lookback probes, the tiles' aggregates): the same rules, the same settings, the same text. ``per_jvm`` keeps what a
builder returned for the same arguments, so a batch with the same rules builds none of it again (py4j's
``send_command`` counted over alert-raising 2,000-row batches: 5,698 round trips a batch before, 2,077 of them
deletes; 3,829 after, docs/engine.md).

A builder must be pure: its result depends on its (hashable) arguments only, and refers to columns by name
(``F.col``), never to a DataFrame's own column (``frame["x"]``). The cache follows the process's JVM gateway (a
new gateway starts empty) and holds at most ``MAX_ENTRIES`` results per builder, the oldest dropped first.

Example::

    @per_jvm
    def level_tiles(bucket_ms: int) -> tuple[Column, ...]:
        return tuple(floor_div(F.col("bucket"), size).alias(f"tile{level}") for level, size in enumerate(LEVEL_SIZES))
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable
from typing import Any, ParamSpec, TypeVar

from pyspark import SparkContext
from pyspark.sql import Column

P = ParamSpec("P")
T = TypeVar("T")
Projection = tuple[Column | str, ...]
"""What a builder returns for a ``select``: columns and column names."""
MAX_ENTRIES = 16
"""Results kept per builder: rule sets and settings in use at once in one process (tests run many)."""


def per_jvm(builder: Callable[P, T]) -> Callable[P, T]:
    """``builder``, its results kept per (JVM gateway, arguments); unhashable arguments build anew every time."""
    cache: dict[Hashable, T] = {}
    owner: list[Any] = [None]
    lock = threading.Lock()

    @functools.wraps(builder)
    def memoized(*args: P.args, **kwargs: P.kwargs) -> T:
        gateway = SparkContext._gateway
        if gateway is None:  # no JVM yet: nothing to keep
            return builder(*args, **kwargs)
        key = (args, tuple(sorted(kwargs.items())))
        with lock:
            if gateway is not owner[0]:
                cache.clear()
                owner[0] = gateway
            try:
                found = cache.get(key)
            except TypeError:  # an unhashable argument
                return builder(*args, **kwargs)
        if found is not None:
            return found
        built = builder(*args, **kwargs)
        with lock:
            if owner[0] is gateway:
                while len(cache) >= MAX_ENTRIES:
                    cache.pop(next(iter(cache)))
                cache[key] = built
        return built

    return memoized
