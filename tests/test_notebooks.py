"""Every notebook in notebooks/ is a Databricks source-format file that runs locally, cell by cell.

The parametrized test picks up notebooks added later by itself. The runner's own behaviour (parsing, magics,
widgets, display, exit) is tested on small notebooks written here.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from chispa import assert_df_equality
from engine_fixtures import alerts_by_id, put_rules
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from reference_evaluator import RefBatch, evaluate

from delta_tables.catalog import all_tables
from pipelines.base.settings import REPO_ROOT, Settings, load_settings
from pipelines.cli import main
from pipelines.engine.keys import encode_key
from pipelines.generator.sinks import FileSink
from pipelines.generator.transactions import GeneratorConfig, TransactionGenerator
from pipelines.notebook_tools.runner import (
    HEADER,
    NOTEBOOKS_DIR,
    SEPARATOR,
    NotebookError,
    find_notebook,
    parse_notebook,
    run_notebook,
)
from rules_cdc.rule_model import parse_rule

NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.py"))
LOCAL_CONF = str(REPO_ROOT / "conf" / "local.yaml")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def notebook(*cells: str) -> str:
    return HEADER + "\n" + f"\n\n{SEPARATOR}\n\n".join(cells) + "\n"


@pytest.fixture(scope="module")
def lakehouse(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A lakehouse set up by running 00_setup through the CLI, as a person would; every notebook runs on it."""
    root = tmp_path_factory.mktemp("notebooks")
    args = ["--conf", LOCAL_CONF, "--lakehouse", str(root / "lakehouse"), "--output-dir", str(root / "out")]
    assert main(["notebook", "run", "00_setup", *args]) == 0
    return root / "lakehouse"


def test_there_are_notebooks() -> None:
    expected = {"00_setup", "01_manage_rules", "03_alerts_dashboard", "04_data_quality", "06_rule_accuracy"}
    assert expected <= {p.stem for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_locally(spark: SparkSession, lakehouse: Path, tmp_path: Path, path: Path) -> None:
    text = path.read_text()
    assert text.splitlines()[0] == HEADER
    cells = parse_notebook(text, path.name)
    assert cells[0].kind == "markdown", "a notebook opens with a markdown cell saying what it does"
    result = run_notebook(
        path,
        spark,
        parameters={"conf": LOCAL_CONF, "lakehouse": str(lakehouse)},
        output_dir=tmp_path / "out",
    )
    assert result.cells_run == sum(1 for c in cells if c.kind != "markdown")
    assert result.widgets["lakehouse"] == str(lakehouse)
    for image in [o.path for o in result.outputs if o.kind == "image"]:
        assert image is not None and image.read_bytes().startswith(PNG_MAGIC), f"{path.stem}: {image} is no PNG"


def test_setup_notebook_created_every_table(lakehouse: Path, base_settings: Settings) -> None:
    tables = sorted(p.name for p in lakehouse.iterdir() if not p.name.startswith("_"))  # _reports: 04 writes there
    assert tables == sorted(s.name for s in all_tables(base_settings))
    assert main(["notebook", "run", "no_such_notebook", "--lakehouse", str(lakehouse)]) == 2
    assert main(["notebook", "run", "00_setup", "--lakehouse", str(lakehouse), "--param", "typo=1"]) == 1


def test_parser_splits_cells_and_classifies_magics() -> None:
    text = notebook(
        "# MAGIC %md\n# MAGIC # Title\n# MAGIC prose",
        "x = 1\n\ny = x + 1",
        "# DBTITLE 1,Count\n# MAGIC %sql\n# MAGIC SELECT 1 AS one",
        "# MAGIC %run ./helpers",
        "# MAGIC %python\n# MAGIC z = 3",
    )
    cells = parse_notebook(text)
    assert [c.kind for c in cells] == ["markdown", "python", "sql", "run", "python"]
    assert cells[1].source == "x = 1\n\ny = x + 1\n" and cells[1].first_line == 8
    assert cells[2].source == "SELECT 1 AS one" and cells[3].source == "./helpers" and cells[4].source == "z = 3\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x = 1\n", "first line must be"),
        (notebook("# MAGIC %pip install foo"), "%pip is not supported"),
        (notebook("# MAGIC %sh ls"), "%sh is not supported"),
        (notebook("# MAGIC %scala\n# MAGIC val x = 1"), "%scala is not supported"),
    ],
)
def test_parser_rejects_what_cannot_run_locally(text: str, message: str) -> None:
    with pytest.raises(NotebookError, match=message):
        parse_notebook(text)


def test_runner_widgets_sql_run_display_and_exit(spark: SparkSession, tmp_path: Path) -> None:
    (tmp_path / "helpers.py").write_text(notebook("def double(v):\n    return 2 * int(v)"))
    main_notebook = tmp_path / "main.py"
    main_notebook.write_text(
        notebook(
            'dbutils.widgets.text("n", "2", "N")\ndbutils.widgets.dropdown("mode", "a", ["a", "b"])',
            "# MAGIC %run ./helpers",
            'result = double(dbutils.widgets.get("n"))\ndisplay(spark.range(result))',
            "# MAGIC %sql\n# MAGIC SELECT 41 + 1 AS answer",
            "dbutils.notebook.exit(f\"{result}-{dbutils.widgets.get('mode')}\")",
            "raise RuntimeError('never reached')",
        )
    )
    result = run_notebook(main_notebook, spark, parameters={"n": "3", "mode": "b"}, output_dir=tmp_path)
    assert result.exit_value == "6-b"
    assert result.widgets == {"n": "3", "mode": "b"}
    assert [o.kind for o in result.outputs] == ["table", "table"]
    assert result.outputs[0].text.split() == ["id", "0", "1", "2", "3", "4", "5"]
    assert result.outputs[1].text.split() == ["answer", "42"]

    defaults = run_notebook(main_notebook, spark, output_dir=tmp_path)
    assert defaults.exit_value == "4-a"
    with pytest.raises(NotebookError, match=r"'c' is not one of \['a', 'b'\]"):
        run_notebook(main_notebook, spark, parameters={"mode": "c"}, output_dir=tmp_path)
    with pytest.raises(NotebookError, match=r"parameters \['nn'\] match no widget"):
        run_notebook(main_notebook, spark, parameters={"nn": "3"}, output_dir=tmp_path)


def test_runner_reports_the_failing_cell(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text(notebook("# MAGIC %md hi", "a = 1", "b = a / 0"))
    with pytest.raises(NotebookError, match=r"broken.py cell 3 \(line 10\) failed: ZeroDivisionError") as info:
        run_notebook(path, spark, output_dir=tmp_path)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    with pytest.raises(NotebookError, match=r"dbutils\.fs is not available"):
        path.write_text(notebook("dbutils.fs.ls('/')"))
        run_notebook(path, spark, output_dir=tmp_path)


def test_figures_are_saved_as_png(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "chart.py"
    path.write_text(
        notebook(
            "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
            "fig, ax = plt.subplots()\nax.plot([1, 2, 3])\ndisplay(fig)"
        )
    )
    result = run_notebook(path, spark, output_dir=tmp_path / "out")
    (image,) = [o.path for o in result.outputs if o.kind == "image"]
    assert image is not None and image.read_bytes().startswith(PNG_MAGIC)


def test_find_notebook_by_name_or_path() -> None:
    assert find_notebook("00_setup") == NOTEBOOKS_DIR / "00_setup.py"
    assert find_notebook(str(NOTEBOOKS_DIR / "04_data_quality.py")).name == "04_data_quality.py"
    with pytest.raises(NotebookError, match="no notebook 'nope'"):
        find_notebook("nope")


def test_streaming_job_notebook_then_backtest_notebook_agree(spark: SparkSession, tmp_path: Path) -> None:
    """02 runs the engine once over a landing file (one micro-batch); 05's backtest of the same rule then
    raises exactly the engine's alerts, since one batch with nothing late is what a backtest assumes."""
    settings = load_settings(LOCAL_CONF, lakehouse=str(tmp_path / "lakehouse"))
    rule_json = {
        "ruleId": 77,
        "ruleState": "ACTIVE",
        "groupingKeyNames": ["payerId"],
        "aggregateFieldName": "COUNT",
        "aggregatorFunctionType": "COUNT",
        "limitOperatorType": "GREATER_EQUAL",
        "limit": 3,
        "windowMinutes": 30,
        "cooldownMinutes": 10,
    }
    fresh_lakehouse(spark, settings)
    put_rules(spark, settings, [parse_rule(rule_json, settings.transaction_schema)])
    start = 1_700_006_400_000 - 60 * 60_000  # 23:00 UTC: the 300 transactions (~100 minutes) cross midnight
    config = GeneratorConfig(seed=5, start_ms=start, events_per_second=0.05, payers=20, beneficiaries=50)
    generator = TransactionGenerator(config)
    records = [*itertools.islice(generator, 300), *generator.drain()]
    sink = FileSink(settings.landing_path("transactions"), records_per_file=len(records))
    for record in records:
        sink.send(record)
    sink.close()
    common = {"conf": LOCAL_CONF, "lakehouse": settings.lakehouse_root}

    streamed = run_notebook(NOTEBOOKS_DIR / "02_streaming_job.py", spark, parameters=common, output_dir=tmp_path)
    assert streamed.widgets["once"] == "true" and streamed.widgets["source"] == "files"
    bronze = spark.read.format("delta").load(settings.table_path("bronze_transactions"))
    assert bronze.count() == len(records) and bronze.where("isLate").count() == 0
    engine_alerts = (
        spark.read.format("delta")
        .load(settings.table_path("alerts"))
        .select("ruleId", "transactionId", "keyValue", "aggregateValue")
    )
    assert engine_alerts.count() >= 5
    # The engine agrees with the contract (so the backtest agreeing with the engine is not two shared mistakes).
    rule = parse_rule(rule_json, settings.transaction_schema)
    expected = {
        (a.rule_id, a.transaction_id): (encode_key(a.key), a.aggregate_value)
        for a in evaluate([RefBatch([rule], records)])
    }
    assert alerts_by_id(spark, settings) == expected

    out = tmp_path / "backtest"
    parameters = {**common, "rule_json": json.dumps(rule_json), "output_dir": str(out)}
    backtested = run_notebook(NOTEBOOKS_DIR / "05_backtest_rule.py", spark, parameters=parameters, output_dir=tmp_path)
    assert (out / "backtest_77.png").read_bytes().startswith(PNG_MAGIC)
    assert [o.kind for o in backtested.outputs] == ["table", "image", "table"]
    assert len(backtested.outputs[0].text.splitlines()) == 1 + 2  # header + two days
    written = spark.read.json(str(out / "backtest_77.jsonl")).select(
        F.col("ruleId").cast("long"),
        "transactionId",
        "keyValue",
        F.col("aggregateValue").cast("decimal(38,6)"),
    )
    assert_df_equality(written, engine_alerts, ignore_row_order=True, ignore_nullable=True)
