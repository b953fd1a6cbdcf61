"""The benchmark report: Markdown tables (one per scenario) and PNG charts, written to ``docs/``.

Pure of Spark: a ``Report`` is a list of sections, each with tables (``Table``: title, columns, rows of
already-formatted cells) and optional charts (``Chart``: named series of (x, y) points), plus the targets
(``Target``: met or not, with the figure). ``write_report`` renders ``benchmarks.md`` and one PNG per chart
(matplotlib, Agg backend: no display needed).

Example::

    report = Report(title="fraudlake benchmarks", preamble=["machine: 2 cores"])
    section = report.section("Throughput")
    section.tables.append(Table("rules", ["rules", "tx/s"], [["1", "2,100"], ["20", "1,800"]]))
    section.charts.append(Chart("throughput_rules", "tx/s vs rules", "rules", "tx/s", {"engine": [(1, 2100.0)]}))
    write_report(report, Path("docs/benchmarks.md"), chart_dir=Path("docs/benchmarks"))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""

    def markdown(self) -> str:
        if any(len(row) != len(self.columns) for row in self.rows):
            raise ValueError(f"table {self.title!r}: every row needs {len(self.columns)} cells")
        lines = [f"**{self.title}**", "", "| " + " | ".join(self.columns) + " |"]
        lines.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(self.columns))) + "|")
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in self.rows]
        if self.note:
            lines += ["", self.note]
        return "\n".join(lines)


@dataclass
class Chart:
    name: str  # file name without .png
    title: str
    xlabel: str
    ylabel: str
    series: dict[str, list[tuple[float, float]]]
    kind: str = "line"  # "line" or "bar" (bars: x values are category positions, labels from xticks)
    xticks: list[str] = field(default_factory=list)
    log_y: bool = False


@dataclass
class Target:
    what: str
    target: str
    measured: str
    met: bool | None  # None: not measured

    def row(self) -> list[str]:
        verdict = "not measured" if self.met is None else "**met**" if self.met else "**not met**"
        return [self.what, self.target, self.measured, verdict]


@dataclass
class Section:
    title: str
    text: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)


@dataclass
class Report:
    title: str
    preamble: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)

    def section(self, title: str) -> Section:
        self.sections.append(Section(title))
        return self.sections[-1]


def render_markdown(report: Report, *, chart_prefix: str) -> str:
    """The report as Markdown; charts are linked as ``<chart_prefix><name>.png``."""
    parts = [f"# {report.title}", "", *report.preamble, ""]
    if report.targets:
        targets = Table("Targets", ["what", "target", "measured", "verdict"], [t.row() for t in report.targets])
        parts += ["## Targets", "", targets.markdown(), ""]
    for section in report.sections:
        parts += [f"## {section.title}", ""]
        for paragraph in section.text:
            parts += [paragraph, ""]
        for table in section.tables:
            parts += [table.markdown(), ""]
        for chart in section.charts:
            parts += [f"![{chart.title}]({chart_prefix}{chart.name}.png)", ""]
    return "\n".join(parts).rstrip() + "\n"


def draw_chart(chart: Chart, path: Path) -> None:
    """One PNG per chart (matplotlib's Agg backend: no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    try:
        names = list(chart.series)
        if chart.kind == "bar":
            width = 0.8 / max(1, len(names))
            for i, name in enumerate(names):
                points = chart.series[name]
                axes.bar(
                    [x + (i - (len(names) - 1) / 2) * width for x, _ in points],
                    [y for _, y in points],
                    width,
                    label=name,
                )
            if chart.xticks:
                axes.set_xticks(range(len(chart.xticks)), chart.xticks)
        else:
            for name in names:
                points = sorted(chart.series[name])
                axes.plot([x for x, _ in points], [y for _, y in points], marker="o", label=name)
            if chart.xticks:
                axes.set_xticks(range(len(chart.xticks)), chart.xticks)
        if chart.log_y:
            axes.set_yscale("log")
        axes.set_title(chart.title)
        axes.set_xlabel(chart.xlabel)
        axes.set_ylabel(chart.ylabel)
        axes.grid(True, alpha=0.3)
        if len(names) > 1:
            axes.legend()
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path)
    finally:
        plt.close(figure)


def write_report(report: Report, markdown_path: Path, *, chart_dir: Path) -> list[Path]:
    """Write the Markdown and every chart; return the paths written."""
    prefix = (
        f"{chart_dir.relative_to(markdown_path.parent).as_posix()}/"
        if chart_dir.is_relative_to(markdown_path.parent)
        else f"{chart_dir.as_posix()}/"
    )
    written = []
    for section in report.sections:
        for chart in section.charts:
            path = chart_dir / f"{chart.name}.png"
            draw_chart(chart, path)
            written.append(path)
    markdown_path.parent.mkdir(parents=True, exist_ok=True)
    markdown_path.write_text(render_markdown(report, chart_prefix=prefix), encoding="utf-8")
    return [markdown_path, *written]


def ratio(ours: float, other: float) -> str:
    """``other / ours`` as ``12.3x`` (how many times ours is smaller or faster); ``-`` when undefined."""
    if not ours or ours != ours or other != other:
        return "-"
    return f"{other / ours:.1f}x"


def fmt(value: float | int | None, digits: int = 0) -> str:
    """A number with thousands separators (``-`` for None or NaN)."""
    if value is None or value != value:
        return "-"
    return f"{value:,.{digits}f}"


def fmt_bytes(value: float | None) -> str:
    if value is None or value != value:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(value) < 1024 or unit == "GB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} GB"


def columns_of(rows: Sequence[dict[str, str]]) -> list[str]:
    """The keys of the first row, in order (rows of dicts to a Table)."""
    return list(rows[0]) if rows else []
