"""Connectors: operators that read from and write to external systems (Kafka)."""
