"""Exact fixed-point arithmetic of the hot path: every aggregate as a whole number of millionths (*units*).

The contract's aggregates are decimal(38,6) (docs/engine.md). Spark keeps a decimal of more than 18 digits as a
``java.math.BigDecimal``: every sum, min, max and comparison over it allocates, which made the evaluation several
times dearer than the same work on longs (docs/benchmarks.md, profile). So the hot path counts in units — the
value times 10^6, which is exact for the 6 decimals the contract keeps — as:

* ``LONG_UNITS`` (64-bit): the default; values and sums up to ±9,223,372,036,854 (±9.2e12) with 6 decimals.
  Spark runs with ANSI arithmetic (the handler sets ``spark.sql.ansi.enabled``), so a sum or cast that leaves the
  range raises ``ARITHMETIC_OVERFLOW``/``CAST_OVERFLOW`` instead of wrapping; the handler then runs the batch again
  with
* ``WIDE_UNITS`` (decimal(38,0)): 38 digits, the range of decimal(38,6) itself, at decimal speed.

Tables keep decimal(38,6) (``bucket_state``, ``alerts``): ``tiles_to_table`` and ``tiles_from_table`` convert at the
edges. The limit check compares whole units with the limit's floor and ceiling in units, so a limit with more
than 6 decimals is compared exactly too (``value > L`` iff ``units > floor(L * 10^6)``).

Example::

    units = to_units(F.col("paymentAmount"), LONG_UNITS)          # 12.5 -> 12500000
    units_to_decimal(F.col("aggregateUnits"))                      # 12500000 -> 12.500000
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DecimalType, LongType

from delta_tables.transaction_types import AGGREGATE_TYPE

UNITS_PER_ONE = 10**6
LONG_UNITS: DataType = LongType()
WIDE_UNITS: DataType = DecimalType(38, 0)
UNIT_TYPES = {"long": LONG_UNITS, "decimal": WIDE_UNITS}
ANSI_CONF = "spark.sql.ansi.enabled"
_LONG_MAX = 2**63 - 1
_WIDE_MAX = 10**38 - 1
_MICRO = Decimal("0.000001")
AGGREGATE_FIELDS = ("sum", "min", "max")
"""The tile columns that hold values (``count`` and ``valueCount`` are counts)."""
_OVERFLOW_CONDITIONS = ("ARITHMETIC_OVERFLOW", "CAST_OVERFLOW", "NUMERIC_VALUE_OUT_OF_RANGE")


def to_units(value: Column, unit_type: DataType) -> Column:
    """A field's value as units: rounded HALF_UP to 6 decimals (as decimal(38,6) does), times 10^6."""
    return (value.cast(AGGREGATE_TYPE) * F.lit(UNITS_PER_ONE)).cast(unit_type)


def units_to_decimal(units: Column) -> Column:
    """Units back to decimal(38,6), exactly."""
    return (units.cast(WIDE_UNITS) * F.lit(_MICRO)).cast(AGGREGATE_TYPE)


def tiles_to_table(tiles: DataFrame) -> DataFrame:
    """Tiles in units -> the table's decimal(38,6) sum/min/max (other columns as they are)."""
    return tiles.withColumns({c: units_to_decimal(F.col(c)) for c in AGGREGATE_FIELDS})


def tiles_from_table(tiles: DataFrame, unit_type: DataType) -> DataFrame:
    """The table's decimal(38,6) sum/min/max -> units (other columns as they are)."""
    return tiles.withColumns({c: to_units(F.col(c), unit_type) for c in AGGREGATE_FIELDS})


def average(total: Column, count: Column, unit_type: DataType) -> Column:
    """``total / count`` rounded HALF_UP (half away from zero) to whole units: the contract's AVG at 6 decimals.

    Integer arithmetic only: the quotient truncated toward zero, plus one unit away from zero when twice the
    remainder reaches the count. Null when ``count`` is 0 (no value).
    """
    remainder = total % count  # Spark's remainder has the sign of the dividend
    if isinstance(unit_type, LongType):
        truncated = F.call_function("div", total, count)  # integral division, toward zero
    else:
        truncated = ((total - remainder) / count).cast(unit_type)  # exact: a multiple of count
    away = F.when(F.abs(remainder) * 2 >= count, F.signum(total).cast(unit_type)).otherwise(F.lit(0).cast(unit_type))
    return F.when(count > 0, truncated + away)


@dataclass(frozen=True)
class LimitBounds:
    """A rule's limit in units: ``value OP limit`` is decided by ``floor`` and ``ceiling`` (equal when the limit
    has at most 6 decimals), or, for a limit beyond the unit type's range, by ``sign`` alone (the sign of
    ``value - limit`` for every representable value)."""

    floor: int
    ceiling: int
    sign: int | None = None


def limit_bounds(limit: Decimal, unit_type: DataType) -> LimitBounds:
    scaled = limit * UNITS_PER_ONE
    floor = int(scaled.to_integral_value(rounding=ROUND_FLOOR))
    ceiling = int(scaled.to_integral_value(rounding=ROUND_CEILING))
    top = _LONG_MAX if isinstance(unit_type, LongType) else _WIDE_MAX
    if ceiling > top:
        return LimitBounds(0, 0, -1)  # every value is below the limit
    if floor < -top:
        return LimitBounds(0, 0, 1)  # every value is above it
    return LimitBounds(floor, ceiling)


def limit_sign(units: Column, floor: Column, ceiling: Column, sign: Column) -> Column:
    """The sign of ``value - limit`` (an int column): 1 above the limit, -1 below, 0 equal."""
    compared = F.when(units > floor, F.lit(1)).when(units < ceiling, F.lit(-1)).otherwise(F.lit(0))
    return F.coalesce(sign, compared)


def is_overflow(error: BaseException) -> bool:
    """Whether a Spark failure is an arithmetic overflow (of the units, or anywhere in the batch)."""
    text = str(error)
    return any(condition in text for condition in _OVERFLOW_CONDITIONS)
