"""Raw source records -> typed transactions, with a reason for every record that cannot be one.

Every source (Kafka, landing files, a Delta table) is first brought to RAW_SCHEMA: the record as a JSON text
plus where and when it arrived. ``parse_raw`` reads the JSON once, as ``map<string, variant>`` (numbers, strings
and nested values keep their JSON types), then takes each field declared in conf's ``transaction_schema``:

* ``eventTime``: epoch milliseconds (a JSON number or digit string) or an ISO-8601 string;
* other fields: ``try_variant_get`` to the declared type (``"12"`` is a valid long, ``"x"`` is not);
* undeclared fields are kept verbatim in ``extraFields`` (a JSON object string, null when there are none).

A record gets a ``reason`` (and later goes to quarantine) when it is not a JSON object, misses a required field
(conf ``required: true``: transactionId, eventTime, paymentAmount) or has a declared field of the wrong type.
Within one batch a repeated ``transactionId`` keeps its first copy (by eventTime, then source offset); the others
are quarantined as duplicates. Across batches, ids are not checked (see docs/engine.md).

Example::

    parsed = flag_duplicates(parse_raw(raw_frame, settings.transaction_schema))
    parsed.where("reason IS NULL")     # typed transactions; the rest -> quarantine_rows(...)
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

from delta_tables.quarantine import QUARANTINE_SCHEMA
from delta_tables.transaction_types import spark_type
from pipelines.base.column_memo import Projection, per_jvm
from pipelines.base.settings import TransactionField, TransactionSchema

RAW_SCHEMA = StructType(
    [
        StructField("raw", StringType(), True),
        StructField("source", StringType(), False),  # 'files' | 'kafka' | 'delta'
        StructField("sourceOffset", StringType(), True),  # 'file:/x.jsonl', 'kafka:topic/2/1043', 'delta:/path'
        StructField("kafkaPartition", IntegerType(), True),
        StructField("kafkaOffset", LongType(), True),
        StructField("ingestedAt", TimestampType(), True),  # null: the batch's start is used
    ]
)
RAW_COLUMNS = tuple(f.name for f in RAW_SCHEMA.fields)

# Epoch milliseconds of 0001-01-01 and 9999-12-31T23:59:59.999: what a timestamp can hold.
_MIN_MS, _MAX_MS = -62_135_596_800_000, 253_402_300_799_999


def _event_time(value: Column) -> Column:
    millis = F.try_variant_get(value, "$", "long")
    in_range = millis.between(_MIN_MS, _MAX_MS)
    iso = F.try_variant_get(value, "$", "timestamp")
    return F.when(millis.isNotNull(), F.when(in_range, F.timestamp_millis(millis))).otherwise(iso)


def _typed(field: TransactionField, value: Column) -> Column:
    if field.name == "eventTime":
        return _event_time(value)
    typed = F.try_variant_get(value, "$", spark_type(field.type).simpleString())
    if field.type == "string":
        # A variant array or object casts to its JSON text: ["t1"] would pass as the string '["t1"]'. Not a string.
        nested = F.try_variant_get(value, "$", "array<variant>").isNotNull()
        nested |= F.try_variant_get(value, "$", "map<string,variant>").isNotNull()
        return F.when(~nested, typed)
    return typed


def parse_raw(raw: DataFrame, schema: TransactionSchema) -> DataFrame:
    """Typed transaction columns + ``eventTimeMs``, ``extraFields`` and ``reason`` (null when valid), raw kept."""
    # Three projections, so that each field's map lookup and typed read run once per record: every later
    # expression refers to their columns (Spark does not merge projections that would repeat them).
    projections = _parse_projections(schema)
    frame = raw
    for projection in projections:
        frame = frame.select(*projection)
    return frame


@per_jvm
def _parse_projections(schema: TransactionSchema) -> tuple[Projection, ...]:
    """``parse_raw``'s four projections of a schema (built once per JVM: ``column_memo``)."""
    fields = schema.fields
    parsed: Projection = (*RAW_COLUMNS, F.from_json("raw", "map<string,variant>").alias("_m"))
    looked_up: Projection = (*RAW_COLUMNS, "_m", *[F.col("_m")[f.name].alias(f"_v{i}") for i, f in enumerate(fields)])
    typed_frame: Projection = (
        *RAW_COLUMNS,
        "_m",
        *[
            (F.col(f"_v{i}").isNotNull() & ~F.is_variant_null(F.col(f"_v{i}"))).alias(f"_p{i}")
            for i in range(len(fields))
        ],
        *[_typed(f, F.col(f"_v{i}")).alias(f"_t{i}") for i, f in enumerate(fields)],
    )
    present = {f.name: F.col(f"_p{i}") for i, f in enumerate(fields)}
    typed = {f.name: F.col(f"_t{i}") for i, f in enumerate(fields)}
    problems = [F.when(F.col("_m").isNull(), F.lit("unparseable: not a JSON object"))]
    for f in fields:
        if f.required:
            problems.append(F.when(~present[f.name], F.lit(f"missing required field {f.name}")))
    for f in fields:
        problems.append(F.when(present[f.name] & typed[f.name].isNull(), F.lit(f"field {f.name} is not a {f.type}")))
    names = [f.name for f in fields]
    extra = F.map_filter("_m", lambda k, _v: ~k.isin(*names))
    result: Projection = (
        *[typed[f.name].alias(f.name) for f in fields],
        F.unix_millis(typed["eventTime"]).alias("eventTimeMs"),
        F.when(F.size(extra) > 0, F.to_json(extra)).alias("extraFields"),
        F.coalesce(*problems).alias("reason"),
        *RAW_COLUMNS,
    )
    return parsed, looked_up, typed_frame, result


def flag_duplicates(parsed: DataFrame) -> DataFrame:
    """Give every copy of a valid transactionId after its first (eventTime, sourceOffset, raw) a reason."""
    # The hash first: the sort compares an 8-byte prefix of its first key, and ids often share a long prefix.
    first = Window.partitionBy(F.xxhash64("transactionId"), "transactionId").orderBy(
        F.col("reason").isNotNull(), "eventTimeMs", "sourceOffset", "raw"
    )
    repeat = F.col("reason").isNull() & (F.row_number().over(first) > 1)
    return parsed.withColumn(
        "reason", F.when(repeat, F.lit("duplicate transactionId in this batch")).otherwise(F.col("reason"))
    )


def as_column(value: int | Column, data_type: str = "long") -> Column:
    """A per-batch value as a column: a literal, or (the engine's hot path) a column of the batch's constants,
    which keeps the generated code the same from batch to batch (a literal number is compiled into the code)."""
    return value if isinstance(value, Column) else F.lit(value).cast(data_type)


def quarantine_rows(parsed: DataFrame, *, batch_id: int | Column, now: Column | None = None) -> DataFrame:
    """The invalid records as quarantine rows (QUARANTINE_SCHEMA), ``source = 'transactions'``."""
    identity = F.concat_ws("\u0001", "source", F.coalesce("sourceOffset", F.lit("")), F.coalesce("raw", F.lit("")))
    now = F.current_timestamp() if now is None else now
    frame = parsed.where(F.col("reason").isNotNull()).select(
        F.sha2(identity, 256).alias("quarantineId"),
        F.lit("transactions").alias("source"),
        F.col("sourceOffset"),
        F.col("raw").alias("rawPayload"),
        F.col("reason"),
        as_column(batch_id).alias("batchId"),
        now.alias("quarantinedAt"),
        F.to_date(now).alias("quarantineDate"),
    )
    return frame.select(*[F.col(f.name).cast(f.dataType) for f in QUARANTINE_SCHEMA.fields])


def bronze_rows(valid: DataFrame, schema: TransactionSchema, *, batch_id: int | Column, late: Column) -> DataFrame:
    """Valid transactions as bronze rows: typed fields, extras, arrival, batch and the ``isLate`` flag."""
    return valid.select(
        *schema.names(),
        "extraFields",
        F.to_date("eventTime").alias("eventDate"),
        "ingestedAt",
        "source",
        "sourceOffset",
        "kafkaPartition",
        "kafkaOffset",
        as_column(batch_id).alias("batchId"),
        late.alias("isLate"),
    )
