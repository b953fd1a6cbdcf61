"""The alerts dashboard: Spark aggregates on real alert rows, chart functions on small frames, notebook 03."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from pyspark.sql import SparkSession

from delta_tables.alerts import ALERTS, ALERTS_SCHEMA
from delta_tables.table_spec import create_table
from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.dashboard.aggregates import DashboardData, choose_grain, dashboard_data, read_alerts
from pipelines.dashboard.charts import (
    NO_ALERTS,
    aggregate_vs_limit_chart,
    alerts_over_time_chart,
    dashboard_figures,
    default_dashboard_dir,
    format_ms,
    format_number,
    latency_chart,
    save_figures,
    top_keys_chart,
)
from pipelines.notebook_tools.runner import NOTEBOOKS_DIR, run_notebook

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CHARTS = ["alerts_over_time", "top_keys", "aggregate_vs_limit", "latency"]
T0 = dt.datetime(2024, 11, 22, 10, 0)


def alert(rule_id: int, key: str, second: int, aggregate: str, limit: int, latency_ms: int | None) -> dict[str, Any]:
    """An ALERTS_SCHEMA row whose event time is ``second`` seconds after 10:00."""
    event = T0 + dt.timedelta(seconds=second)
    detected = event + dt.timedelta(seconds=5)
    return {
        "alertId": f"{rule_id}:t{second}",
        "ruleId": rule_id,
        "ruleSourcePosition": "ts:1",
        "ruleSnapshot": "{}",
        "rulesVersion": 1,
        "keyValue": key,
        "transactionId": f"t{second}",
        "eventTime": event,
        "aggregateValue": Decimal(aggregate),
        "aggregatorFunctionType": "SUM",
        "limitOperatorType": "GREATER_EQUAL",
        "limit": Decimal(limit),
        "windowMinutes": 5,
        "detectedAt": detected,
        "batchId": 0,
        "ingestedAt": None if latency_ms is None else detected - dt.timedelta(milliseconds=latency_ms),
        "latencyMs": latency_ms,
        "detectedDate": detected.date(),
    }


# Rule 2: three alerts on one key in minutes 10:00 (two) and 10:02; rule 6: one alert each on two keys,
# in minutes 10:01 and 10:03. Latencies fall in the log bins 11 (800 ms), 12 (1.2 s, 1.5 s) and 17 (30 s).
ALERTS_ROWS = [
    alert(2, "[7]", 10, "20", 20, 800),
    alert(2, "[7]", 40, "21", 20, 1200),
    alert(2, "[7]", 125, "25", 20, 1500),
    alert(6, "[9]", 90, "72000.5", 50000, 30000),
    alert(6, "[8]", 180, "50001", 50000, None),
]


def test_aggregates_notebook_and_pngs_on_real_alert_rows(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    path = settings.table_path(ALERTS.name)
    create_table(spark, ALERTS, path)
    spark.createDataFrame(ALERTS_ROWS, ALERTS_SCHEMA).write.format("delta").mode("append").save(path)

    data = dashboard_data(read_alerts(spark, settings), top_n=2)
    assert (data.total_alerts, data.grain) == (5, "minute")
    over_time = [
        (r.bucket.to_pydatetime(), r.ruleId, r.alerts, r.minAggregate, r.maxAggregate, r.limit)
        for r in data.over_time.itertuples()
    ]
    minute = dt.timedelta(minutes=1)
    assert over_time == [
        (T0, 2, 2, 20.0, 21.0, 20.0),
        (T0 + minute, 6, 1, 72000.5, 72000.5, 50000.0),
        (T0 + 2 * minute, 2, 1, 25.0, 25.0, 20.0),
        (T0 + 3 * minute, 6, 1, 50001.0, 50001.0, 50000.0),
    ]
    assert data.top_keys.to_dict("records") == [
        {"ruleId": 2, "keyValue": "[7]", "alerts": 3},
        {"ruleId": 6, "keyValue": "[8]", "alerts": 1},  # ties: by rule, then key
    ]
    assert data.latency_bins[["bin", "alerts"]].to_dict("records") == [
        {"bin": 11, "alerts": 1},
        {"bin": 12, "alerts": 2},
        {"bin": 17, "alerts": 1},
    ]
    assert data.latency_bins["lowerMs"].tolist() == pytest.approx([10**2.75, 10**3, 10**4.25])
    assert set(data.latency_percentiles) == {"p50", "p95", "p99"}
    assert data.per_rule()[["ruleId", "alerts"]].values.tolist() == [[2, 3], [6, 2]]
    assert read_alerts(spark, settings, since_hours=1).count() == 0  # all detected in 2024

    out = tmp_path / "dashboard"
    result = run_notebook(
        NOTEBOOKS_DIR / "03_alerts_dashboard.py",
        spark,
        parameters={
            "conf": str(REPO_ROOT / "conf" / "local.yaml"),
            "lakehouse": settings.lakehouse_root,
            "output_dir": str(out),
            "top_n": "2",
        },
        output_dir=tmp_path / "shown",
    )
    for name in CHARTS:
        assert (out / f"{name}.png").read_bytes().startswith(PNG_MAGIC), name
        assert colored_pixels(out / f"{name}.png") > 50, name  # data drawn in rule colors, not "no alerts yet"
    assert [o.kind for o in result.outputs] == ["table", "image", "image", "image", "image"]
    assert [line.split()[:2] for line in result.outputs[0].text.splitlines()] == [
        ["ruleId", "alerts"],
        ["2", "3"],
        ["6", "2"],
    ]


def test_empty_alerts_give_charts_that_say_so(spark: SparkSession, tmp_path: Path) -> None:
    data = dashboard_data(spark.createDataFrame([], ALERTS_SCHEMA))
    assert data.total_alerts == 0 and data.over_time.empty and data.latency_percentiles == {}
    figures = dashboard_figures(data)
    assert list(figures) == CHARTS
    for name, figure in figures.items():
        assert NO_ALERTS in texts(figure), name
    paths = save_figures(figures, tmp_path / "png")
    assert [p.name for p in paths] == [f"{name}.png" for name in CHARTS]
    assert all(p.read_bytes().startswith(PNG_MAGIC) and colored_pixels(p) == 0 for p in paths)
    with pytest.raises(ValueError, match="is a URI"):
        save_figures(figures, "abfss://lake@acct.dfs.core.windows.net/reports")

    three_days = spark.createDataFrame(
        [alert(2, "[7]", 0, "20", 20, 5), alert(2, "[7]", 3 * 86400, "20", 20, 5)], ALERTS_SCHEMA
    )
    with pytest.raises(ValueError, match="4321 minute buckets is too many"):
        dashboard_data(three_days, grain="minute")
    with pytest.raises(ValueError, match="grain 'week' is not one of"):
        dashboard_data(three_days, grain="week")


def colored_pixels(png: Path) -> int:
    """Pixels of clearly saturated color: the charts draw data in rule colors, text and frames in black and gray."""
    rgb = mpimg.imread(png)[:, :, :3]
    return int(((rgb.max(axis=2) - rgb.min(axis=2)) > 0.3).sum())


def texts(figure: Figure) -> list[str]:
    return [t.get_text() for ax in figure.axes for t in ax.texts]


def over_time_frame() -> pd.DataFrame:
    """Two rules over minutes 10:00-10:04: rule 2 alerts in 10:00 and 10:02, rule 6 in 10:01 and 10:04; so 10:03
    has no alert at all (the frame, as Spark aggregates it, has no row for it)."""
    buckets = pd.to_datetime(["2024-11-22 10:00", "2024-11-22 10:02", "2024-11-22 10:01", "2024-11-22 10:04"])
    return pd.DataFrame(
        {
            "bucket": buckets,
            "ruleId": [2, 2, 6, 6],
            "alerts": [2, 1, 1, 4],
            "minAggregate": [20.0, 25.0, 72000.5, 50001.0],
            "avgAggregate": [20.5, 25.0, 72000.5, 60000.0],
            "maxAggregate": [21.0, 25.0, 72000.5, 70000.0],
            "limit": [20.0, 22.0, 50000.0, 50000.0],
        }
    )


def test_alerts_over_time_draws_one_line_per_rule_with_empty_buckets_as_zero() -> None:
    (ax,) = alerts_over_time_chart(over_time_frame(), "minute").axes
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["rule 2 (3)", "rule 6 (5)"]
    assert [list(line.get_ydata()) for line in lines] == [[2, 0, 1, 0, 0], [0, 1, 0, 0, 4]]
    assert all(len(line.get_xdata()) == 5 for line in lines)
    hourly = alerts_over_time_chart(over_time_frame().assign(bucket=pd.to_datetime(["2024-11-22 10:00"] * 4)), "hour")
    assert [list(line.get_ydata()) for line in hourly.axes[0].get_lines()] == [[3], [5]]


def test_top_keys_draws_one_bar_per_key_most_alerted_first() -> None:
    frame = pd.DataFrame({"ruleId": [2, 6, 6], "keyValue": ["[7]", "[8]", "[" + "9" * 60 + "]"], "alerts": [5, 3, 3]})
    (ax,) = top_keys_chart(frame).axes
    bars = ax.patches
    assert [bar.get_width() for bar in bars] == [5, 3, 3]
    assert len({bar.get_facecolor() for bar in bars}) == 2  # one color per rule
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[:2] == ["[7] · rule 2", "[8] · rule 6"] and labels[2].endswith("… · rule 6")
    assert ax.yaxis_inverted()


def test_aggregate_vs_limit_has_a_panel_per_rule_with_each_limit_drawn() -> None:
    figure = aggregate_vs_limit_chart(over_time_frame(), "minute")
    panels = {ax.get_title(): ax for ax in figure.axes}
    assert list(panels) == ["rule 2", "rule 6"]
    limits = {title: [line.get_ydata()[0] for line in ax.get_lines()] for title, ax in panels.items()}
    assert limits == {"rule 2": [20.0, 22.0], "rule 6": [50000.0]}  # rule 2's limit changed between buckets
    maxima = panels["rule 6"].collections[-1].get_offsets()[:, 1]  # the scatter of per-bucket maxima
    assert list(maxima) == [72000.5, 70000.0]


def test_latency_histogram_bars_and_percentile_lines() -> None:
    bins = pd.DataFrame({"bin": [11, 12, 17], "lowerMs": [10**2.75, 1000.0, 10**4.25]})
    bins["upperMs"] = bins["lowerMs"] * 10**0.25
    bins["alerts"] = [1, 2, 1]
    (ax,) = latency_chart(bins, {"p50": 1200.0, "p95": 30000.0, "p99": 30000.0}).axes
    assert [bar.get_height() for bar in ax.patches] == [1, 2, 1]
    assert np.allclose([bar.get_x() for bar in ax.patches], bins["lowerMs"])
    assert [line.get_label() for line in ax.get_lines()] == ["p50 1.2 s", "p95 30 s", "p99 30 s"]
    assert ax.get_xscale() == "log"
    assert [format_ms(v) for v in (250, 2500, 100_000, 900_000)] == ["250 ms", "2.5 s", "100 s", "15 min"]
    assert [format_number(v) for v in (1_000_000, 72000.5, 20.5)] == ["1,000,000", "72,000", "20.5"]


def test_grain_and_output_folder_defaults(settings: Settings) -> None:
    assert choose_grain(None, None) == "minute"
    assert choose_grain(T0, T0 + dt.timedelta(hours=3)) == "minute"
    assert choose_grain(T0, T0 + dt.timedelta(hours=4)) == "hour"
    assert choose_grain(T0, T0 + dt.timedelta(days=8)) == "day"
    assert default_dashboard_dir(settings) == Path(settings.lakehouse_root) / "_reports" / "dashboard"
    remote = settings.with_lakehouse("abfss://lake@acct.dfs.core.windows.net/fraudlake")
    assert default_dashboard_dir(remote) == Path(settings.work_dir) / "_reports" / "dashboard"
    empty = DashboardData(0, "minute", pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), {})
    assert list(empty.per_rule().columns) == ["ruleId", "alerts", "firstBucket", "lastBucket", "limit"]
