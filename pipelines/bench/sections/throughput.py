"""The report's throughput section: the engine's runs over a prepared backlog, beside the append+MERGE floor."""

from __future__ import annotations

from collections.abc import Callable

from pipelines.bench.engine_runs import BacklogResult
from pipelines.bench.report import Chart, Report, Table, fmt, fmt_bytes
from pipelines.bench.scenarios import Results
from pipelines.bench.sections.labels import parse_label


def floor_ratio(results: Results, label: str) -> float | None:
    """The engine's median foreachBatch over the append+MERGE floor's, on the same files in the same run."""
    floor = results.floors.get(label, {}).get("append+merge")
    engine = results.throughput.get(label)
    if floor is None or engine is None or not floor.median_batch_seconds:
        return None
    return engine.median_foreach_seconds / floor.median_batch_seconds


def backlog_row(label: str, result: BacklogResult, results: Results | None = None) -> list[str]:
    floors = results.floors.get(label, {}) if results else {}
    merge_floor, append_floor = floors.get("append+merge"), floors.get("append")
    ratio_ = floor_ratio(results, label) if results else None
    return [
        label,
        fmt(result.rows),
        str(result.batches),
        fmt(result.sustained_tps),
        fmt(result.median_foreach_seconds, 2),
        "-" if merge_floor is None else fmt(merge_floor.median_batch_seconds, 2),
        "-" if append_floor is None else fmt(append_floor.median_batch_seconds, 2),
        "-" if ratio_ is None else f"{ratio_:.2f}x",
        fmt(result.steps.get("evaluate"), 0),
        fmt(result.alerts),
        fmt(result.state_rows),
        fmt_bytes(result.state_bytes),
    ]


def run_cells(result: BacklogResult) -> list[str]:
    """tx/s sustained, median batch s, evaluate ms."""
    return [fmt(result.sustained_tps), fmt(result.median_foreach_seconds, 2), fmt(result.steps.get("evaluate"), 0)]


BACKLOG_COLUMNS = [
    "run",
    "rows",
    "batches",
    "tx/s sustained",
    "median batch s",
    "floor append+MERGE s",
    "floor append s",
    "vs floor",
    "evaluate ms",
    "alerts",
    "state rows",
    "state size",
]


def add_throughput(report: Report, results: Results) -> None:
    section = report.section("Throughput (`--once` over a prepared backlog)")
    section.text.append(
        "Each run: a fresh lakehouse, rules in 1 state per 5 rules (1-hour windows), the backlog as JSON-lines files"
        " in the landing folder, `fraudlake run --once` with one file per micro-batch. *Sustained* = rows after the"
        " first (warm-up) batch / wall time from the end of the first batch to the end of the last; step timings are"
        " medians of `batch_log.metrics` over the batches after the first."
    )
    plan = results.plan
    # title -> (axis, chart name, which runs)
    groups: dict[str, tuple[str, str, Callable[[dict[str, int]], bool]]] = {
        "rules": ("rules", "rules", lambda p: p["keys"] == plan.base_keys and p["batch"] == plan.batch_rows),
        "keys": ("keys", "keys", lambda p: p["rules"] == 20 and p["batch"] == plan.batch_rows),
        "batch": ("batch", "batch", lambda p: p["rules"] == 20 and p["keys"] == plan.base_keys),
        f"keys at {plan.scale_batch_rows:,}-row batches": (
            "keys",
            "scale",
            lambda p: p["rules"] == 20 and p["batch"] == plan.scale_batch_rows,
        ),
    }
    for title, (axis, chart, keep) in groups.items():
        rows = sorted(
            (
                (parse_label(label)[axis], label, r)
                for label, r in results.throughput.items()
                if keep(parse_label(label))
            ),
            key=lambda item: item[0],
        )
        if not rows:
            continue
        section.tables.append(Table(f"by {title}", BACKLOG_COLUMNS, [backlog_row(lb, r, results) for _, lb, r in rows]))
        section.charts.append(
            Chart(
                f"throughput_{chart}",
                f"sustained throughput by {title}",
                axis,
                "tx/s",
                {"engine": [(float(x), r.sustained_tps) for x, _, r in rows]},
            )
        )
    base = next(
        (
            r
            for label, r in results.throughput.items()
            if parse_label(label)["rules"] == 20
            and parse_label(label)["keys"] == results.plan.base_keys
            and parse_label(label)["batch"] == results.plan.batch_rows
        ),
        None,
    )
    if base:
        steps = sorted(((k, v) for k, v in base.steps.items() if not k.endswith("Ms")), key=lambda kv: -kv[1])
        total = sum(v for _, v in steps) or 1.0
        section.tables.append(
            Table(
                "where a batch's time goes (20 rules, base keys and batch size; median ms per step)",
                ["step", "ms", "share"],
                [[k, fmt(v), f"{v / total:.0%}"] for k, v in steps],
                note="`plan` is the parse, the one-pass batch statistics and the pinning of the versions a batch"
                " reads; `evaluate` the tiles, the lookback against the cached state, the alerts and the appends"
                " running beside it (bronze, quarantine, state, alerts, cooldown memory).",
            )
        )
