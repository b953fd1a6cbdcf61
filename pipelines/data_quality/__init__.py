"""Data-quality checks of the lakehouse with Great Expectations: suites, derived checks, runner, report.

Importing this package does not import GX; ``run``, ``suites`` and ``report`` do (GX is the ``dq`` extra).
"""
