"""Schema drift in the transactions: new fields appear, optional fields go missing; no batch fails for either.

Producers add fields before the conf's ``transaction_schema`` knows them, and stop sending optional ones. The
engine keeps every undeclared field, with its JSON type, in ``bronze.extraFields``; a missing or null optional
field is a null column (a grouping key of null, a filter leaf that is false); only a missing *required* field
quarantines the record. One micro-batch through the real handler shows all of it.
"""

from __future__ import annotations

import json
import time
from decimal import Decimal
from typing import Any

from engine_fixtures import make_rule, put_rules, raw_frame
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession
from reliability_support import record_outcome

from pipelines.base.settings import Settings
from pipelines.engine.batch_handler import BatchHandler

T0 = 1_700_006_400_000
CSH_ONLY = {"field": "paymentType", "op": "EQUAL", "value": "CSH"}
EXTRAS: dict[str, Any] = {
    "deviceFingerprint": "ab:cd",
    "riskScore": 0.75,
    "geo": {"lat": 52.5, "lon": 13.4, "tags": ["eu", 1, None, True]},
    "loyalty": None,
    "isVip": False,
}


def _tx(n: int, **fields: Any) -> dict[str, Any]:
    base = {
        "transactionId": f"d{n:02d}",
        "eventTime": T0 + n * 1000,
        "payerId": 7,
        "beneficiaryId": 9,
        "paymentAmount": Decimal("40.00"),
        "paymentType": "CSH",
    }
    return {k: v for k, v in (base | fields).items() if v is not ...}


def test_new_fields_are_kept_and_missing_optional_fields_do_not_fail_the_batch(
    spark: SparkSession, settings: Settings
) -> None:
    started = time.monotonic()
    fresh_lakehouse(spark, settings)
    put_rules(
        spark,
        settings,
        [
            make_rule(1, limit=100, windowMinutes=5),  # SUM per payerId
            make_rule(
                2, groupingKeyNames=[], limit=100, filter={"field": "paymentType", "op": "EQUAL", "value": "CSH"}
            ),
        ],
    )
    records = [
        _tx(0),
        _tx(1, **EXTRAS),  # new fields, of every JSON type
        _tx(2, payerId=..., beneficiaryId=..., paymentType=...),  # optional fields missing
        _tx(3, payerId=None, paymentType=None),  # optional fields null
        _tx(4, currency="EUR", country="DE", channel="web"),  # declared optional fields present
        _tx(5, **{"PaymentAmount": 1, "transactionid": "shadow"}),  # near-miss names are extras, not the fields
        _tx(6, paymentAmount=..., note="required field missing"),  # the one invalid record
    ]
    handler = BatchHandler(settings, app_id="engine-drift", report=lambda _line: None)
    counts = handler.process(raw_frame(spark, records), 0)
    assert counts["rows"] == 7 and counts["valid"] == 6 and counts["quarantined"] == 1

    bronze = {
        r["transactionId"]: r
        for r in spark.read.format("delta").load(settings.table_path("bronze_transactions")).collect()
    }
    assert sorted(bronze) == [f"d{n:02d}" for n in range(6)]
    assert json.loads(bronze["d01"]["extraFields"]) == EXTRAS  # kept with their JSON types
    assert json.loads(bronze["d05"]["extraFields"]) == {"PaymentAmount": 1, "transactionid": "shadow"}
    assert bronze["d00"]["extraFields"] is None and bronze["d02"]["extraFields"] is None
    assert bronze["d02"]["payerId"] is None and bronze["d02"]["paymentType"] is None
    assert (bronze["d04"]["currency"], bronze["d04"]["country"], bronze["d04"]["channel"]) == ("EUR", "DE", "web")
    quarantine = spark.read.format("delta").load(settings.table_path("quarantine")).collect()
    assert [q["reason"] for q in quarantine] == ["missing required field paymentAmount"]

    alerts = spark.read.format("delta").load(settings.table_path("alerts")).collect()
    by_rule = {(a["ruleId"], a["transactionId"]): a["keyValue"] for a in alerts}
    # Rule 1 (SUM per payer > 100): payer 7 passes 100 at its 3rd transaction (d04); the two payer-less ones
    # share the key [null] and stay at 80. Rule 2 (CSH only, global): d02/d03 have no paymentType, so do not count.
    assert by_rule == {(1, "d04"): "[7]", (1, "d05"): "[7]", (2, "d04"): "[]", (2, "d05"): "[]"}
    record_outcome(
        "schema drift: extra fields, missing/null optional fields",
        "bad input",
        records_in=counts["rows"],
        applied=len(bronze),
        quarantined=len(quarantine),
        outcome="batch succeeded; extras kept in extraFields; only the record without paymentAmount quarantined",
        seconds=time.monotonic() - started,
    )
