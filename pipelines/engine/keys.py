"""Dynamic keys: a rule's grouping-key values encoded as one stable string, the same in Spark and in Python.

The encoding is the canonical JSON array of the values, in the rule's ``groupingKeyNames`` order, without
spaces: ``[1001,2002]``, ``["CSH",7]``, ``[null,5]``; an empty list of names is the one global key ``[]``.
Each value is written as Spark's ``to_json`` writes it (strings quoted and escaped, numbers and booleans bare,
null as ``null``, non-ASCII characters as is); ``encode_key`` does the same for the Python values of those
types (str, int, bool, Decimal, None), so tests and tools can compute a key without Spark.

Example::

    frame.withColumn("keyValue", key_column(["payerId", "beneficiaryId"]))   # '[1001,2002]'
    encode_key([1001, 2002]) == '[1001,2002]'
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, DataType, IntegralType

GLOBAL_KEY = "[]"


def _json_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, int | str):
        return json.dumps(value, ensure_ascii=False)
    raise TypeError(f"cannot encode a key value of type {type(value).__name__}: {value!r}")


def encode_key(values: Sequence[Any]) -> str:
    """The key string of these grouping-key values (see the module docstring)."""
    return "[" + ",".join(_json_value(v) for v in values) + "]"


def _json_part(name: str, data_type: DataType | None) -> Column:
    if isinstance(data_type, IntegralType | BooleanType):
        # JSON writes integers and booleans as their plain text: a cast, far cheaper than to_json.
        return F.coalesce(F.col(name).cast("string"), F.lit("null"))
    # to_json of a one-element array writes the value exactly as inside any JSON array; strip the brackets.
    text = F.to_json(F.array(F.col(name)))
    return text.substr(F.lit(2), F.length(text) - 2)


def key_column(names: Sequence[str], types: Mapping[str, DataType] | None = None) -> Column:
    """The key string of each row, from its columns ``names`` (``'[]'`` for no names).

    ``types`` (column name -> Spark type, e.g. from ``frame.schema``): integer and boolean columns are then
    written by a cast instead of ``to_json`` (the same text, a third of the tagging cost: docs/benchmarks.md).
    """
    if not names:
        return F.lit(GLOBAL_KEY)
    known = types or {}
    parts = [_json_part(name, known.get(name)) for name in names]
    return F.concat(F.lit("["), F.concat_ws(",", *parts), F.lit("]"))
