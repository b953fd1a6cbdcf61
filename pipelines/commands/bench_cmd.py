"""``fraudlake bench``: the reproducible benchmark; writes ``docs/benchmarks.md`` and PNG charts.

Examples::

    fraudlake bench                      # the full plan (~60 minutes on 2 idle cores): what `make bench` runs
    fraudlake bench --quick              # smaller sizes, ~20 minutes
    # make bench-targets:
    fraudlake bench --plan targets --only throughput kinds latency windows baselines state native cycle memory
    fraudlake bench --only baselines --output /tmp/b.md
"""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path
from typing import Any

from pipelines.base.settings import REPO_ROOT
from pipelines.commands.context import settings_from, spark_from


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    from pipelines.bench.scenarios import SCENARIOS

    parser = subparsers.add_parser("bench", parents=[parent], help="run the benchmarks; write docs/benchmarks.md")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (~20 minutes); same as --plan quick")
    parser.add_argument(
        "--plan", choices=("full", "quick", "targets"), help="sizes: full (default), quick, or targets (~35 min)"
    )
    parser.add_argument("--only", nargs="+", choices=SCENARIOS, help="run only these scenarios")
    parser.add_argument("--output", default=str(REPO_ROOT / "docs" / "benchmarks.md"), help="the Markdown report")
    parser.add_argument("--charts", help="folder for the PNG charts (default: <output folder>/benchmarks)")
    parser.add_argument("--work", help="scratch folder (default <work_dir>/bench; emptied first)")
    parser.add_argument(
        "--report-only",
        nargs="*",
        metavar="WORK",
        help="no runs: write the report from <work>-results.pickle, merged with these other runs' work folders",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pipelines.bench.report import write_report
    from pipelines.bench.scenarios import SCENARIOS, Plan, merge, run_all
    from pipelines.bench.summary import BENCHMARKS_DOC, build_report, profile_notes

    settings = settings_from(args)
    work = Path(args.work or Path(settings.work_dir) / "bench").resolve()  # Delta paths must be absolute
    saved = work.parent / f"{work.name}-results.pickle"
    if args.report_only is not None:
        others = [Path(w) for w in args.report_only]
        # Our own files, written by earlier runs (below).
        parts = [pickle.loads((w.parent / f"{w.name}-results.pickle").read_bytes()) for w in [work, *others]]
        results = merge(parts)
    else:
        spark = spark_from(settings, "bench")
        plan = Plan.named(args.plan or ("quick" if args.quick else "full"))
        results = run_all(
            spark,
            settings,
            plan,
            work=work,
            only=tuple(args.only or SCENARIOS),
            save=lambda partial: _save(saved, partial),  # so that --report-only can render a partial run
        )
    output = Path(args.output)
    charts = Path(args.charts) if args.charts else output.parent / "benchmarks"
    # The profile notes are prose kept in docs/benchmarks.md: read before the report (maybe that file) is rewritten.
    profile = profile_notes(BENCHMARKS_DOC)
    for path in write_report(build_report(results, profile=profile), output, chart_dir=charts):
        print(f"bench: wrote {path}")
    return 0


def _save(path: Path, results: Any) -> None:
    path.write_bytes(pickle.dumps(results))
