"""Failures: how fast stram recovers, what checkpoints cost, and whether the output stays right.

* :mod:`.bench_recovery`: recovery time after a container kill, and the checkpoint interval's
  cost in throughput (run it);
* :mod:`.chaos`: the chaos soak: seeded word counts under random kills, stops, master kills and a
  full disk, each run's output checked (run it);
* :mod:`.chaos_check`: the soak's input and the checks of its output, per processing mode.
"""
