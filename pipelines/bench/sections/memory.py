"""The report's driver-memory section: the driver's used heap after GC against the state's size."""

from __future__ import annotations

from pipelines.bench.report import Chart, Report, Table, fmt
from pipelines.bench.scenarios import Results


def add_memory(report: Report, results: Results) -> None:
    if not results.heap:
        return
    section = report.section("Driver memory")
    section.text.append("The driver JVM's used heap after a full GC, at the end of each run, against that run's state.")
    section.tables.append(
        Table(
            "driver heap",
            ["after", "state rows", "used heap MB"],
            [[label, fmt(rows), fmt(mb, 1)] for label, rows, mb in results.heap],
        )
    )
    section.charts.append(
        Chart(
            "driver_heap",
            "driver heap vs state rows",
            "state rows",
            "used heap MB (after GC)",
            {"driver": [(float(rows), mb) for _, rows, mb in results.heap]},
        )
    )
