"""The local daemons a laptop or CI runs: Kafka broker, Kafka Connect + Debezium, Spark standalone cluster and the
rules database, with their ports and process handling."""
