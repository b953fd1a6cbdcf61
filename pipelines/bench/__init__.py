"""Benchmarks of the engine against a per-event baseline and Spark's sliding windows (``fraudlake bench``).

Modules: ``workload`` (synthetic transactions and rule sets, pure), ``engine_runs`` (our engine over a backlog
or at a fixed rate), ``per_event`` (every transaction kept, lookback recomputed each batch), ``sliding_window``
(Spark's ``window(eventTime, W, slide)`` + watermark), ``scenarios`` (what ``make bench`` measures) and
``report`` (``docs/benchmarks.md`` tables and PNG charts).

Example::

    fraudlake bench --quick          # ~20 minutes; `make bench` runs the full set (~60 minutes)
"""
