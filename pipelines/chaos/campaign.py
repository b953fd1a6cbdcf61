"""A fault campaign over the live path: load held, parts killed in turn and restarted, recovery timed, rules
edited with SQL, bad input sent; then, once every part is back and the input drained, the end checks.

Steps, in order: start the rules CDC job and the engine (subprocesses), start the load, wait for the engine's
first batch; send the bad input; then walk the timeline (the planned SQL edits and faults, one at a time: each
fault is a kill, a restart and a wait until the part's progress resumes); stop the load; drain (the engine and
the rules job have committed every record on their topics); stop the jobs; run the checks.

Recovery, per part, is from the signal until its progress resumes: the engine's next batch in ``batch_log``; the
rules job's next rules-table commit (a probe edit made while it is down); Debezium's next event on the rules
topic (a probe edit, for a Connect or a PostgreSQL fault); the broker's next accepted transaction.

Example::

    report = run_campaign(stack, ChaosConfig(seconds=120, seed=7), spark=lambda: session, say=print)
    report.passed
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaProducer
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipelines.base.kafka_clients import ensure_topics, python_client_config
from pipelines.chaos.bad_inputs import BadInput, rule_inputs, transaction_inputs
from pipelines.chaos.checks import (
    AlertsCheck,
    RulesCheck,
    TransactionsCheck,
    alerts_check,
    rules_check,
    transactions_check,
)
from pipelines.chaos.load import Load
from pipelines.chaos.parts import LiveStack
from pipelines.chaos.plan import EDITS, ChaosConfig, Edit, Fault, edit_times, plan_faults, probe_edit
from pipelines.chaos.progress import caught_up, committed_offsets, delta_version, end_offsets, topic_positions

RECOVERY_WAIT_S = 300.0
"""Longest wait for a part's progress to resume after its restart; past it the fault is reported unrecovered."""
DRAIN_WAIT_S = 300.0
MEASURED = {
    "engine": "next batch committed (batch_log)",
    "rules_job": "probe edit applied (rules table commit)",
    "connect": "probe edit on the rules topic (Debezium's next event)",
    "postgres": "probe edit on the rules topic (Debezium's next event)",
    "broker": "next transaction accepted (transactions topic)",
}


@dataclass(frozen=True)
class FaultOutcome:
    part: str
    signal: str
    planned_s: float
    at_s: float  # seconds after the warm-up
    recovery_s: float | None  # None: not recovered within RECOVERY_WAIT_S
    measured: str
    note: str = ""


@dataclass(frozen=True)
class BadInputFate:
    name: str
    topic: str
    where: str  # 'quarantined' | 'refused by the producer' | 'rules table' | 'bronze' | 'not found'
    reason: str
    forged: bool = False


@dataclass
class CampaignReport:
    config: ChaosConfig
    faults: list[FaultOutcome] = field(default_factory=list)
    edits: list[tuple[float, str]] = field(default_factory=list)
    bad_inputs: list[BadInputFate] = field(default_factory=list)
    offered: int = 0
    acked: int = 0
    failed: int = 0
    load_seconds: float = 0.0
    rules: RulesCheck | None = None
    transactions: TransactionsCheck | None = None
    alerts: AlertsCheck | None = None
    drained: bool = False
    seconds: float = 0.0

    @property
    def bad_inputs_placed(self) -> bool:
        """Every bad input, forged positions included, was refused or quarantined."""
        return all(f.where in ("quarantined", "refused by the producer") for f in self.bad_inputs)

    @property
    def passed(self) -> bool:
        return bool(
            self.drained
            and all(f.recovery_s is not None for f in self.faults)
            and self.rules is not None
            and self.rules.equal
            and self.transactions is not None
            and self.transactions.lost == self.transactions.doubled == 0
            and self.alerts is not None
            and self.alerts.equal
            and self.bad_inputs_placed
        )


class Campaign:
    """One run: the stack, the plan, the load, and what was observed so far."""

    def __init__(self, stack: LiveStack, config: ChaosConfig, say: Callable[[str], None]) -> None:
        self.stack, self.config, self.say = stack, config, say
        self.settings = stack.settings
        self.topics = self.settings.kafka.topics
        self.report = CampaignReport(config)
        self.t0 = time.monotonic()
        self.probes = 0
        self.sent: list[tuple[BadInput, int | None, int | None, str]] = []

    def now(self) -> float:
        return time.monotonic() - self.t0

    # ---- progress ------------------------------------------------------------------------------------------

    def _ends(self, topic: str) -> int | None:
        ends = end_offsets(self.settings, topic)
        return None if ends is None else sum(ends.values())

    def _wait(self, what: str, probe: Callable[[], bool], seconds: float, every: float = 0.5) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if probe():
                return True
            time.sleep(every)
        self.say(f"chaos: gave up waiting for {what} after {seconds:.0f} s")
        return False

    def edit(self, edit: Edit) -> None:
        self.stack.db.psql(["-c", edit.sql], role="operator")  # an operator's direct edit, not the superuser's
        self.report.edits.append((round(self.now(), 1), edit.what))
        self.say(f"chaos: {self.now():6.1f} s  SQL edit: {edit.what}")

    def probe(self) -> None:
        self.probes += 1
        self.edit(probe_edit(self.probes))

    # ---- a fault -------------------------------------------------------------------------------------------

    def fault(self, fault: Fault) -> None:
        stack, part = self.stack, fault.part
        at = self.now()
        self.say(f"chaos: {at:6.1f} s  {fault.signal.name} -> {part}")
        killed = time.monotonic()
        notes = [stack.kill(part, fault.signal)]
        rules_topic, tx_topic = self.topics.rules, self.topics.transactions
        if part == "engine":
            base = delta_version(self.settings.table_path("batch_log"))
            notes.append(stack.restart(part))

            def progressed() -> bool:
                return delta_version(self.settings.table_path("batch_log")) > base
        elif part == "rules_job":
            base = delta_version(self.settings.table_path("rules"))
            self.probe()
            notes.append(stack.restart(part))

            def progressed() -> bool:
                return delta_version(self.settings.table_path("rules")) > base
        elif part == "connect":
            events = self._ends(rules_topic) or 0
            self.probe()
            notes.append(stack.restart(part))

            def progressed() -> bool:
                return (self._ends(rules_topic) or 0) > events
        elif part == "postgres":
            events = self._ends(rules_topic) or 0
            notes.append(stack.restart(part))
            self.probe()

            def progressed() -> bool:
                if (self._ends(rules_topic) or 0) > events:
                    return True
                note = stack.connector_note()
                if note and note not in notes:
                    notes.append(note)
                return False
        else:
            notes.append(stack.restart(part))
            accepted = self._ends(tx_topic) or 0

            def progressed() -> bool:
                return (self._ends(tx_topic) or 0) > accepted

        ok = self._wait(f"{part} to make progress", progressed, RECOVERY_WAIT_S)
        recovery = round(time.monotonic() - killed, 1) if ok else None
        outcome = FaultOutcome(
            part,
            fault.signal.name,
            fault.at_s,
            round(at, 1),
            recovery,
            MEASURED[part],
            "; ".join(n for n in notes if n),
        )
        self.report.faults.append(outcome)
        self.say(f"chaos: {self.now():6.1f} s  {part} recovered in {recovery} s {outcome.note}".rstrip())

    # ---- bad input -----------------------------------------------------------------------------------------

    def send_bad_inputs(self) -> None:
        now_ms = int(time.time() * 1000)
        producer: Any = KafkaProducer(**python_client_config(self.settings), acks="all")
        try:
            for bad in [*rule_inputs(now_ms), *transaction_inputs(now_ms)]:
                topic = self.topics.rules if bad.topic == "rules" else self.topics.transactions
                key = None if bad.rule_id is None else f'{{"rule_id":{bad.rule_id}}}'.encode()
                try:
                    meta = producer.send(topic, key=key, value=bad.value).get(timeout=60)
                except Exception as error:  # the broker's or the producer's refusal is a fate too
                    self.sent.append((bad, None, None, f"{type(error).__name__}: {str(error)[:200]}"))
                    continue
                self.sent.append((bad, int(meta.partition), int(meta.offset), ""))
        finally:
            producer.close(timeout=10)
        self.say(f"chaos: {self.now():6.1f} s  sent {len(self.sent)} bad inputs to the rules and transactions topics")

    def bad_input_fates(self, spark: SparkSession) -> list[BadInputFate]:
        quarantine = spark.read.format("delta").load(self.settings.table_path("quarantine"))
        reasons = {r["sourceOffset"]: r["reason"] for r in quarantine.select("sourceOffset", "reason").collect()}
        rules = spark.read.format("delta").load(self.settings.table_path("rules"))
        bronze = spark.read.format("delta").load(self.settings.table_path("bronze_transactions"))
        fates = []
        for bad, partition, offset, refusal in self.sent:
            topic = self.topics.rules if bad.topic == "rules" else self.topics.transactions
            if partition is None:
                fates.append(BadInputFate(bad.name, bad.topic, "refused by the producer", refusal, bad.forged))
                continue
            where = f"kafka:{topic}/{partition}/{offset}"
            if where in reasons:
                fates.append(BadInputFate(bad.name, bad.topic, "quarantined", reasons[where], bad.forged))
                continue
            if bad.topic == "rules" and bad.rule_id is not None:
                found = rules.where(F.col("ruleId") == bad.rule_id).select("ruleState", "sourcePosition").collect()
                if found:
                    state, position = found[0]["ruleState"], found[0]["sourcePosition"]
                    text = f"applied as rule {bad.rule_id}: {state}, position {position!r}"
                    fates.append(BadInputFate(bad.name, bad.topic, "rules table", text, bad.forged))
                    continue
            if bad.topic == "transactions":
                hit = bronze.where((F.col("kafkaPartition") == partition) & (F.col("kafkaOffset") == offset)).count()
                if hit:
                    fates.append(BadInputFate(bad.name, bad.topic, "bronze", "accepted as a transaction", bad.forged))
                    continue
            fates.append(BadInputFate(bad.name, bad.topic, "not found", f"offset {where}", bad.forged))
        return fates

    # ---- the run -------------------------------------------------------------------------------------------

    def drain(self) -> bool:
        """Wait until Debezium has nothing more to send and both jobs committed every record of their topics."""
        engine_ckpt = self.settings.checkpoint_path("engine-kafka")
        rules_ckpt = f"{self.settings.checkpoint_path('rules_cdc')}/kafka"
        last: list[int | None] = [None, None]

        def rules_settled() -> bool:
            ends = self._ends(self.topics.rules)
            stable = ends is not None and ends == last[0]
            last[0] = ends
            return stable

        settled = self._wait("the rules topic to settle", rules_settled, DRAIN_WAIT_S, every=5.0)
        self.say(f"chaos: {self.now():6.1f} s  rules topic settled")
        rules_done = self._wait(
            "the rules job to catch up",
            lambda: caught_up(
                committed_offsets(rules_ckpt, self.topics.rules), end_offsets(self.settings, self.topics.rules)
            ),
            DRAIN_WAIT_S,
        )
        self.say(f"chaos: {self.now():6.1f} s  rules job caught up")
        engine_done = self._wait(
            "the engine to catch up",
            lambda: caught_up(
                committed_offsets(engine_ckpt, self.topics.transactions),
                end_offsets(self.settings, self.topics.transactions),
            ),
            DRAIN_WAIT_S,
        )
        return settled and rules_done and engine_done


def run_campaign(
    stack: LiveStack, config: ChaosConfig, *, spark: Callable[[], SparkSession], say: Callable[[str], None] = print
) -> CampaignReport:
    """Run the campaign on a started stack (broker, PostgreSQL with the rules, Connect with the connector)."""
    started = time.monotonic()
    campaign = Campaign(stack, config, say)
    settings, report = stack.settings, campaign.report
    topics = settings.kafka.topics
    ensure_topics(settings, [topics.transactions, topics.rules])
    stack.start_job("rules_job")
    stack.start_job("engine")
    load = Load(settings, rate=config.rate, seed=config.seed, fraud_rate=config.fraud_rate)
    load.start()
    try:
        say(f"chaos: seed {config.seed}, {config.rate:g} tx/s for {config.seconds:g} s; waiting for the first batch")
        batch_log = settings.table_path("batch_log")
        if not campaign._wait("the engine's first batch", lambda: delta_version(batch_log) > 0, RECOVERY_WAIT_S):
            raise RuntimeError(f"the engine committed no batch; see {stack.logs}/engine.log")
        time.sleep(config.warmup_seconds)
        campaign.t0 = time.monotonic()
        campaign.send_bad_inputs()
        timeline: list[tuple[float, Edit | Fault]] = [(t, e) for t, e in zip(edit_times(config), EDITS, strict=True)]
        timeline += [(f.at_s, f) for f in plan_faults(config)]
        for due, step in sorted(timeline, key=lambda item: item[0]):
            wait = due - campaign.now()
            if wait > 0:
                time.sleep(wait)
            if isinstance(step, Fault):
                campaign.fault(step)
            else:
                campaign.edit(step)
        rest = config.seconds - campaign.now()
        if rest > 0:
            time.sleep(rest)
    finally:
        load.stop()
    report.offered, report.acked, report.failed = load.sink.offered, load.sink.acked, load.sink.failed
    report.load_seconds = round(load.seconds, 1)
    say(f"chaos: {campaign.now():6.1f} s  load stopped ({report.acked} of {report.offered} accepted); draining")
    report.drained = campaign.drain()
    say(f"chaos: {campaign.now():6.1f} s  drained: {'yes' if report.drained else 'NO'}; stopping the jobs")
    stack.stop_jobs()
    say(f"chaos: {campaign.now():6.1f} s  jobs stopped; checking")
    session = spark()
    forged = {b.rule_id for b, *_ in campaign.sent if b.forged and b.rule_id is not None}
    bad_ids = {b.rule_id for b, *_ in campaign.sent if b.rule_id is not None}
    report.rules = rules_check(session, settings, stack.db, ignore=bad_ids | forged)
    report.transactions = transactions_check(
        session, settings, topic_positions(settings, topics.transactions), topics.transactions
    )
    report.alerts = alerts_check(session, settings)
    report.bad_inputs = campaign.bad_input_fates(session)
    report.seconds = round(time.monotonic() - started, 1)
    say(f"chaos: {campaign.now():6.1f} s  checked")
    return report
