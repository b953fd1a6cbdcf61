"""The alert oracle: ``tests/reference_evaluator.py``, the brute-force evaluator the engine's tests trust.

It lives with the tests and shares no code with the engine (only the rule model and filter grammar it
evaluates), which is what makes it an oracle; it is loaded here by its path rather than copied, so the
command and the suite check one contract.

Example::

    expected = reference_alerts([(rules, transactions)], bucket_seconds=60, allowed_lateness_seconds=300)
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping, Sequence
from decimal import Decimal
from types import ModuleType
from typing import Any

from pipelines.base.settings import REPO_ROOT
from rules_cdc.rule_model import Rule

ORACLE_PATH = REPO_ROOT / "tests" / "reference_evaluator.py"


def _oracle() -> ModuleType:
    """The reference evaluator module (imported once; the one pytest imported when it already did)."""
    loaded = sys.modules.get("reference_evaluator")
    if loaded is not None:
        return loaded
    if not ORACLE_PATH.is_file():
        raise FileNotFoundError(f"the reference evaluator {ORACLE_PATH} is missing (a checkout without tests/?)")
    spec = importlib.util.spec_from_file_location("reference_evaluator", ORACLE_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["reference_evaluator"] = module
    spec.loader.exec_module(module)
    return module


def reference_alerts(
    batches: Sequence[tuple[Sequence[Rule], Sequence[Mapping[str, Any]]]],
    *,
    bucket_seconds: int,
    allowed_lateness_seconds: int,
) -> dict[tuple[int, str], Decimal]:
    """(ruleId, transactionId) -> aggregate value of every alert the contract raises over these batches."""
    oracle = _oracle()
    ref_batches = [oracle.RefBatch(rules=list(rules), transactions=list(txs)) for rules, txs in batches]
    alerts = oracle.evaluate(
        ref_batches, bucket_seconds=bucket_seconds, allowed_lateness_seconds=allowed_lateness_seconds
    )
    return {(a.rule_id, a.transaction_id): a.aggregate_value for a in alerts}
