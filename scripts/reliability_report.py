"""Render the reliability tests' measured outcomes (JSON lines) into the table of docs/reliability.md.

The tests append one JSON object per scenario to ``$FRAUDLAKE_RELIABILITY_REPORT`` (see
``tests/reliability_support.py``); ``make reliability`` runs them with it set, then calls this script, which
replaces the text between the two markers of the doc with a Markdown table (the last outcome of each scenario).

Example::

    python scripts/reliability_report.py .work/reliability.jsonl docs/reliability.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

BEGIN, END = "<!-- reliability-table:begin -->", "<!-- reliability-table:end -->"
MAX_CELL = 160
COLUMNS = ("kind", "scenario", "in", "applied", "quarantined", "lost", "duplicated", "outcome", "seconds")


def read_outcomes(path: Path) -> list[dict[str, Any]]:
    """The outcomes in the file, the last one of each scenario, in first-seen order."""
    latest: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            latest.pop(row["scenario"], None)
            latest[row["scenario"]] = row
    order = {"fault": 0, "concurrency": 1, "bad input": 2, "fuzz": 3}
    return sorted(latest.values(), key=lambda row: order.get(row["kind"], 9))


def render_table(outcomes: list[dict[str, Any]]) -> str:
    """A Markdown table, one row per scenario, with a totals row for the counts."""

    def cell(value: Any) -> str:
        text = "" if value is None else str(value).replace("|", "\\|")
        return text if len(text) <= MAX_CELL else f"{text[: MAX_CELL - 1]}…"

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(row.get(column)) for column in COLUMNS) + " |" for row in outcomes]
    totals = {column: sum(int(row[column]) for row in outcomes) for column in COLUMNS[2:7]}
    lines.append("| **total** | | " + " | ".join(f"**{totals[c]}**" for c in COLUMNS[2:7]) + " | | |")
    stamp = max((row.get("recordedAt", "") for row in outcomes), default="")
    heading = f"Measured by the reliability tests (`make reliability`); last outcome recorded {stamp}."
    return "\n".join([heading, "", *lines])


def replace_between_markers(document: str, table: str) -> str:
    if BEGIN not in document or END not in document:
        raise ValueError(f"the document has no {BEGIN} ... {END} section")
    head, rest = document.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("outcomes", type=Path, help="JSON lines written by the reliability tests")
    parser.add_argument("doc", type=Path, help="the Markdown file to update (docs/reliability.md)")
    args = parser.parse_args(argv)
    outcomes = read_outcomes(args.outcomes)
    if not outcomes:
        print(f"no outcomes in {args.outcomes}", file=sys.stderr)
        return 1
    args.doc.write_text(replace_between_markers(args.doc.read_text(encoding="utf-8"), render_table(outcomes)))
    print(f"{args.doc}: {len(outcomes)} scenarios")
    return 0


if __name__ == "__main__":
    sys.exit(main())
