"""Data moving between operators and into an application.

* :mod:`.bench_transfer`: tuples/s between two operators over each stream path (THREAD_LOCAL,
  CONTAINER_LOCAL, the buffer server), strings and Arrow batches, beside loopback TCP (run it);
* :mod:`.bench_bufferserver`: the buffer server alone, publisher process -> server -> subscriber
  process (run it);
* :mod:`.bench_receiver`: records/s from a TCP source through a SocketTextReceiver, with and
  without the WAL (run it).
"""
