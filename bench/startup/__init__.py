"""Start-up and end of a short local application.

* :mod:`.bench_startup`: where the time of a short ``stram launch`` goes, step by step, optionally
  beside another checkout (run it).
"""
