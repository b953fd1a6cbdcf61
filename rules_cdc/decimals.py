"""Debezium decimals in each ``decimal.handling.mode``, decoded to ``Decimal``.

* ``string``  — ``"1000000.50"``: the number as text.
* ``double``  — ``1000000.5``: a JSON number (read through ``str`` so that ``0.1`` stays ``0.1``).
* ``precise`` — ``"D0JA"``: base64 of the big-endian two's-complement *unscaled* value; the scale is only in
  the Kafka Connect schema (``org.apache.kafka.connect.data.Decimal``, ``parameters.scale``). Without the
  schema wrapper it cannot be decoded, and the event is quarantined with that reason.
* PostgreSQL ``numeric`` without a declared scale, in ``precise`` mode, is ``io.debezium.data.VariableScaleDecimal``:
  ``{"scale": 2, "value": "<base64 unscaled>"}``, decodable with or without the schema.

Example::

    decode_precise("BfXhAA==", scale=2)               # Decimal('1000000.00')
    encode_precise(Decimal("1000000.00"))             # ('BfXhAA==', 2)
"""

from __future__ import annotations

import base64
import binascii
from decimal import Decimal, InvalidOperation
from typing import Any

CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"


class DecimalDecodeError(ValueError):
    """A value that is not a decimal in any mode the schema allows."""


def decode_precise(encoded: str, scale: int) -> Decimal:
    """Base64 big-endian two's-complement unscaled bytes, and the scale, to a Decimal."""
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise DecimalDecodeError(f"{encoded!r} is not base64 (precise decimal)") from None
    if not raw:
        raise DecimalDecodeError("empty precise decimal")
    unscaled = int.from_bytes(raw, byteorder="big", signed=True)
    try:
        return Decimal(unscaled).scaleb(-scale)
    except ArithmeticError:  # InvalidOperation/Overflow: a scale beyond what a Decimal can hold
        raise DecimalDecodeError(f"precise decimal scale {scale} is out of range") from None


def encode_precise(value: Decimal) -> tuple[str, int]:
    """The inverse of ``decode_precise``: (base64 unscaled bytes, scale). Used by tests and samples."""
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int):
        raise DecimalDecodeError(f"{value} is not finite")
    scale = max(0, -exponent)
    unscaled = int(value.scaleb(scale))
    length = max(1, (unscaled.bit_length() + 8) // 8)  # +1 bit for the sign, rounded up to bytes
    return base64.b64encode(unscaled.to_bytes(length, byteorder="big", signed=True)).decode(), scale


def decode_by_schema(value: Any, field_schema: dict[str, Any]) -> Any:
    """Decode one column value using its Kafka Connect field schema; non-decimal values pass through."""
    if value is None:
        return None
    name = field_schema.get("name")
    if name == CONNECT_DECIMAL:
        if not isinstance(value, str):
            raise DecimalDecodeError(f"precise decimal must be a base64 string, got {value!r}")
        try:
            scale = int((field_schema.get("parameters") or {})["scale"])
        except (KeyError, ValueError):
            raise DecimalDecodeError("decimal schema without an integer parameters.scale") from None
        return decode_precise(value, scale)
    if name == VARIABLE_SCALE_DECIMAL:
        return decode_variable_scale(value)
    return value


def decode_variable_scale(value: Any) -> Decimal:
    """``{"scale": s, "value": base64}`` to a Decimal."""
    if not isinstance(value, dict) or set(value) != {"scale", "value"}:
        raise DecimalDecodeError(f"VariableScaleDecimal must be {{scale, value}}, got {value!r}")
    scale = value["scale"]
    if not isinstance(scale, int) or isinstance(scale, bool):
        raise DecimalDecodeError(f"VariableScaleDecimal scale must be an integer, got {scale!r}")
    return decode_precise(str(value["value"]), scale)


def looks_like_variable_scale(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"scale", "value"} and isinstance(value.get("value"), str)


def is_plain_number(value: Any) -> bool:
    """Whether a schemaless value reads as a number (string or double mode)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float | Decimal):
        return True
    if isinstance(value, str):
        try:
            Decimal(value)
        except InvalidOperation:
            return False
        return True
    return False
