"""``fraudlake notebook run NAME [--param k=v]`` and ``fraudlake notebook list``: the notebooks, run locally.

``--conf``/``--lakehouse`` reach the notebook's ``conf``/``lakehouse`` widgets; ``--param`` sets any widget, as
a job's ``base_parameters`` do. Figures are saved as PNG under ``<work_dir>/notebooks/<name>/``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pipelines.commands.context import settings_from, spark_from
from pipelines.notebook_tools.runner import NOTEBOOKS_DIR, NotebookError, find_notebook, parse_notebook, run_notebook


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("notebook", help="run a Databricks-format notebook locally, or list them")
    # The common options go on the leaf parsers only: argparse would reset values given before the action.
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    run_parser = actions.add_parser("run", parents=[parent], help="execute a notebook's cells in order")
    run_parser.add_argument("name", help="notebook name (e.g. 00_setup) or path")
    run_parser.add_argument(
        "--param", action="append", default=[], metavar="KEY=VALUE", help="set a widget (repeatable)"
    )
    run_parser.add_argument("--output-dir", type=Path, help="where figures go (default: <work_dir>/notebooks/NAME)")
    run_parser.set_defaults(handler=run)
    list_parser = actions.add_parser("list", parents=[parent], help="list the notebooks and their cells")
    list_parser.set_defaults(handler=list_notebooks)


def parse_params(pairs: list[str]) -> dict[str, str]:
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--param expects KEY=VALUE, got {pair!r}")
        params[key.strip()] = value
    return params


def run(args: argparse.Namespace) -> int:
    try:
        path = find_notebook(args.name)
        params = parse_params(args.param)
    except (NotebookError, ValueError) as error:
        print(f"notebook: {error}")
        return 2
    settings = settings_from(args)
    context = {key: str(value) for key, value in (("conf", args.conf), ("lakehouse", args.lakehouse)) if value}
    output_dir = args.output_dir or Path(settings.work_dir) / "notebooks" / path.stem
    try:
        result = run_notebook(
            path, spark_from(settings, "notebook"), parameters=params, defaults=context, output_dir=output_dir
        )
    except NotebookError as error:
        print(f"notebook: {error}")
        return 1
    images = [str(o.path) for o in result.outputs if o.kind == "image"]
    print(f"notebook {result.name}: {result.cells_run} cells run, {len(result.outputs)} outputs")
    for image in images:
        print(f"notebook {result.name}: figure {image}")
    if result.exit_value is not None:
        print(f"notebook {result.name}: exited with {result.exit_value!r}")
    return 0


def list_notebooks(args: argparse.Namespace) -> int:
    for path in sorted(NOTEBOOKS_DIR.glob("*.py")):
        cells = parse_notebook(path.read_text(), path.name)
        code = sum(1 for c in cells if c.kind != "markdown")
        print(f"{path.stem}: {len(cells)} cells ({code} run)")
    return 0
