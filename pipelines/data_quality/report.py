"""A data-quality run as a markdown report people read: a summary, the failures first, then every expectation.

Example::

    path = write_report(run_quality(spark, settings), default_report_path(settings))
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import great_expectations as gx

from pipelines.base.settings import Settings
from pipelines.data_quality.run import QualityRun, TableOutcome

_MARK = {"passed": "✅ passed", "failed": "❌ FAILED", "missing": "❌ MISSING", "skipped": "⏭️ skipped"}
PASS, FAIL = "✅ pass", "❌ FAIL"


def default_report_path(settings: Settings) -> Path:
    """``<lakehouse>/_reports/dq.md``, or under the work dir when the lakehouse is a URI (abfss://, s3://)."""
    root = settings.lakehouse_root
    base = Path(settings.work_dir) if "://" in root else Path(root)
    return base / "_reports" / "dq.md"


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table_section(outcome: TableOutcome) -> list[str]:
    lines = [f"## {outcome.table}: {_MARK[outcome.status]}", "", f"`{outcome.path}`"]
    if outcome.message:
        lines += ["", outcome.message]
    if outcome.expectations:
        lines += [
            "",
            f"{outcome.rows} rows, {len(outcome.expectations)} expectations, {len(outcome.failed)} failed.",
            "",
            "| result | expectation | column | what it guards | observed |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {PASS if e.success else FAIL} | {_cell(e.expectation)} | {_cell(e.columns)} "
            f"| {_cell(e.description)} | {_cell(e.observed)} |"
            for e in outcome.expectations
        ]
    return [*lines, ""]


def render_markdown(run: QualityRun) -> str:
    """The report text. Each failed expectation is listed under "Failures" and marked FAIL in its table."""
    verdict = "PASSED" if run.success else "FAILED"
    parameters = ", ".join(f"`{k} = {v}`" for k, v in sorted(run.parameters.items())) or "none"
    lines = [
        f"# fraudlake data quality: {verdict}",
        "",
        f"- lakehouse: `{run.lakehouse}`",
        f"- run at {run.started_at:%Y-%m-%d %H:%M:%S} UTC in {run.seconds:.1f} s, Great Expectations {gx.__version__}",
        f"- suite parameters: {parameters}",
        "- suites: `conf/expectations/*.json`, built by `pipelines/data_quality/suites.py`",
        "",
        "| table | status | rows | expectations | failed |",
        "|---|---|---|---|---|",
    ]
    for t in run.tables:
        rows = "" if t.rows is None else t.rows
        lines.append(f"| {t.table} | {_MARK[t.status]} | {rows} | {len(t.expectations)} | {len(t.failed)} |")
    failures = [f"- `{t.table}`: {t.message}" for t in run.tables if t.status == "missing"] + [
        f"- `{t.table}` · `{e.expectation}` on `{e.columns}`: {e.description} ({e.observed})"
        for t in run.tables
        for e in t.failed
    ]
    if failures:
        lines += ["", "## Failures", "", *failures]
    lines.append("")
    for outcome in run.tables:
        lines += _table_section(outcome)
    return "\n".join(lines)


OUTCOME_SCHEMA = (
    "table string, status string, success boolean, expectation string, columns string, description string,"
    " observed string"
)
"""Spark schema of ``outcome_rows`` (for ``display`` in a notebook)."""


def outcome_rows(run: QualityRun) -> list[dict[str, Any]]:
    """One row per expectation (and per missing table), failures first: a frame people can sort and filter."""
    rows: list[dict[str, Any]] = []
    for t in run.tables:
        if not t.expectations:
            rows.append(
                {
                    "table": t.table,
                    "status": t.status,
                    "success": t.status != "missing",
                    "expectation": "",
                    "columns": "",
                    "description": t.message,
                    "observed": "",
                }
            )
        rows += [
            {
                "table": t.table,
                "status": t.status,
                "success": e.success,
                "expectation": e.expectation,
                "columns": e.columns,
                "description": e.description,
                "observed": e.observed,
            }
            for e in t.expectations
        ]
    return sorted(rows, key=lambda row: row["success"])


def write_report(run: QualityRun, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_markdown(run))
    return path
