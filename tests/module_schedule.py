"""Longest module first: the order in which ``--dist loadfile`` hands whole modules to the pytest-xdist workers.

xdist's own order puts the modules with the most tests first, so the single-test modules, several minutes long
each (the chaos campaign, the contract scenario, the standalone cluster), came last: whichever worker drew the
last of them ran alone at the end. Handed out longest first (by the measured costs in tests/module_costs.json),
the last modules are the short ones, and the workers finish within seconds of each other (the "longest
processing time first" rule: the end differs by at most the last module's length). Measured on 2 cores: the two
workers ended 48 s apart in xdist's order (658 tests), at the same second in this one (672 tests, 20:03).

A module the table does not know goes first: its cost is unknown, and only early can a long one not make a tail.
Only the order changes: every module still runs whole in one worker, and its tests in their file order.

Regenerate the table from a full run with every duration (costs are relative; a busy machine inflates them all;
a module the report leaves out, every phase under 5 ms, is written as 0)::

    .venv/bin/python -m pytest -n 2 --dist loadfile --durations=0 -q > /tmp/durations.txt
    .venv/bin/python tests/module_schedule.py /tmp/durations.txt
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadFileScheduling

COSTS_FILE = Path(__file__).with_name("module_costs.json")
DURATION_LINE = re.compile(r"^(?P<seconds>\d+(?:\.\d+)?)s (?:setup|call|teardown)\s+(?P<nodeid>\S+)")


def load_costs(path: Path = COSTS_FILE) -> dict[str, float]:
    """Seconds per module (a node id's file part, ``tests/test_x.py``); empty if the table is missing."""
    if not path.is_file():
        return {}
    return {str(module): float(seconds) for module, seconds in json.loads(path.read_text())["seconds"].items()}


def module_costs(durations: str) -> dict[str, float]:
    """Setup + call + teardown summed per module, from pytest's ``--durations=0`` report."""
    costs: dict[str, float] = defaultdict(float)
    for line in durations.splitlines():
        match = DURATION_LINE.match(line)
        if match:
            costs[match["nodeid"].split("::", 1)[0]] += float(match["seconds"])
    return {module: round(seconds, 1) for module, seconds in sorted(costs.items(), key=lambda kv: -kv[1])}


class LongestModuleFirst(LoadFileScheduling):
    """``--dist loadfile``, with the work units (modules) handed out in decreasing measured cost."""

    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        self.costs = load_costs()
        self._ordered = False

    def _cost(self, module: str) -> float:
        return self.costs.get(module, float("inf"))

    def _assign_work_unit(self, node: object) -> None:
        # The work queue is complete when the first unit is handed out (schedule() builds it, then assigns).
        if not self._ordered:
            for module in sorted(self.workqueue, key=self._cost, reverse=True):
                self.workqueue.move_to_end(module)
            self._ordered = True
        super()._assign_work_unit(node)  # type: ignore[arg-type]


def main(argv: list[str]) -> int:
    """Write tests/module_costs.json from a ``--durations=0`` report (its path the only argument)."""
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    costs = module_costs(Path(argv[0]).read_text())
    for path in sorted(COSTS_FILE.parent.glob("test_*.py")):
        costs.setdefault(f"{COSTS_FILE.parent.name}/{path.name}", 0.0)
    note = "seconds per module (setup+call+teardown) from a --durations=0 run; only their order is used"
    COSTS_FILE.write_text(json.dumps({"about": note, "seconds": costs}, indent=1) + "\n")
    print(f"{len(costs)} modules -> {COSTS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
