"""The campaign's report: a JSON document (everything measured) and a Markdown table (for docs/reliability.md).

Example::

    write_report(report, Path(".work/chaos"))     # chaos-report.json, chaos-report.md
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from pipelines.chaos.campaign import CampaignReport


def as_json(report: CampaignReport) -> dict[str, Any]:
    config = dataclasses.asdict(report.config)
    return {
        "recordedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": config,
        "passed": report.passed,
        "seconds": report.seconds,
        "load": {
            "offered": report.offered,
            "accepted": report.acked,
            "failed": report.failed,
            "seconds": report.load_seconds,
            "txPerSecond": round(report.acked / report.load_seconds, 1) if report.load_seconds else None,
        },
        "faults": [dataclasses.asdict(f) for f in report.faults],
        "edits": [{"atS": at, "what": what} for at, what in report.edits],
        "badInputs": [dataclasses.asdict(b) for b in report.bad_inputs],
        "drained": report.drained,
        "rules": dataclasses.asdict(report.rules) if report.rules else None,
        "transactions": dataclasses.asdict(report.transactions) if report.transactions else None,
        "alerts": dataclasses.asdict(report.alerts) if report.alerts else None,
    }


def _cell(value: Any, limit: int = 140) -> str:
    text = "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def as_markdown(report: CampaignReport) -> str:
    """Faults (part, signal, when, recovery), the load, the bad inputs and where each went, the end checks."""
    doc = as_json(report)
    load, tx, alerts, rules = doc["load"], report.transactions, report.alerts, report.rules
    lines = [
        f"Campaign of {doc['recordedAt']}: seed {report.config.seed}, {report.config.seconds:g} s planned, "
        f"{report.seconds:g} s in all; {'PASSED' if report.passed else 'FAILED'}.",
        "",
        f"Load held: {load['accepted']} transactions accepted by the broker of {load['offered']} offered "
        f"({load['failed']} failed at the producer) in {load['seconds']} s = **{load['txPerSecond']} tx/s** "
        f"(planned {report.config.rate:g} tx/s, fraud episodes at {report.config.fraud_rate:g} per arrival).",
        "",
        "| # | part | signal | at (s) | recovery (s) | measured until | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for n, f in enumerate(report.faults, start=1):
        recovery = "not recovered" if f.recovery_s is None else f"{f.recovery_s:.1f}"
        lines.append(f"| {n} | {f.part} | {f.signal} | {f.at_s:.1f} | {recovery} | {f.measured} | {_cell(f.note)} |")
    lines += ["", "| bad input | topic | went to | reason / detail |", "|---|---|---|---|"]
    for b in report.bad_inputs:
        lines.append(f"| {_cell(b.name)} | {b.topic} | {b.where} | {_cell(b.reason)} |")
    lines += ["", "| check | outcome |", "|---|---|"]
    if tx:
        lines.append(
            f"| transactions | {tx.on_topic} on the topic: {tx.in_bronze} in bronze, {tx.quarantined} quarantined; "
            f"**lost {tx.lost}, duplicated {tx.doubled}** (ids twice in bronze: {tx.doubled_ids}) |"
        )
    if alerts:
        lines.append(
            f"| alerts = reference evaluator | {alerts.alerts} alerts over {alerts.batches} committed batches, "
            f"{alerts.expected} expected; missing {alerts.missing}, extra {alerts.extra}, "
            f"doubled {alerts.doubled} {_cell('; '.join(alerts.examples))} |"
        )
    if rules:
        verdict = "**rules table = database**" if rules.equal else f"differs: {_cell('; '.join(rules.mismatches))}"
        lines.append(f"| rules | {rules.rules} rules in the database, {rules.tombstones} tombstones; {verdict} |")
    edits = ", ".join(f"{what} ({at:g} s)" for at, what in report.edits)
    lines.append(f"| SQL edits mid-run | {_cell(edits, 2000)} |")
    lines.append(f"| drained | {'yes' if report.drained else 'no'} |")
    return "\n".join(lines) + "\n"


def write_report(report: CampaignReport, folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    json_path, md_path = folder / "chaos-report.json", folder / "chaos-report.md"
    json_path.write_text(json.dumps(as_json(report), indent=2, default=str) + "\n")
    md_path.write_text(as_markdown(report))
    return json_path, md_path
