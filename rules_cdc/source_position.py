"""Source positions: where a change event sits in its database's log, as one lexicographically sortable string.

The rules MERGE compares positions as plain strings (``s.sourcePosition > t.sourcePosition``), so every
number is zero-padded to a fixed width behind a kind prefix, and a position is accepted only in exactly that
form, with every number in the range its connector can emit (``check_position``):

=========  ===========================================  ==================================================
kind       encoding                                     order
=========  ===========================================  ==================================================
``pg``     ``pg:<lsn 20>:<last commit lsn 20>``          WAL ``lsn`` of the change, then ``sequence[0]``
``mysql``  ``mysql:<binlog index 10>:<pos 20>:<row 10>``  binlog file number, byte position, row in the event
``ts``     ``ts:<ts_ms 20>``                             ``source.ts_ms`` (else the envelope ``ts_ms``)
=========  ===========================================  ==================================================

* PostgreSQL: two transactions cannot change one row concurrently (row locks; TRUNCATE takes an exclusive
  table lock), so for one rule the change LSN alone orders its events. ``sequence`` is
  ``["<last commit lsn>", "<lsn>"]`` (JSON text, decimal strings or null first); its first element only breaks
  ties at an equal LSN. Both LSNs are unsigned 64-bit (``pg_lsn``): anything at or beyond 2^64 is forged.
  Snapshot reads carry the LSN the snapshot was taken at, so every streamed change after it is newer.
* MySQL: ``file`` ``mysql-bin.000042`` contributes 42 (six or more digits, below 2^31; the base name is assumed
  fixed), ``pos`` the byte offset of the binlog event (a signed 64-bit long), ``row`` the row within a
  multi-row event (a 32-bit int). Snapshot reads carry the binlog position read when the snapshot started.
* ``ts``: connectors without a log position; milliseconds in a signed 64-bit long.
* The ``fraudlake`` CLI publisher (``source.connector = "fraudlake-cli"``) writes its position into
  ``source.position``, and only a ``ts`` one (``cli_position``: ``ts:<max(now, newest + 1)>``, on an empty or
  ``ts`` table). A CLI event claiming a ``pg`` or ``mysql`` position is refused: a rules table fed by a
  database takes edits through that database, so that every change gets its position from the one log
  (``fraudlake rules upsert|pause|resume|delete`` write to ``fraud_rules`` when a rules database is
  configured). Only ``fraudlake rules delete-all`` still makes a position on a database-fed table
  (``local_truncate_position``: the newest position seen plus ``+cli:<ms 20>``), and it builds that event in
  process: no record read from a topic or a file can carry the ``+cli:`` suffix.
* Positions of different kinds are not comparable: a rules table is fed by one connector kind, and an
  event of another kind is quarantined (see ``plan_changes``). Two different events never share a position.

Example::

    position_of({"connector": "postgresql", "lsn": 24023128, "sequence": '["24023119","24023128"]'}, None)
    # 'pg:00000000000024023128:00000000000024023119'
    position_of({"connector": "fraudlake-cli", "position": "pg:::::"}, None)   # PositionError
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

PG, MYSQL, TS = "pg", "mysql", "ts"
DATABASE_KINDS = frozenset({PG, MYSQL})
CLI_CONNECTOR = "fraudlake-cli"
CLI_SUFFIX = "+cli:"
PG_CONNECTOR, MYSQL_CONNECTOR = "postgresql", "mysql"
U64 = 2**64  # PostgreSQL LSNs (pg_lsn) are unsigned 64-bit
I64 = 2**63  # Kafka Connect INT64: binlog pos, ts_ms, the CLI's milliseconds
I32 = 2**31  # Kafka Connect INT32: binlog row; MySQL binlog file index
_CLI = rf"(?:\{CLI_SUFFIX}(\d{{20}}))?"
_GRAMMAR = {
    PG: re.compile(rf"^pg:(\d{{20}}):(\d{{20}}){_CLI}$"),
    MYSQL: re.compile(rf"^mysql:(\d{{10}}):(\d{{20}}):(\d{{10}}){_CLI}$"),
    TS: re.compile(r"^ts:(\d{20})$"),
}
_LIMITS = {PG: (U64, U64), MYSQL: (I32, I64, I32), TS: (I64,)}
_BINLOG_FILE = re.compile(r"^[A-Za-z0-9_.-]*\.(\d{6,})$")
_DECIMAL = re.compile(r"^(0|[1-9][0-9]*)$")


class PositionError(ValueError):
    """A source block that yields no usable position, or a position string not in its exact form."""


def pg_position(lsn: int, last_commit_lsn: int | None = None) -> str:
    return f"{PG}:{_fixed(lsn, 20, U64, 'lsn')}:{_fixed(last_commit_lsn or 0, 20, U64, 'sequence[0]')}"


def mysql_position(binlog_file: str, pos: int, row: int = 0) -> str:
    match = re.search(r"\.(\d+)$", binlog_file)
    if not match:
        raise PositionError(f"binlog file name {binlog_file!r} has no numeric extension")
    index = _fixed(int(match.group(1)), 10, I32, "binlog file index")
    return f"{MYSQL}:{index}:{_fixed(pos, 20, I64, 'pos')}:{_fixed(row, 10, I32, 'row')}"


def ts_position(ts_ms: int) -> str:
    return f"{TS}:{_fixed(ts_ms, 20, I64, 'ts_ms')}"


def kind_of(position: str) -> str:
    return position.split(":", 1)[0]


def ts_ms_of(position: str) -> int | None:
    """The milliseconds of a ``ts`` position (None for other kinds)."""
    kind, _, rest = position.partition(":")
    return int(rest) if kind == TS else None


def change_key(position: str) -> str:
    """What identifies the change a position belongs to: for ``pg`` the change LSN alone (a connector restart
    re-sends a change with ``sequence[0]`` null), for the other kinds the whole position."""
    if kind_of(position) == PG and CLI_SUFFIX not in position:
        return position.rsplit(":", 1)[0]
    return position


def check_position(position: str, *, cli_suffix: bool = False) -> str:
    """``position`` if it is exactly a position of its kind with every number in range; else PositionError.

    The ``+cli:<ms>`` suffix (``local_truncate_position``) passes only with ``cli_suffix=True``.
    """
    kind = kind_of(position)
    grammar = _GRAMMAR.get(kind)
    match = grammar.match(position) if grammar else None
    if match is None:
        raise PositionError(
            f"{_quoted(position)} is not a source position (pg:<20 digits>:<20 digits>, "
            "mysql:<10>:<20>:<10> or ts:<20 digits>)"
        )
    numbers = match.groups()
    limits = _LIMITS[kind]
    for value, limit in zip(numbers, limits, strict=False):
        if int(value) >= limit:
            raise PositionError(f"{_quoted(position)}: {int(value)} is beyond what a {kind} position can hold")
    suffix = numbers[len(limits)] if len(numbers) > len(limits) else None
    if suffix is not None and (not cli_suffix or int(suffix) >= I64):
        raise PositionError(f"{_quoted(position)}: a '+cli:' position is made only by fraudlake rules delete-all")
    return position


def position_of(source: dict[str, Any] | None, envelope_ts_ms: int | None) -> str:
    """The sortable position of an event from its ``source`` block (and the envelope ``ts_ms`` fallback).

    Strict per connector: ``postgresql`` needs ``lsn`` and ``sequence`` as Debezium writes them, ``mysql`` needs
    ``file``/``pos``, ``fraudlake-cli`` needs a ``ts`` ``position``; a block mixing the kinds' fields is refused.
    """
    source = source or {}
    connector = source.get("connector")
    has_lsn = source.get("lsn") is not None
    has_binlog = source.get("file") is not None or source.get("pos") is not None
    if connector == CLI_CONNECTOR:
        return _cli_position_of(source)
    if source.get("position") is not None:
        raise PositionError(f"source.position is the fraudlake CLI's field; connector {connector!r} does not send it")
    if has_lsn and has_binlog:
        raise PositionError("source mixes a PostgreSQL lsn with a MySQL binlog file/pos: positions of two kinds")
    if connector == PG_CONNECTOR and not has_lsn:
        raise PositionError("a postgresql event without source.lsn: its order is unknown")
    if connector == MYSQL_CONNECTOR and not has_binlog:
        raise PositionError("a mysql event without source.file/pos: its order is unknown")
    if has_lsn:
        if connector not in (None, PG_CONNECTOR):
            raise PositionError(f"source.lsn on a {connector!r} event: only PostgreSQL events carry one")
        lsn = _int(source["lsn"], "lsn", U64)
        return pg_position(lsn, _last_commit(source.get("sequence"), lsn, required=connector == PG_CONNECTOR))
    if has_binlog:
        if connector not in (None, MYSQL_CONNECTOR):
            raise PositionError(f"source.file/pos on a {connector!r} event: only MySQL events carry them")
        return _binlog_position(source)
    ts_ms = source.get("ts_ms", envelope_ts_ms)
    if ts_ms is None:
        ts_ms = envelope_ts_ms
    if ts_ms is None:
        raise PositionError("event has no lsn, no binlog file/pos and no ts_ms: its order is unknown")
    return ts_position(_int(ts_ms, "ts_ms", I64))


def cli_position(seen: Iterable[str], now_ms: int, after_ms: int = 0) -> tuple[str, int]:
    """A CLI publisher position newer than every position ``seen`` (an empty or ``ts`` table), and its ms.

    The milliseconds are ``max(now_ms, after_ms + 1, newest ts milliseconds + 1)``. On a table fed by a
    database (``pg``/``mysql`` positions) there is none: the edit must be written to that database.
    """
    seen = list(seen)
    kinds = _one_kind(seen)
    if kinds & DATABASE_KINDS:
        raise PositionError(
            f"the rules table is fed by a database ({sorted(kinds)[0]} positions): write the change to the rules "
            "database (fraud_rules), where it gets its position from the database's log, not through the CLI "
            "publisher (configure rulesdb, or FRAUDLAKE_RULESDB_DSN)"
        )
    ms = max([now_ms, after_ms + 1, *((ts_ms_of(p) or 0) + 1 for p in seen)])
    return ts_position(ms), ms


def local_truncate_position(seen: Iterable[str], now_ms: int, after_ms: int = 0) -> tuple[str, int]:
    """The position of ``fraudlake rules delete-all``'s truncate, built in process and applied at once: a
    ``cli_position`` on an empty or ``ts`` table; on a database-fed table the newest position seen plus
    ``+cli:<ms 20>``, which sorts after everything seen and before any later position of the database."""
    seen = list(seen)
    if not _one_kind(seen) & DATABASE_KINDS:
        return cli_position(seen, now_ms, after_ms)
    base = max(p.split(CLI_SUFFIX, 1)[0] for p in seen)
    issued = [int(p.split(CLI_SUFFIX, 1)[1]) for p in seen if p.startswith(base + CLI_SUFFIX)]
    ms = max([now_ms, after_ms + 1, *(i + 1 for i in issued)])
    return check_position(f"{base}{CLI_SUFFIX}{_fixed(ms, 20, I64, 'ms')}", cli_suffix=True), ms


def _cli_position_of(source: dict[str, Any]) -> str:
    """A ``fraudlake-cli`` event's position: exactly ``ts:<20 digits>``, its ``ts_ms`` the same milliseconds."""
    position = source.get("position")
    if not isinstance(position, str):
        raise PositionError(f"a fraudlake-cli event needs source.position as text, got {_quoted(position)}")
    stray = [name for name in ("lsn", "sequence", "file", "pos", "row") if source.get(name) is not None]
    if stray:
        raise PositionError(f"a fraudlake-cli event carries database log fields {stray}: it is not what the CLI sends")
    if kind_of(position) in DATABASE_KINDS:
        raise PositionError(
            f"CLI position {_quoted(position)} claims a {kind_of(position)} position: on a rules table fed by a "
            "database, edits go through the database (a CLI position must never outrank the database's)"
        )
    try:
        check_position(position)
    except PositionError as error:
        raise PositionError(f"CLI position: {error}") from None
    ts_ms = source.get("ts_ms")
    if ts_ms is not None and ts_ms != ts_ms_of(position):
        raise PositionError(f"CLI position {position} and source.ts_ms {_quoted(ts_ms)} disagree")
    return position


def _binlog_position(source: dict[str, Any]) -> str:
    binlog_file = source.get("file")
    if not isinstance(binlog_file, str) or not _BINLOG_FILE.match(binlog_file):
        raise PositionError(f"binlog file {_quoted(binlog_file)} is not <name>.<six or more digits>")
    if source.get("pos") is None:
        raise PositionError("a binlog file without pos: its order is unknown")
    index = int(binlog_file.rsplit(".", 1)[1])
    if index >= I32:
        raise PositionError(f"binlog file index {index} is beyond MySQL's 2^31 - 1")
    return mysql_position(binlog_file, _int(source["pos"], "pos", I64), _int(source.get("row") or 0, "row", I32))


def _last_commit(sequence: Any, lsn: int, *, required: bool) -> int | None:
    """``sequence[0]`` of ``["<last commit lsn>", "<lsn>"]``, checked as Debezium writes it."""
    if sequence is None:
        if required:
            raise PositionError("a postgresql event without source.sequence")
        return None
    try:
        items = json.loads(sequence) if isinstance(sequence, str) else None
    except (json.JSONDecodeError, RecursionError):
        items = None
    if not isinstance(items, list) or len(items) != 2:
        raise PositionError(f"sequence {_quoted(sequence)} is not a JSON array of two LSNs")
    last_commit, change = (_lsn_text(item, f"sequence[{n}]") for n, item in enumerate(items))
    if change != lsn:
        raise PositionError(f"sequence {_quoted(sequence)} does not end with the event's lsn {lsn}")
    return last_commit


def _lsn_text(item: Any, name: str) -> int | None:
    if item is None:
        return None
    if not isinstance(item, str) or not _DECIMAL.match(item):
        raise PositionError(f"{name} {_quoted(item)} is not a decimal LSN")
    value = int(item)
    if value >= U64:
        raise PositionError(f"{name} {value} is beyond the 64-bit range of a PostgreSQL LSN")
    return value


def _one_kind(seen: list[str]) -> set[str]:
    kinds = {kind_of(p) for p in seen}
    if len(kinds) > 1:
        raise PositionError(f"the rules table mixes position kinds {sorted(kinds)}")
    return kinds


def _int(value: Any, name: str, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PositionError(f"{name} must be an integer, got {_quoted(value)}")
    if not 0 <= value < limit:
        raise PositionError(f"{name} {value} is outside 0 .. {limit - 1}, the range its connector emits")
    return value


def _fixed(value: int, width: int, limit: int, name: str) -> str:
    if not 0 <= value < limit:
        raise PositionError(f"{name} {value} is outside 0 .. {limit - 1}, the range its connector emits")
    return str(value).zfill(width)


def _quoted(value: Any) -> str:
    """``repr`` cut to 80 characters: a reason quoting a forged value stays one short line."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} chars)"
