"""Fuzzing the two parsers at the lakehouse's edge with hypothesis: Debezium rule events and raw transactions.

Bad input must never crash a stream. Every record ends up applied (or counted as a Kafka tombstone) or in the
quarantine with a one-line reason, and the counts add up: in = applied + quarantined, nothing lost, nothing twice.
The inputs: valid events and transactions mutated (fields dropped, retyped, added; unknown ops; huge values; deep
nesting; truncated text; non-UTF-8 bytes), arbitrary text, JSON of the wrong shape, and nesting thousands deep.

``FRAUDLAKE_FUZZ_EXAMPLES`` sets the number of examples of the pure-Python properties (default 150; the Spark
ones run a 75th of it, at least 2). ``make fuzz`` runs thousands, with payloads of megabytes.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_fixtures import make_rule, put_rules
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lakehouse_template import fresh_lakehouse
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from reliability_support import record_outcome
from rules_cdc_support import SAMPLES, rule_event

from pipelines.base.settings import Settings, load_settings
from pipelines.engine.batch_handler import BatchHandler
from pipelines.engine.parse_transactions import RAW_SCHEMA, flag_duplicates, parse_raw
from rules_cdc.apply_changes import apply_parsed, ensure_rules_tables
from rules_cdc.envelope import EnvelopeError, read_envelope
from rules_cdc.parse_events import MAX_REASON_CHARS, RawRecord, parse_records

FUZZ_ENV = "FRAUDLAKE_FUZZ_EXAMPLES"
EXAMPLES = int(os.environ.get(FUZZ_ENV, "150"))
SPARK_EXAMPLES = max(2, EXAMPLES // 75)
HUGE = 4_000_000 if EXAMPLES > 1000 else 100_000  # characters of a "huge" value
SCHEMA = load_settings().transaction_schema
T0 = 1_700_006_400_000
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
SPARK_FUZZ = settings(
    FUZZ,
    max_examples=SPARK_EXAMPLES,
    suppress_health_check=[*FUZZ.suppress_health_check, HealthCheck.function_scoped_fixture],
)
NEST, BIG = "@@nest@@", "@@huge@@"  # placeholders: json.dumps itself cannot write nesting thousands deep

VALID_EVENTS = [json.loads((SAMPLES / name).read_text()) for name in sorted(os.listdir(SAMPLES))] + [
    json.loads(rule_event(op, rule_id, T0 + rule_id, SCHEMA)) for op, rule_id in (("c", 7), ("u", 8), ("d", 9))
]
VALID_TRANSACTION = {
    "transactionId": "t",
    "eventTime": T0,
    "payerId": 1,
    "beneficiaryId": 2,
    "paymentAmount": 10.25,
    "paymentType": "CSH",
}

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=16)
json_values = st.recursive(
    json_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into nested dicts and lists."""
    found: list[tuple[Any, ...]] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        found.append((*prefix, key))
        found.extend(_paths(child, (*prefix, key)))
    return found


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        doc = doc[key]
    return doc


@st.composite
def mutated(draw: st.DrawFn, documents: list[dict[str, Any]]) -> str:
    """A valid document, damaged 1-3 times, then perhaps damaged as text too."""
    doc = copy.deepcopy(draw(st.sampled_from(documents)))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _parent(doc, path)
        how = draw(st.sampled_from(["drop", "retype", "add", "op", "nest", "huge"]))
        if how == "drop" and isinstance(parent, dict):
            del parent[path[-1]]
        elif how == "add" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=12))] = draw(json_values)
        elif how == "op":
            target = doc["payload"] if isinstance(doc.get("payload"), dict) else doc
            target["op"] = draw(st.sampled_from(["x", "C", "", "cu", "T", None, 1]) | st.text(max_size=3))
        elif how == "nest":
            parent[path[-1]] = NEST
        elif how == "huge":
            parent[path[-1]] = BIG
        else:
            parent[path[-1]] = draw(json_values)
    text = json.dumps(doc)
    depth = draw(st.integers(1, 5000))
    text = text.replace(f'"{NEST}"', "[" * depth + "]" * depth).replace(BIG, "x" * draw(st.integers(1, HUGE)))
    damage = draw(st.sampled_from(["none", "none", "truncate", "bytes"]))
    if damage == "truncate":
        text = text[: draw(st.integers(0, max(0, len(text) - 1)))]
    elif damage == "bytes":  # invalid UTF-8 arrives decoded with replacement characters (Spark's string cast)
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.binary(min_size=1, max_size=8)).decode("utf-8", "replace") + text[at:]
    return text


deep_nesting = st.integers(1, 20_000).map(lambda depth: "[" * depth + "]" * depth) | st.integers(1, 5000).map(
    lambda depth: '{"a":' * depth + "1" + "}" * depth
)

# What the parser must do with a generated value, decided from how it was generated (not by the parser's code):
ACCEPT, REJECT, TOMBSTONE, EITHER = "accept", "reject", "tombstone", "either"


def _expected_for_text(text: str) -> str:
    """Arbitrary text: blank or ``null`` is a tombstone, any JSON object may be an event; anything else is rejected."""
    if text.strip() in ("", "null"):
        return TOMBSTONE
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return REJECT
    return EITHER if isinstance(document, dict) else REJECT


def _expected_for_json(value: Any) -> str:
    """A JSON value of any shape: null is a tombstone, an object may be an event (``{"op": "t"}`` is one)."""
    return TOMBSTONE if value is None else EITHER if isinstance(value, dict) else REJECT


cdc_values = st.one_of(
    mutated(VALID_EVENTS).map(lambda text: (EITHER, text)),
    st.sampled_from([json.dumps(doc) for doc in VALID_EVENTS]).map(lambda text: (ACCEPT, text)),
    st.text(max_size=64).map(lambda text: (_expected_for_text(text), text)),
    json_values.map(lambda value: (_expected_for_json(value), json.dumps(value))),
    deep_nesting.map(lambda text: (REJECT, text)),  # an array, or an object with an unknown field
    st.none().map(lambda _: (TOMBSTONE, None)),
)


def _check_reasons(reasons: list[str]) -> None:
    for reason in reasons:
        assert reason and "\n" not in reason and len(reason) <= MAX_REASON_CHARS, reason[:200]


@FUZZ
@given(values=st.lists(cdc_values, max_size=12))
def test_the_cdc_parser_accounts_for_every_record(
    values: list[tuple[str, str | None]], tally: dict[str, Counter[str]]
) -> None:
    records = [RawRecord(value, f"fuzz:{n}") for n, (_, value) in enumerate(values)]
    batch = parse_records(records, SCHEMA)  # must not raise, whatever the input
    assert len(batch.events) + len(batch.rejected) + batch.kafka_tombstones == len(records) == batch.records
    seen = Counter([e.source_offset for e in batch.events] + [r.record.offset for r in batch.rejected])
    assert all(count == 1 for count in seen.values())
    # Each record went where its kind says: an untouched sample is an event, garbage is rejected (a silent
    # acceptance fails here), a null is a tombstone; a mutated sample may go either way.
    outcome = {e.source_offset: ACCEPT for e in batch.events} | {r.record.offset: REJECT for r in batch.rejected}
    for record, (expected, _) in zip(records, values, strict=True):
        got = outcome.get(record.offset, TOMBSTONE)
        allowed = {ACCEPT, REJECT, TOMBSTONE} if expected == EITHER else {expected}
        assert got in allowed, f"{record.offset}: {str(record.value)[:120]!r} was {got}, expected {expected}"
    _check_reasons([r.reason for r in batch.rejected])
    counts = tally.setdefault("Debezium rule events, parser only (parse_records)", Counter())
    applied = len(batch.events) + batch.kafka_tombstones
    counts.update(examples=1, **{"in": len(records), "applied": applied}, quarantined=len(batch.rejected))


@FUZZ
@given(value=st.binary(max_size=256) | st.text(max_size=64).map(lambda t: t.encode("utf-16")))
def test_envelope_bytes_that_are_not_utf8_are_rejected_with_a_reason(value: bytes) -> None:
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        with pytest.raises(EnvelopeError, match=r"^not UTF-8: ") as info:
            read_envelope(value)
        assert "\n" not in info.value.reason
        return
    # Valid UTF-8 bytes are read exactly as their text would be.
    try:
        as_text: Any = read_envelope(text)
    except EnvelopeError as error:
        as_text = error.reason
    try:
        as_bytes: Any = read_envelope(value)
    except EnvelopeError as error:
        as_bytes = error.reason
    assert as_bytes == as_text


@pytest.fixture(scope="module")
def tally() -> Iterator[dict[str, Counter[str]]]:
    """Totals over every example of a Spark property, recorded once for the reliability report."""
    totals: dict[str, Counter[str]] = {}
    started = time.monotonic()
    yield totals
    for scenario, counts in totals.items():
        record_outcome(
            scenario,
            "fuzz",
            records_in=counts["in"],
            applied=counts["applied"],
            quarantined=counts["quarantined"],
            lost=counts["lost"],
            duplicated=counts["duplicated"],
            outcome=f"no crash; {counts['examples']} hypothesis examples",
            seconds=time.monotonic() - started,
        )


_batch_ids = itertools.count()


@SPARK_FUZZ
@given(values=st.lists(cdc_values, min_size=1, max_size=15))
def test_bad_cdc_records_are_quarantined_with_their_reason_and_the_rest_applied(
    spark: SparkSession, base_settings: Settings, tally: dict[str, Counter[str]], values: list[tuple[str, str | None]]
) -> None:
    settings = base_settings.with_lakehouse(f"{base_settings.work_dir}/fuzz-cdc-lakehouse")
    ensure_rules_tables(spark, settings)
    batch_id = next(_batch_ids)
    records = [RawRecord(value, f"fuzz:{batch_id}:{n}") for n, (_, value) in enumerate(values)]
    parsed = parse_records(records, SCHEMA)
    result = apply_parsed(spark, settings, parsed, txn=("fuzz-cdc", batch_id))

    quarantine = (
        spark.read.format("delta")
        .load(settings.table_path("quarantine"))
        .where(F.col("batchId") == batch_id)
        .select("sourceOffset", "reason", "rawPayload")
        .collect()
    )
    assert len(quarantine) == result.quarantined
    _check_reasons([row["reason"] for row in quarantine])
    by_offset = {row["sourceOffset"]: row["rawPayload"] for row in quarantine}
    assert by_offset == {r.record.offset: r.record.value for r in parsed.rejected} | {
        e.source_offset: e.raw for e in parsed.events if e.source_offset in by_offset
    }
    accepted = {e.source_offset for e in parsed.events} - set(by_offset)
    lost = len(records) - parsed.kafka_tombstones - len(accepted) - len(by_offset)
    counts = tally.setdefault("Debezium rule events (apply_records, real Delta)", Counter())
    counts.update(
        examples=1,
        **{"in": len(records), "applied": len(records) - result.quarantined - lost},
        quarantined=result.quarantined,
        lost=lost,
        duplicated=len(quarantine) - len(by_offset),
    )
    assert lost == 0 and len(quarantine) == len(by_offset)
    must_reject = {r.offset for r, (expected, _) in zip(records, values, strict=True) if expected == REJECT}
    assert must_reject <= set(by_offset), sorted(must_reject - set(by_offset))


# ---- transactions --------------------------------------------------------------------------------------------


def _line_bytes(text: str | bytes) -> bytes:
    """One JSON-lines record as bytes, its own line breaks blanked (the file source splits on them)."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return raw.replace(b"\n", b" ").replace(b"\r", b" ")


# (what the parser must do, the line): only a mutated valid transaction may pass; random bytes, text, JSON of any
# shape (its keys are at most 8 characters, so never ``transactionId``) and deep nesting must be rejected.
transaction_lines = st.one_of(
    mutated([VALID_TRANSACTION]).map(lambda text: (EITHER, _line_bytes(text))),
    st.binary(max_size=64).map(lambda raw: (REJECT, _line_bytes(raw))),
    st.text(max_size=64).map(lambda text: (REJECT, _line_bytes(text))),
    json_values.map(lambda v: (REJECT, _line_bytes(json.dumps(v)))),
    deep_nesting.map(lambda text: (REJECT, _line_bytes(text))),
)


def _landed_file(folder: Path, lines: list[bytes], name: str) -> tuple[str, int]:
    """Write the lines as a landing file; return its path and how many records the file source will see."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return str(path), sum(1 for line in lines if line.strip(b" "))


def _raw_from_file(spark: SparkSession, path: str) -> DataFrame:
    """The file as the engine's files source reads it (text, non-blank lines), numbered for tracking."""
    lines = spark.read.text(path).where(F.trim("value") != "")
    return lines.select(
        F.col("value").alias("raw"),
        F.lit("files").alias("source"),
        F.concat(F.lit("file:"), F.col("_metadata.file_path"), F.lit(":"), F.monotonically_increasing_id()).alias(
            "sourceOffset"
        ),
        F.lit(None).cast("int").alias("kafkaPartition"),
        F.lit(None).cast("long").alias("kafkaOffset"),
        F.lit(None).cast("timestamp").alias("ingestedAt"),
    ).select(*[F.col(f.name).cast(f.dataType) for f in RAW_SCHEMA.fields])


@SPARK_FUZZ
@given(lines=st.lists(transaction_lines, min_size=1, max_size=30))
def test_the_transaction_parser_gives_every_bad_record_a_reason(
    spark: SparkSession,
    tmp_path_factory: pytest.TempPathFactory,
    tally: dict[str, Counter[str]],
    lines: list[tuple[str, bytes]],
) -> None:
    valid_ids = [f"ok-{n}" for n in range(3)]
    tagged = lines + [(ACCEPT, _line_bytes(json.dumps(VALID_TRANSACTION | {"transactionId": t}))) for t in valid_ids]
    path, expected = _landed_file(tmp_path_factory.mktemp("fuzz-tx"), [line for _, line in tagged], "fuzz")
    parsed = flag_duplicates(parse_raw(_raw_from_file(spark, path), SCHEMA))
    rows = parsed.select("sourceOffset", "transactionId", "eventTimeMs", "paymentAmount", "reason").collect()
    assert len(rows) == expected
    # One file is one partition: the offset's number is the line's place among the non-blank lines.
    kinds = [kind for kind, line in tagged if line.strip(b" ")]
    for row in rows:
        kind = kinds[int(row["sourceOffset"].rsplit(":", 1)[1])]
        if kind != EITHER:
            assert (row["reason"] is None) == (kind == ACCEPT), (kind, row["reason"], row["transactionId"])
    valid = [r for r in rows if r["reason"] is None]
    bad = [r for r in rows if r["reason"] is not None]
    assert {r["transactionId"] for r in valid} >= set(valid_ids)
    assert all(r["transactionId"] is not None and r["eventTimeMs"] is not None for r in valid)
    assert all(r["paymentAmount"] is not None for r in valid)
    assert len({r["transactionId"] for r in valid}) == len(valid)  # duplicates within a batch are quarantined
    _check_reasons([r["reason"] for r in bad])
    counts = tally.setdefault("transactions, parser only (parse_raw, real Spark)", Counter())
    counts.update(examples=1, **{"in": expected, "applied": len(valid)}, quarantined=len(bad))


HOSTILE_TRANSACTIONS: list[bytes] = [
    b"{garbage",
    b"\xff\xfe\x00\x01 not utf-8 \xc3\x28",
    b'{"transactionId":"u8","eventTime":1700006400000,"paymentAmount":1,"note":"\xff\xfe"}',
    b"null",
    b"[1,2,3]",
    b'"just a string"',
    b"[" * 10_000 + b"]" * 10_000,
    b'{"transactionId":"deep","eventTime":1700006400000,"paymentAmount":1,"x":' + b"[" * 500 + b"]" * 500 + b"}",
    b'{"transactionId":"huge","eventTime":1700006400000,"paymentAmount":1,"memo":"' + b"x" * 2_000_000 + b'"}',
    b'{"eventTime":1700006400000,"paymentAmount":1}',
    b'{"transactionId":"no-time","paymentAmount":1}',
    b'{"transactionId":"no-amount","eventTime":1700006400000}',
    b'{"transactionId":"bad-time","eventTime":"yesterday","paymentAmount":1}',
    b'{"transactionId":"big-time","eventTime":1e400,"paymentAmount":1}',
    b'{"transactionId":"bad-amount","eventTime":1700006400000,"paymentAmount":"ten"}',
    b'{"transactionId":"huge-amount","eventTime":1700006400000,"paymentAmount":1e400}',
    b'{"transactionId":"bad-payer","eventTime":1700006400000,"paymentAmount":1,"payerId":"abc"}',
    b'{"transactionId":["array-id"],"eventTime":1700006400000,"paymentAmount":1}',
    b'{"transactionId":{"o":1},"eventTime":1700006400000,"paymentAmount":1}',
    b'{"transactionId":"long-int","eventTime":1700006400000,"paymentAmount":' + b"9" * 5000 + b"}",
    b'{"transactionId":"dup","eventTime":1700006400000,"paymentAmount":1}',
    b'{"transactionId":"dup","eventTime":1700006400001,"paymentAmount":2}',
]
HOSTILE_VALID = {"u8", "deep", "huge", "dup"}  # accepted: invalid bytes in an extra field, deep/huge extras
VALID_LINES = [
    json.dumps(VALID_TRANSACTION | {"transactionId": f"v{n}", "eventTime": T0 + n * 1000, "paymentAmount": 60 + n})
    for n in range(5)
]
REASONS = (
    "unparseable: not a JSON object",
    "missing required field ",
    "field ",
    "duplicate transactionId in this batch",
)


def test_a_hostile_batch_through_the_engine_does_not_fail_and_adds_up(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    started = time.monotonic()
    fresh_lakehouse(spark, settings)
    put_rules(spark, settings, [make_rule(1, limit=100, windowMinutes=5)])
    lines = HOSTILE_TRANSACTIONS + [line.encode() for line in VALID_LINES]
    path, expected = _landed_file(tmp_path / "landing", lines, "hostile")
    handler = BatchHandler(settings, app_id="engine-fuzz", report=lambda _line: None)
    counts = handler.process(_raw_from_file(spark, path), 0)

    bronze = spark.read.format("delta").load(settings.table_path("bronze_transactions"))
    quarantine = spark.read.format("delta").load(settings.table_path("quarantine")).collect()
    bronze_ids = sorted(r["transactionId"] for r in bronze.select("transactionId").collect())
    assert counts["rows"] == expected == counts["valid"] + counts["quarantined"]
    assert bronze_ids == sorted(HOSTILE_VALID | {f"v{n}" for n in range(5)})
    assert len(quarantine) == counts["quarantined"] == expected - len(bronze_ids)
    assert all(q["reason"].startswith(REASONS) for q in quarantine), [q["reason"] for q in quarantine]
    reasons = Counter(q["reason"] for q in quarantine)
    assert reasons["field transactionId is not a string"] == 2  # an array or an object is not a string
    assert reasons["duplicate transactionId in this batch"] == 1
    extras = bronze.where(F.col("transactionId").isin("deep", "huge")).select("extraFields").collect()
    assert all(r["extraFields"] for r in extras)  # deep and huge extra fields are kept
    alerts = spark.read.format("delta").load(settings.table_path("alerts")).count()
    assert alerts == counts["alerts"] > 0  # the valid records were evaluated as usual
    record_outcome(
        "transactions, hostile batch through the engine (BatchHandler)",
        "bad input",
        records_in=expected,
        applied=len(bronze_ids),
        quarantined=len(quarantine),
        duplicated=len(bronze_ids) - len(set(bronze_ids)),
        outcome=f"batch succeeded; {counts['alerts']} alerts from the valid records",
        seconds=time.monotonic() - started,
    )
