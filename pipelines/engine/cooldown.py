"""Rule cooldowns: per (rule, key), an alert within ``cooldownMinutes`` of the last *emitted* one is suppressed.

In precedence order an alert for ``x`` is suppressed iff ``x.t < t_a + C`` for the latest emitted alert ``t_a``
of its pair (earlier batches: the ``alert_cooldown`` table at the pinned version; this batch: the alerts emitted
before ``x``). A suppressed alert does not move ``t_a``. The scan is sequential, so it runs per (rule, key) as a
SQL ``aggregate`` over the pair's candidates of the batch sorted by (eventTime, transactionId): on the
executors, with no Python and nothing collected.

Example::

    alerts = apply_cooldown(candidates, spark.read.format("delta").load(cooldown_path))
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

_SCAN = """
aggregate(
  candidates,
  named_struct('last', lastAlertTimeMs, 'ids', cast(array() AS array<string>)),
  (acc, c) -> IF(acc.last IS NULL OR c.eventTimeMs >= acc.last + cooldownMs,
                 named_struct('last', c.eventTimeMs, 'ids', array_append(acc.ids, c.transactionId)),
                 acc)
).ids
"""


def apply_cooldown(candidates: DataFrame, memory: DataFrame) -> DataFrame:
    """The candidates that are emitted: all of rules without cooldown, the unsuppressed ones of the others.

    ``candidates`` has ruleId, keyValue, transactionId, eventTimeMs, cooldownMs; ``memory`` has ruleId, keyValue,
    lastAlertTimeMs (the ``alert_cooldown`` table).
    """
    # ``candidates`` is read twice: cache it (the caller's ``evaluate`` plan is not cheap to recompute).
    free = candidates.where(F.col("cooldownMs") <= 0)
    cooled = candidates.where(F.col("cooldownMs") > 0)
    pairs = (
        cooled.join(memory.select("ruleId", "keyValue", "lastAlertTimeMs"), ["ruleId", "keyValue"], "left")
        .groupBy("ruleId", "keyValue")
        .agg(
            F.first("cooldownMs").alias("cooldownMs"),
            F.first("lastAlertTimeMs").alias("lastAlertTimeMs"),
            F.array_sort(F.collect_list(F.struct("eventTimeMs", "transactionId"))).alias("candidates"),
        )
    )
    emitted = pairs.select("ruleId", F.explode(F.expr(_SCAN)).alias("transactionId"))
    return free.unionByName(cooled.join(emitted, ["ruleId", "transactionId"], "left_semi"))


def last_alert_times(alerts: DataFrame) -> DataFrame:
    """Per (ruleId, keyValue) the latest event time among emitted alerts: the next cooldown memory rows."""
    return alerts.groupBy("ruleId", "keyValue").agg(F.max("eventTimeMs").alias("lastAlertTimeMs"))
