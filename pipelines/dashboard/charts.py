"""The dashboard's charts: pure functions from small pandas frames (``aggregates``) to matplotlib Figures.

Figures are built with the object-oriented API on an Agg canvas, never through ``pyplot``: they need no
display and no global backend, leave no open figures behind, and ``display(fig)`` still shows them in a
Databricks notebook. An empty frame gives a figure that says "no alerts yet" instead of an empty axis.

Example::

    figures = dashboard_figures(dashboard_data(read_alerts(spark, settings)))
    save_figures(figures, default_dashboard_dir(settings))   # alerts_over_time.png, top_keys.png, ...
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from pipelines.base.settings import Settings
from pipelines.dashboard.aggregates import DashboardData

NO_ALERTS = "no alerts yet"
MAX_PANELS = 9
"""Aggregate-vs-limit panels: the rules with most alerts; the rest are named in the title."""
_FREQUENCY = {"minute": "min", "hour": "h", "day": "D"}
_KEY_LABEL_CHARS = 40


def new_figure(width: float = 10.0, height: float = 5.0) -> Figure:
    """A Figure on its own Agg canvas (works headless; not registered with pyplot)."""
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def rule_color(rule_id: int) -> Any:
    """The same color for a rule in every chart."""
    return colormaps["tab10"](int(rule_id) % 10)


def placeholder(title: str, message: str = NO_ALERTS) -> Figure:
    """A chart with nothing to draw: its title and the message in the middle."""
    figure = new_figure(height=3.0)
    ax = figure.add_subplot()
    ax.set_title(title)
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=16, color="gray", transform=ax.transAxes)
    ax.set_axis_off()
    return figure


def alerts_over_time_chart(over_time: pd.DataFrame, grain: str) -> Figure:
    """One line per rule: alerts per ``grain`` bucket of event time, buckets without alerts drawn as 0."""
    title = f"Alerts per {grain} by rule (event time)"
    if over_time.empty:
        return placeholder(title)
    counts = over_time.pivot_table(index="bucket", columns="ruleId", values="alerts", aggfunc="sum", fill_value=0)
    buckets = pd.date_range(counts.index.min(), counts.index.max(), freq=_FREQUENCY[grain])
    counts = counts.reindex(buckets, fill_value=0)
    figure = new_figure()
    ax = figure.add_subplot()
    marker = "o" if len(buckets) <= 40 else None
    for rule_id in counts.columns:
        series = counts[rule_id]
        label = f"rule {rule_id} ({int(series.sum())})"
        ax.plot(buckets, series.to_numpy(), marker=marker, color=rule_color(rule_id), label=label)
    ax.set_title(title)
    ax.set_ylabel("alerts")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(alpha=0.3)
    figure.autofmt_xdate()
    return figure


def top_keys_chart(top_keys: pd.DataFrame) -> Figure:
    """Horizontal bars, most alerted (rule, key) first, colored by rule, each with its count."""
    title = "Top keys by alert count"
    if top_keys.empty:
        return placeholder(title)
    figure = new_figure(height=max(3.0, 0.4 * len(top_keys) + 1.2))
    ax = figure.add_subplot()
    labels = [f"{_short(str(k))} · rule {r}" for r, k in zip(top_keys["ruleId"], top_keys["keyValue"], strict=True)]
    positions = list(range(len(labels)))  # not the labels: two keys cut to the same label stay two bars
    bars = ax.barh(positions, top_keys["alerts"], color=[rule_color(r) for r in top_keys["ruleId"]])
    ax.set_yticks(positions, labels)
    ax.bar_label(bars, padding=3)
    ax.invert_yaxis()
    ax.set_title(title)
    ax.set_xlabel("alerts")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return figure


def aggregate_vs_limit_chart(over_time: pd.DataFrame, grain: str) -> Figure:
    """One panel per rule: the alerting aggregate's min-max range and max per bucket, the limit dashed."""
    title = f"Aggregate value vs limit, per {grain} (range and max of alerting aggregates)"
    if over_time.empty:
        return placeholder(title)
    totals = over_time.groupby("ruleId")["alerts"].sum().sort_values(ascending=False, kind="stable")
    shown = sorted(totals.index[:MAX_PANELS])
    columns = min(3, len(shown))
    rows = math.ceil(len(shown) / columns)
    figure = new_figure(width=4.5 * columns + 1, height=3.2 * rows + 0.8)
    for position, rule_id in enumerate(shown, start=1):
        ax = figure.add_subplot(rows, columns, position)
        _limit_panel(ax, over_time[over_time["ruleId"] == rule_id].sort_values("bucket"), int(rule_id))
    hidden = len(totals) - len(shown)
    figure.suptitle(title + (f"; {hidden} more rule(s) not shown" if hidden else ""))
    return figure


def _limit_panel(ax: Axes, rule: pd.DataFrame, rule_id: int) -> None:
    color = rule_color(rule_id)
    ax.vlines(rule["bucket"], rule["minAggregate"], rule["maxAggregate"], color=color, alpha=0.5, linewidth=3)
    ax.scatter(rule["bucket"], rule["maxAggregate"], color=color, s=14, zorder=3, label="max aggregate")
    for limit in sorted(rule["limit"].dropna().unique()):
        ax.axhline(limit, color="black", linestyle="--", linewidth=1, label=f"limit {format_number(limit)}")
    ax.set_title(f"rule {rule_id}", fontsize="medium")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: format_number(value)))
    ax.tick_params(axis="x", labelrotation=30, labelsize="small")
    ax.legend(fontsize="x-small", loc="best")
    ax.grid(alpha=0.3)


def latency_chart(latency_bins: pd.DataFrame, percentiles: Mapping[str, float]) -> Figure:
    """Histogram of detection latency (detected - ingested) on log-spaced bins, with p50/p95/p99 marked."""
    title = "Detection latency (latencyMs)"
    if latency_bins.empty:
        return placeholder(title)
    figure = new_figure()
    ax = figure.add_subplot()
    widths = latency_bins["upperMs"] - latency_bins["lowerMs"]
    ax.bar(latency_bins["lowerMs"], latency_bins["alerts"], width=widths, align="edge", color="tab:blue", alpha=0.8)
    for (name, value), style in zip(percentiles.items(), (":", "--", "-."), strict=False):
        ax.axvline(max(value, 1.0), color="tab:red", linestyle=style, label=f"{name} {format_ms(value)}")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: format_ms(value)))
    ax.set_title(title)
    ax.set_xlabel("latency")
    ax.set_ylabel("alerts")
    if percentiles:
        ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return figure


def format_ms(value: float) -> str:
    """``250 ms``, ``2.5 s``, ``100 s``, ``15 min``."""
    if value < 1000:
        return f"{value:.3g} ms"
    if value < 600_000:
        return f"{value / 1000:.3g} s"
    return f"{value / 60_000:.3g} min"


def format_number(value: float) -> str:
    """``1,250,000`` and ``50,000`` in full, small values with up to six significant digits (``20.5``)."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.6g}"


def dashboard_figures(data: DashboardData) -> dict[str, Figure]:
    """Every chart of the dashboard, by file name (without ``.png``)."""
    return {
        "alerts_over_time": alerts_over_time_chart(data.over_time, data.grain),
        "top_keys": top_keys_chart(data.top_keys),
        "aggregate_vs_limit": aggregate_vs_limit_chart(data.over_time, data.grain),
        "latency": latency_chart(data.latency_bins, data.latency_percentiles),
    }


def default_dashboard_dir(settings: Settings) -> Path:
    """``<lakehouse>/_reports/dashboard``, or under the work dir when the lakehouse is a URI (abfss://, s3://)."""
    root = settings.lakehouse_root
    base = Path(settings.work_dir) if "://" in root else Path(root)
    return base / "_reports" / "dashboard"


def save_figures(figures: Mapping[str, Figure], output_dir: str | Path) -> list[Path]:
    """Write each figure as ``<output_dir>/<name>.png`` (a local or mounted path such as /Volumes/...)."""
    if "://" in str(output_dir):
        raise ValueError(f"output_dir {output_dir} is a URI: matplotlib writes files, use a local or /Volumes path")
    directory = Path(output_dir)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, figure in figures.items():
        path = directory / f"{name}.png"
        figure.savefig(path, format="png", dpi=100)
        paths.append(path)
    return paths


def _short(text: str) -> str:
    return text if len(text) <= _KEY_LABEL_CHARS else text[: _KEY_LABEL_CHARS - 1] + "…"
