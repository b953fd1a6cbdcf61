"""The foundation: settings, the Spark session, the runtime environment, Kafka clients. Imports nothing above it."""
