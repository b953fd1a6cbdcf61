"""Source positions: where a change event sits in its database's log, as one lexicographically sortable string.

The rules MERGE compares positions as plain strings (``s.sourcePosition > t.sourcePosition``), so every
number is zero-padded to a fixed width behind a kind prefix:

=========  ===========================================  ==================================================
kind       encoding                                     order
=========  ===========================================  ==================================================
``pg``     ``pg:<lsn 20>:<last commit lsn 20>``          WAL ``lsn`` of the change, then ``sequence[0]``
``mysql``  ``mysql:<binlog index 10>:<pos 20>:<row 10>``  binlog file number, byte position, row in the event
``ts``     ``ts:<ts_ms 20>``                             ``source.ts_ms`` (else the envelope ``ts_ms``)
=========  ===========================================  ==================================================

* PostgreSQL: two transactions cannot change one row concurrently (row locks; TRUNCATE takes an exclusive
  table lock), so for one rule the change LSN alone orders its events. ``sequence`` is
  ``["<last commit lsn>", "<lsn>"]``; its first element only breaks ties at an equal LSN. Snapshot reads
  carry the LSN the snapshot was taken at, so every streamed change after it is newer.
* MySQL: ``file`` ``mysql-bin.000042`` contributes 42 (the file base name is assumed fixed), ``pos`` the
  byte offset of the binlog event, ``row`` the row within a multi-row event. Snapshot reads carry the binlog
  position read when the snapshot started.
* ``ts``: connectors without a log position.
* The ``fraudlake`` CLI publisher (``source.connector = "fraudlake-cli"``) writes its position into
  ``source.position`` (``cli_position``): on an empty or ``ts`` table ``ts:<max(now, newest + 1)>``; on a table
  fed by a database, the newest position seen plus ``+cli:<ms 20>``. That sorts after every position the table
  has seen, and before any later position of the database (which differs at an earlier character): a CLI edit
  holds until the database changes that rule again.
* Positions of different kinds are not comparable: a rules table is fed by one connector kind, and an
  event of another kind is quarantined (see ``plan_changes``). Two different events never share a position.

Example::

    position_of({"connector": "postgresql", "lsn": 24023128, "sequence": '["24023119","24023128"]'}, None)
    # 'pg:00000000000024023128:00000000000024023119'
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

PG, MYSQL, TS = "pg", "mysql", "ts"
CLI_CONNECTOR = "fraudlake-cli"
CLI_SUFFIX = "+cli:"
_POSITION = re.compile(r"^(pg|mysql|ts):[0-9:]+(\+cli:[0-9]{20})?$")
_BINLOG_INDEX = re.compile(r"\.(\d+)$")
_MAX_20 = 10**20
_MAX_10 = 10**10


class PositionError(ValueError):
    """A source block that yields no usable position."""


def pg_position(lsn: int, last_commit_lsn: int | None = None) -> str:
    return f"{PG}:{_pad(lsn, 20)}:{_pad(last_commit_lsn or 0, 20)}"


def mysql_position(binlog_file: str, pos: int, row: int = 0) -> str:
    match = _BINLOG_INDEX.search(binlog_file)
    if not match:
        raise PositionError(f"binlog file name {binlog_file!r} has no numeric extension")
    return f"{MYSQL}:{_pad(int(match.group(1)), 10)}:{_pad(pos, 20)}:{_pad(row, 10)}"


def ts_position(ts_ms: int) -> str:
    return f"{TS}:{_pad(ts_ms, 20)}"


def kind_of(position: str) -> str:
    return position.split(":", 1)[0]


def ts_ms_of(position: str) -> int | None:
    """The milliseconds of a ``ts`` position (None for other kinds)."""
    kind, _, rest = position.partition(":")
    return int(rest) if kind == TS else None


def position_of(source: dict[str, Any] | None, envelope_ts_ms: int | None) -> str:
    """The sortable position of an event from its ``source`` block (and the envelope ``ts_ms`` fallback)."""
    source = source or {}
    if source.get("connector") == CLI_CONNECTOR and source.get("position") is not None:
        position = str(source["position"])
        if not _POSITION.match(position):
            raise PositionError(f"CLI position {position!r} is not a source position")
        return position
    if source.get("lsn") is not None:
        return pg_position(_int(source["lsn"], "lsn"), _last_commit(source.get("sequence")))
    if source.get("file") and source.get("pos") is not None:
        return mysql_position(str(source["file"]), _int(source["pos"], "pos"), _int(source.get("row") or 0, "row"))
    ts_ms = source.get("ts_ms", envelope_ts_ms)
    if ts_ms is None:
        ts_ms = envelope_ts_ms
    if ts_ms is None:
        raise PositionError("event has no lsn, no binlog file/pos and no ts_ms: its order is unknown")
    return ts_position(_int(ts_ms, "ts_ms"))


def cli_position(seen: Iterable[str], now_ms: int, after_ms: int = 0) -> tuple[str, int]:
    """A CLI publisher position newer than every position ``seen`` (one kind), and its milliseconds.

    The milliseconds are ``max(now_ms, after_ms + 1, newest CLI/ts milliseconds on the same base + 1)``.
    """
    seen = list(seen)
    kinds = {kind_of(p) for p in seen}
    if len(kinds) > 1:
        raise PositionError(f"the rules table mixes position kinds {sorted(kinds)}")
    if not kinds or kinds == {TS}:
        ms = max([now_ms, after_ms + 1, *((ts_ms_of(p) or 0) + 1 for p in seen)])
        return ts_position(ms), ms
    base = max(p.split(CLI_SUFFIX, 1)[0] for p in seen)
    issued = [int(p.split(CLI_SUFFIX, 1)[1]) for p in seen if p.startswith(base + CLI_SUFFIX)]
    ms = max([now_ms, after_ms + 1, *(i + 1 for i in issued)])
    return f"{base}{CLI_SUFFIX}{_pad(ms, 20)}", ms


def _last_commit(sequence: Any) -> int | None:
    if sequence is None:
        return None
    try:
        items = json.loads(sequence) if isinstance(sequence, str) else sequence
    except json.JSONDecodeError:
        raise PositionError(f"sequence {sequence!r} is not a JSON array") from None
    if not isinstance(items, list) or not items:
        raise PositionError(f"sequence {sequence!r} is not a non-empty JSON array")
    return None if items[0] is None else _int(items[0], "sequence[0]")


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise PositionError(f"{name} must be an integer, got {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise PositionError(f"{name} must be an integer, got {value!r}") from None


def _pad(value: int, width: int) -> str:
    if value < 0 or value >= (_MAX_20 if width == 20 else _MAX_10):
        raise PositionError(f"position component {value} does not fit {width} digits")
    return str(value).zfill(width)
