"""The report's scaling sections: the evaluation's cost by window length, and rules sharing one state."""

from __future__ import annotations

from pipelines.bench.report import Chart, Report, Table, fmt, fmt_bytes, ratio
from pipelines.bench.scenarios import Results
from pipelines.bench.sections.labels import window_label
from pipelines.bench.sections.throughput import run_cells


def add_windows(report: Report, results: Results) -> None:
    if not results.windows:
        return
    plan = results.plan
    section = report.section("Window length (scaling)")
    section.text.append(
        f"Same prior state for each window: {plan.history_keys:,} keys with a transaction every"
        f" {plan.history_every_minutes} min over {plan.history_days} days (hour and day tiles included), 20 rules in"
        " 4 states, the same backlog. Only the rules' window differs. The runs are sequential in one process and"
        " the first also warms the JVM up, so a ratio below 1 reads as 'no dearer', not as faster."
    )
    base = results.windows.get(60)
    rows = []
    for window, r in sorted(results.windows.items()):
        rows.append(
            [
                window_label(window),
                *run_cells(r),
                fmt(r.state_rows),
                ratio(base.steps.get("evaluate", 0), r.steps.get("evaluate", 0)) if base else "-",
            ]
        )
    section.tables.append(
        Table(
            "by window",
            [
                "window",
                "tx/s sustained",
                "median batch s",
                "evaluate ms",
                "state rows",
                "evaluate vs 1 h",
            ],
            rows,
        )
    )
    section.charts.append(
        Chart(
            "windows",
            "evaluation cost by window length",
            "window",
            "evaluate ms (median per batch)",
            {
                "engine": [
                    (float(i), r.steps.get("evaluate", 0.0)) for i, (_, r) in enumerate(sorted(results.windows.items()))
                ]
            },
            kind="bar",
            xticks=[window_label(w) for w in sorted(results.windows)],
        )
    )


def add_sharing(report: Report, results: Results) -> None:
    if not results.sharing:
        return
    section = report.section("Rules sharing state")
    section.text.append(
        "20 rules with the same grouping key and field: in 1 shared state (same filter) vs 20 states (20 filters)."
    )
    one = results.sharing.get(1)
    rows = [
        [
            f"{states} state" + ("s" if states > 1 else ""),
            *run_cells(r),
            fmt(r.state_rows),
            fmt_bytes(r.state_bytes),
            ratio(one.state_rows, r.state_rows) if one else "-",
        ]
        for states, r in sorted(results.sharing.items())
    ]
    section.tables.append(
        Table(
            "20 rules",
            [
                "states",
                "tx/s sustained",
                "median batch s",
                "evaluate ms",
                "state rows",
                "state size",
                "state vs shared",
            ],
            rows,
        )
    )
