"""The alerts dashboard (notebook 03): Spark aggregates small frames (``aggregates``), matplotlib draws them
(``charts``). No alert or transaction row reaches the driver, only counts per bucket, key and latency bin."""
