"""The report's rule-kinds section: 20 rules with 5 COUNT_DISTINCT and 5 relative beside today's 20, same backlog."""

from __future__ import annotations

import statistics

from pipelines.bench.engine_runs import BacklogResult
from pipelines.bench.report import Report, Table, fmt, fmt_bytes
from pipelines.bench.scenarios import KIND_SETS, Results

KINDS_TARGET = 1.5
"""The mixed set's median ``foreachBatch`` may be at most this many times today's."""


def _median_foreach(runs: list[BacklogResult]) -> float:
    return statistics.median(r.median_foreach_seconds for r in runs)


def _median_evaluate(runs: list[BacklogResult]) -> float:
    return statistics.median(r.steps.get("evaluate", float("nan")) for r in runs)


def kinds_ratio(results: Results) -> tuple[float, float, float] | None:
    """(mixed / today, mixed seconds, today seconds): the median over each set's runs of their median
    ``foreachBatch`` (the batches after each run's first); None unless both sets ran."""
    today, mixed = (results.kinds.get(name) for name in KIND_SETS)
    if not today or not mixed:
        return None
    a, b = _median_foreach(today), _median_foreach(mixed)
    return (b / a if a else float("nan")), b, a


def add_kinds(report: Report, results: Results) -> None:
    if not results.kinds:
        return
    plan = results.plan
    section = report.section("Rule kinds: COUNT_DISTINCT and relative limits")
    section.text.append(
        f"The same backlog ({plan.batches} batches of {plan.batch_rows:,} rows over {plan.base_keys:,} payers, the"
        " first batch of each run a warm-up) under two sets of 20 rules per payer over 60 minutes: **today** = SUM,"
        " COUNT, AVG, MAX, MIN in 4 states (`rule_set`); **mixed** = 10 of those, 5 COUNT_DISTINCT(beneficiaryId)"
        " (4 more states: distinct values per tile) and 5 relative limits (VALUE, SUM, MAX, AVG, COUNT against an"
        " AVG, SUM or COUNT baseline over 7 days, minCount 5; sharing today's states) (`mixed_rule_set`). The runs"
        " alternate (today, mixed, mixed, today, ...) in one process after an uncounted warm-up run of the mixed"
        " set, so neither set always has the warmer JVM."
    )
    rows = []
    for name in KIND_SETS:
        for i, r in enumerate(results.kinds.get(name, [])):
            rows.append(
                [
                    f"{name} (run {i + 1})",
                    fmt(r.rows),
                    fmt(r.sustained_tps),
                    fmt(r.median_foreach_seconds, 2),
                    fmt(r.steps.get("evaluate"), 0),
                    fmt(r.alerts),
                    fmt(r.state_rows),
                    fmt_bytes(r.state_bytes),
                ]
            )
    measured = kinds_ratio(results)
    note = ""
    if measured is not None:
        today, mixed = (_median_evaluate(results.kinds[name]) for name in KIND_SETS)
        note = (
            f"Mixed vs today: {measured[0]:.2f}x ({measured[1]:.2f} s vs {measured[2]:.2f} s, the median over each"
            f" set's runs of its median foreachBatch; target ≤ {KINDS_TARGET}x). The evaluate step alone:"
            f" {mixed / today if today else float('nan'):.2f}x ({mixed:,.0f} ms vs {today:,.0f} ms)."
        )
    section.tables.append(
        Table(
            "20 rules: today's kinds vs 5 COUNT_DISTINCT + 5 relative",
            [
                "rule set",
                "rows",
                "tx/s sustained",
                "median foreachBatch s",
                "evaluate ms",
                "alerts",
                "state rows",
                "state size",
            ],
            rows,
            note=note,
        )
    )
