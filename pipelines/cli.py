"""``fraudlake``: the command-line entry point. Each subcommand lives in ``pipelines.commands.*``.

Every subcommand takes ``--conf FILE`` and ``--lakehouse PATH`` (overrides ``$FRAUDLAKE_LAKEHOUSE``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from pipelines.commands import COMMANDS


def common_options() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--conf", help="settings file (default: $FRAUDLAKE_CONF or conf/local.yaml)")
    parent.add_argument("--lakehouse", help="lakehouse root (overrides $FRAUDLAKE_LAKEHOUSE and the conf file)")
    return parent


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fraudlake", description="Dynamic fraud rules on Spark and Delta Lake.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parent = common_options()
    for register in COMMANDS:
        register(subparsers, parent)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)  # kafka-python logs every connection at INFO
    logging.getLogger("py4j").setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    result: int = args.handler(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
