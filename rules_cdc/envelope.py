"""Debezium change events as the Kafka Connect JSON converter writes them, validated with pydantic.

A record value is either ``{"schema": {...}, "payload": {...}}`` (``schemas.enable=true``) or the payload
alone. The payload::

    {"before": {...} | null, "after": {...} | null, "source": {...}, "op": "c|u|d|r|t",
     "ts_ms": 1700000000000, "transaction": {"id": ..., "total_order": 1, "data_collection_order": 1} | null}

A ``null`` record value is a Kafka tombstone (Debezium sends one after each delete, for log compaction):
``read_envelope`` returns None for it. Rows come out with decimals decoded (``decimals``) but otherwise as
the database wrote them; the rule model validates them next.

Example::

    envelope = read_envelope('{"op": "c", "after": {"rule_id": 1, ...}, "source": {...}, "ts_ms": 1}')
    envelope.payload.op          # Op.CREATE
    envelope.rows()              # (None, {"rule_id": 1, ...}) with decimals decoded
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from rules_cdc.decimals import (
    DecimalDecodeError,
    decode_by_schema,
    decode_variable_scale,
    is_plain_number,
    looks_like_variable_scale,
)

DECIMAL_COLUMNS = frozenset({"limit", "limit_value"})
"""Rule columns holding a decimal: a schemaless value there must be a number (string or double mode)."""


class Op(StrEnum):
    CREATE = "c"
    UPDATE = "u"
    DELETE = "d"
    READ = "r"  # snapshot read
    TRUNCATE = "t"


class EnvelopeError(ValueError):
    """A record value that is not a Debezium change event; ``reason`` is one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ConnectSchema(BaseModel):
    """A Kafka Connect schema node (only what decoding needs; connector-specific extras are kept)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    type: str
    optional: bool = False
    name: str | None = None
    version: int | None = None
    parameters: dict[str, str] | None = None
    field: str | None = None
    fields: tuple[ConnectSchema, ...] | None = None

    def child(self, name: str) -> ConnectSchema | None:
        for node in self.fields or ():
            if node.field == name:
                return node
        return None


class SourceInfo(BaseModel):
    """The ``source`` block. PostgreSQL sets ``lsn``/``sequence``, MySQL ``file``/``pos``/``row``.

    The fields that make an event's position are strict (a JSON integer, not ``"123"``, ``1.0`` or ``true``):
    a position is taken only as its connector writes it (``source_position.position_of`` checks the rest).
    """

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)

    version: str | None = None
    connector: str | None = None
    name: str | None = None
    ts_ms: StrictInt | None = None
    snapshot: str | bool | None = None
    db: str | None = None
    db_schema: str | None = Field(None, alias="schema")
    table: str | None = None
    lsn: StrictInt | None = None
    sequence: StrictStr | None = None
    tx_id: int | None = Field(None, alias="txId")
    file: StrictStr | None = None
    pos: StrictInt | None = None
    row: StrictInt | None = None
    server_id: int | None = None
    gtid: str | None = None


class TransactionInfo(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    total_order: int | None = None
    data_collection_order: int | None = None


class ChangePayload(BaseModel):
    """The change event proper. Unknown top-level fields are rejected (quarantined), never ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    op: Op
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    source: SourceInfo | None = None
    ts_ms: int | None = None
    ts_us: int | None = None
    ts_ns: int | None = None
    transaction: TransactionInfo | None = None


class ChangeEnvelope(BaseModel):
    """One record value: the payload, and the Connect schema when the converter wrote it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    connect_schema: ConnectSchema | None = None
    payload: ChangePayload

    def rows(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """``(before, after)`` with decimals decoded; raises EnvelopeError if one cannot be."""
        return self._decode("before", self.payload.before), self._decode("after", self.payload.after)

    def lenient_before(self) -> dict[str, Any] | None:
        """``before`` with what can be decoded decoded and the rest as it came (a delete needs only its key)."""
        return self._decode("before", self.payload.before, lenient=True)

    def source_dict(self) -> dict[str, Any]:
        return self.payload.source.model_dump(by_alias=True) if self.payload.source else {}

    def _decode(self, side: str, row: dict[str, Any] | None, *, lenient: bool = False) -> dict[str, Any] | None:
        if row is None:
            return None
        row_schema = self.connect_schema.child(side) if self.connect_schema else None
        decoded: dict[str, Any] = {}
        for column, value in row.items():
            try:
                decoded[column] = _decode_value(column, value, row_schema.child(column) if row_schema else None)
            except DecimalDecodeError as error:
                if not lenient:
                    raise EnvelopeError(f"{side}.{column}: {error}") from None
                decoded[column] = value
        return decoded


def _decode_value(column: str, value: Any, column_schema: ConnectSchema | None) -> Any:
    if column_schema is not None:
        return decode_by_schema(value, column_schema.model_dump(exclude_none=True))
    if looks_like_variable_scale(value):
        return decode_variable_scale(value)
    if column in DECIMAL_COLUMNS and value is not None and not is_plain_number(value):
        raise DecimalDecodeError(
            f"{value!r} is not a number; a precise (base64) decimal needs the schema "
            "(value.converter.schemas.enable=true) or decimal.handling.mode=string|double"
        )
    return value


def read_envelope(value: str | bytes | None) -> ChangeEnvelope | None:
    """Parse one Kafka record value; None for a Kafka tombstone (null value or the JSON ``null``)."""
    if value is None:
        return None
    try:
        text = value.decode("utf-8", errors="strict") if isinstance(value, bytes) else value
    except UnicodeDecodeError as error:
        raise EnvelopeError(f"not UTF-8: {error.reason} at byte {error.start}") from None
    if not text.strip() or text.strip() == "null":
        return None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise EnvelopeError(f"not JSON: {error.msg} at line {error.lineno} column {error.colno}") from None
    except RecursionError:
        raise EnvelopeError("not JSON this parser accepts: nested too deeply") from None
    except ValueError as error:  # e.g. an integer literal longer than Python's int-from-string limit
        raise EnvelopeError(f"not JSON this parser accepts: {error}") from None
    if document is None:
        return None
    if not isinstance(document, dict):
        raise EnvelopeError(f"a change event is a JSON object, got {type(document).__name__}")
    if set(document) == {"schema", "payload"}:
        if document["payload"] is None:
            return None  # a tombstone wrapped by a schema-enabled converter
        raw_schema, raw_payload = document["schema"], document["payload"]
    else:
        raw_schema, raw_payload = None, document
    try:
        return ChangeEnvelope(
            connect_schema=ConnectSchema.model_validate(raw_schema) if raw_schema is not None else None,
            payload=ChangePayload.model_validate(raw_payload),
        )
    except ValidationError as error:
        raise EnvelopeError(_one_line(error)) from None


def _one_line(error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False):
        where = ".".join(str(p) for p in item["loc"]) or "event"
        if item["type"] == "enum" and item["loc"][-1:] == ("op",):
            parts.append(f"unknown op {item['input']!r} (expected c, u, d, r or t)")
        else:
            parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)
