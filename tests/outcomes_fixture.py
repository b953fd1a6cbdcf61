"""The two weeks of alerts and labels that the outcomes tests compute by hand (tests/test_outcomes.py's docstring).

Ten transactions in the ISO week of Monday 2024-02-26 (t1..t10, at BASE, a Friday), four in the next (t11..t14).
Rule 1 alerts on t1-t4 and t11, rule 2 on t1 and t5. The chargebacks file labels t1, t6 and t11; ``extra_rows``
adds lines to it (already formatted as ``transactionId,labelledAt,reason``).

Example::

    labels = two_weeks(spark, settings, folder)      # the lakehouse's bronze and alerts, and the CSV's path
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from dq_tables import BASE, alert, append, transaction
from engine_fixtures import make_rule
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession

from pipelines.base.settings import Settings

LATER = BASE + dt.timedelta(days=7)
WEEK1, WEEK2 = dt.datetime(2024, 2, 26), dt.datetime(2024, 3, 4)
LABEL_ROWS = ("t1,2024-03-20T10:00:00,4837", "t6,2024-03-22T10:00:00,10.4", "t11,2024-03-29T10:00:00,4863")


def fixture_alert(rule_id: int, tx: str, when: dt.datetime = BASE) -> dict[str, object]:
    return {**alert(f"{rule_id}:{tx}", make_rule(rule_id), "100"), "transactionId": tx, "eventTime": when}


def two_weeks(spark: SparkSession, settings: Settings, folder: Path, *, extra_rows: tuple[str, ...] = ()) -> Path:
    """Create the lakehouse with the fixture's bronze rows and alerts; write the labels CSV; return its path."""
    fresh_lakehouse(spark, settings)
    txs = [transaction(f"t{i}", "10") for i in range(1, 11)]
    txs += [transaction(f"t{i}", "10", event=LATER) for i in range(11, 15)]
    append(spark, settings, "bronze_transactions", txs)
    alerts = [fixture_alert(1, t) for t in ("t1", "t2", "t3", "t4")] + [fixture_alert(1, "t11", LATER)]
    alerts += [fixture_alert(2, "t1"), fixture_alert(2, "t5")]
    append(spark, settings, "alerts", alerts)
    labels = folder / "chargebacks.csv"
    labels.write_text("\n".join(("transactionId,labelledAt,reason", *LABEL_ROWS, *extra_rows)) + "\n")
    return labels
