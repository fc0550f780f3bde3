"""Spark fed by stram.

* :mod:`.bench_spark`: the clickstream aggregation fed through stram beside a plain Spark
  file-source job: sustained events/s and latency (run it).
"""
