"""The generator's sinks and command: atomic landing files, pacing, signals, and Kafka through the real broker."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kafka import KafkaConsumer
from kafka.admin import KafkaAdminClient

from pipelines.base.settings import DEFAULT_CONF, REPO_ROOT, Settings
from pipelines.cli import main
from pipelines.generator.sinks import FileSink, RatePlan, run
from pipelines.generator.transactions import FraudRates, GeneratorConfig, Transaction, TransactionGenerator, generate
from pipelines.local.kafka_broker import KafkaBroker

START_MS = 1_700_000_000_000


def landed(directory: Path) -> list[Transaction]:
    """Every record of the visible landing files, in file-name order."""
    records: list[Transaction] = []
    for path in sorted(p for p in directory.iterdir() if not p.name.startswith(".")):
        records.extend(json.loads(line) for line in path.read_text().splitlines())
    return records


def cli_config(seed: int, *, fraud_rate: float = 0.002) -> GeneratorConfig:
    """What ``fraudlake generate --seed S --start-ms START_MS --rate 0`` runs with its other defaults."""
    return GeneratorConfig(seed=seed, start_ms=START_MS, events_per_second=10.0, fraud=FraudRates.split(fraud_rate))


def test_file_sink_writes_files_of_n_records_and_leaves_no_temporaries(tmp_path: Path) -> None:
    records = generate(cli_config(1), 250)
    sink = FileSink(tmp_path / "landing", records_per_file=100)
    assert run(records, sink, RatePlan()) == 250
    assert [len(p.read_text().splitlines()) for p in sink.files] == [100, 100, 50]
    assert sorted(os.listdir(tmp_path / "landing")) == [p.name for p in sink.files]
    assert all(p.name.endswith(".jsonl") for p in sink.files)
    assert landed(tmp_path / "landing") == records


def test_a_concurrent_reader_only_ever_sees_complete_files(tmp_path: Path) -> None:
    per_file, files = 5000, 12
    records = generate(cli_config(2), per_file) * files  # large files: a non-atomic write would be caught
    sink = FileSink(tmp_path, records_per_file=per_file)
    # Files by size only: the periodic flush (every 2 s) would land a short, complete file on a busy machine.
    writer = threading.Thread(target=run, args=(records, sink, RatePlan()), kwargs={"flush_every_seconds": 3600.0})
    seen: dict[str, int] = {}
    deadline = time.monotonic() + 60
    writer.start()
    while (writer.is_alive() or len(seen) < files) and time.monotonic() < deadline:
        for path in tmp_path.iterdir():
            if path.name.startswith(".") or path.name in seen:
                continue
            lines = path.read_text().splitlines()
            assert len(lines) == per_file, f"{path.name} was visible with {len(lines)} records"
            json.loads(lines[-1])
            seen[path.name] = len(lines)
    writer.join()
    assert len(seen) == files


def test_rate_plan_schedules_steady_rates_and_bursts() -> None:
    assert [RatePlan().due_at(i) for i in (0, 10**6)] == [0.0, 0.0]
    steady = RatePlan(rate=4)
    assert [steady.due_at(i) for i in range(5)] == [0.0, 0.25, 0.5, 0.75, 1.0]
    bursty = RatePlan(rate=10, burst_every_seconds=1, burst_size=5)  # 5 at once, then 10 at 10/s, per second
    assert [bursty.due_at(i) for i in (0, 4, 5, 6, 14, 15, 19, 20)] == [0.0, 0.0, 0.1, 0.2, 1.0, 1.0, 1.0, 1.1]
    with pytest.raises(ValueError):
        RatePlan(rate=0)


class TimedSink(FileSink):
    """A file sink that notes when each record was handed to it (monotonic seconds)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.sent_at: list[float] = []

    def send(self, record: Transaction) -> None:
        self.sent_at.append(time.monotonic())
        super().send(record)


def _never_early(sink: TimedSink, plan: RatePlan) -> None:
    """Record i is sent no earlier than its due time after the first one (the pace is never exceeded)."""
    start = sink.sent_at[0]
    early = [(i, round(t - start, 4)) for i, t in enumerate(sink.sent_at) if t - start < plan.due_at(i) - 0.001]
    assert not early, f"sent before they were due (index, seconds): {early[:5]}"


def test_run_keeps_the_pace_and_stops_on_request(tmp_path: Path) -> None:
    # Checks are against measured times, so a loaded machine cannot fail them: never faster than the plan;
    # and when stopped, as many sent as were due by then, give or take the records due while the stop was noticed.
    plan = RatePlan(rate=200)
    paced = TimedSink(tmp_path / "a")
    assert run(TransactionGenerator(cli_config(3)), paced, plan, count=100) == 100
    _never_early(paced, plan)
    assert 99 / (paced.sent_at[-1] - paced.sent_at[0]) <= 200 * 1.01

    plan = RatePlan(rate=100)
    stop, stopped_at = threading.Event(), list[float]()

    def request_stop() -> None:
        stop.set()
        stopped_at.append(time.monotonic())

    timer = threading.Timer(0.3, request_stop)
    stopping = TimedSink(tmp_path / "b")
    timer.start()
    sent = run(TransactionGenerator(cli_config(3)), stopping, plan, stop=stop)
    returned_at = time.monotonic()
    timer.join()
    assert sent == len(stopping.sent_at) == len(landed(tmp_path / "b")) and sent >= 1
    _never_early(stopping, plan)
    due = 100 * (stopped_at[0] - stopping.sent_at[0])  # records due when the stop was requested, minus one
    noticed = 100 * (returned_at - stopped_at[0])  # records that fell due while the run noticed it and closed
    assert due - noticed - 2 <= sent <= due + 2, (sent, round(due, 1), round(noticed, 1))
    assert all(t <= stopped_at[0] + 0.001 for t in stopping.sent_at[:-1])  # nothing after the stop but one in flight


def test_a_slow_first_record_is_not_caught_up_on(tmp_path: Path) -> None:
    """The schedule starts when the first record is ready: a generator slow to make it (set-up, a loaded machine)
    does not make the next records go out back to back to catch up."""

    def slow_start() -> Iterator[Transaction]:
        records = iter(TransactionGenerator(cli_config(3)))
        time.sleep(0.05)  # ten records' worth at 200/s
        yield from records

    plan = RatePlan(rate=200)
    paced = TimedSink(tmp_path / "a")
    assert run(slow_start(), paced, plan, count=20) == 20
    _never_early(paced, plan)


def test_generate_command_writes_the_seeded_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "landing"
    args = ["generate", "--count", "250", "--rate", "0", "--seed", "7", "--start-ms", str(START_MS)]
    assert main([*args, "--output", str(out), "--records-per-file", "100", "--lakehouse", str(tmp_path)]) == 0
    assert landed(out) == generate(cli_config(7), 250)
    assert len(os.listdir(out)) == 3
    assert "250 records sent" in capsys.readouterr().out
    assert main([*args, "--lakehouse", str(tmp_path / "lh")]) == 0  # default: the lakehouse's landing folder
    assert landed(tmp_path / "lh" / "_landing" / "transactions") == generate(cli_config(7), 250)


def test_generate_command_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    out = tmp_path / "landing"
    command = [sys.executable, "-m", "pipelines.cli", "generate", "--rate", "500", "--records-per-file", "50"]
    process = subprocess.Popen(
        [*command, "--output", str(out), "--lakehouse", str(tmp_path)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and len(os.listdir(out)) >= 2) and time.monotonic() < deadline:
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        stdout, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    sent = int(stdout.split(" records sent")[0].rsplit(" ", 1)[-1])
    assert sent >= 100 and len(landed(out)) == sent
    assert not [p for p in os.listdir(out) if p.startswith(".")]


@pytest.mark.kafka
def test_kafka_sink_round_trip(kafka_broker: KafkaBroker, tmp_path: Path, settings: Settings) -> None:
    topic = f"gen-{uuid.uuid4().hex[:8]}"
    raw = yaml.safe_load(DEFAULT_CONF.read_text())
    raw["kafka"]["bootstrap_servers"] = kafka_broker.bootstrap
    raw["kafka"]["topics"]["transactions"] = topic
    conf = tmp_path / "conf.yaml"
    conf.write_text(yaml.safe_dump(raw))
    args = ["generate", "--sink", "kafka", "--count", "300", "--rate", "0", "--seed", "9", "--fraud-rate", "0.05"]
    assert main([*args, "--start-ms", str(START_MS), "--conf", str(conf), "--lakehouse", str(tmp_path)]) == 0

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=kafka_broker.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
        group_id=f"g-{topic}",
    )
    try:
        messages = [(m.key.decode(), json.loads(m.value), m.partition) for m in itertools.islice(consumer, 300)]
    finally:
        consumer.close()
    expected = generate(cli_config(9, fraud_rate=0.05), 300)
    assert sorted((m[1]["transactionId"], m[0], m[1]) for m in messages) == sorted(
        (r["transactionId"], str(r["payerId"]), r) for r in expected
    )
    by_partition: dict[int, list[str]] = {}
    for _key, value, partition in messages:  # one payer's records stay in order on one partition
        by_partition.setdefault(partition, []).append(value["transactionId"])
    order = [r["transactionId"] for r in expected]
    for ids in by_partition.values():
        assert ids == sorted(ids, key=order.index)
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        assert len(admin.describe_topics([topic])[0]["partitions"]) == settings.kafka.partitions
    finally:
        admin.close()
