"""The report's targets table: each target of the brief, its figure from this run, met or not."""

from __future__ import annotations

from pipelines.bench.driver_memory import WARMUP_BATCHES, own_growth
from pipelines.bench.report import Target, fmt
from pipelines.bench.scenarios import DAY_MINUTES, Results
from pipelines.bench.sections.cycle import CYCLE_TARGET, cycle_stall
from pipelines.bench.sections.labels import engine_label, parse_label, window_label
from pipelines.bench.sections.memory import MEMORY_TARGET_MB
from pipelines.bench.sections.rule_kinds import KINDS_TARGET, kinds_ratio
from pipelines.bench.sections.throughput import floor_ratio


def measure_targets(results: Results) -> list[Target]:
    targets = []
    for batch in (2_000, 50_000):
        label = engine_label(results, rules=20, batch=batch)
        r = None if label is None else floor_ratio(results, label)
        engine = None if label is None else results.throughput[label]
        floor = None if label is None else results.floors.get(label, {}).get("append+merge")
        targets.append(
            Target(
                f"median batch vs the append+MERGE floor, {batch:,}-row batches (20 rules in 4 states, 10k keys,"
                f" limits met by ~{results.plan.alert_share:.0%} of the transactions:"
                f" {'-' if engine is None else fmt(engine.alerts)} alerts)",
                "≤ 2x",
                "-"
                if r is None or engine is None or floor is None
                else f"{r:.2f}x ({engine.median_foreach_seconds:.2f} s vs {floor.median_batch_seconds:.2f} s)",
                None if r is None else r <= 2,
            )
        )
    by_size = {
        parse_label(label)["batch"]: r.sustained_tps
        for label, r in results.throughput.items()
        if parse_label(label)["rules"] == 20 and parse_label(label)["keys"] == 10_000
    }
    best = max(by_size.values(), default=None)
    targets.append(
        Target(
            "throughput, 20 rules over 10,000 keys",
            "≥ 10,000 tx/s sustained",
            "-"
            if best is None
            else f"{best:,.0f} tx/s (best batch size; "
            + ", ".join(f"{tps:,.0f} at {size:,}-row batches" for size, tps in sorted(by_size.items()))
            + ")",
            None if best is None else best >= 10_000,
        )
    )
    plan = results.plan
    if plan.scale_batch_rows:
        scale = results.throughput.get(plan.scale_label)
        targets.append(
            Target(
                f"throughput, 20 rules over {plan.scale_keys:,} keys ({plan.scale_batch_rows:,}-row batches)",
                "≥ 10,000 tx/s sustained",
                "-"
                if scale is None
                else f"{scale.sustained_tps:,.0f} tx/s (median batch {scale.median_foreach_seconds:.2f} s, state"
                f" {fmt(scale.state_rows)} rows after {scale.batches} batches)",
                None if scale is None else scale.sustained_tps >= 10_000,
            )
        )
    if plan.cycle_batches:
        stall = None if results.cycle is None else cycle_stall(results.cycle)
        targets.append(
            Target(
                f"a retention cycle (every {plan.cycle_every} batches) on the Flink demo's steady workload"
                f" ({plan.cycle_rows:,}-row batches): longest batch vs median",
                f"≤ {CYCLE_TARGET:.0f}x (no stall)",
                "-"
                if stall is None
                else f"{stall.ratio:.2f}x ({stall.longest_seconds:.2f} s, batch {stall.longest_batch}, vs"
                f" {stall.median_seconds:.2f} s)",
                None if stall is None else stall.ratio <= CYCLE_TARGET,
            )
        )
    for source in ("files", "kafka"):
        live = results.live.get(source)
        targets.append(
            Target(
                f"continuous at 2,000 tx/s over {source}, alerts raised: ingestion -> alerts committed",
                "p50 < 1.5 s, p99 < 3 s",
                "-"
                if live is None
                else f"p50 {live.p50:.2f} s, p95 {live.p95:.2f} s, p99 {live.p99:.2f} s at {live.rate:,.0f} tx/s"
                f" ({live.alerting / max(1, live.transactions):.1%} of transactions alerting; burst"
                f" p50 {fmt(live.burst_p50, 2)} s, p99 {fmt(live.burst_p99, 2)} s)"
                + (
                    f"; the append+MERGE floor fed the same: p50 {stack.p50:.2f} s, p99 {stack.p99:.2f} s"
                    if (stack := results.live_floor.get(source)) is not None
                    else ""
                ),
                None if live is None else live.rate >= 2_000 and live.p50 < 1.5 and live.p99 < 3,
            )
        )
    few, many = (engine_label(results, rules=n, batch=results.plan.batch_rows) for n in (20, 100))
    if few and many:
        a, b = results.throughput[few], results.throughput[many]
        r = b.median_foreach_seconds / a.median_foreach_seconds
        targets.append(
            Target(
                f"100 rules in 20 states vs 20 rules in 4 states ({results.plan.batch_rows:,}-row batches)",
                "≤ 2x",
                f"{r:.2f}x ({b.median_foreach_seconds:.2f} s vs {a.median_foreach_seconds:.2f} s)",
                r <= 2,
            )
        )
    kinds = kinds_ratio(results)
    if kinds:
        targets.append(
            Target(
                "20 rules with 5 COUNT_DISTINCT and 5 relative vs today's 20 (same backlog, median foreachBatch)",
                f"≤ {KINDS_TARGET}x",
                f"{kinds[0]:.2f}x ({kinds[1]:.2f} s vs {kinds[2]:.2f} s)",
                kinds[0] <= KINDS_TARGET,
            )
        )
    one_hour, week = results.windows.get(60), results.windows.get(7 * DAY_MINUTES)
    if one_hour and week:
        r = week.steps.get("evaluate", float("nan")) / one_hour.steps.get("evaluate", float("nan"))
        measured = f"evaluate {week.steps.get('evaluate', 0):,.0f} ms vs {one_hour.steps.get('evaluate', 0):,.0f} ms"
        targets.append(Target("7-day vs 1-hour windows (evaluation)", "≤ 1.5x", f"{r:.2f}x ({measured})", r <= 1.5))
    else:
        targets.append(Target("7-day vs 1-hour windows (evaluation)", "≤ 1.5x", "-", None))
    dense = [r for r in results.state_sizes if r.per_minute >= 10]
    if dense:
        worst = min(dense, key=lambda r: r.whole_bytes_ratio)
        lean = min(dense, key=lambda r: r.bytes_ratio)
        targets.append(
            Target(
                "bucket state vs per-event state at ≥ 10 tx/key/min (a full window)",
                "≥ 10x smaller",
                f"{worst.whole_bytes_ratio:.1f}x smaller in bytes than whole transactions kept per key (the seeds'"
                f" design) at worst ({worst.per_minute} tx/key/min, {window_label(worst.window_minutes)});"
                f" {lean.bytes_ratio:.1f}x than our lean per-event rows (value only), {lean.rows_ratio:.1f}x in rows",
                worst.whole_bytes_ratio >= 10,
            )
        )
    else:
        targets.append(Target("bucket state vs per-event state at ≥ 10 tx/key/min", "≥ 10x smaller", "-", None))
    memory = results.memory
    if len(memory) > 2:
        growth, first, last = own_growth(memory), memory[0], memory[-1]
        targets.append(
            Target(
                "driver memory as state grows",
                f"flat (own heap grows < {MEMORY_TARGET_MB} MB)",
                f"own heap (used after a full GC - cached blocks) {growth:+,.0f} MB after batch {WARMUP_BATCHES},"
                f" over state {first.state_rows:,}-{last.state_rows:,} rows; used heap {first.heap.used_mb:,.0f}-"
                f"{last.heap.used_mb:,.0f} MB, cached blocks {first.heap.blocks_mb:,.0f}-{last.heap.blocks_mb:,.0f} MB",
                growth < MEMORY_TARGET_MB,
            )
        )
    return targets
