"""The benchmark report's parts, one module per thing it reports (``pipelines.bench.summary`` puts them together)."""
