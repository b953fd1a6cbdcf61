"""Every table the product uses, and ``init_lakehouse`` that creates them idempotently.

Example::

    created = init_lakehouse(spark, settings)   # ['bronze_transactions', 'rules', ...] the first time, [] after
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import SparkSession

from delta_tables.alert_cooldown import ALERT_COOLDOWN
from delta_tables.alert_dispositions import ALERT_DISPOSITIONS
from delta_tables.alerts import ALERTS
from delta_tables.batch_log import BATCH_LOG
from delta_tables.bronze_transactions import bronze_spec
from delta_tables.bucket_state import BUCKET_STATE
from delta_tables.fraud_labels import FRAUD_LABELS
from delta_tables.quarantine import QUARANTINE
from delta_tables.rule_changes import RULE_CHANGES
from delta_tables.rule_states import RULE_STATES
from delta_tables.rules import RULES
from delta_tables.table_spec import TableSpec, create_table, file_retention
from pipelines.base.settings import Settings


def all_tables(settings: Settings) -> list[TableSpec]:
    return [
        bronze_spec(settings.transaction_schema),
        RULES,
        RULE_CHANGES,
        BUCKET_STATE,
        ALERTS,
        QUARANTINE,
        BATCH_LOG,
        RULE_STATES,
        ALERT_COOLDOWN,
        ALERT_DISPOSITIONS,
        FRAUD_LABELS,
    ]


def init_lakehouse(spark: SparkSession, settings: Settings) -> list[str]:
    """Create every missing table under the lakehouse root; return the names of those created.

    The tables are independent: they are created side by side (each is a driver-side commit; a fresh lakehouse
    takes ~0.9 s instead of ~1.3 s on 2 cores). Safe beside any other job or command creating the same tables at
    the same time, on a lakehouse in any state (``create_table``: a table another writer made first is checked
    and accepted, not created again); a table only this call created is in the list."""
    properties = file_retention(settings.maintenance.vacuum_retention_hours)
    specs = all_tables(settings)
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="fraudlake-init") as pool:
        created = pool.map(
            lambda spec: create_table(spark, spec, settings.table_path(spec.name), properties=properties), specs
        )
        return [spec.name for spec, new in zip(specs, list(created), strict=True) if new]
