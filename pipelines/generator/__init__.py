"""Synthetic transactions with injected fraud patterns, and the sinks that write them (landing files, Kafka)."""
