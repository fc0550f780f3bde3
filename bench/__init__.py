"""stram's benchmarks, run on demand (never by the test suite), each from the repository root as
``python -m bench.<group>.<name> [options]``; ``bench/README.md`` has the table of them: what
each measures, its command and its latest figures.

* :mod:`bench.heartbeats`: the master under heartbeat load (the load harness, the state's CPU per
  heartbeat without gRPC, the umbilical's gRPC server alone);
* :mod:`bench.transfer`: tuples between operators (each stream path), the buffer server alone, a
  receiver with and without its WAL;
* :mod:`bench.peers`: the word count on stram beside a plain Python loop, Bytewax, PySpark and Flink SQL;
* :mod:`bench.kafka`: KafkaInput → KafkaOutput on a real broker, beside Spark Structured Streaming;
* :mod:`bench.spark`: the clickstream aggregation fed by stram beside Spark reading files;
* :mod:`bench.yarn`: submission and recovery on YARN beside the local launcher;
* :mod:`bench.startup`: where the time of a short local ``stram launch`` goes;
* :mod:`bench.recovery`: recovery time, checkpoint cost, and the chaos soak (faults at random,
  output checked exact);
* :mod:`bench.bench_ops`: the operators the benchmarks' applications run (containers import them
  as ``bench.bench_ops``).
"""
