"""Kafka in and out, on a broker of its own, beside Spark.

* :mod:`.bench_kafka`: KafkaInput -> a trivial operator -> KafkaOutput, per processing mode, beside
  the same pipeline in Spark Structured Streaming (run it);
* :mod:`.spark_kafka`: the Spark side, run by :mod:`.bench_kafka` in a process of its own, and the
  fetching of Spark's Kafka connector jars.
"""
