"""Run labels of the benchmark results: ``rules=20 keys=10000 batch=2000`` parsed, window lengths named."""

from __future__ import annotations

from pipelines.bench.scenarios import DAY_MINUTES, Results


def window_label(minutes: int) -> str:
    if minutes % DAY_MINUTES == 0:
        days = minutes // DAY_MINUTES
        return f"{days} day" + ("s" if days > 1 else "")
    return f"{minutes // 60} h" if minutes % 60 == 0 else f"{minutes} min"


def parse_label(label: str) -> dict[str, int]:
    return {k: int(v) for k, v in (part.split("=") for part in label.split())}


def engine_label(results: Results, *, rules: int, batch: int) -> str | None:
    return next(
        (
            label
            for label in results.throughput
            if parse_label(label) == {"rules": rules, "keys": results.plan.base_keys, "batch": batch}
        ),
        None,
    )
