"""Run labels of the benchmark results: ``rules=20 keys=10000 batch=2000`` parsed, window lengths named."""

from __future__ import annotations

from pipelines.bench.scenarios import DAY_MINUTES, Results


def _window_label(minutes: int) -> str:
    if minutes % DAY_MINUTES == 0:
        days = minutes // DAY_MINUTES
        return f"{days} day" + ("s" if days > 1 else "")
    return f"{minutes // 60} h" if minutes % 60 == 0 else f"{minutes} min"


def _parse(label: str) -> dict[str, int]:
    return {k: int(v) for k, v in (part.split("=") for part in label.split())}


def _engine_label(results: Results, *, rules: int, batch: int) -> str | None:
    return next(
        (
            label
            for label in results.throughput
            if _parse(label) == {"rules": rules, "keys": results.plan.base_keys, "batch": batch}
        ),
        None,
    )
