"""The streaming engine: every transaction against every rule's lookback, from Delta bucket state, replay-safe.

Pure ``DataFrame -> DataFrame`` steps (``parse_transactions``, ``states``, ``buckets``, ``lookback``,
``evaluate``, ``cooldown``) composed by ``batch_handler`` (the ``foreachBatch`` function, which also does the
Delta writes) and started by ``job`` (``fraudlake run``). docs/engine.md explains the algorithm and contract.
"""
