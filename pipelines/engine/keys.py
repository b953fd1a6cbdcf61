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
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

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


def key_column(names: Sequence[str]) -> Column:
    """The key string of each row, from its columns ``names`` (``'[]'`` for no names)."""
    if not names:
        return F.lit(GLOBAL_KEY)
    # to_json of a one-element array writes the value exactly as inside any JSON array; strip the brackets.
    parts = [F.regexp_extract(F.to_json(F.array(F.col(name))), r"^\[(.*)\]$", 1) for name in names]
    return F.concat(F.lit("["), F.concat_ws(",", *parts), F.lit("]"))
