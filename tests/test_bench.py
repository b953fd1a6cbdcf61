"""The benchmark's pieces: the per-event baseline agrees with the engine; the report writer renders its tables."""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections import Counter
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

from engine_fixtures import alerts_by_id, folded_state, independent_tiles, make_rule, put_rules, raw_frame
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession
from reference_evaluator import RefBatch, evaluate

from pipelines.base.settings import Settings
from pipelines.bench.driver_memory import HeapAfterGc, MemorySample
from pipelines.bench.engine_runs import BacklogResult
from pipelines.bench.engine_workload import add_workload_arguments, workload_rules
from pipelines.bench.floor import FloorResult
from pipelines.bench.live_floor import run_live_floor
from pipelines.bench.live_latency import LiveResult
from pipelines.bench.per_event import PerEventHandler
from pipelines.bench.report import Chart, Report, Table, write_report
from pipelines.bench.scenarios import KIND_SETS, Plan, Results, merge, run_all
from pipelines.bench.sliding_window import SlidingWindowResult, run_sliding_window
from pipelines.bench.state_size import StateSize, engine_state_mismatches, steady_state_sizes, window_input
from pipelines.bench.summary import BENCHMARKS_DOC, PROFILE_SECTION, build_report, profile_notes
from pipelines.bench.workload import Workload, alerting_rule_set, mixed_rule_set, rule_set, transactions, write_batches
from pipelines.engine.batch_handler import BatchHandler
from pipelines.engine.keys import encode_key
from pipelines.engine.states import LiveRule, states_of

MINUTE = 60_000


def _batches() -> list[list[dict[str, object]]]:
    """Three batches over three payers, every event time on a minute start (bucket-aligned), ties included."""
    records = list(transactions(Workload(count=36, keys=3, rate_per_second=0.2, aligned=True, seed=3)))
    for i, record in enumerate(records):
        record["paymentAmount"] = str(Decimal(10 + (i * 37) % 90))
    return [records[0:12], records[12:24], records[24:36]]


def test_per_event_baseline_alerts_equal_the_engine_on_bucket_aligned_data(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    fresh_lakehouse(spark, settings)
    rules = [
        make_rule(1, limit=150, windowMinutes=3),
        make_rule(2, aggregatorFunctionType="COUNT", limit=2, windowMinutes=4),
        make_rule(3, aggregatorFunctionType="AVG", limit=50, windowMinutes=2),
        make_rule(
            4,
            aggregatorFunctionType="MAX",
            limit=80,
            windowMinutes=5,
            filter={"field": "paymentType", "op": "EQUAL", "value": "CRD"},
        ),
        make_rule(5, aggregatorFunctionType="MIN", limitOperatorType="LESS", limit=30, windowMinutes=3),
    ]
    put_rules(spark, settings, rules)
    engine = BatchHandler(settings, app_id="engine-bench-test", report=lambda _: None)
    per_event = PerEventHandler(settings, rules, root=str(tmp_path / "per-event"))
    for batch_id, records in enumerate(_batches()):
        engine(raw_frame(spark, records, name=f"b{batch_id}"), batch_id)
        per_event(raw_frame(spark, records, name=f"b{batch_id}"), batch_id)
    columns = ["ruleId", "transactionId", "keyValue", "aggregateValue"]
    ours = {tuple(r) for r in spark.read.format("delta").load(settings.table_path("alerts")).select(*columns).collect()}
    theirs = {tuple(r) for r in per_event.alerts(spark).select(*columns).collect()}
    assert ours, "the data must raise some alerts"
    assert {r[0] for r in ours} >= {1, 2, 3}
    assert ours == theirs
    # Both equal the contract (the reference evaluator), not merely each other.
    expected = {
        (a.rule_id, a.transaction_id): (encode_key(a.key), a.aggregate_value)
        for a in evaluate([RefBatch(rules, batch) for batch in _batches()])
    }
    assert alerts_by_id(spark, settings) == expected
    # The state the engine built batch by batch is tiles() of every event: what state_size builds in one go; and
    # both are the tiles computed in plain Python.
    assert engine_state_mismatches(spark, settings.table_path("bucket_state"), per_event.events_path, rules) == 0
    assert folded_state(spark, settings) == independent_tiles([r for b in _batches() for r in b], rules)
    assert sum(per_event.batch_rows) == 36 + sum(1 for b in _batches() for r in b if r["paymentType"] == "CRD")


def _backlog(tps: float, evaluate_ms: float, state_rows: int) -> BacklogResult:
    return BacklogResult(
        rows=4000,
        batches=4,
        wall_seconds=10.0,
        sustained_tps=tps,
        batch_seconds=[3.0, 2.0, 2.0, 2.0],
        steps={"plan": 500.0, "evaluate": evaluate_ms},
        alerts=12,
        state_rows=state_rows,
        state_bytes=state_rows * 40,
        foreach_seconds=[3.0, 2.0, 2.2, 2.0],
    )


def test_sliding_windows_close_once_the_watermark_passes_them_and_count_alerts_among_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The sliding-window baseline on 10 minutes of two payers (one file per 2 minutes): a 1-hour window sliding by
    1 minute comes out only when the watermark (max event time - 5 min) passes its end, so only the windows ending
    at minutes 1-4 close, each at least 6 minutes of event time after its last transaction; the alert windows are
    those of the payer whose minute-0 payment puts every window over the limit."""
    landing = tmp_path / "landing"
    start = 1_700_006_400_000  # a minute start
    records = [
        {
            "transactionId": f"t{minute}-{payer}",
            "eventTime": start + minute * MINUTE,
            "payerId": payer,
            "paymentAmount": "500.00" if (minute, payer) == (0, 1) else "10.00",
        }
        for minute in range(10)
        for payer in (1, 2)
    ]
    # one file per 2 minutes, stamped in write order (the file source takes files oldest first)
    assert write_batches(iter(records), landing, batch_size=4) == 5
    result = run_sliding_window(
        spark, landing, window_minutes=60, limit=Decimal(400), lateness_seconds=300, checkpoint=str(tmp_path / "ckpt")
    )
    assert result.rows == 20
    # windows ending at minutes 1-2 come out in the last data batch, 3-4 in the no-data batch Spark runs after it
    # (the watermark moved): 4 per payer, 9, 8, 7 and 6 minutes after their last transaction (stream max: minute 9)
    assert result.closed_windows == 8, result
    assert result.alert_windows == 4 and result.alerted_keys == 1, result
    assert (result.delay_p50_seconds, result.delay_p95_seconds) == (450, 540), result
    assert result.state_rows > 0


def test_report_has_a_table_per_scenario_the_targets_and_charts(tmp_path: Path) -> None:
    plan = replace(Plan.quick(), scale_batch_rows=100_000)
    results = Results(plan=plan, machine={"cpus": "2", "load": "1.0 / 1.0 / 1.0", "uptime": "up"})
    results.throughput = {
        f"rules={r} keys={plan.base_keys} batch={plan.batch_rows}": _backlog(2000.0 / r, 900.0, 1000) for r in (1, 20)
    }
    results.throughput["rules=20 keys=1000000 batch=100000"] = _backlog(10_500.0, 5000.0, 2_000_000)
    results.windows = {60: _backlog(1500.0, 1000.0, 5000), 10080: _backlog(1400.0, 1200.0, 5000)}
    results.sharing = {1: _backlog(1500.0, 900.0, 1000), 20: _backlog(900.0, 2000.0, 20000)}
    results.baselines = [
        {
            "perKeyPerMinute": 10,
            "keys": 200,
            "rows": 8000,
            "minutes": 4,
            "ours": _backlog(1500.0, 900.0, 1000),
            "perEventTps": 300.0,
            "perEventRows": 8000,
            "perEventBytes": 800_000,
            "perEventAlerts": 12,
            "alertsMismatched": 0,
            "stateMismatched": 0,
            "sliding": SlidingWindowResult(3, 2, 360.0, 420.0, 12_000, 3_000_000, 20.0, 8000, closed_windows=40),
        }
    ]
    results.state_sizes = [StateSize(100, 10, 60, 60_000, 6_300, 100_000, 60_000, 800_000, 60_000, 2_000_000)]
    results.floors = {
        label: {
            "append": FloorResult("append", [1.0, 0.4, 0.4]),
            "append+merge": FloorResult("append+merge", [2.0, 1.6]),
        }
        for label in results.throughput
    }
    results.live = {"files": LiveResult("files", 2000.0, 60.0, 120_000, 50, 1.5, 3.0, 4.0, 4.5, 1.2, 30)}
    results.live_floor = {"files": LiveResult("files", 2000.0, 60.0, 120_000, 70, 0.9, 1.4, 1.8, 2.0, 0.6, 0)}
    results.latency_jvm = "cold"  # the latency scenario ran first in its process
    results.memory = [
        MemorySample(batch, rows, HeapAfterGc(300.0 + mb + own, 150.0 + mb))
        for batch, rows, mb, own in ((0, 1_000, 0, 90), (1, 20_000, 40, 0), (2, 40_000, 80, 10), (3, 60_000, 120, 40))
    ]
    results.kinds = {
        "today": [_backlog(1500.0, 900.0, 1000)],
        "mixed": [replace(_backlog(1200.0, 1100.0, 1500), foreach_seconds=[3.0, 2.6, 2.6, 2.6])],
    }
    written = write_report(
        build_report(results, profile=["a profile note"]), tmp_path / "b.md", chart_dir=tmp_path / "c"
    )
    text = (tmp_path / "b.md").read_text()
    for heading in (
        "## Targets",
        "by rules",
        "by window",
        "20 rules",
        "throughput, alerts, alert delay, state",
        "bucket tiles vs per-event rows",
        "latency",
        "driver heap",
        "today's kinds vs 5 COUNT_DISTINCT + 5 relative",
        "a profile note",
    ):
        assert heading in text
    assert "1.20x" in text  # 7 days vs 1 hour evaluation, in the targets
    assert "20.0x smaller in bytes than whole transactions" in text and "8.0x than our lean" in text
    assert "9.5x in rows" in text and "**met**" in text
    assert "p50 1.50 s, p95 3.00 s, p99 4.00 s at 2,000 tx/s" in text
    # The driver's own heap (used - cached blocks) grew 30 MB after the two warm-up batches (its 90 MB at batch 0
    # is warm-up): within the target.
    assert "own heap (used after a full GC - cached blocks) +30 MB after batch 2, over state 1,000-60,000" in text
    assert "This run's JVM was **cold**" in text and merge([results]).latency_jvm == "cold"
    assert "the append+MERGE floor fed the same: p50 0.90 s, p99 1.80 s" in text and "| floor, files |" in text
    assert "1.25x (2.00 s vs 1.60 s)" in text  # the engine's median foreachBatch vs the append+MERGE floor's
    assert (
        "| throughput, 20 rules over 1,000,000 keys (100,000-row batches) | ≥ 10,000 tx/s sustained | 10,500 tx/s"
        " (median batch 2.00 s, state 2,000,000 rows after 4 batches) | **met** |" in text
    )
    assert "by keys at 100,000-row batches" in text and "| rules=20 keys=1000000 batch=100000 |" in text
    assert "Mixed vs today: 1.30x (2.60 s vs 2.00 s" in text and "1.22x (1,100 ms vs 900 ms)" in text  # evaluate
    assert (
        "| 20 rules with 5 COUNT_DISTINCT and 5 relative vs today's 20" in text
        and "| 1.30x (2.60 s vs 2.00 s) |" in text
    )
    pngs = [p for p in written if p.suffix == ".png"]
    assert pngs and all(p.stat().st_size > 1000 for p in pngs)
    assert "](c/windows.png)" in text


def test_profile_notes_are_the_docs_prose_carried_into_the_report_unchanged(tmp_path: Path) -> None:
    """The profile section is prose kept in docs/benchmarks.md; a report built with it renders it as the doc has it."""
    notes = profile_notes(BENCHMARKS_DOC)
    assert len(notes) == 1 and notes[0].count("\n\n") >= 5  # one block of several paragraphs
    assert "How it was profiled" in notes[0] and "**Before**" in notes[0] and "What is left at 50,000 rows" in notes[0]
    write_report(build_report(Results(plan=Plan.quick()), profile=notes), tmp_path / "b.md", chart_dir=tmp_path / "c")
    doc, written = BENCHMARKS_DOC.read_text(), (tmp_path / "b.md").read_text()
    heading = f"## {PROFILE_SECTION}\n"
    assert written.split(heading, 1)[1] == doc.split(heading, 1)[1]  # the last section of both, byte for byte
    assert profile_notes(tmp_path / "b.md") == notes  # so a report written over the doc keeps it for the next run
    (tmp_path / "none.md").write_text("# r\n\n## Targets\n\nno notes\n")
    assert profile_notes(tmp_path / "none.md") == profile_notes(tmp_path / "missing.md") == []
    write_report(build_report(Results(plan=Plan.quick())), tmp_path / "n.md", chart_dir=tmp_path / "c")
    assert PROFILE_SECTION not in (tmp_path / "n.md").read_text()


def test_steady_state_sizes_count_every_event_and_one_tile_per_minute_of_a_short_window(
    spark: SparkSession, tmp_path: Path
) -> None:
    result = steady_state_sizes(spark, keys=2, per_minute=3, window_minutes=5, folder=tmp_path / "s")
    assert result.transactions == result.per_event_rows == 2 * 3 * 5  # one state, no filter: every transaction
    assert result.engine_rows == 2 * 5  # per key: 5 minute tiles (a window of 5 minutes reads no hour or day tile)
    assert result.whole_rows == result.transactions  # every whole transaction once under its key
    assert result.engine_bytes > 0 and result.per_event_bytes > 0 and result.whole_bytes > 0
    assert not (tmp_path / "s").exists()


def test_the_state_size_input_has_random_ids_and_times_in_every_minute_for_every_key(spark: SparkSession) -> None:
    rows = window_input(spark, keys=3, per_minute=4, window_minutes=5).collect()
    assert len(rows) == 3 * 4 * 5 and len({r["transactionId"] for r in rows}) == len(rows)
    assert all(re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", r["transactionId"]) for r in rows)
    start = min(r["eventTimeMs"] for r in rows) // 60_000
    per_cell = Counter((r["payerId"], r["eventTimeMs"] // 60_000 - start) for r in rows)
    assert set(per_cell.values()) == {4} and {minute for _, minute in per_cell} == set(range(5))
    assert len({r["eventTimeMs"] % 60_000 for r in rows}) > len(rows) // 2  # not all on the minute's start


def test_merge_keeps_the_later_run_of_a_scenario() -> None:
    first, second = Results(plan=Plan.quick()), Results(plan=Plan.quick())
    first.state_sizes = [StateSize(50, 10, 60, 30_000, 3_100, 61_000, 30_000, 332_000)]
    first.throughput = {"rules=1 keys=1 batch=1": _backlog(100.0, 1.0, 1)}
    second.state_sizes = [StateSize(50, 10, 60, 30_000, 3_100, 61_000, 30_000, 332_000, 30_000, 298_000)]
    merged = merge([first, second])
    assert merged.state_sizes == second.state_sizes  # replaced, not appended
    assert merged.throughput == first.throughput  # a scenario only the first run has is kept
    assert "2 bench runs" in merged.machine["runs"]


def test_table_markdown_and_bar_chart(tmp_path: Path) -> None:
    table = Table("t", ["a", "b"], [["x|y", "1"]], note="n")
    assert table.markdown().splitlines()[2:5] == ["| a | b |", "|---|---:|", "| x\\|y | 1 |"]
    report = Report("r")
    report.section("s").charts.append(Chart("bars", "t", "x", "y", {"one": [(0.0, 1.0)]}, kind="bar", xticks=["a"]))
    write_report(report, tmp_path / "r.md", chart_dir=tmp_path / "charts")
    assert (tmp_path / "charts" / "bars.png").exists()


def test_the_mixed_rule_set_is_ten_of_todays_rules_five_distinct_counts_and_five_relative(
    base_settings: Settings,
) -> None:
    today = rule_set(20, window_minutes=60, states=4)
    mixed = mixed_rule_set(20, window_minutes=60, states=4, distinct=5, relative=5)
    assert [r.rule_id for r in mixed] == list(range(1, 21)) and mixed[:10] == today[:10]
    assert [r.aggregator_function_type.value for r in mixed[10:15]] == ["COUNT_DISTINCT"] * 5
    assert all(r.baseline is not None and r.baseline.window_minutes == 7 * 1440 for r in mixed[15:])
    for rule in mixed:
        rule.check_against(base_settings.transaction_schema)
    # The relative rules share today's 4 states; the distinct counts add one per filter.
    assert len(states_of([LiveRule(r, None) for r in today])) == 4
    assert len(states_of([LiveRule(r, None) for r in mixed])) == 8


def test_the_profilers_take_the_mixed_kinds_as_the_bench_runs_them() -> None:
    parser = argparse.ArgumentParser()
    add_workload_arguments(parser)
    mixed = workload_rules(parser.parse_args(["--kinds", "mixed"]))
    assert mixed == mixed_rule_set(20, window_minutes=60, states=4, distinct=5, relative=5)
    today = workload_rules(parser.parse_args(["--alert-share", "0"]))
    assert today == rule_set(20, window_minutes=60, states=4)


def test_the_kinds_scenario_runs_both_rule_sets_on_the_same_backlog(
    spark: SparkSession, base_settings: Settings, tmp_path: Path
) -> None:
    plan = replace(
        Plan.quick(), batch_rows=300, batches=2, base_keys=40, kinds_rounds=1, kinds_warmup=False, floor=False
    )
    said: list[str] = []
    results = run_all(spark, base_settings, plan, work=tmp_path / "bench", only=("kinds",), say=said.append)
    assert set(results.kinds) == set(KIND_SETS) and not results.throughput
    today, mixed = results.kinds["today"][0], results.kinds["mixed"][0]
    assert (today.rows, today.batches) == (mixed.rows, mixed.batches) == (600, 2)
    assert mixed.state_rows > today.state_rows  # the distinct counts' states
    assert [line.split(":")[0] for line in said] == ["kinds today 1", "kinds mixed 1"]
    text = write_report(build_report(results), tmp_path / "b.md", chart_dir=tmp_path / "c")[0].read_text()
    assert "Mixed vs today: " in text and "20 rules with 5 COUNT_DISTINCT and 5 relative" in text


def test_calibrated_limits_make_about_the_asked_share_of_transactions_alert() -> None:
    """The bench's alert-raising rule set: its limits, calibrated on a workload, make the contract's oracle raise
    alerts on about the asked share of that workload's transactions (never far more: ties only lower it)."""
    workload = Workload(count=3_000, keys=300, rate_per_second=30.0, seed=11)
    rules = alerting_rule_set(10, workload, window_minutes=10, states=2, alert_share=0.05)
    alerting = {a.transaction_id for a in evaluate([RefBatch(rules, list(transactions(workload)))])}
    assert 0.02 <= len(alerting) / workload.count <= 0.05
    seldom = alerting_rule_set(10, workload, window_minutes=10, states=2, alert_share=0.0)
    assert len({a.transaction_id for a in evaluate([RefBatch(seldom, list(transactions(workload)))])}) < 30


def test_the_live_floor_measures_every_transaction_fed_from_ingestion_to_its_batch_commit(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    fed_at = time.time()
    floor = run_live_floor(spark, settings, tmp_path / "floor", source="files", rate=100, seconds=3, keys=50)
    took = time.time() - fed_at
    assert floor.transactions == 300 and floor.batches >= 1 and floor.alerts == 0
    # Each latency is a commit after the transaction's file was written, within the run.
    assert 0 < floor.p50 <= floor.p99 <= floor.max < took
    assert floor.wait_p50 >= 0 and floor.work_p50 > 0 and floor.stack_ms["addBatch"] > 0


def test_the_memory_scenario_samples_one_engine_batch_by_batch_as_its_state_grows(
    spark: SparkSession, base_settings: Settings, tmp_path: Path
) -> None:
    plan = replace(Plan.quick(), memory_rows=200, memory_batches=3, memory_keys=5_000)
    said: list[str] = []
    results = run_all(spark, base_settings, plan, work=tmp_path / "bench", only=("memory",), say=said.append)
    samples = results.memory
    assert [s.batch for s in samples] == [0, 1, 2] and not results.throughput
    rows = [s.state_rows for s in samples]
    assert 0 < rows[0] < rows[1] < rows[2]  # new payers every batch: the state grows
    # The engine keeps its state cached between batches: cached blocks, inside the (local) JVM's heap.
    assert all(0 < s.heap.blocks_mb < s.heap.used_mb for s in samples)
    assert said[0].startswith("driver memory: after batch 0 heap ")
    text = write_report(build_report(results), tmp_path / "b.md", chart_dir=tmp_path / "c")[0].read_text()
    assert "## Driver memory" in text and "| driver memory as state grows |" in text


def test_the_cycle_scenario_runs_retention_steps_and_reports_the_longest_batch_against_the_median(
    spark: SparkSession, base_settings: Settings, tmp_path: Path
) -> None:
    """Retention on (every 2 batches, so every step of the cycle falls within 2 batches) while the bench's other
    scenarios keep it off: the batches carry retention steps, and the report sets the longest batch beside the
    median."""
    plan = replace(Plan.quick(), cycle_rows=300, cycle_batches=3, cycle_every=2, cycle_keys=50)
    said: list[str] = []
    results = run_all(spark, base_settings, plan, work=tmp_path / "bench", only=("cycle",), say=said.append)
    cycle = results.cycle
    assert cycle is not None and not results.throughput
    assert (cycle.rows, cycle.batches) == (900, 3) and len(cycle.batch_steps) == len(cycle.foreach_seconds) == 3
    assert sum("retention" in steps for steps in cycle.batch_steps) >= 2
    assert re.fullmatch(
        r"cycle every=2: 900 rows in 3 batches, [\d,]+ tx/s sustained, foreachBatch [\d.]+, [\d.]+, [\d.]+ s"
        r" \(median [\d.]+ s; \d+ s\)",
        said[0],
    )
    text = write_report(build_report(results), tmp_path / "b.md", chart_dir=tmp_path / "c")[0].read_text()
    longest = max(cycle.foreach_seconds[1:])
    ratio = longest / statistics.median(cycle.foreach_seconds[1:])
    assert "## A retention cycle (maintenance without a stall)" in text
    assert (
        "| a retention cycle (every 2 batches) on the Flink demo's steady workload (300-row batches): longest" in text
    )
    assert f"{ratio:.2f}x ({longest:.2f} s, batch " in text
