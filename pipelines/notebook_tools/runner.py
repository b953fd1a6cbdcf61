"""Run a Databricks source-format notebook locally: its cells in order, in one namespace, on local Spark.

The notebook sees what Databricks gives it: ``spark``, ``dbutils`` (widgets and ``notebook.exit`` only) and
``display``/``displayHTML``. Widgets return their declared defaults unless the runner's parameters override
them, as a job's ``base_parameters`` do. ``# MAGIC %md`` cells are prose and skipped; ``%sql`` runs through
``spark.sql``; ``%run ./other`` runs the other notebook inline in the same namespace; ``%pip``, ``%sh`` and
other languages are rejected (dependencies come from the wheel, as in the jobs).

Example::

    result = run_notebook(NOTEBOOKS_DIR / "00_setup.py", spark, parameters={"lakehouse": "/tmp/lh"}, output_dir=out)
    result.outputs            # what display() showed; figures saved as PNG under output_dir
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pyspark.sql import DataFrame, SparkSession

from pipelines.base.settings import REPO_ROOT

HEADER = "# Databricks notebook source"
SEPARATOR = "# COMMAND ----------"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
_MAGIC = re.compile(r"^# MAGIC ?(.*)$")
_TITLE = re.compile(r"^# DBTITLE \d+,")
_SKIPPED = {"%md", "%md-sandbox"}
_REJECTED_HINT = {
    "%pip": "install dependencies into the environment (the jobs get them from the wheel)",
    "%sh": "shell cells are not portable; call the library instead",
}

CellKind = Literal["python", "markdown", "sql", "run"]


class NotebookError(Exception):
    """A notebook that is malformed, uses an unsupported magic, or whose cell raised."""


class NotebookExit(Exception):  # mirrors dbutils.notebook.exit: it ends the run, it is not an error
    def __init__(self, value: str) -> None:
        super().__init__(value)
        self.value = value


@dataclass(frozen=True)
class Cell:
    index: int
    kind: CellKind
    source: str
    first_line: int


@dataclass
class DisplayOutput:
    kind: Literal["table", "image", "html", "text"]
    text: str = ""
    path: Path | None = None


@dataclass
class NotebookResult:
    name: str
    cells_run: int = 0
    outputs: list[DisplayOutput] = field(default_factory=list)
    widgets: dict[str, str] = field(default_factory=dict)
    exit_value: str | None = None


def _magic_cell(lines: list[str]) -> tuple[str, str] | None:
    """(magic, body) when every line of a cell is ``# MAGIC ...``, else None (a Python cell)."""
    body = [line for line in lines if not _TITLE.match(line)]
    matches = [_MAGIC.match(line) for line in body]
    if not body or not all(matches):
        return None
    text = [m.group(1) for m in matches if m]
    head = text[0].strip()
    magic = head.split(maxsplit=1)[0] if head.startswith("%") else "%python"
    first = head[len(magic) :].strip() if head.startswith("%") else head
    return magic, "\n".join([first, *text[1:]]).strip()


def parse_notebook(text: str, name: str = "notebook") -> list[Cell]:
    """Split a Databricks source-format notebook into cells; raise NotebookError on a bad header or magic."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != HEADER:
        raise NotebookError(f"{name}: first line must be {HEADER!r}")
    cells: list[Cell] = []
    chunk: list[tuple[int, str]] = []
    for number, line in enumerate([*lines[1:], SEPARATOR], start=2):
        if line.strip() != SEPARATOR:
            chunk.append((number, line))
            continue
        filled = [i for i, (_, text) in enumerate(chunk) if text.strip()]
        if filled:
            body = chunk[filled[0] : filled[-1] + 1]
            cells.append(_cell(len(cells), [text for _, text in body], body[0][0], name))
        chunk = []
    return cells


def _cell(index: int, lines: list[str], first_line: int, name: str) -> Cell:
    magic = _magic_cell([line for line in lines if line.strip()])
    if magic is None:
        return Cell(index, "python", "\n".join(lines) + "\n", first_line)
    kind, body = magic
    if kind in _SKIPPED:
        return Cell(index, "markdown", body, first_line)
    if kind == "%python":
        return Cell(index, "python", body + "\n", first_line)
    if kind == "%sql":
        return Cell(index, "sql", body, first_line)
    if kind == "%run":
        return Cell(index, "run", body, first_line)
    hint = _REJECTED_HINT.get(kind, "only Python, %sql, %run and %md cells run locally")
    raise NotebookError(f"{name} line {first_line}: {kind} is not supported by the local runner: {hint}")


class LocalWidgets:  # method and argument names are dbutils' (camelCase), so notebooks run unchanged
    """``dbutils.widgets`` for local runs: declared defaults, overridden by the runner's parameters."""

    def __init__(self, parameters: Mapping[str, str]) -> None:
        self._parameters = dict(parameters)
        self._values: dict[str, str] = {}

    def _declare(self, name: str, default: str, choices: list[str] | None = None) -> None:
        value = str(self._parameters.get(name, default))
        if choices is not None and value not in choices:
            raise NotebookError(f"widget {name!r}: {value!r} is not one of {choices}")
        self._values[name] = value

    def text(self, name: str, defaultValue: str, label: str | None = None) -> None:
        self._declare(name, defaultValue)

    def dropdown(self, name: str, defaultValue: str, choices: list[str], label: str | None = None) -> None:
        self._declare(name, defaultValue, list(choices))

    def combobox(self, name: str, defaultValue: str, choices: list[str], label: str | None = None) -> None:
        self._declare(name, defaultValue)

    def multiselect(self, name: str, defaultValue: str, choices: list[str], label: str | None = None) -> None:
        self._declare(name, defaultValue)
        unknown = [v for v in self._values[name].split(",") if v and v not in choices]
        if unknown:
            raise NotebookError(f"widget {name!r}: {unknown} not among {list(choices)}")

    def get(self, name: str) -> str:
        if name not in self._values:
            raise NotebookError(f"widget {name!r} is read before it is declared (dbutils raises too)")
        return self._values[name]

    def getAll(self) -> dict[str, str]:
        return dict(self._values)

    def remove(self, name: str) -> None:
        self._values.pop(name, None)

    def removeAll(self) -> None:
        self._values.clear()


class LocalNotebookUtils:
    def exit(self, value: Any = "") -> None:
        raise NotebookExit(str(value))


class LocalDbutils:
    """The parts of ``dbutils`` the notebooks may use; anything else fails loudly rather than silently."""

    def __init__(self, parameters: Mapping[str, str]) -> None:
        self.widgets = LocalWidgets(parameters)
        self.notebook = LocalNotebookUtils()

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"dbutils.{name} is not available in local runs; keep notebooks on the library")


class LocalDisplay:
    """``display``: tables are printed, figures saved as PNG under ``output_dir``; everything is recorded."""

    def __init__(self, name: str, output_dir: Path, max_rows: int = 20) -> None:
        self.name, self.output_dir, self.max_rows = name, output_dir, max_rows
        self.outputs: list[DisplayOutput] = []

    def __call__(self, obj: Any, *args: Any, **kwargs: Any) -> None:
        # Spark DataFrames first: their __getattr__ turns any name (even "savefig") into a column.
        if isinstance(obj, DataFrame):
            pandas_frame: Any = obj.limit(self.max_rows).toPandas()
            output = DisplayOutput("table", text=pandas_frame.to_string(index=False))
        elif (figure := obj if hasattr(obj, "savefig") else getattr(obj, "figure", None)) is not None:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            path = self.output_dir / f"{self.name}_{len(self.outputs) + 1:02d}.png"
            figure.savefig(path, format="png", dpi=100, bbox_inches="tight")
            output = DisplayOutput("image", text=str(path), path=path)
        elif hasattr(obj, "to_string"):
            output = DisplayOutput("table", text=obj.head(self.max_rows).to_string(index=False))
        else:
            output = DisplayOutput("text", text=str(obj))
        self.outputs.append(output)
        print(output.text)

    def html(self, html: str) -> None:
        self.outputs.append(DisplayOutput("html", text=html))
        print(html)


def _run_cells(
    cells: list[Cell], namespace: dict[str, Any], path: Path, spark: SparkSession, stack: tuple[Path, ...]
) -> int:
    display: LocalDisplay = namespace["display"]
    count = 0
    for cell in cells:
        if cell.kind == "markdown":
            continue
        where = f"{path.name} cell {cell.index + 1} (line {cell.first_line})"
        if cell.kind == "run":
            target = (path.parent / cell.source.split()[0].strip("'\"")).with_suffix(".py").resolve()
            if target in stack:
                raise NotebookError(f"{where}: %run cycle through {target.name}")
            included = parse_notebook(target.read_text(), target.name)
            count += _run_cells(included, namespace, target, spark, (*stack, target))
            continue
        try:
            if cell.kind == "sql":
                display(spark.sql(cell.source))
            else:
                padded = "\n" * (cell.first_line - 1) + cell.source  # tracebacks show the file's line numbers
                exec(compile(padded, str(path), "exec"), namespace)
        except NotebookExit:
            raise
        except Exception as error:
            raise NotebookError(f"{where} failed: {type(error).__name__}: {error}") from error
        count += 1
    return count


def run_notebook(
    path: Path,
    spark: SparkSession,
    *,
    parameters: Mapping[str, str] | None = None,
    defaults: Mapping[str, str] | None = None,
    output_dir: Path,
) -> NotebookResult:
    """Execute ``path``'s cells in order; figures go to ``output_dir``. Raise NotebookError if a cell fails.

    ``parameters`` are what a job passes: each must match a widget, since an unknown one is a typo.
    ``defaults`` carry context any notebook may use (the CLI's ``--conf``/``--lakehouse``) and need not.
    """
    path = path.resolve()
    name = path.stem
    cells = parse_notebook(path.read_text(), path.name)
    display = LocalDisplay(name, output_dir)
    dbutils = LocalDbutils({**(defaults or {}), **(parameters or {})})
    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "__file__": str(path),
        "spark": spark,
        "dbutils": dbutils,
        "display": display,
        "displayHTML": display.html,
    }
    result = NotebookResult(name=name, outputs=display.outputs)
    try:
        result.cells_run = _run_cells(cells, namespace, path, spark, (path,))
    except NotebookExit as done:
        result.exit_value = done.value
    result.widgets = dbutils.widgets.getAll()
    unknown = sorted(set(parameters or {}) - set(result.widgets))
    if unknown:
        raise NotebookError(f"{path.name}: parameters {unknown} match no widget (declared: {sorted(result.widgets)})")
    return result


def find_notebook(name: str, directory: Path = NOTEBOOKS_DIR) -> Path:
    """``00_setup`` or ``00_setup.py`` or a path -> the notebook file."""
    candidate = Path(name)
    for path in (candidate, directory / candidate, directory / f"{name}.py"):
        if path.is_file():
            return path
    known = ", ".join(sorted(p.stem for p in directory.glob("*.py")))
    raise NotebookError(f"no notebook {name!r}; in {directory}: {known}")
