"""Every path and query parameter of the console, parsed at the boundary: a value the pages can use, or
``BadParameter`` with a one-line message for people (the app answers 400 with it, as a page or as JSON).

Nothing unchecked reaches a reader or a writer: a rule id is ASCII digits within the rule model's own range
(``Rule.rule_id``: 0 to 2^63 - 1, a PostgreSQL ``bigint``), an instant is one of the ISO 8601 forms below
within ``[1970-01-01, 9999-12-01)``, a token (edit, backtest) is the 12 hex digits the console hands out, free
text is bounded in length. A well-formed id nothing has is not this module's business: the page says 404.

Instants: ``2024-06-01``, ``2024-06-01T12:30``, ``2024-06-01T12:30:15`` (``.123456`` allowed), a space instead of
``T``, optionally ending ``Z`` or ``+02:00``; no offset means UTC. Plain digits (epoch milliseconds, which
``fraudlake rules backtest`` takes) are refused here: on a web form ``2024`` is far likelier a year than a
millisecond.

Example::

    rule_id("7")                          # 7
    rule_id("²")                          # BadParameter: rule must be a rule id (digits 0-9), got '²'
    instant("2024-06-01T00:00", "from")   # datetime(2024, 6, 1, tzinfo=UTC)
"""

from __future__ import annotations

import datetime as dt
import re

from annotated_types import Ge, Le

from rules_cdc.rule_model import Rule


class BadParameter(ValueError):
    """A path or query parameter the console cannot use; the message says which and why."""


def _rule_id_bounds() -> tuple[int, int]:
    """The rule model's bounds of ``ruleId`` (one place: the model's ``Field(ge=..., le=...)``)."""
    low, high = 0, 2**63 - 1
    for bound in Rule.model_fields["rule_id"].metadata:
        if isinstance(bound, Ge):
            low = int(bound.ge)  # type: ignore[call-overload]
        elif isinstance(bound, Le):
            high = int(bound.le)  # type: ignore[call-overload]
    return low, high


RULE_ID_MIN, RULE_ID_MAX = _rule_id_bounds()
EARLIEST = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
LATEST = dt.datetime(9999, 12, 1, tzinfo=dt.UTC)
"""Instants outside ``[EARLIEST, LATEST)`` are refused: the lakehouse has none, and date arithmetic near
``datetime.max`` (a day before, a window after) would overflow."""
MAX_TEXT = 1000
"""The longest free-text filter (a key) accepted."""
MAX_TRANSACTION_ID = 256
TOKEN_LENGTH = 12
"""Edit and backtest ids: ``secrets.token_hex(6)``."""

_DIGITS = re.compile(r"[0-9]{1,25}", re.ASCII)
_INSTANT = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"(?:[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,6})?)?(?:Z|[+-][0-9]{2}:[0-9]{2})?)?",
    re.ASCII,
)
_TOKEN = re.compile(f"[0-9a-f]{{{TOKEN_LENGTH}}}", re.ASCII)
INSTANT_FORMS = "an ISO date or date-time such as 2024-06-01 or 2024-06-01T12:30 (UTC unless it ends Z or +hh:mm)"


def _shown(text: str, limit: int = 60) -> str:
    """The offending value, quoted and cut, for a message."""
    return repr(text if len(text) <= limit else text[:limit] + "…")


def rule_id(text: str | None, name: str = "rule") -> int:
    """A rule id: ASCII digits within the rule model's range.

    >>> rule_id(" 42 ")
    42
    """
    value = (text or "").strip()
    if not value:
        raise BadParameter(f"{name} is required: a rule id (digits 0-9)")
    if not _DIGITS.fullmatch(value):
        raise BadParameter(f"{name} must be a rule id (digits 0-9), got {_shown(value)}")
    number = int(value)
    if not RULE_ID_MIN <= number <= RULE_ID_MAX:
        raise BadParameter(f"{name} must be a rule id from {RULE_ID_MIN} to {RULE_ID_MAX}, got {_shown(value)}")
    return number


def optional_rule_id(text: str | None, name: str = "rule") -> int | None:
    """``rule_id``, or None for a blank value."""
    return None if not (text or "").strip() else rule_id(text, name)


def instant(text: str | None, name: str) -> dt.datetime | None:
    """An aware UTC datetime from one of the documented ISO forms, or None for a blank value.

    >>> instant("2024-06-01T02:00+02:00", "from").isoformat()
    '2024-06-01T00:00:00+00:00'
    """
    value = (text or "").strip()
    if not value:
        return None
    if not _INSTANT.fullmatch(value):
        raise BadParameter(f"{name} must be {INSTANT_FORMS}, got {_shown(value)}")
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as error:  # month 13, February 30, ...
        raise BadParameter(f"{name} is not a real date or time ({error}), got {_shown(value)}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    try:
        parsed = parsed.astimezone(dt.UTC)
    except OverflowError:
        raise BadParameter(f"{name} must lie between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d}") from None
    if not EARLIEST <= parsed < LATEST:
        raise BadParameter(f"{name} must lie between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d}, got {_shown(value)}")
    return parsed


def time_range(
    since: str | None, until: str | None, *, since_name: str = "from", until_name: str = "to"
) -> tuple[dt.datetime | None, dt.datetime | None]:
    """``[since, until)``, each optional; ``since`` must come before ``until`` when both are given."""
    start, end = instant(since, since_name), instant(until, until_name)
    if start is not None and end is not None and start >= end:
        raise BadParameter(f"{since_name} must be before {until_name} ({start:%Y-%m-%d %H:%M} ≥ {end:%Y-%m-%d %H:%M})")
    return start, end


def text(value: str | None, name: str, *, limit: int = MAX_TEXT) -> str | None:
    """Free text (stripped), or None when blank; at most ``limit`` characters."""
    stripped = (value or "").strip()
    if len(stripped) > limit:
        raise BadParameter(f"{name} is {len(stripped)} characters long; at most {limit} are accepted")
    return stripped or None


def alert_id(value: str | None) -> tuple[int, str]:
    """``<ruleId>:<transactionId>`` as (rule id, transaction id).

    >>> alert_id("7:tx-1")
    (7, 'tx-1')
    """
    stripped = (value or "").strip()
    rule_text, colon, transaction = stripped.partition(":")
    if not colon or not transaction:
        raise BadParameter(f"id must be an alert id <ruleId>:<transactionId>, got {_shown(stripped)}")
    if len(transaction) > MAX_TRANSACTION_ID:
        raise BadParameter(f"the transaction id of an alert id is at most {MAX_TRANSACTION_ID} characters long")
    return rule_id(rule_text, "the rule of an alert id"), transaction


def token(value: str | None, what: str) -> str:
    """An edit or backtest id as this console hands them out (12 lowercase hex digits)."""
    stripped = (value or "").strip()
    if not _TOKEN.fullmatch(stripped):
        raise BadParameter(f"{_shown(stripped)} is not {what} id (they are {TOKEN_LENGTH} hexadecimal digits)")
    return stripped


def bounded_int(value: str | None, name: str, *, low: int, high: int) -> int:
    """An integer of ASCII digits in ``[low, high]``."""
    stripped = (value or "").strip()
    if not _DIGITS.fullmatch(stripped) or not low <= int(stripped) <= high:
        raise BadParameter(f"{name} must be a whole number from {low} to {high}, got {_shown(stripped)}")
    return int(stripped)


_FRACTION = re.compile(r"(?:0|1)?(?:\.[0-9]{1,6})?|0|1", re.ASCII)


def fraction(value: str | None, name: str, *, default: float) -> float:
    """A number from 0 to 1 (``0.25``, ``.5``, ``1``); ``default`` when blank.

    >>> fraction("0.25", "min precision", default=0.5), fraction("", "min precision", default=0.5)
    (0.25, 0.5)
    """
    stripped = (value or "").strip()
    if not stripped:
        return default
    if not _FRACTION.fullmatch(stripped) or stripped == "." or float(stripped) > 1:
        raise BadParameter(f"{name} must be a number from 0 to 1 such as 0.5, got {_shown(stripped)}")
    return float(stripped)
