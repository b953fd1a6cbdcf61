"""The analysts' console (``fraudlake console``): rules, live alerts with their evidence, health, backtests.

A FastAPI app rendering HTML on the server (Jinja2), a little JavaScript for the live parts and uPlot for charts.
It reads the lakehouse with the ``deltalake`` library (no Spark job per page view), falling back to one shared,
long-lived SparkSession for a table the library cannot read; writes rule edits where analysts' writes belong (the
rules database, else the rules topic); runs backtests on that shared SparkSession. See docs/console.md.
"""
