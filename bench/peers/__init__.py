"""The word count over Moby-Dick xN, on stram and beside other systems.

* :mod:`.bench_wordcount`: stram in one container and across containers beside a plain Python
  loop, optionally beside another checkout of stram (run it);
* :mod:`.bench_peers`: the same word count on Bytewax, PySpark and Flink SQL, each in its own venv
  (run it; ``--setup`` once).
"""
